"""e2e: `Expect: 100-continue` is decided on the head (RELIABILITY case 25, issue 20).

A request that asks to wait before sending its body gets its final refusal at once, with no
interim `100 Continue`, `Connection: close`, and vramd reads none of its body: queue full
(503 queue_full), a client at its per-client cap (429 client_limit), vramd draining (503
draining), no model for the path (404 unknown_model), a Content-Length over max_body (413
body_too_large). Each test announces an 8 MiB body and sends none of it: the answer still
comes within a second or two and the connection closes. A request that passes the head
still gets `100 Continue`, then its answer once the body is sent.
"""
import signal
import time

from vramdkit import Background, RawConn

MiB = 1024 * 1024
BODY = 8 * MiB  # announced, never sent by the refused clients
LIMITS = {"max_body": "16MiB", "memory_budget": "64MiB"}
PROMPT_S = 2.0  # a refusal on the head comes at once (today's body_timeout is 60 s)


def head(path, length=BODY, headers=None):
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {length}",
             "Expect: 100-continue"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def refused_on_head(vd, path, status, code, headers=None, conn=None, rest=None):
    """Send an Expect head announcing 8 MiB (or, with conn, the rest of a head already begun)
    and nothing else: the first answer is the final `status` with `code`, not 100, it comes
    promptly, says Connection: close, and the connection then ends."""
    c = conn or RawConn(vd.port, timeout=10)
    with c:
        t0 = time.monotonic()
        c.send(rest if rest is not None else head(path, headers=headers))
        r = c.read_response(skip_1xx=False)
        took = time.monotonic() - t0
        assert r.status == status, r
        assert r.error_code() == code, r
        assert took < PROMPT_S, f"answered after {took:.2f}s: was the body awaited? {r}"
        assert r.headers.get("connection", "").lower() == "close", r
        c.sock.settimeout(5)
        assert c.sock.recv(1) == b"", "the connection stayed open after a refusal on the head"
    return r


def one_slot(vramd, **kw):
    return {"w": vramd.worker("w", route="/w/", concurrency=1, **kw)}


def start_warm(vramd, limits=None, **kw):
    vd = vramd.start(models=one_slot(vramd, **kw), limits={**LIMITS, **(limits or {})})
    assert vd.get("/w/echo?warm=1").status == 200
    return vd


def busy(vd, ms=4000, headers=None):
    return Background(lambda: vd.get(f"/w/slow?ms={ms}", headers=headers, timeout=60))


def test_queue_full_refused_before_the_body(vramd):
    """One slot running, the queue (queue_max 1) full: an Expect upload of 8 MiB gets 503
    queue_full with Retry-After and no 100, without sending a byte of its body."""
    vd = start_warm(vramd, queue_max=1)
    running = busy(vd)
    vd.wait_in_flight("w", 1)
    queued = busy(vd, ms=10)
    vd.wait_queued("w", 1)
    r = refused_on_head(vd, "/w/echo", 503, "queue_full")
    assert r.error_body().get("model") == "w", r
    assert int(r.headers["retry-after"]) >= 1, r
    assert running.result().status == 200 and queued.result().status == 200
    assert vd.status()["memory_budget"]["peak"] < MiB, vd.status()["memory_budget"]


def test_client_cap_refused_before_the_body(vramd):
    """limits.per_client max_queued 1: with one of its requests running and one queued, the
    client's Expect upload gets 429 client_limit and no 100."""
    vd = start_warm(vramd, limits={"per_client": {"max_queued": 1}})
    running = busy(vd)
    vd.wait_in_flight("w", 1)
    queued = busy(vd, ms=10)
    vd.wait_queued("w", 1)
    refused_on_head(vd, "/w/echo", 429, "client_limit")
    assert running.result().status == 200 and queued.result().status == 200


def test_unknown_route_refused_before_the_body(vramd):
    """No model serves the path: 404 unknown_model at once, no 100."""
    vd = start_warm(vramd)
    r = refused_on_head(vd, "/nowhere/upload", 404, "unknown_model")
    assert "/nowhere/upload" in r.error_body()["message"], r


def test_body_over_max_body_refused_before_the_body(vramd):
    """Content-Length over max_body (16 MiB here): 413 body_too_large at once, no 100."""
    vd = start_warm(vramd)
    with RawConn(vd.port, timeout=10) as c:
        t0 = time.monotonic()
        c.send(head("/w/echo", length=32 * MiB))
        r = c.read_response(skip_1xx=False)
        assert r.status == 413 and r.error_code() == "body_too_large", r
        assert time.monotonic() - t0 < PROMPT_S and r.headers["connection"].lower() == "close", r


def test_draining_refused_before_the_body(vramd):
    """SIGTERM while a request runs: vramd drains (its listener closed). A connection that
    had begun its head before finishes it with Expect: 503 draining, no 100."""
    vd = start_warm(vramd)
    running = busy(vd, ms=3000)
    vd.wait_in_flight("w", 1)
    c = RawConn(vd.port, timeout=10)
    c.send(b"POST /w/echo HTTP/1.1\r\n")  # a begun head: not an idle connection, kept
    time.sleep(0.3)  # read by vramd before the drain starts (header_timeout is 2 s)
    vd.signal(signal.SIGTERM)
    vd.wait_event("drain_started", timeout=5)
    rest = head("/w/echo").split(b"\r\n", 1)[1]
    refused_on_head(vd, "/w/echo", 503, "draining", conn=c, rest=rest)
    assert running.result().status == 200
    assert vd.wait_exit(30) == 0


def test_admitted_upload_gets_100_then_its_answer(vramd):
    """A request the head does not refuse gets 100 Continue, then, once its 2 MiB body is
    sent, 200 with the whole body seen by the worker; the connection stays open."""
    vd = start_warm(vramd, queue_max=1)
    body = b"z" * (2 * MiB)
    with RawConn(vd.port, timeout=20) as c:
        c.send(head("/w/echo", length=len(body)))
        status, _, _ = c.read_head(timeout=10)
        assert status == 100
        c.send(body)
        r = c.read_response(skip_1xx=False)
        assert r.status == 200, r
        assert r.json()["body_len"] == len(body), r
        assert r.headers.get("connection", "").lower() != "close", r
        assert c.request("GET", "/w/echo?next=1").status == 200


def test_upload_without_expect_is_read_then_answered(vramd):
    """Without Expect the client sends its body at once: the queue-full refusal comes after
    vramd read it (answering mid-upload and closing could reset the client's upload before
    it reads the answer), and the connection stays usable."""
    vd = start_warm(vramd, queue_max=1)
    running = busy(vd)
    vd.wait_in_flight("w", 1)
    queued = busy(vd, ms=10)
    vd.wait_queued("w", 1)
    body = b"q" * MiB
    with RawConn(vd.port, timeout=20) as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        r = c.read_response(skip_1xx=False)
        assert r.status == 503 and r.error_code() == "queue_full", r
        assert r.headers.get("connection", "").lower() != "close", r
    assert running.result().status == 200 and queued.result().status == 200
