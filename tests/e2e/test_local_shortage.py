"""vramd's own shortage of descriptors is never the worker's failure (issue 12, item 2).

With vramd's RLIMIT_NOFILE lowered while it runs and its descriptor table filled with idle
client connections, a proxied request and an admin unload (its hook) cannot open a socket to
the worker. Each must be answered 503 local_resource_exhausted with Retry-After, and leave
the worker alone: no suspect mark, no outlier count, no failed model, the same process; once
the connections are gone the same worker serves again and the counters show what happened.

A connection to vramd is opened before the table is filled (a new one could not be
accepted then) and the request is sent on it afterwards."""
import resource
import socket
import time

from vramdkit import RawConn, wait_for


def fill_descriptors(vd, limit=64, n=80):
    """Lower vramd's descriptor limit (the soft one: the hard one stays, so release can raise
    it again) and open idle connections until its table is full."""
    soft, hard = resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE)
    vd.nofile = soft
    resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE, (limit, hard))
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", vd.port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    time.sleep(0.3)  # vramd accepts them (the last ones it must close: EMFILE)
    return socks


def release(vd, socks):
    for s in socks:
        s.close()
    hard = resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(vd.proc.pid, resource.RLIMIT_NOFILE, (vd.nofile, hard))


def served(vd, path):
    return wait_for(lambda: (lambda x: x if x.status == 200 else None)(vd.get(path, timeout=5)),
                    timeout=10, what=f"{path} served after the connections closed")


def test_proxied_request_short_of_descriptors_is_503_not_the_workers(vramd):
    """The worker is loaded by an admin load (no pooled connection to it): the request on the
    connection opened beforehand finds no descriptor for the upstream. Expected 503
    local_resource_exhausted with Retry-After: 1, no upstream_failed / worker_suspect /
    worker_ejected, the instance not suspect with failed_in_row 0; afterwards the same pid
    answers, and /v1/status and /metrics count one proxy shortage."""
    m = vramd.worker("a", health={"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2})
    vd = vramd.start(models={"a": m}, limits={"header_timeout": "30s", "max_connections": 1000})
    assert vd.post("/v1/models/a/load", timeout=20).status == 200
    pid = vd.worker_pids("a")[0]
    c0 = RawConn(vd.port, timeout=10)
    socks = fill_descriptors(vd)
    try:
        r = c0.request("GET", "/a/echo", {}, b"")
    finally:
        c0.close()
        release(vd, socks)
    assert r.status == 503, r
    assert r.error_code() == "local_resource_exhausted", r
    assert r.headers.get("retry-after") == "1", r.headers
    ev = vd.wait_event("local_resource_exhausted", timeout=5, call="proxy")
    assert ev[0]["model"] == "a", ev
    for bad in ("upstream_failed", "worker_suspect", "worker_ejected", "worker_unhealthy"):
        assert not vd.events(bad), (bad, vd.events(bad))
    inst = vd.instances("a")[0]
    assert inst["suspect"] is False and inst["failed_in_row"] == 0 and inst["pid"] == pid, inst
    assert served(vd, "/a/echo").json()["pid"] == pid
    st = vd.status()
    assert st["local_resource_exhausted"]["proxy"] == 1, st["local_resource_exhausted"]
    text = vd.get("/metrics").body.decode()
    assert 'vramd_local_resource_exhausted_total{call="proxy"} 1\n' in text
    assert 'vramd_requests_total{model="a",outcome="local_resource_exhausted"} 1\n' in text


def test_admin_unload_hook_short_of_descriptors_is_503_and_the_server_untouched(vramd):
    """An external server with an unload hook: the admin unload, sent on a connection opened
    before the table filled, cannot call the hook. Expected 503 local_resource_exhausted with
    Retry-After, the model not failed and still ready, the hook never reached the server; once
    the connections are gone the same admin call unloads it (the hook reached once)."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2},
        "unload": {"path": "/unload-hook"}, "reload": {"path": "/reload-hook"}}},
        limits={"header_timeout": "30s", "max_connections": 1000})
    vd.wait_model_state("ext", "ready", timeout=15)
    c0 = RawConn(vd.port, timeout=10)
    socks = fill_descriptors(vd)
    try:
        r = c0.request("POST", "/v1/models/ext/unload", {}, b"")
    finally:
        c0.close()
        release(vd, socks)
    assert r.status == 503, r
    assert r.error_code() == "local_resource_exhausted", r
    assert r.headers.get("retry-after") == "1", r.headers
    vd.wait_event("local_resource_exhausted", timeout=5, call="/unload-hook")
    model = vd.model("ext")
    assert model["state"] == "ready" and "failed_reason" not in model, model
    assert vd.get("/ext/count").json()["targets"].get("/unload-hook") is None
    assert vd.status()["local_resource_exhausted"]["hook"] == 1
    time.sleep(1.1)  # the hook's retry hold (1 s) passes
    r = vd.post("/v1/models/ext/unload", timeout=20)
    assert r.status == 200 and r.json()["state"] != "ready", r
    assert vd.events("unload_hook_done", status=200), vd.log_tail(40)
