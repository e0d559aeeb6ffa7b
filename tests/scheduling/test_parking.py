"""Parking by the server's sleep/wake hooks (issue 13, SPEC 4.1; workers/park.c).

A model with `sleep`/`wake` hooks (vLLM's POST /sleep?level=1 and POST /wake_up, which
simworker serves) is parked instead of stopped: the same process stays up, its weights leave
the GPU (NVML stops showing them) and are booked on the host-memory ledger; a request wakes it
and is served once NVML shows the memory back. What NVML still shows after a sleep is booked on
the GPU and freed by the next tier (stop) when it is needed; a sleep that gives too little back
is escalated at once; a park the host budget cannot afford falls back to the next tier.
"""
from vramdkit import GiB, MiB, sim_s, wait_for

from .schedkit import Watch, after, order

SLEEP = {"method": "POST", "path": "/sleep?level=1"}
WAKE = {"method": "POST", "path": "/wake_up"}


def llm_model(sched, residue=None, flags_extra=(), **over):
    flags = ["--resident", "4GiB", "--per-request", "256MiB", "--run-time", sim_s(1),
             "--sleep-time", sim_s(2), "--wake-time", sim_s(3), *flags_extra]
    if residue:
        flags += ["--sleep-residue", residue]
    over = {"sleep": SLEEP, "wake": WAKE, **over}
    return sched.model("llm", flags, "4.3GiB", "256MiB", **over)


def gpu_held_by(sched, gpu, pid):
    return sum(p["used"] for g in sched.show(gpu)["gpus"] for p in g["processes"] if p["pid"] == pid)


def metric(vd, name, model=None):
    text = vd.get("/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + ("{model=\"%s\"}" % model if model else " ")):
            return float(line.split()[-1])
    raise AssertionError(f"{name} {model} not in /metrics")


def test_admin_unload_parks_and_a_request_wakes_it(sched):
    """Admin unload of a model with sleep/wake parks it: the instance stays (same pid), its
    tier is `sleeping`, NVML shows its weights gone, /v1/status and /metrics show the parked
    bytes on the host budget. A request then waits for the wake (RESUMING until NVML shows the
    memory back) and is served by the same process."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": llm_model(sched)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    loaded = gpu_held_by(sched, gpu, pid)
    assert loaded >= 4 * GiB, loaded

    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    inst = vd.instances("llm")[0]
    assert inst["state"] == "parked" and inst["tier"] == "sleeping", inst
    assert inst["pid"] == pid
    assert 4 * GiB <= inst["parked_bytes"] <= loaded, inst
    assert gpu_held_by(sched, gpu, pid) < 1 * GiB  # only the context stays on the GPU
    st = vd.status()
    assert st["host_memory"]["budget"] == 16 * GiB and st["host_memory"]["source"] == "config"
    assert st["host_memory"]["parked"] == inst["parked_bytes"], st["host_memory"]
    assert vd.model("llm", st)["parked_bytes"] == inst["parked_bytes"]
    assert metric(vd, "vramd_host_memory_parked_bytes", "llm") == inst["parked_bytes"]
    assert metric(vd, "vramd_host_memory_budget_bytes") == 16 * GiB

    with Watch(vd) as watch:
        r = vd.generate("llm")
    assert r.status == 200, r
    # the wake's RESUMING can be shorter than the watch's sampling: the log says it all
    assert vd.events("instance_state", model="llm", **{"from": "parked", "to": "resuming"}), vd.log_tail(40)
    assert not watch.problems, watch.problems[:5]
    inst = vd.instances("llm")[0]
    assert inst["pid"] == pid and inst["state"] == "ready" and inst["tier"] == "resident", inst
    assert inst["parked_bytes"] == 0
    assert gpu_held_by(sched, gpu, pid) >= 4 * GiB  # the weights are back
    assert vd.status()["host_memory"]["parked"] == 0
    parked = vd.first("parked", model="llm")
    wake = after(vd.events("wake_hook_done", model="llm"), parked)
    resumed = after(vd.events("resumed", model="llm"), parked)
    order(vd.first("sleep_hook_done", model="llm"), parked, wake, resumed)
    assert resumed["measured"] >= 4 * GiB, resumed
    assert not vd.events("worker_started", model="llm")[1:], "a second process was started"
    m = vd.model("llm")
    assert m["parking"]["parks_total"] == 1 and m["parking"]["wakes_total"] == 1, m["parking"]
    assert m["learned_wake_ms"] > 0
    sched.finish()


def test_eviction_parks_then_wakes_the_same_process(sched):
    """Two models that do not fit together on 8 GiB: `big` evicts `llm` by its sleep tier
    (not a stop), and `llm`'s next request stops `big` (no sleep tier) and wakes `llm`'s
    same process; both requests are served and nothing OOMs."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {
        "llm": llm_model(sched),
        "big": sched.model("big", ["--resident", "4GiB", "--per-request", "256MiB",
                                   "--run-time", sim_s(1)], "4.3GiB", "256MiB"),
    }, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.generate("big").status == 200
    ev = vd.first("eviction", model="llm")
    assert ev and ev["for"] == "big", ev
    parked = after(vd.events("parked", model="llm"), ev)
    started = vd.first("worker_started", model="big")
    order(ev, parked, started)
    assert vd.instances("llm")[0]["state"] == "parked"

    r = vd.generate("llm")
    assert r.status == 200, r
    assert vd.instances("llm")[0]["pid"] == pid
    ev2 = vd.first("eviction", model="big")
    resumed = after(vd.events("resumed", model="llm"), ev2)
    order(ev2, after(vd.events("worker_exit", model="big"), ev2), resumed)
    vd.assert_no_oom()
    sched.finish()


def test_sleep_leftover_is_booked_then_escalated(sched):
    """vLLM can leave GiBs on the GPU after a sleep. simworker keeps 1 GiB (+ its context):
    the park completes (more than half came back), the leftover stays booked on the GPU
    ledger at what NVML shows; `big`, which does not fit beside that leftover, escalates the
    parked instance to the next tier (stop) and then loads."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {
        "llm": llm_model(sched, residue="1GiB"),
        "big": sched.model("big", ["--resident", "6.7GiB", "--per-request", "256MiB",
                                   "--run-time", sim_s(1)], "7GiB", "256MiB"),
    }, host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    inst = vd.instances("llm")[0]
    assert inst["state"] == "parked", inst
    left = gpu_held_by(sched, gpu, pid)
    assert 1 * GiB <= left < 2 * GiB, left
    wait_for(lambda: vd.instances("llm")[0]["reserved_bytes"] == gpu_held_by(sched, gpu, pid),
             what="the leftover booked at what NVML shows")
    parked = vd.first("parked", model="llm")
    assert parked["left_on_gpu"] >= 1 * GiB, parked

    r = vd.generate("big")
    assert r.status == 200, r
    esc = vd.first("park_escalated", model="llm")
    assert esc is not None
    order(parked, esc, after(vd.events("worker_exit", model="llm"), esc),
          vd.first("worker_started", model="big"))
    assert vd.status()["host_memory"]["parked"] == 0  # released when it stopped
    vd.assert_no_oom()
    sched.finish()


def test_sleep_that_frees_too_little_is_escalated(sched):
    """A sleep that keeps 3.5 of 4.3 GiB does not give enough back within stop_timeout (500 ms): the
    instance goes to the next tier at once (stopped), nothing stays booked on the host."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": llm_model(sched, residue="3.5GiB", stop_timeout="500ms")},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    wait_for(lambda: not vd.instances("llm"), what="llm stopped after its sleep kept too much")
    esc = vd.first("park_escalated", model="llm")
    assert esc and "too little" in esc["reason"], esc
    assert not vd.events("parked", model="llm")
    assert vd.status()["host_memory"]["parked"] == 0
    sched.finish()


def test_host_budget_exhausted_falls_back_to_stop(sched):
    """A host budget of 2 GiB cannot hold llm's 4 GiB: the park is refused (park_refused,
    counted) and eviction takes the next tier, a stop; `big` loads and is served."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {
        "llm": llm_model(sched),
        "big": sched.model("big", ["--resident", "4GiB", "--per-request", "256MiB",
                                   "--run-time", sim_s(1)], "4.3GiB", "256MiB"),
    }, host_memory={"budget": "2GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    assert vd.generate("big").status == 200
    refused = vd.first("park_refused", model="llm")
    assert refused and refused["reason"] == "over_budget", refused
    ev = vd.first("eviction", model="llm")
    order(ev, refused, after(vd.events("worker_exit", model="llm"), ev))
    assert not vd.events("sleep_hook_done", model="llm")
    st = vd.status()
    assert st["host_memory"]["refused"] >= 1 and st["host_memory"]["parked"] == 0, st["host_memory"]
    assert vd.model("llm", st)["parking"]["refused_total"] >= 1
    vd.assert_no_oom()
    sched.finish()


def test_external_server_sleeps_and_wakes(sched):
    """An external server (url:) with sleep/wake and no unload hook: the admin unload parks
    it (allowed without an unload hook), a request wakes it and is served."""
    gpu = sched.gpu_set("8GiB")
    ext = sched.external(gpu, "extllm", ["--resident", "3GiB", "--per-request", "256MiB",
                                         "--run-time", sim_s(1), "--sleep-time", sim_s(1),
                                         "--wake-time", sim_s(1)])
    vd = sched.start_vramd(gpu, {"extllm": sched.external_model(
        "extllm", ext, "3.3GiB", "256MiB", sleep=SLEEP, wake=WAKE)},
        host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("extllm").status == 200
    r = vd.post("/v1/models/extllm/unload")
    assert r.status == 200, r
    inst = vd.instances("extllm")[0]
    assert inst["tier"] == "sleeping" and inst["parked_bytes"] >= 3 * GiB - 64 * MiB, inst
    assert gpu_held_by(sched, gpu, ext.pid) < 1 * GiB
    assert vd.generate("extllm").status == 200
    assert vd.instances("extllm")[0]["tier"] == "resident"
    assert gpu_held_by(sched, gpu, ext.pid) >= 3 * GiB
    assert not ext.oom_lines()
    sched.finish()


def test_parked_worker_that_dies_gives_its_host_memory_back(sched):
    """A parked supervised worker killed from outside (SIGKILL): its exit is a crash like any
    other, its host-memory entry is released with it (nothing stays booked), its GPU entry
    after NVML shows the memory gone, and the next request starts a new worker."""
    import os
    import signal
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": llm_model(sched)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.post("/v1/models/llm/unload").status == 200
    assert vd.status()["host_memory"]["parked"] > 0
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not vd.instances("llm"), what="the killed parked worker gone")
    assert vd.status()["host_memory"]["parked"] == 0
    exited = vd.first("worker_exit", model="llm")
    assert exited["state"] == "parked" and exited["expected"] is False, exited
    r = vd.generate("llm")
    assert r.status == 200, r
    assert vd.instances("llm")[0]["pid"] != pid
    sched.finish()


def test_wake_that_fails_restarts_the_worker(sched):
    """A wake hook that fails (404 here) stops the parked worker (a failure counted, like a
    failed reload) and the waiting request is served by a fresh start; nothing is booked
    twice: the host book is empty and the ledger returns to resident reservations."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": llm_model(sched, wake={"method": "POST", "path": "/no_such_wake"})},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    assert vd.post("/v1/models/llm/unload").status == 200
    r = vd.generate("llm")
    assert r.status == 200, r
    failed = vd.first("wake_failed", model="llm")
    assert failed and failed["reason"] == "wake hook failed", failed
    inst = vd.instances("llm")
    assert len(inst) == 1 and inst[0]["pid"] != pid and inst[0]["tier"] == "resident", inst
    assert vd.model("llm")["restarts_total"] == 1
    assert vd.status()["host_memory"]["parked"] == 0
    sched.finish()


def test_external_server_left_asleep_is_woken_at_start(sched):
    """A vramd that stopped while an external server was parked leaves it asleep. The next
    vramd calls its wake hook when it finds it (before its first request): the request is
    served, not answered 503 "models unloaded" by the sleeping server."""
    from vramdkit.net import request
    gpu = sched.gpu_set("8GiB")
    ext = sched.external(gpu, "asleep", ["--resident", "3GiB", "--per-request", "256MiB",
                                         "--run-time", sim_s(1), "--sleep-time", sim_s(1),
                                         "--wake-time", sim_s(2)])
    r = request(ext.port, "POST", "/sleep?level=1", body={})
    assert r.status == 200, r
    assert gpu_held_by(sched, gpu, ext.pid) < 1 * GiB
    vd = sched.start_vramd(gpu, {"asleep": sched.external_model(
        "asleep", ext, "3.3GiB", "256MiB", sleep=SLEEP, wake=WAKE)},
        host_memory={"budget": "16GiB", "reserve": 0})
    r = vd.generate("asleep")
    assert r.status == 200, r
    woke = vd.first("wake_hook_done", model="asleep")
    assert woke and woke["status"] == 200, woke
    order(woke, vd.first("resumed", model="asleep"), vd.first("request_done", model="asleep"))
    assert gpu_held_by(sched, gpu, ext.pid) >= 3 * GiB
    assert vd.status()["host_memory"]["parked"] == 0
    sched.finish()


def test_deadline_of_a_parked_model_counts_its_wake_not_its_load(sched):
    """A parked model comes back by a wake (150 ms here), not a load (2 s): a request whose
    deadline (1 s) is shorter than the learned load time but longer than the wake is admitted
    and served, not refused 503 deadline_unmeetable."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": llm_model(sched, flags_extra=["--load-time", sim_s(40)])},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    assert vd.model("llm")["learned_load_ms"] >= 1500
    assert vd.post("/v1/models/llm/unload").status == 200
    r = vd.generate("llm", headers={"X-Vramd-Deadline": "1s"})
    assert r.status == 200, r
    sched.finish()
