#!/usr/bin/python3
"""swaps: models that take turns on a card (issue 35). How many loads, and how long, when
N models that each need most of a card are asked for in a random interleaving?

Scenario (simulated, time scale 0.1 by default; every figure is in simulated seconds unless
said otherwise): one 24 GiB card; N models (N = 3 and N = 6, named a, b, c...), each a
simworker of 15.5 GiB resident (15.2 GiB + the 300 MiB CUDA context) + 2 GiB per request
(released after each request), 10 s load, 1 s run, concurrency 1; two never fit together.
No park tier: no sleep/wake hooks, no checkpoint, park_keep_alive 0, keep_alive 24 h (long,
not `forever`, which would pin the model). Requests: 30 for 3 models, 60 for 6, the model of
each drawn with a seeded random.choice (the same sequence for every pattern and setup of an
N); each an OpenAI chat completion whose body's "model" names it. Arrival patterns:
  burst    all at once (sent 2 ms real apart by one thread, to keep their order)
  open     one every 3 s
  poisson  a Poisson process of the same mean rate (one per 3 s), seeded
Setups, side by side in one run:
  vramd    the build's vramd (--build) in front of the workers it starts on demand
  fifo     bench/scheduling/fifo_swapper.py: arrival order, one model on the card, consecutive
           requests of a model served together, a swap at each change of model (llama-swap)
  bound    computed, no server: one load per model and batch, all runs serialised:
           max(models x 10 s + requests x 1 s, last arrival + 1 s)
  llamacpp the real llama.cpp router (../shared/realservers/llama.cpp, or
           $VRAMD_REALSERVERS/llama.cpp) with --models-max 1 and its tiny GGUF models on the
           CPU, fed the same sequence of model names (N <= its number of GGUFs); its arrival
           unit is its own measured warm run (so "one every 3 s" is one every 3 runs). Its
           times are CPU times, in real seconds, NOT comparable: it shows behaviour (loads,
           refused or cut requests). Skipped, with the reason printed, when absent.
Per setup and pattern: loads (vramd: `worker_started` lines of its log, plus `resumed` ones
should a park tier ever be used; fifo: its swaps, the first load included; llamacpp:
"spawning server instance" lines of its log), makespan (first arrival to last answer), p50 /
p99 latency of successful requests, the longest wait (arrival to start: vramd's
X-Vramd-Queue-Ms, the swapper's X-Swapper-Queue-Ms; llamacpp: arrival to answer), failures.

The vramd config (written by vramd_config below) sets no scheduling key of its own beyond
concurrency and memory, so the per-model `max_wait` (issue 35, default auto) applies at its
default; `--max-wait DUR` (simulated) writes it into `defaults:` (a vramd older than the key
rejects the config: the run stops with its log). Beware: vramd runs in real time, so auto's
60 s floor is 60 s REAL, 600 s simulated at time scale 0.1; `--max-wait 60s` gives the bound
auto means on a real card (max(60 s, 6 x the 10 s load)).

Invariants: every process a run starts (simgpu set, vramd, the swapper and its servers, the
router) is stopped and the GPU set removed at its end, also on an error or SIGTERM; binaries
are copied to a private folder first (a rebuild of build/ meanwhile changes nothing); all
listens on 127.0.0.1; a run that cannot be set up stops the benchmark (BenchError, exit 1),
failed requests are results.

Usage: swaps.py [--quick] [--build build] [--models 3,6] [--patterns burst,open,poisson]
                [--setups vramd,fifo,bound,llamacpp] [--timescale 0.1] [--seed 35]
                [--max-wait DUR] [--json FILE] [--keep]
Prints a table; writes --json FILE, else bench/results/swaps-<stamp>.json (and
swaps-latest.json; --quick: swaps-quick-<stamp>.json).
"""
import argparse
import glob
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import benchlib as bl  # noqa: E402

REPO = bl.REPO
PY = "/usr/bin/python3"
MiB = 1 << 20
GiB = 1 << 30
GPU_MEMORY = "24GiB"
RESIDENT = int(15.5 * GiB)           # as booked; the worker takes RESIDENT - CONTEXT + its context
CONTEXT = 300 * MiB                  # simworker's --context default
PER_REQUEST = 2 * GiB
LOAD_S = 10.0
RUN_S = 1.0
OPEN_EVERY_S = 3.0
REQUESTS = {3: 30, 6: 60}
QUICK_REQUESTS = 8
NAMES = "abcdefghij"
BURST_GAP_REAL_S = 0.002
HEALTH_INTERVAL_REAL = "50ms"        # vramd's health interval and the swapper's poll, real time
REQUEST_TIMEOUT_REAL_S = 900.0
LLAMA_MAX_TOKENS = 256
PATTERNS = ("burst", "open", "poisson")
SETUPS = ("vramd", "fifo", "bound", "llamacpp")


# ---- the traffic ----------------------------------------------------------------------------

def model_sequence(n_models, n_requests, seed):
    rng = random.Random(seed)
    names = NAMES[:n_models]
    return [rng.choice(names) for _ in range(n_requests)]


def arrivals(pattern, n, seed):
    """Simulated arrival times (s) of n requests."""
    if pattern == "burst":
        return [0.0] * n
    if pattern == "open":
        return [i * OPEN_EVERY_S for i in range(n)]
    if pattern == "poisson":
        rng = random.Random(seed * 7919 + 1)
        t, out = 0.0, []
        for _ in range(n):
            out.append(round(t, 3))
            t += rng.expovariate(1.0 / OPEN_EVERY_S)
        return out
    raise bl.BenchError("unknown pattern %r" % pattern)


def changes(seq):
    """Model changes along seq, the first load on an empty card counted as one."""
    return sum(1 for i, m in enumerate(seq) if i == 0 or seq[i - 1] != m)


def bound(seq, times):
    """One load per model and batch, all runs serialised; for spread arrivals no less than the
    last arrival plus its run."""
    loads = len(set(seq))
    serial = loads * LOAD_S + len(seq) * RUN_S
    last = max(times) + RUN_S
    return {"loads": loads, "makespan_s": round(max(serial, last), 3), "serial_s": serial,
            "last_arrival_plus_run_s": round(last, 3)}


# ---- the client -----------------------------------------------------------------------------

def chat_body(model, max_tokens=8, ignore_eos=False):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def send_all(port, seq, times, unit, pattern, body_for, path="/v1/chat/completions"):
    """Sends request i (model seq[i]) at times[i] x unit real seconds after the start (burst:
    BURST_GAP_REAL_S apart), each on its own connection; returns one record per request with
    real send and answer times (s since the start), status, queue header. One thread sends
    them all, in order (so every setup receives them in the same order, also on a loaded
    machine); a thread per request reads its answer."""
    recs = [None] * len(seq)
    start = time.monotonic() + 0.2

    def read(i, conn, rec):
        try:
            r = conn.getresponse()
            body = r.read()
            rec["status"] = r.status
            q = r.getheader("X-Vramd-Queue-Ms") or r.getheader("X-Swapper-Queue-Ms")
            rec["queue_ms"] = int(q) if q is not None else None
            if r.status != 200:
                rec["error"] = body[:300].decode("utf-8", "replace")
            else:
                rec["body_ok"] = valid_completion(body)
        except (OSError, http.client.HTTPException) as e:
            rec["status"] = None
            rec["error"] = repr(e)[:300]
        finally:
            conn.close()
        rec["done"] = time.monotonic() - start
        recs[i] = rec

    readers = []
    for i in range(len(seq)):
        at = start + (i * BURST_GAP_REAL_S if pattern == "burst" else times[i] * unit)
        time.sleep(max(0.0, at - time.monotonic()))
        rec = {"i": i, "model": seq[i], "sent": time.monotonic() - start}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_REAL_S)
        try:
            conn.request("POST", path, body=body_for(seq[i]), headers={"Content-Type": "application/json"})
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            rec.update(status=None, error=repr(e)[:300], done=time.monotonic() - start)
            recs[i] = rec
            continue
        t = threading.Thread(target=read, args=(i, conn, rec), daemon=True)
        t.start()
        readers.append(t)
    for t in readers:
        t.join(REQUEST_TIMEOUT_REAL_S + 60)
    if any(r is None for r in recs):
        raise bl.BenchError("a request was not answered within %.0f s" % REQUEST_TIMEOUT_REAL_S)
    return recs


def valid_completion(body):
    try:
        doc = json.loads(body)
        return bool(doc.get("choices")) and "message" in doc["choices"][0]
    except (ValueError, AttributeError, KeyError, TypeError):
        return False


def pct(values, q):
    """Nearest-rank percentile (q in 0..100) of values; None when empty."""
    v = sorted(values)
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(-(-q * len(v) // 100)) - 1))
    return v[k]


def figures(recs, unit, wait_from):
    """Figures of one run in the unit's seconds (simulated for the sim setups)."""
    ok = [r for r in recs if r["status"] == 200 and r.get("body_ok", True)]
    lat = [(r["done"] - r["sent"]) / unit for r in ok]
    if wait_from == "start":
        waits = [(r["queue_ms"] / 1000.0) / unit for r in recs if r.get("queue_ms") is not None]
    else:
        waits = lat
    by_model = {}
    for r in recs:
        w = (r["queue_ms"] / 1000.0) / unit if wait_from == "start" and r.get("queue_ms") is not None else \
            (r["done"] - r["sent"]) / unit
        by_model[r["model"]] = max(by_model.get(r["model"], 0.0), round(w, 3))
    first = min(r["sent"] for r in recs)
    codes = {}
    for r in recs:
        if r not in ok:
            k = str(r["status"]) if r["status"] is not None else "no answer"
            codes[k] = codes.get(k, 0) + 1
    return {
        "requests": len(recs),
        "ok": len(ok),
        "failures": len(recs) - len(ok),
        "failure_codes": codes,
        "makespan_s": round((max(r["done"] for r in recs) - first) / unit, 3),
        "p50_s": round(pct(lat, 50), 3) if lat else None,
        "p99_s": round(pct(lat, 99), 3) if lat else None,
        "longest_wait_s": round(max(waits), 3) if waits else None,
        "wait_measured_to": wait_from,
        "longest_wait_by_model_s": by_model,
    }


# ---- processes ------------------------------------------------------------------------------

def snapshot_build(build):
    """bin/ and lib/ of the build copied to a private folder (the simulated libraries are
    found beside the binaries, ../lib/)."""
    src = build if os.path.isabs(build) else os.path.join(REPO, build)
    need = ["bin/vramd", "bin/simworker", "bin/simgpu", "lib/libnvidia-ml-sim.so", "lib/libcuda-sim.so"]
    missing = [p for p in need if not os.path.exists(os.path.join(src, p))]
    if missing:
        raise bl.BenchError("%s lacks %s: build first (make)" % (src, ", ".join(missing)))
    dst = tempfile.mkdtemp(prefix="swaps-bin-")
    for p in need:
        os.makedirs(os.path.join(dst, os.path.dirname(p)), exist_ok=True)
        shutil.copy2(os.path.join(src, p), os.path.join(dst, p))
    return dst


def sim_env(binroot, gpu, timescale):
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(SIMGPU=gpu, SIMGPU_TIMESCALE=str(timescale),
               VRAMD_NVML_LIBRARY=os.path.join(binroot, "lib", "libnvidia-ml-sim.so"),
               VRAMD_CUDA_LIBRARY=os.path.join(binroot, "lib", "libcuda-sim.so"),
               PATH=os.path.join(binroot, "bin") + ":" + env.get("PATH", "/usr/bin:/bin"))
    return env


class Run:
    """One setup's processes on a fresh simulated GPU: created on enter, all stopped and the
    GPU set removed on exit."""

    counter = 0

    def __init__(self, binroot, timescale, workdir):
        Run.counter += 1
        self.gpu = "swaps%d_%d" % (os.getpid(), Run.counter)
        self.env = sim_env(binroot, self.gpu, timescale)
        self.binroot = binroot
        self.workdir = workdir
        self.procs = []

    def __enter__(self):
        p = subprocess.run([os.path.join(self.binroot, "bin", "simgpu"), "create", self.gpu, "--gpus", "1",
                            "--memory", GPU_MEMORY, "--model-name", "NVIDIA GeForce RTX 4090"],
                           env=self.env, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise bl.BenchError("simgpu create: %s %s" % (p.stdout, p.stderr))
        return self

    def start(self, name, argv):
        log = open(os.path.join(self.workdir, name + ".log"), "ab")
        p = subprocess.Popen(argv, env=self.env, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            stop(p)
        subprocess.run([os.path.join(self.binroot, "bin", "simgpu"), "rm", self.gpu], env=self.env,
                       capture_output=True, timeout=30)


def stop(p, grace=30.0):
    """SIGTERM to the process (it stops what it started), SIGKILL to its group after grace."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)
    return p.returncode


def wait_http(port, path, timeout, proc=None, what="server"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise bl.BenchError("%s exited (rc %s) before answering %s" % (what, proc.returncode, path))
        try:
            status, body = bl.http_get(port, path, timeout=2.0)
            if status == 200:
                return body
            last = status
        except OSError as e:
            last = repr(e)
        time.sleep(0.05)
    raise bl.BenchError("%s: %s not 200 after %.0f s (last: %s)" % (what, path, timeout, last))


def tail(path, n=30):
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
    except OSError:
        return ""


# ---- the simulated models -------------------------------------------------------------------

def worker_argv(name):
    return ["simworker", "--port", "{port}", "--name", name, "--resident", str(RESIDENT - CONTEXT),
            "--load-time", "%gs" % LOAD_S, "--per-request", str(PER_REQUEST), "--run-time", "%gs" % RUN_S,
            "--cache", "release"]


def dur(seconds):
    """A real duration for vramd's config, in ms."""
    return "%dms" % max(1, int(round(seconds * 1000)))


def vramd_config(port, workdir, names, timescale, max_wait=None):
    """vramd.yaml for the scenario: real-time durations (simulated ones x timescale); no
    scheduling key beyond concurrency, so the daemon's defaults (max_wait: auto) apply."""
    lines = [
        "# bench/scheduling/swaps.py: models that take turns on a 24 GiB card (issue 35)",
        "listen: 127.0.0.1:%d" % port,
        "state_dir: %s" % os.path.join(workdir, "var"),
        "log: { format: json, level: info }",
        "gpu: { poll: 50ms }",
        "limits: { queue_max: 4096 }",
        "defaults:",
        "  concurrency: 1",
        "  queue_max: 1024",
        "  deadline: %s" % dur(7200 * timescale),            # 2 h simulated: nobody gives up
        "  keep_alive: %s" % dur(86400 * timescale),         # 24 h simulated: long, not pinned
        "  park_keep_alive: 0",                                # no park tier
        "  startup_timeout: 60s",
        "  stop_timeout: 5s",
        "  health: { path: /health, interval: %s, timeout: 2s, failures: 3 }" % HEALTH_INTERVAL_REAL,
        "  memory: { resident: %d, per_request: %d }" % (RESIDENT, PER_REQUEST),
        "  clear_cache: { method: POST, path: /clear_cache/ }",
    ]
    if max_wait is not None:
        lines.append("  max_wait: %s" % (max_wait if max_wait == "auto" else dur(parse_dur(max_wait) * timescale)))
    lines.append("models:")
    for n in names:
        lines.append("  %s:" % n)
        lines.append("    cmd: %s" % json.dumps(worker_argv(n)))
    return "\n".join(lines) + "\n"


def parse_dur(text):
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?", text.strip())
    if not m:
        raise bl.BenchError("not a duration: %r (e.g. 30s, 2m)" % text)
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]


def vramd_log_counts(path):
    """Loads per model (worker_started, plus resumed from a park) and evictions, from vramd's
    own JSON log lines (its workers' output is left out)."""
    loads, restores, evictions = {}, {}, 0
    with open(path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ev = e.get("event")
            if ev == "worker_started":
                loads[e.get("model")] = loads.get(e.get("model"), 0) + 1
            elif ev == "resumed":
                restores[e.get("model")] = restores.get(e.get("model"), 0) + 1
            elif ev == "eviction":
                evictions += 1
    return {"loads": sum(loads.values()) + sum(restores.values()), "worker_starts_by_model": loads,
            "restores_by_model": restores, "evictions": evictions}


def run_vramd(ctx, seq, times, pattern, names):
    work = tempfile.mkdtemp(prefix="swaps-vramd-", dir=ctx["tmp"])
    port = bl.free_port()
    cfg = os.path.join(work, "vramd.yaml")
    with open(cfg, "w") as f:
        f.write(vramd_config(port, work, names, ctx["timescale"], ctx["max_wait"]))
    with Run(ctx["binroot"], ctx["timescale"], work) as run:
        vd = run.start("vramd", [os.path.join(ctx["binroot"], "bin", "vramd"), "--config", cfg])
        try:
            wait_http(port, "/healthz", 20, vd, "vramd")
            deadline = time.monotonic() + 20
            while True:
                st = json.loads(wait_http(port, "/v1/status", 10, vd, "vramd"))
                if (st.get("nvml") or {}).get("ok") and st.get("gpus"):
                    break
                if time.monotonic() > deadline:
                    raise bl.BenchError("vramd does not read the simulated GPU")
                time.sleep(0.05)
        except bl.BenchError as e:
            raise bl.BenchError("%s; vramd log:\n%s" % (e, tail(os.path.join(work, "vramd.log"))))
        recs = send_all(port, seq, times, ctx["timescale"], pattern, lambda m: chat_body(m))
        st = json.loads(wait_http(port, "/v1/status", 10, vd, "vramd"))
        rc = stop(vd)
    out = figures(recs, ctx["timescale"], "start")
    out.update(vramd_log_counts(os.path.join(work, "vramd.log")))
    out["exit_code"] = rc
    out["loads_total_status"] = sum(m.get("loads_total", 0) for m in st.get("models", []))
    out["status_models"] = [{k: v for k, v in m.items() if k not in ("instances", "latency", "learned")}
                            for m in st.get("models", [])]
    out["workdir"] = work
    out["records"] = recs
    return out


def run_fifo(ctx, seq, times, pattern, names):
    work = tempfile.mkdtemp(prefix="swaps-fifo-", dir=ctx["tmp"])
    port = bl.free_port()
    cfg = os.path.join(work, "models.json")
    with open(cfg, "w") as f:
        json.dump({"models": {n: {"cmd": worker_argv(n), "health": "/health"} for n in names},
                   "startup_timeout_s": 60, "stop_timeout_s": 5,
                   "health_interval_s": parse_dur(HEALTH_INTERVAL_REAL), "request_timeout_s": 600}, f)
    with Run(ctx["binroot"], ctx["timescale"], work) as run:
        sw = run.start("swapper", [PY, os.path.join(HERE, "fifo_swapper.py"), "--config", cfg, "--port", str(port),
                                   "--log", os.path.join(work, "swapper-events.log")])
        wait_http(port, "/swapper/health", 20, sw, "fifo_swapper")
        recs = send_all(port, seq, times, ctx["timescale"], pattern, lambda m: chat_body(m))
        stats = json.loads(wait_http(port, "/swapper/stats", 10, sw, "fifo_swapper"))
        rc = stop(sw)
    out = figures(recs, ctx["timescale"], "start")
    out["loads"] = stats["swaps"]
    out["swaps_by_model"] = stats["swaps_by_model"]
    out["order_received"] = "".join(stats["order"])
    out["order_sent"] = "".join(seq)
    out["changes_in_order_received"] = changes(stats["order"])
    out["served"] = stats["served"]
    out["swap_log"] = stats["swap_log"]
    out["exit_code"] = rc
    out["workdir"] = work
    out["records"] = recs
    return out


# ---- the real llama.cpp router -------------------------------------------------------------

def llamacpp_dir():
    base = os.environ.get("VRAMD_REALSERVERS")
    root = base if base else os.path.join(os.path.dirname(REPO), "shared", "realservers")
    return os.path.join(root, "llama.cpp")


def llamacpp_models():
    """(server binary, models dir, GGUF ids sorted) or (None, reason, None)."""
    d = llamacpp_dir()
    server = os.path.join(d, "bin", "llama-server")
    if not os.access(server, os.X_OK):
        return None, "no llama-server at %s (set VRAMD_REALSERVERS to the realservers folder)" % server, None
    ggufs = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(d, "models", "*.gguf")))
    return server, os.path.join(d, "models"), ggufs


def post_json(port, path, doc, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def llama_log_counts(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return {"loads": len(re.findall(r"spawning server instance with name=", text)),
            "evicted_idle": len(re.findall(r"evicting idle LRU", text)),
            "removed_lru": len(re.findall(r"models_max limit reached, removing LRU", text)),
            "queued_for_a_slot": len(re.findall(r"models_max reached, request for name=\S+ queued", text))}


def run_llamacpp(ctx, seq, times, pattern, names):
    server, models_dir, ggufs = llamacpp_models()
    if server is None:
        return {"skipped": models_dir}
    if len(ggufs) < len(names):
        return {"skipped": "the router has %d GGUF models (%s), the scenario %d" % (len(ggufs), ", ".join(ggufs),
                                                                                 len(names))}
    ids = dict(zip(names, ggufs))
    work = tempfile.mkdtemp(prefix="swaps-llama-", dir=ctx["tmp"])
    port = bl.free_port()
    log = os.path.join(work, "router.log")
    with Run(ctx["binroot"], ctx["timescale"], work) as run:
        p = run.start("router", [server, "--models-dir", models_dir, "--models-max", "1", "--port", str(port),
                                 "-c", "2048", "-np", "1", "-t", "1"])
        wait_http(port, "/health", 30, p, "llama-server router")

        def body(m):
            return chat_body(ids[m], LLAMA_MAX_TOKENS, ignore_eos=True)

        # the time unit: one warm run of a request (so arrivals are as many runs apart as in
        # the simulation); then the model is unloaded, so the run starts on an empty card
        runs = []
        for _ in range(4):
            t = time.monotonic()
            status, answer = post_json(port, "/v1/chat/completions", json.loads(body(names[0])))
            if status != 200:
                raise bl.BenchError("llama.cpp router: %d %s" % (status, answer[:200]))
            runs.append(time.monotonic() - t)
        unit = max(0.005, sorted(runs[1:])[1])
        post_json(port, "/models/unload", {"model": ids[names[0]]})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = json.loads(bl.http_get(port, "/models")[1])
            if all(m["status"]["value"] == "unloaded" for m in st["data"]):
                break
            time.sleep(0.02)
        offset = os.path.getsize(os.path.join(work, "router.log"))
        recs = send_all(port, seq, times, unit, pattern, body)
        rc = stop(p)
    log = os.path.join(work, "router.log")
    out = figures(recs, 1.0, "answer")   # real seconds
    out.update(llama_log_counts(log, offset))
    out["unit_real_s"] = round(unit, 4)
    out["first_cold_request_real_s"] = round(runs[0], 4)   # a load + a run: load ~ (this - unit)
    out["load_over_run"] = round(max(0.0, runs[0] - unit) / unit, 2)
    out["models"] = ids
    out["units"] = "real s on the CPU (not comparable)"
    out["exit_code"] = rc
    out["workdir"] = work
    out["records"] = recs
    return out


# ---- the report -----------------------------------------------------------------------------

def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def table(results):
    header = ["N", "pattern", "setup", "ok/req", "loads", "makespan", "/bound", "p50", "p99", "longest wait",
              "failures"]
    rows = []
    for r in results:
        for setup in ("vramd", "fifo", "bound", "llamacpp"):
            s = r["setups"].get(setup)
            if s is None:
                continue
            if "skipped" in s:
                rows.append([r["n_models"], r["pattern"], setup, "skipped", "", "", "", "", "", "", ""])
                continue
            if setup == "bound":
                rows.append([r["n_models"], r["pattern"], setup, "-", s["loads"], fmt(s["makespan_s"]), "1.00",
                             "-", "-", "-", "-"])
                continue
            cpu = setup == "llamacpp"
            ratio = None if cpu else s["makespan_s"] / r["setups"]["bound"]["makespan_s"] \
                if "bound" in r["setups"] else None
            wait = fmt(s["longest_wait_s"]) + (" (answer)" if s["wait_measured_to"] == "answer" else "")
            rows.append([r["n_models"], r["pattern"], setup + (" (cpu s)" if cpu else ""),
                         "%d/%d" % (s["ok"], s["requests"]), s["loads"],
                         fmt(s["makespan_s"], "%.2f" if cpu else "%.1f"), fmt(ratio, "%.2f"),
                         fmt(s["p50_s"], "%.2f" if cpu else "%.1f"), fmt(s["p99_s"], "%.2f" if cpu else "%.1f"),
                         wait, s["failures"]])
    bl.print_table(header, rows)


def targets(results, timescale):
    """Issue 35's targets for vramd, judged on these figures (informative: a shared, noisy
    machine; 'one load per model plus one per bound reached' is shown as the loads beyond one
    per model; where /v1/status shows each model's resolved max_wait, the longest wait past
    it)."""
    out = []
    for r in results:
        s = r["setups"]
        v, f, b = s.get("vramd"), s.get("fifo"), s.get("bound")
        if not v or "skipped" in v:
            continue
        t = {"n_models": r["n_models"], "pattern": r["pattern"]}
        if r["pattern"] == "burst" and b:
            t["loads_beyond_one_per_model"] = v["loads"] - b["loads"]
            t["makespan_over_bound"] = round(v["makespan_s"] / b["makespan_s"], 3)
            t["makespan_within_1.2x_bound"] = v["makespan_s"] <= 1.2 * b["makespan_s"]
        elif f and "skipped" not in f:
            t["loads_over_fifo"] = round(v["loads"] / f["loads"], 3) if f["loads"] else None
            t["at_most_half_fifo_loads"] = v["loads"] * 2 <= f["loads"]
            t["p99_no_worse_than_fifo"] = (v["p99_s"] is not None and f["p99_s"] is not None
                                           and v["p99_s"] <= f["p99_s"])
        t["longest_wait_s"] = v["longest_wait_s"]
        # a vramd that resolves max_wait shows it per model in /v1/status (max_wait_ms, real):
        # how far past it the longest wait of each model went (one batch is allowed)
        mw = {m["name"]: m["max_wait_ms"] / 1000.0 / timescale for m in v.get("status_models", [])
              if isinstance(m.get("max_wait_ms"), (int, float))}
        if mw:
            t["max_wait_s"] = {k: round(x, 3) for k, x in sorted(mw.items())}
            t["longest_wait_past_max_wait_s"] = round(max(w - mw[m] for m, w in v["longest_wait_by_model_s"].items()
                                                          if m in mw), 3)
        out.append(t)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="%d requests, 3 models, burst only (a smoke run)" % QUICK_REQUESTS)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="3,6", help="numbers of models, e.g. 3,6")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--requests", type=int, help="requests per run (default 10 per model)")
    ap.add_argument("--timescale", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--max-wait", help="write max_wait: DUR (simulated) or auto into vramd's defaults")
    ap.add_argument("--json", help="result file (default bench/results/swaps-<stamp>.json)")
    ap.add_argument("--keep", action="store_true", help="keep the runs' folders (logs) under /tmp")
    a = ap.parse_args(argv)
    bl.exit_cleanly_on_sigterm()
    models = [3] if a.quick else [int(x) for x in a.models.split(",") if x]
    patterns = ["burst"] if a.quick else [p for p in a.patterns.split(",") if p]
    setups = [s for s in a.setups.split(",") if s]
    for p in patterns:
        if p not in PATTERNS:
            ap.error("unknown pattern %s (of %s)" % (p, ", ".join(PATTERNS)))
    for s in setups:
        if s not in SETUPS:
            ap.error("unknown setup %s (of %s)" % (s, ", ".join(SETUPS)))
    if any(n < 2 or n > len(NAMES) for n in models):
        ap.error("--models: 2..%d" % len(NAMES))
    if not a.timescale > 0:
        ap.error("--timescale must be > 0")
    binroot = snapshot_build(a.build)
    tmp = tempfile.mkdtemp(prefix="swaps-")
    ctx = {"binroot": binroot, "timescale": a.timescale, "tmp": tmp, "max_wait": a.max_wait}
    data = {"benchmark": "swaps", "issue": 35, "quick": a.quick, "seed": a.seed, "timescale": a.timescale,
            "scenario": {"gpu": GPU_MEMORY, "resident_bytes": RESIDENT, "per_request_bytes": PER_REQUEST,
                         "load_s": LOAD_S, "run_s": RUN_S, "open_every_s": OPEN_EVERY_S, "concurrency": 1,
                         "park_tier": False},
            "max_wait": a.max_wait, "environment": bl.environment(), "build": a.build, "runs": []}
    runners = {"vramd": run_vramd, "fifo": run_fifo, "llamacpp": run_llamacpp}
    t_start = time.monotonic()
    try:
        for n in models:
            nreq = QUICK_REQUESTS if a.quick else (a.requests or REQUESTS.get(n, 10 * n))
            seq = model_sequence(n, nreq, a.seed)
            names = NAMES[:n]
            for pattern in patterns:
                times = arrivals(pattern, nreq, a.seed)
                r = {"n_models": n, "pattern": pattern, "sequence": "".join(seq),
                     "arrivals_s": times, "model_changes": changes(seq), "setups": {}}
                for setup in setups:
                    print("  N=%d %-7s %-8s ..." % (n, pattern, setup), end="", flush=True)
                    t = time.monotonic()
                    if setup == "bound":
                        r["setups"][setup] = bound(seq, times)
                    else:
                        with bl.ForeignLoad([]) as fl:
                            r["setups"][setup] = runners[setup](ctx, seq, times, pattern, names)
                        if "skipped" not in r["setups"][setup]:
                            r["setups"][setup]["others_core_frac"] = round(fl.foreign_core_frac, 3)
                    s = r["setups"][setup]
                    print(" %s (%.0f s real)" % (("skipped: " + s["skipped"]) if "skipped" in s else
                                                 "%s loads" % s["loads"], time.monotonic() - t), flush=True)
                data["runs"].append(r)
    finally:
        shutil.rmtree(binroot, ignore_errors=True)
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    data["targets"] = targets(data["runs"], a.timescale)
    data["real_s"] = round(time.monotonic() - t_start, 1)
    print()
    print("simulated seconds (time scale %g); llamacpp: real CPU seconds, not comparable" % a.timescale)
    table(data["runs"])
    if any(t for t in data["targets"]):
        print()
        print("issue 35's targets for vramd (informative):")
        for t in data["targets"]:
            print("  " + json.dumps(t))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        path = a.json
    else:
        path = bl.write_results("swaps", data)
    print("\nwrote %s%s" % (path, "" if not a.keep else "; run folders under %s" % tmp))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bl.BenchError as e:
        print("swaps: %s" % e, file=sys.stderr)
        sys.exit(1)
