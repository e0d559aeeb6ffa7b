"""tests/gpu: the CUDA shim (libvramd-cuda.so) in a real PyTorch worker on a real NVIDIA GPU:
the only test of the shim against the real driver and the real CUDA runtime (which reaches
the driver through cuGetProcAddress). Skips itself where there is no GPU (gpukit).

For each PyTorch allocator (the default caching allocator, expandable_segments:True, which
maps memory with cuMemCreate/cuMemMap, and the cudaMallocAsync backend, which uses the
driver's stream-ordered pools), with `cuda_shim: required`:
  - the worker starts with the shim attached;
  - after requests, the shim's live bytes match torch.cuda.memory_reserved() within 2 %, and
    NVML's bytes for the worker minus the shim's (its CUDA context) are positive and below
    2 GiB;
  - an allocation past what vramd can grant (capacity cut by gpu.headroom) is refused: the
    worker's torch raises torch.cuda.OutOfMemoryError (answered 500 "CUDA out of memory"),
    vramd counts the refusal, and the worker serves the next request.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))

from vramdkit import free_port, vramd_binary  # noqa: E402
from vramdkit.paths import build_dir  # noqa: E402
from gpukit import get, gpu0_total, gpu_bytes_of, post, torch_python  # noqa: E402

PY = torch_python() if gpu0_total() > 0 else None
pytestmark = pytest.mark.skipif(PY is None, reason="no NVIDIA GPU with NVML and PyTorch+CUDA on this machine")

GiB = 2**30


def wait(pred, timeout=300, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = pred()
            if v:
                return v
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def shim_of(base):
    for m in get(base + "/v1/status")["models"]:
        if m["name"] == "torch" and m.get("instances"):
            return m["instances"][0].get("shim"), m["instances"][0]
    return None, None


@pytest.fixture(params=["", "expandable_segments:True", "backend:cudaMallocAsync"])
def shim_vramd(request):
    tmp = tempfile.mkdtemp(prefix="vramd-shim-gpu-")
    port = free_port()
    total = gpu0_total()
    headroom = max(0, total - 12 * GiB)  # vramd may grant 12 GiB on this card, whatever its size
    conf = request.param
    env_line = f"env: {{ PYTORCH_CUDA_ALLOC_CONF: \"{conf}\" }}" if conf else ""
    cfg = f"""
listen: 127.0.0.1:{port}
state_dir: {tmp}/var
log: {{ format: json, level: debug }}
gpu: {{ nvml_library: libnvidia-ml.so.1, headroom: {headroom}, poll: 100ms }}
models:
  torch:
    route: /torch/
    cmd: [{PY}, {ROOT}/tests/gpu/torch_worker.py, --port, "{{port}}", --resident-mib, "1024"]
    {env_line}
    memory: {{ resident: 2GiB, per_request: 1GiB }}
    concurrency: 1
    startup_timeout: 5m
    cuda_shim: required
    grant_wait: 500ms
"""
    path = os.path.join(tmp, "vramd.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    log = open(os.path.join(tmp, "vramd.log"), "wb")
    env = dict(os.environ)
    env.pop("VRAMD_NVML_LIBRARY", None)
    env.pop("VRAMD_CUDA_LIBRARY", None)
    env["VRAMD_CUDA_SHIM_LIBRARY"] = str(build_dir() / "lib" / "libvramd-cuda.so")
    p = subprocess.Popen([str(vramd_binary()), "--config", path], stderr=log, env=env)
    base = f"http://127.0.0.1:{port}"
    wait(lambda: get(base + "/readyz").get("ready"), 60, "vramd ready")
    yield base, conf, tmp
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    log.close()
    with open(os.path.join(tmp, "vramd.log")) as f:
        print(f.read()[-4000:])


def test_pytorch_under_the_shim(shim_vramd):
    base, conf, _ = shim_vramd
    status, body = post(base + "/torch/generate", {"mib": 2048, "ms": 200})
    assert status == 200, body
    shim, inst = wait(lambda: shim_of(base)[0] and shim_of(base), 60, "the shim's status")
    assert shim["state"] == "attached", shim
    port = inst["port"]
    mem = get(f"http://127.0.0.1:{port}/memory")
    if conf:
        assert conf.split(":")[-1] in (mem["conf"] + mem["backend"]), mem
    live = shim["live_bytes"]
    assert abs(live - mem["reserved"]) <= 0.02 * mem["reserved"], (live, mem)
    context = gpu_bytes_of(inst["pid"]) - live
    assert 0 < context < 2 * GiB, (context, live, inst)
    # past what vramd can grant on this card (12 GiB booked at most): refused in this worker
    status, body = post(base + "/torch/generate", {"mib": 16 * 1024, "ms": 10})
    assert status == 500 and "out of memory" in body.lower(), (status, body[:500])
    shim, _ = shim_of(base)
    assert shim["refused"] >= 1, shim
    status, body = post(base + "/torch/generate", {"mib": 512, "ms": 50})
    assert status == 200, body
