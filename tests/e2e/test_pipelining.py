"""e2e: pipelining thousands of requests on one connection must not crash vramd (the test's
docstring says how it failed before its fix). Every socket has a timeout; every wait is a
bounded poll.
"""
import threading
import time

from e2ekit import assert_alive, external_model
from vramdkit.net import PeerClosed, RawConn, free_port


# --- pipelining ---------------------------------------------------------------------

PIPELINED = 5000


def test_pipelined_flood_does_not_crash(vramd):
    """5,000 pipelined `GET /nope` in one write on one connection. Accepted outcomes: all
    5,000 answered 404 in order on the open connection, or some answered 404 in order,
    optionally followed by one clear refusal (a 4xx/5xx with a JSON error), then a clean
    close. Never acceptable: vramd dying (it recursed once per pipelined request and took
    SIGSEGV after about 2,000), a malformed or partial response, or the connection ending
    mid-response."""
    vd = vramd.start(models={"m": external_model(free_port())})
    request = b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    conn = RawConn(vd.port, timeout=10)
    sent = {}

    def send_all():
        try:
            conn.sock.sendall(request * PIPELINED)
            sent["ok"] = True
        except OSError as e:  # vramd may stop reading and close: that is not the failure
            sent["error"] = e

    sender = threading.Thread(target=send_all, daemon=True)  # read while writing: no deadlock
    sender.start()
    answered = 0
    refusal = None
    closed = False
    problem = None
    first_404 = None
    deadline = time.monotonic() + 40
    try:
        while answered < PIPELINED:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = f"only {answered} of {PIPELINED} answers within 40 s"
                break
            try:
                r = conn.read_response(timeout=min(left, 10))
            except PeerClosed as e:
                closed = True
                if conn.buf:  # a close is clean only at a response boundary
                    problem = f"connection closed mid-response after {answered} answers: {e}"
                break
            except TimeoutError:
                problem = f"no answer {answered + 1} within 10 s"
                break
            if not r.complete or "content-length" not in r.headers or \
                    int(r.headers["content-length"]) != len(r.body):
                problem = f"response {answered + 1} incomplete or mis-framed: {r!r}"
                break
            if r.status != 404:
                if not (400 <= r.status < 600 and r.error_code()):
                    problem = f"response {answered + 1}: neither 404 nor a clear error: {r!r}"
                    break
                refusal = r
                closed = conn.closed_by_peer(timeout=10)
                if not closed:
                    problem = f"vramd refused with {r.status} but kept the connection open"
                elif conn.buf:
                    problem = f"bytes after the refusal: {conn.buf[:200]!r}"
                break
            if not r.error_code() or r.error_code() != (first_404 or r).error_code():
                problem = f"response {answered + 1}: a 404 unlike the first one: {r!r}"
                break
            first_404 = first_404 or r
            answered += 1
    finally:
        conn.close()
        sender.join(15)
    assert_alive(vd, f"after {answered} answers to {PIPELINED} pipelined requests"
                     f" (connection closed: {closed})")
    assert problem is None, problem
    assert answered == PIPELINED or closed, (answered, closed, refusal)
    assert answered > 0, f"nothing answered before the close (refusal: {refusal!r})"
    # and it still serves a second client normally
    r = vd.get("/nope", timeout=10)
    assert r.status == 404 and r.error_code() == first_404.error_code(), r
