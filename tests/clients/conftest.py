"""conftest: the `sched` fixture for tests that drive vramd with real third-party clients
(helpers in tests/scheduling/schedkit.py: simulated GPUs, simworker models, vramd).

sched: a schedkit.Harness for one test. The test ends with sched.finish() (ledger back to
resident reservations only, no OOM, clean exit, no sanitizer report, no worker left); at
teardown everything it started is killed and every GPU set it made is removed. A failing
test's report gets the tail of each of its daemons' logs.

Run: /usr/bin/python3 -m pytest tests/clients                        (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/clients  (after `make SAN=1`)
"""
import pytest

from scheduling.schedkit import Harness, check_binaries


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    harness = getattr(item, "_clients_harness", None)
    if report.failed and harness is not None:
        for vd in harness.daemons:
            report.sections.append((f"{vd.name} log ({vd.log_path}), last lines", vd.log_tail(80)))


@pytest.fixture
def sched(tmp_path, request):
    check_binaries()
    h = Harness(tmp_path)
    request.node._clients_harness = h
    yield h
    h.close()
