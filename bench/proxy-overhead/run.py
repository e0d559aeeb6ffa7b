"""proxy-overhead: what a request pays for going through vramd, against going straight to the
upstream and going through HAProxy 2.6.

Setup (all on 127.0.0.1, each with its own config in a temp dir):
  nginx    one worker, `return 200 "ok\\n"` for every path, no access log   (the upstream)
  HAProxy  mode http, nbthread 1, `server up ... maxconn 64`, no logging
  vramd    one external model (url: nginx, route /b/), concurrency 256, log level warn
Load: wrk -t1 -cC -dDs --latency with wrk_report.lua, C in (1, 64), against
  direct  http://127.0.0.1:NGINX/b/ping
  haproxy http://127.0.0.1:HAPROXY/b/ping
  vramd   http://127.0.0.1:VRAMD/b/ping     (vramd strips /b, nginx sees /ping)
Rounds: each round runs every target once, in an order rotated each round, so slow drifts
of the machine hit every target alike; ratios (x direct, x haproxy) and added latency are
computed within a round and the median over rounds is reported.
This box is shared: before each run the script waits (up to 10 min) until other processes use
at most 10 % of a core (machine busy time from /proc/stat minus ours, over 1 s), and a run
during which they used more is repeated, up to 4 attempts; the JSON keeps that share per run.
CPU per request of a proxy: utime+stime delta of its process (/proc/PID/stat, all threads)
over the run, divided by the requests wrk completed. For `direct` the nginx worker's is shown.
Nothing is pinned (2 cores: wrk, nginx and the proxy share them, as on the reference box).

Usage: run.sh [--quick] [--rounds N] [--duration S] [--conns 1,64] [--no-vramd]
Prints a table; writes bench/results/proxy-overhead-<stamp>.json (and -latest.json).
A run with any wrk error (connect/read/write/timeout/non-2xx) is flagged in the table and
the JSON; its numbers are kept for inspection but excluded from medians.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "wrk_report.lua")
PATH = "/b/ping"
# A run during which other processes of this shared machine used more than MAX_FOREIGN of one
# core is run again (at most MAX_ATTEMPTS times in all; the last attempt is kept, flagged).
MAX_FOREIGN = 0.10
MAX_ATTEMPTS = 4


def run_wrk(port, conns, seconds):
    argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds, "--latency", "--timeout", "5s",
            "-s", LUA, "http://127.0.0.1:%d%s" % (port, PATH)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[len("WRKJSON "):])
    raise bl.BenchError("wrk printed no summary: rc %d\n%s\n%s" % (out.returncode, out.stdout, out.stderr))


def measure(target, port, proxy_pids, upstream_pids, all_pids, conns, seconds):
    cpu0 = sum(bl.cpu_seconds(p) for p in proxy_pids)
    up0 = sum(bl.cpu_seconds(p) for p in upstream_pids)
    with bl.ForeignLoad(all_pids) as foreign:
        w = run_wrk(port, conns, seconds)
    cpu1 = sum(bl.cpu_seconds(p) for p in proxy_pids)
    up1 = sum(bl.cpu_seconds(p) for p in upstream_pids)
    n = w["requests"]
    errors = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
    return {
        "target": target,
        "conns": conns,
        "requests": n,
        "rps": n / (w["duration_us"] / 1e6),
        "p50_us": w["lat_p50_us"],
        "p90_us": w["lat_p90_us"],
        "p99_us": w["lat_p99_us"],
        "mean_us": w["lat_mean_us"],
        "max_us": w["lat_max_us"],
        "errors": errors,
        "wrk": w,
        "proxy_cpu_s": cpu1 - cpu0,
        "proxy_cpu_us_per_req": (cpu1 - cpu0) * 1e6 / n if n else None,
        "upstream_cpu_us_per_req": (up1 - up0) * 1e6 / n if n else None,
        "foreign_core_frac": foreign.foreign_core_frac,
        "steal_s": foreign.steal_s,
    }


def summarize(runs, targets, conns_list):
    """Medians per (conns, target), and within-round ratios / added latency."""
    summary = {}
    for c in conns_list:
        by_round = {}
        for r in runs:
            if r["conns"] == c and r["errors"] == 0:
                by_round.setdefault(r["round"], {})[r["target"]] = r
        for t in targets:
            mine = [rd[t] for rd in by_round.values() if t in rd]

            def within(fn, base):
                vals = [fn(rd[t], rd[base]) for rd in by_round.values() if t in rd and base in rd]
                return bl.median(vals)

            s = {
                "runs": len(mine),
                "rps": bl.median([m["rps"] for m in mine]),
                "p50_us": bl.median([m["p50_us"] for m in mine]),
                "p99_us": bl.median([m["p99_us"] for m in mine]),
                "cpu_us_per_req": bl.median([m["proxy_cpu_us_per_req"] for m in mine
                                             if m["proxy_cpu_us_per_req"] is not None]),
                "x_direct": within(lambda a, b: a["rps"] / b["rps"], "direct"),
                "added_p50_us": within(lambda a, b: a["p50_us"] - b["p50_us"], "direct"),
                "added_p99_us": within(lambda a, b: a["p99_us"] - b["p99_us"], "direct"),
                "x_haproxy": within(lambda a, b: a["rps"] / b["rps"], "haproxy") if "haproxy" in targets else None,
                "added_p50_vs_haproxy_us": within(lambda a, b: a["p50_us"] - b["p50_us"], "haproxy") if "haproxy" in targets else None,
            }
            summary.setdefault(str(c), {})[t] = s
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round x 3 s (a smoke run, not a result)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=int, default=None, help="seconds per wrk run")
    ap.add_argument("--conns", default="1,64")
    ap.add_argument("--no-vramd", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    seconds = args.duration or (3 if args.quick else 10)
    conns_list = [int(x) for x in args.conns.split(",")]

    binary = None if args.no_vramd else bl.snapshot_vramd()
    env = bl.environment()
    env["vramd_binary"] = binary
    result = {"benchmark": "proxy-overhead", "quick": args.quick, "rounds": rounds,
              "seconds_per_run": seconds, "conns": conns_list, "environment": env,
              "pinning": "none", "wrk": "wrk -t1 -cC -dS --latency --timeout 5s",
              "runs": [], "vramd_available": None}
    with bl.Procs() as procs:
        ng_port, ha_port, vr_port = bl.free_port(), bl.free_port(), bl.free_port()
        nginx = bl.start_nginx(procs, ng_port)
        ng_workers = bl.nginx_worker_pids(nginx)
        if len(ng_workers) != 1:
            raise bl.BenchError("expected one nginx worker, found %r" % ng_workers)
        haproxy, _ = bl.start_haproxy(procs, ha_port, ng_port, 64)
        targets = {"direct": (ng_port, ng_workers), "haproxy": (ha_port, [haproxy.pid])}
        if not args.no_vramd:
            try:
                vramd = bl.start_vramd(procs, vr_port, ng_port, concurrency=256, queue_max=20000,
                                       max_connections=9000)
                targets["vramd"] = (vr_port, [vramd.pid])
                result["vramd_available"] = True
            except bl.BenchError as e:
                print("vramd: not measured: %s" % e, file=sys.stderr)
                result["vramd_available"] = False
                result["vramd_error"] = str(e)
        names = list(targets)
        all_pids = [nginx.pid] + ng_workers + [pid for t in names if t != "direct" for pid in targets[t][1]]
        for t in names:  # warm-up: connection pools, caches, allocator
            run_wrk(targets[t][0], 64, 1 if args.quick else 2)
        for c in conns_list:
            for rnd in range(rounds):
                k = rnd % len(names)
                for t in names[k:] + names[:k]:
                    port, pids = targets[t]
                    for attempt in range(1, MAX_ATTEMPTS + 1):
                        waited = bl.wait_quiet(all_pids, MAX_FOREIGN)
                        r = measure(t, port, pids, ng_workers, all_pids, c, seconds)
                        if r["foreign_core_frac"] <= MAX_FOREIGN or attempt == MAX_ATTEMPTS:
                            break
                        print("c=%-3d round %d %-8s other processes used %.0f %% of a core: run again"
                              % (c, rnd + 1, t, r["foreign_core_frac"] * 100), flush=True)
                    r["waited_for_quiet_s"] = waited
                    r["round"] = rnd
                    r["attempts"] = attempt
                    result["runs"].append(r)
                    print("c=%-3d round %d %-8s %9.0f req/s  p50 %5d us  p99 %6d us  cpu %6s us/req  others %3.0f %%%s"
                          % (c, rnd + 1, t, r["rps"], r["p50_us"], r["p99_us"],
                             bl.fmt(r["proxy_cpu_us_per_req"]), r["foreign_core_frac"] * 100,
                             "  ERRORS %d" % r["errors"] if r["errors"] else ""), flush=True)
                    for p in procs.procs:
                        if p.poll() is not None:
                            raise bl.BenchError("%s exited (rc %s) during the run:\n%s" % (
                                p.bench_name, p.returncode, procs.log_tail(p.bench_name)))
        result["summary"] = summarize(result["runs"], names, conns_list)

    print()
    print("proxy-overhead, %s, %s x %d CPUs, %d round(s) x %d s, medians; ratios and added latency within each round"
          % (env["date_utc"], env["cpu_model"], env["nproc"], rounds, seconds))
    header = ["conns", "target", "req/s", "p50 us", "p99 us", "+p50 us", "+p99 us", "cpu us/req", "x direct", "x haproxy"]
    rows = []
    for c in conns_list:
        for t in names:
            s = result["summary"][str(c)][t]
            rows.append([c, t, bl.fmt(s["rps"], "%.0f"), bl.fmt(s["p50_us"], "%.0f"), bl.fmt(s["p99_us"], "%.0f"),
                         bl.fmt(s["added_p50_us"], "%.0f") if t != "direct" else "-",
                         bl.fmt(s["added_p99_us"], "%.0f") if t != "direct" else "-",
                         bl.fmt(s["cpu_us_per_req"], "%.1f") + (" (nginx)" if t == "direct" else ""),
                         bl.fmt(s["x_direct"], "%.2f"), bl.fmt(s["x_haproxy"], "%.2f")])
    bl.print_table(header, rows)
    if "vramd" in names:
        verdicts = []
        for c in conns_list:
            s = result["summary"][str(c)]["vramd"]
            if s["x_haproxy"] is not None:
                verdicts.append("c=%d: vramd/haproxy req/s %.2f (target >= 1.00: %s); added p50 %.0f us vs haproxy's %.0f us (%s)"
                                % (c, s["x_haproxy"], "met" if s["x_haproxy"] >= 1.0 else "NOT met",
                                   s["added_p50_us"], result["summary"][str(c)]["haproxy"]["added_p50_us"],
                                   "met" if s["added_p50_us"] <= result["summary"][str(c)]["haproxy"]["added_p50_us"] else "NOT met"))
        result["verdicts"] = verdicts
        print("\n".join(verdicts))
    else:
        print("vramd: not measured (%s)" % result.get("vramd_error", "--no-vramd"))
    path = bl.write_results("proxy-overhead", result)
    print("results: %s" % os.path.relpath(path, bl.REPO))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    try:
        main()
    except bl.BenchError as e:
        print("proxy-overhead: %s" % e, file=sys.stderr)
        sys.exit(1)
