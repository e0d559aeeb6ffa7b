"""e2e: regression tests for core defects of the daemon (each one failed on the code it was
written against; see the test docstrings for the failure each guards against).

  - pipelining thousands of requests on one connection must not crash vramd;
  - /metrics, /v1/status and /v1/models stay complete when their bodies pass 64 KiB;
  - an answer held for a verdict (validate:, degrade:) keeps X-Vramd-Gpu;
  - a reload that changes gpu.devices, gpu.nvml_library or gpu.poll is refused (400
    bad_config naming the key) and the old config keeps serving;
  - a client that resets while a chunked answer is forwarded (the whole answer, terminating
    chunk included, in one upstream read) leaves vramd running with nothing in flight.

The simulated-GPU cases use the build's simgpu, libnvidia-ml-sim.so (through gpu.nvml_library,
since the e2e launcher clears VRAMD_NVML_LIBRARY) and simworker; each creates its own GPU set
and removes it at teardown. Every socket has a timeout; every wait is a bounded poll.
"""
import copy
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import termios
import threading
import time

import pytest

from vramdkit.net import PeerClosed, RawConn, Reply as Resp, free_port, http_request
from vramdkit.paths import vramd_binary
from vramdkit.waits import wait_for

BUILD_DIR = vramd_binary().parent.parent
SIMGPU = BUILD_DIR / "bin" / "simgpu"
SIMWORKER = BUILD_DIR / "bin" / "simworker"
NVML_SIM = BUILD_DIR / "lib" / "libnvidia-ml-sim.so"
TIMESCALE = "0.05"


def assert_alive(vd, what):
    """vramd is still running and answers /healthz with 200 on a new connection; otherwise
    fail with its exit status (-11: killed by SIGSEGV)."""
    try:
        r = http_request(vd.port, "GET", "/healthz", timeout=10)
    except (OSError, PeerClosed) as e:
        r = e
    if isinstance(r, Resp) and r.status == 200 and vd.proc.poll() is None:
        return
    try:
        code = vd.proc.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    if code is None:
        pytest.fail(f"vramd is running {what} but /healthz answered {r!r}")
    sig = f" (killed by signal {-code})" if code < 0 else ""
    pytest.fail(f"vramd died {what}: exit status {code}{sig}")


def external_model(port, name="m"):
    """A url: model on a port nobody listens on (no process; health checks 1 h apart, so
    it stays ready and nothing is ever sent to it in these tests)."""
    return {"route": f"/{name}/", "url": f"http://127.0.0.1:{port}",
            "health": {"interval": "1h", "timeout": "1s", "failures": 1000}}


# --- simulated GPU ---------------------------------------------------------------------

@pytest.fixture
def simgpu(monkeypatch):
    """A simulated set of 2 GPUs x 8 GiB; SIMGPU and SIMGPU_TIMESCALE are set in this test's
    environment (the launcher passes it to vramd, vramd to its workers). Yields the set's
    name; removes it at teardown."""
    for path in (SIMGPU, SIMWORKER, NVML_SIM):
        if not path.exists():
            pytest.fail(f"{path} is missing: build first (make)")
    name = f"coredef.{os.getpid()}.{secrets.token_hex(3)}"
    env = dict(os.environ, SIMGPU=name, SIMGPU_TIMESCALE=TIMESCALE)
    p = subprocess.run([str(SIMGPU), "create", name, "--gpus", "2", "--memory", "8GiB"],
                       capture_output=True, text=True, env=env, timeout=30)
    if p.returncode != 0:
        pytest.fail(f"simgpu create failed: {p.stdout} {p.stderr}")
    monkeypatch.setenv("SIMGPU", name)
    monkeypatch.setenv("SIMGPU_TIMESCALE", TIMESCALE)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield name
    finally:
        subprocess.run([str(SIMGPU), "rm", name], capture_output=True, env=env, timeout=30)


def gpu_section(**over):
    g = {"nvml_library": str(NVML_SIM), "devices": "all", "poll": "100ms", "headroom": "128MiB"}
    g.update(over)
    return g


def sim_model(vramd, name, **overrides):
    """A supervised simworker on the simulated GPU answering /generate with 1 KiB of JSON."""
    m = {
        "route": f"/{name}/",
        "cmd": [str(SIMWORKER), "--port", "{port}", "--name", f"{name}@{vramd.tag}",
                "--context", "64MiB", "--resident", "256MiB", "--per-request", "128MiB",
                "--output", "json", "--output-size", "1KiB", "--run-time", "0.1s"],
        "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
        "startup_timeout": "30s",
        "stop_timeout": "2s",
        "memory": {"resident": "512MiB", "per_request": "256MiB"},
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30s",
        "keep_alive": "10m",
    }
    m.update(overrides)
    return m


def wait_nvml(vd, gpus=2):
    def ok():
        st = vd.status()
        return st["nvml"]["ok"] and len(st["gpus"]) == gpus
    wait_for(ok, timeout=20, what="vramd reading the simulated GPUs through NVML")


# --- 1. pipelining ---------------------------------------------------------------------

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


# --- 2. large /metrics, /v1/status, /v1/models ----------------------------------------

N_MODELS = 100


def get_complete(port, path):
    """One request: (headers, body, problem). The body must be exactly Content-Length
    bytes: not cut short by a close, not missing (a client waiting for the promised bytes
    times out instead)."""
    with RawConn(port, timeout=15) as c:
        c.send(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        status, _, headers = c.read_head(timeout=15)
        h = {k.lower(): v for k, v in headers}
        if status != 200 or "content-length" not in h:
            return h, b"", f"GET {path}: {status} {headers}"
        n = int(h["content-length"])
        try:
            body, complete = c.read_body(status, headers, timeout=15)
        except TimeoutError:
            return h, c.buf, (f"GET {path}: 200 with Content-Length {n} but only {len(c.buf)} "
                              f"body bytes within 15 s")
        if not complete or len(body) != n:
            return h, body, (f"GET {path}: 200 with Content-Length {n}, but the connection "
                             f"closed after {len(body)} body bytes")
        return h, body, None


def test_large_metrics_status_and_models_are_complete(vramd):
    """100 external models (url: to a closed port; health checks 1 h apart, so they stay
    ready): /metrics (~360 KB), /v1/status (~80 KB) and /v1/models answer complete bodies,
    the JSON ones list all 100 models and promtool accepts the exposition. Failed: a body
    past 64 KiB came as 200 with its Content-Length and no body bytes."""
    closed = free_port()
    models = {f"m{i:03d}": external_model(closed, f"m{i:03d}") for i in range(N_MODELS)}
    vd = vramd.start(models=models, log={"format": "json", "level": "info"})
    names = set(models)
    got = {path: get_complete(vd.port, path) for path in ("/v1/models", "/v1/status", "/metrics")}
    problems = [p for _, _, p in got.values() if p]
    assert not problems, "; ".join(problems)

    ids = {d["id"] for d in json.loads(got["/v1/models"][1])["data"]}
    assert names <= ids, sorted(names - ids)[:5]
    st = json.loads(got["/v1/status"][1])
    assert {m["name"] for m in st["models"]} == names

    h, body, _ = got["/metrics"]
    assert h.get("content-type", "").startswith("text/plain"), h
    assert len(body) > 64 * 1024, f"/metrics is only {len(body)} bytes: the case proves nothing"
    text = body.decode("utf-8")
    for name in ("m000", f"m{N_MODELS // 2:03d}", f"m{N_MODELS - 1:03d}"):
        assert f'model="{name}"' in text, name
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not os.path.exists(promtool):
        pytest.skip("promtool is not installed (Debian package prometheus)")
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, f"promtool check metrics exit {p.returncode}: {p.stdout}{p.stderr}"
    assert_alive(vd, "after the large scrapes")


# --- 3. held answers keep X-Vramd-Gpu -------------------------------------------------

HELD = {
    "validate_kind": {"validate": "json"},
    "validate_mapping": {"validate": {"kind": "json", "min_bytes": 16}},
    "degrade": {"degrade": {"detect": {"status": [500], "body_matches": "out of memory"},
                            "ladder": [{"set": {"resolution": 512}}]}},
}


@pytest.mark.parametrize("case", sorted(HELD))
def test_held_answer_carries_gpu_header(vramd, simgpu, case):
    """Two simworker models on simulated GPU 1 (`gpus: [1]`, so the header's value is not a
    default 0): "plain" streams its answer, "held" declares validate:/degrade: so vramd
    holds the answer for a verdict and rebuilds the head. Both answers must carry
    X-Vramd-Gpu: 1 (the held one lost it)."""
    models = {"plain": sim_model(vramd, "plain", gpus=[1]),
              "held": sim_model(vramd, "held", gpus=[1], **HELD[case])}
    vd = vramd.start(models=models, gpu=gpu_section())
    wait_nvml(vd)
    body = {"prompt": "x"}
    plain = vd.post("/plain/generate", body=body, headers={"Content-Type": "application/json"})
    assert plain.status == 200, plain
    assert plain.headers.get("x-vramd-gpu") == "1", plain.headers
    held = vd.post("/held/generate", body=body, headers={"Content-Type": "application/json"})
    assert held.status == 200, held
    assert held.complete and held.json() is not None
    assert held.headers.get("x-vramd-attempts") == "1", held.headers  # it went through a worker
    assert held.headers.get("x-vramd-gpu") == "1", \
        f"held answer ({case}) has no X-Vramd-Gpu: {held.headers}"
    assert_alive(vd, "after the requests")


# --- 4. reload must refuse gpu.* changes it cannot apply -------------------------------

def other_nvml_library(tmp_path):
    """Another path to the same simulated NVML (a valid library: only the key changes)."""
    link = tmp_path / "libnvidia-ml-other.so"
    if not link.exists():
        link.symlink_to(NVML_SIM)
    return str(link)


GPU_CHANGES = {
    "gpu.poll": lambda tmp: {"poll": "350ms"},
    "gpu.devices": lambda tmp: {"devices": [0]},
    "gpu.nvml_library": lambda tmp: {"nvml_library": other_nvml_library(tmp)},
}


def model_names(vd):
    return {m["name"] for m in vd.status()["models"]}


@pytest.mark.parametrize("key", sorted(GPU_CHANGES))
def test_reload_refuses_gpu_changes(vramd, simgpu, tmp_path, key):
    """Rewrite the config changing one of gpu.poll / gpu.devices / gpu.nvml_library (and
    adding a model "b"), POST /v1/admin/reload: expected 400 bad_config whose message names
    the key, "b" not added, the old config serving (/v1/status, model "a"). Then the same
    file with the old gpu section reloads with 200 and "b" appears (the refusal is about the
    key, not about reloads). Failed: the reload answered 200 and silently kept the old gpu
    settings."""
    vd = vramd.start(models={"a": vramd.worker("a")}, gpu=gpu_section())
    wait_nvml(vd)
    assert vd.get("/a/echo").status == 200
    good = copy.deepcopy(vd.config)

    changed = copy.deepcopy(good)
    changed["gpu"].update(GPU_CHANGES[key](tmp_path))
    changed["models"]["b"] = vramd.worker("b")
    vd.write_config(changed)
    r = vd.post("/v1/admin/reload", timeout=15)
    assert r.status == 400, f"reload changing {key} answered {r!r}"
    err = r.json()["error"]
    assert err["code"] == "bad_config", err
    assert key in err["message"], err
    assert vd.alive()
    assert model_names(vd) == {"a"}
    st = vd.status()
    assert st["nvml"]["ok"] and len(st["gpus"]) == 2, st["gpus"]
    assert vd.get("/a/echo").status == 200
    assert vd.get("/b/echo").status == 404

    fixed = copy.deepcopy(good)
    fixed["models"]["b"] = vramd.worker("b")
    vd.write_config(fixed)
    r = vd.post("/v1/admin/reload", timeout=15)
    assert r.status == 200, r
    wait_for(lambda: model_names(vd) == {"a", "b"}, timeout=15, what="model b added")
    assert vd.get("/b/echo").status == 200


def test_sighup_reload_refuses_gpu_poll_change(vramd, simgpu):
    """The same through SIGHUP: config_reload_failed is logged with an error naming
    gpu.poll, no config_reloaded follows, and the old models keep serving. Failed: the
    reload was logged as config_reloaded."""
    vd = vramd.start(models={"a": vramd.worker("a")}, gpu=gpu_section())
    wait_nvml(vd)
    changed = copy.deepcopy(vd.config)
    changed["gpu"]["poll"] = "350ms"
    changed["models"]["b"] = vramd.worker("b")
    vd.write_config(changed)
    vd.signal(signal.SIGHUP)
    wait_for(lambda: vd.events("config_reload_failed") or vd.events("config_reloaded"),
             timeout=15, what="the reload's outcome in the log")
    assert not vd.events("config_reloaded"), vd.events("config_reloaded")
    ev = vd.events("config_reload_failed")[0]
    assert "gpu.poll" in ev.get("error", ""), ev
    assert vd.alive()
    assert model_names(vd) == {"a"}
    assert vd.get("/a/echo").status == 200


# --- 6. client reset while a chunked answer is forwarded -------------------------------

class OneShotUpstream:
    """An external model server (url:) under the test's control: it accepts vramd's
    connections, answers /health with 200, and for any other request records that it
    arrived and waits until the test calls release(), then writes `answer` in one send."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.sent = threading.Event()
        self.stopping = False
        self.errors = []
        self.conns = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, c):
        c.settimeout(30)
        buf = b""
        try:
            while not self.stopping:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                if head.split(b" ", 2)[1] == b"/health":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                self.arrived.set()
                if not self.go.wait(30):
                    return
                c.sendall(self.answer)
                # every byte acknowledged: all of it sits in vramd's receive queue
                deadline = time.monotonic() + 10
                while struct.unpack("i", fcntl.ioctl(c.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]:
                    if time.monotonic() > deadline:
                        raise OSError("the answer was not acknowledged within 10 s")
                    time.sleep(0.01)
                self.sent.set()
                c.settimeout(5)
                while c.recv(65536):  # until vramd closes its side
                    pass
                return
        except OSError as e:
            if not self.stopping:
                self.errors.append(e)
        finally:
            c.close()

    def release(self):
        self.go.set()

    def close(self):
        self.stopping = True
        self.go.set()
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)  # ends a _serve blocked in recv
            except OSError:
                pass
        for t in self.threads:
            t.join(10)


@pytest.fixture
def one_shot_upstream():
    made = []

    def make(answer):
        up = OneShotUpstream(answer)
        made.append(up)
        return up
    yield make
    for up in made:
        up.close()


# One upstream read of vramd is 64 KiB: the whole answer below (head, one chunk, the
# terminating chunk) is 65,460 bytes, and it is all in vramd's receive queue before vramd
# runs again (the test stops vramd with SIGSTOP meanwhile), so vramd reads it at once.
# Re-chunked for the client, with vramd's own head in front (longer: an X-Request-Id of 64
# characters, the X-Vramd-* headers; 188 bytes), it overflows vramd's 64 KiB cork buffer, so
# the head and the chunk are written at once, in the middle of the read - into a socket the
# client has already reset.
CHUNK = 65_400
RESET_ANSWER = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % CHUNK + b"z" * CHUNK + b"\r\n0\r\n\r\n")


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return None


def test_client_reset_during_chunked_answer_with_terminator_in_same_read(vramd, one_shot_upstream):
    """A client sends a request, then more than limits.max_header bytes of pipelined data (so
    vramd stops reading its socket: it cannot see the client's reset), then resets the
    connection (SO_LINGER 0) while vramd is stopped (SIGSTOP); the upstream writes its whole
    chunked answer, terminating chunk included, in one send; vramd continues (SIGCONT) and
    takes it in one read. Its write to the client fails in the middle of forwarding that read;
    vramd must keep running, leave nothing in flight or queued, and serve the next request on
    the model (concurrency 1: its slot was released). Failed: vramd went on to finish the
    request it had just cancelled (SIGSEGV)."""
    assert len(RESET_ANSWER) < 64 * 1024
    up = one_shot_upstream(RESET_ANSWER)
    model = {"route": "/big/", "url": f"http://127.0.0.1:{up.port}",
             "health": {"path": "/health", "interval": "1h", "timeout": "2s"},
             "concurrency": 1, "queue_max": 4, "deadline": "30s"}
    vd = vramd.start(models={"big": model})
    vd.wait_model_state("big", "ready")
    pid = vd.proc.pid

    client = socket.create_connection(("127.0.0.1", vd.port), timeout=10)
    stopped = False
    try:
        client.sendall(b"GET /big/answer HTTP/1.1\r\nHost: x\r\nX-Request-Id: "
                       + b"r" * 64 + b"\r\n\r\n")
        assert up.arrived.wait(15), "the request never reached the upstream"
        wait_for(lambda: vd.model("big")["in_flight"] == 1, timeout=10, what="in flight")
        # pipelined bytes past limits.max_header (8 KiB): vramd pauses reading this client
        client.sendall(b"GET /big/next HTTP/1.1\r\nX-Pad: " + b"p" * 16384 + b"\r\n\r\n")
        # a round trip on another connection: the event loop has taken those bytes by now
        assert vd.get("/healthz", timeout=10).status == 200
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        wait_for(lambda: proc_state(pid) == "T", timeout=10, what="vramd stopped")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST
        up.release()
        assert up.sent.wait(15), f"the upstream could not send its answer: {up.errors}"
    finally:
        client.close()
        if stopped:
            os.kill(pid, signal.SIGCONT)

    def settled():
        if vd.proc.poll() is not None:
            return True
        m = vd.model("big")
        return m["in_flight"] == 0 and m["queue"]["depth"] == 0
    wait_for(settled, timeout=15, what="nothing in flight for model big")
    assert_alive(vd, "after the client reset during a chunked answer")
    st = vd.status()
    m = next(m for m in st["models"] if m["name"] == "big")
    assert m["in_flight"] == 0 and m["queue"]["depth"] == 0, m
    # the slot is free again: the next request is forwarded (on a new upstream connection,
    # which the upstream answers at once now) and answered in full
    r = vd.get("/big/again", timeout=15)
    assert r.status == 200 and r.complete and r.body == b"z" * CHUNK, r
