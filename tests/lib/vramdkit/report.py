"""The failure-report hook: a failing test's report gets the tail of the log of every daemon
tracked on its node or on a parent node (a module-scoped daemon hangs on the module node).

A suite's conftest.py imports pytest_runtest_makereport from here (pytest applies a
conftest's hooks to the tests under its directory); fixtures call track(node, daemons)."""
import pytest


def track(node, daemons):
    """Report the logs of daemons (a list, which may still grow) for tests under node."""
    node._vramd_daemons = daemons


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        node = item
        while node is not None:
            for vd in getattr(node, "_vramd_daemons", []):
                report.sections.append((f"{vd.name} log ({vd.log_path}), last lines",
                                        vd.log_tail(120)))
            node = node.parent
