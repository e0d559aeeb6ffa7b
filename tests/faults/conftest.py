"""conftest: the `faults` fixture for vramd's fault tests (helpers in faultkit.py and the
shared kit, tests/lib/vramdkit).

faults: a faultkit.FaultHarness for one test. A case ends with faults.check_clean(vd, base)
(ledger, zombies, leaked processes, descriptors) and faults.finish() (clean SIGTERM exit,
no sanitizer report, no log_format_error, no worker left alive); at teardown everything the
test started is killed and every simulated GPU set it made is removed. A failing test's
report gets the tail of each of its daemons' logs (vramdkit.report).

Run: /usr/bin/python3 -m pytest tests/faults                       (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/faults (after `make SAN=1`)
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)

from .faultkit import faults  # noqa: E402,F401  (fixture)
