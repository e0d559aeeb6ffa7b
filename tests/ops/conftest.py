"""conftest: fixtures for vramd's operations tests (systemd notification, the unit file).

vramd: the end-to-end daemon factory (tests/lib/vramdkit/factory.py, the one tests/e2e uses),
with the kit's report hook, so a failing test shows the daemon's log tail and teardown checks exit 0 on
SIGTERM, no sanitizer report, no log_format_error, no worker left alive.

notify_socket: a NotifyListener, an AF_UNIX datagram socket standing in for systemd's
NOTIFY_SOCKET: it records every message vramd sends (time received, the KEY=VALUE fields)
from a thread, and answers polls with a deadline.

Run: /usr/bin/python3 -m pytest tests/ops                        (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/ops  (after `make SAN=1`)
"""
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit import wait_for  # noqa: E402
from vramdkit.factory import vramd  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)


class NotifyMessage:
    def __init__(self, index, received, raw):
        self.index = index
        self.received = received  # time.monotonic() when read
        self.raw = raw
        self.fields = {}
        for line in raw.decode("utf-8", "replace").split("\n"):
            key, sep, value = line.partition("=")
            if sep:
                self.fields[key] = value

    def has(self, key, value=None):
        return key in self.fields and (value is None or self.fields[key] == value)

    def __repr__(self):
        return f"<notify #{self.index} {self.raw!r}>"


class NotifyListener:
    """What systemd would receive on NOTIFY_SOCKET."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.messages.append(NotifyMessage(len(self.messages), time.monotonic(), data))

    def snapshot(self):
        with self._lock:
            return list(self.messages)

    def find(self, key, value=None, after=None):
        """Messages with KEY (=VALUE), later than message `after` (a NotifyMessage)."""
        start = -1 if after is None else after.index
        return [m for m in self.snapshot() if m.index > start and m.has(key, value)]

    def wait(self, key, value=None, after=None, count=1, timeout=20.0):
        """The first message with KEY (=VALUE) after `after`; waits for `count` of them."""
        found = wait_for(lambda: len(self.find(key, value, after)) >= count and
                         self.find(key, value, after), timeout=timeout,
                         what=f"{count} notify message(s) {key}={value or '*'} after {after}; "
                              f"got {self.snapshot()[-8:]}")
        return found[0]

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path):
    # sun_path holds 108 bytes: fall back to a short directory for a deep tmp_path
    directory = str(tmp_path)
    short = None
    if len(os.path.join(directory, "notify.sock")) > 100:
        short = tempfile.mkdtemp(prefix="vn", dir="/tmp")
        directory = short
    listener = NotifyListener(directory)
    yield listener
    listener.close()
    if short:
        shutil.rmtree(short, ignore_errors=True)
