"""report_md: prints the Markdown tables of docs/benchmarks.md from result JSON files, so that
the numbers in the docs are copied from a run, never typed by hand.

  /usr/bin/python3 bench/common/report_md.py [bench/results/proxy-overhead-latest.json]
                                             [bench/results/parked-latest.json]
Each argument may be either benchmark's JSON; with none, the two -latest.json files are used.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def env_line(d):
    e = d["environment"]
    b = e.get("vramd_binary") or {}
    return ("%s; %s, %d CPUs (%s), kernel %s; %s; %s; wrk %s; vramd: %s (binary built %s, sha256 %s...)"
            % (e["date_utc"], e["cpu_model"], e["nproc"], e.get("virtualization") or "bare metal?",
               e["kernel"], e["nginx"], (e["haproxy"] or "").split(" - ")[0],
               (e["wrk"] or "").split()[1] if e.get("wrk") else "?",
               e.get("vramd") or "not measured", b.get("mtime", "-"), (b.get("sha256") or "-")[:12]))


def proxy_overhead(d):
    print("proxy-overhead, %d round(s) x %d s per run, medians over rounds; ratios and added latency "
          "computed within each round. %s\n" % (d["rounds"], d["seconds_per_run"], env_line(d)))
    print("| conns | target | req/s | p50 us | p99 us | added p50 us | added p99 us | CPU us/req | x direct | x HAProxy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in d["conns"]:
        for t, s in d["summary"][str(c)].items():
            direct = t == "direct"
            print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c, t, bl.fmt(s["rps"], "%.0f"), bl.fmt(s["p50_us"], "%.0f"), bl.fmt(s["p99_us"], "%.0f"),
                "-" if direct else bl.fmt(s["added_p50_us"], "%.0f"),
                "-" if direct else bl.fmt(s["added_p99_us"], "%.0f"),
                bl.fmt(s["cpu_us_per_req"], "%.1f") + (" (nginx)" if direct else ""),
                bl.fmt(s["x_direct"], "%.2f"), bl.fmt(s["x_haproxy"], "%.2f")))
    if d.get("verdicts"):
        print()
        for v in d["verdicts"]:
            print("- " + v)
    runs = d["runs"]
    flagged = [r for r in runs if r.get("foreign_core_frac", 0) > 0.10 or r["errors"]]
    print("\nRuns: %d; repeated because of other load: %d; kept although other load > 10 %% of a core: %d; "
          "with wrk errors: %d." % (len(runs), sum(r.get("attempts", 1) - 1 for r in runs),
                                    len([r for r in flagged if not r["errors"]]),
                                    len([r for r in runs if r["errors"]])))


def parked(d):
    print("parked, %d round(s), %.0f s dispatch windows, medians over rounds; kept = rate(%d queued) / "
          "rate(%d queued) within a round. %s\n" % (d["rounds"], d["window_s"], d["big"], d["small"], env_line(d)))
    print("| proxy | bytes per parked request (N=%d) | req/s with %d queued | req/s with %d queued | kept | "
          "CPU us/dispatch @%d | CPU us/dispatch @%d |" % (d["big"], d["big"], d["small"], d["big"], d["small"]))
    print("|---|---|---|---|---|---|---|")
    for p, s in d["summary"].items():
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            p, bl.fmt(s["bytes_per_parked"], "%.0f"), bl.fmt(s["rate_big"], "%.0f"), bl.fmt(s["rate_small"], "%.0f"),
            bl.fmt(None if s["kept"] is None else s["kept"] * 100, "%.0f %%"),
            bl.fmt(s["cpu_us_big"], "%.1f"), bl.fmt(s["cpu_us_small"], "%.1f")))
    if d.get("verdict"):
        print("\n- " + d["verdict"])
    print("\nPer run (round, proxy, N: B/parked, req/s, upstream connections opened during the window):")
    for r in d["runs"]:
        print("- %d %s N=%d: %.0f B, %.0f req/s, %d upstream connections for %d requests" % (
            r["round"] + 1, r["proxy"], r["n"], r["bytes_per_parked"], r["dispatch_rate"],
            r.get("upstream_connections_opened", -1), r.get("upstream_requests", -1)))


def main():
    paths = sys.argv[1:] or [os.path.join(bl.RESULTS_DIR, "proxy-overhead-latest.json"),
                             os.path.join(bl.RESULTS_DIR, "parked-latest.json")]
    for p in paths:
        if not os.path.exists(p):
            print("(no %s)\n" % p)
            continue
        with open(p) as f:
            d = json.load(f)
        print("<!-- from %s -->" % os.path.relpath(p, bl.REPO))
        (proxy_overhead if d["benchmark"] == "proxy-overhead" else parked)(d)
        print()


if __name__ == "__main__":
    main()
