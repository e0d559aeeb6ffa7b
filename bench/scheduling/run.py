"""scheduling: does vramd use a shared GPU better than the field's hand-written fixes?
(issue 4). The same seeded traffic of three field scenarios, replayed through three setups,
against the lower bound on makespan computed from the traffic; plus the cost of one
scheduling decision (bench/scheduling/decision_cost.c).

Setups (bench/player/scenario_run.py runs one scenario under one of them):
  direct       the scenario's workers without vramd, each simworker with --lock (each server
               serialises its own requests: the field notes' fix); scenario_run's "lock"
  global-lock  the same workers, all sharing one --global-lock (one request on the GPU at a time)
  vramd        the scenario's vramd.yaml (time-scaled) in front of the same workers
Scenarios: examples/seed000-miner-4090, examples/seed004-vlm-6gb, examples/mixed-80gb, each in
two variants:
  open   the scenario's own open-loop traffic, --duration D (default 10m simulated), its seed
  burst  a closed workload: the first N arrivals of that same plan (same order, same mix,
         pipelines included) all sent at t=0, with a 1 h client deadline and timeout, so that
         every setup has to do all of the work and makespan/throughput measure the scheduling
         (N per scenario: BURST_N below, kept under vramd's queue_max)
What the runner changes in a scenario, for every setup alike (a copy under a temp dir; the
examples are not touched): models the traffic never reaches are dropped from vramd.yaml
(direct.py would start them, and seed000's unused sd35-fast holds 9.3 GiB that makes every
TRELLIS request OOM there), and OpenAI requests routed by the body's "model" (POST
/v1/chat/completions) get their model's route prefix (/llm/v1/...), because direct.py's router
only knows prefixes. Warm start (default; --cold turns it off): before the traffic starts,
every used model is loaded (vramd: POST /v1/models/NAME/load, answered once loaded; direct
setups: each worker's /health through the router answers 200), so no setup pays load time
inside the measurement, as the lower bound assumes.
Each repetition runs the three setups one after the other with the same seed, in an order that
is reversed every other repetition; medians over repetitions are reported, ratios
(vramd / global-lock throughput) are taken within a repetition, then the median.
Per run: successes / requests, OOMs seen by the client (HTTP 5xx or {"success": false} with
"out of memory") and OOM lines in the workers' and vramd's logs, throughput (successes per
simulated minute of the player's wall time), p50/p99 latency of successes, deadline hit rate
(open variant; the burst's 1 h deadline makes it meaningless; for pipelines,
the pipeline's own rate too), GPU memory peak (simgpu, polled
every 100 ms real), makespan (first arrival to last answer, simulated s), work completed (the
nominal run time of the successful requests over that of all requests), and the share of a
core other processes of this shared machine used meanwhile.
Lower bound: bench/scheduling/lower_bound.py (formula and what it ignores: its docstring and
bench/scheduling/README.md).

Invariants: every process of a run is started and stopped by scenario_run.run (also on an
error, and on SIGTERM, which unwinds like Ctrl-C); the scenario copies and the binary snapshot
are removed at the end; everything listens on 127.0.0.1 only; a run that cannot be set up
stops the benchmark (BenchError, exit 1) rather than leaving a made-up row.

Usage: run.sh [--quick] [--reps R] [--scenarios a,b] [--variants open,burst] [--timescale X]
              [--burst-timescale X] [--duration 10m] [--cold] [--no-decision-cost]
Prints a table; writes bench/results/scheduling-<stamp>.json (-latest.json) and a Markdown
table bench/results/scheduling-latest.md (--quick: scheduling-quick-*). Raises (exit 1) when a run cannot be set up; a run's
failed requests are results, not errors.
"""

import argparse
import copy
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "player"))
import benchlib as bl  # noqa: E402
import scenario_run  # noqa: E402
import lower_bound as lb  # noqa: E402

REPO = bl.REPO
SCENARIOS = ["seed000-miner-4090", "seed004-vlm-6gb", "mixed-80gb"]
SETUPS = [("direct", "lock"), ("global-lock", "global-lock"), ("vramd", "vramd")]  # (shown, scenario_run's)
# vramd with parking (issue 13): the same vramd.yaml with `checkpoint: true` in `defaults:` (every
# model may be parked by the CUDA driver's checkpoint, simulated by libcuda-sim.so) and a
# host-memory budget; chosen with --setups (not run by default).
PARK_SETUP = ("vramd-park", "vramd")
# vramd with the CUDA shim's park tier (issue 25) in front of the checkpoint: the vramd-park copy
# with `cuda_shim: auto` and `shim_park: true` in `defaults:` too (pinned copies at the link's
# rate, the driver's checkpoint at the rates measured on an H100); chosen with --setups.
SHIM_SETUP = ("vramd-shim", "vramd")
# the same allocation path without the shim's tier (`cuda_shim: auto`, checkpoint only): what
# vramd-shim gains or loses by its park tier alone, apart from the shim's grants.
SHIM_CKPT_SETUP = ("vramd-shim-ckpt", "vramd")
PARK_HOST_MEMORY = "{ budget: 20GiB, reserve: 2GiB }"
CLEAR_CACHE_HOOK = "clear_cache: { method: POST, path: /clear_cache/ }"
ADD_CLEAR_CACHE = []  # --clear-cache: [True] adds CLEAR_CACHE_HOOK to `defaults:` in every setup's copy
WEIGHTS = {}  # --weights: template -> weight in every stream of traffic.json that names it
# Burst size per scenario: arrivals (a pipeline counts once), below each model's queue_max.
BURST_N = {"seed000-miner-4090": 12, "seed004-vlm-6gb": 30, "mixed-80gb": 80}
BURST_DEADLINE = "1h"  # client deadline and timeout of the burst (simulated): ends a stuck run
WARM_TIMEOUT_S = 120.0
GiB = float(1 << 30)


# ---- the scenario copies --------------------------------------------------------------

def drop_models(yaml_text, keep):
    """vramd.yaml text without the blocks of models not in `keep` (textual: comments and
    layout of what stays survive). A model block is a 2-space-indented `name:` line under
    the top-level `models:` and every line after it indented deeper (or blank)."""
    out, in_models, dropping = [], False, False
    for line in yaml_text.splitlines(True):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if stripped and indent == 0 and not stripped.startswith("#"):
            in_models = stripped.startswith("models:")
            dropping = False
        elif in_models and stripped and indent == 2 and not stripped.startswith("#"):
            name = stripped.split(":", 1)[0].strip().strip("'\"")
            dropping = name not in keep
        if not dropping:
            out.append(line)
    return "".join(out)


def route_body_model_requests(traffic, scn):
    """OpenAI requests routed by the body's "model" get their model's route prefix."""
    for name, doc in traffic["requests"].items():
        tpl = scn.traffic.templates[name]
        routed = any(m.route and tpl.path.startswith(m.route if m.route.startswith("/") else "/" + m.route)
                     for m in scn.models.values())
        if routed:
            continue
        m = scn.model_for(tpl)
        doc["path"] = m.route.rstrip("/") + tpl.path
    return traffic


def burst_traffic(open_traffic, scn, seed, duration_s, n):
    """The first n arrivals of the open plan, all at t=0 (1 ms apart, to keep their order),
    with a long deadline and timeout."""
    plan = scn.traffic.schedule(seed, duration_s, None)[:n]
    t = copy.deepcopy(open_traffic)
    t["name"] = open_traffic["name"] + "-burst"
    t["description"] = "closed burst: the first %d arrivals of %s (seed %d) at once" % (len(plan), open_traffic["name"], seed)
    t["timeout"] = BURST_DEADLINE
    for doc in t["requests"].values():
        doc.pop("timeout", None)
        if "deadline" in doc:
            doc["deadline"] = BURST_DEADLINE
    t["streams"] = [{"arrivals": "once", "size": 1, "start": round(i * 0.001, 3), "requests": {name: 1}}
                    for i, (_, name) in enumerate(plan)]
    return t


def park_copy(copy_dir, shim=False, shim_park=True):
    """The copy of copy_dir run by the vramd-park setup: same traffic, workers and GPU, the
    vramd.yaml with `checkpoint: true` in `defaults:` and a `host_memory` budget (shim: and
    `cuda_shim: auto`, `shim_park: true`, for vramd-shim). Same folder name (scenario_run
    names its workdirs after it), under a sibling `-park` (`-shim`) folder."""
    name = os.path.basename(copy_dir.rstrip("/"))
    suffix = ("-shim" if shim_park else "-shimckpt") if shim else "-park"
    dst = os.path.join(os.path.dirname(copy_dir.rstrip("/")) + suffix, name)
    shutil.copytree(copy_dir, dst)
    with open(os.path.join(dst, "vramd.yaml")) as f:
        text = f.read()
    if not re.search(r"(?m)^defaults:\s*$", text):
        raise bl.BenchError("%s: vramd.yaml has no block `defaults:` to add `checkpoint: true` to" % name)
    text = re.sub(r"(?m)^defaults:\s*$", "defaults:\n  checkpoint: true" +
                  ("\n  cuda_shim: auto" if shim else "") + ("\n  shim_park: true" if shim and shim_park else ""),
                  text, count=1)
    text = re.sub(r"(?m)^models:\s*$", "host_memory: %s\nmodels:" % PARK_HOST_MEMORY, text, count=1)
    with open(os.path.join(dst, "vramd.yaml"), "w") as f:
        f.write(text)
    return dst


def make_copy(src, dst_root, variant, seed, duration_s):
    """A runnable copy of scenario src for a variant; returns its directory. The directory is
    named like the scenario, so scenario_run's workdirs read /tmp/scn-<scenario>-<setup>-*."""
    name = os.path.basename(src.rstrip("/"))
    dst = os.path.join(dst_root, variant, name)
    os.makedirs(dst)
    for f in os.listdir(src):
        if f == "gpu.txt" or f.endswith(".sh"):
            shutil.copy2(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(src, "traffic.json")) as f:
        traffic = json.load(f)
    named = set()
    for stream in traffic.get("streams", []):
        for tpl in stream.get("requests", {}):
            if tpl in WEIGHTS:
                stream["requests"][tpl] = WEIGHTS[tpl]
                named.add(tpl)
    if set(WEIGHTS) - named:
        raise bl.BenchError("%s: --weights names templates no stream uses: %s" % (name, sorted(set(WEIGHTS) - named)))
    shutil.copy2(os.path.join(src, "vramd.yaml"), os.path.join(dst, "vramd.yaml"))
    with open(os.path.join(dst, "traffic.json"), "w") as f:
        json.dump(traffic, f)
    scn = lb.Scenario(dst)
    traffic = route_body_model_requests(traffic, scn)
    with open(os.path.join(dst, "traffic.json"), "w") as f:
        json.dump(traffic, f, indent=1)
    scn = lb.Scenario(dst)
    if variant == "burst":
        traffic = burst_traffic(traffic, scn, seed, duration_s, BURST_N.get(name, 50))
        with open(os.path.join(dst, "traffic.json"), "w") as f:
            json.dump(traffic, f, indent=1)
        scn = lb.Scenario(dst)
    used = scn.used_models()
    with open(os.path.join(src, "vramd.yaml")) as f:
        text = drop_models(f.read(), used)
    if ADD_CLEAR_CACHE:
        if not re.search(r"(?m)^defaults:\s*$", text):
            raise bl.BenchError("%s: vramd.yaml has no block `defaults:` for --clear-cache" % name)
        text = re.sub(r"(?m)^defaults:\s*$", "defaults:\n  " + CLEAR_CACHE_HOOK, text, count=1)
    with open(os.path.join(dst, "vramd.yaml"), "w") as f:
        f.write(text)
    scn = lb.Scenario(dst)
    if set(scn.models) != used:
        raise bl.BenchError("%s: could not reduce vramd.yaml to the used models %s (got %s)"
                            % (name, sorted(used), sorted(scn.models)))
    return dst


# ---- warm start -------------------------------------------------------------------------

def _post(port, path, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=b"", headers={"Content-Length": "0"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class WarmStart:
    """While active, scenario_run's readiness wait also loads every model: for vramd (its
    /healthz wait) POST /v1/models/NAME/load for each, in parallel, each answered once the
    model is loaded; for the direct setups (the router's /__none__ wait) poll each model's
    health path through the router until all answer 200. Bounded by WARM_TIMEOUT_S; raises
    BenchError when a model does not come up. `seconds` keeps how long it took (real)."""

    def __init__(self, scn):
        self.scn = scn
        self.seconds = None

    def __enter__(self):
        self.orig = scenario_run.wait_http
        scenario_run.wait_http = self.wait
        return self

    def __exit__(self, *exc):
        scenario_run.wait_http = self.orig

    def wait(self, url, timeout):
        base, _, path = url.partition("//")[2].partition("/")
        port = int(base.rsplit(":", 1)[1])
        t0 = time.monotonic()
        if path == "healthz":
            if not self.orig(url, timeout):
                return False
            self.load_vramd(port)
        elif path == "__none__":
            self.poll_direct(port)
        else:
            return self.orig(url, timeout)
        self.seconds = time.monotonic() - t0
        return True

    def load_vramd(self, port):
        errors = []

        def one(name):
            try:
                status, body = _post(port, "/v1/models/%s/load" % name, WARM_TIMEOUT_S)
                if status != 200:
                    errors.append("%s: %d %s" % (name, status, body[:200]))
            except OSError as e:
                errors.append("%s: %s" % (name, e))

        threads = [threading.Thread(target=one, args=(n,)) for n in sorted(self.scn.models)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WARM_TIMEOUT_S + 5)
        if errors:
            raise bl.BenchError("vramd warm-up failed: " + "; ".join(errors))

    def poll_direct(self, port):
        pending = {}
        for name, m in self.scn.models.items():
            health = ((self.scn.cfg["models"][name] or {}).get("health") or
                      (self.scn.cfg.get("defaults") or {}).get("health") or {}).get("path", "/health")
            pending[name] = m.route.rstrip("/") + health
        deadline = time.monotonic() + WARM_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for name, path in list(pending.items()):
                try:
                    status, _ = bl.http_get(port, path, timeout=2.0)
                    if status == 200:
                        del pending[name]
                except OSError:
                    pass
            if pending:
                time.sleep(0.05)
        if pending:
            raise bl.BenchError("direct warm-up: %s not healthy after %.0fs" % (sorted(pending), WARM_TIMEOUT_S))


# ---- one run -----------------------------------------------------------------------------

def vramd_events(workdir, n_models):
    """What vramd did with the models during a run, from its log (its own lines, not its
    workers'): evictions, worker starts beyond the first load of each model (reloads and
    restarts), recycles, clear_cache calls. None when there is no vramd log."""
    path = os.path.join(workdir or "", "vramd.log")
    if not workdir or not os.path.exists(path):
        return None
    counts = {"evictions": 0, "worker_starts": 0, "recycles": 0, "clear_cache": 0, "parks": 0, "restores": 0,
              "park_refused": 0}
    with open(path, errors="replace") as f:
        for line in f:
            if "worker_output" in line:
                continue
            if " eviction " in line:
                counts["evictions"] += 1
            elif " worker_started " in line:
                counts["worker_starts"] += 1
            elif " worker_recycle " in line:
                counts["recycles"] += 1
            elif " clear_cache " in line:
                counts["clear_cache"] += 1
            elif " parked " in line:
                counts["parks"] += 1
            elif " resumed " in line:
                counts["restores"] += 1
            elif " park_refused " in line:
                counts["park_refused"] += 1
    counts["reloads"] = max(0, counts["worker_starts"] - n_models)
    return counts


def metrics(result, scn, jobs, bound):
    """The figures of one run, from the player's result."""
    s = result["summary"]
    recs = [r for r in result["requests"] if r.get("code") != "client_overload"]
    firsts = [r["scheduled_s"] for r in recs if not r.get("step")]
    ends = [r["sent_s"] + r["latency_s"] for r in recs if "sent_s" in r]
    makespan = (max(ends) - min(firsts)) if ends and firsts else None
    nominal = lb.offered_work(scn, scn.traffic.templates)
    offered = sum(j["time"] for j in jobs)
    done = sum(nominal[r["template"]] for r in recs if r.get("ok"))
    gpu = (result.get("gpu") or {}).get("gpus") or []
    peak = max((g["peak_used"] for g in gpu), default=None)
    total = sum(g["total"] or 0 for g in gpu) if gpu else None
    pipes = result.get("pipelines")
    m = {
        "requests": s["requests"],
        "succeeded": s["succeeded"],
        "oom_seen": s["oom"],
        "oom_logged": result.get("worker_ooms_logged"),
        "error_codes": s["error_codes"],
        "statuses": s["statuses"],
        "throughput_per_min": s["throughput_per_min"],
        "p50_s": s["latency_s"]["p50"],
        "p99_s": s["latency_s"]["p99"],
        "deadline_hit_rate": s["deadline_hit_rate"],
        "gpu_peak_gib": round(peak / GiB, 3) if peak is not None else None,
        "gpu_peak_fraction": round(peak / total, 4) if peak is not None and total else None,
        "gpu_poll_samples": (result.get("gpu") or {}).get("samples"),
        "makespan_s": round(makespan, 3) if makespan is not None else None,
        "work_done_s": round(done, 3),
        "work_offered_s": round(offered, 3),
        "work_done_fraction": round(done / offered, 4) if offered else None,
        "makespan_over_bound": round(makespan / bound["bound_s"], 4) if makespan and bound else None,
        "player_wall_s": s["wall_s"],
        "workdir": result.get("workdir"),
        "by_template": {n: {"requests": t["requests"], "succeeded": t["succeeded"], "oom": t["oom"],
                            "error_codes": t["error_codes"], "deadline_hit_rate": t["deadline_hit_rate"]}
                        for n, t in result["by_template"].items()},
        "vramd_events": vramd_events(result.get("workdir"), len(scn.models)),
    }
    if makespan:
        m["throughput_per_min_makespan"] = round(s["succeeded"] / makespan * 60.0, 4)
    if pipes:
        m["pipelines"] = {"requests": pipes["requests"], "succeeded": pipes["succeeded"],
                          "deadline_hit_rate": pipes["deadline_hit_rate"],
                          "p50_s": pipes["latency_s"]["p50"], "p99_s": pipes["latency_s"]["p99"]}
    return m


def run_one(copy_dir, scn, jobs, bound, setup, build, timescale, duration, seed, cold):
    t0 = time.monotonic()
    warm = WarmStart(scn)
    with bl.ForeignLoad([]) as foreign:
        if cold:
            result = scenario_run.run(copy_dir, setup, build, timescale, duration, None, seed)
        else:
            with warm:
                result = scenario_run.run(copy_dir, setup, build, timescale, duration, None, seed)
    m = metrics(result, scn, jobs, bound)
    m["warmup_real_s"] = round(warm.seconds, 3) if warm.seconds is not None else None
    m["run_real_s"] = round(time.monotonic() - t0, 2)
    m["foreign_core_frac"] = round(foreign.foreign_core_frac, 3)
    return m


# ---- medians and the report ---------------------------------------------------------------

def med(runs, key, sub=None):
    vals = []
    for r in runs:
        v = r.get(key)
        if sub is not None:
            v = (v or {}).get(sub)
        if v is not None:
            vals.append(v)
    return bl.median(vals)


def summarize(runs):
    keys = ["requests", "succeeded", "oom_seen", "oom_logged", "throughput_per_min", "p50_s", "p99_s",
            "deadline_hit_rate", "gpu_peak_gib", "gpu_peak_fraction", "makespan_s", "work_done_fraction",
            "makespan_over_bound", "throughput_per_min_makespan", "foreign_core_frac", "run_real_s"]
    out = {k: med(runs, k) for k in keys}
    out["oom_seen_max"] = max((r["oom_seen"] for r in runs), default=None)
    out["oom_logged_max"] = max((r["oom_logged"] or 0 for r in runs), default=None)
    if any("pipelines" in r for r in runs):
        out["pipelines_succeeded"] = med(runs, "pipelines", "succeeded")
        out["pipelines_requests"] = med(runs, "pipelines", "requests")
        out["pipelines_deadline_hit_rate"] = med(runs, "pipelines", "deadline_hit_rate")
    codes = {}
    for r in runs:
        for c, n in (r.get("error_codes") or {}).items():
            codes[c] = codes.get(c, 0) + n
    out["error_codes_total"] = codes
    evs = [r["vramd_events"] for r in runs if r.get("vramd_events")]
    if evs:
        out["vramd_events_median"] = {k: bl.median([e[k] for e in evs]) for k in evs[0]}
    return out


def ratios(reps):
    """Within each repetition: vramd / global-lock throughput, vramd / direct throughput;
    median over repetitions."""
    def ratio(rep, a, b, key):
        x, y = rep.get(a, {}).get(key), rep.get(b, {}).get(key)
        return x / y if x is not None and y else None
    out = {}
    for name, a, b, key in (("thr_vramd_over_global_lock", "vramd", "global-lock", "throughput_per_min"),
                            ("thr_vramd_over_direct", "vramd", "direct", "throughput_per_min"),
                            ("makespan_global_lock_over_vramd", "global-lock", "vramd", "makespan_s"),
                            ("makespan_vramd_over_park", "vramd", "vramd-park", "makespan_s"),
                            ("makespan_park_over_shim", "vramd-park", "vramd-shim", "makespan_s"),
                            ("makespan_shimckpt_over_shim", "vramd-shim-ckpt", "vramd-shim", "makespan_s"),
                            ("hit_rate_shim_over_park", "vramd-shim", "vramd-park", "deadline_hit_rate"),
                            ("hit_rate_park_over_vramd", "vramd-park", "vramd", "deadline_hit_rate")):
        vals = [v for v in (ratio(rep, a, b, key) for rep in reps) if v is not None]
        out[name] = round(bl.median(vals), 4) if vals else None
        out[name + "_per_rep"] = [round(v, 4) for v in vals]
    return out


def pct(v):
    return "-" if v is None else "%.0f%%" % (100 * v)


def num(v, spec="%.1f"):
    return "-" if v is None else spec % v


def deadline_cell(s):
    cell = pct(s["deadline_hit_rate"])
    if s.get("pipelines_deadline_hit_rate") is not None:
        cell += " (pipe %s)" % pct(s["pipelines_deadline_hit_rate"])
    return cell


def table_rows(results):
    rows = []
    for key, sc in results["scenarios"].items():
        bound = sc["bound"]
        for setup, _ in SETUPS:
            s = sc["setups"].get(setup)
            if not s:
                continue
            ok = "%s/%s" % (num(s["succeeded"], "%g"), num(s["requests"], "%g"))
            if "pipelines_succeeded" in s:
                ok += " (%s/%s pipe)" % (num(s["pipelines_succeeded"], "%g"), num(s["pipelines_requests"], "%g"))
            rows.append([key, setup, ok, "%s / %s" % (num(s["oom_seen"], "%g"), num(s["oom_logged"], "%g")),
                         num(s["throughput_per_min"], "%.2f"), num(s["p50_s"]), num(s["p99_s"]),
                         deadline_cell(s) if sc["variant"] == "open" else "n/a",
                         "%s (%s)" % (num(s["gpu_peak_gib"]), pct(s["gpu_peak_fraction"])),
                         num(s["makespan_s"], "%.0f"), pct(s["work_done_fraction"]),
                         num(bound["bound_s"], "%.0f"), num(s["makespan_over_bound"], "%.2f")])
    return rows


HEADER = ["scenario/variant", "setup", "ok/requests", "OOM seen/logged", "thr/min", "p50 s", "p99 s",
          "deadline", "GPU peak GiB", "makespan s", "work done", "bound s", "makespan/bound"]


def markdown(results):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in table_rows(results):
        lines.append("| " + " | ".join(str(x) for x in r) + " |")
    lines.append("")
    lines.append("| scenario/variant | vramd/global-lock throughput | vramd/direct throughput | "
                 "global-lock/vramd makespan | memory allows at once (requests; distinct models) | "
                 "bound s (config-capped) | binding term | vramd evictions / reloads / recycles |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for key, sc in results["scenarios"].items():
        r, b = sc["ratios"], sc["bound"]
        ev = sc["setups"].get("vramd", {}).get("vramd_events_median")
        evp = sc["setups"].get("vramd-park", {}).get("vramd_events_median")
        evs = sc["setups"].get("vramd-shim", {}).get("vramd_events_median")
        lines.append("| %s | %s | %s | %s | %d; %d | %s (%s) | %s | %s |" % (
            key, num(r["thr_vramd_over_global_lock"], "%.2f"), num(r["thr_vramd_over_direct"], "%.2f"),
            num(r["makespan_global_lock_over_vramd"], "%.2f"), b["max_concurrency_memory"],
            b["max_concurrency_memory_distinct_models"], num(b["bound_s"], "%.0f"), num(b["bound_config_s"], "%.0f"),
            b["binding_term"],
            ("-" if not ev else "%g / %g / %g" % (ev["evictions"], ev["reloads"], ev["recycles"]))
            + ("" if not evp else "; vramd-park: %g / %g / %g, %g parks, %g restores, makespan vramd/park %s" % (
                evp["evictions"], evp["reloads"], evp["recycles"], evp["parks"], evp["restores"],
                num(r.get("makespan_vramd_over_park"), "%.2f")))
            + ("" if not evs else "; vramd-shim: %g / %g / %g, %g parks, %g restores, makespan park/shim %s" % (
                evs["evictions"], evs["reloads"], evs["recycles"], evs["parks"], evs["restores"],
                num(r.get("makespan_park_over_shim"), "%.2f")))))
    return "\n".join(lines) + "\n"


# ---- decision cost --------------------------------------------------------------------------

def decision_cost(runs):
    binary = os.path.join(REPO, "build", "bench", "decision_cost")
    if not os.access(binary, os.X_OK):
        raise bl.BenchError("no %s (build it: make build/bench/decision_cost)" % binary)
    out = []
    for _ in range(runs):
        p = subprocess.run([binary], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise bl.BenchError("decision_cost exited %d: %s" % (p.returncode, p.stderr))
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {"runs": out,
            "admission_ns_median": bl.median([r["admission_ns_median"] for r in out]),
            "placement_ns_median": bl.median([r["placement_ns_median"] for r in out]),
            "target_ns": 20000}


# ---- binaries ---------------------------------------------------------------------------------

def snapshot_build():
    """Copies vramd, simworker, simgpu, the simulated NVML and CUDA, and the CUDA shim into a private build dir, so a
    rebuild by someone else during the benchmark cannot change them between runs."""
    src = os.path.join(REPO, "build")
    dst = tempfile.mkdtemp(prefix="vramd-sched-build-")
    info = {}
    for rel in ("bin/vramd", "bin/simworker", "bin/simgpu", "lib/libnvidia-ml-sim.so", "lib/libcuda-sim.so",
                "lib/libvramd-cuda.so"):
        s = os.path.join(src, rel)
        if not os.path.exists(s):
            raise bl.BenchError("missing %s (run make)" % s)
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(s, os.path.join(dst, rel))
        with open(s, "rb") as f:
            info[rel] = hashlib.sha256(f.read()).hexdigest()[:16]
    return dst, info


# ---- main ----------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 3m open traffic, smaller bursts")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--variants", default="open,burst")
    ap.add_argument("--weights", default="",
                    help="TEMPLATE=W,...: change traffic.json's stream weights in the copy (seed000's "
                         "generate=0,generate-fast=1: CPU offload off)")
    ap.add_argument("--clear-cache", action="store_true",
                    help="add `%s` to `defaults:` (simworker's /clear_cache/: PyTorch's empty_cache)" % CLEAR_CACHE_HOOK)
    ap.add_argument("--setups", default=",".join(s for s, _ in SETUPS),
                    help="of direct,global-lock,vramd,vramd-park,vramd-shim,vramd-shim-ckpt (default: the first three)")
    ap.add_argument("--timescale", type=float, default=0.02, help="open variant (default 0.02)")
    ap.add_argument("--burst-timescale", type=float, default=0.05, help="burst variant (default 0.05)")
    ap.add_argument("--duration", default="10m", help="open variant's traffic, simulated (default 10m)")
    ap.add_argument("--cold", action="store_true", help="no warm-up: models load inside the measurement")
    ap.add_argument("--no-decision-cost", action="store_true")
    ap.add_argument("--decision-cost-runs", type=int, default=3)
    a = ap.parse_args()
    known = dict(SETUPS + [PARK_SETUP, SHIM_SETUP, SHIM_CKPT_SETUP])
    chosen = a.setups.split(",")
    if any(s not in known for s in chosen):
        raise bl.BenchError("--setups: unknown setup in %r (known: %s)" % (a.setups, ", ".join(known)))
    SETUPS[:] = [(s, known[s]) for s in chosen]
    if a.clear_cache:
        ADD_CLEAR_CACHE.append(True)
    for item in filter(None, a.weights.split(",")):
        tpl, _, w = item.partition("=")
        try:
            WEIGHTS[tpl] = float(w)
        except ValueError:
            raise bl.BenchError("--weights: %r is not TEMPLATE=WEIGHT" % item)
    if a.quick:
        a.reps, a.duration = 1, "3m"
        for k in BURST_N:
            BURST_N[k] = max(4, BURST_N[k] // 3)
    bl.exit_cleanly_on_sigterm()
    duration_s = lb.parse_duration(a.duration, "--duration")
    env = bl.environment()
    for k in ("nginx", "haproxy", "wrk"):
        env.pop(k, None)
    build, shas = snapshot_build()
    env["binaries_sha256_16"] = shas
    results = {"benchmark": "scheduling", "environment": env, "command": " ".join(sys.argv),
               "settings": {"reps": a.reps, "timescale_open": a.timescale, "timescale_burst": a.burst_timescale,
                            "duration_open": a.duration, "burst_n": dict(BURST_N), "warm_start": not a.cold,
                            "burst_deadline": BURST_DEADLINE, "weights": dict(WEIGHTS), "clear_cache_added": bool(ADD_CLEAR_CACHE),
                            "setups": [s for s, _ in SETUPS]},
               "scenarios": {}}
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="vramd-sched-")
    try:
        if not a.no_decision_cost:
            results["decision_cost"] = decision_cost(a.decision_cost_runs)
            d = results["decision_cost"]
            print("decision cost (100 models, 8 GPUs), median of %d runs: admission %.0f ns, placement %.0f ns"
                  % (len(d["runs"]), d["admission_ns_median"], d["placement_ns_median"]), flush=True)
        for name in a.scenarios.split(","):
            src = os.path.join(REPO, "examples", name)
            orig = lb.Scenario(src)
            seed = orig.traffic.seed
            for variant in a.variants.split(","):
                copy_dir = make_copy(src, tmp, variant, seed, duration_s)
                run_dir = {"vramd-park": park_copy(copy_dir)} if "vramd-park" in chosen else {}
                if "vramd-shim" in chosen:
                    run_dir["vramd-shim"] = park_copy(copy_dir, shim=True)
                if "vramd-shim-ckpt" in chosen:
                    run_dir["vramd-shim-ckpt"] = park_copy(copy_dir, shim=True, shim_park=False)
                scn = lb.Scenario(copy_dir)
                timescale = a.timescale if variant == "open" else a.burst_timescale
                duration = a.duration if variant == "open" else None
                jobs = scn.jobs(seed, duration_s if variant == "open" else None)
                bound = lb.lower_bound(scn, jobs)
                key = "%s/%s" % (name, variant)
                print("%s: %d arrivals, %d GPU jobs, %.0f s of work; lower bound %.0f s (%s); never evicting: %.0f s"
                      % (key, bound["arrivals"], bound["jobs"], bound["total_work_s"], bound["bound_s"],
                         bound["binding_term"], bound["bound_all_resident_s"]), flush=True)
                reps = []
                for rep in range(a.reps):
                    order = SETUPS if rep % 2 == 0 else list(reversed(SETUPS))
                    runs = {}
                    for shown, setup in order:
                        m = run_one(run_dir.get(shown, copy_dir), scn, jobs, bound, setup, build, timescale, duration,
                                    seed, a.cold)
                        runs[shown] = m
                        ev = m["vramd_events"]
                        print("  rep %d %-11s ok %d/%d oom %d/%s thr %.2f/min p50 %s p99 %s makespan %s "
                              "work %s peak %s GiB%s  (%.0fs real, others %.0f%% of a core)"
                              % (rep, shown, m["succeeded"], m["requests"], m["oom_seen"], m["oom_logged"],
                                 m["throughput_per_min"] or 0, num(m["p50_s"]), num(m["p99_s"]),
                                 num(m["makespan_s"], "%.0f"), pct(m["work_done_fraction"]),
                                 num(m["gpu_peak_gib"]),
                                 "" if ev is None else "  evictions %d reloads %d recycles %d parks %d restores %d"
                                 % (ev["evictions"], ev["reloads"], ev["recycles"], ev["parks"], ev["restores"]),
                                 m["run_real_s"], 100 * m["foreign_core_frac"]),
                              flush=True)
                    reps.append(runs)
                results["scenarios"][key] = {
                    "scenario": name, "variant": variant, "timescale": timescale, "seed": seed,
                    "duration": duration, "bound": bound, "reps": reps,
                    "setups": {shown: summarize([r[shown] for r in reps]) for shown, _ in SETUPS},
                    "ratios": ratios(reps)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
    results["total_real_s"] = round(time.monotonic() - t_start, 1)
    print()
    bl.print_table(HEADER, table_rows(results))
    md = markdown(results)
    print()
    print(md)
    name = "scheduling-quick" if a.quick else "scheduling"  # a smoke run never replaces the latest results
    path = bl.write_results(name, results)
    with open(os.path.join(bl.RESULTS_DIR, "%s-latest.md" % name), "w") as f:
        f.write(md)
    print("results: %s (%.0f s)" % (path, results["total_real_s"]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bl.BenchError as e:
        print("scheduling: %s" % e, file=sys.stderr)
        sys.exit(1)
