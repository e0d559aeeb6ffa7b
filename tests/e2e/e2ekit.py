"""e2ekit: helpers shared by the e2e files that check pipelining, large status bodies, the
GPU header and gpu.* reloads, and a client reset during a chunked answer.

  - assert_alive(vd, what): vramd still runs and answers /healthz, else the test fails with
    its exit status;
  - external_model(port): a url: model nobody is ever sent to;
  - simgpu: a fixture creating a simulated set of 2 GPUs x 8 GiB (removed at teardown), with
    gpu_section(), sim_model() and wait_nvml() for configs that use it through
    gpu.nvml_library (the e2e launcher clears VRAMD_NVML_LIBRARY).
"""
import os
import secrets
import subprocess

import pytest

from vramdkit.net import PeerClosed, Reply as Resp, http_request
from vramdkit.paths import vramd_binary
from vramdkit.waits import wait_for


BUILD_DIR = vramd_binary().parent.parent
SIMGPU = BUILD_DIR / "bin" / "simgpu"
SIMWORKER = BUILD_DIR / "bin" / "simworker"
NVML_SIM = BUILD_DIR / "lib" / "libnvidia-ml-sim.so"
TIMESCALE = "0.05"


def assert_alive(vd, what):
    """vramd is still running and answers /healthz with 200 on a new connection; otherwise
    fail with its exit status (-11: killed by SIGSEGV)."""
    try:
        r = http_request(vd.port, "GET", "/healthz", timeout=10)
    except (OSError, PeerClosed) as e:
        r = e
    if isinstance(r, Resp) and r.status == 200 and vd.proc.poll() is None:
        return
    try:
        code = vd.proc.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    if code is None:
        pytest.fail(f"vramd is running {what} but /healthz answered {r!r}")
    sig = f" (killed by signal {-code})" if code < 0 else ""
    pytest.fail(f"vramd died {what}: exit status {code}{sig}")


def external_model(port, name="m"):
    """A url: model on a port nobody listens on (no process; health checks 1 h apart, so
    it stays ready and nothing is ever sent to it in these tests)."""
    return {"route": f"/{name}/", "url": f"http://127.0.0.1:{port}",
            "health": {"interval": "1h", "timeout": "1s", "failures": 1000}}


# --- simulated GPU ---------------------------------------------------------------------

@pytest.fixture
def simgpu(monkeypatch):
    """A simulated set of 2 GPUs x 8 GiB; SIMGPU and SIMGPU_TIMESCALE are set in this test's
    environment (the launcher passes it to vramd, vramd to its workers). Yields the set's
    name; removes it at teardown."""
    for path in (SIMGPU, SIMWORKER, NVML_SIM):
        if not path.exists():
            pytest.fail(f"{path} is missing: build first (make)")
    name = f"e2esim.{os.getpid()}.{secrets.token_hex(3)}"
    env = dict(os.environ, SIMGPU=name, SIMGPU_TIMESCALE=TIMESCALE)
    p = subprocess.run([str(SIMGPU), "create", name, "--gpus", "2", "--memory", "8GiB"],
                       capture_output=True, text=True, env=env, timeout=30)
    if p.returncode != 0:
        pytest.fail(f"simgpu create failed: {p.stdout} {p.stderr}")
    monkeypatch.setenv("SIMGPU", name)
    monkeypatch.setenv("SIMGPU_TIMESCALE", TIMESCALE)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield name
    finally:
        subprocess.run([str(SIMGPU), "rm", name], capture_output=True, env=env, timeout=30)


def gpu_section(**over):
    g = {"nvml_library": str(NVML_SIM), "devices": "all", "poll": "100ms", "headroom": "128MiB"}
    g.update(over)
    return g


def sim_model(vramd, name, **overrides):
    """A supervised simworker on the simulated GPU answering /generate with 1 KiB of JSON."""
    m = {
        "route": f"/{name}/",
        "cmd": [str(SIMWORKER), "--port", "{port}", "--name", f"{name}@{vramd.tag}",
                "--context", "64MiB", "--resident", "256MiB", "--per-request", "128MiB",
                "--output", "json", "--output-size", "1KiB", "--run-time", "0.1s"],
        "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
        "startup_timeout": "30s",
        "stop_timeout": "2s",
        "memory": {"resident": "512MiB", "per_request": "256MiB"},
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30s",
        "keep_alive": "10m",
    }
    m.update(overrides)
    return m


def wait_nvml(vd, gpus=2):
    def ok():
        st = vd.status()
        return st["nvml"]["ok"] and len(st["gpus"]) == gpus
    wait_for(ok, timeout=20, what="vramd reading the simulated GPUs through NVML")
