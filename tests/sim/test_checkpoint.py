"""test_checkpoint: the simulated CUDA driver's checkpoint calls end to end (libcuda-sim.so,
the `simcuda-checkpoint` CLI over src/gpu/cuda.c, simworker honouring the lock, `simgpu show`).

A simworker holding simulated GPU memory is parked (lock + checkpoint) and restored (restore +
unlock) by pid through the CLI, as NVIDIA's cuda-checkpoint does on a real GPU:
  - NVML's view (the set's process list) no longer shows the memory; `simgpu show` lists it
    parked, per process and per GPU; the same pid serves again once restored;
  - /health answers while parked; a request sent while parked waits and completes after the
    restore; a request running when the lock came stops advancing and finishes afterwards;
  - a restore that no longer fits fails clearly (CUDA_ERROR_OUT_OF_MEMORY) and leaves the
    process parked; it succeeds once the memory is free;
  - a worker that cannot answer the lock (SIGSTOPped) makes the lock time out, still running;
  - park time follows bytes / the set's PCIe bandwidth (scaled by SIMGPU_TIMESCALE);
  - a parked worker that dies frees its host bytes.
Every duration is simulated with SIMGPU_TIMESCALE=0.01 (workerkit.TIMESCALE).
"""
import json
import signal
import subprocess
import threading
import time

import pytest
import requests

from vramdkit import binary

from .simkit import COMMAND_TIMEOUT, wait_for
from .workerkit import GiB, MiB, TIMESCALE, process_used, workers  # noqa: F401

CONTEXT = 300 * MiB


def ckpt_bin():
    return str(binary("simcuda-checkpoint"))


def ckpt(sim, gpu_set, *args, check=None):
    """Run simcuda-checkpoint ARGS against gpu_set; returns CompletedProcess (text)."""
    env = dict(sim.env)
    env["SIMGPU"] = gpu_set
    env["SIMGPU_TIMESCALE"] = TIMESCALE
    env.pop("VRAMD_CUDA_LIBRARY", None)  # the CLI's default: libcuda-sim.so beside it
    res = subprocess.run([ckpt_bin(), *[str(a) for a in args]], capture_output=True, text=True,
                         env=env, timeout=COMMAND_TIMEOUT)
    if check is not None and res.returncode != check:
        pytest.fail(f"simcuda-checkpoint {args} exited {res.returncode}, expected {check}:\n"
                    f"stdout: {res.stdout}\nstderr: {res.stderr}")
    return res


def state_of(sim, gpu_set, pid):
    return ckpt(sim, gpu_set, "--get-state", "--pid", pid, check=0).stdout.strip()


def cuda_entry(show, pid):
    return next((p for p in show["cuda_processes"] if p["pid"] == pid), None)


def create(sim, memory, bandwidth=None):
    if bandwidth is None:
        return sim.create(memory=memory, timescale=TIMESCALE)
    # simkit's create has no rate flags: made here, removed by sim.close() the same way; the
    # driver checkpoint's rate both ways
    name = sim.unique_name()
    sim.sets.append(name)
    env = dict(sim.env)
    env["SIMGPU_TIMESCALE"] = TIMESCALE
    sim.run(["create", name, "--memory", memory, "--checkpoint-bandwidth", bandwidth,
             "--restore-bandwidth", bandwidth], env=env, check=0)
    return name


class Background:
    """One HTTP request on its own thread."""

    def __init__(self, fn):
        self.result = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except Exception as e:  # noqa: BLE001 - examined by the test
            self.result = e
        self.done.set()


def test_park_and_restore_a_worker_through_the_cli(sim, workers):
    gpu = create(sim, "24GiB")
    w = workers.start(gpu, "--resident", "4GiB", "--per-request", "1GiB", "--run-time", "2s")
    held = CONTEXT + 4 * GiB
    assert process_used(sim, gpu, w.pid) == held
    assert state_of(sim, gpu, w.pid) == "running"

    res = ckpt(sim, gpu, "--toggle", "--pid", w.pid, "--json", check=0)
    out = json.loads(res.stdout)
    assert (out["op"], out["status"], out["state_before"], out["state"]) == \
        ("park", "ok", "running", "checkpointed")
    assert state_of(sim, gpu, w.pid) == "checkpointed"
    show = sim.show(gpu)
    assert process_used(sim, gpu, w.pid) == 0 and show["gpus"][0]["used"] == 0  # NVML: gone
    assert cuda_entry(show, w.pid) == {"pid": w.pid, "state": "checkpointed", "op": "",
                                       "registered": True, "parked": held}
    assert show["parked"] == held and show["gpus"][0]["parked"] == held
    assert show["gpus"][0]["parked_processes"] == [{"pid": w.pid, "parked": held,
                                                    "state": "checkpointed"}]
    human = sim.run(["show", gpu], check=0).stdout
    assert f"pid {w.pid}" in human and "parked (checkpointed)" in human

    # parked: /health answers, the GPU work is held, a request waits
    assert w.get("/health").json()["status"] == "ok"
    assert w.status()["gpu_held"] is True
    req = Background(lambda: requests.post(w.url("/generate"), json={}, timeout=60))
    assert not req.done.wait(0.5), "a request to a parked worker must wait"
    assert w.get("/health").status_code == 200

    res = ckpt(sim, gpu, "--toggle", "--pid", w.pid, "--json", check=0)
    out = json.loads(res.stdout)
    assert (out["op"], out["status"], out["state"]) == ("unpark", "ok", "running")
    assert req.done.wait(30), "the request must complete after the restore"
    assert isinstance(req.result, requests.Response) and req.result.status_code == 200, req.result
    assert state_of(sim, gpu, w.pid) == "running"
    wait_for(lambda: process_used(sim, gpu, w.pid) >= held, what="memory back on the GPU")
    assert w.status()["pid"] == w.pid and w.status()["gpu_held"] is False
    assert sim.show(gpu)["parked"] == 0


def test_running_request_is_held_and_finishes_after_restore(sim, workers):
    gpu = create(sim, "24GiB")
    # 100 s simulated = 1 s real; its 2 GiB arrive in the first 30 % of it
    w = workers.start(gpu, "--resident", "1GiB", "--per-request", "2GiB", "--run-time", "100s")
    started = time.monotonic()
    req = Background(lambda: requests.post(w.url("/generate"), json={}, timeout=60))
    wait_for(lambda: process_used(sim, gpu, w.pid) == CONTEXT + 3 * GiB, what="request memory")
    ckpt(sim, gpu, "--action", "lock", "--pid", w.pid, "--timeout", 5000, check=0)
    assert state_of(sim, gpu, w.pid) == "locked"
    ckpt(sim, gpu, "--action", "checkpoint", "--pid", w.pid, check=0)
    assert cuda_entry(sim.show(gpu), w.pid)["parked"] == CONTEXT + 3 * GiB  # request memory too
    time.sleep(1.2)  # longer than the whole request would take
    assert not req.done.is_set()
    ckpt(sim, gpu, "--action", "restore", "--pid", w.pid, check=0)
    assert state_of(sim, gpu, w.pid) == "locked"
    assert not req.done.wait(0.2), "locked: still held"
    ckpt(sim, gpu, "--action", "unlock", "--pid", w.pid, check=0)
    assert req.done.wait(30)
    assert req.result.status_code == 200, req.result
    assert time.monotonic() - started >= 1.2 + 0.9  # the held time did not count as progress


def test_restore_that_no_longer_fits_fails_clearly(sim, workers):
    gpu = create(sim, "8GiB")
    w = workers.start(gpu, "--resident", "4GiB")
    ckpt(sim, gpu, "--toggle", "--pid", w.pid, check=0)
    holder = sim.alloc(gpu, 5 * GiB)  # someone took the card meanwhile
    res = ckpt(sim, gpu, "--toggle", "--pid", w.pid, "--json", check=1)
    out = json.loads(res.stdout)
    assert out["status"] == "no_memory" and out["state"] == "checkpointed"
    assert "cuCheckpointProcessRestore" in res.stderr and "CUDA_ERROR_OUT_OF_MEMORY" in res.stderr
    assert state_of(sim, gpu, w.pid) == "checkpointed"
    assert process_used(sim, gpu, w.pid) == 0
    assert cuda_entry(sim.show(gpu), w.pid)["parked"] == CONTEXT + 4 * GiB
    holder.kill()
    ckpt(sim, gpu, "--toggle", "--pid", w.pid, check=0)
    assert process_used(sim, gpu, w.pid) == CONTEXT + 4 * GiB
    assert w.post("/generate", json={}).status_code == 200


def test_lock_times_out_when_the_worker_cannot_answer(sim, workers):
    gpu = create(sim, "8GiB")
    w = workers.start(gpu, "--resident", "1GiB")
    w.proc.send_signal(signal.SIGSTOP)  # its event loop cannot stop its GPU work
    try:
        res = ckpt(sim, gpu, "--action", "lock", "--pid", w.pid, "--timeout", 200, "--json", check=1)
    finally:
        w.proc.send_signal(signal.SIGCONT)
    out = json.loads(res.stdout)
    assert out["status"] == "timeout" and out["state"] == "running"
    assert out["lock_ms"] >= 200
    assert "CUDA_ERROR_TIMEOUT" in res.stderr
    assert process_used(sim, gpu, w.pid) == CONTEXT + 1 * GiB
    assert w.post("/generate", json={}).status_code == 200


def test_park_time_follows_bytes_over_bandwidth(sim, workers):
    gpu = create(sim, "24GiB", bandwidth="1GB/s")
    show = sim.show(gpu)
    assert show["checkpoint_bandwidth"] == show["restore_bandwidth"] == 1e9
    assert show["pcie_bandwidth"] == 20e9  # cuMemcpy's link, not the driver's checkpoint
    small = workers.start(gpu, "--resident", "2GiB")
    large = workers.start(gpu, "--resident", "8GiB")
    copy, expected = {}, {}
    for w in (small, large):
        out = json.loads(ckpt(sim, gpu, "--toggle", "--pid", w.pid, "--json", check=0).stdout)
        copy[w.pid] = out["copy_ms"]
        nbytes = cuda_entry(sim.show(gpu), w.pid)["parked"]
        expected[w.pid] = nbytes / 1e9 * 1000 * float(TIMESCALE)
        assert expected[w.pid] * 0.98 <= out["copy_ms"] <= expected[w.pid] + 500, (nbytes, out)
    # 8.3 GiB vs 2.3 GiB
    assert copy[large.pid] > 3 * copy[small.pid]
    for w in (small, large):
        out = json.loads(ckpt(sim, gpu, "--toggle", "--pid", w.pid, "--json", check=0).stdout)
        assert out["state"] == "running"
        assert expected[w.pid] * 0.98 <= out["copy_ms"] <= expected[w.pid] + 500, out


def test_parked_worker_that_dies_frees_its_host_memory(sim, workers):
    gpu = create(sim, "8GiB")
    w = workers.start(gpu, "--resident", "2GiB")
    ckpt(sim, gpu, "--toggle", "--pid", w.pid, check=0)
    assert sim.show(gpu)["parked"] == CONTEXT + 2 * GiB
    w.kill()
    show = sim.show(gpu)
    assert show["parked"] == 0 and cuda_entry(show, w.pid) is None
    res = ckpt(sim, gpu, "--get-state", "--pid", w.pid, check=1)
    assert "CUDA_ERROR_NOT_FOUND" in res.stderr


def test_cli_usage_and_unknown_pid(sim):
    gpu = create(sim, "8GiB")
    assert ckpt(sim, gpu, "--action", "freeze", "--pid", 1, check=2).stderr
    assert "--pid is required" in ckpt(sim, gpu, "--get-state", check=2).stderr
    assert "exactly one" in ckpt(sim, gpu, "--toggle", "--get-state", "--pid", 1, check=2).stderr
    assert "--get-state" in ckpt(sim, gpu, "--help", check=0).stdout
    res = ckpt(sim, gpu, "--get-state", "--pid", 1, check=1)  # init holds no simulated memory
    assert "CUDA_ERROR_NOT_FOUND" in res.stderr
    env = dict(sim.env)
    env.pop("SIMGPU", None)
    res = subprocess.run([ckpt_bin(), "--get-state", "--pid", "1"], capture_output=True, text=True,
                         env=env, timeout=COMMAND_TIMEOUT)
    assert res.returncode == 1 and "checkpoint unavailable" in res.stderr
