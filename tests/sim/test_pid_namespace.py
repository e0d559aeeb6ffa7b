"""test_pid_namespace: a simworker in its own pid namespace, as a container with a private pid
namespace runs it (`unshare --pid --fork --mount-proc`: pid 1 there, its own /proc, /dev/shm
shared with the host), on a simulated GPU set made on the host.

NVML reports host pids, also for processes in containers; so must the simulation:
  - the worker's memory is booked under its host pid (the child of the unshare process) in
    `simgpu show` and in the NVML simulation's process list (the probe, run on the host);
  - the worker's own accesses (it allocates and frees for a request) never mark the host's
    processes dead, and the host's accesses never mark the worker dead;
  - killed inside its namespace, its memory comes back after the set's release delay;
  - it is parked and restored by host pid (simcuda-checkpoint --pid HOSTPID), the lock
    acknowledged by the worker from inside its namespace; pid 1 on the host is not it.
Skips where `unshare --pid` is not permitted (it needs root). Every duration is simulated with
SIMGPU_TIMESCALE=0.01 (workerkit.TIMESCALE).
"""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from vramdkit import binary

from .simkit import COMMAND_TIMEOUT, wait_for
from .workerkit import GiB, MiB, TIMESCALE, process_used, workers  # noqa: F401

CONTEXT = 300 * MiB
# --kill-child: a worker left running by a failed test dies with its unshare at teardown
NS_PREFIX = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


@pytest.fixture(scope="module")
def pidns_ok():
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here (util-linux)")
    res = subprocess.run([*NS_PREFIX, "true"], capture_output=True, text=True,
                         timeout=COMMAND_TIMEOUT)
    if res.returncode != 0:
        pytest.skip(f"unshare --pid is not permitted here: {res.stderr.strip()}")


def children_of(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if int(text.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def host_pid_of(w):
    """The worker's host pid: the one child of its unshare process."""
    kids = wait_for(lambda: children_of(w.pid), what="the child of unshare")
    assert len(kids) == 1, kids
    return kids[0]


def nspid(pid):
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        line = next(x for x in f if x.startswith("NSpid:"))
    return [int(v) for v in line.split()[1:]]


def processes(sim, gpu):
    return {p["pid"]: p for p in sim.show(gpu)["gpus"][0]["processes"]}


def ckpt(sim, gpu, *args):
    env = dict(sim.env, SIMGPU=gpu, SIMGPU_TIMESCALE=TIMESCALE)
    env.pop("VRAMD_CUDA_LIBRARY", None)  # the CLI's default: libcuda-sim.so beside it
    return subprocess.run([str(binary("simcuda-checkpoint")), *[str(a) for a in args]],
                          capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT)


def test_worker_booked_under_its_host_pid(pidns_ok, sim, workers):
    gpu = sim.create(memory="8GiB", release_delay="100s", timescale=TIMESCALE)  # 1 s real
    host = sim.alloc(gpu, 100 * MiB)
    w = workers.start(gpu, "--resident", "1GiB", "--per-request", "512MiB", "--run-time", "30s",
                      "--cache", "release", prefix=NS_PREFIX)
    hp = host_pid_of(w)
    assert nspid(hp) == [hp, 1]  # pid 1 in its namespace
    assert w.status()["pid"] == 1  # what the worker itself sees
    held = CONTEXT + GiB

    # The NVML simulation is the first on the host to look: it finds the host pid itself.
    rc, doc = sim.probe(gpu)
    assert doc["violations"] == [] and rc == 0, doc
    assert {p["pid"]: p["used"] for p in doc["devices"][0]["processes"]} == \
        {hp: held, host.pid: 100 * MiB}
    procs = processes(sim, gpu)
    assert procs[hp] == {"pid": hp, "used": held, "dead": False, "ns_pid": 1,
                         "pid_ns": os.stat(f"/proc/{hp}/ns/pid").st_ino}
    assert procs[host.pid] == {"pid": host.pid, "used": 100 * MiB, "dead": False}

    # A host process allocating meanwhile; the worker allocates and frees for a request
    # (each of its accesses judges the slots it can see: not the host's).
    late = sim.alloc(gpu, 50 * MiB)
    r = w.post("/generate", json={})
    assert r.status_code == 200, r.text
    procs = processes(sim, gpu)
    assert not procs[host.pid]["dead"] and not procs[late.pid]["dead"]
    assert procs[hp]["used"] == held and not procs[hp]["dead"]
    assert sim.show(gpu)["gpus"][0]["used"] == held + 150 * MiB

    # Killed inside its namespace: the host finds its host pid gone, and its memory comes
    # back after the release delay.
    killed = time.monotonic()
    os.kill(hp, signal.SIGKILL)
    w.proc.wait(timeout=COMMAND_TIMEOUT)  # unshare exits with its child
    wait_for(lambda: hp not in processes(sim, gpu) or processes(sim, gpu)[hp]["dead"],
             what="the killed worker marked dead")
    wait_for(lambda: hp not in processes(sim, gpu), what="the killed worker's memory released")
    assert time.monotonic() - killed >= 1.0  # not before the release delay
    show = sim.show(gpu)
    assert show["gpus"][0]["used"] == 150 * MiB
    assert {p["pid"]: p["dead"] for p in show["gpus"][0]["processes"]} == \
        {host.pid: False, late.pid: False}


def test_worker_parked_by_host_pid(pidns_ok, sim, workers):
    gpu = sim.create(memory="8GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "1GiB", prefix=NS_PREFIX)
    hp = host_pid_of(w)
    held = CONTEXT + GiB
    assert process_used(sim, gpu, hp) == held

    res = ckpt(sim, gpu, "--get-state", "--pid", hp)
    assert (res.returncode, res.stdout.strip()) == (0, "running"), res.stderr
    res = ckpt(sim, gpu, "--get-state", "--pid", 1)  # the host's pid 1 is not the worker
    assert res.returncode != 0

    res = ckpt(sim, gpu, "--toggle", "--pid", hp, "--timeout", 10000, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["state"] == "checkpointed"
    show = sim.show(gpu)
    assert show["cuda_processes"] == [{"pid": hp, "ns_pid": 1, "state": "checkpointed",
                                       "op": "", "registered": True, "parked": held}]
    assert process_used(sim, gpu, hp) == 0 and show["gpus"][0]["used"] == 0
    assert w.get("/health").status_code == 200
    assert w.status()["gpu_held"] is True  # the lock reached it inside its namespace

    res = ckpt(sim, gpu, "--toggle", "--pid", hp, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["state"] == "running"
    wait_for(lambda: process_used(sim, gpu, hp) == held, what="memory back on the GPU")
    wait_for(lambda: w.status()["gpu_held"] is False, what="the worker running again")  # 5 ms poll
    assert sim.show(gpu)["parked"] == 0
