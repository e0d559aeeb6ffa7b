"""Guards seen from outside (issue 12): a suspect instance shown in /v1/status and /metrics,
and vramd's own shortage of descriptors never held against a worker.

Suspect: an external server the test runs itself (SickServer) closes one connection without
answering and then keeps its health check waiting; meanwhile the instance is suspect.

Shortage: with vramd's RLIMIT_NOFILE lowered while it runs and its descriptor table filled with idle
client connections, a proxied request and an admin unload (its hook) cannot open a socket to
the worker. Each must be answered 503 local_resource_exhausted with Retry-After, and leave
the worker alone: no suspect mark, no outlier count, no failed model, the same process; once
the connections are gone the same worker serves again and the counters show what happened.

A connection to vramd is opened before the table is filled (a new one could not be
accepted then) and the request is sent on it afterwards."""
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vramdkit import RawConn, fill_descriptors, free_port, release_descriptors, wait_for


class SickServer:
    """GET /health: 200, but while `sick` is set it waits (up to 5 s) before answering;
    POST /drop: sets `sick` and closes the connection without answering; anything else: 200."""

    def __init__(self):
        self.sick = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/health":
                    deadline = time.monotonic() + 5
                    while outer.sick.is_set() and time.monotonic() < deadline:
                        time.sleep(0.05)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/drop":
                    outer.sick.set()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.do_GET()

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.sick.clear()
        self.server.shutdown()
        self.server.server_close()


def metric(vd, series):
    """The value of one series of GET /metrics, by its exact name{labels}; None if absent."""
    for line in vd.get("/metrics", timeout=15).body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ", 1)[1])
    return None


def test_suspect_instance_is_shown_until_its_health_check_passes(vramd):
    """A connection that breaks without an answer: 502 worker_failed, and the instance is
    suspect until a health check passes. The server keeps that check waiting: /v1/status
    says suspect (not ejected) and vramd_instance_suspect is 1 (promtool accepts the
    exposition); once it answers again, both say not suspect."""
    srv = SickServer()
    try:
        vd = vramd.start(models={"ext": {
            "route": "/ext/", "url": f"http://127.0.0.1:{srv.port}",
            "health": {"path": "/health", "interval": "200ms", "timeout": "4s", "failures": 3}}})
        vd.wait_model_state("ext", "ready", timeout=15)
        r = vd.post("/ext/drop")
        assert r.status == 502 and r.error_code() == "worker_failed", r
        inst = vd.instances("ext")[0]
        assert inst["suspect"] is True and inst["ejected"] is False and inst["ejected_until"] is None, inst
        series = 'vramd_instance_suspect{model="ext",instance="%d"}' % inst["id"]
        assert metric(vd, series) == 1
        promtool = shutil.which("promtool")
        if promtool:
            text = vd.get("/metrics").body.decode()
            p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.stdout, p.stderr)
        srv.sick.clear()
        vd.wait_event("worker_suspect_cleared", model="ext", timeout=10)
        assert vd.instances("ext")[0]["suspect"] is False
        assert metric(vd, series) == 0
    finally:
        srv.close()


def request_while_full(vd, method, path):
    """method path sent on a connection opened before vramd's descriptor table was filled."""
    c0 = RawConn(vd.port, timeout=10)
    socks = fill_descriptors(vd)
    try:
        return c0.request(method, path, {}, b"")
    finally:
        c0.close()
        release_descriptors(vd, socks)


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
    r = request_while_full(vd, "GET", "/a/echo")
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
    assert metric(vd, 'vramd_local_resource_exhausted_total{call="proxy"}') == 1
    assert metric(vd, 'vramd_requests_total{model="a",outcome="local_resource_exhausted"}') == 1


def test_admin_unload_hook_short_of_descriptors_is_503_and_the_server_untouched(vramd):
    """An external server with an unload hook: the admin unload, sent on a connection opened
    before the table filled, cannot call the hook. Expected 503 local_resource_exhausted with
    Retry-After, the model not failed and still ready, the hook never reached the server; once
    the connections are gone the same admin call unloads it (the hook reached once).
    vramd_hook_calls_total counts the call not made as local_shortage, the one made as ok."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2},
        "unload": {"path": "/unload-hook"}, "reload": {"path": "/reload-hook"}}},
        limits={"header_timeout": "30s", "max_connections": 1000})
    vd.wait_model_state("ext", "ready", timeout=15)
    r = request_while_full(vd, "POST", "/v1/models/ext/unload")
    assert r.status == 503, r
    assert r.error_code() == "local_resource_exhausted", r
    assert r.headers.get("retry-after") == "1", r.headers
    vd.wait_event("local_resource_exhausted", timeout=5, call="/unload-hook")
    model = vd.model("ext")
    assert model["state"] == "ready" and "failed_reason" not in model, model
    assert vd.get("/ext/count").json()["targets"].get("/unload-hook") is None
    assert vd.status()["local_resource_exhausted"]["hook"] == 1
    assert metric(vd, 'vramd_local_resource_exhausted_total{call="hook"}') == 1
    unload_calls = 'vramd_hook_calls_total{model="ext",hook="unload",outcome="%s"}'
    assert metric(vd, unload_calls % "local_shortage") == 1
    assert metric(vd, unload_calls % "ok") == 0
    # within the hook's retry hold (1 s) the same answer, without a call; then it unloads
    r = wait_for(lambda: (lambda x: x if x.status != 503 else None)(vd.post("/v1/models/ext/unload", timeout=20)),
                 timeout=5, what="the admin unload once the hold passed")
    assert r.status == 200 and r.json()["state"] != "ready", r
    assert vd.status()["local_resource_exhausted"]["hook"] == 1
    assert vd.events("unload_hook_done", status=200), vd.log_tail(40)
    assert metric(vd, unload_calls % "ok") == 1 and metric(vd, unload_calls % "local_shortage") == 1


def test_reload_hook_short_of_descriptors_waits_and_is_not_a_failure(vramd):
    """An external server unloaded by an admin call; the next request needs its reload hook,
    but vramd has no descriptor to call it. The instance stays unloaded (no worker_failure,
    the model not failed) and the hook is tried again every second; once the connections are
    gone it reloads and the waiting request is answered 200."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2},
        "unload": {"path": "/unload-hook"}, "reload": {"path": "/reload-hook"}, "deadline": "30s"}},
        limits={"header_timeout": "30s", "max_connections": 1000})
    vd.wait_model_state("ext", "ready", timeout=15)
    r = vd.post("/v1/models/ext/unload", timeout=20)
    assert r.status == 200 and r.json()["state"] != "ready", r
    c0 = RawConn(vd.port, timeout=20)
    socks = fill_descriptors(vd)
    try:
        c0.send(b"GET /ext/echo HTTP/1.1\r\nHost: x\r\n\r\n")
        vd.wait_event("local_resource_exhausted", timeout=5, call="/reload-hook", count=2)  # tried again
        assert not vd.events("worker_failure"), vd.events("worker_failure")
    finally:
        release_descriptors(vd, socks)
    r = c0.read_response(timeout=15)
    c0.close()
    assert r.status == 200, r
    assert vd.events("reload_hook_done", status=200), vd.log_tail(40)
    model = vd.model("ext")
    assert model["state"] == "ready" and "failed_reason" not in model, model
    assert vd.status()["local_resource_exhausted"]["hook"] >= 2
