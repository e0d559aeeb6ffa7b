"""conftest: tests against real model servers (tests/real/), found under
../shared/realservers/ relative to the repository root (or $VRAMD_REALSERVERS), each test
skipped, naming the missing path, where the server is not there (a user's machine).

sched: the shared kit's Harness (tests/lib/vramdkit/harness.py) for one test: simulated GPU
sets, vramd started on one, everything killed and removed at teardown; a failing test's report
gets its daemons' log tails (vramdkit.report).
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
