"""swarm: many client connections from one thread (1,000 slowloris clients, one client's
burst of 1,000 requests), driven with a selector so their answers are read as they come.

    s = Swarm(port, 1000, b"GET / HTTP/1.1\\r\\nHost: x\\r\\n")   # connect, send, t_sent
    s.silent()           # True: no connection got a byte or was closed yet
    s.send_all(b"X-More: 1\\r\\n")
    answers = s.collect(timeout=10)   # one SwarmAnswer per connection, in order
    s.close()

Connections are opened one after another with blocking connects (the kernel completes the
handshake from the listen backlog, so this is quick) and then made non-blocking. An answer
is complete at the end of its body (Content-Length, or none for a head-only status) or when
the peer closes; `collect` stops at its deadline and leaves what was not answered with
status None. Invariants: every socket is closed by close() (also on errors in __init__);
at most `n` sockets are open; nothing here sleeps.
"""
import selectors
import socket
import time


class SwarmAnswer:
    """status (None: no complete head), head (bytes), body (bytes), t_first (monotonic time of
    the first byte, or None), t_end (complete or closed), closed (the peer closed)."""

    def __init__(self):
        self.buf = b""
        self.status = None
        self.head = b""
        self.body = b""
        self.t_first = None
        self.t_end = None
        self.closed = False

    def header(self, name):
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == name.lower().encode():
                return v.strip().decode("latin-1")
        return None

    def done(self):
        return self.t_end is not None

    def _feed(self, data, now):
        if self.t_first is None:
            self.t_first = now
        self.buf += data
        if self.status is None and b"\r\n\r\n" in self.buf:
            self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            parts = self.head.split(b" ", 2)
            self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
        if self.status is not None:
            n = int(self.header("content-length") or 0)
            if len(self.buf) >= n:
                self.body, self.buf = self.buf[:n], self.buf[n:]
                self.t_end = now

    def __repr__(self):
        return f"<SwarmAnswer {self.status} {self.head[:80]!r} closed={self.closed}>"


class Swarm:
    def __init__(self, port, n, first_bytes, host="127.0.0.1", connect_timeout=10.0):
        self.socks = []
        self.t_sent = []
        try:
            for _ in range(n):
                s = socket.create_connection((host, port), timeout=connect_timeout)
                self.socks.append(s)
                s.sendall(first_bytes)
                self.t_sent.append(time.monotonic())
                s.setblocking(False)
        except BaseException:
            self.close()
            raise
        self.answers = [SwarmAnswer() for _ in self.socks]

    def send_all(self, data):
        """Send data on every connection still open (a closed one is skipped)."""
        for s in self.socks:
            try:
                s.send(data)
            except OSError:
                pass

    def silent(self):
        """True when no connection is readable now (no answer byte, no close)."""
        sel = selectors.DefaultSelector()
        try:
            for s in self.socks:
                sel.register(s, selectors.EVENT_READ)
            return not sel.select(timeout=0)
        finally:
            sel.close()

    def collect(self, timeout):
        """Read every connection until its answer is complete or it closes, at most until
        the deadline; returns the answers (in connection order)."""
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        try:
            for i, s in enumerate(self.socks):
                if not self.answers[i].done():
                    sel.register(s, selectors.EVENT_READ, i)
            left = len(sel.get_map())
            while left and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    i, a = key.data, self.answers[key.data]
                    try:
                        data = key.fileobj.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    now = time.monotonic()
                    if data:
                        a._feed(data, now)
                    else:
                        a.closed = True
                        if a.t_first is None:
                            a.t_first = now
                        a.t_end = now
                    if a.done():
                        sel.unregister(key.fileobj)
                        left -= 1
        finally:
            sel.close()
        return self.answers

    def close(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
