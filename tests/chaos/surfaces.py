"""The chaos run's newer surfaces (issue 36): open WebSocket tunnels and abuse of the CUDA
shim's grant socket, each a set of threads that run beside chaos.py's traffic and monkey.

Tunnels: a `ws` model (tests/e2e/ws_echo_worker.py, `upgrade: [websocket]`); each tunnel
client opens a tunnel by hand (RFC 6455 frames over a raw socket), holds it 0.2-2.5 s while
echoing a message every 50-150 ms, and closes it. A tunnel's upgrade is answered 101 or one
of chaos.py's documented statuses (after a 503 model_not_ready, since an upgrade starts no
worker, the client sends a plain GET /ws/health, which does, as a page's own requests would); a message comes back unchanged; a tunnel may be cut only
when a worker was disturbed meanwhile (killed, stopped, restarted: chaos.py's windows), never
by a reload (SIGHUP). The monkey also restarts the ws model through the admin route. At the
end, tunnels held open across vramd's SIGTERM must each be closed by vramd, and vramd must exit
0 (issue 36, defect 1: two tunnels hung it).

Grant socket: a thread that, every 50-300 ms, does one of: a flood of 40 connections that say
nothing (all but limits.shim_connections_per_process must be closed at once), one connection
that says nothing (closed at limits.shim_hello_timeout), 64-300 bytes of garbage (a whole bad
message: closed at once), 1-63 bytes of garbage (half a message: closed at the timeout).
Every connection it opens is closed by vramd within its bound plus 2 s, or it is a problem.
The `slow` model runs with its CUDA shim (cuda_shim: auto), and its worker is killed by the
monkey too: each new worker's shim must say HELLO during the abuse; at the end every
instance of it has its shim attached (issue 36, defect 4: the flood reset the next HELLO).
"""
import base64
import os
import random
import re
import socket
import struct
import threading
import time
from collections import Counter

from vramdkit import request
from vramdkit.paths import PYTHON, REPO_ROOT

WS_WORKER = str(REPO_ROOT / "tests" / "e2e" / "ws_echo_worker.py")
HELLO_TIMEOUT_S = 1.0  # the chaos config's limits.shim_hello_timeout
PER_PROCESS = 16       # limits.shim_connections_per_process (the default)
FLOOD = 40
SLACK_S = 2.0          # what a loaded 2-core machine may add to a bound


def ws_model(tag):
    return {
        "route": "/ws/",
        "cmd": [PYTHON, WS_WORKER, "--port", "{port}", "--name", f"ws@{tag}"],
        "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
        "startup_timeout": "30s",
        "stop_timeout": "2s",
        "concurrency": 1,
        "keep_alive": "10m",
        "upgrade": ["websocket"],
    }


# ---- a WebSocket client over a raw socket ---------------------------------------------

class Tunnel:
    """One tunnel through vramd: open() answers the upgrade's status; echo() sends a masked
    text frame and reads the answer (None when the tunnel was closed)."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def open(self, path="/ws/ws"):
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n"
                           f"Upgrade: websocket\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return int(head.split(b" ", 2)[1])

    def refusal_code(self):
        """A refused upgrade's error code (its JSON body, read to the close)."""
        try:
            while True:
                self._fill()
        except (EOFError, OSError):
            pass
        m = re.search(rb'"code":"([a-z_]+)"', self.buf)
        return m.group(1).decode() if m else "?"

    def send_frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv_frame(self):
        b0, b1 = self._take(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._take(8))[0]
        return b0 & 0x0F, self._take(n)

    def echo(self, text):
        try:
            self.send_frame(0x1, text.encode())
            op, payload = self.recv_frame()
        except (EOFError, OSError):
            return None
        return payload.decode(errors="replace") if op == 0x1 else None

    def closed_by_peer(self, timeout):
        """True when vramd ends the tunnel (a close frame or EOF) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                op, _ = self.recv_frame()
                if op == 0x8:
                    return True
        except (EOFError, ConnectionError):
            return True
        except OSError:  # the timeout
            return False

    def close(self):
        try:
            self.send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Tunnels:
    """Tunnel clients beside chaos.py's traffic; `chaos` is its Chaos (judge, windows)."""

    def __init__(self, chaos, clients=2):
        self.ch = chaos
        self.clients = clients
        self.outcomes = Counter()
        self.threads = []

    def one(self, rng):
        ch = self.ch
        t0 = time.monotonic()
        try:
            t = Tunnel(ch.port)
            status = t.open()
        except (EOFError, OSError, ValueError, IndexError) as e:
            if not ch.disturbed(t0, time.monotonic()):
                ch.bad.append(("tunnel", f"upgrade cut with no worker disturbed: {e!r}"))
            self.outcomes["upgrade_cut"] += 1
            return
        if status != 101:
            code = t.refusal_code()
            t.sock.close()
            self.outcomes[f"upgrade_{status}_{code}"] += 1
            if status not in ch.documented - {200}:
                ch.bad.append(("tunnel", f"upgrade answered {status} {code}"))
            if code == "model_not_ready":
                # an upgrade starts no worker (docs/api.md): a page's plain request does, as
                # ComfyUI's page loads its UI before it opens /ws
                request(ch.port, "GET", "/ws/health", timeout=60)
            time.sleep(0.1)  # not a busy loop
            return
        end = t0 + rng.uniform(0.2, 2.5)
        i = 0
        while time.monotonic() < end and not ch.stop.is_set():
            msg = f"m{i}-{rng.random()}"
            got = t.echo(msg)
            if got is None:
                self.outcomes["cut"] += 1
                if not ch.disturbed(t0, time.monotonic()):
                    ch.bad.append(("tunnel", f"tunnel cut after {i} messages with no worker disturbed"))
                t.sock.close()
                return
            if got != msg:
                ch.bad.append(("tunnel", f"echo {got!r} for {msg!r}"))
            i += 1
            time.sleep(rng.uniform(0.05, 0.15))
        t.close()
        self.outcomes["held"] += 1
        self.outcomes["messages"] += i

    def client(self, seed):
        rng = random.Random(seed)
        while not self.ch.stop.is_set() and not self.ch.traffic_done.is_set():
            self.one(rng)

    def start(self, seed):
        self.threads = [threading.Thread(target=self.client, args=(seed * 7919 + i,), daemon=True)
                        for i in range(self.clients)]
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "a tunnel client did not finish"

    def restart_ws(self):
        """The monkey's action: restart the ws model (its tunnels end with its worker)."""
        t0 = time.monotonic()
        with self.ch.lock:
            self.ch.disturb.append((t0, t0 + 3.0))
        r = request(self.ch.port, "POST", "/v1/models/ws/restart", timeout=60)
        with self.ch.lock:
            self.ch.disturb.append((t0, time.monotonic() + 0.5))
        if r.status not in (200, 503):
            self.ch.bad.append(("tunnel", f"admin restart of ws: {r!r}"))


def hold_open(port, n):
    """n tunnels opened and echoing, left open (the SIGTERM check)."""
    out = []
    for i in range(n):
        t = Tunnel(port)
        status = t.open()
        assert status == 101, f"tunnel {i} before SIGTERM: {status}"
        assert t.echo(f"held{i}") == f"held{i}"
        out.append(t)
    return out


# ---- grant-socket abuse ----------------------------------------------------------------

def _connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    end = time.monotonic() + 5
    while True:
        try:
            s.connect(path)
            return s
        except BlockingIOError:  # the backlog is full until vramd accepts
            if time.monotonic() > end:
                s.close()
                raise
            time.sleep(0.001)


def _closed(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def _wait_closed(socks, want, timeout):
    end = time.monotonic() + timeout
    while True:
        n = sum(_closed(s) for s in socks)
        if n >= want or time.monotonic() > end:
            return n
        time.sleep(0.02)


class GrantAbuse:
    """One thread abusing the grant socket at `path` until `stop` (see the module docstring)."""

    def __init__(self, chaos, path):
        self.ch = chaos
        self.path = path
        self.acts = Counter()
        self.thread = None

    def flood(self, rng):
        socks = [_connect(self.path) for _ in range(FLOOD)]
        try:
            got = _wait_closed(socks, FLOOD - PER_PROCESS, SLACK_S)
            if got < FLOOD - PER_PROCESS:
                self.ch.bad.append(("grant", f"flood of {FLOOD}: {got} closed past the per-process bound"))
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            for s in socks:
                s.close()

    def one_conn(self, data, bound):
        s = _connect(self.path)
        try:
            if data:
                s.sendall(data)
            if _wait_closed([s], 1, bound + SLACK_S) < 1:
                self.ch.bad.append(("grant", f"a connection that sent {len(data)} bytes still open "
                                             f"after {bound + SLACK_S:.1f} s"))
        finally:
            s.close()

    def run(self, seed):
        rng = random.Random(seed)
        while not self.ch.stop.wait(rng.uniform(0.05, 0.3)) and not self.ch.traffic_done.is_set():
            act = rng.choices(["flood", "silent", "garbage", "half"], [2, 1, 2, 1])[0]
            try:
                if act == "flood":
                    self.flood(rng)
                elif act == "silent":
                    self.one_conn(b"", HELLO_TIMEOUT_S)
                elif act == "garbage":
                    self.one_conn(os.urandom(rng.randint(64, 300)), 0.0)
                else:
                    self.one_conn(os.urandom(rng.randint(1, 63)), HELLO_TIMEOUT_S)
            except OSError as e:
                self.ch.bad.append(("grant", f"{act}: {e!r}"))
            self.acts[act] += 1

    def start(self, seed):
        self.thread = threading.Thread(target=self.run, args=(seed,), daemon=True)
        self.thread.start()

    def join(self):
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the grant-socket abuser did not finish"


def shims_attached(vd, model):
    """Every instance of model has its shim attached: [] or the ones that do not."""
    out = []
    for m in vd.status()["models"]:
        if m["name"] != model:
            continue
        for i in m.get("instances", []):
            s = i.get("shim") or {}
            if i.get("state") == "ready" and s.get("state") != "attached":
                out.append((i.get("id"), s))
    return out
