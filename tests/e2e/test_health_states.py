"""e2e: what vramd says about health. /readyz is 503 when every model failed, with per-model
readiness; /v1/models/NAME/ready for a model not loaded yet; an instance whose server drops
a connection is shown suspect in /v1/status and /metrics until its health check passes
(SickServer: an external server the test runs itself)."""
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vramdkit import free_port, wait_for


# --- /readyz ------------------------------------------------------------------------------

def external_model(port):
    return {"url": f"http://127.0.0.1:{port}", "route": None,
            "health": {"path": "/health", "interval": "200ms", "timeout": "500ms", "failures": 1}}


def test_readyz_is_503_when_every_model_failed_and_per_model_readiness(vramd):
    """Two external models whose servers are down: both failed, /readyz 503
    all_models_failed, each /v1/models/NAME/ready 503 model_failed. One server comes up:
    /readyz 200, that model's /ready 200, the other still 503; unknown names 404."""
    px, py = free_port(), free_port()
    vd = vramd.start(models={"x": external_model(px), "y": external_model(py)})
    vd.wait_model_state("x", "failed", timeout=10)
    vd.wait_model_state("y", "failed", timeout=10)
    r = vd.get("/readyz")
    assert r.status == 503 and r.error_code() == "all_models_failed", r
    for name in ("x", "y"):
        r = vd.get(f"/v1/models/{name}/ready")
        assert r.status == 503 and r.error_code() == "model_failed", r
    assert vd.get("/v1/models/nope/ready").status == 404

    vramd.external("x", port=px)
    wait_for(lambda: vd.get("/v1/models/x/ready").status == 200, timeout=10, what="x ready again")
    r = vd.get("/v1/models/x/ready")
    assert r.json()["ready"] is True and r.json()["model"] == "x"
    assert vd.get("/readyz").status == 200
    assert vd.get("/v1/models/y/ready").status == 503


def test_model_ready_for_a_model_not_loaded_yet(vramd):
    """A model not loaded yet can admit work (it loads on demand): 200, state stopped."""
    vd = vramd.start(models={"a": vramd.worker("a")})
    r = vd.get("/v1/models/a/ready")
    assert r.status == 200 and r.json()["state"] == "stopped", r
    assert vd.get("/readyz").status == 200


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
