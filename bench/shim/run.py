#!/usr/bin/python3
"""bench/shim/run.py: what the CUDA shim costs per allocation (docs/benchmarks.md, "shim").

Each configuration is a real vramd on a simulated 24 GiB GPU with one model whose worker is
bench/shim/alloc_bench (it measures at start, writes one JSON line, then answers /health):
  off/pairs     cuda_shim: off; N x (cuMemAlloc_v2 1 MiB + cuMemFree_v2): the baseline
  shim/pairs    cuda_shim: auto, a grant far above what it allocates: the shim's fast path
  off/grow      cuda_shim: off; N x cuMemAlloc_v2 1 MiB kept: the baseline of
  shim/grow     cuda_shim: auto, a grant of ~0 past its context: every allocation asks vramd
                over the grant socket and waits for GRANT (a round trip through vramd's loop)
Rounds run the four in rotated order; the tables give medians over rounds of each run's
median ns per allocation, and ratios within a round.

  /usr/bin/python3 bench/shim/run.py [--rounds 5] [--n 2000]
Result: bench/results/shim-<stamp>.json and shim-latest.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import wait_for  # noqa: E402
from vramdkit.harness import Harness  # noqa: E402

CONFIGS = [("off", "pairs"), ("auto", "pairs"), ("off", "grow"), ("auto", "grow")]


def one(h, gpu, shim, mode, n, out):
    bench = str(ROOT / os.environ.get("VRAMD_BUILD", "build") / "bench" / "alloc_bench")
    # pairs: a 4 GiB booking, far above the 1 MiB it holds at a time; grow: the booking is the
    # 300 MiB context-sized minimum, so every 1 MiB past it asks
    resident = "4GiB" if mode == "pairs" else "1MiB"
    model = h.model("a", [], resident, "0", startup_timeout="60s")
    # grow: one round per worker (the grant it was given stays booked for a while after its frees)
    model["cmd"] = [bench, "--serve", "{port}", "--mode", mode, "--n", str(n),
                    "--rounds", "5" if mode == "pairs" else "1", "--out", out]
    model["cuda_shim"] = shim
    model["grant_wait"] = "10s"
    env = {"VRAMD_CUDA_SHIM_LIBRARY": str(ROOT / os.environ.get("VRAMD_BUILD", "build") / "lib" / "libvramd-cuda.so")}
    vd = h.start_vramd(gpu, {"a": model}, extra_env=env, level="warn")
    try:
        vd.post("/v1/models/a/load", timeout=120)
        wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, timeout=120, what="alloc_bench's result")
        res = json.loads(Path(out).read_text())
        shim_state = None
        if shim != "off":
            wait_for(lambda: vd.instances("a") and vd.instances("a")[0].get("shim"), timeout=10, what="shim status")
            shim_state = vd.instances("a")[0]["shim"]
        res["shim_status"] = shim_state
        return res
    finally:
        vd.stop(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="vramd-shim-bench-") as tmp:
        h = Harness(Path(tmp))
        try:
            gpu = h.gpu_set("24GiB")
            for r in range(args.rounds):
                order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
                got = {}
                for shim, mode in order:
                    out = str(Path(tmp) / f"r{r}-{shim}-{mode}.json")
                    got[f"{shim}/{mode}"] = one(h, gpu, shim, mode, args.n, out)
                rounds.append(got)
                print(json.dumps({k: v["median_ns"] for k, v in got.items()}), flush=True)
        finally:
            h.close()
    med = {k: statistics.median(r[k]["median_ns"] for r in rounds) for k in rounds[0]}
    ratio = {m: statistics.median(r[f"auto/{m}"]["median_ns"] / max(1, r[f"off/{m}"]["median_ns"]) for r in rounds)
             for m in ("pairs", "grow")}
    added = {m: statistics.median(r[f"auto/{m}"]["median_ns"] - r[f"off/{m}"]["median_ns"] for r in rounds)
             for m in ("pairs", "grow")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "n": args.n, "rounds": rounds,
              "median_ns": med, "ratio_shim_over_off": ratio, "added_ns": added}
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"shim-{stamp}.json", "shim-latest.json"):
        (res_dir / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"median_ns": med, "ratio": ratio, "added_ns": added}, indent=1))


if __name__ == "__main__":
    main()
