"""conftest: the `faults` fixture for vramd's fault tests (helpers in faultkit.py).

faults: a faultkit.FaultHarness for one test. A case ends with faults.check_clean(vd, base)
(ledger, zombies, leaked processes, descriptors) and faults.finish() (clean SIGTERM exit,
no sanitizer report, no log_format_error, no worker left alive); at teardown everything the
test started is killed and every simulated GPU set it made is removed. A failing test's
report gets the tail of each of its daemons' logs.

Run: /usr/bin/python3 -m pytest tests/faults                       (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/faults (after `make SAN=1`)
"""
import pytest

from scheduling.schedkit import check_binaries

from .faultkit import FaultHarness


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    harness = getattr(item, "_faults_harness", None)
    if report.failed and harness is not None:
        for vd in harness.daemons:
            report.sections.append((f"{vd.name} log ({vd.log_path}), last lines", vd.log_tail(80)))


@pytest.fixture
def faults(tmp_path, request):
    check_binaries()
    h = FaultHarness(tmp_path)
    request.node._faults_harness = h
    yield h
    h.close()
