"""conftest: fixtures for the browser tests of vramd's live status page (GET /).

sched: the scheduling tests' harness and fixture (tests/scheduling/conftest.py, schedkit.py):
simulated GPU sets, vramd with simworker models, `simgpu alloc` holders; everything killed
and removed at teardown, and a failing test's report gets the tail of each daemon's log.
"""
from scheduling.conftest import pytest_runtest_makereport, sched  # noqa: F401
