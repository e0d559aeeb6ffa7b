#!/usr/bin/python3
"""faultworker: a tiny model server for vramd's fault tests, for answers simworker never gives.

simworker's outputs are always non-empty and its JSON score is never 0; the field's servers
do both ("skip" answers: 200 with an empty body; a validator's {"score": 0} false success).

  GET  /health   200 {"status": "ok"}
  POST /empty    200 with an empty body (Content-Length: 0): a worker that "skipped" the work
  POST /score    200 {"success": true, "score": S}, S = the request body's "score" (default 1)
  anything else  404

Flags: --port P (or env PORT), --name N (appears in the command line, so tests can find the
process). HTTP/1.1 with keep-alive; every answer has a Content-Length. SIGTERM: exit 0.
Invariant: stateless; each request is answered from its own body only.
"""
import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024


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

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self.answer(200, b'{"status": "ok"}')
        else:
            self.answer(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self.read_body()
        except ValueError:
            self.answer(400, b'{"detail": "bad body"}')
            return
        if path == "/empty":
            self.answer(200, b"")
        elif path == "/score":
            try:
                doc = json.loads(body or b"{}")
            except ValueError:
                doc = {}
            score = doc.get("score", 1) if isinstance(doc, dict) else 1
            self.answer(200, json.dumps({"success": True, "score": score}).encode())
        else:
            self.answer(404, b'{"detail": "Not Found"}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0") or 0))
    ap.add_argument("--name", default="faultworker")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
