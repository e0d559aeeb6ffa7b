"""gpukit: what tests/gpu's files share: the real NVML (libnvidia-ml.so.1) read through
ctypes, the python3 that has PyTorch with CUDA, and GET/POST to vramd. Every reader answers "nothing" (0, None)
where there is no usable NVIDIA GPU, so that the tests can skip themselves."""
import ctypes
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request


def get(url, timeout=60):
    """GET url; its JSON answer."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def post(url, body, timeout=300):
    """POST body (JSON) to url; (status, answer text), also for an error status."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class NvmlProcess(ctypes.Structure):  # nvmlProcessInfo_v2_t (the _v3 call's record)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def nvml():
    """NVML, initialised (the caller calls nvmlShutdown), or None."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return lib if lib.nvmlInit_v2() == 0 else None


def gpu0_total():
    """Total memory of NVML device 0 in bytes, or 0 when there is no usable NVIDIA GPU."""
    lib = nvml()
    if lib is None:
        return 0
    total = 0
    count = ctypes.c_uint(0)
    handle = ctypes.c_void_p()
    mem = NvmlMemory()
    if (lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value > 0 and
            lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0 and
            lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0):
        total = mem.total
    lib.nvmlShutdown()
    return total


def gpu_bytes_of(pid):
    """What NVML says pid holds on any device (0 when it is not listed)."""
    lib = nvml()
    assert lib is not None
    total = 0
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    for i in range(count.value):
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
            continue
        n = ctypes.c_uint(64)
        procs = (NvmlProcess * 64)()
        if lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(n), procs) != 0:
            continue
        total += sum(procs[k].usedGpuMemory for k in range(n.value) if procs[k].pid == pid)
    lib.nvmlShutdown()
    return total


def torch_python():
    """A python3 whose torch sees CUDA ($VRAMD_TORCH_PYTHON, python3 on PATH, Debian's), or None."""
    for py in filter(None, [os.environ.get("VRAMD_TORCH_PYTHON"), shutil.which("python3"), "/usr/bin/python3"]):
        try:
            out = subprocess.run([py, "-c", "import torch; print(torch.cuda.is_available())"],
                                 capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return py
    return None
