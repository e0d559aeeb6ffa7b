"""tests/gpu: a real PyTorch worker parked into host memory and restored through the real
CUDA driver's checkpoint calls, by vramd's own interface (src/gpu/cuda.c, driven by
build/bin/simcuda-checkpoint with VRAMD_CUDA_LIBRARY=libcuda.so.1: the code path that answers
from libcuda-sim.so elsewhere). Prints the measured checkpoint and restore rates in GB/s.

Skips itself unless: NVML reports a device, its driver is 550 or later, libcuda.so.1 has the
checkpoint driver API (cuCheckpointProcess*: driver 570+, CUDA 12.8), and a python3 with
torch and CUDA is found ($VRAMD_TORCH_PYTHON, else python3 on PATH).

Run alone: VRAMD_BUILD=build /usr/bin/python3 -m pytest -s tests/gpu/test_checkpoint_gpu.py
"""
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))  # the vramdkit package

from vramdkit import binary, free_port  # noqa: E402
from gpukit import gpu0_total, gpu_bytes_of, nvml, torch_python  # noqa: E402  (tests/gpu/gpukit.py)

RESIDENT_MIB = 4096  # the "model": 4 GiB of weights on the card
HTTP_TIMEOUT = 300


def driver_major():
    """The display driver's major version (550, 570, ...), 0 when there is no usable GPU."""
    lib = nvml()
    if lib is None:
        return 0
    count = ctypes.c_uint(0)
    buf = ctypes.create_string_buffer(96)
    ok = (lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value > 0 and
          lib.nvmlSystemGetDriverVersion(buf, 96) == 0)
    lib.nvmlShutdown()
    try:
        return int(buf.value.decode().split(".")[0]) if ok else 0
    except ValueError:
        return 0


def checkpoint_api_present():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return all(hasattr(cuda, name) for name in
               ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
                "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
                "cuCheckpointProcessGetState"))


MAJOR = driver_major()
SKIP = ("no NVIDIA GPU with NVML on this machine" if MAJOR == 0 else
        f"driver {MAJOR} is older than 550: no CUDA checkpoint" if MAJOR < 550 else
        "libcuda.so.1 lacks the checkpoint driver API (cuCheckpointProcess*: driver 570+)"
        if not checkpoint_api_present() else None)
PY = torch_python() if SKIP is None else None
if SKIP is None and PY is None:
    SKIP = "no python3 with torch and CUDA ($VRAMD_TORCH_PYTHON)"
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def ckpt(*args):
    """simcuda-checkpoint ARGS --json over the real driver; returns (exit code, result)."""
    env = dict(os.environ)
    env["VRAMD_CUDA_LIBRARY"] = "libcuda.so.1"
    res = subprocess.run([str(binary("simcuda-checkpoint")), *[str(a) for a in args], "--json"],
                         capture_output=True, text=True, env=env, timeout=HTTP_TIMEOUT)
    try:
        return res.returncode, json.loads(res.stdout)
    except ValueError:
        pytest.fail(f"simcuda-checkpoint printed no JSON ({res.returncode}): {res.stdout} {res.stderr}")


def http(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {}


@pytest.fixture
def worker():
    if not os.path.exists(binary("simcuda-checkpoint")):
        pytest.fail(f"{binary('simcuda-checkpoint')} is missing: build first (make)")
    port = free_port()
    p = subprocess.Popen([PY, os.path.join(ROOT, "tests", "gpu", "torch_worker.py"), "--port", str(port),
                          "--resident-mib", str(RESIDENT_MIB)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if http(base + "/health")[0] == 200:
                break
        except OSError:
            if p.poll() is not None:
                pytest.fail(f"torch worker exited {p.returncode}: {p.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    yield p, base
    p.kill()
    p.wait(timeout=60)


def test_park_and_restore_a_pytorch_worker(worker):
    proc, base = worker
    pid = proc.pid
    assert http(base + "/generate", {"mib": 256, "ms": 100})[0] == 200  # CUDA warmed up
    before = gpu_bytes_of(pid)
    assert before >= RESIDENT_MIB << 20
    rc, st = ckpt("--get-state", "--pid", pid)
    assert rc == 0 and st["state"] == "running", st

    rc, park = ckpt("--toggle", "--pid", pid, "--timeout", 30000)
    assert rc == 0 and park["status"] == "ok" and park["state"] == "checkpointed", park
    assert gpu_bytes_of(pid) < before - (RESIDENT_MIB << 20) // 2  # NVML: the memory left

    # parked: its CPU side still answers; GPU work waits for the restore
    assert http(base + "/health")[0] == 200
    done = {}
    t = threading.Thread(target=lambda: done.update(r=http(base + "/generate", {"mib": 64, "ms": 50})))
    t.start()
    t.join(1.0)
    assert "r" not in done, "a CUDA call in a checkpointed process must block"

    rc, unpark = ckpt("--toggle", "--pid", pid)
    assert rc == 0 and unpark["status"] == "ok" and unpark["state"] == "running", unpark
    t.join(HTTP_TIMEOUT)
    assert done.get("r", (None,))[0] == 200, done
    assert gpu_bytes_of(pid) >= before - (64 << 20)  # back (the allocator may have trimmed a little)
    assert http(base + "/generate", {"mib": 256, "ms": 100})[0] == 200

    gb = before / 1e9
    out_rate = gb / (park["copy_ms"] / 1000) if park["copy_ms"] > 0 else float("inf")
    in_rate = gb / (unpark["copy_ms"] / 1000) if unpark["copy_ms"] > 0 else float("inf")
    print(f"\ncheckpoint: {gb:.2f} GB in {park['copy_ms']:.0f} ms = {out_rate:.1f} GB/s "
          f"(lock {park['lock_ms']:.0f} ms); restore: {unpark['copy_ms']:.0f} ms = "
          f"{in_rate:.1f} GB/s (unlock {unpark['unlock_ms']:.0f} ms)")


def log_events(path, event):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") == event:
                    out.append(e)
    return out


@pytest.fixture
def vramd_two_models(tmp_path):
    """vramd (real NVML, real libcuda.so.1) with two PyTorch models of 52 % of the card each,
    `checkpoint: true`: they cannot both be on the card, so each one's request parks the other."""
    from vramdkit import vramd_binary
    port = free_port()
    resident_mib = int(gpu0_total() * 0.52 / 2**20)
    models = ""
    for name in ("a", "b"):
        models += f"""
  {name}:
    route: /{name}/
    cmd: [{PY}, {ROOT}/tests/gpu/torch_worker.py, --port, "{{port}}", --resident-mib, "{resident_mib}"]
    memory: {{ resident: {resident_mib + 1024}MiB, per_request: 512MiB }}
    checkpoint: true
    concurrency: 2
    startup_timeout: 5m
    stop_timeout: 2m
"""
    cfg = f"""
listen: 127.0.0.1:{port}
state_dir: {tmp_path}/var
log: {{ format: json, level: info }}
gpu: {{ nvml_library: libnvidia-ml.so.1, cuda_library: libcuda.so.1, headroom: 1GiB, poll: 100ms }}
host_memory: {{ budget: {2 * resident_mib + 8192}MiB, reserve: 4GiB }}
models:{models}"""
    (tmp_path / "vramd.yaml").write_text(cfg)
    log_path = tmp_path / "vramd.log"
    env = dict(os.environ)
    env.pop("VRAMD_NVML_LIBRARY", None)
    env.pop("VRAMD_CUDA_LIBRARY", None)
    with open(log_path, "wb") as log:
        p = subprocess.Popen([str(vramd_binary()), "--config", str(tmp_path / "vramd.yaml")], stderr=log, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if http(base + "/readyz")[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    yield base, log_path, resident_mib
    p.terminate()
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
    if os.environ.get("VRAMD_GPU_KEEP"):  # a copy of the log for the report
        import shutil
        shutil.copy(log_path, os.path.join(os.environ["VRAMD_GPU_KEEP"], "vramd-checkpoint.log"))


def instance_of(base, name):
    st, body = http(f"{base}/v1/status")
    assert st == 200, (st, body)
    return [m for m in body["models"] if m["name"] == name][0]["instances"][0]


def test_vramd_parks_and_restores_a_pytorch_worker(vramd_two_models):
    """vramd's own checkpoint tier over the real driver: a request for `b` parks `a` (the same
    pid stays up, NVML stops showing its memory, the host book holds it); a request for `a`
    parks `b` and restores `a`, served by the same pid with its memory back. Then, with a's
    park timed, a third request (for b) finds a's park slower than its restart: a is stopped,
    b restored."""
    base, log_path, resident_mib = vramd_two_models
    assert log_events(log_path, "checkpoint_available"), open(log_path).read()[-3000:]
    st, a1 = http(base + "/a/generate", {"mib": 256, "ms": 100})
    assert st == 200, a1
    pid_a = a1["pid"]
    assert gpu_bytes_of(pid_a) >= resident_mib << 20

    t0 = time.monotonic()
    st, b1 = http(base + "/b/generate", {"mib": 256, "ms": 100})
    b_first_s = time.monotonic() - t0
    assert st == 200, b1
    inst = instance_of(base, "a")
    assert inst["state"] == "parked" and inst["tier"] == "checkpointed" and inst["pid"] == pid_a, inst
    assert gpu_bytes_of(pid_a) < (resident_mib << 20) // 2  # NVML: a's memory left the card
    st, status = http(base + "/v1/status")
    assert status["host_memory"]["parked"] == inst["parked_bytes"] > 0, status["host_memory"]

    t0 = time.monotonic()
    st, a2 = http(base + "/a/generate", {"mib": 256, "ms": 100})
    a_back_s = time.monotonic() - t0
    assert st == 200 and a2["pid"] == pid_a, a2  # the same process, restored
    assert gpu_bytes_of(pid_a) >= resident_mib << 20
    assert instance_of(base, "b")["state"] == "parked"

    # a's way out is now timed (tens of seconds at this host's copy rate) and its start is a
    # few seconds: parking it again would cost more than the reload it saves, so b's next
    # request stops a instead (park_skipped; workers/park_cost.c) and restores b
    st, b2 = http(base + "/b/generate", {"mib": 256, "ms": 100})
    assert st == 200 and b2["pid"] == b1["pid"], b2
    skipped = [e for e in log_events(log_path, "park_skipped") if e.get("model") == "a"]
    assert skipped and skipped[0]["reason"] == "slower_than_reload", skipped
    assert gpu_bytes_of(pid_a) == 0

    parked = log_events(log_path, "parked")
    resumed = log_events(log_path, "resumed")
    assert any(e.get("model") == "a" for e in parked) and any(e.get("model") == "a" for e in resumed)
    log_text = open(log_path, errors="replace").read().lower()
    assert "out of memory" not in log_text
    for e in parked + resumed + skipped:
        print(f"\n{e.get('event')}: {e}")
    pa = [e for e in parked if e.get("model") == "a"][0]
    gb = int(pa.get("freed", 0)) / 1e9
    copy_s = max(int(pa.get("copy_ms", 0)), 1) / 1000
    print(f"\nvramd checkpoint tier, real driver: a = {gb:.1f} GB parked, copy {copy_s:.2f} s "
          f"({gb / copy_s:.1f} GB/s); b's first request (a parked, b started) {b_first_s:.1f} s; "
          f"a's request (b parked, a restored) {a_back_s:.1f} s")
