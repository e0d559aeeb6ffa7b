"""e2e: a client that resets while a chunked answer is forwarded (the whole answer, terminating
chunk included, in one upstream read) leaves vramd running with nothing in flight. The
upstream is a one-shot external server under the test's control.
"""
import fcntl
import os
import signal
import socket
import struct
import termios
import threading
import time

import pytest

from e2ekit import assert_alive
from vramdkit.waits import wait_for


# --- client reset while a chunked answer is forwarded -------------------------------

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
