"""e2e: the client side under stress (RELIABILITY cases 20, 23, 26, 27, 29, 32). Each test
failed on the code before its fix (the docstrings say how).

  - a client that never reads a large streamed answer is closed after limits.send_timeout
    without write progress: its slot is released and the next client is served (case 27);
  - a slow but steady upload passes however long it takes, as long as bytes keep coming
    (limits.body_timeout is an idle timeout); a stalled one gets 408 after body_timeout,
    not after header_timeout (case 27);
  - a queued client whose reading is paused (it pipelined more than max_header bytes) and
    then closes is noticed at once: neither its request nor the pipelined one reaches the
    worker (case 29);
  - at the connection cap, health, status and admin routes still answer on the reserve
    (limits.reserved_connections); anything else there gets 503 overloaded (case 32);
  - unknown transfer codings get 501, a request line over max_header gets 414 (cases 20, 23).

Real binary, raw sockets; every socket has a timeout and every wait is a bounded poll.
"""
import socket
import threading
import time

import pytest

from vramdkit import build_request
from vramdkit.net import PeerClosed, RawConn
from vramdkit.waits import Background, wait_for


def echo_model(vramd, **kw):
    return {"w": vramd.worker("w", route="/w/", **kw)}


def totals(vd):
    q = vd.status()["queues"]
    return q["queued"], q["in_flight"]


def metric(vd, series):
    """The value of one series of GET /metrics, by its exact name{labels}; None if absent."""
    for line in vd.get("/metrics", timeout=15).body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ", 1)[1])
    return None


def worker_targets(vd):
    r = vd.get("/w/count", timeout=15)
    assert r.status == 200, r
    return r.json()["targets"]


# --- case 27: send timeout --------------------------------------------------------------

def test_send_timeout_closes_a_client_that_never_reads(vramd):
    """A client asks for 64 MiB and never reads: after limits.send_timeout (1 s) without
    write progress vramd closes it (client_send_timeout), the request is cancelled (in
    flight back to 0) and the next client gets the model's only slot. Before: the answer
    waited for the reader forever, holding the slot."""
    vd = vramd.start(models=echo_model(vramd), limits={"send_timeout": "1s"})
    assert vd.get("/w/echo").status == 200  # worker warm
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # before connect: a small window
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", vd.port))
        s.sendall(build_request("GET", "/w/big?bytes=%d" % (64 << 20)))
        vd.wait_in_flight("w", 1, timeout=10)
        ev = vd.wait_event("client_send_timeout", timeout=10)
        assert ev[0].get("peer"), ev
        wait_for(lambda: totals(vd) == (0, 0), timeout=10, what="nothing queued or in flight")
        r = vd.get("/w/echo", timeout=10)
        assert r.status == 200, r
    finally:
        s.close()
    # counted: /v1/status and /metrics
    assert vd.status()["client_timeouts"] == {"header": 0, "body": 0, "send": 1}
    assert metric(vd, 'vramd_client_timeouts_total{kind="send"}') == 1


# --- case 27: body idle timeout -----------------------------------------------------------

def test_slow_steady_upload_passes(vramd):
    """A 256 KiB body sent in 16 pieces 200 ms apart (over 3 s) with header_timeout and
    body_timeout both 1 s passes: the body only has to keep moving. Before: the one
    header_timeout deadline covered the body too -> 408."""
    vd = vramd.start(models=echo_model(vramd),
                     limits={"header_timeout": "1s", "body_timeout": "1s"})
    assert vd.get("/w/echo").status == 200
    piece = bytes(range(256)) * 64  # 16 KiB
    with vd.conn(timeout=20) as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (16 * len(piece)))
        start = time.monotonic()
        for _ in range(16):
            time.sleep(0.2)
            c.send(piece)
        assert time.monotonic() - start > 3.0
        r = c.read_response(timeout=15)
    assert r.status == 200, r
    assert r.json()["body_len"] == 16 * len(piece), r


def test_stalled_upload_gets_408_after_body_timeout(vramd):
    """A body that stops arriving gets 408 request_timeout after body_timeout (1 s), long
    before header_timeout (10 s); the worker never sees it. Before: it waited for the
    10 s header_timeout."""
    vd = vramd.start(models=echo_model(vramd),
                     limits={"header_timeout": "10s", "body_timeout": "1s"})
    assert vd.get("/w/echo").status == 200
    with vd.conn(timeout=20) as c:
        c.send(b"POST /w/stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        start = time.monotonic()
        r = c.read_response(timeout=5)
        elapsed = time.monotonic() - start
        assert r.status == 408, r
        assert r.error_code() == "request_timeout", r
        assert "body" in r.error_body().get("message", ""), r
        assert 0.8 <= elapsed < 5, elapsed
        assert c.closed_by_peer(5)
    assert "/stalled" not in worker_targets(vd)
    assert vd.status()["client_timeouts"] == {"header": 0, "body": 1, "send": 0}
    assert metric(vd, 'vramd_client_timeouts_total{kind="body"}') == 1


def test_head_timeout_is_counted(vramd):
    """A head that never completes gets 408 after header_timeout (1 s), and is counted as a
    header timeout in /v1/status and /metrics; an idle keep-alive connection that times out
    is closed quietly and not counted."""
    vd = vramd.start(models=echo_model(vramd), limits={"header_timeout": "1s"})
    with vd.conn(timeout=10) as idle, vd.conn(timeout=10) as c:
        c.send(b"GET /w/echo HTTP/1.1\r\nHost: x\r\n")
        r = c.read_response(timeout=5)
        assert r.status == 408 and r.error_code() == "request_timeout", r
        assert idle.closed_by_peer(5)
    assert vd.status()["client_timeouts"] == {"header": 1, "body": 0, "send": 0}
    assert metric(vd, 'vramd_client_timeouts_total{kind="header"}') == 1


# --- case 29: client gone while reading is paused -------------------------------------------

def test_paused_client_that_closes_is_cancelled(vramd):
    """The model's only slot is held by a slow request. A second client sends a request
    (queued) and pipelines 20 KiB (over max_header: vramd stops reading it), then closes.
    vramd notices the close although it is not reading: the queue is empty again while the
    slow request still runs, and the worker never sees either request. Before: the close
    went unnoticed and both requests were sent to the worker once the slot was free."""
    vd = vramd.start(models=echo_model(vramd))
    assert vd.get("/w/echo").status == 200
    slow = Background(lambda: vd.get("/w/slow?ms=5000", timeout=20))
    vd.wait_in_flight("w", 1, timeout=10)
    body = b"p" * 20000
    c = RawConn(vd.port, timeout=10)
    try:
        c.send(b"GET /w/queued-first HTTP/1.1\r\nHost: x\r\n\r\n")
        vd.wait_queued("w", 1, timeout=10)
        # pipelined while the first is queued: past max_header vramd stops reading
        c.send(b"POST /w/pipelined HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
               + body)
        time.sleep(0.3)
    finally:
        c.close()
    t0 = time.monotonic()
    wait_for(lambda: totals(vd)[0] == 0, timeout=3, what="the closed client's request out of the queue")
    gone = vd.events("client_gone")
    assert gone and gone[0].get("while") == "reading paused", gone
    assert not slow.done(), "the slow request ended before the check: the test proves nothing"
    assert time.monotonic() - t0 < 3
    r = slow.result(timeout=20)
    assert r.status == 200, r
    wait_for(lambda: totals(vd) == (0, 0), timeout=10, what="nothing queued or in flight")
    targets = worker_targets(vd)
    assert "/queued-first" not in targets and "/pipelined" not in targets, targets


# --- case 32: reserve at the connection cap ----------------------------------------------------

def test_health_and_status_reachable_at_the_connection_cap(vramd):
    """With max_connections (4) idle connections open, /healthz and /v1/status still answer
    200 on the reserve (reserved_connections 2) and close after the answer; a model request
    there gets 503 overloaded with Retry-After; past the reserve a connection is closed at
    once. Before: every connection past the cap was reset, /healthz included."""
    vd = vramd.start(models=echo_model(vramd),
                     limits={"max_connections": 4, "reserved_connections": 2,
                             "header_timeout": "10s"})
    idle = []
    try:
        for _ in range(4):
            idle.append(socket.create_connection(("127.0.0.1", vd.port), timeout=10))
        wait_for(lambda: vd.status()["connections"]["open"] >= 5, timeout=5,
                 what="the idle connections accepted")
        for path in ("/healthz", "/v1/status"):
            with vd.conn(timeout=10) as c:
                r = c.request("GET", path)
                assert r.status == 200, (path, r)
                assert r.headers.get("connection", "").lower() == "close", r
                assert c.closed_by_peer(5), path
        # /v1/status on the reserve counts itself there (and the /healthz before it at least)
        reserve = r.json()["connections"]["reserve"]
        assert reserve["open"] == 1 and reserve["max"] == 2 and reserve["accepted_total"] >= 2, reserve
        accepted = reserve["accepted_total"]
        with vd.conn(timeout=10) as c:
            r = c.request("GET", "/w/echo")
            assert r.status == 503, r
            assert r.error_code() == "overloaded", r
            assert r.headers.get("retry-after") == "1", r
            assert c.closed_by_peer(5)
        # fill the reserve (connections are accepted in order): the next one is closed at once
        assert not vd.events("connection_refused")
        for _ in range(2):
            idle.append(socket.create_connection(("127.0.0.1", vd.port), timeout=10))
        c = RawConn(vd.port, timeout=10)
        try:
            with pytest.raises((PeerClosed, ConnectionError)):
                c.request("GET", "/healthz")
        finally:
            c.close()
        vd.wait_event("connection_refused", timeout=5)
    finally:
        for s in idle:
            s.close()
    # counted: the 503 and the 2 idle ones on the reserve since, one 503, at least one closed
    # at accept (a status poll can be one more while vramd has not yet seen the closes)
    def reserve_empty():
        try:
            return vd.status()["connections"]["reserve"]["open"] == 0
        except (AssertionError, OSError, ValueError):
            return False  # refused: vramd had not seen the closes yet
    wait_for(reserve_empty, timeout=5, what="the reserve empty again")
    conns = vd.status()["connections"]
    assert conns["reserve"]["accepted_total"] >= accepted + 3, (accepted, conns)
    assert conns["reserve"]["refused_total"] == 1 and conns["refused_total"] >= 1, conns
    assert metric(vd, "vramd_reserve_connections") == 0
    assert metric(vd, "vramd_reserve_connections_total") == conns["reserve"]["accepted_total"]
    assert metric(vd, "vramd_reserve_refused_total") == 1
    assert metric(vd, "vramd_connections_refused_total") == conns["refused_total"]
    # the cap is free again: the model is served normally
    wait_for(lambda: vd.get("/w/echo", timeout=10).status == 200, timeout=15,
             what="a model request served after the idle connections left")


# --- cases 20, 23: request-side status codes ----------------------------------------------------

@pytest.mark.parametrize("coding", ["identity", "chunked, identity", "gzip, chunked", "gzip"])
def test_unknown_transfer_coding_is_501(vramd, coding):
    """A request Transfer-Encoding other than exactly chunked is 501 not_implemented (RFC
    9112 6.1; nginx), and the connection is closed. Before: 400."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn(timeout=10) as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: %s\r\n\r\n0\r\n\r\n"
               % coding.encode())
        r = c.read_response()
        assert r.status == 501, r
        assert r.error_code() == "not_implemented", r
        assert c.closed_by_peer(5)


def test_long_request_line_is_414(vramd):
    """A request line longer than max_header (8 KiB) is 414 uri_too_long; a long header is
    still 431. Before: 431 for both."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn(timeout=10) as c:
        try:
            c.send(b"GET /w/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = c.read_response()
        assert r.status == 414, r
        assert r.error_code() == "uri_too_long", r
    with vd.conn(timeout=10) as c:
        try:
            c.send(build_request("GET", "/w/echo", headers={"X-Big": "a" * 9000}))
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = c.read_response()
        assert r.status == 431, r
