#!/usr/bin/env python3
"""bench/checkpoint/real_gpu.py: what parking costs on a real NVIDIA GPU, per model size.

For each SIZE (GiB) a PyTorch worker (tests/gpu/torch_worker.py --load-from-host: its
"weights" filled in host memory, then copied to the card, as a load from the page cache) is
started, then parked and restored CYCLES times through vramd's CUDA interface (src/gpu/cuda.c,
driven by build/bin/simcuda-checkpoint with VRAMD_CUDA_LIBRARY=libcuda.so.1: lock +
checkpoint, restore + unlock). Printed per size, medians: the start (process, CUDA context,
load), the park and the restore (driver copy and total, GB/s), and NVML's reading of the
worker before, parked and after. The start is the stop/start tier's way back; the restore is
the checkpoint tier's.

Needs an NVIDIA driver with cuCheckpointProcess* (570+), a python3 with torch+CUDA
($VRAMD_TORCH_PYTHON or python3) and `make`. Run from the repository root:
    /usr/bin/python3 bench/checkpoint/real_gpu.py --sizes 1,8,24 --cycles 3 [--out FILE.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("VRAMD_BUILD", "build")
CKPT = os.path.join(ROOT, BUILD, "bin", "simcuda-checkpoint")
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
from gpukit import gpu0_total, gpu_bytes_of, torch_python  # noqa: E402  (the NVML readers tests/gpu uses)


def ckpt(*args):
    env = dict(os.environ, VRAMD_CUDA_LIBRARY="libcuda.so.1")
    res = subprocess.run([CKPT, *map(str, args), "--json"], capture_output=True, text=True, env=env, timeout=600)
    out = json.loads(res.stdout)
    if res.returncode != 0 or out.get("status") != "ok":
        sys.exit(f"simcuda-checkpoint {' '.join(map(str, args))}: {res.returncode} {out} {res.stderr}")
    return out


def health(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        return json.loads(r.read())


def need_torch_python():
    py = torch_python()
    if py is None:
        sys.exit("no python3 with torch and CUDA ($VRAMD_TORCH_PYTHON)")
    return py


def one_size(py, gib, cycles, port):
    t0 = time.monotonic()
    w = subprocess.Popen([py, os.path.join(ROOT, "tests", "gpu", "torch_worker.py"), "--port", str(port),
                          "--resident-mib", str(gib * 1024), "--load-from-host"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            try:
                h = health(port)
                break
            except OSError:
                if w.poll() is not None:
                    sys.exit(f"worker exited: {w.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
        start_s = time.monotonic() - t0
        before = gpu_bytes_of(w.pid)
        rows = []
        for _ in range(cycles):
            park = ckpt("--toggle", "--pid", w.pid, "--timeout", 60000)
            parked = gpu_bytes_of(w.pid)
            back = ckpt("--toggle", "--pid", w.pid)
            after = gpu_bytes_of(w.pid)
            rows.append({"park_copy_ms": park["copy_ms"], "park_total_ms": park["total_ms"],
                         "lock_ms": park["lock_ms"], "restore_copy_ms": back["copy_ms"],
                         "restore_total_ms": back["total_ms"], "unlock_ms": back["unlock_ms"],
                         "nvml_parked": parked, "nvml_after": after})
        assert health(port)["status"] == "ok"
    finally:
        w.kill()
        w.wait()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    gb = before / 1e9
    return {"size_gib": gib, "nvml_before": before, "start_s": start_s, "cuda_init_ms": h["cuda_init_ms"],
            "load_ms": h["load_ms"], "load_gbps": gb / (h["load_ms"] / 1000),
            "park_gbps": gb / (med["park_copy_ms"] / 1000), "restore_gbps": gb / (med["restore_copy_ms"] / 1000),
            "median": med, "cycles": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,8,24")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--port", type=int, default=18731)
    ap.add_argument("--out")
    a = ap.parse_args()
    if not os.path.exists(CKPT):
        sys.exit(f"{CKPT} is missing: make first")
    py = need_torch_python()
    if gpu0_total() == 0:
        sys.exit("no NVIDIA GPU that NVML can read")
    results = []
    print("| size | NVML before | start (context + load) s | load GB/s | park s (GB/s) | restore s (GB/s) "
          "| lock / unlock ms | NVML parked / after |")
    print("|---|---|---|---|---|---|---|---|")
    for gib in [int(s) for s in a.sizes.split(",")]:
        r = one_size(py, gib, a.cycles, a.port)
        results.append(r)
        m = r["median"]
        print(f"| {gib} GiB | {r['nvml_before'] / 2**30:.2f} GiB | {r['start_s']:.2f} "
              f"({r['cuda_init_ms'] / 1000:.2f} + {r['load_ms'] / 1000:.2f}) | {r['load_gbps']:.1f} "
              f"| {m['park_total_ms'] / 1000:.2f} ({r['park_gbps']:.1f}) "
              f"| {m['restore_total_ms'] / 1000:.2f} ({r['restore_gbps']:.1f}) "
              f"| {m['lock_ms']:.0f} / {m['unlock_ms']:.0f} "
              f"| {m['nvml_parked'] / 2**20:.0f} MiB / {m['nvml_after'] / 2**30:.2f} GiB |", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
