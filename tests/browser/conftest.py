"""conftest: fixtures for the browser tests of vramd's live status page (GET /).

sched: the scheduling tests' harness (tests/scheduling/schedkit.py): simulated GPU sets,
vramd with simworker models, `simgpu alloc` holders; everything killed and removed at
teardown, and a failing test's report gets the tail of each daemon's log.
"""
import pytest

from scheduling.schedkit import Harness, check_binaries


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    harness = getattr(item, "_browser_harness", None)
    if report.failed and harness is not None:
        for vd in harness.daemons:
            report.sections.append((f"{vd.name} log ({vd.log_path}), last lines", vd.log_tail(80)))


@pytest.fixture
def sched(tmp_path, request):
    check_binaries()
    h = Harness(tmp_path)
    request.node._browser_harness = h
    yield h
    h.close()
