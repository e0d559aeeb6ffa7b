"""One vramd daemon (Vramd) and one worker a test starts itself (ExternalWorker).

Vramd: its config in the test's tmp dir (YAML or JSON), its log in a file, started with or
without a simulated GPU (gpu_set: SIMGPU, the NVML simulation, simworker on PATH; without
one, VRAMD_NVML_LIBRARY is removed from its environment), /v1/status helpers, its JSON log
read incrementally (each event with "_i", its position, so the order of events can be
asserted), ledger checks, stop with SIGTERM then SIGKILL.

Two ways to talk HTTP to it, chosen per daemon (http=):
  "raw"     the kit's RawConn (net.http_request): byte-exact, errors raise; post() without a
            body sends none (tests/e2e and the suites built on it);
  "stdlib"  http.client (net.request): connection errors come back as Reply.error; post()
            without a body sends {} (the scheduling suites).
"""
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from .net import REQUEST_TIMEOUT, RawConn, http_request, request
from .paths import REPO_ROOT, vramd_binary
from .sim import sim_env
from .waits import Background, wait_for

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")
OOM_MARKERS = ("out of memory", "outofmemoryerror", "request_oom", "load_failed", "reload_failed")


def sanitizer_reports(text):
    return [m for m in SANITIZER_MARKERS if m in text]


def has_oom(text):
    low = text.lower()
    return any(m in low for m in OOM_MARKERS)


# --- configs -------------------------------------------------------------------------------

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


def config_port(config):
    if isinstance(config, str):
        m = re.search(r"^listen:\s*\S*?:(\d+)", config, re.M)
        return int(m.group(1)) if m else None
    return int(str(config["listen"]).rsplit(":", 1)[1])


# --- ledger checks ----------------------------------------------------------------------------

def ledger_problems(status):
    """The ledger's arithmetic, checked on one /v1/status document: [] when consistent."""
    problems = []
    for g in status.get("gpus", []):
        entries = g.get("ledger", [])
        total = sum(e["bytes"] for e in entries)
        res = sum(e["bytes"] for e in entries if e["kind"] == "resident")
        req = sum(e["bytes"] for e in entries if e["kind"] == "request")
        if g["reserved"] != total:
            problems.append(f"gpu {g['index']}: reserved {g['reserved']} != sum of entries {total}")
        if g["reserved_resident"] != res or g["reserved_requests"] != req:
            problems.append(f"gpu {g['index']}: reserved_resident/requests {g['reserved_resident']}"
                            f"/{g['reserved_requests']} != entries {res}/{req}")
        if g["capacity"] != max(0, g["total"] - g["headroom"] - g["foreign"]):
            problems.append(f"gpu {g['index']}: capacity {g['capacity']} != total - headroom - "
                            f"foreign ({g['total']} - {g['headroom']} - {g['foreign']})")
    return problems


def ledger_is_resident_only(status):
    """Every GPU: reserved == reserved_resident and no request reservation left."""
    for g in status.get("gpus", []):
        if g["reserved"] != g["reserved_resident"] or g["reserved_requests"] != 0:
            return False
        if any(e["kind"] == "request" for e in g.get("ledger", [])):
            return False
    return True


# --- vramd -----------------------------------------------------------------------------------

class Vramd:
    """One daemon. tmp: the directory for NAME.yaml (config), NAME.log (stderr, and stdout
    unless stdout_apart: then NAME.stdout). gpu_set: run on that simulated GPU set (None: no
    simulation). http: "raw" or "stdlib" (see the module docstring)."""

    def __init__(self, tmp, name, config, *, gpu_set=None, cwd=None, config_format="yaml",
                 stdout_apart=True, http="raw", start_timeout=20.0, stop_timeout=20.0,
                 request_timeout=REQUEST_TIMEOUT, extra_env=None, preexec=None):
        assert http in ("raw", "stdlib")
        self.extra_env = dict(extra_env or {})  # added to (or replacing) its environment
        self.preexec = preexec  # run in the child before exec (e.g. join a cgroup)
        self.tmp = tmp
        self.name = name
        self.gpu_set = gpu_set
        self.cwd = cwd or REPO_ROOT
        self.config_format = config_format
        self.stdout_apart = stdout_apart
        self.http = http
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.request_timeout = request_timeout
        self.port = config_port(config)
        self.config_path = tmp / f"{name}.yaml"
        self.log_path = tmp / f"{name}.log"
        self.stdout_path = tmp / f"{name}.stdout"
        self.write_config(config)
        self.proc = None
        self.returncode = None
        self.stopped = False
        self.allow_oom = set()  # model names whose worker output may mention OOM
        self._events = []
        self._offset = 0
        self._partial = b""
        self._log_lock = threading.Lock()

    # config ----------------------------------------------------------------------------
    def write_config(self, config):
        if isinstance(config, str):
            text = config
        elif self.config_format == "json":
            text = json.dumps(config, indent=1) + "\n"
        else:
            text = yaml_dump(config) + "\n"
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config_path)
        self.config = config

    def env(self):
        if self.gpu_set is not None:
            env = sim_env(self.gpu_set)
        else:
            env = dict(os.environ)
            env.pop("VRAMD_NVML_LIBRARY", None)
        env.update(self.extra_env)
        return env

    # life ------------------------------------------------------------------------------
    def start(self, wait=True):
        binary = vramd_binary()
        if not binary.exists():
            pytest.fail(f"{binary} not found: build it first (make {binary.relative_to(REPO_ROOT)})")
        self.log_file = open(self.log_path, "ab")
        self.stdout_file = open(self.stdout_path, "ab") if self.stdout_apart else None
        self.proc = subprocess.Popen([str(binary), "--config", str(self.config_path)],
                                     stdout=self.stdout_file or self.log_file, stderr=self.log_file,
                                     cwd=self.cwd, env=self.env(), preexec_fn=self.preexec)
        self.stopped = False
        if wait:
            wait_for(self._healthz, timeout=self.start_timeout, what=f"vramd /healthz on {self.port}")
        return self

    def _healthz(self):
        if self.proc.poll() is not None:
            pytest.fail(f"vramd exited with {self.proc.returncode} before answering /healthz;"
                        f" log:\n{self.log_tail()}")
        return self.request("GET", "/healthz", timeout=5).status == 200

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=None):
        try:
            self.returncode = self.proc.wait(timeout or self.stop_timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self, timeout=None):
        """SIGTERM, then SIGKILL after timeout; returns the exit code (None if killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout or self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                self.returncode = None
                self._close_files()
                self.stopped = True
                return None
        self.returncode = self.proc.returncode
        self._close_files()
        self.stopped = True
        return self.returncode

    def _close_files(self):
        for f in (getattr(self, "log_file", None), getattr(self, "stdout_file", None)):
            if f and not f.closed:
                f.close()

    # HTTP ------------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=None):
        timeout = timeout or self.request_timeout
        if self.http == "raw":
            return http_request(self.port, method, path, headers, body, timeout)
        return request(self.port, method, path, body, headers, timeout)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, headers=None, timeout=None):
        if body is None and self.http == "stdlib":
            body = {}
        return self.request("POST", path, body, headers, timeout)

    def conn(self, timeout=None):
        return RawConn(self.port, timeout=timeout or self.request_timeout)

    def generate(self, model, body=None, headers=None, timeout=None):
        """POST /<model>/generate (simworker's generation endpoint) through vramd."""
        return self.post(f"/{model}/generate", body, headers, timeout)

    def later(self, model, body=None, headers=None, timeout=None):
        """Start a generate request in a thread; returns a Background."""
        return Background(lambda: self.generate(model, body, headers, timeout))

    # /v1/status ------------------------------------------------------------------------
    def status(self):
        r = self.request("GET", "/v1/status", timeout=15)
        assert r.status == 200, r
        return r.json()

    def gpus(self):
        return self.status()["gpus"]

    def model(self, name, status=None):
        for m in (status or self.status())["models"]:
            if m["name"] == name:
                return m
        raise AssertionError(f"model {name} not in /v1/status")

    def instances(self, name, status=None):
        return self.model(name, status).get("instances", [])

    def worker_pids(self, model):
        return [i.get("pid") for i in self.instances(model) if i.get("pid")]

    def worker_port(self, model):
        """Port of the model's (first) running instance, for talking to it directly."""
        def find():
            for inst in self.instances(model):
                if inst.get("port") and inst.get("state") not in ("stopped", "failed"):
                    return inst["port"]
            return None
        return wait_for(find, timeout=self.start_timeout, what=f"an instance port for {model}")

    def wait_model(self, name, pred, timeout=20.0, what=None):
        return wait_for(lambda: pred(self.model(name)), timeout=timeout,
                        what=what or f"model {name} condition")

    def wait_model_state(self, model, states, timeout=None):
        if isinstance(states, str):
            states = (states,)
        return self.wait_model(model, lambda m: m if m["state"] in states else None,
                               timeout or self.start_timeout, f"model {model} in state {states}")

    def wait_ready(self, name, timeout=20.0):
        return self.wait_model(name, lambda m: m["state"] == "ready" and any(
            i["state"] == "ready" for i in m["instances"]), timeout, f"model {name} ready")

    def wait_queued(self, name, depth=1, timeout=20.0):
        return self.wait_model(name, lambda m: m["queue"]["depth"] >= depth, timeout,
                               f"{depth} request(s) queued for {name}")

    def wait_in_flight(self, name, n=1, timeout=20.0):
        return self.wait_model(name, lambda m: m["in_flight"] >= n, timeout,
                               f"{n} request(s) in flight for {name}")

    # ledger ----------------------------------------------------------------------------
    def assert_ledger_clean(self, timeout=15.0):
        """Poll until the ledger holds resident reservations only (releases happen at
        the end of requests), checking its arithmetic on the way."""
        last = {}

        def clean():
            st = self.status()
            last["st"] = st
            problems = ledger_problems(st)
            assert not problems, problems
            return ledger_is_resident_only(st)

        deadline = time.monotonic() + timeout
        while not clean():
            if time.monotonic() > deadline:
                gpus = [{k: g[k] for k in ("index", "reserved", "reserved_resident",
                                           "reserved_requests", "claimed", "ledger")}
                        for g in last["st"]["gpus"]]
                pytest.fail(f"{self.name}: ledger not back to resident reservations only "
                            f"after {timeout}s: {json.dumps(gpus)}")
            time.sleep(0.05)
        return last["st"]

    # logs ------------------------------------------------------------------------------
    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=150):
        return "\n".join(self.log_text().splitlines()[-n:])

    def events(self, event=None, **match):
        """Every JSON log line (as a dict with "_i", its position) matching event/fields;
        non-JSON lines are skipped."""
        with self._log_lock:
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._offset += len(data)
            data = self._partial + data
            lines = data.split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                line = line.strip()
                if not line.startswith(b"{"):
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                e["_i"] = len(self._events)
                self._events.append(e)
            out = list(self._events)
        return [e for e in out if (event is None or e.get("event") == event)
                and all(e.get(k) == v for k, v in match.items())]

    def first(self, event, **match):
        ev = self.events(event, **match)
        return ev[0] if ev else None

    def wait_event(self, event, timeout=20.0, count=1, **match):
        return wait_for(lambda: len(self.events(event, **match)) >= count and
                        self.events(event, **match), timeout=timeout,
                        what=f"{count} log event(s) {event} {match} in {self.name}")

    def worker_lines(self, model=None):
        return [e.get("line", "") for e in self.events("worker_output")
                if model is None or e.get("model") == model]

    def oom_lines(self, model=None):
        return [line for line in self.worker_lines(model) if has_oom(line)]

    def assert_no_oom(self, model=None):
        bad = self.oom_lines(model)
        assert not bad, f"{self.name}: OOM in worker output: {bad[:5]}"

    def sanitizer_reports(self):
        return sanitizer_reports(self.log_text())

    def format_errors(self):
        """Log lines with a log_format_error field, or a field whose value is one (a spec
        common/log.c does not know, after its key)."""
        return [e for e in self.events() if "log_format_error" in e or "log_format_error" in e.values()]


# --- workers a test starts itself ---------------------------------------------------------------

class ExternalWorker:
    """A model server the test starts itself (for url: models, or no vramd at all): argv
    (with its port in it), output to log_path; waits until GET /health answers 200."""

    def __init__(self, argv, port, name, log_path, env=None, cwd=None, start_timeout=20.0,
                 what="worker"):
        self.name = name
        self.port = port
        self.what = what
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd or REPO_ROOT)
        self.pid = self.proc.pid
        wait_for(self._healthy, timeout=start_timeout, what=f"{what} {name} up")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _healthy(self):
        if self.proc.poll() is not None:
            pytest.fail(f"{self.what} {self.name} exited {self.proc.returncode}:\n{self.log()}")
        return request(self.port, "GET", "/health", timeout=5).status == 200

    def generate(self, body=None, timeout=60.0):
        return request(self.port, "POST", "/generate", body if body is not None else {},
                       timeout=timeout)

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def oom_lines(self):
        return [line for line in self.log().splitlines() if has_oom(line)]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass

    def close(self):
        self.kill()
        if not self._log.closed:
            self._log.close()
