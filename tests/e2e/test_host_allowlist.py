"""DNS rebinding (issue 36, defect 5, the Host half): a page whose name an attacker points at
127.0.0.1 is same-origin to the browser, so the cross-origin check (test_cross_origin.py)
lets it through. Where no admin token is set (allowed on loopback), or where the config lists
`allowed_hosts`, vramd refuses every request, to its own routes and to the models', whose
Host names neither an IP literal, localhost (or a name under .localhost) nor a listed name:
403 `host_not_allowed`, with a message naming the key to set (docs/api.md, "Host names").
With a token and no list the check is off (a networked vramd is reached by names it cannot
know; the token guards the admin routes).

Every config here sets allowed_hosts itself: the factory's default lists the tests' short
names (vramdkit/factory.py TEST_HOSTS), which this file must not inherit.
"""
import time

from vramdkit import RawConn
from vramdkit.net import build_request

REBIND = "rebind.evil.example"


def start(vramd, allowed_hosts=None, **top):
    vd = vramd.start(models={"a": vramd.worker("a")}, allowed_hosts=allowed_hosts, **top)
    return vd


def send(vd, method, path, host, headers=None, body=None):
    """One request on a fresh connection, with Host: host."""
    with RawConn(vd.port, timeout=30) as c:
        c.send(build_request(method, path, headers, body, host=host))
        return c.read_response(method)


def refused(r, host):
    assert r.status == 403, r
    assert r.error_code() == "host_not_allowed", r
    msg = r.error_body()["message"]
    assert "allowed_hosts" in msg and host in msg, msg


def load(vd, host="localhost", headers=None):
    r = send(vd, "POST", "/v1/models/a/load", host, headers=headers, body=b"{}")
    assert r.status == 200, r


def test_a_rebinding_host_is_refused_on_own_and_model_routes(vramd):
    vd = start(vramd)
    load(vd)
    for host in (REBIND, f"{REBIND}:{vd.port}", f"{REBIND}.", "LOCALHOST.evil.example", "localhostx"):
        refused(send(vd, "GET", "/v1/status", host), host)
    r = send(vd, "POST", "/v1/models/a/unload", REBIND, body=b"{}")
    refused(r, REBIND)
    refused(send(vd, "GET", "/a/echo", REBIND), REBIND)  # a model route: refused too
    refused(send(vd, "GET", "/metrics", REBIND), REBIND)
    refused(send(vd, "GET", "/", REBIND), REBIND)  # the status page
    assert vd.model("a")["state"] == "ready"  # the unload did nothing
    assert len(vd.events("host_not_allowed")) == 9
    assert vd.events("host_not_allowed")[0]["host"] == REBIND


def test_loopback_names_and_ip_literals_are_answered(vramd):
    vd = start(vramd)
    load(vd)
    p = vd.port
    for host in ("localhost", f"localhost:{p}", "LocalHost.", f"127.0.0.1:{p}", "127.0.0.1", f"[::1]:{p}",
                 "[::1]", f"app.localhost:{p}", "192.0.2.7:8800", "[2001:db8::1]"):
        r = send(vd, "GET", "/v1/status", host)
        assert r.status == 200, (host, r)
    assert send(vd, "GET", "/a/echo", f"127.0.0.1:{p}").status == 200
    r = send(vd, "POST", "/v1/models/a/unload", f"localhost:{p}", body=b"{}")
    assert r.status == 200, r
    assert vd.model("a")["state"] != "ready"
    assert not vd.events("host_not_allowed")


def test_listed_names_are_answered_and_others_refused(vramd):
    vd = start(vramd, allowed_hosts=["gpu-box.example", "*.lan.example"])
    load(vd, host="GPU-box.example:8800")
    for host in ("gpu-box.example", "a.lan.example:1", "b.c.lan.example", "localhost"):
        assert send(vd, "GET", "/v1/status", host).status == 200, host
    for host in ("lan.example", "xgpu-box.example", "gpu-box.example.evil", REBIND):
        refused(send(vd, "GET", "/v1/status", host), host)


def test_with_a_token_the_check_is_off_unless_allowed_hosts_is_set(vramd):
    token = vramd.tmp / "token"
    token.write_text("s3cret-token\n")
    good = {"Authorization": "Bearer s3cret-token"}
    vd = start(vramd, admin_token_file=str(token))
    assert send(vd, "GET", "/v1/status", REBIND).status == 200
    assert send(vd, "POST", "/v1/models/a/load", REBIND, headers=good, body=b"{}").status == 200
    assert send(vd, "GET", "/a/echo", REBIND).status == 200
    vd.stop()
    vd2 = start(vramd, allowed_hosts=[], admin_token_file=str(token))  # listed, even empty: on
    refused(send(vd2, "GET", "/v1/status", REBIND), REBIND)
    refused(send(vd2, "POST", "/v1/models/a/load", REBIND, headers=good, body=b"{}"), REBIND)
    assert send(vd2, "GET", "/v1/status", "localhost").status == 200


def test_refused_on_the_head_before_an_expected_body(vramd):
    vd = start(vramd)
    with RawConn(vd.port, timeout=10) as c:
        t0 = time.monotonic()
        c.send(f"POST /a/echo HTTP/1.1\r\nHost: {REBIND}\r\nContent-Length: 100000\r\n"
               "Expect: 100-continue\r\n\r\n".encode())
        r = c.read_response("POST", skip_1xx=False)
        refused(r, REBIND)
        assert time.monotonic() - t0 < 2.0, "the body was awaited"


def test_a_reload_changes_the_list(vramd):
    vd = start(vramd)
    refused(send(vd, "GET", "/v1/status", "gpu-box.example"), "gpu-box.example")
    cfg = dict(vd.config)
    cfg["allowed_hosts"] = ["gpu-box.example"]
    vd.write_config(cfg)
    r = send(vd, "POST", "/v1/admin/reload", "localhost", body=b"{}")
    assert r.status == 200, r
    assert send(vd, "GET", "/v1/status", "gpu-box.example").status == 200


def test_bad_entries_are_config_errors(vramd):
    for value, what in (('["http://gpu-box"]', "no port or scheme"), ('["gpu-box:8800"]', "no port or scheme"),
                        ('gpu-box', "a list of host names"), ('[""]', "no port or scheme")):
        path, p = vramd.check_config(f"allowed_hosts: {value}\nmodels: {{}}\n")
        assert p.returncode != 0, (value, p.stdout, p.stderr)
        assert f"{path.name}:1:" in p.stderr and "allowed_hosts" in p.stderr and what in p.stderr, (value, p.stderr)
    path, p = vramd.check_config("allowed_hosts: [gpu-box.example, '*.lan.example']\nmodels: {}\n")
    assert p.returncode == 0, p.stderr
