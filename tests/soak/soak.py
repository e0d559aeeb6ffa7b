#!/usr/bin/python3
"""soak: vramd held at twice its capacity for a long time (RELIABILITY case 34): its memory
and descriptors stay flat, the latency of admitted requests stays bounded, and every answer
is 2xx, 429 or 503.

The real vramd on one simulated 24 GiB card (SIMGPU_TIMESCALE 0.05) with two simworker
models:
  chat   concurrency 2, 2 s (simulated) runs = 100 ms, 2 GiB resident + 1 GiB per request,
         queue_max 8
  img    concurrency 1, 1 s runs = 50 ms, 1 GiB resident + 6 GiB per request, queue_max 6
and `limits.per_client` keyed by the header X-Client (max_queued 4, max_in_flight 2).
Capacity is measured first (closed loop, every slot and queue kept full, the 200s per
second); then an open-loop generator sends requests at twice that rate (a fixed rate,
whatever the answers: arrivals do not wait for answers, as real clients do not) from five
tenants, one of them greedy (40 % of the traffic, so it passes its per-client cap: 429).
Overflow gets 503 queue_full; nothing may time out or be cut.

Every second vramd's RSS (VmRSS) and descriptor count are sampled. At the end:
  - every answer is 2xx, 429 or 503 (no 5xx other than 503, no cut connection, no 504);
  - admitted latency (the 200s) bounded: its maximum is below a bound taken from the config
    (a full queue ahead plus the run, x4 for a loaded machine, + 1 s) and its p99 over the
    last third of the run is no more than 1.5 x (+ 0.25 s) the p99 over the first third;
  - RSS flat: the median of the last fifth of the samples is within 4 MiB (or 5 %) of the
    median of the second fifth (after warm-up);
  - descriptors flat: vramd's own descriptors (less those of live workers and idle pooled
    connections, as the chaos run counts them) back to their count before the traffic (+2),
    and the memory budget's `used` back to 0;
  - nothing queued or in flight, the ledger resident-only, SIGTERM exits 0, no sanitizer
    report, no worker left (vramdkit Harness.finish).

  /usr/bin/python3 tests/soak/soak.py --minutes 10      by hand (after `make`); prints JSON
  tests/soak/test_soak.py                               a ~20 s version inside `make test`
"""
import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1])
_LIB = str(Path(__file__).resolve().parents[1] / "lib")
for _p in (_LIB, _TESTS):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from vramdkit import request, sim_s, wait_for  # noqa: E402
from vramdkit.harness import Harness  # noqa: E402
from chaos.chaos import own_fds, quiet  # noqa: E402  (the chaos run's descriptor count)

ALLOWED = {200, 429, 503}
REQUEST_TIMEOUT = 60.0
TENANTS = [("greedy", 40), ("t1", 15), ("t2", 15), ("t3", 15), ("t4", 15)]
MODELS = {  # name: (concurrency, run seconds simulated, queue_max, traffic weight)
    "chat": (2, 2.0, 8, 60),
    "img": (1, 1.0, 6, 40),
}
RSS_TOLERANCE = 4 * 1024 * 1024
FD_TOLERANCE = 2


def models(h):
    chat_c, chat_run, chat_q, _ = MODELS["chat"]
    img_c, img_run, img_q, _ = MODELS["img"]
    return {
        "chat": h.model("chat", ["--resident", "2GiB", "--per-request", "1GiB", "--run-time", sim_s(chat_run)],
                        "2560MiB", "1GiB", concurrency=chat_c, queue_max=chat_q),
        "img": h.model("img", ["--resident", "1GiB", "--per-request", "6GiB", "--run-time", sim_s(img_run)],
                       "1536MiB", "6GiB", concurrency=img_c, queue_max=img_q),
    }


def latency_bound(timescale):
    """The most an admitted request may take: a full queue and the slots ahead of it, then
    its own run; x4 for a loaded shared machine, + 1 s."""
    worst = 0.0
    for conc, run, qmax, _ in MODELS.values():
        worst = max(worst, (qmax / conc + 2) * run * timescale)
    return worst * 4 + 1.0


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def asan(pid):
    """Whether the process runs with AddressSanitizer (its runtime mapped)."""
    with open(f"/proc/{pid}/maps") as f:
        return any("libasan" in line for line in f)


def quantiles(values):
    if not values:
        return {}
    v = sorted(values)

    def q(p):
        return round(v[min(len(v) - 1, int(p * len(v)))], 4)
    return {"n": len(v), "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "max": round(v[-1], 4)}


class Soak:
    def __init__(self, vd, seed):
        self.vd = vd
        self.port = vd.port
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.answers = Counter()     # (model, status or "cut")
        self.codes = Counter()       # error codes of 429/503
        self.admitted = []           # (t_send, latency) of 200s
        self.bad = []
        self.lag = 0.0               # the most a send started after its planned time
        self.samples = []            # (t, rss, fds)

    def one(self, model, tenant, planned):
        t0 = time.monotonic()
        with self.lock:
            self.lag = max(self.lag, t0 - planned)
        r = request(self.port, "POST", f"/{model}/generate", {"prompt": "soak"},
                    {"X-Client": tenant}, timeout=REQUEST_TIMEOUT)
        with self.lock:
            if r.status is None or not r.complete:
                self.answers[(model, "cut")] += 1
                self.bad.append(f"{model}: connection cut or timed out: {r!r}")
                return
            self.answers[(model, r.status)] += 1
            if r.status == 200:
                self.admitted.append((t0, r.elapsed))
            elif r.status in (429, 503):
                self.codes[f"{r.status} {r.error_code()}"] += 1
            if r.status not in ALLOWED:
                self.bad.append(f"{model}: status {r.status} not 2xx/429/503: {r!r}")

    def pick(self, rng):
        model = rng.choices(list(MODELS), [m[3] for m in MODELS.values()])[0]
        tenant = rng.choices([t for t, _ in TENANTS], [w for _, w in TENANTS])[0]
        return model, tenant

    def calibrate(self, seconds):
        """Closed loop, every slot and queue full: 200s per second = the capacity."""
        stop = time.monotonic() + seconds
        done = Counter()
        lock = threading.Lock()

        def loop(model, i):
            while time.monotonic() < stop:
                r = request(self.port, "POST", f"/{model}/generate", {"prompt": "calibrate"},
                            {"X-Client": f"cal-{model}-{i}"}, timeout=REQUEST_TIMEOUT)
                if r.status == 200:
                    with lock:
                        done[model] += 1
        threads = [threading.Thread(target=loop, args=(m, i), daemon=True)
                   for m, (conc, _, qmax, _) in MODELS.items() for i in range(conc + 2)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(REQUEST_TIMEOUT + seconds)
        elapsed = time.monotonic() - t0
        return {m: done[m] / elapsed for m in MODELS}, elapsed

    def sampler(self, stop):
        pid = self.vd.proc.pid
        while not stop.wait(1.0):
            try:
                self.samples.append((time.monotonic(), rss_bytes(pid), len(os.listdir(f"/proc/{pid}/fd"))))
            except OSError:
                return

    def drive(self, rate, seconds, threads):
        """Open loop: request i is sent at t0 + i / rate, whatever came back before."""
        rng = random.Random(self.rng.random())
        pool = ThreadPoolExecutor(max_workers=threads)
        stop = threading.Event()
        sampler = threading.Thread(target=self.sampler, args=(stop,), daemon=True)
        sampler.start()
        t0 = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            planned = t0 + i / rate
            delay = planned - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            model, tenant = self.pick(rng)
            pool.submit(self.one, model, tenant, planned)
        pool.shutdown(wait=True)
        stop.set()
        sampler.join(5)
        return n, time.monotonic() - t0


def thirds_p99(admitted, t0, t1):
    span = (t1 - t0) / 3
    first = [lat for t, lat in admitted if t < t0 + span]
    last = [lat for t, lat in admitted if t >= t1 - span]
    return quantiles(first).get("p99"), quantiles(last).get("p99")


def rss_windows(samples):
    """Medians of the second and the last fifth of the RSS samples (the first is warm-up)."""
    rss = [s[1] for s in samples]
    k = max(1, len(rss) // 5)
    return statistics.median(rss[k:2 * k]), statistics.median(rss[-k:])


def run(h, seconds, seed=1, calibrate_s=5.0, out=print):
    """The whole soak on Harness h; returns a summary dict. Fails (AssertionError) on any
    broken promise."""
    from vramdkit.sim import TIMESCALE
    gpu = h.gpu_set("24GiB")
    vd = h.start_vramd(gpu, models(h), limits={
        "header_timeout": "10s", "queue_max": 1000, "drain_timeout": "20s",
        "per_client": {"key": "header:X-Client", "max_queued": 4, "max_in_flight": 2}})
    for m in MODELS:
        r = vd.generate(m, {"prompt": "warm"}, timeout=REQUEST_TIMEOUT)
        assert r.status == 200, r
    s = Soak(vd, seed)
    cap, cal_s = s.calibrate(calibrate_s)
    wait_for(lambda: quiet(vd), timeout=60, what="quiet after the calibration")
    capacity = sum(cap.values())
    assert capacity > 0, cap
    base_fds = own_fds(vd)
    rss_start = rss_bytes(vd.proc.pid)
    rate = 2 * capacity
    n, elapsed = s.drive(rate, seconds, threads=max(64, int(rate)))
    t_end = time.monotonic()
    wait_for(lambda: quiet(vd), timeout=60, what="nothing queued or in flight after the traffic")
    vd.assert_ledger_clean(timeout=30)
    fds = {}

    def fds_back():
        fds["own"] = own_fds(vd)
        return fds["own"] <= base_fds + FD_TOLERANCE
    fds_ok = True
    try:
        wait_for(fds_back, timeout=30, what="descriptors back")
    except BaseException:
        fds_ok = False
    st = vd.status()
    budget_used = st["memory_budget"]["used"]
    rss_end = rss_bytes(vd.proc.pid)
    lat = [x[1] for x in s.admitted]
    p99_first, p99_last = thirds_p99(s.admitted, t_end - elapsed, t_end)
    rss_mid, rss_last = rss_windows(s.samples) if len(s.samples) >= 5 else (rss_start, rss_end)
    bound = latency_bound(TIMESCALE)
    summary = {
        "seconds": round(elapsed, 1), "requests": n, "calibration_s": round(cal_s, 1),
        "capacity_per_s": {m: round(c, 1) for m, c in cap.items()},
        "offered_per_s": round(rate, 1), "achieved_send_rate": round(n / elapsed, 1),
        "max_send_lag_s": round(s.lag, 3),
        "answers": {f"{m}:{st_}": c for (m, st_), c in sorted(s.answers.items(), key=str)},
        "refusals": dict(s.codes),
        "admitted_per_s": round(len(lat) / elapsed, 1),
        "admitted_latency_s": quantiles(lat),
        "admitted_p99_first_third_s": p99_first, "admitted_p99_last_third_s": p99_last,
        "latency_bound_s": round(bound, 2),
        "rss_mib": {"start": round(rss_start / 2**20, 1), "second_fifth_median": round(rss_mid / 2**20, 1),
                    "last_fifth_median": round(rss_last / 2**20, 1), "end": round(rss_end / 2**20, 1),
                    "max": round(max([x[1] for x in s.samples] or [0]) / 2**20, 1)},
        "fds": {"own_before": base_fds, "own_after": fds.get("own"),
                "sampled_min": min([x[2] for x in s.samples] or [0]),
                "sampled_max": max([x[2] for x in s.samples] or [0])},
        "memory_budget_used_after": budget_used,
        "restarts": {m["name"]: m["restarts_total"] for m in st["models"]},
        "problems": s.bad[:10], "n_problems": len(s.bad),
        "asan": asan(vd.proc.pid),
    }
    out(json.dumps(summary, indent=1))
    assert not s.bad, f"{len(s.bad)} answers outside 2xx/429/503, first: {s.bad[:5]}"
    assert lat, "no request was admitted"
    assert max(lat) <= bound, f"admitted latency {max(lat):.2f} s over the bound {bound:.2f} s"
    assert p99_last <= 1.5 * p99_first + 0.25, f"admitted p99 grew: {p99_first} -> {p99_last}"
    if summary["asan"]:
        # ASan's quarantine keeps freed memory until it holds 256 MiB: RSS grows by design
        # there; LeakSanitizer at exit (Harness.finish) checks that build instead
        out("RSS check skipped: AddressSanitizer build")
    else:
        assert rss_last <= rss_mid + max(RSS_TOLERANCE, rss_mid * 0.05), \
            f"RSS grew: {rss_mid / 2**20:.1f} -> {rss_last / 2**20:.1f} MiB"
    assert fds_ok, f"vramd's own descriptors {fds.get('own')} not back to {base_fds} (+{FD_TOLERANCE})"
    assert budget_used == 0, f"memory budget still holds {budget_used} bytes"
    refused = sum(c for (m, st_), c in s.answers.items() if st_ in (429, 503))
    assert refused > 0, "nothing was refused: the load was not over capacity"
    h.finish()  # ledger, clean SIGTERM exit 0, no sanitizer report, no worker left
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calibrate", type=float, default=10.0, help="seconds of capacity measurement")
    ap.add_argument("--out", default=None, help="the JSON result (default bench/results/soak-<minutes>m-<time>.json)")
    args = ap.parse_args()
    import tempfile
    out = args.out or str(Path(__file__).resolve().parents[2] / "bench" / "results" /
                          f"soak-{args.minutes:g}m-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with tempfile.TemporaryDirectory(prefix="vramd-soak-") as tmp:
        h = Harness(Path(tmp))
        try:
            summary = run(h, args.minutes * 60, args.seed, args.calibrate)
        finally:
            h.close()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"soak: pass -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
