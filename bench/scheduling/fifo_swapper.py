#!/usr/bin/python3
"""fifo_swapper: an honest stand-in for llama-swap, for bench/scheduling/swaps.py (issue 35).

Job: an HTTP proxy in front of model servers that do not fit the card together. It keeps at
most one model's server running; requests are served strictly in arrival order, one at a
time (each model's concurrency is 1); consecutive requests for the model already running are
served by it back to back, and at each change of model it swaps: stops the running server
(SIGTERM, waits for the process to exit), starts the next one and waits until its health
path answers 200, then forwards. That is what llama-swap does without groups, and what a
user who puts llama-swap in front of models that take turns on one card gets.

Invariants: at most one server process runs at any time (the next one starts only after the
previous one has exited); requests are forwarded in the order they arrived: a connection's
place in the queue is taken when it is accepted (the accept loop is one thread, so handler
threads scheduled out of order on a loaded machine cannot reorder a burst), and given up if
its first request is not one to forward; a later request on a kept-alive connection takes a
place when it is read; a swap is counted for every
server start, so the first load on an empty card counts as one (a change from nothing); the
running server is stopped when the swapper ends (SIGTERM or SIGINT); every wait is bounded
(start: startup_timeout_s, stop: stop_timeout_s then SIGKILL, forward: request_timeout_s).
Listens on 127.0.0.1 only.

Routing: a request's model is its JSON body's "model", else the first path segment
(/NAME/rest is forwarded as /rest); an unknown model is 404. Answers carry the worker's
status and body, plus X-Swapper-Queue-Ms (arrival to forward, real ms: includes the swap)
and X-Swapper-Swapped (1 when this request made a swap).

  GET /swapper/stats   {"swaps", "swaps_by_model", "order" (models in arrival order),
                        "served", "failed", "swap_log": [{model, stop_s, start_s}]} (real s)
  GET /swapper/health  200 once listening

Config (--config FILE, JSON):
  {"models": {"NAME": {"cmd": [argv with "{port}"], "health": "/health"}},
   "startup_timeout_s": 60, "stop_timeout_s": 5, "health_interval_s": 0.05,
   "request_timeout_s": 600}
The servers inherit the swapper's environment (SIMGPU, SIMGPU_TIMESCALE, PATH...).

Usage: fifo_swapper.py --config models.json --port P [--log FILE]
"""
import argparse
import collections
import http.client
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time

DEFAULTS = {"startup_timeout_s": 60.0, "stop_timeout_s": 5.0, "health_interval_s": 0.05,
            "request_timeout_s": 600.0}
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection",
               "te", "trailer", "upgrade"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class SwapError(Exception):
    pass


class Swapper:
    """The FIFO queue and the one running server. Every request thread takes a ticket, waits
    until its ticket is the head, makes sure its model runs (swapping if not), forwards, and
    hands the head to the next ticket."""

    def __init__(self, cfg, log):
        self.cfg = dict(DEFAULTS, **{k: v for k, v in cfg.items() if k != "models"})
        self.models = cfg["models"]
        self.log = log
        self.cond = threading.Condition()
        self.queue = collections.deque()
        self.next_ticket = 0
        self.models_of = {}      # ticket -> model, for the arrival order
        self.current = None      # model name of the running server
        self.proc = None
        self.port = None
        self.swaps = 0
        self.swaps_by_model = collections.Counter()
        self.swap_log = []
        self.served = 0
        self.failed = 0
        self.t0 = time.monotonic()

    def note(self, event, **kw):
        kw.update(event=event, t_s=round(time.monotonic() - self.t0, 4))
        self.log.write(json.dumps(kw) + "\n")
        self.log.flush()

    # queue -----------------------------------------------------------------------------
    def reserve(self):
        """A place at the end of the queue, its model not known yet (a connection accepted)."""
        with self.cond:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.queue.append(ticket)
            return ticket

    def assign(self, ticket, model):
        with self.cond:
            self.models_of[ticket] = model

    def cancel(self, ticket):
        """Gives a reserved place up (the connection's request was not one to forward)."""
        with self.cond:
            self.queue.remove(ticket)
            self.cond.notify_all()

    def take_ticket(self, model):
        ticket = self.reserve()
        self.assign(ticket, model)
        return ticket

    def wait_head(self, ticket):
        with self.cond:
            while self.queue[0] != ticket:
                self.cond.wait()

    def release_head(self, ticket, ok):
        with self.cond:
            assert self.queue[0] == ticket
            self.queue.popleft()
            if ok:
                self.served += 1
            else:
                self.failed += 1
            self.cond.notify_all()

    # servers (called by the head only, so never concurrently) -----------------------------
    def stop_current(self):
        p, name = self.proc, self.current
        self.proc = self.current = self.port = None
        if p is None:
            return
        t = time.monotonic()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(self.cfg["stop_timeout_s"])
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.note("stopped", model=name, pid=p.pid, seconds=round(time.monotonic() - t, 4), rc=p.returncode)

    def start(self, model):
        spec = self.models[model]
        port = free_port()
        argv = [a.replace("{port}", str(port)) for a in spec["cmd"]]
        t = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                             start_new_session=True)
        self.proc, self.current, self.port = p, model, port
        self.swaps += 1
        self.swaps_by_model[model] += 1
        self.note("started", model=model, pid=p.pid, port=port)
        deadline = t + self.cfg["startup_timeout_s"]
        path = spec.get("health", "/health")
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise SwapError("%s exited (rc %s) while loading" % (model, p.returncode))
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    self.note("ready", model=model, pid=p.pid, seconds=round(time.monotonic() - t, 4))
                    return
            except OSError:
                pass
            time.sleep(self.cfg["health_interval_s"])
        raise SwapError("%s not healthy after %.0f s" % (model, self.cfg["startup_timeout_s"]))

    def ensure(self, model):
        """Makes model the running server; True when that took a swap."""
        if self.current == model and self.proc is not None and self.proc.poll() is None:
            return False
        t = time.monotonic()
        self.stop_current()
        t_stopped = time.monotonic()
        try:
            self.start(model)
        except SwapError:
            self.stop_current()
            raise
        self.swap_log.append({"model": model, "stop_s": round(t_stopped - t, 4),
                              "start_s": round(time.monotonic() - t_stopped, 4)})
        return True

    def forward(self, method, path, headers, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.cfg["request_timeout_s"])
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, [(k, v) for k, v in r.getheaders() if k.lower() not in HOP_HEADERS], r.read()
        finally:
            conn.close()

    def stats(self):
        with self.cond:
            order = [self.models_of[t] for t in sorted(self.models_of)]
            return {"swaps": self.swaps, "swaps_by_model": dict(self.swaps_by_model), "order": order,
                    "served": self.served, "failed": self.failed, "swap_log": list(self.swap_log),
                    "queued": len(self.queue), "running": self.current}


def route(swapper, path, body):
    """(model, path to forward) of a request, or (None, reason)."""
    model = None
    try:
        doc = json.loads(body) if body else None
        if isinstance(doc, dict) and isinstance(doc.get("model"), str):
            model = doc["model"]
    except ValueError:
        pass
    if model is not None:
        return (model, path) if model in swapper.models else (None, "unknown model %r" % model)
    seg, _, rest = path.lstrip("/").partition("/")
    if seg in swapper.models:
        return seg, "/" + rest
    return None, "no model in the body or the path"


def make_handler(swapper, swapper_server_tickets):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30  # a connection that holds a reserved place must send its request within this

        def setup(self):
            super().setup()
            self.reserved = swapper_server_tickets.pop(id(self.request), None)

        def finish(self):
            self.give_up_place()
            super().finish()

        def give_up_place(self):
            if self.reserved is not None:
                swapper.cancel(self.reserved)
                self.reserved = None

        def place(self, model):
            if self.reserved is not None:
                ticket, self.reserved = self.reserved, None
                swapper.assign(ticket, model)
                return ticket
            return swapper.take_ticket(model)

        def log_message(self, fmt, *args):
            pass

        def answer(self, status, body, headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith("/swapper/"):
                self.give_up_place()
            if self.path == "/swapper/stats":
                self.answer(200, json.dumps(swapper.stats()).encode(), [("Content-Type", "application/json")])
            elif self.path == "/swapper/health":
                self.answer(200, b'{"status":"ok"}', [("Content-Type", "application/json")])
            else:
                self.proxy(b"")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.proxy(self.rfile.read(n) if n > 0 else b"")

        def proxy(self, body):
            arrived = time.monotonic()
            model, path = route(swapper, self.path, body)
            if model is None:
                self.give_up_place()
                self.answer(404, json.dumps({"error": path}).encode(), [("Content-Type", "application/json")])
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            ticket = self.place(model)
            swapper.wait_head(ticket)
            ok = False
            try:
                try:
                    swapped = swapper.ensure(model)
                except SwapError as e:
                    swapper.note("swap_failed", model=model, error=str(e))
                    self.answer(502, json.dumps({"error": str(e)}).encode(), [("Content-Type", "application/json")])
                    return
                queue_ms = int((time.monotonic() - arrived) * 1000)
                try:
                    status, rheaders, rbody = swapper.forward(self.command, path, headers, body)
                except OSError as e:
                    self.answer(502, json.dumps({"error": "upstream: %s" % e}).encode(),
                                [("Content-Type", "application/json")])
                    return
                ok = 200 <= status < 300
                self.answer(status, rbody, rheaders + [("X-Swapper-Queue-Ms", str(queue_ms)),
                                                       ("X-Swapper-Swapped", "1" if swapped else "0")])
            finally:
                swapper.release_head(ticket, ok)

    return Handler


class Server(http.server.ThreadingHTTPServer):
    """Reserves each accepted connection's place in the queue in the accept thread."""
    daemon_threads = True
    request_queue_size = 1024  # a burst of requests must not meet a backlog of 5

    def __init__(self, address, swapper):
        self.swapper = swapper
        self.tickets = {}
        super().__init__(address, make_handler(swapper, self.tickets))

    def process_request(self, request, client_address):
        self.tickets[id(request)] = self.swapper.reserve()
        super().process_request(request, client_address)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", help="event log (JSON lines) and the servers' output; default stderr")
    a = ap.parse_args(argv)
    with open(a.config) as f:
        cfg = json.load(f)
    if not cfg.get("models"):
        print("fifo_swapper: no models in %s" % a.config, file=sys.stderr)
        return 2
    log = open(a.log, "a") if a.log else sys.stderr
    swapper = Swapper(cfg, log)
    server = Server(("127.0.0.1", a.port), swapper)

    def on_signal(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    swapper.note("listening", port=a.port)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
        swapper.stop_current()
        swapper.note("exit", swaps=swapper.swaps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
