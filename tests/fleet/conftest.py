"""conftest: the fleet tests (several vramd hosts behind HAProxy, SPEC section 7; issue 14).

sched: the shared kit's Harness (tests/lib/vramdkit/harness.py) for the single-host agent
tests; fleetkit.py adds the agent-check client and the network-namespace fleet used by
test_haproxy.py. A failing test's report gets the tail of each of its daemons' logs.
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
