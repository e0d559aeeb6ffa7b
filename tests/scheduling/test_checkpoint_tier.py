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


def ckpt_model(sched, flags_extra=(), name="llm", load_time=5, **over):
    """A 4 GiB model that takes load_time simulated s to load (a park must beat that: park_cost.c)."""
    flags = ["--resident", "4GiB", "--per-request", "256MiB", "--run-time", sim_s(1),
             "--load-time", sim_s(load_time), *flags_extra]
    return sched.model(name, flags, "4.3GiB", "256MiB", checkpoint=True, **over)


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


def assert_counted_as_failure(vd, failed):
    """A failed checkpoint or restore is a worker failure, counted as a crash is: logged
    worker_failure (the backoff before the next start), in restarts_total and in
    vramd_worker_restarts_total{reason="park_failed"}."""
    wf = vd.first("worker_failure", model="llm")
    assert wf and wf["reason"] == failed["reason"] and wf["consecutive"] == 1, wf
    order(failed, wf)
    assert vd.model("llm")["restarts_total"] >= 1
    text = vd.get("/metrics").body.decode()
    assert 'vramd_worker_restarts_total{model="llm",reason="park_failed"} 1' in text, \
        [line for line in text.splitlines() if line.startswith("vramd_worker_restarts_total")]


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
    # the restore's RESUMING can be shorter than the watch's sampling: the log says it all
    assert vd.events("instance_state", model="llm", **{"from": "parked", "to": "resuming"}), vd.log_tail(40)
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
    # parked again, then vramd drained (SIGTERM): the checkpointed worker is stopped, vramd
    # exits 0, and the worker's host bytes are freed with it
    assert vd.post("/v1/models/llm/unload").status == 200
    assert vd.instances("llm")[0]["tier"] == "checkpointed"
    assert parked_on_host(sched, gpu, pid) >= loaded
    sched.finish()
    assert parked_on_host(sched, gpu) == 0


def test_unload_of_a_checkpointed_model_answers_parked_then_stopped(sched):
    """The answer of POST /v1/models/NAME/unload is the model's real state: the first unload
    checkpoints it (state parked, tier checkpointed: the process is up, in host memory, not
    "stopped"); a second unload stops the parked process (state stopped, no tier)."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched)}, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    assert r.json() == {"model": "llm", "state": "parked", "tier": "checkpointed", "instances": 1,
                        "pinned": False, "pinned_by": None}, r
    assert vd.instances("llm")[0]["pid"] == pid
    assert vd.model("llm")["state"] == "stopped"  # /v1/status: nothing serving
    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    assert r.json()["state"] == "stopped" and "tier" not in r.json(), r
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10, what="the parked worker stopped")
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


def test_checkpoint_that_times_out_stops_and_restarts(sched):
    """A worker that cannot acknowledge the driver's lock (SIGSTOPped: its CUDA work never
    stops) makes the checkpoint time out after stop_timeout (the lock timeout): the instance is
    stopped (SIGTERM stays pending, SIGKILL after stop_timeout), nothing stays booked on the
    host, and the next request is served by a fresh worker; the ledger is back to resident
    reservations only."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched, stop_timeout="300ms")},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        r = vd.post("/v1/models/llm/unload")
        assert r.status == 200, r
        failed = vd.wait_event("checkpoint_failed", model="llm", timeout=10)[0]
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert "pid %d" % pid in failed["error"] and "CUDA_ERROR_TIMEOUT" in failed["error"], failed
    park = driver_times(vd, "llm", "park")
    assert len(park) == 1, park
    wait_for(lambda: not vd.instances("llm"), what="the worker stopped after the failed checkpoint")
    assert not vd.events("parked", model="llm")
    assert vd.status()["host_memory"]["parked"] == 0
    assert parked_on_host(sched, gpu) == 0
    assert vd.model("llm")["parking"]["checkpoint_failures"] == 1
    assert_counted_as_failure(vd, failed)

    r = vd.generate("llm")
    assert r.status == 200, r
    inst = vd.instances("llm")
    assert len(inst) == 1 and inst[0]["pid"] != pid and inst[0]["tier"] == "resident", inst
    sched.finish()


def test_restore_that_no_longer_fits_restarts_the_worker(sched):
    """While llm is checkpointed, a process vramd is told to ignore (gpu.foreign_usage: ignore)
    takes 5 of the 8 GiB: vramd books llm back, the driver's restore fails with
    CUDA_ERROR_OUT_OF_MEMORY, the checkpointed worker is stopped (its host bytes freed with it),
    and once the memory is free again a fresh worker serves the waiting request."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched)}, gpu={"foreign_usage": "ignore"},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.post("/v1/models/llm/unload").status == 200
    assert vd.instances("llm")[0]["tier"] == "checkpointed"
    holder = sched.alloc(gpu, 5 * GiB)
    req = vd.later("llm")
    failed = vd.wait_event("restore_failed", model="llm", timeout=10)[0]
    assert "no longer free" in failed["reason"] and "OUT_OF_MEMORY" in failed["error"], failed
    wait_for(lambda: not any(p["pid"] == pid for p in sched.show(gpu).get("cuda_processes", [])),
             what="the checkpointed worker gone, its host bytes with it")
    holder.kill()
    r = req.result()
    assert r.status == 200, r
    inst = vd.instances("llm")
    assert len(inst) == 1 and inst[0]["pid"] != pid, inst
    assert parked_on_host(sched, gpu) == 0 and vd.status()["host_memory"]["parked"] == 0
    order(failed, vd.first("worker_exit", model="llm", pid=pid))
    assert_counted_as_failure(vd, failed)
    vd.allow_oom.add("llm")  # a fresh start may meet the holder before it is gone
    sched.finish()


def test_parked_model_whose_request_fits_only_degraded_is_restored_at_once(sched):
    """`big` (priority 3, a degrade ladder: 6 GiB as sent, 1.5 GiB at level 1) is checkpointed
    right after a request (its booking still holds the request's 6 GiB, unverified; the
    driver parks the ~3.8 GiB it really holds); `other` (priority 6, kept alive 10 min) then
    takes 5.3 of the 10 GiB. A request for big is served within seconds by the same process,
    restored (other is evicted to make room). Two defects found by bench/scheduling's
    mixed-80gb burst with parking, each of which kept the request queued until its timeout:
    the way back asked room for the request as sent where a load (sched_place) asks it for
    the cheapest level, so sched_place found it "fits" and no eviction was ever started (the
    parked TRELLIS.2 waited ~30 s real for another model's keep-alive to end); and the
    restored instance waited for half of its pre-park *booking* to show in NVML, more than
    the driver had parked, so it stayed RESUMING until wake.timeout."""
    gpu = sched.gpu_set("10GiB")
    big = sched.model("big", ["--resident", "2GiB", "--per-request", "6GiB", "--mem-scale", "resolution:1024:2",
                              "--run-time", sim_s(1), "--cache", "release", "--oom-style", "json200"],
                      "2.3GiB", "6GiB", checkpoint=True, priority=3,
                      degrade={"detect": {"json": {"path": "/success", "equals": False},
                                          "body_matches": "out of memory"},
                               "when": "to_fit",
                               "ladder": [{"set": {"resolution": 512}, "per_request": "1.5GiB"}]})
    other = sched.model("other", ["--resident", "5GiB", "--per-request", "256MiB", "--run-time", sim_s(1)],
                        "5.3GiB", "256MiB", priority=6)
    vd = sched.start_vramd(gpu, {"big": big, "other": other}, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("big", {"resolution": 512}).status == 200
    pid = vd.instances("big")[0]["pid"]
    assert vd.post("/v1/models/big/unload").status == 200
    assert vd.instances("big")[0]["tier"] == "checkpointed"
    assert vd.generate("other").status == 200

    r = vd.generate("big", {"resolution": 1024}, timeout=10)
    assert r.status == 200, (r, vd.log_tail(60))
    inst = vd.instances("big")[0]
    assert inst["pid"] == pid and inst["state"] == "ready", inst
    resumed = vd.first("resumed", model="big")
    assert resumed["tier"] == "checkpoint", resumed
    vd.assert_no_oom()
    sched.finish()


def test_host_budget_exhausted_falls_back_to_stop(sched):
    """A 2 GiB host budget cannot hold llm's 4.3 GiB: the checkpoint is refused (park_refused
    tier=checkpoint) and eviction takes the next tier, a stop; big loads and is served."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched), "big": big_model(sched)},
                           host_memory={"budget": "2GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    refused = vd.first("park_refused", model="llm")
    assert refused and refused["tier"] == "checkpoint" and refused["reason"] == "over_budget", refused
    ev = vd.first("eviction", model="llm")
    order(ev, refused, after(vd.events("worker_exit", model="llm"), ev))
    assert not vd.events("checkpoint_started", model="llm") and not driver_times(vd, "llm", "park")
    assert vd.status()["host_memory"]["parked"] == 0 and parked_on_host(sched, gpu) == 0
    assert not any(i["pid"] == pid for i in vd.instances("llm"))
    vd.assert_no_oom()
    sched.finish()


def test_host_budget_exhausted_falls_back_to_the_unload_hook(sched):
    """The same with an unload/reload hook (simworker): the refused
    checkpoint falls back to the unload hook, the process stays."""
    gpu = sched.gpu_set("8GiB")
    llm = ckpt_model(sched, unload={"method": "POST", "path": "/unload_models/"},
                     reload={"method": "POST", "path": "/reload_models/"})
    vd = sched.start_vramd(gpu, {"llm": llm, "big": big_model(sched)},
                           host_memory={"budget": "2GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    refused = vd.first("park_refused", model="llm")
    assert refused and refused["tier"] == "checkpoint", refused
    inst = vd.instances("llm")[0]
    assert inst["pid"] == pid and inst["tier"] == "unloaded", inst
    assert not driver_times(vd, "llm", "park")
    vd.assert_no_oom()
    sched.finish()


def kill_vramd(vd):
    """SIGKILL vramd (no drain, no cleanup of its own) and reap it."""
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode = vd.proc.returncode
    vd._close_files()
    vd.stopped = True


def test_vramd_killed_while_checkpointed_leaves_no_host_memory_held(sched):
    """vramd SIGKILLed while llm is checkpointed: the guard (process_guard.c) SIGKILLs the
    worker's group, and the simulated driver frees a dead process's parked bytes: nothing holds
    host memory, no worker is left."""
    from vramdkit.proc import pid_alive
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched)}, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.post("/v1/models/llm/unload").status == 200
    assert parked_on_host(sched, gpu, pid) > 4 * GiB
    kill_vramd(vd)
    wait_for(lambda: not pid_alive(pid), timeout=10, what="the checkpointed worker killed by the guard")
    assert parked_on_host(sched, gpu) == 0
    sched.finish()


def test_checkpointed_worker_left_by_a_killed_vramd_is_cleaned_at_the_next_start(sched):
    """The guard dead too (killed first) and the worker behind a shell wrapper (which
    PR_SET_PDEATHSIG does not reach): the checkpointed simworker outlives vramd, holding its
    parked bytes. The next vramd with the same state_dir kills it at start (its pid file names
    its group: `stale_workers_killed`) rather than restoring it (see docs/design.md), so its
    host bytes are freed, and the model serves again from a fresh worker."""
    from vramdkit import binary
    from vramdkit.proc import children_of, pid_alive
    gpu = sched.gpu_set("8GiB")
    state_dir = str(sched.tmp / "state")
    m = ckpt_model(sched)
    m["cmd"] = ["/bin/sh", "-c", " ".join([str(binary("simworker")), *m["cmd"][1:]]) + "; exit $?"]
    vd = sched.start_vramd(gpu, {"llm": m}, state_dir=state_dir, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    shell = vd.instances("llm")[0]["pid"]
    inner = [p for p, _ in children_of(shell)]
    assert len(inner) == 1, inner
    assert vd.post("/v1/models/llm/unload").status == 200
    inst = vd.instances("llm")[0]
    assert inst["tier"] == "checkpointed", inst
    assert parked_on_host(sched, gpu, inner[0]) > 4 * GiB  # the simworker, found through its group
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    os.kill(guard, signal.SIGKILL)
    wait_for(lambda: not pid_alive(guard), timeout=5, what="the guard gone")
    kill_vramd(vd)
    wait_for(lambda: not pid_alive(shell), timeout=10, what="the wrapper shell gone with vramd")
    assert pid_alive(inner[0]) and parked_on_host(sched, gpu, inner[0]) > 4 * GiB

    vd2 = sched.start_vramd(gpu, {"llm": m}, state_dir=state_dir, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd2.first("stale_workers_killed") is not None
    wait_for(lambda: not pid_alive(inner[0]), timeout=10, what="the left checkpointed worker killed")
    assert parked_on_host(sched, gpu) == 0
    assert vd2.generate("llm").status == 200
    sched.finish()


def test_external_server_left_checkpointed_is_restored_at_start_then_parked_again(sched):
    """An external server (url:) that a dead vramd left checkpointed (here: parked by hand with
    simcuda-checkpoint, as NVIDIA's cuda-checkpoint --toggle would) answers /health but holds
    its GPU work. The next vramd asks the driver for its state when it finds it and restores it
    before its first request, which is served. An admin unload then parks it by checkpoint (an
    external server is never stopped) and a request restores it again."""
    import subprocess
    from vramdkit import binary
    gpu = sched.gpu_set("8GiB")
    ext = sched.external(gpu, "extckpt", ["--resident", "3GiB", "--per-request", "256MiB",
                                          "--run-time", sim_s(1)])
    held = gpu_held_by(sched, gpu, ext.pid)
    p = subprocess.run([str(binary("simcuda-checkpoint")), "--toggle", "--pid", str(ext.pid)],
                       capture_output=True, text=True, env=sched.env(gpu), timeout=30)
    assert p.returncode == 0, p.stderr
    assert gpu_held_by(sched, gpu, ext.pid) == 0 and parked_on_host(sched, gpu, ext.pid) == held

    vd = sched.start_vramd(gpu, {"extckpt": sched.external_model("extckpt", ext, "3.3GiB", "256MiB",
                                                                 checkpoint=True)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    r = vd.generate("extckpt")
    assert r.status == 200, r
    found = vd.first("cuda_found", model="extckpt")
    assert found and found["state"] == "checkpointed" and found["pid"] == ext.pid, found
    order(found, vd.first("resumed", model="extckpt"), vd.first("request_done", model="extckpt"))
    loaded = gpu_held_by(sched, gpu, ext.pid)  # its request's memory stays cached
    assert loaded >= held and parked_on_host(sched, gpu) == 0

    r = vd.post("/v1/models/extckpt/unload")
    assert r.status == 200, r
    inst = vd.instances("extckpt")[0]
    assert inst["tier"] == "checkpointed", inst
    assert gpu_held_by(sched, gpu, ext.pid) == 0 and parked_on_host(sched, gpu, ext.pid) == loaded
    assert vd.generate("extckpt").status == 200
    assert vd.instances("extckpt")[0]["tier"] == "resident"
    assert gpu_held_by(sched, gpu, ext.pid) >= loaded and parked_on_host(sched, gpu) == 0
    assert not ext.oom_lines()
    sched.finish()


def test_sleep_comes_before_checkpoint_and_a_failed_sleep_falls_to_it(sched):
    """Tier order sleep -> checkpoint -> unload -> stop. `a` has both a working sleep hook and
    checkpoint: its admin unload sleeps it (no driver call). `b`'s sleep hook fails (404): the
    next tier is the checkpoint, and its request is served after a restore (not its wake hook)
    by the same process."""
    gpu = sched.gpu_set("16GiB")
    flags = ["--sleep-time", sim_s(1), "--wake-time", sim_s(1)]
    wake = {"method": "POST", "path": "/wake_up"}
    a = ckpt_model(sched, flags, "a", sleep={"method": "POST", "path": "/sleep?level=1"}, wake=wake)
    b = ckpt_model(sched, flags, "b", sleep={"method": "POST", "path": "/no_such_sleep"}, wake=wake)
    vd = sched.start_vramd(gpu, {"a": a, "b": b}, host_memory={"budget": "32GiB", "reserve": 0})
    for name in ("a", "b"):
        assert vd.generate(name).status == 200
    pid_b = vd.instances("b")[0]["pid"]
    for name in ("a", "b"):
        assert vd.post(f"/v1/models/{name}/unload").status == 200
    assert vd.instances("a")[0]["tier"] == "sleeping"
    assert not vd.events("checkpoint_started", model="a")
    hook = vd.first("sleep_hook_done", model="b")
    assert hook and hook["status"] == 404, hook
    assert vd.instances("b")[0]["tier"] == "checkpointed"
    order(hook, vd.first("checkpoint_started", model="b"), vd.first("parked", model="b"))
    assert vd.generate("b").status == 200
    assert vd.instances("b")[0]["pid"] == pid_b
    assert vd.first("resumed", model="b")["tier"] == "checkpoint"
    assert not vd.events("wake_hook_done", model="b")
    sched.finish()


def test_cache_cleared_before_the_park_fits_the_host_budget(sched):
    """llm holds 4 GiB resident + 6 GiB of allocator cache (simworker --cache keep) and has a
    clear_cache hook; the host budget is 6 GiB. Evicted for big, it is first asked to clear its
    cache (park_cleared_cache: before ~10 GiB, after ~4 GiB), then checkpointed with only what
    is left booked on the host (not refused as over budget, not stopped), and its next request
    restores the same process."""
    gpu = sched.gpu_set("12GiB")  # big (8.3 GiB) fits beside llm's 4.3 GiB only once llm is parked
    llm = sched.model("llm", ["--resident", "4GiB", "--per-request", "6GiB", "--cache", "keep",
                              "--run-time", sim_s(1)], "4.3GiB", "6GiB", checkpoint=True,
                      clear_cache={"method": "POST", "path": "/clear_cache/"})
    vd = sched.start_vramd(gpu, {"llm": llm, "big": big_model(sched, "8GiB", "8.3GiB")},
                           host_memory={"budget": "6GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    wait_for(lambda: gpu_held_by(sched, gpu, pid) >= 10 * GiB, what="llm holding its cache")
    assert vd.generate("big").status == 200
    ev = vd.first("eviction", model="llm")
    assert ev and ev["for"] == "big", ev
    cleared = after(vd.events("park_cleared_cache", model="llm"), ev)
    assert cleared["cleared"] == "true", cleared
    assert cleared["before"] >= 10 * GiB and cleared["after"] <= 4 * GiB + CONTEXT + 64 * MiB, cleared
    parked = after(vd.events("parked", model="llm"), cleared)
    assert parked["tier"] == "checkpoint" and parked["host"] <= 4 * GiB + CONTEXT + 64 * MiB, parked
    order(ev, vd.first("park_clear_cache", model="llm"), vd.first("clear_cache_done", model="llm"), cleared, parked,
          vd.first("worker_started", model="big"))
    assert not vd.events("park_refused", model="llm")
    assert not vd.events("worker_exit", model="llm")
    inst = vd.instances("llm")[0]
    assert inst["tier"] == "checkpointed" and inst["pid"] == pid, inst
    assert vd.status()["host_memory"]["parked"] == inst["parked_bytes"] <= 4 * GiB + CONTEXT + 64 * MiB
    assert gpu_held_by(sched, gpu, pid) == 0

    assert vd.generate("llm").status == 200
    assert vd.instances("llm")[0]["pid"] == pid
    assert after(vd.events("resumed", model="llm"), parked)["tier"] == "checkpoint"
    assert vd.status()["host_memory"]["parked"] == 0 and parked_on_host(sched, gpu) == 0
    vd.assert_no_oom()
    sched.finish()


def test_failed_clear_cache_parks_as_before(sched):
    """The same with a clear_cache hook that fails (404): park_cleared_cache says cleared=false,
    the whole ~10 GiB is offered to the 6 GiB host budget as before, refused, and llm stopped.
    The call is counted as vramd_hook_calls_total{hook="clear_cache",outcome="http_error"}."""
    gpu = sched.gpu_set("12GiB")
    llm = sched.model("llm", ["--resident", "4GiB", "--per-request", "6GiB", "--cache", "keep",
                              "--run-time", sim_s(1)], "4.3GiB", "6GiB", checkpoint=True,
                      clear_cache={"method": "POST", "path": "/no_such_hook/"})
    vd = sched.start_vramd(gpu, {"llm": llm, "big": big_model(sched, "8GiB", "8.3GiB")},
                           host_memory={"budget": "6GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    done = vd.first("clear_cache_done", model="llm")
    assert done and done["status"] == 404 and done["outcome"] == "http_error", done
    cleared = after(vd.events("park_cleared_cache", model="llm"), done)
    assert cleared["cleared"] == "false" and cleared["after"] >= 10 * GiB, cleared
    refused = after(vd.events("park_refused", model="llm"), cleared)
    assert refused["reason"] == "over_budget", refused
    order(refused, after(vd.events("worker_exit", model="llm"), refused), vd.first("worker_started", model="big"))
    assert not any(i["pid"] == pid for i in vd.instances("llm"))
    assert vd.status()["host_memory"]["parked"] == 0 and parked_on_host(sched, gpu) == 0
    clear_calls = [line for line in vd.get("/metrics").body.decode().splitlines()
                   if line.startswith('vramd_hook_calls_total{model="llm",hook="clear_cache",')]
    assert 'vramd_hook_calls_total{model="llm",hook="clear_cache",outcome="http_error"} 1' in clear_calls, clear_calls
    assert 'vramd_hook_calls_total{model="llm",hook="clear_cache",outcome="ok"} 0' in clear_calls, clear_calls
    vd.assert_no_oom()
    sched.finish()


def test_park_slower_than_a_reload_is_skipped(sched):
    """A park must pay for itself (workers/park_cost.c): the host's copy is slow (0.5 GB/s:
    llm's 4.6 GB take ~9 simulated s each way) and llm reloads in 1 s. The first eviction
    parks it (its way out not yet timed) and learns the way out; the next one skips the park
    (park_skipped reason=slower_than_reload) and stops llm, so big does not wait for a copy
    that a reload beats. The placer sees the same: the learned way out in /v1/status."""
    gpu = sched.gpu_set("8GiB", checkpoint_bandwidth="0.5GB/s")
    vd = sched.start_vramd(gpu, {"llm": ckpt_model(sched, load_time=1), "big": big_model(sched)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    assert vd.generate("big").status == 200
    first = vd.first("eviction", model="llm")
    assert after(vd.events("parked", model="llm"), first)["tier"] == "checkpoint"
    m = vd.model("llm")
    assert m["learned_checkpoint_out_ms"] > m["learned_load_ms"] > 0, m

    assert vd.generate("llm").status == 200  # restored (big stopped: no park tier)
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    second = vd.events("eviction", model="llm")[1]
    skipped = after(vd.events("park_skipped", model="llm"), second)
    assert skipped["tier"] == "checkpoint" and skipped["reason"] == "slower_than_reload", skipped
    assert skipped["way_out_ms"] + skipped["way_back_ms"] >= skipped["load_ms"], skipped
    order(second, skipped, after(vd.events("worker_exit", model="llm"), second))
    assert len(vd.events("checkpoint_started", model="llm")) == 1
    assert not any(i["pid"] == pid for i in vd.instances("llm"))
    assert vd.status()["host_memory"]["parked"] == 0 and parked_on_host(sched, gpu) == 0
    vd.assert_no_oom()
    sched.finish()
