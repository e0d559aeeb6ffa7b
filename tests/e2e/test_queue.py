"""e2e: per-model queues: queue_max (503 queue_full + Retry-After), deadlines while queued
(504 deadline_exceeded), priorities, and clients that disconnect while queued or running."""
import threading
import time

from vramdkit import RawConn, build_request, http_request, run_threads, wait_for


def one_slot(vramd, **kw):
    return {"w": vramd.worker("w", route="/w/", concurrency=1, **kw)}


def start_warm(vramd, **kw):
    vd = vramd.start(models=one_slot(vramd, **kw))
    r = vd.get("/w/echo?warm=1")
    assert r.status == 200, r
    return vd


def in_background(fn):
    out = {}

    def run():
        try:
            out["result"] = fn()
        except Exception as e:  # noqa: BLE001 - surfaced by the caller
            out["result"] = e
        out["done_at"] = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


def wait_in_flight(vd, n, timeout=15):
    return wait_for(lambda: vd.model("w")["in_flight"] == n, timeout=timeout,
                    what=f"in_flight == {n}")


def wait_depth(vd, n, timeout=15):
    return wait_for(lambda: vd.model("w")["queue"]["depth"] == n, timeout=timeout,
                    what=f"queue depth == {n}")


def test_queue_full_503_with_retry_after(vramd):
    """concurrency 1, queue_max 2, 5 concurrent slow requests: some get 503 queue_full with
    Retry-After (and the error names the model), the admitted ones succeed."""
    vd = start_warm(vramd, queue_max=2)
    barrier = threading.Barrier(5)

    def one():
        barrier.wait(10)
        return vd.get("/w/slow?ms=1500", timeout=60)
    results = run_threads([one] * 5, timeout=90)
    assert all(not isinstance(r, Exception) for r in results), results
    ok = [r for r in results if r.status == 200]
    full = [r for r in results if r.status == 503]
    assert len(ok) + len(full) == 5, results
    assert 1 <= len(ok) <= 3 and len(full) >= 2, [r.status for r in results]
    for r in full:
        assert r.error_code() == "queue_full", r
        assert r.json()["error"].get("model") == "w"
        assert int(r.headers["retry-after"]) >= 0
    wait_depth(vd, 0)


def test_global_queue_max(vramd):
    """limits.queue_max bounds all queues together: with 1 allowed, concurrent requests
    beyond one running and one queued get 503 queue_full."""
    models = one_slot(vramd)
    vd = vramd.start(models=models, limits={"queue_max": 1})
    assert vd.get("/w/echo").status == 200
    results = run_threads([lambda: vd.get("/w/slow?ms=1500", timeout=60)] * 4, timeout=90)
    statuses = sorted(r.status for r in results)
    assert statuses.count(503) >= 2, statuses
    assert statuses.count(200) >= 1, statuses
    assert all(r.error_code() == "queue_full" for r in results if r.status == 503)


def test_deadline_expires_in_queue_504(vramd):
    """Behind a 2.5 s request, a request with X-Vramd-Deadline: 300ms gets 504
    deadline_exceeded well before the slot frees, and never reaches the worker."""
    vd = start_warm(vramd)
    slow = in_background(lambda: vd.get("/w/slow?ms=2500"))
    wait_in_flight(vd, 1)
    t0 = time.monotonic()
    r = vd.get("/w/echo?tag=deadline", headers={"X-Vramd-Deadline": "300ms"})
    elapsed = time.monotonic() - t0
    assert r.status == 504, r
    assert r.error_code() == "deadline_exceeded"
    assert elapsed < 2.0, f"the deadline was not enforced while queued ({elapsed:.2f}s)"
    slow["thread"].join(30)
    assert slow["result"].status == 200, slow["result"]
    r = vd.get("/w/count")
    assert "/echo?tag=deadline" not in r.json()["targets"], r.json()["targets"]


def test_client_deadline_is_capped_at_the_models(vramd):
    """X-Vramd-Deadline above the model's deadline (1s here) is capped to it: behind a 4 s
    request, a 60s header and the largest one parsed (18446744073709551615ms) each get 504
    deadline_exceeded about 1 s after they were queued (before the cap: served after the
    slow one, 200 at ~4 s), and deadline_capped is logged with what was asked. A model with
    max_client_deadline 10s honours a 3s header (served 200 once the slot frees) and caps a
    60s one to 10s."""
    models = {"w": vramd.worker("w", route="/w/", concurrency=1, deadline="1s"),
              "x": vramd.worker("x", route="/x/", concurrency=1, deadline="1s", max_client_deadline="10s")}
    vd = vramd.start(models=models)
    for name in ("w", "x"):
        assert vd.get(f"/{name}/echo?warm=1").status == 200
    slow = in_background(lambda: vd.get("/w/slow?ms=4000", timeout=30))
    wait_in_flight(vd, 1)
    for asked, asked_ms in (("60s", 60000), ("18446744073709551615ms", 18446744073709551615)):
        t0 = time.monotonic()
        r = vd.get("/w/echo?tag=capped", headers={"X-Vramd-Deadline": asked}, timeout=30)
        elapsed = time.monotonic() - t0
        assert r.status == 504 and r.error_code() == "deadline_exceeded", (asked, r)
        assert 0.9 <= elapsed < 2.5, f"{asked}: answered after {elapsed:.2f}s, not at the model's 1 s"
        capped = vd.wait_event("deadline_capped", model="w", asked_ms=asked_ms)[0]
        assert capped["deadline_ms"] == 1000, capped
    slow["thread"].join(30)
    assert slow["result"].status == 200, slow["result"]

    slow = in_background(lambda: vd.get("/x/slow?ms=2000", timeout=30))
    wait_for(lambda: vd.model("x")["in_flight"] == 1, timeout=15, what="x in flight")
    r = vd.get("/x/echo?tag=honoured", headers={"X-Vramd-Deadline": "3s"}, timeout=30)
    assert r.status == 200, r
    assert not vd.events("deadline_capped", model="x")
    slow["thread"].join(30)
    r = vd.get("/x/echo?tag=x-capped", headers={"X-Vramd-Deadline": "60s"}, timeout=30)
    assert r.status == 200, r
    capped = vd.wait_event("deadline_capped", model="x")[0]
    assert capped["asked_ms"] == 60000 and capped["deadline_ms"] == 10000, capped


def test_bad_deadline_and_priority_headers_400(vramd):
    """Unparseable X-Vramd-Deadline or out-of-range X-Vramd-Priority -> 400 bad_request."""
    vd = vramd.start(models=one_slot(vramd))
    for headers in ({"X-Vramd-Deadline": "soon"}, {"X-Vramd-Deadline": "-5s"},
                    {"X-Vramd-Priority": "12"}, {"X-Vramd-Priority": "high"}):
        r = vd.get("/w/echo", headers=headers)
        assert r.status == 400, (headers, r)
        assert r.error_code() == "bad_request"


def test_priority_high_runs_before_low(vramd):
    """With the slot busy, a low-priority request queued first and a high-priority one
    queued second: the high one runs first; status shows both in by_priority."""
    vd = start_warm(vramd)
    busy = in_background(lambda: vd.get("/w/slow?ms=1500"))
    wait_in_flight(vd, 1)
    low = in_background(lambda: vd.get("/w/echo?tag=low", headers={"X-Vramd-Priority": "1"}))
    wait_depth(vd, 1)
    high = in_background(lambda: vd.get("/w/echo?tag=high",
                                        headers={"X-Vramd-Priority": "9"}))
    wait_depth(vd, 2)
    q = vd.model("w")["queue"]
    assert q["by_priority"][1] == 1 and q["by_priority"][9] == 1, q
    for job in (busy, low, high):
        job["thread"].join(30)
    assert busy["result"].status == 200
    lo, hi = low["result"], high["result"]
    assert lo.status == 200 and hi.status == 200, (lo, hi)
    # the worker numbers requests in the order it receives them
    assert hi.json()["n"] < lo.json()["n"], (hi.json()["n"], lo.json()["n"])


def test_client_disconnect_while_queued_leaves_queue(vramd):
    """A queued client that disconnects leaves the queue at once (depth back to 0 while
    the slot is still busy) and its request never reaches the worker."""
    vd = start_warm(vramd)
    busy = in_background(lambda: vd.get("/w/slow?ms=4000"))
    wait_in_flight(vd, 1)
    c = RawConn(vd.port)
    c.send(build_request("GET", "/w/echo?tag=gone"))
    wait_depth(vd, 1)
    c.close()
    wait_depth(vd, 0, timeout=10)
    assert "done_at" not in busy, "the busy request finished before the queue emptied"
    busy["thread"].join(30)
    assert busy["result"].status == 200
    r = vd.get("/w/echo?tag=after")
    assert r.status == 200
    targets = vd.get("/w/count").json()["targets"]
    assert "/echo?tag=after" in targets
    assert "/echo?tag=gone" not in targets, targets


def test_client_disconnect_while_running_closes_upstream(vramd):
    """A client that disconnects while its request runs gets its upstream request closed:
    the worker sees the socket close, in_flight drops to 0 long before the 8 s request
    would end, and the next request is served."""
    vd = start_warm(vramd)
    wport = vd.worker_port("w")
    c = RawConn(vd.port)
    c.send(build_request("GET", "/w/slow?ms=8000"))
    wait_in_flight(vd, 1)
    t0 = time.monotonic()
    c.close()
    wait_for(lambda: http_request(wport, "GET", "/count", timeout=5).json()["disconnects"] >= 1,
             timeout=6, what="the worker to see its connection closed")
    wait_in_flight(vd, 0, timeout=6)
    assert time.monotonic() - t0 < 7.0
    r = vd.get("/w/echo?tag=next", timeout=10)
    assert r.status == 200, r
