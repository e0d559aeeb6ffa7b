"""streaming: what a long streamed answer costs through vramd, against straight to the server.

Setup (all on 127.0.0.1): the real llama-server (../shared/realservers/llama.cpp, or
$LLAMA_SERVER_DIR), `bin/llama-server -m models/tiny-a.gguf -c 4096 -np 1 -t 1`, and vramd
with one `url:` model on it, `preset: llamacpp` with the preset's defaults (OOM detection
on: `degrade`), route /qa/ (vramd strips it).
Request: POST /v1/chat/completions {"stream": true, "ignore_eos": true, "max_tokens": N}
(N = 3000 by default: about 3 s of SSE events at the tiny model's ~1,000 tokens/s), sent on
a fresh connection by a raw-socket client that timestamps every recv():
  first byte  from the request's last byte sent to the first response byte received;
  first event to the first `data:` event received;
  gaps        between successive recv()s after the first event (one event each, as a
              rule: p50 and p99 of one answer);
  total       to the last byte.
Rounds: each round runs straight and through vramd once, in an order alternated per round;
deltas (vramd - straight) are taken within a round; the table gives medians over rounds.
Usage: run.py [--rounds 5] [--tokens 3000] [--vramd PATH]
Prints the table; writes bench/results/streaming-<stamp>.json (and -latest.json).
"""

import argparse
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LLAMA = os.environ.get("LLAMA_SERVER_DIR", os.path.join(REPO, "..", "shared", "realservers", "llama.cpp"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(port, path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if bl.http_get(port, path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise bl.BenchError("no 200 from :%d%s within %.0f s" % (port, path, timeout))


def percentile(values, p):
    v = sorted(values)
    if not v:
        return None
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def one_stream(port, path, tokens):
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}], "stream": True,
                       "ignore_eos": True, "max_tokens": tokens}).encode()
    req = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), len(body))) + body
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.sendall(req)
        t0 = time.monotonic()
        times, data = [], bytearray()
        first_event = None
        while True:
            b = s.recv(65536)
            if not b:
                break
            t = time.monotonic()
            times.append(t)
            data += b
            if first_event is None and b"data:" in data:
                first_event = t
    finally:
        s.close()
    head = bytes(data[:data.find(b"\r\n\r\n")]).decode("latin-1")
    after = [t for t in times if first_event is not None and t > first_event]
    gaps = [(b - a) * 1000 for a, b in zip([first_event] + after[:-1], after)]
    return {"status": head.split(" ", 2)[1] if head else None,
            "chunked": "transfer-encoding: chunked" in head.lower(),
            "content_length": "content-length:" in head.lower(),
            "events": data.count(b"data:"), "done": b"data: [DONE]" in data,
            "first_byte_ms": (times[0] - t0) * 1000 if times else None,
            "first_event_ms": (first_event - t0) * 1000 if first_event else None,
            "gap_p50_ms": percentile(gaps, 50), "gap_p99_ms": percentile(gaps, 99),
            "gap_max_ms": max(gaps) if gaps else None, "recvs": len(times),
            "total_ms": (times[-1] - t0) * 1000 if times else None}


def start_vramd(procs, binary, port, upstream):
    d = os.path.join(procs.dir, "vramd")
    os.makedirs(os.path.join(d, "var"), exist_ok=True)
    conf = os.path.join(d, "vramd.yaml")
    with open(conf, "w") as f:
        f.write("""listen: 127.0.0.1:%d
state_dir: %s/var
log: { format: json, level: warn }
models:
  qa:
    preset: llamacpp
    url: http://127.0.0.1:%d
""" % (port, d, upstream))
    p = procs.start("vramd", [binary, "--config", conf])
    bl.wait_port(port, proc=p)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--vramd", default=bl.vramd_binary())
    a = ap.parse_args()
    snap = None
    if a.vramd == bl.vramd_binary():  # the build's own: a private copy for the whole run
        snap = bl.snapshot_vramd()
        a.vramd = bl.vramd_binary()
    server = os.path.join(LLAMA, "bin", "llama-server")
    if not os.access(server, os.X_OK):
        print("no llama-server at %s: nothing to measure" % server)
        return 2
    with bl.Procs() as procs:
        lport, vport = free_port(), free_port()
        procs.start("llama", [server, "-m", os.path.join(LLAMA, "models", "tiny-a.gguf"), "--port", str(lport),
                              "-c", "4096", "-np", "1", "-t", "1"], cwd=LLAMA)
        wait_http(lport, "/health")
        start_vramd(procs, a.vramd, vport, lport)
        targets = {"straight": (lport, "/v1/chat/completions"), "vramd": (vport, "/qa/v1/chat/completions")}
        for name, (port, path) in targets.items():  # warm-up: the model loaded, the pool filled
            w = one_stream(port, path, 64)
            if w["status"] != "200":
                raise bl.BenchError("%s answered %s; vramd log:\n%s" % (name, w["status"], procs.log_tail("vramd")))
        rounds = []
        for i in range(a.rounds):
            order = ["straight", "vramd"] if i % 2 == 0 else ["vramd", "straight"]
            rounds.append({name: one_stream(*targets[name], a.tokens) for name in order})
    keys = ["first_byte_ms", "first_event_ms", "gap_p50_ms", "gap_p99_ms", "total_ms"]
    rows, summary = [], {}
    for name in ["straight", "vramd"]:
        med = {k: bl.median([r[name][k] for r in rounds]) for k in keys}
        summary[name] = med
        last = rounds[-1][name]
        rows.append([name, "%.2f" % med["first_byte_ms"], "%.2f" % med["first_event_ms"], "%.3f" % med["gap_p50_ms"],
                     "%.3f" % med["gap_p99_ms"], "%.0f" % med["total_ms"], str(last["events"]),
                     "chunked" if last["chunked"] else ("Content-Length" if last["content_length"] else "close")])
    delta = {k: bl.median([r["vramd"][k] - r["straight"][k] for r in rounds]) for k in keys}
    rows.append(["vramd - straight", "%+.2f" % delta["first_byte_ms"], "%+.2f" % delta["first_event_ms"],
                 "%+.3f" % delta["gap_p50_ms"], "%+.3f" % delta["gap_p99_ms"], "%+.0f" % delta["total_ms"], "", ""])
    bl.print_table(["target", "first byte ms", "first event ms", "gap p50 ms", "gap p99 ms", "total ms", "events",
                    "framing"], rows)
    path = bl.write_results("streaming", {"rounds": rounds, "median": summary, "median_delta": delta,
                                          "tokens": a.tokens, "vramd": a.vramd, "vramd_build": snap, "environment": bl.environment()})
    print("results: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
