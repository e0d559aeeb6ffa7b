"""Starvation: a large request waiting while a stream of small requests keeps the card busy.

SPEC 4 (queues): a request that does not fit does not block other models' requests that do
(backfill), but a waiting large request gets its memory within a bounded time: once it has
waited longer than its model's typical run time, smaller requests may no longer take the
memory it needs (memory_claimed).
"""
import threading
import time

from vramdkit import sim_s
from vramdkit.harness import REQUEST_TIMEOUT

STREAM_CLIENTS = 12  # more than small's concurrency (8): its queue never runs dry


def test_large_request_gets_memory_despite_a_stream_of_small_ones(sched):
    """24 GiB card. small: 2 GiB resident + 2 GiB per request, concurrency 8, 12 clients
    sending back to back (run times jittered so that completions never line up): it holds
    up to 18 GiB. large: 2 GiB resident + 14 GiB per request needs 16 GiB, which never
    frees up on its own. The large request must still complete within a bounded time while
    the stream goes on: memory_claimed is logged for large, large's worker is started and its
    request answers 200; small requests kept completing while large waited (backfill) and
    every request of the stream succeeded, with no OOM."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "small": sched.model("small", [
            "--resident", "1.7GiB", "--per-request", "2GiB", "--cache", "release",
            "--run-time", sim_s(10), "--run-jitter", "0.6", "--contention", "0"],
            "2GiB", "2GiB", concurrency=8),
        "large": sched.model("large", [
            "--resident", "1.7GiB", "--per-request", "14GiB", "--cache", "release",
            "--run-time", sim_s(4)], "2GiB", "14GiB"),
    })
    stop = threading.Event()
    results = []
    lock = threading.Lock()

    def client():
        while not stop.is_set():
            r = vd.generate("small", timeout=REQUEST_TIMEOUT)
            with lock:
                results.append((time.monotonic(), r))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(STREAM_CLIENTS)]
    for t in threads:
        t.start()
    try:
        vd.wait_in_flight("small", 8)
        vd.wait_queued("small", 1)
        t_large = time.monotonic()
        large = vd.generate("large", headers={"X-Vramd-Deadline": "20s"})
        t_large_done = time.monotonic()
        assert large.status == 200, large
        still_streaming = vd.model("small")["in_flight"] > 0
    finally:
        stop.set()
        for t in threads:
            t.join(REQUEST_TIMEOUT + 10)
    assert still_streaming, "the stream of small requests ended before large was served"
    claimed = vd.events("memory_claimed", model="large")
    assert claimed, "large was served without claiming memory: the test did not starve it"
    assert vd.events("worker_started", model="large")
    during = [r for t, r in results if t_large < t < t_large_done]
    assert len(during) >= 8, f"only {len(during)} small requests completed while large waited"
    bad = [r for _, r in results if r.status != 200]
    assert not bad, bad[:5]
    vd.assert_no_oom()
    sched.finish()


def test_claim_and_a_queued_model_do_not_wait_for_each_other(sched):
    """24 GiB card. mesh: 8 GiB + 10 GiB per request; its worker keeps the freed request
    memory cached (PyTorch's allocator), so an idle mesh holds ~18 GiB. chat: 6 GiB + 1.5 GiB.
    mesh gets a queue of requests, then chat requests arrive. chat's load cannot fit next to
    the busy mesh; a model with a queue is not evicted. Before the FIFO rule this waited
    until the chat requests hit their deadline. Since models take turns on a card
    (sched/sched_turn.c), chat waits for its turn without claiming (its swap is not due:
    no bound, deadline or priority), mesh serves its queue, and chat then evicts the idle
    mesh; every request succeeds with no OOM. (A claim that does hold mesh back, and the
    mutual wait it must not cause, is tests/scheduling/test_swaps.py's deadline test.)"""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "mesh": sched.model("mesh", ["--resident", "7.69GiB", "--per-request", "10GiB", "--cache", "keep",
                                     "--run-time", sim_s(30)], "8GiB", "10GiB", queue_max=16),
        "chat": sched.model("chat", ["--resident", "5.7GiB", "--per-request", "1.5GiB", "--cache", "release",
                                     "--run-time", sim_s(1)], "6GiB", "1.5GiB", concurrency=4),
    })
    assert vd.generate("mesh").status == 200  # mesh loaded, now idle with 10 GiB cached
    meshes = [vd.later("mesh") for _ in range(3)]
    vd.wait_in_flight("mesh")
    chats = [vd.later("chat", headers={"X-Vramd-Deadline": "20s"}) for _ in range(3)]
    for f in meshes + chats:
        r = f.result()
        assert r.status == 200, r
    assert "chat" in [e["for"] for e in vd.events("eviction", model="mesh")]
    assert not vd.events("memory_claimed", model="chat"), "chat's swap was not due: it waits its turn"
    vd.assert_no_oom()
    sched.finish()
