"""Residue: a worker whose /unload_models/ does not give all its memory back.

vramd evicts through the unload hook, then watches NVML until the memory is back, or until
the usage stops falling short of that (bounded by stop_timeout plus a grace period). When it
does not come back, a supervised worker is killed, and only once NVML shows the dead
process's memory returned does the next model load; an external server is marked failed.
"""
from vramdkit import GiB, sim_s, wait_for

from .schedkit import Watch, after, order


def test_unload_residue_supervised_worker_is_killed_before_next_load(sched):
    """16 GiB card. Model `leaky` (8 GiB resident, unload hook) keeps 5 GiB after
    /unload_models/; model `big` needs 10 GiB + 1 GiB, which does not fit beside 5.3 GiB.
    A request for `big`: eviction(leaky) -> unload_hook_done -> (leaky stays `unloading`
    while vramd watches NVML) -> reclaim_incomplete or reclaim_timeout -> worker_kill
    (SIGKILL of leaky's pid) -> worker_exit -> memory_reclaimed (after the simulated
    driver's release delay) -> worker_started(big). The request succeeds and no worker
    reports OOM (big would OOM at load if it started beside the residue)."""
    gpu = sched.gpu_set("16GiB", release_delay="4s")
    models = {
        "leaky": sched.model("leaky", [
            "--resident", "7.7GiB", "--per-request", "512MiB", "--unload-residue", "5GiB",
            "--run-time", sim_s(2), "--unload-time", sim_s(1)], "8GiB", "512MiB",
            stop_timeout="1s",
            unload={"method": "POST", "path": "/unload_models/"},
            reload={"method": "POST", "path": "/reload_models/"}),
        "big": sched.model("big", ["--resident", "9.7GiB", "--per-request", "1GiB",
                                   "--run-time", sim_s(2)], "10GiB", "1GiB"),
    }
    vd = sched.start_vramd(gpu, models)
    r = vd.generate("leaky")
    assert r.status == 200, r
    leaky_pid = vd.instances("leaky")[0]["pid"]

    with Watch(vd) as watch:
        r = vd.generate("big")
    assert r.status == 200, r
    # while vramd waited for the residue to come back, leaky was `unloading`
    assert vd.events("instance_state", model="leaky", to="unloading"), vd.log_tail(40)
    assert not watch.problems, watch.problems[:5]

    ev = vd.first("eviction", model="leaky")
    assert ev and ev["for"] == "big", ev
    unload = after(vd.events("unload_hook_done", model="leaky"), ev)
    # vramd gives up waiting either when the usage stops falling short of the goal
    # (reclaim_incomplete) or when stop_timeout + grace has passed (reclaim_timeout)
    gave_up = after(sorted(vd.events("reclaim_incomplete", model="leaky") +
                           vd.events("reclaim_timeout", model="leaky"), key=lambda e: e["_i"]), ev)
    kill = after(vd.events("worker_kill", model="leaky"), ev)
    exited = after(vd.events("worker_exit", model="leaky"), ev)
    reclaimed = after(vd.events("memory_reclaimed", model="leaky"), ev)
    started = vd.first("worker_started", model="big")
    order(ev, unload, gave_up, kill, exited, reclaimed, started)
    assert unload["status"] == 200
    assert kill["pid"] == leaky_pid
    assert exited["signal"] == 9, exited
    assert gave_up["still_held"] >= 5 * GiB, gave_up
    # the dead process's memory stays for the release delay (0.2 s real): vramd waited for it
    assert reclaimed["wait_ms"] >= 100, reclaimed
    vd.assert_no_oom()
    sched.finish()


def test_unload_residue_external_server_is_marked_failed(sched):
    """The same residue from an external server (url:, unload/reload hooks), which vramd
    cannot kill: after unload_hook_done and a reclaim that never completes, the model is
    `failed` (its reason says the memory did not come back) and `big`, which would OOM beside
    the residue, is not started: its request gets 504 deadline_exceeded. Once the external
    server exits and NVML shows its memory gone, the ledger stops counting it and a new
    request for big loads it and succeeds."""
    gpu = sched.gpu_set("16GiB")
    ext = sched.external(gpu, "leakyext", [
        "--resident", "7.7GiB", "--per-request", "512MiB", "--unload-residue", "5GiB",
        "--run-time", sim_s(2), "--unload-time", sim_s(1)])
    vd = sched.start_vramd(gpu, {
        "leakyext": sched.external_model(
            "leakyext", ext, "8GiB", "512MiB",
            unload={"method": "POST", "path": "/unload_models/"},
            reload={"method": "POST", "path": "/reload_models/"}),
        "big": sched.model("big", ["--resident", "9.7GiB", "--per-request", "1GiB",
                                   "--run-time", sim_s(2)], "10GiB", "1GiB"),
    })
    assert vd.generate("leakyext").status == 200
    r = vd.generate("big", headers={"X-Vramd-Deadline": "3s"})
    assert r.status == 504 and r.error_body().get("code") == "deadline_exceeded", r
    assert not vd.events("worker_started", model="big")
    ev = vd.first("eviction", model="leakyext")
    assert ev and ev["for"] == "big", ev
    unload = after(vd.events("unload_hook_done", model="leakyext"), ev)
    gave_up = after(sorted(vd.events("reclaim_incomplete", model="leakyext") +
                           vd.events("reclaim_timeout", model="leakyext"), key=lambda e: e["_i"]), ev)
    order(ev, unload, gave_up)
    m = vd.model("leakyext")
    assert m["state"] == "failed", m
    assert "memory" in m.get("failed_reason", ""), m

    ext.close()  # the server goes away, and its memory with it
    wait_for(lambda: not [p for g in sched.show(gpu)["gpus"] for p in g["processes"]
                          if p["pid"] == ext.pid], what="the external's memory gone from the GPU")
    r = vd.generate("big", headers={"X-Vramd-Deadline": "6s"})
    assert r.status == 200, (r, vd.status()["gpus"][0]["ledger"])
    assert not ext.oom_lines()
    vd.assert_no_oom()
    sched.finish()
