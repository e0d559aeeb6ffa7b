"""The fleet of tests/fleet/test_haproxy.py: three vramd hosts, each with its own simulated GPU
in its own network namespace, and a real HAProxy (contrib/haproxy/haproxy.cfg, as shipped)
in front of them, all started here and all torn down at the end.

Network: one namespace per host ("vf<tag>h<i>"), joined to the test's own namespace by a
veth pair on a /30 of a private range picked per run (10.213.<random>.0/24, one that no
interface uses yet, chosen under a lock file so that fleets of parallel test processes do
not collide: pair i is .4i+1 here and .4i+2 in the namespace). Each vramd listens on 0.0.0.0:8800 (so it needs an
admin token) with its agent on 0.0.0.0:9800; HAProxy runs here and reaches them at .4i+2.
Skips (with the reason) where namespaces cannot be made: not root, no `ip netns`, no
haproxy. Teardown kills every process started, deletes the namespaces (which removes the
veth pairs) and the GPU sets, whatever happened.

The job queue (test_fleet_jobs.py): start_postgres() starts a PostgreSQL 15 cluster here
(vramdkit.pg, as the postgres user) listening on each pair's .4i+1 address too, with
password connections allowed from the /24, and makes one database; host i connects to its
own pair's address (on-link in its namespace: no route needed), so taking one pair's link
down (link(host, False)) cuts that host off from HAProxy and PostgreSQL alike and nothing
else. Teardown stops the cluster and removes its directory.
"""
import csv
import fcntl
import http.client
import io
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time

import pytest

from vramdkit import TIMESCALE, binary, free_port, sim_env, wait_for
from vramdkit import pg as pgkit
from vramdkit.daemon import sanitizer_reports
from vramdkit.paths import REPO_ROOT, vramd_binary
from vramdkit.report import track

HAPROXY_CFG = REPO_ROOT / "contrib" / "haproxy" / "haproxy.cfg"
VRAMD_PORT = 8800
AGENT_PORT = 9800
START_TIMEOUT = 30.0
NET_LOCK = "/tmp/vramd-fleet-net.lock"  # held while a fleet picks its range and makes its pairs


def _run(*args, check=True):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def netns_unavailable():
    """Why this machine cannot run the fleet (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if not shutil.which("ip"):
        return "no ip(8) (iproute2)"
    if not shutil.which("haproxy"):
        return "no haproxy (Debian's haproxy package, see mk/deps.sh)"
    name = f"vfprobe{os.getpid() % 100000}"
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return f"ip netns add failed: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def http_call(host, port, method, path, body=None, headers=None, timeout=30.0):
    """One request on a fresh connection: (status, headers dict, body bytes); status None and
    the error in the body on a connection error."""
    hdrs = dict(headers or {})
    data = body
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException) as e:
        return None, {}, repr(e).encode()
    finally:
        conn.close()


class Host:
    """One vramd in its namespace."""

    def __init__(self, fleet, i):
        self.fleet = fleet
        self.i = i
        self.name = f"h{i}"
        self.ns = f"vf{fleet.tag}h{i}"
        self.addr = f"{fleet.net}.{4 * (i - 1) + 2}"
        self.peer = f"{fleet.net}.{4 * (i - 1) + 1}"
        self.gpu_set = f"fleet.{os.getpid()}.{fleet.tag}.{i}"
        self.config_path = fleet.tmp / f"{self.name}.json"
        self.log_path = fleet.tmp / f"{self.name}.log"
        self.proc = None
        self.log_file = None

    def config(self, models, jobs=None):
        extra = {"jobs": jobs} if jobs else {}
        return {
            "listen": f"0.0.0.0:{VRAMD_PORT}",
            "admin_token_file": str(self.fleet.token_path),
            "state_dir": str(self.fleet.tmp / f"var-{self.name}"),
            "log": {"format": "json", "level": "info"},
            "gpu": {"headroom": str(128 << 20), "poll": "50ms"},
            "limits": {"queue_max": 200, "drain_timeout": "20s", "header_timeout": "10s"},
            "fleet": {"agent_listen": f"0.0.0.0:{AGENT_PORT}", "host_name": self.name},
            "models": models,
            **extra,
        }

    def start(self, models, jobs=None):
        """Start vramd (jobs: its `jobs` section) and wait until it is ready."""
        self.config_path.write_text(json.dumps(self.config(models, jobs), indent=1) + "\n")
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, str(vramd_binary()), "--config",
                                      str(self.config_path)], stdout=self.log_file, stderr=subprocess.STDOUT,
                                     env=sim_env(self.gpu_set, self.fleet.timescale), cwd=self.fleet.tmp)
        wait_for(lambda: self.alive_or_fail() and self.get("/readyz")[0] == 200, timeout=START_TIMEOUT,
                 what=f"{self.name} ready")
        wait_for(lambda: self.status()["nvml"]["ok"] and self.status()["gpus"], timeout=START_TIMEOUT,
                 what=f"{self.name} reading its simulated GPU")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def alive_or_fail(self):
        if not self.alive():
            pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
        return True

    def get(self, path, timeout=10.0):
        return http_call(self.addr, VRAMD_PORT, "GET", path, timeout=timeout)

    def post(self, path, body=None, headers=None, timeout=30.0):
        return http_call(self.addr, VRAMD_PORT, "POST", path, body if body is not None else {}, headers, timeout)

    def inside(self, *argv, timeout=30):
        """Run a command in this host's namespace (a client on the host itself)."""
        return subprocess.run(["ip", "netns", "exec", self.ns, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def admin(self, path):
        return self.post(path, headers={"Authorization": f"Bearer {self.fleet.token}"})

    def status(self):
        st, _, body = self.get("/v1/status")
        assert st == 200, (self.name, st, body)
        return json.loads(body)

    def served(self, model):
        """Requests of model this host has taken (its /v1/status)."""
        for m in self.status()["models"]:
            if m["name"] == model:
                return m.get("requests_total", 0)
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.log_file and not self.log_file.closed:
            self.log_file.close()
        return self.proc.returncode if self.proc else None

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=60):
        return "\n".join(self.log_text().splitlines()[-n:])


class Fleet:
    def __init__(self, tmp, timescale=TIMESCALE):
        self.tmp = tmp
        self.timescale = timescale  # SIMGPU_TIMESCALE of every host (bench/fleet: --timescale)
        self.tag = secrets.token_hex(2)
        self.net = None  # 10.213.N, N free on this machine (make_hosts)
        self.token = secrets.token_hex(16)
        self.token_path = tmp / "admin-token"
        self.token_path.write_text(self.token + "\n")
        os.chmod(self.token_path, 0o600)
        self.hosts = []
        self.haproxy = None
        self.hap_log = None
        self.front_port = free_port()
        self.socket_path = str(tmp / "haproxy.sock")
        self.links = []
        self.pg = None
        self.tracked = []  # logs for a failing test's report (vramdkit.report)

    # network -----------------------------------------------------------------------------
    def _pick_net(self):
        """A 10.213.N.0/24 no interface here uses yet (fleets of tests running at once in
        other pytest workers included: the caller holds NET_LOCK until its pairs exist)."""
        used = _run("ip", "-4", "-o", "addr", "show").stdout
        free = [n for n in range(256) if f" 10.213.{n}." not in used]
        if not free:
            pytest.fail("no free 10.213.N.0/24 for the fleet's veth pairs")
        return f"10.213.{random.choice(free)}"

    def make_hosts(self, n=3):
        with open(NET_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.net = self._pick_net()
            return self._make_hosts(n)

    def _make_hosts(self, n):
        for i in range(1, n + 1):
            h = Host(self, i)
            self.hosts.append(h)
            self.tracked.append(h)
            here, there = f"vf{self.tag}r{i}", f"vf{self.tag}n{i}"
            _run("ip", "netns", "add", h.ns)
            _run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
            self.links.append(here)
            _run("ip", "link", "set", there, "netns", h.ns)
            _run("ip", "addr", "add", f"{h.peer}/30", "dev", here)
            _run("ip", "link", "set", here, "up")
            _run("ip", "-n", h.ns, "addr", "add", f"{h.addr}/30", "dev", there)
            _run("ip", "-n", h.ns, "link", "set", there, "up")
            _run("ip", "-n", h.ns, "link", "set", "lo", "up")
            p = _run(str(binary("simgpu")), "create", h.gpu_set, "--gpus", "1", "--memory", "24GiB", check=False)
            if p.returncode != 0:
                pytest.fail(f"simgpu create: {p.stderr}")
        return self.hosts

    def link(self, host, up):
        """Take host's veth pair up or down (this end): down cuts it off from everything here."""
        _run("ip", "link", "set", self.links[host.i - 1], "up" if up else "down")

    # PostgreSQL ----------------------------------------------------------------------------
    def start_postgres(self):
        """A PostgreSQL cluster reachable from every host's namespace, and a fresh database;
        returns (cluster, database). host.pg_url(db) is that host's connection string."""
        self.pg = pgkit.PgCluster(listen=[h.peer for h in self.hosts], hba=[f"{self.net}.0/24"])
        self.tracked.append(_PgLog(self.pg))
        self.pg.start()
        db = "fleet_" + secrets.token_hex(4)
        self.pg.sql(f"CREATE DATABASE {db}")
        return self.pg, db

    def pg_url(self, host, db):
        return self.pg.url_for(host.peer, db)

    # HAProxy -------------------------------------------------------------------------------
    def start_haproxy(self, cfg=None):
        """HAProxy on contrib/haproxy/haproxy.cfg (or cfg: another file, for the bench)."""
        env = dict(os.environ)
        env.update({
            "VRAMD_FRONT": f"127.0.0.1:{self.front_port}",
            "VRAMD_STATS": f"127.0.0.1:{free_port()}",
            "VRAMD_SOCKET": self.socket_path,
            "VRAMD_PORT": str(VRAMD_PORT),
            "VRAMD_AGENT_PORT": str(AGENT_PORT),
            "VRAMD_AGENT_INTER": "150ms",
            "VRAMD_CHECK_INTER": "200ms",
            "VRAMD_MAXCONN": "1000",
        })
        for h in self.hosts:
            env[f"VRAMD_HOST{h.i}"] = h.addr
        self.hap_log = open(self.tmp / "haproxy.log", "ab")
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg or HAPROXY_CFG)], stdout=self.hap_log,
                                        stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: self._hap_alive() and os.path.exists(self.socket_path), timeout=10, what="haproxy up")

    def _hap_alive(self):
        if self.haproxy.poll() is not None:
            pytest.fail(f"haproxy exited with {self.haproxy.returncode}:\n{self.hap_log_text()}")
        return True

    def hap_log_text(self, limit=6000):
        try:
            return (self.tmp / "haproxy.log").read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def hap_cmd(self, cmd):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.socket_path)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out.decode(errors="replace")

    def servers(self, backend):
        """{server name: row of `show stat`} for one backend (status, weight, stot, ...)."""
        text = self.hap_cmd("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {r["svname"]: r for r in rows if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_weights(self, backend, pred, what, timeout=10.0):
        """Wait until pred({server: (status, weight)}) holds (HAProxy's own view)."""
        def check():
            view = {k: (v["status"], int(v["weight"] or 0)) for k, v in self.servers(backend).items()}
            return pred(view) and view
        return wait_for(check, timeout=timeout, interval=0.05, what=f"haproxy: {what}")

    # requests --------------------------------------------------------------------------------
    def request(self, path, body=None, headers=None, method="POST", timeout=60.0):
        return http_call("127.0.0.1", self.front_port, method, path, body if body is not None else {}, headers, timeout)

    def get(self, path, timeout=10.0):
        """GET through HAProxy (no body)."""
        return http_call("127.0.0.1", self.front_port, "GET", path, timeout=timeout)

    # the end ---------------------------------------------------------------------------------
    def check_hosts_clean(self):
        for h in self.hosts:
            reports = sanitizer_reports(h.log_path.read_text(errors="replace")) if h.log_path.exists() else []
            assert not reports, f"{h.name}: sanitizer report {reports}:\n{h.log_tail()}"

    def close(self):
        for h in self.hosts:
            try:
                h.stop(timeout=15)
            except Exception:
                pass
        if self.haproxy and self.haproxy.poll() is None:
            self.haproxy.terminate()
            try:
                self.haproxy.wait(10)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
                self.haproxy.wait(10)
        if self.hap_log and not self.hap_log.closed:
            self.hap_log.close()
        for h in self.hosts:
            pids = subprocess.run(["ip", "netns", "pids", h.ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            t_end = time.monotonic() + 5  # killed: gone in a moment (the namespace outlives none)
            while pids and time.monotonic() < t_end:
                time.sleep(0.05)
                pids = subprocess.run(["ip", "netns", "pids", h.ns], capture_output=True, text=True).stdout.split()
            subprocess.run(["ip", "netns", "del", h.ns], capture_output=True)
            subprocess.run([str(binary("simgpu")), "rm", h.gpu_set], capture_output=True)
        for link in self.links:  # gone with their namespaces; this only catches a half-made pair
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        if self.pg:
            self.pg.cleanup()


class _HapLog:
    """HAProxy's log, in a failing test's report beside the hosts' (vramdkit.report)."""

    def __init__(self, fleet):
        self.name = "haproxy"
        self.log_path = fleet.tmp / "haproxy.log"
        self.fleet = fleet

    def log_tail(self, n=120):
        return "\n".join(self.fleet.hap_log_text().splitlines()[-n:])


class _PgLog:
    """PostgreSQL's server log, in a failing test's report."""

    def __init__(self, pg):
        self.name = "postgresql"
        self.pg = pg
        self.log_path = pg.dir + "/server.log"

    def log_tail(self, n=120):
        return "\n".join(self.pg.server_log().splitlines()[-n:])


@pytest.fixture
def fleet(tmp_path, request):
    why = netns_unavailable()
    if why:
        pytest.skip(f"fleet tests need network namespaces and haproxy: {why}")
    f = Fleet(tmp_path)
    f.tracked.append(_HapLog(f))
    track(request.node, f.tracked)
    try:
        yield f
    finally:
        f.close()
