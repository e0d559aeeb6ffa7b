"""e2e: HTTP/1.1 behaviour of vramd's client side and upstream side: keep-alive and
upstream connection reuse, pipelining, chunked request bodies, Expect: 100-continue, body
and header limits, slowloris, and streaming (chunked, SSE, large bodies)."""
import json
import threading
import time

from vramdkit import build_request, readable


def echo_model(vramd, **kw):
    return {"w": vramd.worker("w", route="/w/", **kw)}


def test_keep_alive_many_requests_one_connection_and_upstream_reuse(vramd):
    """30 requests over one client connection all succeed, and the worker sees only a few
    distinct upstream connections (vramd reuses them)."""
    vd = vramd.start(models=echo_model(vramd))
    ports = []
    with vd.conn() as c:
        for i in range(30):
            r = c.request("GET", f"/w/echo?i={i}")
            assert r.status == 200, (i, r)
            assert r.json()["path"] == f"/echo?i={i}"
            ports.append(r.json()["client_port"])
            assert r.headers.get("connection", "").lower() != "close"
    assert len(set(ports)) <= 3, f"upstream connections not reused: {sorted(set(ports))}"


def test_pipelined_requests_answered_in_order(vramd):
    """Three requests written in one send get three responses, in order, even when the
    first is slow."""
    vd = vramd.start(models=echo_model(vramd, concurrency=2))
    with vd.conn() as c:
        assert c.request("GET", "/w/echo").status == 200  # worker started
        c.send(build_request("GET", "/w/slow?ms=400&n=1")
               + build_request("POST", "/w/echo?n=2", body=b"second")
               + build_request("GET", "/w/echo?n=3"))
        r1, r2, r3 = (c.read_response() for _ in range(3))
    assert (r1.status, r2.status, r3.status) == (200, 200, 200), (r1, r2, r3)
    assert r1.json()["target"] == "/slow?ms=400&n=1"
    assert r2.json()["path"] == "/echo?n=2" and r2.json()["body"] == "second"
    assert r3.json()["path"] == "/echo?n=3"


def test_chunked_request_body(vramd):
    """A chunked request body (with a chunk extension and a trailer) reaches the worker
    whole, and the connection stays usable."""
    vd = vramd.start(models=echo_model(vramd))
    head = ("POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    body = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nX-Trailer: t\r\n\r\n"
    with vd.conn() as c:
        c.send(head + body)
        r = c.read_response()
        assert r.status == 200, r
        assert r.json()["body"] == "hello world!"
        r = c.request("GET", "/w/echo?after=1")
        assert r.status == 200 and r.json()["path"] == "/echo?after=1"


def test_expect_100_continue(vramd):
    """Expect: 100-continue gets one interim 100 before the body is sent; the final answer
    follows, and no second interim response leaks onto the connection."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn() as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n"
               b"Expect: 100-continue\r\n\r\n")
        status, _, _ = c.read_head(timeout=10)
        assert status == 100
        c.send(b"hello there")
        r = c.read_response(skip_1xx=False)
        assert r.status == 200, r
        assert r.json()["body"] == "hello there"
        r = c.request("GET", "/w/echo?next=1", timeout=10)
        assert r.status == 200 and r.json()["path"] == "/echo?next=1", r


def send_quietly(conn, data):
    try:
        conn.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # vramd may answer and close before reading everything


def test_body_too_large_413(vramd):
    """A body over limits.max_body (1 MiB) is refused with 413 body_too_large, both with
    Content-Length and chunked; a body just under the limit passes."""
    vd = vramd.start(models=echo_model(vramd))
    big = 1024 * 1024 + 10
    with vd.conn() as c:
        t = threading.Thread(target=send_quietly, args=(
            c, build_request("POST", "/w/echo", body=b"x" * big)), daemon=True)
        t.start()
        r = c.read_response()
        assert r.status == 413, r
        assert r.error_code() == "body_too_large"
    with vd.conn() as c:
        chunk = b"x" * 65536
        data = (b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + (b"10000\r\n" + chunk + b"\r\n") * 17 + b"0\r\n\r\n")
        t = threading.Thread(target=send_quietly, args=(c, data), daemon=True)
        t.start()
        r = c.read_response()
        assert r.status == 413, r
        assert r.error_code() == "body_too_large"
    r = vd.post("/w/echo", body=b"y" * (1024 * 1024 - 100))
    assert r.status == 200, r
    assert r.json()["body_len"] == 1024 * 1024 - 100


def test_header_too_large_431(vramd):
    """A head over limits.max_header (8 KiB) or with too many header lines -> 431
    header_too_large."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn() as c:
        send_quietly(c, build_request("GET", "/w/echo", headers={"X-Big": "a" * 10000}))
        r = c.read_response()
        assert r.status == 431, r
        assert r.error_code() == "header_too_large"
    many = {f"X-H{i}": "v" for i in range(300)}  # ~2.7 KiB: under max_header, over the count
    with vd.conn() as c:
        send_quietly(c, build_request("GET", "/w/echo", headers=many))
        r = c.read_response()
        assert r.status == 431, r
        assert r.error_code() == "header_too_large"
    assert vd.get("/w/echo", headers={"X-Ok": "a" * 2000}).status == 200


def test_slowloris_gets_408_while_others_are_served(vramd):
    """A client trickling one header byte every 200 ms gets 408 request_timeout after
    header_timeout (2 s) despite sending all the time; meanwhile another client's requests
    are served."""
    vd = vramd.start(models=echo_model(vramd))
    assert vd.get("/w/echo").status == 200
    served, failures, stop = [], [], threading.Event()

    def other_client():
        while not stop.is_set():
            try:
                r = vd.get("/w/echo", timeout=10)
                (served if r.status == 200 else failures).append(r.status)
            except Exception as e:  # noqa: BLE001 - recorded as a failure
                failures.append(repr(e))
            time.sleep(0.1)
    t = threading.Thread(target=other_client, daemon=True)
    t.start()
    try:
        with vd.conn() as c:
            start = time.monotonic()
            c.send(b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            answered = False
            while time.monotonic() - start < 15:
                if readable(c.sock, 0.2):
                    answered = True
                    break
                try:
                    c.send(b"a")
                except (BrokenPipeError, ConnectionResetError):
                    answered = True
                    break
            elapsed = time.monotonic() - start
            assert answered, "vramd never answered the slowloris client"
            r = c.read_response(timeout=5)
            assert r.status == 408, r
            assert r.error_code() == "request_timeout"
            assert 1.0 <= elapsed <= 10.0, elapsed
            assert c.closed_by_peer(5)
    finally:
        stop.set()
        t.join(15)
    assert not failures, failures
    assert len(served) >= 3, served


def test_slow_body_gets_408(vramd):
    """A request whose body stops arriving gets 408 request_timeout (after
    limits.body_timeout, an idle timeout of its own)."""
    vd = vramd.start(models=echo_model(vramd), limits={"body_timeout": "2s"})
    with vd.conn() as c:
        c.send(b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        r = c.read_response(timeout=20)
        assert r.status == 408, r
        assert r.error_code() == "request_timeout"


def test_streaming_first_chunk_before_worker_finishes(vramd):
    """A chunked response streams: with 5 chunks 400 ms apart (2 s in all) the first chunk
    arrives well before the last."""
    vd = vramd.start(models=echo_model(vramd))
    assert vd.get("/w/echo").status == 200  # worker warm
    with vd.conn() as c:
        sent = time.monotonic()
        c.send(build_request("GET", "/w/stream?chunks=5&ms=400"))
        status, _, headers = c.read_head()
        assert status == 200
        h = {k.lower(): v for k, v in headers}
        assert "chunked" in h.get("transfer-encoding", "").lower(), headers
        chunks = list(c.iter_chunks())
    data = b"".join(d for _, d in chunks)
    assert data == b"".join(b"chunk %d\n" % i for i in range(5))
    first, last = chunks[0][0], chunks[-1][0]
    assert last - first >= 1.0, f"chunks were buffered: first at {first - sent:.2f}s, " \
                                f"last at {last - sent:.2f}s"


def test_sse_passes_through(vramd):
    """text/event-stream events pass through as they are produced."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn() as c:
        c.send(build_request("GET", "/w/sse?events=4&ms=300",
                             headers={"Accept": "text/event-stream"}))
        status, _, headers = c.read_head()
        assert status == 200
        h = {k.lower(): v for k, v in headers}
        assert h["content-type"].startswith("text/event-stream")
        times, text = [], b""
        if "chunked" in h.get("transfer-encoding", "").lower():
            for t, data in c.iter_chunks():
                times.append(t)
                text += data
        else:  # close-delimited is acceptable for SSE
            while c._fill(time.monotonic() + 10):
                times.append(time.monotonic())
            text = c.buf
    events = [json.loads(line[5:]) for line in text.decode().splitlines()
              if line.startswith("data:")]
    assert events == [{"i": i} for i in range(4)]
    assert times[-1] - times[0] >= 0.5


def test_big_response(vramd):
    """A 5 MB Content-Length response arrives whole and exact."""
    vd = vramd.start(models=echo_model(vramd))
    n = 5 * 1000 * 1000
    r = vd.get("/w/big?bytes=%d" % n, timeout=60)
    assert r.status == 200 and r.complete
    assert int(r.headers["content-length"]) == n
    assert len(r.body) == n
    assert r.body[:32] == b"0123456789abcdef" * 2


def test_connection_close_honoured(vramd):
    """A request with Connection: close is answered and then the connection is closed."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn() as c:
        r = c.request("GET", "/w/echo", headers={"Connection": "close"})
        assert r.status == 200
        assert c.closed_by_peer(5)


def test_http10_request_answered_and_closed(vramd):
    """HTTP/1.0 requests are answered too (and closed, as no keep-alive was asked)."""
    vd = vramd.start(models=echo_model(vramd))
    with vd.conn() as c:
        c.send(b"GET /w/echo HTTP/1.0\r\nHost: x\r\n\r\n")
        r = c.read_response()
        assert r.status == 200, r
        assert r.json()["path"] == "/echo"
        assert c.closed_by_peer(5)
