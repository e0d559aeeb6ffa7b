"""e2e: the host-memory budget (limits.memory_budget, RELIABILITY case 18): bodies and held
answers are charged to a byte budget; an upload that would pass it gets 503 memory_budget
before its body is read, a chunked body is cut, a held answer fails, and the budget's use is
back to 0 afterwards (/v1/status)."""
import threading

from vramdkit import RawConn, wait_for


# --- the host-memory budget -------------------------------------------------------------------

MiB = 1 << 20
BUDGET = {"memory_budget": "8MiB", "max_body": "4MiB"}


def upload(vd, ms=2500, size=3 * MiB):
    def call():
        return vd.post(f"/w/slow?ms={ms}", body=b"x" * size,
                       headers={"Content-Type": "application/octet-stream"}, timeout=60)
    return call


def budget(vd):
    return vd.status()["memory_budget"]


def hold_two_uploads(vd):
    """Two 3 MiB uploads held (one running, one queued) on a slow one-slot model."""
    held = [threading.Thread(target=lambda i=i: out.__setitem__(i, upload(vd)()), daemon=True)
            for i in range(2)]
    out = {}
    for t in held:
        t.start()
    wait_for(lambda: budget(vd)["used"] >= 6 * MiB, timeout=10, what="two bodies charged")
    return held, out


def test_memory_budget_refuses_upload_before_reading_it(vramd):
    """memory_budget 8MiB, max_body 4MiB, three concurrent 3 MiB uploads to a slow model:
    the third gets 503 memory_budget with Retry-After (the first two hold 6 MiB), the first
    two are served, and /v1/status shows the budget back at 0 afterwards."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=1)}, limits=BUDGET)
    b = budget(vd)
    assert b["limit"] == 8 * MiB and b["source"] == "config" and b["used"] == 0, b
    held, out = hold_two_uploads(vd)
    third = upload(vd)()
    assert third.status == 503, third
    assert third.error_code() == "memory_budget", third
    assert int(third.headers["retry-after"]) >= 1
    for t in held:
        t.join(30)
    assert [out[i].status for i in range(2)] == [200, 200], out
    assert all(out[i].json()["slept_ms"] == 2500 for i in range(2))
    wait_for(lambda: budget(vd)["used"] == 0, timeout=10, what="budget released")
    b = budget(vd)
    assert b["refused"] >= 1 and b["peak"] >= 6 * MiB, b
    # with the room back, the same upload is served
    assert upload(vd, ms=10)().status == 200
    wait_for(lambda: budget(vd)["used"] == 0, timeout=10, what="budget released again")


def test_memory_budget_cuts_a_chunked_body(vramd):
    """A chunked upload (no Content-Length to judge beforehand) is cut with 503
    memory_budget once it would pass the budget."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=1)}, limits=BUDGET)
    held, out = hold_two_uploads(vd)
    with RawConn(vd.port, timeout=20) as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"y" * (256 * 1024)
        try:
            for _ in range(12):  # 3 MiB
                c.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
            c.send(b"0\r\n\r\n")
        except OSError:
            pass  # vramd answered and closed while we were still sending
        r = c.read_response("POST", 20)
    assert r.status == 503 and r.error_code() == "memory_budget", r
    for t in held:
        t.join(30)
    assert [out[i].status for i in range(2)] == [200, 200], out
    wait_for(lambda: budget(vd)["used"] == 0, timeout=10, what="budget released")


def test_memory_budget_fails_a_held_answer(vramd):
    """A validated model's answer is held whole before the client sees it: one that would
    pass the budget fails that request with 503 memory_budget (not 502: the worker is fine),
    and the next request is served."""
    models = {"w": vramd.worker("w", route="/w/", concurrency=3, validate={"min_bytes": 1})}
    vd = vramd.start(models=models, limits=BUDGET)
    held, out = hold_two_uploads(vd)
    r = vd.get(f"/w/big?bytes={3 * MiB}", timeout=30)
    assert r.status == 503 and r.error_code() == "memory_budget", r
    for t in held:
        t.join(30)
    assert [out[i].status for i in range(2)] == [200, 200], out
    wait_for(lambda: budget(vd)["used"] == 0, timeout=10, what="budget released")
    r = vd.get(f"/w/big?bytes={2 * MiB}", timeout=30)
    assert r.status == 200 and len(r.body) == 2 * MiB, r
    wait_for(lambda: budget(vd)["used"] == 0, timeout=10, what="budget released after a held answer")
