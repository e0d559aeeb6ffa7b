"""tests/gpu: the shim park tier (issue 25; docs/shim.md "Parking through the shim") with a real
PyTorch worker on a real NVIDIA GPU. Skips itself where there is no GPU (gpukit).

A worker with a 1 GiB resident tensor of random bytes (tests/gpu/torch_worker.py
--random-fill), `cuda_shim: required`, `shim_park: true`, PyTorch's default caching
allocator: after a request, an admin unload parks it through the shim (tier `shim_parked`,
NVML shows the worker holding less than its context's 2 GiB bound: the tensor left the GPU),
the next request restores it into the same pid, and the tensor's checksums (computed on the
GPU) are what they were. The rates are bench/checkpoint/shim_gpu.py's.
"""
import os
import signal
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))

from vramdkit import free_port, vramd_binary, wait_for  # noqa: E402
from vramdkit.paths import shim_library  # noqa: E402
from gpukit import get, gpu0_total, gpu_bytes_of, post, torch_python  # noqa: E402

PY = torch_python() if gpu0_total() > 0 else None
pytestmark = pytest.mark.skipif(PY is None, reason="no NVIDIA GPU with NVML and PyTorch+CUDA on this machine")

GiB = 2**30


def wait(pred, timeout=300, what="condition"):
    return wait_for(pred, timeout=timeout, interval=0.2, what=what)  # OSError counts as "not yet"


def instance(base):
    for m in get(base + "/v1/status")["models"]:
        if m["name"] == "torch" and m.get("instances"):
            return m["instances"][0]
    return None


def test_pytorch_worker_parked_by_the_shim_keeps_its_tensors():
    tmp = tempfile.mkdtemp(prefix="vramd-shim-park-gpu-")
    port = free_port()
    cfg = f"""
listen: 127.0.0.1:{port}
state_dir: {tmp}/var
log: {{ format: json, level: debug }}
gpu: {{ nvml_library: libnvidia-ml.so.1, poll: 100ms }}
host_memory: {{ budget: 8GiB, reserve: 1GiB }}
models:
  torch:
    route: /torch/
    cmd: [{PY}, {ROOT}/tests/gpu/torch_worker.py, --port, "{{port}}", --resident-mib, "1024", --random-fill]
    memory: {{ resident: 3GiB, per_request: 1GiB }}
    concurrency: 1
    startup_timeout: 5m
    cuda_shim: required
    shim_park: true
"""
    path = os.path.join(tmp, "vramd.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    env = dict(os.environ)
    env.pop("VRAMD_NVML_LIBRARY", None)
    env.pop("VRAMD_CUDA_LIBRARY", None)
    env["VRAMD_CUDA_SHIM_LIBRARY"] = shim_library()
    log = open(os.path.join(tmp, "vramd.log"), "wb")
    p = subprocess.Popen([str(vramd_binary()), "--config", path], stderr=log, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: get(base + "/readyz").get("ready"), 60, "vramd ready")
        status, body = post(base + "/torch/generate", {"mib": 512, "ms": 100})
        assert status == 200, body
        inst = wait(lambda: instance(base), 60, "the instance")
        pid, wport = inst["pid"], inst["port"]
        before = get(f"http://127.0.0.1:{wport}/checksum")
        held = gpu_bytes_of(pid)
        assert held >= GiB, held

        status, body = post(base + "/v1/models/torch/unload", {})
        assert status == 200, body
        inst = instance(base)
        assert inst["state"] == "parked" and inst["tier"] == "shim_parked" and inst["pid"] == pid, inst
        assert inst["shim"]["parked_bytes"] >= GiB, inst["shim"]
        assert gpu_bytes_of(pid) < held - GiB + 64 * 2**20, (gpu_bytes_of(pid), held)  # the tensor left

        status, body = post(base + "/torch/generate", {"mib": 512, "ms": 100})
        assert status == 200, body
        inst = instance(base)
        assert inst["pid"] == pid and inst["state"] == "ready", inst
        after = get(f"http://127.0.0.1:{wport}/checksum")
        assert after["sum"] == before["sum"] and after["weighted"] == before["weighted"], (before, after)
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        log.close()
        with open(os.path.join(tmp, "vramd.log")) as f:
            print(f.read()[-4000:])
    assert rc == 0
