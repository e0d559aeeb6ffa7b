#!/usr/bin/python3
"""bench/shim/limits.py: what the driver's per-cgroup limits cost a request (docs/benchmarks.md,
"driver limits").

A real vramd on a simulated 24 GiB GPU, workers in cgroup v2 leaves, one simworker model
(2 GiB resident, 1 GiB per request, 10 ms simulated run). Each configuration sends N
requests one after another and times each round trip at the client:
  off/burst     SIMGPU_DRIVER_LIMITS unset (a 580 driver: no limits): the baseline
  on/burst      limits on, requests back to back: a request is held only when its booking
                rises past the limit (a back-to-back request's booking counts the last one's
                memory as cached until NVML measured it), not once per request
  off/spaced    no limits, 300 ms between requests
  on/spaced     limits on, 300 ms between requests: the limit was lowered in between, so
                every request is held in the proxy for one raise (an NVML call on a driver
                thread) before it reaches the worker
Rounds rotate the order; the tables give medians over rounds of each run's median, and the
added time on - off within a round.

  /usr/bin/python3 bench/shim/limits.py [--rounds 3] [--n 40]
Needs root and a writable cgroup v2 hierarchy. Result: bench/results/limits-<stamp>.json.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import sim_s  # noqa: E402
from vramdkit.harness import Harness  # noqa: E402

CONFIGS = [("off", "burst"), ("on", "burst"), ("off", "spaced"), ("on", "spaced")]


def one(h, gpu, limits, mode, n):
    model = h.model("a", ["--resident", "2GiB", "--per-request", "1GiB", "--cache", "release",
                          "--run-time", sim_s(0.01)], "2560MiB", "1GiB")
    env = {"SIMGPU_DRIVER_LIMITS": "1"} if limits == "on" else {}
    vd = h.start_vramd(gpu, {"a": model}, extra_env=env, level="warn", gpu={"driver_limits": "auto"},
                       cgroup={"mode": "v2"})
    try:
        r = vd.post("/v1/models/a/load", timeout=120)
        assert r.status == 200, r
        vd.wait_ready("a")
        assert vd.generate("a", {"warm": 1}).status == 200
        time.sleep(0.5)
        times = []
        for _ in range(n):
            if mode == "spaced":
                time.sleep(0.3)
            t0 = time.perf_counter()
            r = vd.generate("a", {"n": 1})
            times.append((time.perf_counter() - t0) * 1e3)
            assert r.status == 200, r
        dl = vd.status()["nvml"]["driver_limits"]
        return {"median_ms": statistics.median(times), "p90_ms": sorted(times)[int(len(times) * 0.9) - 1],
                "held_requests": dl["held_requests"], "sets": dl["sets"], "available": dl["available"]}
    finally:
        vd.stop(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="vramd-limits-bench-") as tmp:
        h = Harness(Path(tmp))
        try:
            gpu = h.gpu_set("24GiB")
            for r in range(args.rounds):
                order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
                got = {f"{lim}/{mode}": one(h, gpu, lim, mode, args.n) for lim, mode in order}
                rounds.append(got)
                print(json.dumps({k: (round(v["median_ms"], 3), v["held_requests"]) for k, v in got.items()}),
                      flush=True)
        finally:
            h.close()
    med = {k: statistics.median(r[k]["median_ms"] for r in rounds) for k in rounds[0]}
    added = {m: statistics.median(r[f"on/{m}"]["median_ms"] - r[f"off/{m}"]["median_ms"] for r in rounds)
             for m in ("burst", "spaced")}
    held = {k: statistics.median(r[k]["held_requests"] for r in rounds) for k in rounds[0]}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "n": args.n, "rounds": rounds,
              "median_ms": med, "added_ms": added, "held_requests": held}
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / f"limits-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"median_ms": med, "added_ms": added, "held_requests": held}, indent=1))


if __name__ == "__main__":
    main()
