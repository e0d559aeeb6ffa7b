"""Cached memory and claims: the clear_cache tier before an eviction, and a busy instance's
cache given back to an older claimant (issue 13, bench/scheduling's mixed-80gb burst).

`mesh` is a PyTorch-like server (simworker --cache keep) with a clear_cache hook whose
process keeps 12 GiB of allocator cache (one 12 GiB request at warm-up; its requests then
take 6 GiB); `big` needs 10 GiB per request. On a 24 GiB card, big fits only once mesh's
cache is given back.
"""
import json
import time

from vramdkit import sim_s, wait_for
from vramdkit.harness import REQUEST_TIMEOUT

from .schedkit import order

GiB = 1 << 30
CLEAR = {"method": "POST", "path": "/clear_cache/"}


def _start(sched, mesh_run_s, mesh_concurrency, clear_cache=None, mesh_flags=()):
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "mesh": sched.model("mesh", ["--resident", "1.7GiB", "--per-request", "6GiB", "--cache", "keep",
                                     "--mem-scale", "size:1:1", "--run-time", sim_s(mesh_run_s), *mesh_flags],
                            "2GiB", "6GiB", concurrency=mesh_concurrency, priority=5,
                            clear_cache=clear_cache or CLEAR),
        "big": sched.model("big", ["--resident", "1.7GiB", "--per-request", "10GiB", "--cache", "release",
                                   "--run-time", sim_s(10)], "2GiB", "10GiB", priority=3),
    })
    assert vd.generate("big").status == 200  # loaded, idle: 2 GiB
    # one request twice the usual size leaves 12 GiB cached in mesh's process (measured:
    # vramd booked 6 GiB for it; the simulated card has the room)
    assert vd.generate("mesh", {"size": 2}).status == 200
    wait_for(lambda: vd.instances("mesh")[0]["reserved_bytes"] >= 13 * GiB, what="mesh booked with its 12 GiB cache")
    return vd


def test_cache_cleared_instead_of_evicting(sched):
    """big's request does not fit (7.5 GiB free) while mesh sits idle with 12 GiB cached:
    vramd asks mesh for its cache (clear_instead_of_evicting, clear_cache) and big runs once
    the reading shows it back; mesh is not evicted (same worker, no eviction logged), where
    before this the placer evicted (stopped) mesh and it reloaded for its next request."""
    vd = _start(sched, 1, 1)
    pid = vd.worker_pids("mesh")[0]
    assert vd.generate("big").status == 200
    ev = vd.first("clear_instead_of_evicting", model="big")
    assert ev, "big was admitted without asking for mesh's cache: the scene did not happen"
    order(ev, vd.first("clear_cache", model="mesh"), vd.first("clear_cache_done", model="mesh"))
    assert not vd.events("eviction"), vd.events("eviction")
    assert vd.worker_pids("mesh") == [pid]
    assert vd.generate("mesh").status == 200
    vd.assert_no_oom()
    sched.finish()


def hook_calls_metric(vd, model, hook, outcome):
    """vramd_hook_calls_total{model,hook,outcome} from /metrics; 0 when the series is absent."""
    series = f'vramd_hook_calls_total{{model="{model}",hook="{hook}",outcome="{outcome}"}} '
    for line in vd.get("/metrics").body.decode().splitlines():
        if line.startswith(series):
            return float(line.split()[-1])
    return 0.0


def test_cache_cleared_by_the_scheduler_gets_the_hook_body(sched):
    """The scene above with a clear_cache hook that has a body: the scheduler's clear (not a
    park's: no park_clear_cache) reaches the worker with that body (simworker logs hook_called
    with it; before issue 19 the scheduler built its own call and sent none), and the call is
    counted in vramd_hook_calls_total{hook="clear_cache",outcome="ok"}."""
    body = {"mode": "aggressive", "devices": [0]}
    vd = _start(sched, 1, 1, clear_cache={**CLEAR, "body": body}, mesh_flags=("--log-format", "json"))
    assert hook_calls_metric(vd, "mesh", "clear_cache", "ok") == 0
    assert vd.generate("big").status == 200
    assert vd.first("clear_instead_of_evicting", model="big"), "big fitted at once: the scene did not happen"
    vd.wait_event("clear_cache_done", model="mesh")
    assert not vd.events("park_clear_cache"), "a park's clear, not the scheduler's"
    calls = [json.loads(line) for line in vd.worker_lines("mesh") if '"hook_called"' in line]
    assert calls, "the worker logged no hook call"
    assert all(c["path"] == "/clear_cache" for c in calls), calls
    assert all(c["body"] and json.loads(c["body"]) == body for c in calls), calls
    assert hook_calls_metric(vd, "mesh", "clear_cache", "ok") == len(vd.events("clear_cache_done", model="mesh")) >= 1
    assert not vd.events("eviction"), vd.events("eviction")
    vd.assert_no_oom()
    sched.finish()


def test_younger_request_does_not_lock_cache_an_older_claimant_needs(sched):
    """mesh (concurrency 1) runs A1 on 6 of its 12 cached GiB; big's request B arrives, does
    not fit, and claims the memory; then A2 arrives, younger than B. When A1 ends, A2 would
    run on mesh's cache and keep the other 6 GiB locked in a busy instance, so B (10 GiB)
    would wait for mesh's whole queue. Now A2 yields: mesh is idle, its cache is cleared, B
    runs, and A2 runs beside B on fresh memory: B answers before A2 (before the fix, after)."""
    vd = _start(sched, 40, 1)  # 2 s real per mesh request
    a1 = vd.later("mesh")
    vd.wait_in_flight("mesh")
    t0 = time.monotonic()
    b = vd.later("big", timeout=REQUEST_TIMEOUT)
    vd.wait_event("memory_claimed", model="big", timeout=10)
    assert time.monotonic() - t0 < 1.9, "big claimed only after A1 ended: the scene did not happen"
    a2 = vd.later("mesh")
    for name, f in (("A1", a1), ("B", b), ("A2", a2)):
        r = f.result()
        assert r.status == 200, (name, r)
    big_done = vd.events("request_done", model="big")[-1]
    mesh_done = vd.events("request_done", model="mesh")
    assert len(mesh_done) == 3, mesh_done
    order(mesh_done[1], big_done, mesh_done[2])  # A1, then B, then A2: B did not wait for A2
    assert not vd.events("eviction"), vd.events("eviction")
    assert vd.first("clear_instead_of_evicting", model="big"), "big never asked for mesh's cache"
    vd.assert_no_oom()
    sched.finish()


def test_request_right_after_a_clear_is_not_taken_for_growth(sched):
    """recycle.max_growth 1GiB, a clear_cache hook, --cache keep: an idle worker holding a
    request's 6 GiB of cache is asked for it (the growth check clears first). A request that
    arrives right after that clear takes 6 GiB again; when it ends, its cache is cache, not
    growth: no worker_recycle (before the fix, the reading after it ended was taken as
    "cleared, still grown" and the healthy worker was recycled)."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "gen": sched.model("gen", ["--resident", "1.7GiB", "--per-request", "6GiB", "--cache", "keep",
                                   "--run-time", sim_s(4)], "2GiB", "6GiB", clear_cache=CLEAR,
                           recycle={"max_growth": "1GiB"}),
    })
    assert vd.generate("gen").status == 200
    vd.wait_event("clear_cache", model="gen", timeout=10)
    assert vd.generate("gen").status == 200  # takes the cache again right after the clear
    wait_for(lambda: len(vd.events("clear_cache_done", model="gen")) >= 2 or vd.events("worker_recycle"),
             timeout=10, what="the cache the second request left asked back, or a recycle")
    time.sleep(0.3)  # a few readings after it
    assert not vd.events("worker_recycle"), vd.events("worker_recycle")
    assert len(vd.worker_pids("gen")) == 1
    vd.assert_no_oom()
    sched.finish()


def test_hook_that_frees_nothing_does_not_hold_a_pinned_model_back(sched):
    """The scene of the test above, with mesh pinned (keep_alive forever: never evicted) and
    a clear_cache hook that answers 200 and frees nothing (GET /health). A2 yields to big's
    claim once, the hook is called, the readings after it still show the cache: A2 then runs
    (within a few seconds, as before the rule) instead of waiting for a claimant that can
    never fit; big, which cannot fit beside the pinned cache, gets its deadline's 504."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "mesh": sched.model("mesh", ["--resident", "1.7GiB", "--per-request", "6GiB", "--cache", "keep",
                                     "--mem-scale", "size:1:1", "--run-time", sim_s(40)],
                            "2GiB", "6GiB", concurrency=1, keep_alive="forever",
                            clear_cache={"method": "GET", "path": "/health"}),
        "big": sched.model("big", ["--resident", "1.7GiB", "--per-request", "10GiB", "--cache", "release",
                                   "--run-time", sim_s(10)], "2GiB", "10GiB", priority=3),
    })
    assert vd.generate("big").status == 200
    assert vd.generate("mesh", {"size": 2}).status == 200
    wait_for(lambda: vd.instances("mesh")[0]["reserved_bytes"] >= 13 * GiB, what="mesh booked with its 12 GiB cache")
    a1 = vd.later("mesh")
    vd.wait_in_flight("mesh")
    b = vd.later("big", headers={"X-Vramd-Deadline": "6s"}, timeout=REQUEST_TIMEOUT)
    vd.wait_event("memory_claimed", model="big", timeout=10)
    a2 = vd.later("mesh")
    assert a1.result().status == 200
    t_a1 = time.monotonic()
    r = a2.result()
    assert r.status == 200, r
    assert time.monotonic() - t_a1 < 4.0, "A2 waited far beyond its own run for a claimant that cannot fit"
    assert vd.events("clear_cache", model="mesh"), "the hook was never asked: the scene did not happen"
    assert b.result().status == 504
    vd.assert_no_oom()
    sched.finish()
