"""Models that take turns on a card (issue 35; sched/sched_turn.c).

Three simulated models that each need most of a 24 GiB card (15.5 GiB resident + 2 GiB a
request, 10 s load, 1 s run, concurrency 1, no park tier): requests for them interleaved are
served in batches, one load per model, instead of a load per request; a bound (max_wait)
holds against an endless stream of another model; a deadline-bound request goes first.
Loads are counted from vramd's log (worker_started, and reloads).
"""
import random
import threading
import time

from vramdkit import sim_s

LOAD_S, RUN_S = 10, 1


def turn_model(sched, name, **over):
    return sched.model(name, ["--resident", "15.3GiB", "--per-request", "2GiB", "--cache", "release",
                              "--load-time", sim_s(LOAD_S), "--run-time", sim_s(RUN_S)],
                       "15.5GiB", "2GiB", **over)


def loads(vd, name):
    return len(vd.events("worker_started", model=name))


def test_interleaved_burst_is_served_in_batches(sched):
    gpu = sched.gpu_set("24GiB")
    names = ["a", "b", "c"]
    vd = sched.start_vramd(gpu, {n: turn_model(sched, n) for n in names})
    rnd = random.Random(35)
    order = [rnd.choice(names) for _ in range(18)]
    futs = []
    for n in order:
        futs.append(vd.later(n))
        time.sleep(0.01)  # arrival order is the list's
    for f in futs:
        r = f.result()
        assert r.status == 200, r
    per_model = {n: loads(vd, n) for n in names}
    assert sum(per_model.values()) == 3, (per_model, order)
    vd.assert_no_oom()
    sched.finish()


def busy_a_then_b(sched, b_headers, a_requests=10, a_run_s=20):
    """a loaded and busy with a queue of a_requests (a_run_s each, simulated); then one
    request for b (which must take the card from a) with b_headers. Returns (vd, a's
    futures, b's response, b's latency in s)."""
    gpu = sched.gpu_set("24GiB")
    a = sched.model("a", ["--resident", "15.3GiB", "--per-request", "2GiB", "--cache", "release",
                          "--load-time", sim_s(LOAD_S), "--run-time", sim_s(a_run_s)], "15.5GiB", "2GiB")
    vd = sched.start_vramd(gpu, {"a": a, "b": turn_model(sched, "b")})
    assert vd.generate("b").status == 200  # b's load time learned, then a takes the card
    assert vd.generate("a").status == 200
    futs = [vd.later("a") for _ in range(a_requests)]
    vd.wait_in_flight("a")
    vd.wait_queued("a", a_requests - 1)
    t0 = time.monotonic()
    rb = vd.generate("b", headers=b_headers)
    return vd, futs, rb, time.monotonic() - t0


def test_a_request_whose_deadline_would_be_missed_goes_first(sched):
    """a's queue holds 14 s of work (real); b's request may wait 8 s. b's swap is due once
    what is left of its deadline no longer covers its load, its run and a's running request:
    b claims the card (swap=deadline), a's queued requests are held back (only the one
    running finishes), a is evicted, b is served in time; then a comes back for the rest."""
    vd, futs, rb, _ = busy_a_then_b(sched, {"X-Vramd-Deadline": "8s"}, a_requests=14)
    assert rb.status == 200, rb  # vramd answers 504 deadline_exceeded otherwise
    claimed = vd.events("memory_claimed", model="b")
    assert claimed and claimed[-1].get("swap") == "deadline", claimed
    for f in futs:
        assert f.result().status == 200
    assert loads(vd, "a") >= 2  # evicted for b, started again for the rest of its queue
    vd.assert_no_oom()
    sched.finish()


def test_a_higher_priority_model_takes_the_card_without_waiting_for_the_queue(sched):
    """The same scene with no deadline on b but a higher priority (X-Vramd-Priority 9 over
    a's 5): b's swap is due at once (swap=priority) and b is served after a's running
    request and b's load, not after a's whole queue (10 s)."""
    vd, futs, rb, _ = busy_a_then_b(sched, {"X-Vramd-Priority": "9"})
    assert rb.status == 200, rb
    claimed = vd.events("memory_claimed", model="b")
    assert claimed and claimed[-1].get("swap") == "priority", claimed
    for f in futs:
        assert f.result().status == 200
    a_done_before_b = [e for e in vd.events("request_done", model="a") if e["_i"] < vd.events("request_done", model="b")[-1]["_i"]]
    assert len(a_done_before_b) <= 3, len(a_done_before_b)  # b's learned one, the warm one, the running one
    vd.assert_no_oom()
    sched.finish()


def test_max_wait_bounds_the_wait_against_an_endless_stream(sched):
    """a's queue never runs dry (three clients back to back, concurrency 1). b (max_wait 2s)
    waits its turn, not forever: once its request has waited past its bound it claims the
    card (swap=bound, waited_ms past 2 s), a serves only what it had queued by then (one
    batch: at most its three clients' requests), a is evicted, b is served while a's stream
    still runs."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"a": turn_model(sched, "a"), "b": turn_model(sched, "b", max_wait="2s")})
    assert vd.generate("b").status == 200  # b's load time learned
    stop = threading.Event()
    done = []

    def client():
        while not stop.is_set():
            done.append(vd.generate("a").status)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        vd.wait_in_flight("a")
        vd.wait_queued("a", 2)
        rb = vd.generate("b")
        a_now = vd.model("a")
        still = a_now["queue"]["depth"] + a_now["in_flight"] > 0
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert rb.status == 200, rb
    assert still
    claimed = [e for e in vd.events("memory_claimed", model="b") if e.get("swap")]
    assert claimed and claimed[-1]["swap"] == "bound" and claimed[-1]["waited_ms"] >= 2000, claimed
    ev = [e for e in vd.events("eviction", model="a") if e["for"] == "b"]
    assert ev, "a was never evicted for b"
    batch = [e for e in vd.events("request_done", model="a") if claimed[-1]["_i"] < e["_i"] < ev[-1]["_i"]]
    assert len(batch) <= 4, len(batch)  # what a had queued at the claim (3 clients) and the one running
    assert all(s == 200 for s in done), done
    vd.assert_no_oom()
    sched.finish()


def test_idle_only_model_never_takes_a_card_from_work(sched):
    """embed (evicts: idle_only) waits while a has work, however long; once a is idle (its
    queue served), embed takes the card; it never claims."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"a": turn_model(sched, "a"),
                                 "embed": turn_model(sched, "embed", evicts="idle_only", max_wait="1s")})
    assert vd.generate("a").status == 200
    futs = [vd.later("a") for _ in range(8)]
    vd.wait_queued("a", 3)
    re = vd.generate("embed")
    assert re.status == 200, re
    for f in futs:
        assert f.result().status == 200
    assert not vd.events("memory_claimed", model="embed")
    ev = [e for e in vd.events("eviction", model="a") if e["for"] == "embed"]
    a_done = vd.events("request_done", model="a")
    assert ev and all(e["_i"] < ev[0]["_i"] for e in a_done), "embed evicted a before its queue was served"
    vd.assert_no_oom()
    sched.finish()


def test_alias_is_served_by_the_loaded_model(sched):
    """chat-any (alias_of: [a, b]): with a loaded, requests for chat-any (its route, or a
    body naming it) go to a, no load of b; with b loaded instead, to b. A target with
    pin_model is reached through the alias too (the body's model is renamed)."""
    gpu = sched.gpu_set("24GiB")
    models = {"a": turn_model(sched, "a"), "b": turn_model(sched, "b", served_model="bee", pin_model=True),
              "chat-any": {"alias_of": ["a", "b"], "route": "/any/"}}
    vd = sched.start_vramd(gpu, models)
    assert vd.generate("a").status == 200
    for _ in range(3):
        assert vd.post("/any/generate", {}).status == 200
    assert loads(vd, "b") == 0
    assert len(vd.events("request_done", model="a")) == 4
    assert vd.generate("b").status == 200  # b takes the card (a idle)
    r = vd.post("/v1/chat/completions", {"model": "chat-any", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200, r
    assert len(vd.events("request_done", model="b")) == 2
    assert loads(vd, "a") == 1
    vd.assert_no_oom()
    sched.finish()


def test_idle_model_comes_back_when_the_card_falls_idle(sched):
    """gpu.idle_model: a; idle_model_after: 1s. b takes the card (a is evicted); once the card
    has been idle for a second, a is brought back (idle_model_back) and stays past its
    keep_alive."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"a": turn_model(sched, "a", keep_alive="1s"), "b": turn_model(sched, "b")},
                           gpu={"idle_model": "a", "idle_model_after": "1s"})
    vd.wait_event("idle_model_back", model="a", timeout=20)
    vd.wait_model("a", lambda m: any(i["state"] == "ready" for i in m.get("instances", [])), 20, "a ready")
    assert vd.generate("b").status == 200
    assert [e for e in vd.events("eviction", model="a") if e["for"] == "b"]
    before = len(vd.events("idle_model_back", model="a"))
    vd.wait_model("a", lambda m: any(i["state"] == "ready" for i in m.get("instances", [])), 30, "a back")
    assert len(vd.events("idle_model_back", model="a")) == before + 1
    time.sleep(2.5)  # past a's keep_alive of 1 s: still loaded, it is the card's idle model
    assert any(i["state"] == "ready" for i in vd.instances("a"))
    vd.assert_no_oom()
    sched.finish()


def test_status_shows_the_turns(sched):
    """/v1/status: a model's resolved max_wait and evicts, a GPU's claim, swaps by reason and
    idle model, the alias_of entries with the model serving them now."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"a": turn_model(sched, "a", max_wait="3s"),
                                 "b": turn_model(sched, "b", evicts="idle_only"),
                                 "both": {"alias_of": ["b", "a"], "route": "/both/"}},
                           gpu={"idle_model": {"0": "b"}, "idle_model_after": "1h"})
    assert vd.generate("a").status == 200
    assert vd.generate("b").status == 200  # a idle: b takes the card (swap, reason idle)
    st = vd.status()
    a, b = vd.model("a", st), vd.model("b", st)
    assert a["max_wait_ms"] == 3000 and a["max_wait_auto"] is False and a["evicts"] == "any", a
    assert b["max_wait_auto"] is True and b["max_wait_ms"] >= 60000 and b["evicts"] == "idle_only", b
    g = st["gpus"][0]
    assert g["idle_model"] == "b" and g["claim"] is None, g
    assert g["swaps"]["idle"] == 1 and g["swap_seconds"] > 0, g
    assert set(g["swaps"]) == {"idle", "bound", "deadline", "priority", "memory"}, g
    assert st["alias_of"] == [{"name": "both", "route": "/both/", "targets": ["b", "a"], "serving": "b"}], st["alias_of"]
    sched.finish()
