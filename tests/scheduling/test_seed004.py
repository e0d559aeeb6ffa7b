"""seed004: a VLM chat backend (3 GB resident, +2.1 GB per request) on a 5.6 GB card.

In the field two concurrent requests OOM the server and the hand-written fix is a global
lock. Behind vramd the memory ledger admits a request only when its reservation fits, so on
the small card the requests run one at a time and none dies, while on a big card the same
configuration runs them side by side.
"""
from vramdkit import GiB, MiB, run_threads, sim_s

from .schedkit import Watch

RUN_S = 6  # simulated seconds per request (0.3 s real at the 0.05 time scale)
VLM_FLAGS = ["--resident", "2.7GiB", "--per-request", "2.1GiB", "--run-time", sim_s(RUN_S)]


def vlm_model(sched, **extra):
    # resident = simworker --resident 2.7GiB + its 300MiB context
    return sched.model("vlm", VLM_FLAGS + ["--contention", "0"], "3GiB", "2.1GiB",
                       concurrency=4, **extra)


def test_seed004_five_concurrent_requests_through_vramd_all_succeed(sched):
    """5.6 GiB card, concurrency 4 allowed by the config: 5 concurrent requests through
    vramd all answer 200, no worker line mentions OOM, and the ledger never holds more than
    one request reservation at once (3 GiB + 2 x 2.1 GiB does not fit in 5.6 GiB - 128 MiB)."""
    gpu = sched.gpu_set("5.6GiB")
    vd = sched.start_vramd(gpu, {"vlm": vlm_model(sched)})
    with Watch(vd) as watch:
        replies = run_threads([lambda: vd.generate("vlm") for _ in range(5)])
    assert [r.status for r in replies] == [200] * 5, replies
    assert not watch.problems, watch.problems[:5]
    assert watch.samples > 0
    assert watch.max_requests_model.get("vlm", 0) == 1, watch.max_requests_model
    # the worker really ran 5 requests, and reported no OOM
    st = vd.status()
    assert vd.model("vlm", st)["requests_total"] == 5
    vd.assert_no_oom("vlm")
    sched.finish()


def test_seed004_same_requests_straight_to_the_worker_oom(sched):
    """The control experiment: the same 5 concurrent requests sent straight to a simworker
    on a fresh 5.6 GiB card (no vramd) make at least one request fail with CUDA OOM, so the
    previous test's success is vramd's doing."""
    gpu = sched.gpu_set("5.6GiB")
    worker = sched.external(gpu, "vlm-direct", VLM_FLAGS)
    replies = run_threads([lambda: worker.generate() for _ in range(5)])
    statuses = [r.status for r in replies]
    ooms = [r for r in replies if r.status == 500 and b"out of memory" in r.body.lower()]
    assert ooms, f"expected at least one OOM without vramd, got {statuses}"
    assert worker.oom_lines(), "the worker's log should record the OOM"
    sched.finish()


def test_seed004_big_card_runs_requests_concurrently(sched):
    """The same model on a 24 GiB card: vramd does not serialise behind a lock. The ledger
    shows several request reservations at once (up to the configured concurrency of 4),
    and all 5 requests succeed."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"vlm": vlm_model(sched)})
    with Watch(vd) as watch:
        replies = run_threads([lambda: vd.generate("vlm") for _ in range(5)])
    assert [r.status for r in replies] == [200] * 5, replies
    assert not watch.problems, watch.problems[:5]
    assert watch.max_requests_model.get("vlm", 0) >= 2, watch.max_requests_model
    assert watch.max_requests_model.get("vlm", 0) <= 4, "more than `concurrency` requests at once"
    sched.finish()


def test_seed004_sequential_requests_reuse_cached_memory(sched):
    """simworker keeps freed request memory in its allocator cache (PyTorch's default), so
    after a request the worker holds 3 GiB + 2.1 GiB cached on the 5.6 GiB card. The
    instance's next request must be admitted by reusing that cache (SPEC 4, allocator
    caching): sequential requests, each after the previous one ended and after NVML showed
    the cached memory, all succeed (they would otherwise wait forever: 5.1 GiB held +
    2.1 GiB reserved never fits)."""
    gpu = sched.gpu_set("5.6GiB")
    vd = sched.start_vramd(gpu, {"vlm": vlm_model(sched)})
    for i in range(3):
        r = vd.generate("vlm", headers={"X-Vramd-Deadline": "8s"})
        assert r.status == 200, f"request {i + 1}: {r}"
        # wait until vramd has measured the worker's usage (cache included) while idle
        vd.wait_model("vlm", lambda m: m["instances"] and m["instances"][0]["in_flight"] == 0
                      and m["instances"][0]["measured_bytes"] >= 5 * GiB - 10 * MiB,
                      what="vramd measuring the cached memory")
        vd.assert_ledger_clean()
    vd.assert_no_oom("vlm")
    sched.finish()
