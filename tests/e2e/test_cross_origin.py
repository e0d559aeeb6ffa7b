"""Cross-site requests to vramd's own routes (issue 36, defect 5): a web page open in the
host's browser can reach a loopback vramd, which needs no token there. A state-changing
request (any method but GET/HEAD) to vramd's own routes is refused 403 `cross_origin` when it
comes from a page of another origin: `Sec-Fetch-Site` other than `same-origin`/`none`, or,
without it, an `Origin` that is not the `Host` (`null` included). Same-origin requests (the
status page's buttons) and requests with neither header (curl, vramctl) pass as before, and
so do GETs. With a token set the same holds (docs/api.md).
"""
import pytest

EVIL = "http://evil.example"


def start(vramd, **top):
    vd = vramd.start(models={"a": vramd.worker("a")}, **top)
    r = vd.post("/v1/models/a/load", timeout=30)
    assert r.status == 200, r
    return vd


def state(vd):
    return vd.model("a")["state"]


@pytest.mark.parametrize("headers", [
    {"Origin": EVIL, "Content-Type": "text/plain"},
    {"Origin": "null", "Content-Type": "text/plain"},
    {"Sec-Fetch-Site": "cross-site", "Origin": EVIL},
    {"Sec-Fetch-Site": "same-site"},
], ids=["origin", "origin-null", "sec-fetch-cross-site", "sec-fetch-same-site"])
def test_cross_origin_post_put_delete_refused(vramd, headers):
    vd = start(vramd)
    for method, path in (("POST", "/v1/models/a/unload"), ("POST", "/v1/admin/drain"),
                         ("POST", "/v1/jobs"), ("PUT", "/v1/jobs/" + "0" * 32),
                         ("DELETE", "/v1/jobs/" + "0" * 32)):
        r = vd.request(method, path, body=b"{}", headers=headers)
        assert r.status == 403, (method, path, r)
        assert r.error_code() == "cross_origin", (method, path, r)
    assert state(vd) == "ready" and vd.alive() and not vd.status()["draining"]
    refusals = vd.events("cross_origin_refused")
    assert refusals and refusals[0]["origin"] == headers.get("Origin", "-"), refusals[0]
    assert vd.get("/v1/status", headers=headers).status == 200  # reads pass


def test_same_origin_and_non_browser_requests_pass(vramd):
    vd = start(vramd)
    # the origin of a page vramd served: the Host the client sends (vramdkit's raw client
    # names localhost; http.client 127.0.0.1:PORT)
    own = "http://localhost" if vd.http == "raw" else f"http://127.0.0.1:{vd.port}"
    r = vd.post("/v1/models/a/pin", headers={"Origin": own})
    assert r.status == 200, r
    r = vd.post("/v1/models/a/unpin", headers={"Sec-Fetch-Site": "same-origin", "Origin": own})
    assert r.status == 200, r
    r = vd.post("/v1/models/a/unload")  # curl, vramctl: no Origin
    assert r.status == 200, r
    assert state(vd) != "ready"


def test_cross_origin_refused_with_a_token_too(vramd):
    token = vramd.tmp / "token"
    token.write_text("s3cret-token\n")
    vd = vramd.start(models={"a": vramd.worker("a")}, admin_token_file=str(token))
    good = {"Authorization": "Bearer s3cret-token"}
    r = vd.post("/v1/models/a/load", headers=good, timeout=30)
    assert r.status == 200, r
    r = vd.post("/v1/models/a/unload", headers={**good, "Origin": EVIL})
    assert r.status == 403 and r.error_code() == "cross_origin", r
    r = vd.post("/v1/models/a/unload", headers=good)
    assert r.status == 200, r
