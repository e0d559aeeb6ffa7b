#!/usr/bin/python3
"""faultworker: a tiny model server for vramd's fault tests, for answers simworker never gives.

simworker's outputs are always non-empty and its JSON score is never 0; the field's servers
do both ("skip" answers: 200 with an empty body; a validator's {"score": 0} false success).

  GET  /health   200 {"status": "ok"}
  POST /empty    200 with an empty body (Content-Length: 0): a worker that "skipped" the work
  POST /score    200 {"success": true, "score": S}, S = the request body's "score" (default 1)
  POST /status   the request body's "status" (default 500) with a well-formed JSON body: a
                 server's normal answer to input it rejects
  POST /slow     200 after the body's "sleep" seconds (default 1)
  POST /hang     never answers (the connection stays open; health checks still pass)
  POST /drop     closes the connection without answering (a broken worker)
  POST /badchunk a chunked head and a malformed chunk in one write
  POST /stream   a chunked answer of "chunks" chunks (default 10) of "size" bytes (default
                 100), one every "every" seconds (default 0.2)
  POST /big      200 with "bytes" bytes (default 16 MiB) behind a Content-Length
  POST /unload, POST /reload   hooks: counted, 200
  GET  /calls    {"unload": N, "reload": N}: the hook calls so far
  POST /oom      the body's "level" (default 0) 0: after "oom_after" seconds (default 0.3)
                 500 with PyTorch's out-of-memory text; other levels: 200 {"level": L} after
                 "sleep" seconds (default 0.5) (a model whose degradation ladder fits)
  POST /mute     from now on every request (health checks included) is read and never
                 answered; connections are still accepted (a port check passes)
  POST /unmute   answers again (this one request is served while muted); the requests held
                 while muted are dropped without an answer
  anything else  404
Head and body leave in two writes (end_headers flushes the head): Python's http.server
family, whose second small write waits for the first one's ACK (Nagle).

Flags: --port P (or env PORT), --name N (appears in the command line, so tests can find the
process). HTTP/1.1 with keep-alive; every answer has a Content-Length. SIGTERM: exit 0.
Invariant: stateless; each request is answered from its own body only.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024
CALLS = {"unload": 0, "reload": 0}
CALLS_LOCK = threading.Lock()
UNMUTED = threading.Event()
UNMUTED.set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (stdlib signature)
        sys.stderr.write(f"[faultworker pid={os.getpid()}] {format % args}\n")
        sys.stderr.flush()

    def answer(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n) if n else b""

    def held_while_muted(self):
        """Muted: hold the request unanswered until unmuted, then drop it. True if held."""
        if UNMUTED.is_set() or self.path.split("?", 1)[0].rstrip("/") == "/unmute":
            return False
        UNMUTED.wait()
        self.close_connection = True
        return True

    def do_GET(self):
        if self.held_while_muted():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self.answer(200, b'{"status": "ok"}')
        elif path == "/calls":
            with CALLS_LOCK:
                self.answer(200, json.dumps(CALLS).encode())
        else:
            self.answer(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        if self.held_while_muted():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self.read_body()
        except ValueError:
            self.answer(400, b'{"detail": "bad body"}')
            return
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        handler = getattr(self, "post_" + path.strip("/"), None)
        if path == "/empty":
            self.answer(200, b"")
        elif path == "/score":
            self.answer(200, json.dumps({"success": True, "score": doc.get("score", 1)}).encode())
        elif handler is not None:
            handler(doc)
        else:
            self.answer(404, b'{"detail": "Not Found"}')

    def post_status(self, doc):
        code = int(doc.get("status", 500))
        self.answer(code, json.dumps({"error": f"rejected with {code}"}).encode())

    def post_slow(self, doc):
        time.sleep(float(doc.get("sleep", 1)))
        self.answer(200, b'{"slept": true}')

    def post_hang(self, doc):
        time.sleep(3600)

    def post_drop(self, doc):
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def post_badchunk(self, doc):
        self.close_connection = True
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\nZZ-not-hex\r\nhello\r\n")

    def post_oom(self, doc):
        level = int(doc.get("level", 0))
        if level == 0:
            time.sleep(float(doc.get("oom_after", 0.3)))
            self.answer(500, b'{"detail": "CUDA out of memory. Tried to allocate 2.00 GiB"}')
            return
        time.sleep(float(doc.get("sleep", 0.5)))
        self.answer(200, json.dumps({"level": level}).encode())

    def post_stream(self, doc):
        size, every = int(doc.get("size", 100)), float(doc.get("every", 0.2))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for _ in range(int(doc.get("chunks", 10))):
            time.sleep(every)
            self.wfile.write(b"%x\r\n%s\r\n" % (size, b"s" * size))
        self.wfile.write(b"0\r\n\r\n")

    def post_big(self, doc):
        self.answer(200, b"b" * int(doc.get("bytes", 16 << 20)), "application/octet-stream")

    def hook(self, name):
        with CALLS_LOCK:
            CALLS[name] += 1
        self.answer(200, b'{"ok": true}')

    def post_mute(self, doc):
        UNMUTED.clear()
        self.answer(200, b'{"muted": true}')

    def post_unmute(self, doc):
        UNMUTED.set()
        self.answer(200, b'{"muted": false}')

    def post_unload(self, doc):
        self.hook("unload")

    def post_reload(self, doc):
        self.hook("reload")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0") or 0))
    ap.add_argument("--name", default="faultworker")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ThreadingHTTPServer.request_queue_size = 1024  # a burst of connections is not held in SYN retries
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
