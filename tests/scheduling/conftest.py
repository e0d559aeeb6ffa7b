"""conftest: the `sched` fixture for vramd's memory-aware scheduling tests (helpers in
schedkit.py).

sched: a schedkit.Harness for one test. The test ends with sched.finish() (ledger back to
resident reservations only, no OOM, clean exit, no sanitizer report, no worker left); at
teardown everything it started is killed and every GPU set it made is removed. A failing
test's report gets the tail of each of its daemons' logs.
"""
import pytest

from .schedkit import Harness, check_binaries


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    harness = getattr(item, "_sched_harness", None)
    if report.failed and harness is not None:
        for vd in harness.daemons:
            report.sections.append((f"{vd.name} log ({vd.log_path}), last lines", vd.log_tail(80)))


@pytest.fixture
def sched(tmp_path, request):
    check_binaries()
    h = Harness(tmp_path)
    request.node._sched_harness = h
    yield h
    h.close()
