#!/usr/bin/python3
"""player: replays a scenario's traffic (traffic.json) against a URL and reports what happened.

Open loop: arrivals are drawn up front from the scenario's streams (Poisson at a rate,
bursts of N every T, uniform, or once), with a seed, and each request is sent at its time
whatever happened to the earlier ones (one thread per request in flight, bounded). Each
request is drawn from a weighted list of templates (method, path, JSON / form / multipart /
raw body, headers, client deadline, streaming).

Time is simulated like simgpu's: every duration in traffic.json is simulated time, and
SIMGPU_TIMESCALE (or --timescale) maps it to real time, for arrivals, deadlines sent in
X-Vramd-Deadline, and client timeouts. Reported latencies are in simulated seconds (real
divided by the time scale), so they compare with the field's figures.

Per request it records: status, vramd's error code ({"error": {"code": ...}}), queue and run
time (X-Vramd-Queue-Ms / X-Vramd-Run-Ms), X-Vramd-Degrade-Level, X-Vramd-Attempts, total
latency, time to first byte, whether it saw an OOM (HTTP 500 with "out of memory" in the body,
or 200 with {"success": false, ...out of memory...}) and whether it finished within its
deadline. In total: success rate, OOMs, throughput, p50/p95/p99 latency, deadline hit rate,
and (with --simgpu NAME) the simulated GPUs' memory peak, polled with `simgpu show --json`.

The format of traffic.json is documented in bench/player/README.md.
Exit status: 0 when the run completed (whatever the requests' outcomes), 2 on a bad
scenario or arguments. Everything it starts (threads, the GPU poller) ends before it exits;
it sends requests only to the URL given (loopback in this project).
"""
import argparse
import base64
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

import requests

MAX_INFLIGHT_DEFAULT = 512
DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")


class ScenarioError(Exception):
    pass


def parse_duration_s(v, what):
    """'250ms', '30s', '10m', '2h', or a number of seconds -> seconds (float)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v < 0:
            raise ScenarioError(f"{what}: negative duration")
        return float(v)
    m = DURATION_RE.match(str(v))
    if not m:
        raise ScenarioError(f"{what}: expected a duration like 30s, got {v!r}")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]


def format_duration(seconds):
    """Seconds -> the shortest duration text vramd parses ('300ms', '1.5s')."""
    ms = max(1, int(round(seconds * 1000)))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# --- scenario --------------------------------------------------------------------------

class Template:
    KEYS = {"method", "path", "json", "form", "multipart", "body", "body_base64", "headers",
            "deadline", "send_deadline", "stream", "timeout", "then"}

    def __init__(self, name, doc, default_timeout):
        unknown = set(doc) - self.KEYS
        if unknown:
            raise ScenarioError(f"requests.{name}: unknown keys {sorted(unknown)}")
        if "path" not in doc or not str(doc["path"]).startswith("/"):
            raise ScenarioError(f"requests.{name}.path: expected a path starting with /")
        bodies = [k for k in ("json", "form", "multipart", "body", "body_base64") if k in doc]
        if len(bodies) > 1:
            raise ScenarioError(f"requests.{name}: at most one of {bodies}")
        self.name = name
        self.method = doc.get("method", "POST" if bodies else "GET").upper()
        self.path = doc["path"]
        self.body_kind = bodies[0] if bodies else None
        self.body = doc.get(self.body_kind) if self.body_kind else None
        self.headers = {str(k): str(v) for k, v in (doc.get("headers") or {}).items()}
        self.deadline_s = None
        if "deadline" in doc:
            self.deadline_s = parse_duration_s(doc["deadline"], f"requests.{name}.deadline")
        else:
            for k, v in self.headers.items():
                if k.lower() == "x-vramd-deadline":
                    self.deadline_s = parse_duration_s(v, f"requests.{name}.headers.{k}")
        self.send_deadline = bool(doc.get("send_deadline", True))
        self.stream = bool(doc.get("stream", False))
        self.timeout_s = parse_duration_s(doc["timeout"], f"requests.{name}.timeout") \
            if "timeout" in doc else default_timeout
        self.then = doc.get("then")
        if self.body_kind == "multipart":
            if not isinstance(self.body, dict) or set(self.body) - {"fields", "files"}:
                raise ScenarioError(f"requests.{name}.multipart: expected {{fields, files}}")


def fill_placeholders(value, rng, seq):
    """"{rand}" -> a random int, "{seq}" -> the request's number, inside any JSON value."""
    if isinstance(value, dict):
        return {k: fill_placeholders(v, rng, seq) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_placeholders(v, rng, seq) for v in value]
    if value == "{rand}":
        return rng.randrange(1 << 31)
    if value == "{seq}":
        return seq
    if isinstance(value, str):
        return value.replace("{seq}", str(seq))
    return value


class Stream:
    KEYS = {"arrivals", "rate_per_s", "rate_per_min", "every", "size", "start", "duration",
            "count", "requests"}

    def __init__(self, i, doc, templates, default_duration):
        where = f"streams[{i}]"
        unknown = set(doc) - self.KEYS
        if unknown:
            raise ScenarioError(f"{where}: unknown keys {sorted(unknown)}")
        self.kind = doc.get("arrivals", "poisson")
        if self.kind not in ("poisson", "burst", "uniform", "once"):
            raise ScenarioError(f"{where}.arrivals: expected poisson, burst, uniform or once")
        self.start = parse_duration_s(doc.get("start", 0), f"{where}.start")
        self.duration = parse_duration_s(doc["duration"], f"{where}.duration") \
            if "duration" in doc else default_duration
        self.count = int(doc["count"]) if "count" in doc else None
        if self.duration is None and self.count is None and self.kind != "once":
            raise ScenarioError(f"{where}: needs a duration or a count")
        self.size = int(doc.get("size", 1))
        if self.kind == "poisson":
            if "rate_per_s" in doc:
                self.rate = float(doc["rate_per_s"])
            elif "rate_per_min" in doc:
                self.rate = float(doc["rate_per_min"]) / 60.0
            else:
                raise ScenarioError(f"{where}: poisson arrivals need rate_per_s or rate_per_min")
            if self.rate <= 0:
                raise ScenarioError(f"{where}: rate must be > 0")
        if self.kind in ("burst", "uniform"):
            if "every" not in doc:
                raise ScenarioError(f"{where}: {self.kind} arrivals need 'every'")
            self.every = parse_duration_s(doc["every"], f"{where}.every")
            if self.every <= 0:
                raise ScenarioError(f"{where}.every must be > 0")
        reqs = doc.get("requests")
        if reqs is None:
            reqs = {n: 1 for n in templates}
        elif isinstance(reqs, list):
            reqs = {n: 1 for n in reqs}
        for n, wgt in reqs.items():
            if n not in templates:
                raise ScenarioError(f"{where}.requests: no request template named {n!r}")
            if not isinstance(wgt, (int, float)) or wgt < 0:
                raise ScenarioError(f"{where}.requests.{n}: weight must be a number >= 0")
        if not reqs or sum(reqs.values()) <= 0:
            raise ScenarioError(f"{where}.requests: needs at least one template with weight > 0")
        self.names = list(reqs)
        self.weights = [float(reqs[n]) for n in self.names]

    def arrivals(self, rng, duration_override=None, count_override=None):
        """Simulated arrival times (seconds from the start of the run), each with a template."""
        duration = duration_override if duration_override is not None else self.duration
        count = count_override if count_override is not None else self.count
        out = []
        t = self.start

        def room():
            return (count is None or len(out) < count)

        def within(x):
            return duration is None or x < self.start + duration

        if self.kind == "once":
            for _ in range(self.size if count is None else min(self.size, count)):
                out.append(t)
        elif self.kind == "poisson":
            while room():
                t += rng.expovariate(self.rate)
                if not within(t):
                    break
                out.append(t)
        else:
            while room() and within(t):
                for _ in range(self.size if self.kind == "burst" else 1):
                    if room():
                        out.append(t)
                t += self.every
        return [(x, rng.choices(self.names, self.weights)[0]) for x in out]


class Scenario:
    KEYS = {"name", "description", "seed", "target", "duration", "timeout", "requests", "streams"}

    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise ScenarioError("traffic.json: expected a JSON object")
        unknown = set(doc) - self.KEYS
        if unknown:
            raise ScenarioError(f"traffic.json: unknown keys {sorted(unknown)}")
        self.name = doc.get("name", "scenario")
        self.description = doc.get("description", "")
        self.seed = int(doc.get("seed", 1))
        self.target = doc.get("target")
        self.duration = parse_duration_s(doc["duration"], "duration") if "duration" in doc else None
        timeout = parse_duration_s(doc.get("timeout", "600s"), "timeout")
        if not isinstance(doc.get("requests"), dict) or not doc["requests"]:
            raise ScenarioError("requests: expected an object of named request templates")
        self.templates = {n: Template(n, t, timeout) for n, t in doc["requests"].items()}
        for t in self.templates.values():
            seen = {t.name}
            nxt = t.then
            while nxt is not None:
                if nxt not in self.templates:
                    raise ScenarioError(f"requests.{t.name}.then: no request template named {nxt!r}")
                if nxt in seen:
                    raise ScenarioError(f"requests.{t.name}.then: a cycle through {nxt!r}")
                seen.add(nxt)
                nxt = self.templates[nxt].then
        streams = doc.get("streams")
        if not isinstance(streams, list) or not streams:
            raise ScenarioError("streams: expected a list of arrival streams")
        self.streams = [Stream(i, s, self.templates, self.duration) for i, s in enumerate(streams)]

    def schedule(self, seed, duration=None, count=None):
        rng = random.Random(seed)
        plan = []
        for s in self.streams:
            plan.extend(s.arrivals(rng, duration, None))
        plan.sort(key=lambda a: a[0])
        if count is not None:
            plan = plan[:count]
        return plan


# --- one request ---------------------------------------------------------------------------

def build_request(tpl, rng, seq, timescale, deadline_s):
    headers = dict(tpl.headers)
    kw = {}
    if tpl.body_kind == "json":
        kw["json"] = fill_placeholders(tpl.body, rng, seq)
    elif tpl.body_kind == "form":
        kw["data"] = {k: str(v) for k, v in fill_placeholders(tpl.body, rng, seq).items()}
    elif tpl.body_kind == "multipart":
        fields = {k: str(v) for k, v in fill_placeholders(tpl.body.get("fields", {}), rng, seq).items()}
        files = {}
        for fname, spec in (tpl.body.get("files") or {}).items():
            size = int(spec.get("size", 1024))
            content = (b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(min(size, 4096))))
            content = (content * (size // len(content) + 1))[:size]
            files[fname] = (spec.get("filename", fname), content, spec.get("content_type", "application/octet-stream"))
        kw["data"] = fields
        kw["files"] = files
    elif tpl.body_kind == "body":
        kw["data"] = str(fill_placeholders(tpl.body, rng, seq)).encode()
    elif tpl.body_kind == "body_base64":
        kw["data"] = base64.b64decode(tpl.body)
    if deadline_s is not None and tpl.send_deadline:
        # vramd runs in real time: send the deadline scaled like everything else.
        for k in list(headers):
            if k.lower() == "x-vramd-deadline":
                del headers[k]
        headers["X-Vramd-Deadline"] = format_duration(max(deadline_s, 0.001) * timescale)
    headers.setdefault("X-Request-Id", f"player-{seq}")
    return headers, kw


def error_code(body_bytes):
    try:
        doc = json.loads(body_bytes)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict):
            return err.get("code"), doc
        if isinstance(err, str):
            return None, doc
    return None, doc


def classify(status, body):
    """-> (ok, oom, code): ok = a real success; oom = CUDA OOM seen; code = vramd's error code."""
    code, doc = error_code(body) if body else (None, None)
    text = body[:65536].decode("utf-8", "replace").lower() if body else ""
    false_success = isinstance(doc, dict) and doc.get("success") is False
    oom = ("out of memory" in text) and (status >= 500 or false_success)
    ok = 200 <= status < 300 and not false_success
    return ok, oom, code


def header_num(resp, name):
    v = resp.headers.get(name)
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def send_one(url, tpl, seq, rng_seed, timescale, t_sched, t0, deadline_s=None, step=0):
    """One request. deadline_s: the client's deadline for this request (default: the
    template's); a pipeline step gets what its first step's deadline has left."""
    rng = random.Random(rng_seed)
    if deadline_s is None:
        deadline_s = tpl.deadline_s
    headers, kw = build_request(tpl, rng, seq, timescale, deadline_s)
    rec = {"seq": seq, "template": tpl.name, "method": tpl.method, "path": tpl.path,
           "scheduled_s": round(t_sched, 6), "status": 0}
    if step:
        rec["step"] = step
    timeout = max(2.0, tpl.timeout_s * timescale)
    start = time.monotonic()
    rec["sent_s"] = round((start - t0) / timescale, 6)
    try:
        resp = requests.request(tpl.method, url + tpl.path, headers=headers, timeout=timeout,
                                stream=True, **kw)
        ttfb = time.monotonic() - start
        chunks = []
        events = 0
        for chunk in resp.iter_content(chunk_size=65536):
            if tpl.stream:
                events += chunk.count(b"data: ")
            chunks.append(chunk)
        body = b"".join(chunks)
        end = time.monotonic()
        rec["status"] = resp.status_code
        rec["bytes"] = len(body)
        rec["ttfb_s"] = round(ttfb / timescale, 6)
        if tpl.stream:
            rec["events"] = events
        for h, key in (("X-Vramd-Queue-Ms", "queue_ms"), ("X-Vramd-Run-Ms", "run_ms")):
            v = header_num(resp, h)
            if v is not None:
                rec[key + "_real"] = v
                rec[key.replace("_ms", "_s")] = round(v / 1000.0 / timescale, 6)
        lvl = header_num(resp, "X-Vramd-Degrade-Level")
        rec["degrade_level"] = int(lvl) if lvl is not None else 0
        att = header_num(resp, "X-Vramd-Attempts")
        if att is not None:
            rec["attempts"] = int(att)
        ok, oom, code = classify(resp.status_code, body)
        rec["ok"], rec["oom"], rec["code"] = ok, oom, code
        if not ok:
            rec["error"] = body[:300].decode("utf-8", "replace")
        resp.close()
    except requests.RequestException as e:
        end = time.monotonic()
        rec.update(ok=False, oom=False, code="client_" + type(e).__name__, error=str(e)[:300])
    rec["latency_s"] = round((end - start) / timescale, 6)
    rec["latency_real_ms"] = round((end - start) * 1000.0, 3)
    if deadline_s is not None:
        rec["deadline_s"] = round(deadline_s, 6)
        rec["deadline_hit"] = bool(rec.get("ok")) and rec["latency_s"] <= deadline_s
    return rec


def send_chain(url, scenario, tpl, seq, rng_seed, timescale, t_sched, t0):
    """A request and, while each succeeds, the templates its `then` names. Returns the
    records (step 0, 1, ...) and a pipeline record when there was more than one step."""
    recs = []
    deadline = tpl.deadline_s
    step = 0
    total = 0.0
    cur = tpl
    while cur is not None:
        rec = send_one(url, cur, seq, rng_seed + step, timescale, t_sched, t0,
                       deadline_s=None if step == 0 else (None if deadline is None else deadline - total),
                       step=step)
        recs.append(rec)
        total += rec["latency_s"]
        if not rec.get("ok") or cur.then is None:
            break
        step += 1
        cur = scenario.templates[cur.then]
    pipeline = None
    if tpl.then is not None:
        ok = all(r.get("ok") for r in recs) and recs[-1]["template"] == last_step(scenario, tpl)
        pipeline = {"seq": seq, "template": tpl.name, "steps": len(recs), "ok": ok,
                    "status": recs[-1]["status"],
                    "oom": any(r.get("oom") for r in recs), "latency_s": round(total, 6)}
        if deadline is not None:
            pipeline["deadline_s"] = deadline
            pipeline["deadline_hit"] = ok and total <= deadline
    return recs, pipeline


def last_step(scenario, tpl):
    while tpl.then is not None:
        tpl = scenario.templates[tpl.then]
    return tpl.name


# --- GPU memory poller ---------------------------------------------------------------------

def find_simgpu():
    build = os.environ.get("VRAMD_BUILD", "build")
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    cand = build if os.path.isabs(build) else os.path.join(repo, build)
    path = os.path.join(cand, "bin", "simgpu")
    return path if os.path.exists(path) else shutil.which("simgpu")


class GpuPoller(threading.Thread):
    """Polls `simgpu show NAME --json` and keeps each GPU's peak used bytes."""

    def __init__(self, name, interval):
        super().__init__(daemon=True)
        self.name = name
        self.interval = interval
        self.binary = find_simgpu()
        self.stop_event = threading.Event()
        self.peak = {}
        self.total = {}
        self.samples = 0
        self.error = None if self.binary else "simgpu binary not found"

    def sample(self):
        res = subprocess.run([self.binary, "show", self.name, "--json"], capture_output=True,
                             text=True, timeout=10)
        if res.returncode != 0:
            self.error = res.stderr.strip()[:200]
            return
        for g in json.loads(res.stdout)["gpus"]:
            i = g["index"]
            self.total[i] = g["total"]
            self.peak[i] = max(self.peak.get(i, 0), g["used"])
        self.samples += 1

    def run(self):
        if not self.binary:
            return
        while not self.stop_event.is_set():
            try:
                self.sample()
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                self.error = str(e)[:200]
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        if self.is_alive():
            self.join(15)

    def report(self):
        return {"simgpu": self.name, "samples": self.samples, "error": self.error,
                "gpus": [{"index": i, "total": self.total.get(i), "peak_used": p,
                          "peak_fraction": round(p / self.total[i], 4) if self.total.get(i) else None}
                         for i, p in sorted(self.peak.items())]}


# --- the run -------------------------------------------------------------------------------

def summarize(records, wall_sim_s):
    n = len(records)
    ok = [r for r in records if r.get("ok")]
    lat = [r["latency_s"] for r in ok]
    with_deadline = [r for r in records if "deadline_s" in r]
    codes, statuses, levels = {}, {}, {}
    for r in records:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
        if r.get("code"):
            codes[r["code"]] = codes.get(r["code"], 0) + 1
        if r.get("ok"):
            lv = str(r.get("degrade_level", 0))
            levels[lv] = levels.get(lv, 0) + 1
    queue = [r["queue_s"] for r in records if "queue_s" in r]
    return {
        "requests": n,
        "succeeded": len(ok),
        "success_rate": round(len(ok) / n, 4) if n else None,
        "oom": sum(1 for r in records if r.get("oom")),
        "statuses": statuses,
        "error_codes": codes,
        "degrade_levels": levels,
        "throughput_per_min": round(len(ok) / wall_sim_s * 60.0, 4) if wall_sim_s > 0 else None,
        "latency_s": {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95),
                      "p99": percentile(lat, 0.99), "max": max(lat) if lat else None},
        "queue_s": {"p50": percentile(queue, 0.5), "p95": percentile(queue, 0.95)} if queue else None,
        "deadline_hit_rate": round(sum(1 for r in with_deadline if r["deadline_hit"]) / len(with_deadline), 4)
        if with_deadline else None,
    }


def run(scenario, url, timescale, seed, duration=None, count=None, max_inflight=MAX_INFLIGHT_DEFAULT,
        simgpu=None, poll_interval=0.1, progress=None):
    plan = scenario.schedule(seed, duration, count)
    poller = GpuPoller(simgpu, poll_interval) if simgpu else None
    if poller:
        poller.start()
    records = []
    lock = threading.Lock()
    sem = threading.BoundedSemaphore(max_inflight)
    threads = []
    dropped = 0
    t0 = time.monotonic()

    pipelines = []

    def worker(seq, tpl, t_sched, rng_seed):
        try:
            recs, pipeline = send_chain(url, scenario, tpl, seq, rng_seed, timescale, t_sched, t0)
            with lock:
                records.extend(recs)
                if pipeline:
                    pipelines.append(pipeline)
                if progress:
                    for rec in recs:
                        progress(rec)
        finally:
            sem.release()

    seed_rng = random.Random(seed ^ 0x5EED)
    try:
        for seq, (t_sim, name) in enumerate(plan, 1):
            delay = t0 + t_sim * timescale - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if not sem.acquire(blocking=False):
                dropped += 1  # open loop: never wait for the server; count what could not be sent
                with lock:
                    records.append({"seq": seq, "template": name, "status": 0, "ok": False,
                                    "oom": False, "code": "client_overload",
                                    "scheduled_s": t_sim, "latency_s": 0.0})
                continue
            th = threading.Thread(target=worker, args=(seq, scenario.templates[name], t_sim,
                                                       seed_rng.randrange(1 << 62)), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
    finally:
        if poller:
            poller.stop()
    wall_sim = (time.monotonic() - t0) / timescale
    records.sort(key=lambda r: (r["seq"], r.get("step", 0)))
    pipelines.sort(key=lambda p: p["seq"])
    summary = summarize(records, wall_sim)
    summary["client_dropped"] = dropped
    summary["wall_s"] = round(wall_sim, 3)
    by_template = {n: summarize([r for r in records if r["template"] == n], wall_sim)
                   for n in scenario.templates if any(r["template"] == n for r in records)}
    result = {"scenario": scenario.name, "url": url, "timescale": timescale, "seed": seed,
              "planned": len(plan), "summary": summary, "by_template": by_template,
              "gpu": poller.report() if poller else None, "requests": records}
    if pipelines:
        result["pipelines"] = summarize(pipelines, wall_sim)
        result["pipeline_runs"] = pipelines
    return result


def fmt_s(v):
    return "-" if v is None else f"{v:.2f}s"


def print_summary(result, out=sys.stdout):
    s = result["summary"]
    w = out.write
    w(f"scenario {result['scenario']}: {s['requests']} requests against {result['url']} "
      f"(timescale {result['timescale']}, seed {result['seed']}, {s['wall_s']:.1f}s simulated)\n")
    rate = "-" if s["success_rate"] is None else f"{100 * s['success_rate']:.1f}%"
    w(f"  success      {s['succeeded']}/{s['requests']} ({rate})   OOM seen: {s['oom']}\n")
    thr = "-" if s["throughput_per_min"] is None else f"{s['throughput_per_min']:.2f}/min"
    w(f"  throughput   {thr}\n")
    lat = s["latency_s"]
    w(f"  latency      p50 {fmt_s(lat['p50'])}  p95 {fmt_s(lat['p95'])}  p99 {fmt_s(lat['p99'])}"
      f"  max {fmt_s(lat['max'])}   (successful requests, simulated time)\n")
    if s["queue_s"]:
        w(f"  queue wait   p50 {fmt_s(s['queue_s']['p50'])}  p95 {fmt_s(s['queue_s']['p95'])}\n")
    if s["deadline_hit_rate"] is not None:
        w(f"  deadlines    {100 * s['deadline_hit_rate']:.1f}% finished within their deadline\n")
    w(f"  statuses     {json.dumps(s['statuses'], sort_keys=True)}\n")
    if s["error_codes"]:
        w(f"  error codes  {json.dumps(s['error_codes'], sort_keys=True)}\n")
    if set(s["degrade_levels"]) - {"0"}:
        w(f"  degraded     {json.dumps(s['degrade_levels'], sort_keys=True)} (level: successes)\n")
    if s["client_dropped"]:
        w(f"  dropped      {s['client_dropped']} (over --max-inflight)\n")
    p = result.get("pipelines")
    if p:
        pr = "-" if p["success_rate"] is None else f"{100 * p['success_rate']:.1f}%"
        w(f"  pipelines    {p['succeeded']}/{p['requests']} ok ({pr})  p50 {fmt_s(p['latency_s']['p50'])}"
          f"  p95 {fmt_s(p['latency_s']['p95'])}")
        if p["deadline_hit_rate"] is not None:
            w(f"  within deadline {100 * p['deadline_hit_rate']:.1f}%")
        w("\n")
    for name, t in result["by_template"].items():
        r = "-" if t["success_rate"] is None else f"{100 * t['success_rate']:.0f}%"
        w(f"    {name:<22} {t['requests']:>5} req  ok {r:>4}  oom {t['oom']:>3}  "
          f"p50 {fmt_s(t['latency_s']['p50'])}  p95 {fmt_s(t['latency_s']['p95'])}\n")
    g = result.get("gpu")
    if g:
        for gpu in g["gpus"]:
            frac = "" if gpu["peak_fraction"] is None else f" ({100 * gpu['peak_fraction']:.1f}% of {gpu['total'] / 2**30:.1f} GiB)"
            w(f"  GPU {gpu['index']} peak  {gpu['peak_used'] / 2**30:.2f} GiB{frac}\n")
        if g["error"]:
            w(f"  GPU poller: {g['error']}\n")


def timescale_from_env():
    v = os.environ.get("SIMGPU_TIMESCALE")
    try:
        t = float(v) if v else 1.0
    except ValueError:
        t = 1.0
    return t if t > 0 and math.isfinite(t) else 1.0


def main(argv=None):
    ap = argparse.ArgumentParser(description="Replay a scenario's traffic.json against a URL.")
    ap.add_argument("traffic", help="traffic.json (or a scenario directory holding one)")
    ap.add_argument("--url", help="base URL (default: the scenario's target, else http://127.0.0.1:8800)")
    ap.add_argument("--json", metavar="FILE", help="write the full result (summary + every request) here")
    ap.add_argument("--timescale", type=float, help="simulated -> real time factor (default $SIMGPU_TIMESCALE or 1)")
    ap.add_argument("--seed", type=int, help="arrival seed (default: the scenario's)")
    ap.add_argument("--duration", help="override every stream's duration (simulated, e.g. 60s)")
    ap.add_argument("--requests", type=int, help="stop after this many requests")
    ap.add_argument("--max-inflight", type=int, default=MAX_INFLIGHT_DEFAULT)
    ap.add_argument("--simgpu", help="simulated GPU set to poll for the memory peak (default $SIMGPU)")
    ap.add_argument("--no-gpu", action="store_true", help="do not poll GPU memory")
    ap.add_argument("--dry-run", action="store_true", help="print the arrival plan and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per finished request")
    args = ap.parse_args(argv)

    path = args.traffic
    if os.path.isdir(path):
        path = os.path.join(path, "traffic.json")
    try:
        with open(path) as f:
            scenario = Scenario(json.load(f))
        duration = parse_duration_s(args.duration, "--duration") if args.duration else None
    except (OSError, ValueError, ScenarioError) as e:
        print(f"player: {path}: {e}", file=sys.stderr)
        return 2
    timescale = args.timescale if args.timescale else timescale_from_env()
    if timescale <= 0:
        print("player: --timescale must be > 0", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else scenario.seed
    url = (args.url or scenario.target or "http://127.0.0.1:8800").rstrip("/")
    if args.dry_run:
        for t, name in scenario.schedule(seed, duration, args.requests):
            print(f"{t:10.3f}s  {name}")
        return 0
    simgpu = None if args.no_gpu else (args.simgpu or os.environ.get("SIMGPU"))

    def progress(rec):
        if args.verbose:
            print(f"  #{rec['seq']:<5} {rec['template']:<20} {rec['status']:>3} "
                  f"{rec.get('code') or ''} {rec['latency_s']:.2f}s"
                  f"{' OOM' if rec.get('oom') else ''}", flush=True)

    result = run(scenario, url, timescale, seed, duration, args.requests, args.max_inflight,
                 simgpu, progress=progress)
    print_summary(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
