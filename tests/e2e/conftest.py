"""conftest: fixtures and helpers for vramd's end-to-end tests.

The tests drive the real vramd binary ($VRAMD_BUILD/bin/vramd, default build/, relative to
the repository root) over real sockets, with tests/e2e/testworker.py as the model server.

What lives here:
  - free_port(): a free loopback port (bound and released);
  - yaml_dump(): a tiny block-style YAML writer for config dicts;
  - RawConn: a raw-socket HTTP/1.1 client that can send anything (malformed heads,
    pipelined requests, chunked bodies) and read responses byte-exactly, including 1xx
    interim responses, chunked bodies read chunk by chunk, and incomplete bodies;
  - Vramd: one running daemon (config in tmp_path, stderr to a log file, JSON log reader,
    /v1/status helpers, stop with SIGTERM then SIGKILL);
  - the `vramd` fixture: a factory that starts daemons for one test and, at teardown,
    stops them and fails the test if any testworker process started for it is still alive;
  - a report hook that attaches each daemon's log tail to a failing test's report.

Run: /usr/bin/python3 -m pytest tests/e2e            (after `make build/bin/vramd`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/e2e   (after `make SAN=1`)
A test also fails at teardown when vramd does not exit 0 on SIGTERM, when its log holds a
sanitizer report or a log_format_error field, or when a testworker it started outlives it.

Invariants: every wait is a poll with a deadline (no fixed sleeps where a condition can be
polled); every process a test starts is killed at teardown; each test gets a unique tag
(its tmp dir name + a random suffix) that appears in every testworker command line it starts.
"""
import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTWORKER = str(Path(__file__).resolve().parent / "testworker.py")
PYTHON = "/usr/bin/python3"

# Generous bounds for a slow, loaded 2-core machine.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def vramd_binary():
    build = os.environ.get("VRAMD_BUILD", "build")
    path = Path(build)
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path / "bin" / "vramd"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout=15.0, interval=0.05, what="condition"):
    """Poll cond() until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except (OSError, PeerClosed) as e:  # a refused or dropped connection: poll again
            last_exc = e
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


# --- YAML -------------------------------------------------------------------------------

_PLAIN_OK = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./:@+-]*")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def _scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    s = str(v)
    if _PLAIN_OK.fullmatch(s) and not s.endswith(":") and s.lower() not in _YAML_WORDS \
            and not re.fullmatch(r"[0-9.]+", s):
        return s
    return json.dumps(s)


def yaml_dump(obj, indent=0):
    """Block mappings, flow sequences of scalars (block sequences of mappings)."""
    pad = "  " * indent
    lines = []
    for key, value in obj.items():
        if isinstance(value, dict):
            if value:
                lines.append(f"{pad}{key}:")
                lines.append(yaml_dump(value, indent + 1))
            else:
                lines.append(f"{pad}{key}: {{}}")
        elif isinstance(value, list):
            if value and all(isinstance(x, dict) for x in value):
                lines.append(f"{pad}{key}:")
                for item in value:
                    sub = yaml_dump(item, indent + 2).splitlines()
                    first = sub[0].strip()
                    lines.append(f"{pad}  - {first}")
                    lines.extend(sub[1:])
            else:
                lines.append(f"{pad}{key}: [{', '.join(_scalar(x) for x in value)}]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return "\n".join(lines)


# --- raw HTTP ---------------------------------------------------------------------------

class Resp:
    def __init__(self, status, reason, headers, body, complete):
        self.status = status
        self.reason = reason
        self.header_list = headers          # [(name, value)] as received
        self.headers = {k.lower(): v for k, v in headers}  # last one wins
        self.body = body
        self.complete = complete            # False: the body ended short (peer closed)

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def error_code(self):
        try:
            return self.json()["error"]["code"]
        except Exception:
            return None

    def __repr__(self):
        b = self.body[:300]
        return f"<Resp {self.status} {self.reason} headers={self.headers} body={b!r}>"


class PeerClosed(Exception):
    pass


class RawConn:
    """One client TCP connection; send raw bytes, read responses byte-exactly."""

    def __init__(self, port, host="127.0.0.1", timeout=REQUEST_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.buf = b""
        self.eof = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        """Read more bytes into buf; False at EOF (or reset)."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out reading from vramd")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("timed out reading from vramd")
        except (ConnectionResetError, ConnectionAbortedError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            if not self._fill(deadline):
                raise PeerClosed("connection closed while reading a line")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise PeerClosed("connection closed while reading a body")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_head(self, timeout=None):
        """Status, reason, [(name, value)] of the next response head (1xx included)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while b"\r\n\r\n" not in self.buf:
            if not self._fill(deadline):
                raise PeerClosed(f"connection closed before a response head (got {self.buf!r})")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise AssertionError(f"not an HTTP response: {head!r}")
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        return status, reason, headers

    def iter_chunks(self, timeout=None):
        """Yield (time, data) for each chunk of a chunked body as it arrives; raises
        PeerClosed if the connection closes before the last chunk."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            size_line = self._line(deadline)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while self._line(deadline) != b"":
                    pass  # trailers
                return
            data = self._exact(size, deadline)
            if self._exact(2, deadline) != b"\r\n":
                raise AssertionError("chunk data not followed by CRLF")
            yield time.monotonic(), data

    def read_body(self, status, headers, method="GET", timeout=None):
        """(body, complete) for a response head already read."""
        deadline = time.monotonic() + (timeout or self.timeout)
        h = {k.lower(): v for k, v in headers}
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b"", True
        if "chunked" in h.get("transfer-encoding", "").lower():
            parts = []
            try:
                for _, data in self.iter_chunks(timeout=deadline - time.monotonic()):
                    parts.append(data)
            except PeerClosed:
                return b"".join(parts) + self.buf, False
            return b"".join(parts), True
        if "content-length" in h:
            n = int(h["content-length"])
            while len(self.buf) < n:
                if not self._fill(deadline):
                    body, self.buf = self.buf, b""
                    return body, False
            body, self.buf = self.buf[:n], self.buf[n:]
            return body, True
        while self._fill(deadline):  # until close
            pass
        body, self.buf = self.buf, b""
        return body, True

    def read_response(self, method="GET", timeout=None, skip_1xx=True):
        while True:
            status, reason, headers = self.read_head(timeout)
            if skip_1xx and 100 <= status < 200 and status != 101:
                continue
            body, complete = self.read_body(status, headers, method, timeout)
            return Resp(status, reason, headers, body, complete)

    def closed_by_peer(self, timeout=5.0):
        """True if the peer closes the connection within timeout (data before EOF is
        kept in buf); False if it stays open."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                pass
            return True
        except TimeoutError:
            return False

    def request(self, method, path, headers=None, body=None, timeout=None):
        self.send(build_request(method, path, headers, body))
        return self.read_response(method, timeout)


def build_request(method, path, headers=None, body=None, host="vramd.test"):
    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    hdrs = dict(headers or {})
    if body is not None and not any(k.lower() in ("content-length", "transfer-encoding")
                                    for k in hdrs):
        hdrs["Content-Length"] = str(len(body))
    for k, v in hdrs.items():
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def http_request(port, method, path, headers=None, body=None, timeout=REQUEST_TIMEOUT):
    """One request on a fresh connection."""
    with RawConn(port, timeout=timeout) as c:
        return c.request(method, path, headers, body, timeout=timeout)


# --- processes --------------------------------------------------------------------------

def pids_with_cmdline(marker):
    """Pids of live (non-zombie) testworker processes whose cmdline contains marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        if "testworker.py" in cmd and marker in cmd:
            found.append(int(entry))
    return found


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except OSError:
        return False


def worker_cmd(name, tag, *extra):
    return [PYTHON, TESTWORKER, "--port", "{port}", "--name", f"{name}@{tag}", *extra]


def worker_model(name, tag, route=None, extra_args=(), **overrides):
    """A supervised testworker model with quick health checks."""
    m = {
        "route": route if route is not None else f"/{name}/",
        "cmd": worker_cmd(name, tag, *extra_args),
        "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2},
        "startup_timeout": "15s",
        "stop_timeout": "2s",
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30s",
        "keep_alive": "10m",
    }
    m.update(overrides)
    return m


class ExternalWorker:
    """A testworker started by the test itself (for url: models)."""

    def __init__(self, port, name, tag, log_path):
        self.port = port
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [PYTHON, TESTWORKER, "--port", str(port), "--name", f"{name}@{tag}-ext"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        wait_for(lambda: self._healthy(), timeout=START_TIMEOUT, what="external worker up")

    def _healthy(self):
        if self.proc.poll() is not None:
            pytest.fail(f"external testworker exited {self.proc.returncode}")
        return http_request(self.port, "GET", "/health", timeout=2).status == 200

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        self.kill()
        self.log.close()


# --- vramd ------------------------------------------------------------------------------

class Vramd:
    def __init__(self, factory, config, name):
        self.factory = factory
        self.tag = factory.tag
        self.tmp = factory.tmp
        self.name = name
        self.port = config_port(config)
        self.config_path = self.tmp / f"{name}.yaml"
        self.log_path = self.tmp / f"{name}.log"
        self.stdout_path = self.tmp / f"{name}.stdout"
        self.write_config(config)
        self.proc = None
        self.returncode = None

    # config ------------------------------------------------------------------------
    def write_config(self, config):
        text = config if isinstance(config, str) else yaml_dump(config) + "\n"
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config_path)
        self.config = config

    # life --------------------------------------------------------------------------
    def start(self, wait=True):
        binary = vramd_binary()
        if not binary.exists():
            pytest.fail(f"{binary} not found: build it first (make {binary.relative_to(REPO_ROOT)})")
        self.log_file = open(self.log_path, "ab")
        self.stdout_file = open(self.stdout_path, "ab")
        env = dict(os.environ)
        env.pop("VRAMD_NVML_LIBRARY", None)
        self.proc = subprocess.Popen([str(binary), "--config", str(self.config_path)],
                                     stdout=self.stdout_file, stderr=self.log_file,
                                     cwd=REPO_ROOT, env=env)
        if wait:
            wait_for(self._healthz, timeout=START_TIMEOUT, what=f"vramd /healthz on {self.port}")
        return self

    def _healthz(self):
        if self.proc.poll() is not None:
            pytest.fail(f"vramd exited with {self.proc.returncode} before answering /healthz;"
                        f" log:\n{self.log_tail()}")
        return http_request(self.port, "GET", "/healthz", timeout=3).status == 200

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=STOP_TIMEOUT):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, then SIGKILL after timeout; returns the exit code (None if killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                self.returncode = None
                self._close_files()
                return None
        self.returncode = self.proc.returncode
        self._close_files()
        return self.returncode

    def _close_files(self):
        for f in (getattr(self, "log_file", None), getattr(self, "stdout_file", None)):
            if f and not f.closed:
                f.close()

    # HTTP --------------------------------------------------------------------------
    def request(self, method, path, headers=None, body=None, timeout=REQUEST_TIMEOUT):
        return http_request(self.port, method, path, headers, body, timeout)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def conn(self, timeout=REQUEST_TIMEOUT):
        return RawConn(self.port, timeout=timeout)

    def status(self):
        r = self.get("/v1/status", timeout=10)
        assert r.status == 200, r
        return r.json()

    def model_status(self, model):
        for m in self.status()["models"]:
            if m["name"] == model:
                return m
        raise AssertionError(f"model {model} not in /v1/status")

    def worker_pids(self, model):
        return [i.get("pid") for i in self.model_status(model).get("instances", [])
                if i.get("pid")]

    def worker_port(self, model):
        """Port of the model's (first) running instance, for talking to it directly."""
        def find():
            for inst in self.model_status(model).get("instances", []):
                if inst.get("port") and inst.get("state") not in ("stopped", "failed"):
                    return inst["port"]
            return None
        return wait_for(find, timeout=START_TIMEOUT, what=f"an instance port for {model}")

    def wait_model_state(self, model, states, timeout=START_TIMEOUT):
        if isinstance(states, str):
            states = (states,)
        def check():
            m = self.model_status(model)
            return m if m["state"] in states else None
        return wait_for(check, timeout=timeout, what=f"model {model} in state {states}")

    # logs --------------------------------------------------------------------------
    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=150):
        return "\n".join(self.log_text().splitlines()[-n:])

    def logs(self):
        """Every JSON log line as a dict (non-JSON lines are skipped)."""
        out = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def events(self, event=None, **match):
        return [e for e in self.logs()
                if (event is None or e.get("event") == event)
                and all(e.get(k) == v for k, v in match.items())]

    def wait_event(self, event, timeout=15.0, **match):
        return wait_for(lambda: self.events(event, **match), timeout=timeout,
                        what=f"log event {event} {match}")


def config_port(config):
    if isinstance(config, str):
        m = re.search(r"^listen:\s*\S*?:(\d+)", config, re.M)
        return int(m.group(1)) if m else None
    return int(str(config["listen"]).rsplit(":", 1)[1])


class VramdFactory:
    """Starts daemons for one test; the fixture cleans up after it."""

    def __init__(self, tmp_path, item):
        self.tmp = tmp_path
        self.tag = f"{tmp_path.name}-{secrets.token_hex(4)}"
        self.item = item
        self.instances = []
        self.externals = []
        item._vramd_instances = self.instances

    def worker(self, name, route=None, extra_args=(), **overrides):
        return worker_model(name, self.tag, route=route, extra_args=extra_args, **overrides)

    def config(self, models, limits=None, **top):
        cfg = {
            "listen": f"127.0.0.1:{free_port()}",
            "state_dir": str(self.tmp / "var"),
            "log": {"format": "json", "level": "debug"},
            "limits": {"header_timeout": "2s", "max_body": "1MiB", "max_header": "8KiB",
                       "queue_max": 100},
        }
        if limits:
            cfg["limits"].update(limits)
        cfg.update(top)
        cfg["models"] = models
        return cfg

    def start(self, models=None, limits=None, config=None, wait=True, **top):
        if config is None:
            config = self.config(models or {}, limits=limits, **top)
        vd = Vramd(self, config, f"vramd{len(self.instances)}")
        self.instances.append(vd)
        return vd.start(wait=wait)

    def external(self, name="ext", port=None):
        port = port or free_port()
        w = ExternalWorker(port, name, self.tag, self.tmp / f"{name}-{port}.log")
        self.externals.append(w)
        return w

    def check_config(self, text, name="check.yaml"):
        path = self.tmp / name
        path.write_text(text)
        p = subprocess.run([str(vramd_binary()), "--check-config", str(path)],
                           capture_output=True, text=True, timeout=30, cwd=REPO_ROOT)
        return path, p

    def cleanup(self):
        problems = []
        for vd in self.instances:
            if vd.proc is not None and vd.proc.poll() is None:
                code = vd.stop()
                if code != 0:
                    problems.append(f"{vd.name}: exit status {code} after SIGTERM at teardown"
                                    " (None: had to be killed)")
            text = vd.log_text()
            for marker in SANITIZER_MARKERS:
                if marker in text:
                    problems.append(f"{vd.name}: sanitizer report in its log ({marker!r})")
            bad = [e for e in vd.logs() if "log_format_error" in e]
            if bad:
                problems.append(f"{vd.name}: log lines with log_format_error: {bad[:3]}")
        for w in self.externals:
            w.close()
        # supervised workers must be gone once vramd has exited
        leftover = []
        deadline = time.monotonic() + 10
        while True:
            leftover = pids_with_cmdline(self.tag)
            if not leftover or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if leftover:
            for pid in leftover:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            problems.append(f"testworker processes left alive after vramd exited: {leftover}")
        return problems


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        node = item  # a module-scoped daemon hangs on the module node
        while node is not None:
            for vd in getattr(node, "_vramd_instances", []):
                report.sections.append((f"vramd log ({vd.tmp.name}/{vd.name}, last lines)",
                                        vd.log_tail()))
            node = node.parent


@pytest.fixture
def vramd(tmp_path, request):
    """Factory: vramd.start(models={...}) -> a running Vramd. Cleans up and checks for
    leaked worker processes at teardown."""
    if not vramd_binary().exists():
        pytest.fail(f"{vramd_binary()} not found: build vramd first")
    factory = VramdFactory(tmp_path, request.node)
    yield factory
    problems = factory.cleanup()
    if problems:
        pytest.fail("; ".join(problems))


def run_threads(funcs, timeout=60):
    """Run callables in threads; return their results (or exceptions) in order."""
    import threading
    results = [None] * len(funcs)

    def wrap(i, f):
        try:
            results[i] = f()
        except Exception as e:  # surfaced to the caller
            results[i] = e

    threads = [threading.Thread(target=wrap, args=(i, f), daemon=True)
               for i, f in enumerate(funcs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


def readable(sock, timeout):
    r, _, _ = select.select([sock], [], [], timeout)
    return bool(r)


__all__ = ["RawConn", "Resp", "PeerClosed", "build_request", "http_request", "free_port",
           "wait_for", "pid_alive", "pids_with_cmdline", "run_threads", "readable",
           "yaml_dump", "PYTHON", "TESTWORKER", "REPO_ROOT"]
