#!/usr/bin/python3
"""direct: run a scenario's workers WITHOUT vramd, the way the field notes do.

Reads a scenario's vramd.yaml, starts every supervised model's `cmd` itself (a free port for
{port}, CUDA_VISIBLE_DEVICES=0 or the model's first `gpus` entry), optionally with the
field notes' hand-written fix appended to each simworker command:

  --fix none          workers as they are (what happens without any fix)
  --fix lock          `--lock`: each server serialises its own requests
  --fix global-lock   `--global-lock FILE`: one request on the GPU at a time, across servers

and serves a thin prefix router on --port that forwards `route`-prefixed requests to the
right worker (prefix stripped, like vramd) with no queueing, admission or memory logic, so
the traffic player can replay the same traffic against "the workers directly". External
models (`url:`) are forwarded to their URL; starting them is the caller's job.

    /usr/bin/python3 bench/player/direct.py examples/seed004-vlm-6gb/vramd.yaml --port 18999 --fix lock

Runs until SIGTERM/SIGINT, then stops its workers (SIGTERM, then SIGKILL).
"""
import argparse
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import yaml

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib")
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)  # the tests' kit (vramdkit)
from vramdkit import free_port  # noqa: E402

HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}


def start_workers(cfg, fix, lock_file, log):
    routes = []  # (prefix, host, port, strip)
    names = {}   # model name or alias -> (host, port): OpenAI-style routing by body "model"
    health = []  # (host, port, path) of the workers started here
    procs = []
    defaults = cfg.get("defaults") or {}
    for name, m in (cfg.get("models") or {}).items():
        mm = dict(defaults)
        mm.update(m or {})
        route = mm.get("route")
        if route:
            if not route.startswith("/"):
                route = "/" + route
            if not route.endswith("/"):
                route += "/"
        strip = mm.get("strip", True)
        if mm.get("url"):
            hostport = mm["url"].split("//", 1)[1].rstrip("/")
            host, port = hostport.rsplit(":", 1)
            if route:
                routes.append((route, host, int(port), strip))
            for n in [name] + list(mm.get("aliases") or []):
                names[n] = (host, int(port))
            continue
        port = free_port()
        gpus = mm.get("gpus")
        gpu = str(gpus[0]) if isinstance(gpus, list) and gpus else "0"
        argv = [str(a).replace("{port}", str(port)).replace("{gpu}", gpu) for a in mm["cmd"]]
        if os.path.basename(argv[0]) == "simworker":
            if fix == "lock":
                argv.append("--lock")
            elif fix == "global-lock":
                argv += ["--global-lock", lock_file]
        env = dict(os.environ, PORT=str(port), VRAMD_MODEL=name, CUDA_VISIBLE_DEVICES=gpu)
        env.update({k: str(v) for k, v in (mm.get("env") or {}).items()})
        procs.append(subprocess.Popen(argv, env=env, cwd=mm.get("cwd"), stdout=log, stderr=log,
                                      start_new_session=True))
        if route:
            routes.append((route, "127.0.0.1", port, strip))
        for n in [name] + list(mm.get("aliases") or []):
            names[n] = ("127.0.0.1", port)
        health.append(("127.0.0.1", port, (mm.get("health") or {}).get("path", "/health")))
    routes.sort(key=lambda r: -len(r[0]))
    return routes, names, health, procs


def all_healthy(health):
    for host, port, path in health:
        try:
            c = http.client.HTTPConnection(host, port, timeout=2)
            c.request("GET", path)
            ok = c.getresponse().status == 200
            c.close()
        except (OSError, http.client.HTTPException):
            ok = False
        if not ok:
            return False
    return True


def make_handler(routes, names, health, timeout):
    class Router(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def _forward(self):
            if self.path == "/__direct_ready":
                ok = all_healthy(health)
                data = b'{"ready": %s}' % (b"true" if ok else b"false")
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            target_hp = None
            for prefix, host, port, strip in routes:
                if self.path.startswith(prefix) or self.path == prefix[:-1]:
                    target_hp = (host, port)
                    break
            if target_hp is None and self.command == "POST" and self.path.startswith("/v1/") and body:
                try:
                    doc = json.loads(body)
                    if isinstance(doc, dict) and doc.get("model") in names:
                        target_hp = names[doc["model"]]
                        prefix, strip = "/", False
                except ValueError:
                    pass
            if target_hp is None:
                body = b'{"error": "no route"}'
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            host, port = target_hp
            target = self.path[len(prefix) - 1:] if strip else self.path
            if not target.startswith("/"):
                target = "/" + target
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            try:
                c = http.client.HTTPConnection(host, port, timeout=timeout)
                c.request(self.command, target, body=body, headers=headers)
                r = c.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                data = ('{"error": "worker unreachable: %s"}' % e).encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            c.close()

        do_GET = do_POST = do_PUT = do_DELETE = _forward

    return Router


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fix", choices=["none", "lock", "global-lock"], default="none")
    ap.add_argument("--lock-file", default=None)
    ap.add_argument("--log", default=None, help="file for the workers' output (default: /dev/null)")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    lock_file = args.lock_file or "/tmp/direct-global-lock.%d" % os.getpid()
    log = open(args.log, "ab") if args.log else subprocess.DEVNULL
    routes, names, health, procs = start_workers(cfg, args.fix, lock_file, log)
    http.server.ThreadingHTTPServer.request_queue_size = 1024  # bursts of clients, like a real server
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(routes, names, health, args.timeout))
    server.daemon_threads = True

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("direct: %d workers, routes %s, listening on 127.0.0.1:%d" %
          (len(procs), ", ".join(r[0] for r in routes), args.port), flush=True)
    try:
        server.serve_forever()
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
