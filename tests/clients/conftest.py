"""conftest: the `sched` fixture for tests that drive vramd with real third-party clients,
taken from the shared kit (tests/lib/vramdkit/harness.py: simulated GPUs, simworker models,
vramd).

sched: a vramdkit Harness for one test. The test ends with sched.finish() (ledger back to
resident reservations only, no OOM, clean exit, no sanitizer report, no worker left); at
teardown everything it started is killed and every GPU set it made is removed. A failing
test's report gets the tail of each of its daemons' logs.

Run: /usr/bin/python3 -m pytest tests/clients                        (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/clients  (after `make SAN=1`)
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
