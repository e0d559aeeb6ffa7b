"""conftest: the `sim` fixture for tests/sim (helpers live in simkit.py and the shared kit,
tests/lib/vramdkit).

sim: a simkit.Sim for one test; at teardown every `simgpu alloc` holder it started is
SIGKILLed and reaped and every set it created is removed.
"""
import sys
from pathlib import Path

import pytest

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit import check_binaries, nvml_lib, probe_bin  # noqa: E402

from .simkit import Sim, simgpu_bin  # noqa: E402


@pytest.fixture
def sim():
    check_binaries(simgpu_bin(), nvml_lib(), probe_bin())
    s = Sim()
    yield s
    s.close()
