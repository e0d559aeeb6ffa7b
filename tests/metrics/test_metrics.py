"""GET /metrics (SPEC 3.3, issue 6): the families, their values, promtool, a real Prometheus.

One vramd (the module's `metricsd`: a simulated 8 GiB GPU, simworker model "gen", queue_max 1,
a 2-level degradation ladder) serves every test here; the first test makes requests end in
known ways and checks what /metrics says against them and against /v1/status.
"""
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from vramdkit import free_port, wait_for

from .expo import ExpoError, parse

SPEC_FAMILIES = {
    "vramd_gpu_memory_total_bytes": "gauge",
    "vramd_gpu_memory_used_bytes": "gauge",
    "vramd_gpu_memory_reserved_bytes": "gauge",
    "vramd_gpu_memory_foreign_bytes": "gauge",
    "vramd_queue_depth": "gauge",
    "vramd_requests_total": "counter",
    "vramd_request_duration_seconds": "histogram",
    "vramd_queue_wait_seconds": "histogram",
    "vramd_model_loads_total": "counter",
    "vramd_model_unloads_total": "counter",
    "vramd_oom_total": "counter",
    "vramd_degraded_total": "counter",
    "vramd_worker_restarts_total": "counter",
    "vramd_deadline_rejections_total": "counter",
    "vramd_deadline_expiries_total": "counter",
    "vramd_jobs": "gauge",
}
UNLOAD_REASONS = {"other", "idle", "evicted", "admin", "recycle", "drain", "removed", "failed"}
RESTART_REASONS = {"crash", "start_failed", "startup_timeout", "hang", "unhealthy", "reload_failed", "park_failed",
                   "recycle"}
JOB_STATES = {"queued", "running", "succeeded", "failed", "cancelled"}
SLOW_STEPS = 100  # x 1 s simulated x TIMESCALE 0.05 = 5 s real


def scrape(vd):
    r = vd.request("GET", "/metrics", timeout=15)
    assert r.status == 200, r
    assert r.headers.get("content-type") == "text/plain; version=0.0.4; charset=utf-8", r.headers
    return r.body.decode("utf-8")


def queued_then_leave(vd, body):
    """A request that queues, then its client disconnects (outcome "cancelled")."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", vd.port), timeout=10)
    s.sendall(b"POST /gen/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    vd.wait_queued("gen")
    s.close()
    vd.wait_model("gen", lambda m: m["queue"]["depth"] == 0, what="the cancelled request to leave the queue")


def steady(read_status, read_metrics, pick_status, pick_metrics, tries=20):
    """A figure that may move (NVML polling): read status, metrics, status until both status
    reads agree, then the metrics value must equal them."""
    for _ in range(tries):
        a = pick_status(read_status())
        m = pick_metrics(read_metrics())
        b = pick_status(read_status())
        if a == b:
            return a, m
        time.sleep(0.1)
    pytest.fail("the figure never held still for one scrape")


def test_metrics_follow_requests_and_status(metricsd):
    """Requests that end as ok (one of them rescued by the ladder at level 2 after two OOMs),
    deadline_exceeded (queued past a 500 ms deadline), cancelled (the client left while
    queued), queue_full and deadline_unmeetable: /metrics (parsed strictly) has every SPEC
    family with its type, counts each outcome exactly once, OOMs and degradations per
    level, histogram counts equal to the admitted requests with the slow ones in the upper
    buckets; figures equal /v1/status's (GPU memory, loads, OOMs, degradations, deadline
    rejections, requests). An admin unload is counted with reason "admin" and is not a
    model request."""
    vd = metricsd
    assert vd.generate("gen", {"resolution": 256}).status == 200
    r = vd.generate("gen", {"resolution": 1024})
    assert r.status == 200 and r.headers.get("x-vramd-degrade-level") == "2", r

    slow = vd.later("gen", {"resolution": 256, "steps": SLOW_STEPS})
    vd.wait_in_flight("gen")
    r = vd.generate("gen", {"resolution": 256}, headers={"X-Vramd-Deadline": "500ms"})
    assert r.status == 504 and r.error_body().get("code") == "deadline_exceeded", r
    queued_then_leave(vd, {"resolution": 256})
    waiting = vd.later("gen", {"resolution": 256})
    vd.wait_queued("gen")
    r = vd.generate("gen", {"resolution": 256})
    assert r.status == 503 and r.error_body().get("code") == "queue_full", r
    r = vd.generate("gen", {"resolution": 256}, headers={"X-Vramd-Deadline": "1ms"})
    assert r.status == 503 and r.error_body().get("code") == "deadline_unmeetable", r
    assert not slow.done(), "the slow request ended too early: the outcomes above were not made behind it"
    assert slow.result().status == 200
    assert waiting.result().status == 200
    vd.wait_model("gen", lambda m: m["in_flight"] == 0 and m["queue"]["depth"] == 0)

    e = parse(scrape(vd))
    st = vd.status()
    gen = vd.model("gen", st)
    for name, typ in SPEC_FAMILIES.items():
        assert e.families.get(name, {}).get("type") == typ, (name, e.families.get(name))

    outcomes = {lab["outcome"]: v for lab, v in e.series("vramd_requests_total", model="gen")}
    assert outcomes == {"ok": 4, "deadline_exceeded": 1, "cancelled": 1, "queue_full": 1,
                        "deadline_unmeetable": 1}, outcomes
    assert e.value("vramd_oom_total", model="gen") == 2 == gen["resilience"]["oom_total"]
    degraded = {lab["level"]: v for lab, v in e.series("vramd_degraded_total", model="gen")}
    assert degraded == {"1": 1, "2": 1}, degraded
    assert sum(degraded.values()) == gen["resilience"]["degraded_total"]
    assert e.value("vramd_deadline_rejections_total", model="gen") == 1 == gen["deadline_rejections"]
    # the 500 ms deadline passed while queued: one expiry, stage queued (none while running)
    assert e.value("vramd_deadline_expiries_total", model="gen", stage="queued") == 1 == \
        gen["deadline_expiries"]["queued"]
    assert e.value("vramd_deadline_expiries_total", model="gen", stage="running") == 0 == \
        gen["deadline_expiries"]["running"]
    assert e.value("vramd_model_loads_total", model="gen") == gen["loads_total"] >= 1
    assert e.value("vramd_queue_depth", model="gen") == 0
    assert e.value("vramd_in_flight", model="gen") == 0
    assert e.value("vramd_model_state", model="gen", state="ready") == 1
    assert sum(v for _, v in e.series("vramd_model_state", model="gen")) == 1
    restarts = {lab["reason"]: v for lab, v in e.series("vramd_worker_restarts_total", model="gen")}
    assert restarts == dict.fromkeys(RESTART_REASONS, 0), restarts
    assert {lab["reason"] for lab, _ in e.series("vramd_model_unloads_total", model="gen")} == UNLOAD_REASONS

    # 6 requests entered the queue (4 ok, the expired one, the cancelled one)
    dur = e.histogram("vramd_request_duration_seconds", model="gen")
    wait = e.histogram("vramd_queue_wait_seconds", model="gen")
    assert dur["count"] == 6 == gen["requests_total"], dur
    assert wait["count"] == 6, wait
    assert dict(dur["buckets"])["2.5"] <= 5 and dur["sum"] >= SLOW_STEPS * 0.05, dur
    # the expired request waited >= 0.5 s, the one behind the slow request about 4 s
    assert dict(wait["buckets"])["0.25"] <= 4 and wait["sum"] >= 2.5, wait
    assert [le for le, _ in dur["buckets"]][-1] == "+Inf"

    gpu0 = st["gpus"][0]
    idx = str(gpu0["index"])
    assert e.value("vramd_gpu_memory_total_bytes", gpu=idx) == gpu0["total"]
    assert e.value("vramd_gpu_info", gpu=idx, uuid=gpu0["uuid"], name=gpu0["name"]) == 1
    assert e.value("vramd_nvml_up") == 1
    for fam, key in (("vramd_gpu_memory_reserved_bytes", "reserved"),
                     ("vramd_gpu_memory_used_bytes", "used"),
                     ("vramd_gpu_memory_foreign_bytes", "foreign"),
                     ("vramd_gpu_memory_free_to_admit_bytes", "free_to_admit")):
        want, got = steady(vd.status, lambda: parse(scrape(vd)), lambda s: s["gpus"][0][key],
                           lambda x: x.value(fam, gpu=idx))
        assert got == want, (fam, got, want)
    assert e.value("vramd_gpu_memory_used_bytes", gpu=idx) > 0

    assert {lab["state"] for lab, _ in e.series("vramd_jobs")} == JOB_STATES

    r = vd.post("/v1/models/gen/unload")
    assert r.status == 200, r
    vd.wait_model("gen", lambda m: not m["instances"], what="gen unloaded")
    # /metrics may serve its last exposition again for 10 x what building it took (at most
    # limits.metrics_cache, 1 s): on a loaded machine that was the scrape just before the
    # unload. So the next fresh one is awaited (the unload is in it), not the first one taken.
    e = wait_for(lambda: (lambda x: x if x.value("vramd_model_state", model="gen", state="stopped") == 1 else None)(
        parse(scrape(vd))), timeout=5, what="an exposition built after the unload")
    unloads = {lab["reason"]: v for lab, v in e.series("vramd_model_unloads_total", model="gen")}
    assert unloads["admin"] == 1 and sum(unloads.values()) == 1 == vd.model("gen")["unloads_total"], unloads
    assert e.value("vramd_model_state", model="gen", state="stopped") == 1
    outcomes_after = {lab["outcome"]: v for lab, v in e.series("vramd_requests_total", model="gen")}
    assert outcomes_after == outcomes, "an admin call was counted as a model request"


def test_promtool_check_metrics_passes(metricsd):
    """promtool check metrics (Debian's prometheus package) accepts vramd's exposition with
    no lint problem; the same tool refuses a broken one (so the check can fail)."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not shutil.which(promtool):
        pytest.skip("promtool is not installed (Debian package prometheus; make deps installs it)")
    text = scrape(metricsd)
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.returncode, p.stdout, p.stderr)
    broken = text + "# HELP vramd_broken a counter without _total\n# TYPE vramd_broken counter\nvramd_broken 1\n"
    p = subprocess.run([promtool, "check", "metrics"], input=broken, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, "promtool accepted a counter without _total: the check above proves nothing"
    with pytest.raises(ExpoError):
        parse(broken)


class Prometheus:
    def __init__(self, binary, tmp, target_port):
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: vramd\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=tmp)

    def api(self, path, **params):
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def query(self, promql):
        doc = self.api("/api/v1/query", query=promql)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def test_prometheus_scrapes_vramd(metricsd, tmp_path):
    """A real Prometheus server scrapes vramd every second: its target is "up", and
    /api/v1/query returns vramd_gpu_memory_total_bytes and a request counter with the values
    vramd reports itself; a quantile over the queue-wait histogram evaluates."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not shutil.which(binary):
        pytest.skip("prometheus is not installed (Debian package prometheus; make deps installs it)")
    vd = metricsd
    if not parse(scrape(vd)).series("vramd_requests_total", model="gen", outcome="ok")[0][1]:
        assert vd.generate("gen", {"resolution": 256}).status == 200  # run alone: a counter above 0
    prom = Prometheus(binary, tmp_path, vd.port)
    try:
        def target_up():
            try:
                targets = prom.api("/api/v1/targets")["data"]["activeTargets"]
            except OSError:
                return None
            up = [t for t in targets if t["labels"].get("job") == "vramd" and t["health"] == "up"]
            return up or None

        targets = wait_for(target_up, timeout=40, interval=0.25, what="prometheus to scrape vramd (target up)")
        assert targets[0]["scrapeUrl"] == f"http://127.0.0.1:{vd.port}/metrics", targets

        e = parse(scrape(vd))
        want_total = e.value("vramd_gpu_memory_total_bytes", gpu="0")
        want_ok = e.value("vramd_requests_total", model="gen", outcome="ok")
        result = wait_for(lambda: prom.query('vramd_gpu_memory_total_bytes{gpu="0"}'), timeout=20,
                          interval=0.25, what="vramd_gpu_memory_total_bytes in prometheus")
        assert len(result) == 1 and float(result[0]["value"][1]) == want_total, result
        assert result[0]["metric"]["job"] == "vramd", result
        result = prom.query('vramd_requests_total{model="gen",outcome="ok"}')
        assert len(result) == 1 and float(result[0]["value"][1]) == want_ok > 0, (result, want_ok)
        assert [float(x["value"][1]) for x in prom.query('up{job="vramd"}')] == [1.0]
        q = prom.query('histogram_quantile(0.95, sum by (le, model) (vramd_queue_wait_seconds_bucket))')
        assert len(q) == 1 and q[0]["metric"]["model"] == "gen", q
    finally:
        prom.close()


def test_jobs_by_state(metricsd):
    """vramd_jobs{state} has all five states and follows the journal: a job submitted with
    POST /v1/jobs and run to the end moves the succeeded count up by one, and every state's
    count equals the length of GET /v1/jobs?state=... ."""
    vd = metricsd
    before = parse(scrape(vd))
    assert before.value("vramd_jobs_available") == 1
    assert {lab["state"] for lab, _ in before.series("vramd_jobs")} == JOB_STATES
    r = vd.post("/v1/jobs", {"model": "gen", "path": "/generate", "body": {"resolution": 256}})
    assert r.status == 202, r
    job_id = r.json()["id"]
    wait_for(lambda: vd.request("GET", f"/v1/jobs/{job_id}").json()["state"] == "succeeded", timeout=60,
             what="the job to succeed")
    after = parse(scrape(vd))
    assert after.value("vramd_jobs", state="succeeded") == before.value("vramd_jobs", state="succeeded") + 1
    for state in JOB_STATES:
        listed = vd.request("GET", f"/v1/jobs?state={state}&limit=1000").json()["jobs"]
        assert after.value("vramd_jobs", state=state) == len(listed), (state, listed)
    # the job's attempt went through vramd's front door: one more "ok" for the model
    assert (after.value("vramd_requests_total", model="gen", outcome="ok")
            == before.value("vramd_requests_total", model="gen", outcome="ok") + 1)
