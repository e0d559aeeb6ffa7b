"""schedkit: helpers for the end-to-end tests of vramd's memory-aware scheduling (issue 4).

Everything here runs the real binaries: simgpu (simulated GPU sets in shared memory),
libnvidia-ml-sim.so (the NVML that vramd dlopens), simworker (the simulated model server)
and vramd itself, from $VRAMD_BUILD (default "build", relative to the repository root).
(A module of its own, imported relatively: pytest runs several test directories, each with
a conftest.py, in one session, and a bare `from conftest import ...` could reach another.)

What lives here:
  - Harness: one per test (the `sched` fixture). It creates GPU sets (unique names
    "sched.PID.N", always removed), writes vramd configs (JSON, which YAML reads as flow
    style), starts vramd with SIMGPU / VRAMD_NVML_LIBRARY / SIMGPU_TIMESCALE / PATH set,
    starts external simworkers and `simgpu alloc` holders, and at the end (finish())
    checks every daemon: ledger back to resident reservations only, no sanitizer report,
    no OOM in any worker's output (unless the test allows it), clean exit 0 on SIGTERM,
    and no simworker left alive.
  - Vramd: one daemon; /v1/status helpers, its JSON log read incrementally (events with
    their line index, so the order of events can be asserted), requests through it.
  - Watch: a thread that polls /v1/status while a test runs, checks the ledger's
    arithmetic at every sample, and records how many request reservations existed at once
    (per GPU, per model) and which instance states were seen.
  - request()/parallel(): plain HTTP requests (http.client) and a thread fan-out.

Invariants: every wait is a poll with a deadline (generous: a slow, loaded 2-core box, ASan
builds); every process a test starts is killed and reaped at teardown; every GPU set made is
removed. Simulated durations are scaled by TIMESCALE (0.05: 1 simulated second = 50 ms).
"""
import http.client
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMESCALE = 0.05
MiB = 1024 * 1024
GiB = 1024 * MiB
HEADROOM = 128 * MiB
START_TIMEOUT = 30.0
REQUEST_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
OOM_MARKERS = ("out of memory", "outofmemoryerror", "request_oom", "load_failed", "reload_failed")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")
_counter = itertools.count(1)


# --- binaries and small utilities -------------------------------------------------------

def build_dir():
    path = Path(os.environ.get("VRAMD_BUILD", "build"))
    return path if path.is_absolute() else REPO_ROOT / path


def binary(name):
    return build_dir() / "bin" / name


def nvml_lib():
    return build_dir() / "lib" / "libnvidia-ml-sim.so"


def check_binaries():
    for path in (binary("vramd"), binary("simgpu"), binary("simworker"), nvml_lib()):
        if not path.exists():
            pytest.fail(f"{path} is missing: build first (make, or make SAN=1 with "
                        f"VRAMD_BUILD=build-san)")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_s(seconds):
    """A simulated duration for simworker/simgpu flags ("12.5s")."""
    return f"{seconds:g}s"


def size(nbytes):
    """Bytes as a plain number string (vramd and simworker both accept it)."""
    return str(int(nbytes))


def wait_for(cond, timeout=20.0, interval=0.05, what="condition"):
    """Poll cond() until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except (OSError, http.client.HTTPException) as e:
            last_exc = e
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def has_oom(text):
    low = text.lower()
    return any(m in low for m in OOM_MARKERS)


# --- HTTP --------------------------------------------------------------------------------

class Reply:
    def __init__(self, status, headers, body, t_start, t_end, error=None):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body
        self.t_start = t_start
        self.t_end = t_end
        self.error = error      # a connection error instead of a response

    @property
    def elapsed(self):
        return self.t_end - self.t_start

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def error_body(self):
        try:
            return self.json()["error"]
        except Exception:
            return {}

    def __repr__(self):
        if self.error:
            return f"<Reply error={self.error!r} after {self.elapsed:.2f}s>"
        return f"<Reply {self.status} body={self.body[:300]!r} after {self.elapsed:.2f}s>"


def request(port, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT):
    """One request on a fresh connection; connection errors come back as Reply.error."""
    hdrs = dict(headers or {})
    data = body
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        data = body.encode()
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, raw, t0,
                     time.monotonic())
    except (OSError, http.client.HTTPException) as e:
        return Reply(None, {}, b"", t0, time.monotonic(), error=e)
    finally:
        conn.close()


def parallel(funcs, timeout=REQUEST_TIMEOUT + 30):
    """Run callables in threads at once; return their results (or exceptions) in order."""
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


class Background:
    """One request running in a thread; .result() waits for its Reply."""

    def __init__(self, func):
        self._reply = None
        self._exc = None
        self._thread = threading.Thread(target=self._run, args=(func,), daemon=True)
        self._thread.start()

    def _run(self, func):
        try:
            self._reply = func()
        except Exception as e:
            self._exc = e

    def done(self):
        return not self._thread.is_alive()

    def result(self, timeout=REQUEST_TIMEOUT + 30):
        self._thread.join(timeout)
        if self._thread.is_alive():
            pytest.fail(f"a background request did not finish within {timeout}s")
        if self._exc:
            raise self._exc
        return self._reply


# --- ledger checks ----------------------------------------------------------------------

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


# --- vramd -------------------------------------------------------------------------------

class Vramd:
    def __init__(self, harness, config, name, gpu_set):
        self.h = harness
        self.name = name
        self.gpu_set = gpu_set
        self.port = int(config["listen"].rsplit(":", 1)[1])
        self.config = config
        self.config_path = harness.tmp / f"{name}.yaml"
        self.log_path = harness.tmp / f"{name}.log"
        self.config_path.write_text(json.dumps(config, indent=1) + "\n")
        self.proc = None
        self.returncode = None
        self.stopped = False
        self.allow_oom = set()  # model names whose worker output may mention OOM
        self._events = []
        self._offset = 0
        self._partial = b""
        self._log_lock = threading.Lock()

    def start(self):
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(binary("vramd")), "--config", str(self.config_path)],
                                     stdout=self._log_file, stderr=self._log_file,
                                     cwd=self.h.tmp, env=self.h.env(self.gpu_set))
        wait_for(self._healthz, timeout=START_TIMEOUT, what=f"vramd /healthz on {self.port}")
        return self

    def _healthz(self):
        if self.proc.poll() is not None:
            pytest.fail(f"vramd exited with {self.proc.returncode} before answering /healthz;"
                        f" log:\n{self.log_tail()}")
        r = request(self.port, "GET", "/healthz", timeout=5)
        return r.status == 200

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait; SIGKILL after timeout. Returns the exit code (None if killed)."""
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
                self._log_file.close()
                self.stopped = True
                return None
        self.returncode = self.proc.returncode
        self._log_file.close()
        self.stopped = True
        return self.returncode

    # HTTP ---------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT):
        return request(self.port, method, path, body, headers, timeout)

    def post(self, path, body=None, headers=None, timeout=REQUEST_TIMEOUT):
        return self.request("POST", path, body if body is not None else {}, headers, timeout)

    def generate(self, model, body=None, headers=None, timeout=REQUEST_TIMEOUT):
        """POST /<model>/generate (simworker's generation endpoint) through vramd."""
        return self.post(f"/{model}/generate", body, headers, timeout)

    def later(self, model, body=None, headers=None, timeout=REQUEST_TIMEOUT):
        """Start a generate request in a thread; returns a Background."""
        return Background(lambda: self.generate(model, body, headers, timeout))

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

    def wait_model(self, name, pred, timeout=20.0, what=None):
        return wait_for(lambda: pred(self.model(name)), timeout=timeout,
                        what=what or f"model {name} condition")

    def wait_ready(self, name, timeout=20.0):
        return self.wait_model(name, lambda m: m["state"] == "ready" and any(
            i["state"] == "ready" for i in m["instances"]), timeout, f"model {name} ready")

    def wait_queued(self, name, depth=1, timeout=20.0):
        return self.wait_model(name, lambda m: m["queue"]["depth"] >= depth, timeout,
                               f"{depth} request(s) queued for {name}")

    def wait_in_flight(self, name, n=1, timeout=20.0):
        return self.wait_model(name, lambda m: m["in_flight"] >= n, timeout,
                               f"{n} request(s) in flight for {name}")

    # ledger -------------------------------------------------------------------------
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

    # logs ---------------------------------------------------------------------------
    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=120):
        return "\n".join(self.log_text().splitlines()[-n:])

    def events(self, event=None, **match):
        """Every JSON log line (as a dict with "_i", its position) matching event/fields."""
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
        text = self.log_text()
        return [m for m in SANITIZER_MARKERS if m in text]


class Watch:
    """Polls /v1/status in a thread while a scenario runs.

    Records, over all samples: the largest number of request reservations at once per GPU
    (max_requests_gpu[index]) and per model (max_requests_model[name]), the instance
    states seen per model, the largest `foreign` and smallest `capacity` per GPU, and any
    ledger arithmetic problem (ledger_problems) seen in a sample.
    """

    def __init__(self, vd, interval=0.02):
        self.vd = vd
        self.interval = interval
        self.samples = 0
        self.max_requests_gpu = {}
        self.max_requests_model = {}
        self.max_requests_total = 0
        self.concurrent_models = set()  # frozensets of models with requests at the same time
        self.states = {}
        self.max_foreign = {}
        self.min_capacity = {}
        self.problems = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def _run(self):
        while not self._stop.is_set():
            try:
                st = self.vd.status()
            except Exception:  # the daemon may be busy; poll again
                time.sleep(self.interval)
                continue
            self.record(st)
            self._stop.wait(self.interval)

    def record(self, st):
        self.samples += 1
        self.problems.extend(ledger_problems(st))
        per_model = {}
        total = 0
        for g in st["gpus"]:
            reqs = [e for e in g["ledger"] if e["kind"] == "request"]
            total += len(reqs)
            idx = g["index"]
            self.max_requests_gpu[idx] = max(self.max_requests_gpu.get(idx, 0), len(reqs))
            self.max_foreign[idx] = max(self.max_foreign.get(idx, 0), g["foreign"])
            self.min_capacity[idx] = min(self.min_capacity.get(idx, g["capacity"]),
                                         g["capacity"])
            for e in reqs:
                per_model[e["owner"]] = per_model.get(e["owner"], 0) + 1
        self.max_requests_total = max(self.max_requests_total, total)
        for name, n in per_model.items():
            self.max_requests_model[name] = max(self.max_requests_model.get(name, 0), n)
        if len(per_model) > 1:
            self.concurrent_models.add(frozenset(per_model))
        for m in st["models"]:
            seen = self.states.setdefault(m["name"], set())
            for inst in m.get("instances", []):
                seen.add(inst["state"])


# --- external processes ------------------------------------------------------------------

class ExternalWorker:
    """A simworker the test starts itself (url: models, or no vramd at all)."""

    def __init__(self, harness, gpu_set, name, flags, gpu=0):
        self.name = name
        self.port = free_port()
        self.log_path = harness.tmp / f"ext-{name}-{self.port}.log"
        self._log = open(self.log_path, "ab")
        env = harness.env(gpu_set)
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        self.proc = subprocess.Popen(
            [str(binary("simworker")), "--port", str(self.port), "--name", f"{name}@{harness.tag}",
             *flags], stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=harness.tmp)
        self.pid = self.proc.pid
        wait_for(self._healthy, timeout=START_TIMEOUT, what=f"simworker {name} up")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _healthy(self):
        if self.proc.poll() is not None:
            pytest.fail(f"simworker {self.name} exited {self.proc.returncode}:\n{self.log()}")
        return request(self.port, "GET", "/health", timeout=5).status == 200

    def generate(self, body=None, timeout=REQUEST_TIMEOUT):
        return request(self.port, "POST", "/generate", body if body is not None else {},
                       timeout=timeout)

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def oom_lines(self):
        return [line for line in self.log().splitlines() if has_oom(line)]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class Holder:
    """A `simgpu alloc` process: foreign memory on a simulated GPU, until it ends."""

    def __init__(self, harness, gpu_set, nbytes, gpu=0, hold=None):
        args = [str(binary("simgpu")), "alloc", gpu_set, "--bytes", size(nbytes), "--gpu", str(gpu)]
        if hold:
            args += ["--hold", hold]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=harness.env(gpu_set))
        self.pid = self.proc.pid
        line = self.proc.stdout.readline()
        if not line.startswith("allocated "):
            self.proc.wait(30)
            pytest.fail(f"simgpu alloc failed ({self.proc.returncode}): {line!r} "
                        f"{self.proc.stderr.read()}")

    def end(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def close(self):
        self.end()
        for s in (self.proc.stdout, self.proc.stderr):
            if s:
                s.close()


def pids_with_cmdline(marker):
    """Live (non-zombie) processes whose command line contains marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and marker in cmd and int(entry) != os.getpid():
            found.append(int(entry))
    return found


# --- the per-test harness ------------------------------------------------------------------

class Harness:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.tag = f"sched{os.getpid()}x{next(_counter)}x{secrets.token_hex(3)}"
        self.sets = []
        self.daemons = []
        self.externals = []
        self.holders = []
        self.finished = False

    # environment ---------------------------------------------------------------------
    def env(self, gpu_set):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env["SIMGPU"] = gpu_set
        env["SIMGPU_TIMESCALE"] = str(TIMESCALE)
        env["VRAMD_NVML_LIBRARY"] = str(nvml_lib())
        env["PATH"] = f"{build_dir() / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def gpu_set(self, memory, gpus=1, release_delay=None):
        """Create a simulated GPU set (memory: "24GiB"; release_delay: simulated, "10s")."""
        name = f"sched.{os.getpid()}.{next(_counter)}.{secrets.token_hex(2)}"
        args = [str(binary("simgpu")), "create", name, "--gpus", str(gpus), "--memory", memory]
        if release_delay:
            args += ["--release-delay", release_delay]
        self.sets.append(name)
        p = subprocess.run(args, capture_output=True, text=True, env=self.env(name), timeout=30)
        if p.returncode != 0:
            pytest.fail(f"simgpu create failed: {p.stdout} {p.stderr}")
        return name

    def show(self, gpu_set):
        p = subprocess.run([str(binary("simgpu")), "show", gpu_set, "--json"],
                           capture_output=True, text=True, env=self.env(gpu_set), timeout=30)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    # configs -------------------------------------------------------------------------
    def worker_cmd(self, name, flags):
        return ["simworker", "--port", "{port}", "--name", f"{name}@{self.tag}", *flags]

    def model(self, name, flags, resident, per_request, **overrides):
        """A supervised simworker model: flags are simworker's, resident/per_request the
        declared memory (sizes as strings or bytes; per_request may be "learn")."""
        mem = {"resident": resident if isinstance(resident, str) else size(resident),
               "per_request": per_request if isinstance(per_request, str) else size(per_request)}
        m = {
            "route": f"/{name}/",
            "cmd": self.worker_cmd(name, flags),
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "startup_timeout": "30s",
            "stop_timeout": "2s",
            "memory": mem,
            "concurrency": 1,
            "queue_max": 64,
            "deadline": "60s",
            "keep_alive": "10m",
        }
        for k, v in overrides.items():
            if k == "memory":
                m["memory"].update(v)
            else:
                m[k] = v
        return m

    def external_model(self, name, worker, resident, per_request, **overrides):
        m = {
            "route": f"/{name}/",
            "url": worker.url,
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "stop_timeout": "2s",
            "memory": {"resident": resident, "per_request": per_request},
            "concurrency": 1,
            "queue_max": 64,
            "deadline": "60s",
        }
        m.update(overrides)
        return m

    def start_vramd(self, gpu_set, models, gpu=None, level="info", **top):
        cfg = {
            "listen": f"127.0.0.1:{free_port()}",
            "state_dir": str(self.tmp / f"var{len(self.daemons)}"),
            "log": {"format": "json", "level": level},
            "gpu": {"headroom": size(HEADROOM), "poll": "50ms"},
            "limits": {"header_timeout": "10s", "queue_max": 1000, "drain_timeout": "20s"},
            "models": models,
        }
        if gpu:
            cfg["gpu"].update(gpu)
        cfg.update(top)
        vd = Vramd(self, cfg, f"vramd{len(self.daemons)}", gpu_set)
        self.daemons.append(vd)
        vd.start()
        wait_for(lambda: vd.status()["nvml"]["ok"] and vd.status()["gpus"], timeout=START_TIMEOUT,
                 what="vramd reading the simulated GPU through NVML")
        return vd

    def external(self, gpu_set, name, flags, gpu=0):
        w = ExternalWorker(self, gpu_set, name, flags, gpu)
        self.externals.append(w)
        return w

    def alloc(self, gpu_set, nbytes, gpu=0, hold=None):
        holder = Holder(self, gpu_set, nbytes, gpu, hold)
        self.holders.append(holder)
        return holder

    # end of a test ---------------------------------------------------------------------
    def finish(self):
        """The checks every scheduling test ends with (see the module docstring)."""
        for vd in self.daemons:
            if vd.stopped:
                continue
            assert vd.alive(), f"{vd.name} died with {vd.proc.returncode}:\n{vd.log_tail()}"
            vd.assert_ledger_clean()
            models = {m["name"] for m in vd.status()["models"]}
            for name in sorted(models - vd.allow_oom):
                vd.assert_no_oom(name)
        for vd in self.daemons:
            if vd.stopped:
                continue
            rc = vd.stop()
            assert rc == 0, f"{vd.name} did not exit cleanly on SIGTERM (exit {rc}):\n{vd.log_tail()}"
            reports = vd.sanitizer_reports()
            assert not reports, f"{vd.name}: sanitizer report in its log {reports}:\n{vd.log_tail()}"
        leftover = wait_for_gone(self.tag, exclude={w.pid for w in self.externals})
        assert not leftover, f"worker processes left alive after vramd exited: {leftover}"
        for w in self.externals:
            text = w.log()
            reports = [m for m in SANITIZER_MARKERS if m in text]
            assert not reports, f"external {w.name}: sanitizer report {reports}"
        self.finished = True

    def close(self):
        """Teardown: stop everything this test started, remove its GPU sets."""
        for vd in self.daemons:
            if vd.alive():
                vd.stop(timeout=10)
        for w in self.externals:
            w.close()
        for holder in self.holders:
            holder.close()
        for pid in pids_with_cmdline(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for name in self.sets:
            subprocess.run([str(binary("simgpu")), "rm", name], capture_output=True, timeout=30)


def wait_for_gone(marker, exclude=(), timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids_with_cmdline(marker) if p not in exclude]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def order(*events):
    """Assert that log events (dicts from Vramd.events, or None) appear in this order."""
    for e in events:
        assert e is not None, f"missing event in {[x and x.get('event') for x in events]}"
    for a, b in zip(events, events[1:]):
        assert a["_i"] < b["_i"], f"{a} should come before {b}"


def after(events, ref):
    """The first of events that comes after ref (a log event), or None."""
    for e in events:
        if e["_i"] > ref["_i"]:
            return e
    return None
