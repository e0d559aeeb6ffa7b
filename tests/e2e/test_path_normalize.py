"""e2e: a path with a dot segment is refused, never forwarded (docs/api.md, Proxied requests).

`/w/../v1/admin/drain` used to reach the worker as `/../v1/admin/drain` (the route prefix
stripped, the rest forwarded raw). Now every path whose segment is "." or "..", literal or
percent-encoded, also between %2f, "\\" or %5c, gets 400 bad_request from vramd; the worker
never sees it (its /count lists every target it was sent), and vramd does not act on what the
path would climb to (no drain). Paths with dots that are not dot segments pass unchanged.
"""
from vramdkit import RawConn, build_request

REFUSED = [
    "/w/../v1/admin/drain",
    "/w/..",
    "/w/./echo",
    "/w/x/../../v1/admin/drain",
    "/w/%2e%2e/v1/admin/drain",
    "/w/%2E%2e/echo",
    "/w/.%2e/echo",
    "/w/..%2fv1/admin/drain",
    "/w/..%5cecho",
    "/w/..\\echo",
    "/w/echo/..?x=1",
    "/v1/..",
]

PASSED = {
    "/w/echo/a..b": "/echo/a..b",
    "/w/echo/...": "/echo/...",
    "/w/echo/.hidden": "/echo/.hidden",
    "/w/echo/%2e%2e%2e": "/echo/%2e%2e%2e",
    "/w/echo?p=/../x": "/echo?p=/../x",
}


def raw_get(vd, target):
    """GET target exactly as written (no client-side normalization)."""
    with RawConn(vd.port, timeout=15) as c:
        c.send(build_request("GET", target, {}, b""))
        return c.read_response("GET", timeout=15)


def test_dot_segments_are_refused_and_never_reach_the_worker(vramd):
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/")})
    assert vd.get("/w/echo?warm=1").status == 200
    for target in REFUSED:
        r = raw_get(vd, target)
        assert r.status == 400, (target, r)
        assert r.error_code() == "bad_request", (target, r)
        assert "dot segment" in r.error_body()["message"], (target, r)
    for target, seen in PASSED.items():
        r = raw_get(vd, target)
        assert r.status == 200, (target, r)
        assert r.json()["path"] == seen, (target, r.json()["path"])
    # what the worker was sent: the warm-up and the passed paths, nothing refused
    targets = set(vd.get("/w/count").json()["targets"]) - {"/count"}
    assert targets == {"/echo?warm=1", *PASSED.values()}, targets
    assert vd.alive() and vd.status()["draining"] is False

def test_job_path_with_a_dot_segment_is_refused_at_submission(vramd):
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/")})
    for path in ("/w/../v1/admin/drain", "/w/%2e%2e/echo"):
        r = vd.post("/v1/jobs", {"model": "w", "path": path, "method": "GET"})
        assert r.status == 400, (path, r)
        assert "dot segment" in r.error_body()["message"], (path, r)
    r = vd.post("/v1/jobs", {"model": "w", "path": "/w/echo/a..b", "method": "GET"})
    assert r.status == 202, r
