"""e2e: request smuggling and malformed-head probes. Each probe is written in one send,
followed by a second request to a /smuggled-* path; vramd must answer 400 bad_request (501
not_implemented for a well-formed but unknown transfer coding), close the connection, and
the worker must never see the smuggled request.

One daemon serves every probe of this module (started once, checked after each probe)."""
import pytest

from vramdkit.factory import VramdFactory

SMUGGLED = b"GET /w/smuggled-%s HTTP/1.1\r\nHost: x\r\n\r\n"

PROBES = {
    # Content-Length and Transfer-Encoding together (CL.TE)
    "cl-te": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # TE first, then CL, with a body crafted for a TE.CL desync
    "te-cl": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
             b"Content-Length: 4\r\n\r\n2e\r\nGET /w/smuggled-te-cl-inner HTTP/1.1\r\nHost: x\r\n\r\n"
             b"\r\n0\r\n\r\n",
    "dup-cl": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
              b"Content-Length: 44\r\n\r\n",
    "dup-cl-same": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                   b"Content-Length: 0\r\n\r\n",
    "cl-list": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 44\r\n\r\n",
    "cl-plus": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: +0\r\n\r\n",
    "cl-negative": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "cl-space-before-colon": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n",
    "te-space-before-colon": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked"
                             b"\r\n\r\n0\r\n\r\n",
    "te-dup": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
              b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n",
    "te-list": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
               b"0\r\n\r\n",
    "te-identity": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n"
                   b"0\r\n\r\n",
    "te-chunked-identity": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity"
                           b"\r\n\r\n0\r\n\r\n",
    # an unknown coding beside Content-Length is still the CL+TE framing error (400)
    "te-identity-cl": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n"
                      b"Content-Length: 4\r\n\r\n0\r\n\r\n",
    "te-chunked-twice": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked"
                        b"\r\n\r\n0\r\n\r\n",
    "te-http10": b"POST /w/echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"0\r\n\r\n",
    "obs-fold": b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "obs-fold-te": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tTransfer-Encoding: chunked"
                   b"\r\n\r\n0\r\n\r\n",
    "bare-lf": b"GET /w/echo HTTP/1.1\nHost: x\n\n",
    "bare-lf-header": b"GET /w/echo HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
    "bare-cr": b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
    "nul-in-header": b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "nul-in-name": b"GET /w/echo HTTP/1.1\r\nHost: x\r\nX-\x00A: b\r\n\r\n",
    "bad-chunk-size": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"zz\r\nhello\r\n0\r\n\r\n",
    "chunk-size-overflow": b"POST /w/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                           b"\r\n\r\nfffffffffffffffff1\r\nhello\r\n0\r\n\r\n",
    "no-host": b"GET /w/echo HTTP/1.1\r\nX-A: b\r\n\r\n",
    "two-hosts": b"GET /w/echo HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    "double-space-request-line": b"GET  /w/echo HTTP/1.1\r\nHost: x\r\n\r\n",
}

# A well-formed list of transfer codings other than exactly "chunked" is refused with 501
# (RFC 9112 6.1, nginx); malformed lists, chunked twice and CL+TE stay 400.
EXPECTED_STATUS = {"te-list": 501, "te-identity": 501, "te-chunked-identity": 501}


@pytest.fixture(scope="module")
def shared(tmp_path_factory, request):
    factory = VramdFactory(tmp_path_factory.mktemp("smuggling"), request.node)
    vd = factory.start(models={"w": factory.worker("w", route="/w/")})
    r = vd.get("/w/echo")
    assert r.status == 200, r
    vd.worker_pid_at_start = r.json()["pid"]
    yield vd
    problems = factory.cleanup()
    assert not problems, problems


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_malformed_or_ambiguous_request_refused(shared, probe):
    """The probe is answered 400 bad_request, the connection closed, and the request
    pipelined after it never reaches the worker (checked through the worker's /count)."""
    vd = shared
    payload = PROBES[probe] + SMUGGLED % probe.encode()
    with vd.conn(timeout=15) as c:
        c.send(payload)
        r = c.read_response(timeout=15)
        assert r.status == EXPECTED_STATUS.get(probe, 400), r
        assert r.error_code() == ("not_implemented" if r.status == 501 else "bad_request"), r
        assert c.closed_by_peer(5), "connection left open after a framing error"
        assert b"HTTP/1.1" not in c.buf, f"a second response followed: {c.buf[:200]!r}"
    r = vd.get("/w/count")
    assert r.status == 200, r
    seen = r.json()
    smuggled = [t for t in seen["targets"] if "smuggled" in t]
    assert not smuggled, f"the worker received smuggled requests: {smuggled}"
    assert seen["pid"] == vd.worker_pid_at_start, "the worker was restarted"
    # no probe made vramd forward anything but the /count (and earlier /echo, /count)
    assert set(seen["targets"]) <= {"/echo", "/count"}, seen["targets"]
