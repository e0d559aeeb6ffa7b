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

--tiers shim (issue 25): the same worker (--random-fill) under vramd with `cuda_shim:
required` and `shim_park: true`, parked (admin unload) and restored (a request) CYCLES times
through the CUDA shim; per size the shim's copy rate each way (vramd's `shim_round` events:
bytes / copy_ms), against the pinned copy rate of the same machine measured in the same run (a
plain copy between a pinned host tensor and the device, both ways: the link's rate), the
ratio (target: at least 0.8 both ways), and whether the tensor's checksums survived.

Needs an NVIDIA driver with cuCheckpointProcess* (570+), a python3 with torch+CUDA
($VRAMD_TORCH_PYTHON or python3) and `make`. Run from the repository root:
    /usr/bin/python3 bench/checkpoint/real_gpu.py --sizes 1,8,24 --cycles 3 [--tiers checkpoint,shim]
        [--out FILE.json]
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


PINNED = """
import json, sys, time, torch
n = int(sys.argv[1]) * 2**20
h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
d = torch.empty(n, dtype=torch.uint8, device="cuda")
def rate(dst, src):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    t = time.monotonic()
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return 3 * n / 1e9 / (time.monotonic() - t)
print(json.dumps({"d2h_gbps": rate(h, d), "h2d_gbps": rate(d, h)}))
"""


def pinned_rate(py, mib=2048):
    """The link's rate with pinned host memory on this machine, both ways (GB/s)."""
    out = subprocess.run([py, "-c", PINNED, str(mib)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"pinned copy: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def vramd_post(base, path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read() or b"{}")


def vramd_get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())


def shim_size(py, gib, cycles, port, pinned):
    """One size through the shim tier under vramd: rates each way, checksums, NVML."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="vramd-shim-bench-")
    cfg = f"""
listen: 127.0.0.1:{port}
state_dir: {tmp}/var
log: {{ format: json, level: info }}
gpu: {{ nvml_library: libnvidia-ml.so.1, poll: 100ms }}
host_memory: {{ budget: {gib * 2 + 8}GiB, reserve: 2GiB }}
models:
  torch:
    route: /torch/
    cmd: [{py}, {ROOT}/tests/gpu/torch_worker.py, --port, "{{port}}", --resident-mib, "{gib * 1024}", --random-fill]
    memory: {{ resident: {gib + 2}GiB, per_request: 1GiB }}
    concurrency: 1
    startup_timeout: 10m
    stop_timeout: 5m
    cuda_shim: required
    shim_park: true
"""
    path = os.path.join(tmp, "vramd.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    env = dict(os.environ, VRAMD_CUDA_SHIM_LIBRARY=os.path.join(ROOT, BUILD, "lib", "libvramd-cuda.so"))
    env.pop("VRAMD_NVML_LIBRARY", None)
    env.pop("VRAMD_CUDA_LIBRARY", None)
    logp = os.path.join(tmp, "vramd.log")
    p = subprocess.Popen([os.path.join(ROOT, BUILD, "bin", "vramd"), "--config", path], stderr=open(logp, "wb"), env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if vramd_get(base, "/readyz").get("ready"):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        vramd_post(base, "/torch/generate", {"mib": 256, "ms": 50})
        inst = next(m for m in vramd_get(base, "/v1/status")["models"] if m["name"] == "torch")["instances"][0]
        wport = inst["port"]
        before = vramd_get(f"http://127.0.0.1:{wport}", "/checksum")
        for _ in range(cycles):
            vramd_post(base, "/v1/models/torch/unload")
            vramd_post(base, "/torch/generate", {"mib": 256, "ms": 50})
        after = vramd_get(f"http://127.0.0.1:{wport}", "/checksum")
    finally:
        p.send_signal(15)
        p.wait(timeout=300)
    rounds = {"park": [], "restore": []}
    with open(logp, errors="replace") as f:
        for line in f:
            if '"shim_round"' in line:
                e = json.loads(line)
                if e.get("ok") in (True, "true") and e.get("copy_ms"):
                    rounds[e["op"]].append(e["bytes"] / 1e9 / (e["copy_ms"] / 1000))
    out_gbps = statistics.median(rounds["park"]) if rounds["park"] else 0
    back_gbps = statistics.median(rounds["restore"]) if rounds["restore"] else 0
    return {"size_gib": gib, "tier": "shim", "park_gbps": out_gbps, "restore_gbps": back_gbps,
            "pinned": pinned, "park_ratio": out_gbps / pinned["d2h_gbps"], "restore_ratio": back_gbps / pinned["h2d_gbps"],
            "same_data": before["sum"] == after["sum"] and before["weighted"] == after["weighted"],
            "same_pid": before["pid"] == after["pid"], "rounds": rounds, "log": logp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,8,24")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--port", type=int, default=18731)
    ap.add_argument("--tiers", default="checkpoint", help="checkpoint,shim")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not os.path.exists(CKPT):
        sys.exit(f"{CKPT} is missing: make first")
    py = need_torch_python()
    if gpu0_total() == 0:
        sys.exit("no NVIDIA GPU that NVML can read")
    results = []
    tiers = a.tiers.split(",")
    if "shim" in tiers:
        pinned = pinned_rate(py)
        print(f"pinned copy on this machine: {pinned['d2h_gbps']:.1f} GB/s device to host, "
              f"{pinned['h2d_gbps']:.1f} GB/s host to device")
        print("| size | shim park GB/s (of pinned) | shim restore GB/s (of pinned) | data kept | same pid |")
        print("|---|---|---|---|---|")
        for gib in [int(s) for s in a.sizes.split(",")]:
            r = shim_size(py, gib, a.cycles, a.port, pinned)
            results.append(r)
            print(f"| {gib} GiB | {r['park_gbps']:.1f} ({100 * r['park_ratio']:.0f} %) "
                  f"| {r['restore_gbps']:.1f} ({100 * r['restore_ratio']:.0f} %) | {r['same_data']} | {r['same_pid']} |",
                  flush=True)
    if "checkpoint" not in tiers:
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
        return
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
