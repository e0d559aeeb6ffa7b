"""The driver's per-cgroup limit on a real GPU (nvmlDeviceSetMemoryLimits_v1, driver r615+):
does it hold a plain (non-MPS) PyTorch process, as vramd's driver limits assume
(docs/shim.md, "The driver's limits")? NVIDIA documents the calls for "the cgroup partition"
and MPS memory partitioning; this is the check the first r615 GPU lent must run.

A cgroup v2 directory gets a hard limit of 2 GiB on device 0; a PyTorch process that joined
it must see the limit as cuMemGetInfo's total, allocate 1 GiB, and get
torch.cuda.OutOfMemoryError for 3 GiB more; the limit is then cleared and the directory
removed. Skips itself without a GPU, without the calls (drivers before r615), without PyTorch,
or where no cgroup v2 directory can be made (not root).
"""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpukit import gpu0_total, nvml, torch_python  # noqa: E402

GiB = 1024 ** 3
NONE = 0xFFFFFFFFFFFFFFFF


class SetLimits(ctypes.Structure):  # nvmlSetMemoryLimits_v1_t
    _fields_ = [("nameSpace", ctypes.c_char_p), ("softLimit", ctypes.c_ulonglong), ("hardLimit", ctypes.c_ulonglong)]


def cgroup2_root():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split(" - ")[1].split()[0] == "cgroup2":
                return line.split()[4]
    return None


CHILD = r"""
import os, sys, torch
with open(sys.argv[1] + "/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
free, total = torch.cuda.mem_get_info(0)
print("total", total, flush=True)
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    print("allocated past the limit", flush=True)
except torch.cuda.OutOfMemoryError:
    print("oom", flush=True)
"""


def test_driver_limit_holds_a_plain_pytorch_process(tmp_path):
    if not gpu0_total():
        pytest.skip("no NVIDIA GPU")
    lib = nvml()
    if lib is None or not hasattr(lib, "nvmlDeviceSetMemoryLimits_v1"):
        pytest.skip("this driver has no nvmlDeviceSetMemoryLimits_v1 (r615+)")
    py = torch_python()
    if not py:
        pytest.skip("no PyTorch with CUDA")
    root = cgroup2_root()
    if not root:
        pytest.skip("no cgroup v2 hierarchy")
    cg = Path(root) / f"vramd-gpu-limit-{os.getpid()}"
    try:
        cg.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a cgroup v2 directory: {e}")
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    try:
        rc = lib.nvmlDeviceSetMemoryLimits_v1(handle, ctypes.byref(SetLimits(str(cg).encode(), 0, 2 * GiB)))
        if rc != 0:
            pytest.skip(f"nvmlDeviceSetMemoryLimits_v1 answered {rc}")
        out = subprocess.run([py, "-c", CHILD, str(cg)], capture_output=True, text=True, timeout=300)
        print(out.stdout, out.stderr[-2000:])
        lines = out.stdout.split("\n")
        total = int(next(x for x in lines if x.startswith("total")).split()[1])
        assert total == 2 * GiB, f"cuMemGetInfo's total under a 2 GiB limit: {total}"
        assert "oom" in lines, "a plain process allocated past its cgroup's limit"
    finally:
        lib.nvmlDeviceSetMemoryLimits_v1(handle, ctypes.byref(SetLimits(str(cg).encode(), 0, NONE)))
        lib.nvmlShutdown()
        cg.rmdir()
