"""conftest: the `sim` fixture for tests/sim (helpers live in simkit.py).

sim: a simkit.Sim for one test; at teardown every `simgpu alloc` holder it started is
SIGKILLed and reaped and every set it created is removed.
"""
import pytest

from .simkit import Sim, check_binaries


@pytest.fixture
def sim():
    check_binaries()
    s = Sim()
    yield s
    s.close()
