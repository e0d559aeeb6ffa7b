#!/usr/bin/python3
"""make demo: field scenarios on a simulated GPU, through vramd and straight to the workers.

Act 1 (--acts field). For each scenario (examples/<name>/: vramd.yaml, traffic.json, gpu.txt), it creates a
simulated GPU, replays the same seeded traffic twice — once through vramd, once straight to
the same workers with no gatekeeper (the field notes' starting point) — and prints what a
user wants to see: requests served, OOMs, deadline hits, latency, evictions, GPU peak.

Time runs 50x faster than the field (SIMGPU_TIMESCALE=0.02): latencies are reported in
the field's seconds. Options: --scenarios a,b  --duration 5m  --timescale 0.02  --build DIR

Act 2 (--acts parking, examples/demo_parking.py): seed 000 with CPU offload turned off,
SD3.5 checkpointed into host memory during TRELLIS's peak and restored for the next
generation, against the same generations straight to the workers, with offload on, and
with stop + reload. Options: --park-timescale 0.1  --park-generations N  --park-setups a,b
--json FILE (act 2's figures). Exit status 1 when vramd let a worker OOM in either act or
act 2's parking setup did not park, restore and serve every generation.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "player"))
import scenario_run  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_parking  # noqa: E402

DEFAULT = ["seed004-vlm-6gb", "seed001-gen-and-validate-4090", "seed000-miner-4090"]


def fmt_s(v):
    return "-" if v is None else "%.1fs" % v


def count_events(workdir, event):
    try:
        with open(os.path.join(workdir, "vramd.log"), errors="replace") as f:
            return sum(1 for line in f if re.search(r"\b%s\b" % event, line))
    except OSError:
        return 0


def gpu_peak(result):
    gpus = (result.get("gpu") or {}).get("gpus") or []
    peaks = [g["peak_used"] for g in gpus if g.get("peak_used") is not None]
    return max(peaks) / 2**30 if peaks else None


def act_field(a):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("Act 1: the same seeded traffic through vramd, then straight to the workers.")
    print("Simulated GPUs, %sx faster than real time; figures in the field's seconds.\n" % int(1 / a.timescale))
    header = "%-32s %-7s %9s %5s %9s %10s %8s %8s %9s %8s" % (
        "scenario", "setup", "served", "OOM", "deadline", "refused", "p50", "p95", "evictions", "GPU peak")
    print(header)
    print("-" * len(header))
    totals = {"vramd": [0, 0, 0], "direct": [0, 0, 0]}
    for name in a.scenarios.split(","):
        for setup in ("vramd", "direct"):
            r = scenario_run.run(os.path.join(root, "examples", name), setup, a.build, a.timescale, a.duration)
            s = r["summary"]
            refused = sum(v for k, v in (s.get("error_codes") or {}).items())
            peak = gpu_peak(r)
            ooms = max(s["oom"], r.get("worker_ooms_logged", 0) if setup == "direct" else s["oom"])
            print("%-32s %-7s %4d/%-4d %5d %8s%% %10d %8s %8s %9s %8s" % (
                name if setup == "vramd" else "", setup, s["succeeded"], s["requests"], ooms,
                "-" if s["deadline_hit_rate"] is None else "%.0f" % (100 * s["deadline_hit_rate"]),
                refused, fmt_s(s["latency_s"]["p50"]), fmt_s(s["latency_s"]["p95"]),
                count_events(r["workdir"], "eviction") if setup == "vramd" else "-",
                "-" if peak is None else "%.1fGiB" % peak), flush=True)
            t = totals[setup]
            t[0] += s["succeeded"]
            t[1] += s["requests"]
            t[2] += ooms
    print()
    v, d = totals["vramd"], totals["direct"]
    print("through vramd:  %d of %d requests served, %d OOM" % (v[0], v[1], v[2]))
    print("straight:       %d of %d requests served, %d OOM" % (d[0], d[1], d[2]))
    print("\n'refused' = answered at once or after the deadline with a clear vramd error code")
    print("(queue_full, deadline_unmeetable, deadline_exceeded) instead of an OOM or a hang.")
    print("Logs and per-request results of each run: /tmp/scn-* (vramd.log, player.json).")
    return 0 if v[2] == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--acts", default="field,parking", help="field, parking or both (default)")
    ap.add_argument("--scenarios", default=",".join(DEFAULT))
    ap.add_argument("--duration", default="5m")
    ap.add_argument("--timescale", type=float, default=0.02)
    ap.add_argument("--park-timescale", type=float, default=0.1,
                    help="act 2's SIMGPU_TIMESCALE; below 0.1 vramd's real-time constants (2 s between two"
                         " clear_cache calls, 100 ms NVML polls) weigh in the simulated figures")
    ap.add_argument("--park-generations", type=int, help="act 2: only its traffic's first N generations")
    ap.add_argument("--park-setups", default=",".join(demo_parking.SETUPS))
    ap.add_argument("--json", help="act 2's figures as JSON")
    a = ap.parse_args()
    acts = set(a.acts.split(","))
    if not acts or acts - {"field", "parking"}:
        ap.error("--acts: field, parking or field,parking")
    rc = 0
    print("vramd demo: simulated GPUs, figures measured in each run.\n")
    if "field" in acts:
        rc |= act_field(a)
    if "parking" in acts:
        if "field" in acts:
            print("\n")
        rc |= demo_parking.act(a.build, a.park_timescale, a.park_generations, a.park_setups, a.json)[0]
    return rc


if __name__ == "__main__":
    sys.exit(main())
