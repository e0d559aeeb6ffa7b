"""The checkpoint eviction tier (issue 13, SPEC 4.1; workers/park.c): the CUDA driver parks every
process of an instance that holds GPU memory, with no cooperation from the server.

vramd runs with VRAMD_CUDA_LIBRARY = build/lib/libcuda-sim.so (the kit's environment): a
checkpoint moves a simworker's simulated allocations out of the GPU (NVML stops showing them)
into the set's host-memory account (`simgpu show --json`: "parked"), and the locked worker holds
its GPU work while /health still answers. A model with `checkpoint: true` and no sleep hook is
parked by checkpoint (eviction, admin unload) and restored for its next request by the same
process; a checkpoint the worker cannot acknowledge (SIGSTOPped: the lock times out) or a
restore that no longer fits stops the worker and a fresh one serves; a host budget that cannot
hold it falls back to a stop; a vramd SIGKILLed while a model is checkpointed leaves nothing
holding host memory (the guard kills the worker; without the guard the next start does).
"""
import json
import os
import signal

from vramdkit import GiB, MiB, sim_s, wait_for

from .schedkit import Watch, after, order

CONTEXT = 300 * MiB  # simworker's CUDA context


def ckpt_model(sched, flags_extra=(), **over):
    flags = ["--resident", "4GiB", "--per-request", "256MiB", "--run-time", sim_s(1), *flags_extra]
    return sched.model("llm", flags, "4.3GiB", "256MiB", checkpoint=True, **over)


def big_model(sched, resident="4GiB", declared="4.3GiB"):
    return sched.model("big", ["--resident", resident, "--per-request", "256MiB", "--run-time", sim_s(1)],
                       declared, "256MiB")


def gpu_held_by(sched, gpu, pid):
    return sum(p["used"] for g in sched.show(gpu)["gpus"] for p in g["processes"] if p["pid"] == pid)


def parked_on_host(sched, gpu, pid=None):
    show = sched.show(gpu)
    if pid is None:
        return show["parked"]
    return sum(p["parked"] for p in show.get("cuda_processes", []) if p["pid"] == pid)


def metric(vd, name, model):
    for line in vd.get("/metrics").body.decode().splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"{name} {model} not in /metrics")


def driver_times(vd, model, op):
    """copy_ms and total_ms of the driver calls of `op` (park / unpark) the log shows."""
    return [(e["copy_ms"], e["total_ms"]) for e in vd.events("cuda_done", model=model) if e["op"] == op]


def test_admin_unload_checkpoints_and_a_request_restores(sched):
    """Admin unload of a checkpoint model: the same process stays up, NVML stops showing its
    memory, the set shows it parked on the host, /v1/status says `checkpointed` with the bytes
    on the host budget. A request waits for the restore and is served by the same pid."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched)}, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.first("checkpoint_available") is not None
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    loaded = gpu_held_by(sched, gpu, pid)
    assert loaded >= 4 * GiB + CONTEXT, loaded

    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    inst = vd.instances("llm")[0]
    assert inst["state"] == "parked" and inst["tier"] == "checkpointed", inst
    assert inst["pid"] == pid
    assert gpu_held_by(sched, gpu, pid) == 0  # everything left the GPU, context included
    assert parked_on_host(sched, gpu, pid) == loaded
    assert 4 * GiB <= inst["parked_bytes"] <= loaded, inst
    st = vd.status()
    assert st["host_memory"]["parked"] == inst["parked_bytes"], st["host_memory"]
    assert metric(vd, "vramd_host_memory_parked_bytes", "llm") == inst["parked_bytes"]
    assert metric(vd, "vramd_model_checkpoints_total", "llm") == 1
    assert not vd.events("worker_exit", model="llm")

    with Watch(vd) as watch:
        r = vd.generate("llm")
    assert r.status == 200, r
    assert "resuming" in watch.states["llm"], watch.states
    assert not watch.problems, watch.problems[:5]
    inst = vd.instances("llm")[0]
    assert inst["pid"] == pid and inst["state"] == "ready" and inst["tier"] == "resident", inst
    assert gpu_held_by(sched, gpu, pid) >= loaded
    assert parked_on_host(sched, gpu) == 0
    assert vd.status()["host_memory"]["parked"] == 0
    parked = vd.first("parked", model="llm")
    assert parked["tier"] == "checkpoint", parked
    resumed = after(vd.events("resumed", model="llm"), parked)
    assert resumed["tier"] == "checkpoint" and resumed["measured"] >= loaded, resumed
    order(vd.first("checkpoint_started", model="llm"), parked, resumed,
          after(vd.events("request_done", model="llm"), resumed))
    assert not vd.events("worker_started", model="llm")[1:], "a second process was started"
    m = vd.model("llm")
    assert m["parking"]["checkpoints_total"] == 1 and m["parking"]["restores_total"] == 1, m["parking"]
    assert m["learned_restore_ms"] > 0
    for op in ("park", "unpark"):
        times = driver_times(vd, "llm", op)
        assert len(times) == 1, times
    print("park: wait_ms=%s copy_ms=%s; restore: wake_ms=%s copy_ms=%s; driver %s" % (
        parked["wait_ms"], parked["copy_ms"], resumed["wake_ms"], resumed["copy_ms"],
        {op: driver_times(vd, "llm", op) for op in ("park", "unpark")}))
    sched.finish()


def test_eviction_checkpoints_then_restores_the_same_process(sched):
    """`big` does not fit beside `llm` on 8 GiB: llm is checkpointed (not stopped) to make room;
    llm's next request stops big (no park tier) and restores llm's same process."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched), "big": big_model(sched)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    ev = vd.first("eviction", model="llm")
    assert ev and ev["for"] == "big", ev
    parked = after(vd.events("parked", model="llm"), ev)
    assert parked["tier"] == "checkpoint", parked
    order(ev, parked, vd.first("worker_started", model="big"))
    inst = vd.instances("llm")[0]
    assert inst["tier"] == "checkpointed" and gpu_held_by(sched, gpu, pid) == 0, inst
    assert parked_on_host(sched, gpu, pid) > 4 * GiB

    r = vd.generate("llm")
    assert r.status == 200, r
    assert vd.instances("llm")[0]["pid"] == pid
    ev2 = vd.first("eviction", model="big")
    resumed = after(vd.events("resumed", model="llm"), ev2)
    order(ev2, after(vd.events("worker_exit", model="big"), ev2), resumed)
    assert parked_on_host(sched, gpu) == 0
    vd.assert_no_oom()
    sched.finish()
