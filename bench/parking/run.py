#!/usr/bin/python3
"""bench/parking: what one model swap costs through vramd, per eviction tier (issue 13).

Two simworker models of SIZE each on a simulated GPU that holds only one of them. A request
for the model that is out forces the one that is in out, and the first back in: one swap =
one model's way out + the other's way back (a model's round trip). The setups, the same
models and GPU, one vramd each, run in turn:

  checkpoint  `checkpoint: true` (CUDA driver checkpoint, build/lib/libcuda-sim.so): park + restore,
              the driver copying at the rates measured on an H100 (--checkpoint-gbps 2 out,
              --restore-gbps 5 back)
  custom      the same through the driver's custom storage (CUDA 13.4; SIMGPU_CUSTOM_STORAGE=1):
              vramd copies through its pinned pool at the link's rate (--pcie-gbps)
  shim        `cuda_shim: auto`, `shim_park: true`: the CUDA shim in the worker copies its
              allocations to pinned host memory at the link's rate (the context stays)
  sleep       sleep/wake hooks (simworker's /sleep, /wake_up: vLLM sleep mode)
  unload      unload/reload hooks (/unload_models/, /reload_models/: a full reload)
  stop        no hooks: the worker is stopped and started again (a full load)

Simulated times (FIELD.md): loads at --load-gbps (default 2 GB/s), pinned copies at the
simulated PCIe bandwidth --pcie-gbps (default 20 GB/s), sleep and wake at that same speed
(vLLM level 1 copies the weights to host memory), unload 300 ms (simworker's default).
Each request runs --run-time (default 0.5 s) simulated.

For each setup: the client's latency of each swap request (real ms), the expected simulated
work (way out + way back + run time) x SIMGPU_TIMESCALE, and the median latency of a request
to the model already in (no swap) measured in the same vramd; vramd's overhead = swap latency
- expected work - that no-swap latency. From vramd's log: `parked` (wait_ms, copy_ms),
`resumed` (wake_ms, copy_ms), `park_refused` (the host could not hold it: the next tier ran).

  /usr/bin/python3 bench/parking/run.py [--sizes 1,8,24] [--setups checkpoint,custom,shim,sleep,unload,stop]
      [--swaps 6] [--timescale 0.2] [--json bench/results/parking-STAMP.json]

Run from the repository root after `make`. The host-memory check is real: parking N bytes
needs N + reserve (2 GiB) free in MemAvailable, and at the moment of a swap both models are
parked (the one coming back is restored only after the other left), so a swap parks 2 x SIZE.
"""
import argparse
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import GiB, MiB, binary, free_port, sim_env, wait_for  # noqa: E402
from vramdkit.daemon import Vramd  # noqa: E402

GB = 1e9
CONTEXT = 300 * MiB


def simgpu(args, env):
    p = subprocess.run([str(binary("simgpu")), *args], capture_output=True, text=True, env=env, timeout=60)
    if p.returncode != 0:
        sys.exit(f"simgpu {args}: {p.stdout} {p.stderr}")
    return p.stdout


def model_cfg(name, setup, size, a):
    load_s = (size + CONTEXT) / (a.load_gbps * GB)
    copy_s = (size + CONTEXT) / (a.pcie_gbps * GB)
    flags = ["--resident", str(size), "--per-request", str(256 * MiB), "--run-time", f"{a.run_time:g}s",
             "--load-time", f"{load_s:.3f}s", "--sleep-time", f"{copy_s:.3f}s", "--wake-time", f"{copy_s:.3f}s"]
    m = {
        "route": f"/{name}/",
        "cmd": ["simworker", "--port", "{port}", "--name", f"{name}@{a.tag}", *flags],
        "health": {"path": "/health", "interval": "500ms", "timeout": "5s", "failures": 3},
        "startup_timeout": "10m",
        "stop_timeout": "60s",
        "memory": {"resident": str(size + CONTEXT + 64 * MiB), "per_request": str(256 * MiB)},
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30m",
        "keep_alive": "1h",
    }
    if setup in ("checkpoint", "custom"):
        m["checkpoint"] = True
    elif setup == "shim":
        m["cuda_shim"] = "auto"
        m["shim_park"] = True
    elif setup == "sleep":
        m["sleep"] = {"method": "POST", "path": "/sleep?level=1", "timeout": "10m"}
        m["wake"] = {"method": "POST", "path": "/wake_up", "timeout": "10m"}
    elif setup == "unload":
        m["unload"] = {"method": "POST", "path": "/unload_models/", "timeout": "10m"}
        m["reload"] = {"method": "POST", "path": "/reload_models/", "timeout": "10m"}
    # expected simulated seconds of one model's way out and way back in this setup
    shim_s = size / (a.pcie_gbps * GB)  # the context stays on the GPU
    out_s, back_s = {"checkpoint": ((size + CONTEXT) / (a.checkpoint_gbps * GB), (size + CONTEXT) / (a.restore_gbps * GB)),
                     "custom": (copy_s, copy_s), "shim": (shim_s, shim_s), "sleep": (copy_s, copy_s),
                     "unload": (0.3, load_s), "stop": (0.0, load_s)}[setup]
    return m, out_s, back_s


def timed(vd, name):
    t0 = time.monotonic()
    r = vd.generate(name, timeout=1800)
    ms = (time.monotonic() - t0) * 1000
    if r.status != 200:
        raise RuntimeError(f"{name}: HTTP {r.status} {r.body[:300]!r}\n{vd.log_tail(40)}")
    return ms


def run_one(setup, size_gib, a, tmp):
    size = size_gib * GiB
    gpu_set = f"parkbench.{os.getpid()}.{setup}.{size_gib}"
    env = sim_env(gpu_set, a.timescale)
    declared = size + CONTEXT + 64 * MiB
    total = int(declared * 1.5) + 512 * MiB  # one model fits (with a request), two never do
    simgpu(["create", gpu_set, "--memory", str(total), "--pcie-bandwidth", f"{a.pcie_gbps:g}GB/s",
            "--checkpoint-bandwidth", f"{a.checkpoint_gbps:g}GB/s", "--restore-bandwidth", f"{a.restore_gbps:g}GB/s"], env)
    vd = None
    try:
        models, expect = {}, {}
        for name in ("a", "b"):
            models[name], out_s, back_s = model_cfg(name, setup, size, a)
            expect = {"out_s": out_s, "back_s": back_s}
        cfg = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp / f"var-{setup}-{size_gib}"),
               "log": {"format": "json", "level": "info"}, "gpu": {"headroom": str(128 * MiB)},
               "limits": {"queue_max": 100}, "models": models}
        if setup in ("checkpoint", "custom", "shim", "sleep"):
            cfg["host_memory"] = {"budget": f"{3 * size_gib + 4}GiB", "reserve": "2GiB"}
        vd = Vramd(tmp, f"vramd-{setup}-{size_gib}", cfg, gpu_set=gpu_set, cwd=tmp, config_format="json",
                   stdout_apart=False, http="stdlib", start_timeout=30, stop_timeout=120, request_timeout=1800,
                   extra_env={"SIMGPU_TIMESCALE": str(a.timescale),
                              "SIMGPU_CUSTOM_STORAGE": "1" if setup == "custom" else "0"})
        vd.start()
        wait_for(lambda: vd.status()["nvml"]["ok"] and vd.status()["gpus"], timeout=30, what="NVML")
        timed(vd, "a")  # a cold start, then b's: not measured
        timed(vd, "b")
        resident = [timed(vd, "b") for _ in range(3)]
        swaps = []
        for i in range(a.swaps):
            swaps.append(timed(vd, "a" if i % 2 == 0 else "b"))
        resident += [timed(vd, "b" if a.swaps % 2 == 0 else "a") for _ in range(2)]
        base = st.median(resident)
        expected_ms = (expect["out_s"] + expect["back_s"] + a.run_time) * a.timescale * 1000
        no_swap_run_ms = a.run_time * a.timescale * 1000
        over = [s - expected_ms - (base - no_swap_run_ms) for s in swaps]
        ev = lambda name: [e for e in vd.events(name) if e.get("model") in ("a", "b")]  # noqa: E731
        parked, resumed, refused = ev("parked"), ev("resumed"), ev("park_refused")
        tiers = sorted({e.get("tier") for e in parked}) or ["-"]
        row = {
            "setup": setup, "size_gib": size_gib, "timescale": a.timescale,
            "expected_sim_s": {k: round(v, 3) for k, v in expect.items()},
            "swap_real_ms": [round(x, 1) for x in swaps], "no_swap_real_ms": [round(x, 1) for x in resident],
            "swap_median_ms": round(st.median(swaps), 1), "swap_sim_s": round(st.median(swaps) / a.timescale / 1000, 2),
            "expected_ms": round(expected_ms, 1), "overhead_ms": [round(x, 1) for x in over],
            "overhead_median_ms": round(st.median(over), 1), "park_tiers": tiers,
            "park_refused": len(refused), "refused_reasons": sorted({e.get("reason") for e in refused}),
            "parked_wait_ms": [e.get("wait_ms") for e in parked], "parked_copy_ms": [e.get("copy_ms") for e in parked],
            "resumed_ms": [e.get("wake_ms") for e in resumed], "resumed_copy_ms": [e.get("copy_ms") for e in resumed],
            "worker_starts": len([e for e in ev("worker_started")]),
        }
        return row
    finally:
        if vd is not None and vd.alive():
            vd.stop(timeout=120)
        subprocess.run([str(binary("simgpu")), "rm", gpu_set], capture_output=True, timeout=60, env=env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,8,24")
    ap.add_argument("--setups", default="checkpoint,sleep,unload,stop")
    ap.add_argument("--swaps", type=int, default=6)
    ap.add_argument("--timescale", type=float, default=0.2)
    ap.add_argument("--load-gbps", type=float, default=2.0)
    ap.add_argument("--pcie-gbps", type=float, default=20.0)
    ap.add_argument("--checkpoint-gbps", type=float, default=2.0, help="the driver's checkpoint, device to host")
    ap.add_argument("--restore-gbps", type=float, default=5.0, help="the driver's restore, host to device")
    ap.add_argument("--run-time", type=float, default=0.5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, help="keep vramd's logs and configs in this directory")
    a = ap.parse_args()
    a.tag = f"parkbench{os.getpid()}"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(a.json or ROOT / "bench" / "results" / f"parking-{stamp}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.keep:
        Path(a.keep).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="parkbench-") as tmpd:
        d = a.keep or tmpd
        for size in [int(s) for s in a.sizes.split(",")]:
            for setup in a.setups.split(","):
                row = run_one(setup, size, a, Path(d))
                rows.append(row)
                print(f"{size:3d} GiB {setup:10s} tier {'/'.join(row['park_tiers']):10s} refused {row['park_refused']} "
                      f"swap median {row['swap_median_ms']:8.1f} ms real = {row['swap_sim_s']:7.2f} s sim; "
                      f"expected {row['expected_ms']:8.1f} ms; overhead median {row['overhead_median_ms']:6.1f} ms "
                      f"{row['overhead_ms']}", flush=True)
                out.write_text(json.dumps({"args": {k: v for k, v in vars(a).items() if k != "tag"},
                                           "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
