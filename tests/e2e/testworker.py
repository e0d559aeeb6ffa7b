#!/usr/bin/python3
"""testworker: a small HTTP/1.1 model server for vramd's end-to-end tests (stdlib only).

It plays a worker that vramd supervises (cmd: [..., --port, "{port}"]) or an external
server the test starts itself (url:). Every endpoint exists to make one proxy behaviour
visible from the outside:

  GET  /health              200 {"status": "ok"} (no counters move)
  ANY  /echo (and any path not listed here)
                            JSON: method, path, headers, body (+ length and sha256), the
                            worker's name, pid, env, the client port it saw (so upstream
                            connection reuse is visible) and a per-process request number
  GET  /slow?ms=N           answers after N ms; if the client (vramd) closes the connection
                            meanwhile it counts a "disconnect" and stops without answering
  GET  /stream?chunks=N&ms=M  chunked response, one chunk, then M ms pause, N times
  GET  /sse?events=N&ms=M   the same as text/event-stream events
  GET  /crash               os._exit(1) before answering
  GET  /crash-mid           sends the head and one chunk of a chunked body, then os._exit(1)
  GET  /hang                never answers (ends only when the client disconnects)
  GET  /big?bytes=N         N bytes with Content-Length
  GET  /count               counters of this process: requests, connections, disconnects,
                            targets seen (request target -> count) - proves what reached it
  GET  /garbage             writes "NOT HTTP\\r\\n\\r\\n" raw and closes

Flags: --port P (or env PORT), --name N, --fail-start (exit 1 at once), --fail-if-file F
(exit 1 at once while file F exists), --start-delay S (sleep before listening),
--ignore-term (ignore SIGTERM, so only SIGKILL stops it).
Each request line is logged to stderr as it arrives; the listening line goes to stdout.
Invariant: counters only move for requests other than /health, and every collection kept
in memory is bounded (targets: 1000 keys, client ports: 1000).
"""
import argparse
import hashlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NAME = "testworker"
MAX_KEYS = 1000
MAX_ECHO_BODY = 64 * 1024

_lock = threading.Lock()
_state = {
    "requests": 0,
    "connections": 0,
    "disconnects": 0,
    "targets": {},
    "client_ports": [],
}


def log(msg):
    sys.stderr.write(f"[{NAME} pid={os.getpid()}] {msg}\n")
    sys.stderr.flush()


def count_request(target):
    with _lock:
        _state["requests"] += 1
        targets = _state["targets"]
        if target in targets or len(targets) < MAX_KEYS:
            targets[target] = targets.get(target, 0) + 1
        return _state["requests"]


def snapshot():
    with _lock:
        return {
            "name": NAME,
            "pid": os.getpid(),
            "requests": _state["requests"],
            "connections": _state["connections"],
            "disconnects": _state["disconnects"],
            "targets": dict(_state["targets"]),
            "client_ports": sorted(set(_state["client_ports"])),
        }


def int_param(query, key, default):
    try:
        return int(query.get(key, [default])[0])
    except ValueError:
        return default


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "testworker/1"

    def setup(self):
        super().setup()
        with _lock:
            _state["connections"] += 1
            if len(_state["client_ports"]) < MAX_KEYS:
                _state["client_ports"].append(self.client_address[1])

    def log_message(self, format, *args):  # noqa: A002 (stdlib signature)
        log(f"{self.client_address[1]} {format % args}")

    def log_request(self, code="-", size="-"):
        pass  # request lines are logged on arrival in dispatch()

    # every method goes to the same dispatcher
    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    # -- helpers ---------------------------------------------------------------------
    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("EOF in chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while True:  # trailers up to the empty line
                        t = self.rfile.readline(8192)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(8)  # CRLF after the chunk data
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, code, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def wait_or_disconnect(self, seconds):
        """Sleep up to seconds; True as soon as the peer closes the connection."""
        end = time.monotonic() + seconds
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            readable, _, _ = select.select([sock], [], [], min(left, 0.05))
            if readable:
                try:
                    peek = sock.recv(1, socket.MSG_PEEK)
                except OSError:
                    peek = b""
                if peek == b"":
                    return True
                time.sleep(min(left, 0.05))  # a pipelined request waits; keep sleeping

    def note_disconnect(self, what):
        with _lock:
            _state["disconnects"] += 1
        log(f"client disconnected during {what}")
        self.close_connection = True

    # -- dispatch --------------------------------------------------------------------
    def dispatch(self):
        log(f"request: {self.requestline}")
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        try:
            body = self.read_body()
        except (ValueError, ConnectionError) as e:
            log(f"bad request body: {e}")
            self.close_connection = True
            return
        if path == "/health":
            self.send_json(200, {"status": "ok", "name": NAME})
            return
        n = count_request(self.path)
        try:
            self.route(path, query, body, n)
        except (BrokenPipeError, ConnectionResetError):
            self.note_disconnect(path)

    def route(self, path, query, body, n):
        if path == "/count":
            self.send_json(200, snapshot())
        elif path == "/slow":
            ms = int_param(query, "ms", 1000)
            if self.wait_or_disconnect(ms / 1000.0):
                self.note_disconnect("/slow")
                return
            self.send_json(200, {"slept_ms": ms, "pid": os.getpid(), "n": n, "name": NAME,
                                 "target": self.path})
        elif path == "/hang":
            while not self.wait_or_disconnect(3600):
                pass
            self.note_disconnect("/hang")
        elif path in ("/stream", "/sse"):
            self.stream(path == "/sse", query)
        elif path == "/crash":
            log("crashing on purpose before answering")
            os._exit(1)
        elif path == "/crash-mid":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.write_chunk(b"partial response, then a crash\n")
            time.sleep(0.1)
            log("crashing on purpose mid-stream")
            os._exit(1)
        elif path == "/big":
            self.big(int_param(query, "bytes", 1 << 20))
        elif path == "/garbage":
            self.wfile.write(b"NOT HTTP\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
        else:
            self.echo(path, body, n)

    def stream(self, sse, query):
        count = int_param(query, "events" if sse else "chunks", 3)
        pause = int_param(query, "ms", 100) / 1000.0
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if sse else "text/plain")
        if sse:
            self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i in range(count):
            if sse:
                self.write_chunk(b"event: tick\ndata: {\"i\": %d}\n\n" % i)
            else:
                self.write_chunk(b"chunk %d\n" % i)
            if self.wait_or_disconnect(pause):
                self.note_disconnect("stream")
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def big(self, size):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = (b"0123456789abcdef" * 4096)  # 64 KiB
        left = size
        while left > 0:
            piece = block[:min(left, len(block))]
            self.wfile.write(piece)
            left -= len(piece)
        self.wfile.flush()

    def echo(self, path, body, n):
        headers = {}
        for k, v in self.headers.items():
            headers[k.lower()] = v
        self.send_json(200, {
            "name": NAME,
            "pid": os.getpid(),
            "n": n,
            "method": self.command,
            "path": self.path,
            "version": self.request_version,
            "headers": headers,
            "header_list": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("latin-1") if len(body) <= MAX_ECHO_BODY else None,
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "client_port": self.client_address[1],
            "env": {k: os.environ.get(k) for k in ("PORT", "VRAMD_MODEL", "TESTWORKER_ENV")},
        })


def main():
    global NAME
    ap = argparse.ArgumentParser(description="HTTP worker for vramd's e2e tests")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--name", default="testworker")
    ap.add_argument("--fail-start", action="store_true")
    ap.add_argument("--fail-if-file", default=None)
    ap.add_argument("--start-delay", type=float, default=0.0)
    ap.add_argument("--ignore-term", action="store_true")
    args = ap.parse_args()
    NAME = args.name

    if args.fail_start or (args.fail_if_file and os.path.exists(args.fail_if_file)):
        log("failing start on purpose")
        sys.exit(1)

    def on_term(signum, frame):
        if args.ignore_term:
            log(f"SIGTERM ignored at {time.time():.6f}")  # the test of case 11 reads the time
            return
        log("SIGTERM: exiting")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if args.start_delay > 0:
        log(f"delaying start by {args.start_delay}s")
        time.sleep(args.start_delay)

    port = args.port if args.port is not None else int(os.environ.get("PORT", "0"))
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"testworker {NAME} pid {os.getpid()} listening on {server.server_address[1]}",
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
