#!/usr/bin/python3
"""proxy-overhead, Python upstream: the latency a proxy adds in front of a worker written with
Python's http.server family (FastAPI/uvicorn differ; Flask's dev server, many hand-written
model servers and the field notes' servers are this kind).

Such a server writes the response head and the body in two send() calls. On a keep-alive
connection the second segment waits for the client's ACK of the first (Nagle on the server),
and a proxy that delays its ACK (Linux's delayed ACK, up to 40 ms) stalls every request by
that much. vramd re-arms TCP_QUICKACK on each upstream read so it ACKs at once (issue 12,
item 14). This benchmark shows it, against HAProxy in the same run.

  upstream  ThreadingHTTPServer, HTTP/1.1 keep-alive, `GET /b/ping` -> 200 "ok\\n", head and
            body written separately (the default unbuffered wfile)
  direct    one keep-alive client connection to the upstream
  haproxy   HAProxy 2.6 (bench/common/benchlib.py start_haproxy), http-keep-alive
  vramd     one external model (url: the upstream, route /b/)

Each round sends REQUESTS sequential GETs on one keep-alive connection per target (targets in
rotating order); per-request latency from the client's send to the complete answer.
Medians over rounds of the per-round median and p90; the ratio to direct is per round.

Usage: bench/proxy-overhead/python_upstream.py [--rounds N] [--requests N] [--quick]
Results: bench/results/proxy-python-upstream-*.json
"""
import argparse
import http.client
import http.server
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()      # first send(): the head
        self.wfile.write(body)  # second send(): the body

    def log_message(self, *args):
        pass


def start_upstream(port):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def one_round(port, path, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    lat = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            if r.status != 200 or body != b"ok\n":
                raise bl.BenchError("%s answered %d %r" % (path, r.status, body[:80]))
            lat.append((time.perf_counter() - t0) * 1000.0)
    finally:
        conn.close()
    lat.sort()
    return {"median_ms": lat[len(lat) // 2], "p90_ms": lat[int(len(lat) * 0.9)], "n": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="1 round x 50 requests (a smoke run)")
    a = ap.parse_args()
    rounds, n = (1, 50) if a.quick else (a.rounds, a.requests)
    result = {"benchmark": "proxy-python-upstream", "quick": a.quick, "rounds": rounds, "requests": n,
              "environment": bl.environment(), "runs": []}
    result["environment"]["vramd_binary"] = bl.snapshot_vramd()
    with bl.Procs() as procs:
        up_port, ha_port, vr_port = bl.free_port(), bl.free_port(), bl.free_port()
        srv = start_upstream(up_port)
        bl.start_haproxy(procs, ha_port, up_port, 64)
        bl.start_vramd(procs, vr_port, up_port, concurrency=16, queue_max=1000, max_connections=1000)
        targets = {"direct": (up_port, "/b/ping"), "haproxy": (ha_port, "/b/ping"), "vramd": (vr_port, "/b/ping")}
        names = list(targets)
        for t in names:  # warm-up
            one_round(targets[t][0], targets[t][1], 10)
        for rnd in range(rounds):
            k = rnd % len(names)
            per = {}
            for t in names[k:] + names[:k]:
                per[t] = one_round(targets[t][0], targets[t][1], n)
            for t in names:
                per[t]["ratio_to_direct"] = per[t]["median_ms"] / per["direct"]["median_ms"]
            result["runs"].append(per)
            print("round %d: %s" % (rnd + 1, ", ".join("%s %.2f ms" % (t, per[t]["median_ms"]) for t in names)),
                  flush=True)
        srv.shutdown()
    rows = []
    summary = {}
    for t in names:
        med = bl.median([r[t]["median_ms"] for r in result["runs"]])
        p90 = bl.median([r[t]["p90_ms"] for r in result["runs"]])
        ratio = bl.median([r[t]["ratio_to_direct"] for r in result["runs"]])
        summary[t] = {"median_ms": med, "p90_ms": p90, "ratio_to_direct": ratio}
        rows.append([t, bl.fmt(med, "%.2f"), bl.fmt(p90, "%.2f"), bl.fmt(ratio, "%.2f")])
    result["summary"] = summary
    print()
    bl.print_table(["target", "median ms", "p90 ms", "x direct"], rows)
    print("results:", bl.write_results("proxy-python-upstream", result))


if __name__ == "__main__":
    sys.exit(main())
