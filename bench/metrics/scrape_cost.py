#!/usr/bin/python3
"""scrape_cost: what a /metrics scrape costs vramd at many models, and what scrapes do to
the loop's other work.

Starts vramd on a simulated 80 GiB GPU with N models (simworker, never started: the cost is
the exposition's, not the workers'), then measures, in this order:
  1. the time of one scrape (sequential GETs of /metrics; median, p90) and its size;
  2. /healthz latency with nothing else going on (median, p99): the baseline;
  3. /healthz latency while two other connections scrape /metrics in a loop.
It does so twice in one run: with limits.metrics_cache 0 (every scrape builds the exposition,
as before the cache) and with the default (1s: an exposition is reused for up to the smaller
of 1 s and 10 x its build time). Every figure is a median over many samples; ratios are
against the baseline of the same run.

  /usr/bin/python3 bench/metrics/scrape_cost.py --models 1000 [--build build] [--out FILE]

Writes a JSON result (default bench/results/metrics-scrape-<models>-<time>.json) and prints
a one-line summary. Everything listens on 127.0.0.1 and is stopped at the end.
"""
import argparse
import http.client
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import GiB, binary, free_port, sim_env  # noqa: E402
from vramdkit.daemon import Vramd  # noqa: E402


def get(conn, path):
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t0) * 1000
    if r.status != 200:
        raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
    return ms, len(body)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def healthz_latencies(port, seconds):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(get(conn, "/healthz")[0])
        time.sleep(0.002)
    conn.close()
    return out


def scrape_loop(port, stop, counts):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not stop.is_set():
        get(conn, "/metrics")
        counts.append(1)
    conn.close()


def measure(a, cache, tmp, gpu_set):
    port = free_port()
    models = {f"m{i:04d}": {"route": f"/m{i:04d}/", "cmd": ["simworker", "--port", "{port}"],
                            "memory": {"resident": "1GiB", "per_request": "256MiB"}, "keep_alive": "10m"}
              for i in range(a.models)}
    cfg = {"listen": f"127.0.0.1:{port}", "state_dir": str(tmp / f"var-{cache}"),
           "log": {"format": "json", "level": "warn"}, "limits": {"metrics_cache": cache}, "models": models}
    vd = Vramd(tmp, f"vramd-{cache}", cfg, gpu_set=gpu_set, start_timeout=120)
    try:
        vd.start()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        get(conn, "/metrics")  # warm
        scrape_ms, size = [], 0
        for _ in range(a.scrapes):
            ms, size = get(conn, "/metrics")
            scrape_ms.append(ms)
        conn.close()
        base = healthz_latencies(port, a.seconds)
        stop, counts = threading.Event(), []
        loops = [threading.Thread(target=scrape_loop, args=(port, stop, counts)) for _ in range(2)]
        for t in loops:
            t.start()
        time.sleep(0.5)
        loaded = healthz_latencies(port, a.seconds)
        stop.set()
        for t in loops:
            t.join()
    finally:
        vd.stop()
    res = {
        "metrics_cache": cache, "bytes_per_scrape": size,
        "scrape_ms_median": st.median(scrape_ms), "scrape_ms_p90": pct(scrape_ms, 90),
        "healthz_ms_median_idle": st.median(base), "healthz_ms_p99_idle": pct(base, 99),
        "healthz_ms_median_two_scrape_loops": st.median(loaded),
        "healthz_ms_p99_two_scrape_loops": pct(loaded, 99),
        "scrapes_during_loops": len(counts), "healthz_samples": [len(base), len(loaded)],
    }
    res["healthz_ratio_loaded_to_idle"] = res["healthz_ms_median_two_scrape_loops"] / res["healthz_ms_median_idle"]
    print(f"models={a.models} metrics_cache={cache} bytes={size} scrape_median_ms={res['scrape_ms_median']:.2f} "
          f"healthz_median_ms idle={res['healthz_ms_median_idle']:.3f} "
          f"two_scrape_loops={res['healthz_ms_median_two_scrape_loops']:.3f} "
          f"p99={res['healthz_ms_p99_two_scrape_loops']:.1f} "
          f"(x{res['healthz_ratio_loaded_to_idle']:.1f}, {len(counts)} scrapes in {a.seconds:g} s)", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=40, help="sequential scrapes timed")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each /healthz run")
    ap.add_argument("--build", default=os.environ.get("VRAMD_BUILD", "build"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.environ["VRAMD_BUILD"] = a.build
    tmp = Path(tempfile.mkdtemp(prefix="vramd-metrics-bench-"))
    gpu_set = f"metricsbench.{os.getpid()}"
    env = sim_env(gpu_set)
    subprocess.run([str(binary("simgpu")), "create", gpu_set, "--memory", str(80 * GiB)],
                   check=True, capture_output=True, env=env, timeout=60)
    try:
        runs = [measure(a, cache, tmp, gpu_set) for cache in ("0", "1s")]
    finally:
        subprocess.run([str(binary("simgpu")), "rm", gpu_set], capture_output=True, env=env, timeout=60)
    res = {"models": a.models, "build": a.build, "runs": runs,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out = a.out or str(ROOT / "bench" / "results" / f"metrics-scrape-{a.models}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
