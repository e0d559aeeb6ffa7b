"""Where the binaries under test live: $VRAMD_BUILD (default "build", relative to the
repository root) holds bin/ (vramd, vramctl, simgpu, simworker), lib/libnvidia-ml-sim.so and
tests/ (nvml_probe)."""
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PYTHON = "/usr/bin/python3"


def build_dir():
    path = Path(os.environ.get("VRAMD_BUILD", "build"))
    return path if path.is_absolute() else REPO_ROOT / path


def shim_library():
    """The CUDA shim of the build under test (libvramd-cuda.so), as a string for env values."""
    return str(build_dir() / "lib" / "libvramd-cuda.so")


def binary(name):
    return build_dir() / "bin" / name


def vramd_binary():
    return binary("vramd")


def nvml_lib():
    return build_dir() / "lib" / "libnvidia-ml-sim.so"


def cuda_lib():
    """The simulated CUDA driver (checkpoint calls) for vramd's checkpoint tier."""
    return build_dir() / "lib" / "libcuda-sim.so"


def probe_bin():
    return build_dir() / "tests" / "nvml_probe"


def check_binaries(*paths):
    """Fail the test when a binary is missing; by default the ones a simulated-GPU daemon
    needs (vramd, simgpu, simworker, the NVML simulation)."""
    for path in paths or (binary("vramd"), binary("simgpu"), binary("simworker"), nvml_lib()):
        if not os.path.exists(path):
            pytest.fail(f"{path} is missing: build first (make, or make SAN=1 with "
                        f"VRAMD_BUILD=build-san)")
