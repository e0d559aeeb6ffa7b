"""The agent-check client of the fleet tests: speaks to vramd's fleet.agent_listen as HAProxy
does (connect, optionally send the agent-send string, read one line, close)."""
import re
import socket
import time

LINE = re.compile(r"^(\d+)% maxconn:(\d+) (ready|drain)(?: (up|down #(.*)))?\n$")


class Answer:
    def __init__(self, raw, elapsed):
        self.raw = raw
        self.elapsed = elapsed
        m = LINE.match(raw)
        assert m, f"not an agent-check line HAProxy reads: {raw!r}"
        self.weight = int(m.group(1))
        self.maxconn = int(m.group(2))
        self.admin = m.group(3)
        self.up = m.group(4) == "up"
        self.down = (m.group(4) or "").startswith("down")
        self.reason = m.group(5) or ""

    def __repr__(self):
        return f"Answer({self.raw!r}, {self.elapsed:.3f}s)"


def ask_raw(port, send=None, host="127.0.0.1", timeout=5.0, half_close=False):
    """Connect, send (bytes or str; None: nothing), read until the agent closes. Returns
    (bytes, seconds)."""
    t0 = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as s:
        if send:
            s.sendall(send.encode() if isinstance(send, str) else send)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data, time.monotonic() - t0


def ask(port, send=None, **kw):
    data, elapsed = ask_raw(port, send, **kw)
    return Answer(data.decode(), elapsed)
