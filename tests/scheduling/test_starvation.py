"""Starvation: a large request waiting while a stream of small requests keeps the card busy.

SPEC 4 (queues): a request that does not fit does not block other models' requests that do
(backfill), but a waiting large request gets its memory within a bounded time: once it has
waited longer than its model's typical run time, smaller requests may no longer take the
memory it needs (memory_claimed).
"""
import threading
import time

from .schedkit import REQUEST_TIMEOUT, sim_s

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
