"""tests/gpu: vramd in front of real PyTorch workers on a real NVIDIA GPU, through the
driver's NVML (the same code path the simulated library serves elsewhere).

Skips itself unless libnvidia-ml.so.1 loads, NVML reports a device, and a python3 with torch
and CUDA is found ($VRAMD_TORCH_PYTHON, else python3 on PATH).
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))  # the vramdkit package

from vramdkit import free_port, vramd_binary  # noqa: E402
from gpukit import get, gpu0_total, post, torch_python  # noqa: E402  (tests/gpu/gpukit.py)


def gpu_present():
    return gpu0_total() > 0


PY = torch_python() if gpu_present() else None
pytestmark = pytest.mark.skipif(PY is None, reason="no NVIDIA GPU with NVML and PyTorch+CUDA on this machine")


@pytest.fixture
def vramd():
    tmp = tempfile.mkdtemp(prefix="vramd-gpu-")
    port = free_port()
    # the card's real size decides what fits: each request asks for a quarter of the card;
    # declared per request: that quarter plus 512 MiB of CUDA workspace, then learned
    per_request_mib = int(gpu0_total() / 4 / 2**20) + 512
    cfg = f"""
listen: 127.0.0.1:{port}
state_dir: {tmp}/var
log: {{ format: json, level: info }}
gpu: {{ nvml_library: libnvidia-ml.so.1, headroom: 1GiB, poll: 100ms }}
models:
  torch:
    route: /torch/
    cmd: [{PY}, {ROOT}/tests/gpu/torch_worker.py, --port, "{{port}}", --resident-mib, "1024"]
    memory: {{ resident: 2GiB, per_request: {per_request_mib}MiB, learn: true }}
    concurrency: 8
    startup_timeout: 5m
    clear_cache: {{ method: POST, path: /clear_cache/ }}
"""
    path = os.path.join(tmp, "vramd.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    log = open(os.path.join(tmp, "vramd.log"), "wb")
    env = dict(os.environ)
    env.pop("VRAMD_NVML_LIBRARY", None)
    p = subprocess.Popen([str(vramd_binary()), "--config", path], stderr=log, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if get(base + "/readyz").get("ready"):
                break
        except OSError:
            time.sleep(0.1)
    yield base, tmp
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0


def test_status_reads_the_real_gpu_through_nvml(vramd):
    """/v1/status shows the real card: its name, total memory and NVML usage."""
    base, _ = vramd
    st = get(base + "/v1/status")
    assert st["nvml"]["ok"], st["nvml"]
    g = st["gpus"][0]
    assert g["total"] > 1 << 30 and g["name"]
    assert g["capacity"] <= g["total"] - g["headroom"]


def test_concurrent_requests_fit_and_ledger_returns(vramd):
    """Eight concurrent requests of a quarter of the card each: vramd admits only what fits,
    all succeed with no CUDA OOM, and the ledger ends at resident reservations only."""
    base, tmp = vramd
    total = get(base + "/v1/status")["gpus"][0]["total"]
    mib = int(total / 4 / 2**20)
    results = []

    def one():
        results.append(post(base + "/torch/generate", {"mib": mib, "ms": 500}))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0] for r in results] == [200] * 8, results
    for _ in range(50):
        g = get(base + "/v1/status")["gpus"][0]
        if g["reserved_requests"] == 0:
            break
        time.sleep(0.1)
    assert g["reserved_requests"] == 0 and g["reserved"] == g["reserved_resident"], g
    with open(os.path.join(tmp, "vramd.log"), errors="replace") as f:
        assert "out of memory" not in f.read().lower()
