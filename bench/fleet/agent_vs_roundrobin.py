#!/usr/bin/python3
"""fleet: HAProxy with vramd's agent-check weights against HAProxy's plain round robin, on
the same traffic (issue 14, bench/fleet; by hand, not part of `make test`).

Setup (tests/fleet/fleetkit.py, as the fleet tests: needs root for network namespaces):
three vramd hosts, each with its own simulated 24 GiB GPU in its own namespace, and HAProxy
in front running
  agent    contrib/haproxy/haproxy.cfg as shipped (two tiers: resident servers, load backups)
  rr       the same file with the agent checks and the backup lines taken out: plain
           weighted round robin over the three hosts, /readyz health checks, the same
           retry-on 503 and redispatch
Models a, b, c: 14 GiB resident + 2 GiB per request each (so one fits a GPU, two do not),
2 slots, a load takes 2 s and a request 0.5 s (simulated, SIMGPU_TIMESCALE 0.05).
Traffic: --clients closed-loop clients (default 6), each sending requests for a model drawn
from a seeded sequence (uniform over a, b, c) for --duration seconds (default 30).
Reported per setup: requests answered 200 and not, throughput, p50/p95 latency, model loads
and evictions summed over the hosts (their /metrics), and where each model's requests ran.

  sudo /usr/bin/python3 bench/fleet/agent_vs_roundrobin.py [--duration 30] [--clients 6]
"""
import argparse
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("VRAMD_BUILD", "build")

from fleet import fleetkit  # noqa: E402
from vramdkit import sim_s  # noqa: E402

MODELS = ["a", "b", "c"]  # --names


def models(fleet, host):
    out = {}
    for name in MODELS:
        out[name] = {
            "route": f"/{name}/",
            "cmd": ["simworker", "--port", "{port}", "--name", f"{name}@{fleet.tag}-{host.name}",
                    "--resident", "13.7GiB", "--per-request", "2GiB", "--cache", "release",
                    "--load-time", sim_s(40), "--run-time", sim_s(10)],
            "memory": {"resident": "14GiB", "per_request": "2GiB"},
            "concurrency": 2, "queue_max": 64, "deadline": "60s", "keep_alive": "10m",
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "startup_timeout": "60s", "stop_timeout": "2s",
        }
    return out


def config(kind, path):
    """The shipped file with its chat backend copied for models a, b, c (routed by prefix);
    agent: as shipped (consistent hash of the model name, agent weights, two tiers);
    agent-rr: the same with weighted round robin instead of the hash; rr: round robin
    without agent checks and backups (plain HAProxy)."""
    text = fleetkit.HAPROXY_CFG.read_text()
    chat = re.search(r"backend vramd_chat\n(.*?)\n\n", text, re.S).group(0)
    text = text.replace(chat, "".join(chat.replace("chat", m) for m in MODELS))
    text = re.sub(r"    use_backend vramd_chat .*\n", "".join(
        f"    use_backend vramd_{m} if {{ path_beg /{m}/ }}\n" for m in MODELS), text)
    if kind == "rr":
        text = re.sub(r" agent-check agent-port \S+ agent-inter \S+", "", text)
        text = "\n".join(line for line in text.splitlines() if " backup " not in line)
        text = re.sub(r' agent-send "[^"]*"', "", text)
    if kind in ("rr", "agent-rr"):  # the shipped file hashes the model name; these use round robin
        for m in MODELS:
            text = re.sub(rf"backend vramd_{m}\n    balance hash str\({m}\)\n    hash-type consistent\n"
                          r"(    hash-balance-factor \d+\n)?",
                          f"backend vramd_{m}\n    balance roundrobin\n", text)
    path.write_text(text + "\n")
    return path


def scrape(host, family, label=None):
    st, _, body = host.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(family + "{") or line.startswith(family + " "):
            if label and label not in line:
                continue
            total += float(line.split()[-1])
    return total


def run_one(kind, args, tmp):
    fleet = fleetkit.Fleet(tmp)
    try:
        for h in fleet.make_hosts(3):
            h.start(models(fleet, h))
        fleet.start_haproxy(cfg=config(kind, tmp / f"haproxy-{kind}.cfg"))
        time.sleep(1.5)  # health and agent checks settle
        results = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                m = rng.choice(MODELS)
                t0 = time.monotonic()
                st, _, _ = fleet.request(f"/{m}/generate", timeout=120)
                with lock:
                    results.append((m, st, time.monotonic() - t0))

        threads = [threading.Thread(target=client, args=(1000 + i,), daemon=True) for i in range(args.clients)]
        t_start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(args.duration)
        stop.set()
        for t in threads:
            t.join(180)
        elapsed = time.monotonic() - t_start
        lat = sorted(d for _, st, d in results if st == 200)
        ok = len(lat)
        where = {m: {h.name: 0 for h in fleet.hosts} for m in MODELS}
        for h in fleet.hosts:
            for m in MODELS:
                where[m][h.name] = h.served(m)
        return {
            "setup": kind,
            "requests_ok": ok,
            "requests_failed": len(results) - ok,
            "failed_statuses": sorted({str(st) for _, st, _ in results if st != 200}),
            "throughput_rps": round(ok / elapsed, 2),
            "p50_s": round(lat[len(lat) // 2], 3) if lat else None,
            "p95_s": round(lat[int(len(lat) * 0.95)], 3) if lat else None,
            "loads": int(sum(scrape(h, "vramd_model_loads_total") for h in fleet.hosts)),
            "evictions": int(sum(scrape(h, "vramd_model_unloads_total", 'reason="evicted"') for h in fleet.hosts)),
            "served_by_host": where,
        }
    finally:
        fleet.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--names", default="a,b,c", help="the three models' names (the hash is of the name)")
    ap.add_argument("--only", choices=("agent", "agent-rr", "rr"), help="run one setup only")
    args = ap.parse_args()
    MODELS[:] = args.names.split(",")
    why = fleetkit.netns_unavailable()
    if why:
        sys.exit(f"fleet bench: {why}")
    out = []
    for kind in ((args.only,) if args.only else ("agent", "agent-rr", "rr")):
        with tempfile.TemporaryDirectory(prefix=f"fleetbench-{kind}-") as d:
            r = run_one(kind, args, Path(d))
        out.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n{'setup':8} {'ok':>5} {'failed':>6} {'req/s':>6} {'p50 s':>6} {'p95 s':>6} {'loads':>5} {'evictions':>9}")
    for r in out:
        print(f"{r['setup']:8} {r['requests_ok']:5} {r['requests_failed']:6} {r['throughput_rps']:6} "
              f"{r['p50_s']:6} {r['p95_s']:6} {r['loads']:5} {r['evictions']:9}")
    res = ROOT / "bench" / "results"
    res.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (res / f"fleet-{stamp}.json").write_text(json.dumps({"args": vars(args), "runs": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
