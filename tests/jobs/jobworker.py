#!/usr/bin/python3
"""jobworker: a small HTTP/1.1 model server for vramd's job tests (stdlib only).

Supervised by vramd (cmd: [..., --port, "{port}", --log, FILE]). Every request other than
/health is recorded in the --log file, one line per event, appended and flushed at once, so
the test sees what reached the worker even across kill -9 of vramd (which kills the worker):
  "start <token>"   the request arrived
  "done <token>"    the worker finished it and is about to answer (written BEFORE the answer)
  "closed <token>"  the client (vramd) closed the connection while the work was running

The request body is JSON: {"token": str, "ms": int (work time, default 20), "bytes": int
(size of a binary answer), "status": int (answer with this status instead), "kind": "json" |
"binary" | "chunked" | "crash", "mark": path, "again_ms": int}. With "mark", the first run
of the job (on any host: the path is on the shared file system) creates that file and works
`ms`; a later run finds it and works `again_ms` instead (a rerun elsewhere that must last
longer than the first). With "status_while": path, `status` applies only while that file
exists (a worker that fails until the test lets it work). With "hold_while": path, the work
waits while that file exists (the test holds every job until it lets them all go). Routes:
  GET  /health   200
  POST /work (or /v1/work, for models without a route)
                 answers after `ms`: JSON {"token", "result": "R-<token>"} (kind json),
                 `bytes` bytes of a pattern derived from the token as application/octet-stream
                 (kind binary), the JSON answer in 3 chunks (kind chunked); kind crash exits
                 the process before answering; status >= 300 answers that status with
                 {"error": "asked for <status>"}.
  ANY  other     404
Flags: --port P, --name N (tag for process checks), --log FILE.
"""
import argparse
import hashlib
import json
import os
import select
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_PATH = None
_lock = threading.Lock()


def record(event, token):
    with _lock:
        with open(LOG_PATH, "a") as f:
            f.write(f"{event} {token}\n")
            f.flush()


def pattern(token, n):
    seed = hashlib.sha256(token.encode()).digest()
    out = bytearray()
    while len(out) < n:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return bytes(out[:n])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jobworker/1"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def answer(self, status, ctype, body, chunked=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            step = max(1, len(body) // 3)
            for i in range(0, len(body), step):
                part = body[i:i + step]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        self.wfile.flush()

    def client_closed(self):
        r, _, _ = select.select([self.connection], [], [], 0)
        if not r:
            return False
        try:
            return self.connection.recv(1, 0x2) == b""  # MSG_PEEK
        except OSError:
            return True

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, "application/json", b'{"status":"ok"}')
        else:
            self.answer(404, "application/json", b'{"error":"no such route"}')

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.path not in ("/work", "/v1/work"):
            self.answer(404, "application/json", b'{"error":"no such route"}')
            return
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            self.answer(400, "application/json", b'{"error":"body is not JSON"}')
            return
        token = str(req.get("token", "-"))
        record("start", token)
        ms = int(req.get("ms", 20))
        if req.get("mark"):
            try:
                os.close(os.open(req["mark"], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                ms = int(req.get("again_ms", ms))
        hold = req.get("hold_while")
        while hold and os.path.exists(hold):  # the test holds the work until it removes the file
            if self.client_closed():
                record("closed", token)
                self.close_connection = True
                return
            time.sleep(0.01)
        deadline = time.monotonic() + ms / 1000.0
        while time.monotonic() < deadline:
            if self.client_closed():
                record("closed", token)
                self.close_connection = True
                return
            time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
        kind = req.get("kind", "json")
        if kind == "crash":
            record("crash", token)
            os._exit(3)
        status = int(req.get("status", 200))
        if req.get("status_while") and not os.path.exists(req["status_while"]):
            status = 200
        record("done", token)
        if status >= 300:
            self.answer(status, "application/json", json.dumps({"error": f"asked for {status}"}).encode())
        elif kind == "binary":
            self.answer(200, "application/octet-stream", pattern(token, int(req.get("bytes", 1000))))
        else:
            body = json.dumps({"token": token, "result": f"R-{token}"}).encode()
            self.answer(200, "application/json", body, chunked=(kind == "chunked"))


def main():
    global LOG_PATH
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    ap.add_argument("--name", default="jobworker")
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    LOG_PATH = args.log
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    sys.stdout.write(f"jobworker {args.name} listening on {args.port}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
