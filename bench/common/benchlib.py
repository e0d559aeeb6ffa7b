"""benchlib: shared helpers for vramd's benchmarks (bench/proxy-overhead, bench/parked).

Job: start and stop the processes a benchmark needs (nginx as a trivial upstream, HAProxy and
vramd as proxies), each with its own config in a private temp dir and listening on
127.0.0.1 only; read per-process CPU time and resident memory from /proc; describe the
environment; write result JSON under bench/results/.

Invariants: every process started here is tracked by a Procs object and stopped (SIGTERM,
then SIGKILL after a bound) when the benchmark ends, even on error; nothing listens beyond
loopback; every wait is bounded by a timeout. Functions raise BenchError when something
cannot be set up (the caller reports it and stops); they never return a made-up number.
"""

import datetime
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.join(REPO, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "tests", "lib"))  # the tests' kit (vramdkit)

from vramdkit import children_of, free_port  # noqa: E402,F401  (free_port: bl.free_port())
RESULTS_DIR = os.path.join(REPO, "bench", "results")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    pass


def exit_cleanly_on_sigterm():
    """SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so every `with Procs()` block
    stops the processes it started."""
    def handler(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, handler)


def wait_port(port, timeout=15.0, proc=None):
    """Waits until 127.0.0.1:port accepts a TCP connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError("%s exited (rc %s) before listening on %d" % (
                getattr(proc, "bench_name", "process"), proc.returncode, port))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError("nothing listens on 127.0.0.1:%d after %.0fs" % (port, timeout))


def http_get(port, path, timeout=5.0):
    """Returns (status, body bytes) of GET http://127.0.0.1:port/path."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def cpu_seconds(pid):
    """utime+stime of a whole process (all its threads), in seconds, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_seconds():
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat; busy =
    user+nice+system over all CPUs (irq and softirq time are left out: loopback traffic is
    processed there, on behalf of whichever process sends, and is nobody's stime)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2]) / CLK_TCK, (v[7] if len(v) > 7 else 0) / CLK_TCK


def kernel_threads_cpu_seconds():
    """CPU seconds of kernel threads (kthreadd and its children: ksoftirqd, kworkers), which
    do our loopback network work too and so do not count as another user's load."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if entry == "2" or fields[1] == "2":
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


class ForeignLoad:
    """Measures how much CPU processes other than ours used over an interval: machine busy
    time minus the CPU of the given pids, of this process and its reaped children (wrk), and
    of kernel threads. A benchmark run on a shared box is suspect when this is high."""

    def __init__(self, pids):
        self.pids = list(pids)

    def _ours(self):
        import resource
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = ru.ru_utime + ru.ru_stime
        me = resource.getrusage(resource.RUSAGE_SELF)
        total += me.ru_utime + me.ru_stime
        total += kernel_threads_cpu_seconds()
        for p in self.pids:
            try:
                total += cpu_seconds(p)
            except OSError:
                pass
        return total

    def __enter__(self):
        self.t0 = time.monotonic()
        self.busy0, self.steal0 = machine_cpu_seconds()
        self.ours0 = self._ours()
        return self

    def __exit__(self, *exc):
        self.elapsed = time.monotonic() - self.t0
        busy1, steal1 = machine_cpu_seconds()
        self.foreign_s = max(0.0, (busy1 - self.busy0) - (self._ours() - self.ours0))
        self.steal_s = steal1 - self.steal0
        # share of one core used by others over the interval
        self.foreign_core_frac = self.foreign_s / self.elapsed if self.elapsed > 0 else 0.0


def wait_quiet(pids, max_foreign=0.10, max_wait=600.0, probe=1.0):
    """Waits (at most max_wait seconds) until, over a `probe`-second window, processes other
    than ours use at most max_foreign of one core. Returns the seconds waited, or None when
    the machine never got quiet (the caller goes on and flags its run)."""
    t0 = time.monotonic()
    told = False
    while True:
        with ForeignLoad(pids) as f:
            time.sleep(probe)
        if f.foreign_core_frac <= max_foreign:
            return time.monotonic() - t0
        if time.monotonic() - t0 > max_wait:
            return None
        if not told and time.monotonic() - t0 > 30:
            print("  (waiting for other processes to stop using %.0f %% of a core)" % (f.foreign_core_frac * 100),
                  flush=True)
            told = True


def rss_kib(pid):
    """VmRSS of a process in KiB, from /proc/PID/status."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchError("no VmRSS for pid %d" % pid)


def median(values):
    v = sorted(values)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


class Procs:
    """Tracks started processes; stop_all() ends them (TERM, then KILL after 5 s)."""

    def __init__(self, keep_dir=False):
        self.dir = tempfile.mkdtemp(prefix="vramd-bench-")
        self.keep_dir = keep_dir
        self.procs = []

    def start(self, name, argv, stdout=None, **kw):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=stdout if stdout is not None else log, stderr=log,
                             stdin=subprocess.DEVNULL, **kw)
        p.bench_name = name
        p.bench_log = log
        self.procs.append(p)
        return p

    def stop(self, p, timeout=5.0):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        p.bench_log.close()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(reversed(self.procs)):
            self.stop(p)
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, name, n=20):
        try:
            with open(os.path.join(self.dir, name + ".log"), "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()


# ---- nginx: the trivial upstream -------------------------------------------------------

def start_nginx(procs, port):
    """nginx, one worker, `return 200 "ok\\n"` for every path, no access log."""
    d = os.path.join(procs.dir, "nginx")
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    user = "user root;\n" if os.geteuid() == 0 else ""
    with open(conf, "w") as f:
        f.write("""%sworker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 16000; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_body_temp_path %s/tmp;
    proxy_temp_path %s/tmp;
    fastcgi_temp_path %s/tmp;
    uwsgi_temp_path %s/tmp;
    scgi_temp_path %s/tmp;
    server {
        listen 127.0.0.1:%d;
        location / { default_type text/plain; return 200 "ok\\n"; }
    }
}
""" % (user, d, d, d, d, d, d, d, port))
    p = procs.start("nginx", ["nginx", "-p", d, "-c", conf, "-e", os.path.join(d, "error.log")])
    try:
        wait_port(port, proc=p)
    except BenchError as e:
        raise BenchError("%s\n%s" % (e, procs.log_tail("nginx")))
    status, body = http_get(port, "/")
    if status != 200 or body != b"ok\n":
        raise BenchError("nginx answered %d %r" % (status, body))
    return p


def nginx_worker_pids(master):
    return [pid for pid, _ in children_of(master.pid)]


# ---- HAProxy ---------------------------------------------------------------------------

def start_haproxy(procs, port, upstream_port, server_maxconn, name="haproxy"):
    """HAProxy 2.6, mode http, nbthread 1, one server with `maxconn server_maxconn`, long
    timeouts (queue included), a stats socket for the queue depth. Returns (proc, sock)."""
    d = os.path.join(procs.dir, name)
    os.makedirs(d, exist_ok=True)
    sock = os.path.join(d, "stats.sock")
    conf = os.path.join(d, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write("""global
    nbthread 1
    maxconn 9000
    stats socket %s mode 600 level admin

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 10m
    timeout server 10m
    timeout queue 10m
    timeout http-request 10s
    timeout http-keep-alive 300s

frontend fe
    bind 127.0.0.1:%d
    maxconn 9000
    default_backend be

backend be
%s    server up 127.0.0.1:%d maxconn %d
""" % (sock, port, os.environ.get("BENCH_HAPROXY_BACKEND_EXTRA", ""), upstream_port, server_maxconn))
    p = procs.start(name, ["haproxy", "-f", conf, "-db"])
    try:
        wait_port(port, proc=p)
    except BenchError as e:
        raise BenchError("%s\n%s" % (e, procs.log_tail(name)))
    return p, sock


def haproxy_stat(sock):
    """(queued, in_flight) of backend `be`: queued = backend queue + its server's queue
    (qcur), in_flight = the server's current sessions (scur), from `show stat`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5.0)
    s.connect(sock)
    s.sendall(b"show stat\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    qcur, scur = header.index("qcur"), header.index("scur")
    queued = in_flight = 0
    for line in lines[1:]:
        cols = line.split(",")
        if len(cols) > qcur and cols[0] == "be":
            if cols[qcur]:
                queued += int(cols[qcur])
            if cols[1] == "up" and cols[scur]:
                in_flight += int(cols[scur])
    return queued, in_flight


def haproxy_queue_depth(sock):
    return haproxy_stat(sock)[0]


# ---- vramd -----------------------------------------------------------------------------

def vramd_binary():
    return os.environ.get("VRAMD_BIN", os.path.join(REPO, "build", "bin", "vramd"))


_snapshot_dir = None


def snapshot_vramd():
    """Copies the vramd binary to a private temp file and points vramd_binary() at it, so a
    rebuild of build/bin/vramd by someone else during a long benchmark cannot change the
    binary between rounds. Returns {"path", "sha256", "mtime"} of the original, or None when
    there is no binary. The copy is removed at exit."""
    global _snapshot_dir
    import atexit
    import hashlib
    src = vramd_binary()
    if not os.access(src, os.X_OK):
        return None
    _snapshot_dir = tempfile.mkdtemp(prefix="vramd-bench-bin-")
    atexit.register(shutil.rmtree, _snapshot_dir, True)
    dst = os.path.join(_snapshot_dir, "vramd")
    shutil.copy2(src, dst)
    with open(dst, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    os.environ["VRAMD_BIN"] = dst
    return {"path": src, "sha256": digest,
            "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(src)).strftime("%Y-%m-%dT%H:%M:%S")}


def start_vramd(procs, port, upstream_port, concurrency, queue_max, max_connections,
                log_level="warn", name="vramd", route="/b/", deadline="10m"):
    """vramd with one external model (url: the upstream) on `route`, the given concurrency
    and queues, a long deadline (vramd refuses a request whose predicted start, queue ahead x
    learned run time, is past its deadline: the parked benchmark needs a very long one). Returns the process; raises BenchError when it does not
    come up or does not proxy."""
    binary = vramd_binary()
    if not os.access(binary, os.X_OK):
        raise BenchError("no vramd binary at %s (build it: make build/bin/vramd)" % binary)
    d = os.path.join(procs.dir, name)
    os.makedirs(os.path.join(d, "var"), exist_ok=True)
    conf = os.path.join(d, "vramd.yaml")
    extra = os.environ.get("VRAMD_BENCH_EXTRA_YAML", "")
    with open(conf, "w") as f:
        f.write("""listen: 127.0.0.1:%d
state_dir: %s/var
log: { format: json, level: %s }
limits: { max_connections: %d, queue_max: %d, header_timeout: 10s }
%s
models:
  bench:
    route: %s
    url: http://127.0.0.1:%d
    health: { path: /health, interval: 5s, timeout: 2s, failures: 3 }
    concurrency: %d
    queue_max: %d
    deadline: %s
""" % (port, d, log_level, max_connections, queue_max, extra, route, upstream_port,
           concurrency, queue_max, deadline))
    p = procs.start(name, [binary, "--config", conf])
    try:
        wait_port(port, proc=p)
    except BenchError as e:
        raise BenchError("%s; vramd log tail:\n%s" % (e, procs.log_tail(name)))
    deadline = time.monotonic() + 15
    last = None
    while time.monotonic() < deadline:
        try:
            last = http_get(port, route + "ping")
            if last[0] == 200 and last[1] == b"ok\n":
                return p
        except OSError as e:
            last = repr(e)
        time.sleep(0.2)
    raise BenchError("vramd does not proxy to the upstream (last answer: %r); log tail:\n%s"
                     % (last, procs.log_tail(name)))


def vramd_status(port):
    status, body = http_get(port, "/v1/status")
    if status != 200:
        raise BenchError("/v1/status answered %d" % status)
    return json.loads(body)


def vramd_model_stat(port, model="bench"):
    """(queued, in_flight) of a model, from /v1/status."""
    for m in vramd_status(port).get("models", []):
        if m.get("name") == model:
            return int(m["queue"]["depth"]), int(m.get("in_flight", 0))
    raise BenchError("model %s not in /v1/status" % model)


def vramd_queue_depth(port, model="bench"):
    return vramd_model_stat(port, model)[0]


# ---- environment and results -----------------------------------------------------------

def _cmd_first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (out.stdout + out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def environment():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    vramd_version = _cmd_first_line([vramd_binary(), "--version"]) if os.access(vramd_binary(), os.X_OK) else None
    git_rev = _cmd_first_line(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    try:
        with open("/proc/loadavg") as f:
            loadavg = f.read().split()[:3]
    except OSError:
        loadavg = None
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "virtualization": _cmd_first_line(["systemd-detect-virt"]),
        "nginx": _cmd_first_line(["nginx", "-v"]),
        "haproxy": _cmd_first_line(["haproxy", "-v"]),
        "wrk": _cmd_first_line(["wrk", "-v"]),
        "vramd": vramd_version,
        "git_head": git_rev,
        "loadavg_at_start": loadavg,
    }


def write_results(name, data):
    """Writes bench/results/NAME-STAMP.json and copies it to NAME-latest.json; a --quick
    (smoke) run is written as NAME-quick-STAMP.json and never becomes -latest."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    quick = "-quick" if data.get("quick") else ""
    path = os.path.join(RESULTS_DIR, "%s%s-%s.json" % (name, quick, stamp))
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    if not quick:
        shutil.copyfile(path, os.path.join(RESULTS_DIR, "%s-latest.json" % name))
    return path


def fmt(v, spec="%.1f", none="-"):
    return none if v is None else spec % v


def print_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(header, widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(x).rjust(w) if i else str(x).ljust(w)
                        for i, (x, w) in enumerate(zip(r, widths))))

