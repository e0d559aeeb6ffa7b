"""conftest: the `sched` fixture for vramd's memory-aware scheduling tests (the shared kit's
harness, tests/lib/vramdkit/harness.py; what these tests add is in schedkit.py).

sched: a vramdkit Harness for one test. The test ends with sched.finish() (ledger back to
resident reservations only, no OOM, clean exit, no sanitizer report, no worker left); at
teardown everything it started is killed and every GPU set it made is removed. A failing
test's report gets the tail of each of its daemons' logs (vramdkit.report).
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
