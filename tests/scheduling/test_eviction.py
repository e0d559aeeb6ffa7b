"""Eviction order: which idle model makes room when a new one must load.

Each model here is 6 GiB resident (simworker 5.7 GiB + 300 MiB context) and 1 GiB per
request; on a 16 GiB card (15.875 GiB after headroom) two fit with room for a request, three
do not. SPEC 4: evict idle instances (nothing running or queued, not pinned), lowest priority
first, then least recently used; never one with a request in flight; never a pinned one.
"""
from vramdkit import sim_s

from .schedkit import Watch, after, order


def six_gib(sched, name, run_s=2, load_s=0, **extra):
    return sched.model(name, ["--resident", "5.7GiB", "--per-request", "1GiB", "--cache", "release",
                              "--run-time", sim_s(run_s), "--load-time", sim_s(load_s)], "6GiB", "1GiB", **extra)


def evicted(vd):
    return [(e["model"], e["for"]) for e in vd.events("eviction")]


def test_eviction_takes_lowest_priority_first(sched):
    """low (priority 2), high (priority 7), mid (priority 5). high is used first, then low,
    so low is the most recently used: a request for mid still evicts low (priority before
    recency), and only low."""
    gpu = sched.gpu_set("16GiB")
    vd = sched.start_vramd(gpu, {"low": six_gib(sched, "low", priority=2),
                                 "high": six_gib(sched, "high", priority=7),
                                 "mid": six_gib(sched, "mid", priority=5)})
    for name in ("high", "low", "mid"):
        r = vd.generate(name)
        assert r.status == 200, f"{name}: {r}"
    assert evicted(vd) == [("low", "mid")], evicted(vd)
    st = vd.status()
    assert vd.model("high", st)["state"] == "ready"
    assert vd.model("low", st)["state"] == "stopped"
    vd.assert_no_oom()
    sched.finish()


def test_eviction_with_equal_priorities_takes_least_recently_used(sched):
    """a, b, c with the same priority, used in the order a, b, c, a: loading c evicts a
    (least recently used), then loading a again evicts b (used before c). Recency decides
    only between equal costs: the reload each eviction would cost is the model's learned
    load time, so the three load for 2 s (real) each, polled every 20 ms, and their learned
    times stay within the placer's 10 % of each other (with no load time, a start of 100 ms
    against one of 200 ms, a health poll apart on a loaded machine, made b the cheaper
    eviction)."""
    gpu = sched.gpu_set("16GiB")
    health = {"path": "/health", "interval": "20ms", "timeout": "2s", "failures": 3}
    vd = sched.start_vramd(gpu, {n: six_gib(sched, n, load_s=40, health=health) for n in ("a", "b", "c")})
    for name in ("a", "b", "c", "a"):
        r = vd.generate(name)
        assert r.status == 200, f"{name}: {r}"
    assert evicted(vd) == [("a", "c"), ("b", "a")], evicted(vd)
    vd.assert_no_oom()
    sched.finish()


def test_pinned_and_busy_models_are_never_evicted(sched):
    """pinned (keep_alive: forever) loads at startup and is never used, so it is the least
    recently used; a request for `busy` evicts `other`, not pinned. Then a long request
    runs on busy and `other` is requested again: neither pinned nor busy (request in
    flight) may go, so `other` waits (queued, no eviction) until busy's request ends; then
    busy is evicted and other loads. Every request succeeds."""
    gpu = sched.gpu_set("16GiB")
    vd = sched.start_vramd(gpu, {"pinned": six_gib(sched, "pinned", keep_alive="forever"),
                                 "other": six_gib(sched, "other"),
                                 "busy": six_gib(sched, "busy", run_s=30)})
    vd.wait_ready("pinned")
    assert vd.generate("other").status == 200
    assert vd.generate("busy").status == 200
    assert evicted(vd) == [("other", "busy")], evicted(vd)

    with Watch(vd) as watch:
        long_run = vd.later("busy")
        vd.wait_in_flight("busy")
        waiting = vd.later("other")
        vd.wait_queued("other")
        # busy's request is still running: nothing may be evicted for other yet
        st = vd.status()
        assert vd.model("busy", st)["in_flight"] == 1, vd.model("busy", st)
        assert evicted(vd) == [("other", "busy")], evicted(vd)
        assert long_run.result().status == 200
        r = waiting.result()
        assert r.status == 200, r
    assert not watch.problems, watch.problems[:5]
    assert evicted(vd) == [("other", "busy"), ("busy", "other")], evicted(vd)
    busy_done = vd.events("request_done", model="busy")[-1]
    ev = vd.events("eviction", model="busy")[0]
    started = after(vd.events("worker_started", model="other"), ev)
    order(busy_done, ev, started)
    assert "stopping" not in watch.states.get("pinned", set())
    assert vd.model("pinned")["state"] == "ready"
    vd.assert_no_oom()
    sched.finish()


def test_admin_load_evicts_an_idle_model_like_a_request_would(sched):
    """An admin load with nothing queued must get memory the way a request does: pinned and
    other are loaded, `busy` evicts other; then `POST /v1/models/other/load` (no request
    queued) must evict the idle busy and answer 200, not wait forever."""
    gpu = sched.gpu_set("16GiB")
    vd = sched.start_vramd(gpu, {"pinned": six_gib(sched, "pinned", keep_alive="forever"),
                                 "other": six_gib(sched, "other"),
                                 "busy": six_gib(sched, "busy")})
    vd.wait_ready("pinned")
    assert vd.generate("other").status == 200
    assert vd.generate("busy").status == 200
    assert evicted(vd) == [("other", "busy")], evicted(vd)
    loads_before = vd.model("other")["loads_total"]
    r = vd.post("/v1/models/other/load", timeout=30)
    assert r.status == 200, r
    st = vd.status()
    assert vd.model("other", st)["state"] == "ready"
    assert vd.model("other", st)["loads_total"] == loads_before + 1  # one load, counted once
    assert vd.model("busy", st)["state"] == "stopped"
    vd.assert_no_oom()
    sched.finish()


def test_no_eviction_for_memory_the_instance_itself_just_cached(sched):
    """24 GiB card. chat (6 GiB + 1.5 GiB, keeps its cache: ~7.5 GiB held) is idle; mesh
    (6 GiB + 8 GiB, keeps its cache) runs two requests back to back. When the first ends,
    the 8 GiB it allocated are assumed cached but not yet measured; the second request can
    reuse them. vramd must measure first (one NVML poll) rather than evict chat for
    memory mesh already holds: no eviction at all, and both stay loaded."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "chat": sched.model("chat", ["--resident", "5.7GiB", "--per-request", "1.5GiB", "--cache", "keep",
                                     "--run-time", sim_s(1)], "6GiB", "1.5GiB"),
        "mesh": sched.model("mesh", ["--resident", "5.7GiB", "--per-request", "8GiB", "--cache", "keep",
                                     "--run-time", sim_s(10)], "6GiB", "8GiB"),
    })
    assert vd.generate("chat").status == 200
    first = vd.later("mesh")
    vd.wait_in_flight("mesh")
    second = vd.later("mesh")
    vd.wait_queued("mesh")
    assert first.result().status == 200
    assert second.result().status == 200
    assert evicted(vd) == [], evicted(vd)
    st = vd.status()
    assert vd.model("chat", st)["state"] == "ready" and vd.model("mesh", st)["state"] == "ready"
    vd.assert_no_oom()
    sched.finish()
