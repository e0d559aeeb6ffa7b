"""Out-of-memory answers and the degradation ladder (SPEC 5).

The worker's real per-request peak is simworker --per-request 16GiB scaled by
--mem-scale resolution:1024:2, on an 8 GiB card where the worker already holds 1.3 GiB
(300 MiB context + 1 GiB resident), so 6.7 GiB is left for a request:
    level 0  resolution 1024 (as sent)   16 GiB   OOM
    level 1  resolution 720              7.9 GiB  OOM
    level 2  resolution 512              4 GiB    fits
The declared per_request (1 GiB) is far too small, so vramd admits level 0 and learns of
the OOM from the worker's answer. --cache release: what an OOM'd attempt allocated goes
back to the GPU at once, so each attempt starts from the same free memory.
Every case ends with faults.check_clean and faults.finish (see test_crashes.py).
"""
from vramdkit import sim_s, wait_for

from .faultkit import instance_pid, resilience

# levels are cumulative (docs/config.md): level 2 = the client's body + level 1's set + level 2's
LADDER = [{"set": {"resolution": 720, "quality": "medium"}}, {"set": {"resolution": 512}}]


def oom_model(faults, name, per_request="16GiB", flags=(), **overrides):
    worker = ["--resident", "1GiB", "--per-request", per_request, "--mem-scale",
              "resolution:1024:2", "--cache", "release", "--run-time", sim_s(1), *flags]
    m = faults.model(name, worker, "1536MiB", "1GiB", **overrides)
    m.setdefault("degrade", {"detect": {"status": [500], "body_matches": "out of memory"},
                             "ladder": LADDER})
    return m


def test_oom_at_levels_0_and_1_succeeds_at_level_2(faults):
    """A JSON request {"resolution": 1024} OOMs (HTTP 500 with PyTorch's text) at level 0
    and level 1 and fits at level 2: expected 200 with X-Vramd-Degrade-Level: 2 and
    X-Vramd-Attempts: 3, the worker saw resolution 512 and level 1's quality "medium" (levels
    are cumulative; simworker echoes the parameters),
    two `oom` events (levels 0 and 1), two request_retry events (reason out of memory,
    levels 1 and 2), resilience oom_total 2 / degraded_total 2, and a raised per-request
    estimate. A form-encoded request (resolution=1024&prompt=...) goes the same way, with
    only the ladder's fields set and the others kept."""
    gpu = faults.gpu_set("8GiB")
    vd = faults.start_vramd(gpu, {"deg": oom_model(faults, "deg")})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    base = faults.baseline(vd)

    r = vd.generate("deg", {"resolution": 1024, "prompt": "a chair"})
    assert r.status == 200, r
    assert r.headers.get("x-vramd-degrade-level") == "2", r.headers
    assert r.headers.get("x-vramd-attempts") == "3", r.headers
    params = r.json()["params"]
    assert params == {"resolution": "512", "quality": "medium", "prompt": "a chair"}, params
    ooms = vd.events("oom", model="deg")
    assert [e["level"] for e in ooms] == [0, 1], ooms
    assert all(e["status"] == 500 for e in ooms), ooms
    retries = vd.events("request_retry", model="deg")
    assert [(e["reason"], e["level"]) for e in retries] == [("out of memory", 1),
                                                           ("out of memory", 2)], retries
    rs = resilience(vd, "deg")
    assert rs["oom_total"] == 2 and rs["degraded_total"] == 2, rs
    assert vd.model("deg")["memory"]["per_request_estimate"] > 1024 ** 3
    wait_for(lambda: len(vd.oom_lines("deg")) >= 2,
             what="the worker's own OOM lines (else the case tested nothing)")

    r = vd.post("/deg/generate", "resolution=1024&prompt=a+table",
                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 200, r
    assert r.headers.get("x-vramd-degrade-level") == "2", r.headers
    assert r.headers.get("x-vramd-attempts") == "3", r.headers
    params = r.json()["params"]
    assert params == {"resolution": "512", "quality": "medium", "prompt": "a table"}, params
    faults.check_clean(vd, base)
    faults.finish()


def test_retry_skips_a_level_that_can_never_fit(faults):
    """The ladder declares level 1 at 20 GiB per request, more than the 8 GiB card can ever
    give: after the OOM at level 0 the retry goes straight to level 2 (`degrade_never_fits`
    for level 1), not into the queue until its deadline. Expected 200 at level 2 after 2
    attempts, one `oom` (level 0)."""
    ladder = [{"set": {"resolution": 720, "quality": "medium"}, "per_request": "20GiB"},
              {"set": {"resolution": 512}, "per_request": "4GiB"}]
    gpu = faults.gpu_set("8GiB")
    m = oom_model(faults, "deg", degrade={"detect": {"status": [500], "body_matches": "out of memory"},
                                          "ladder": ladder})
    vd = faults.start_vramd(gpu, {"deg": m})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    r = vd.generate("deg", {"resolution": 1024, "prompt": "a lamp"}, timeout=30)
    assert r.status == 200, r
    assert r.headers.get("x-vramd-degrade-level") == "2", r.headers
    assert r.headers.get("x-vramd-attempts") == "2", r.headers
    assert r.json()["params"]["resolution"] == "512", r.json()
    assert [e["level"] for e in vd.events("oom", model="deg")] == [0]
    skipped = vd.events("degrade_never_fits", model="deg")
    assert skipped and skipped[0]["level"] == 1, skipped
    faults.finish()


def test_oom_at_every_level_is_503_out_of_memory_with_the_attempts(faults):
    """The real peak is 64 GiB at resolution 1024, so even level 2 (16 GiB) OOMs on the
    8 GiB card: expected 503 out_of_memory whose message names the 3 attempts, three `oom`
    events (levels 0, 1, 2), resilience oom_total 3 / degraded_total 2 (two retries at a
    lower level). The same request again: the same answer (6 OOM'd attempts in a row on
    one worker). An OOM is an answer the worker gave, not a broken worker: without
    recycle.on_oom the instance is not restarted (no worker_recycle; its failed_in_row
    stays 0), and a small request still succeeds afterwards on the same worker."""
    gpu = faults.gpu_set("8GiB")
    vd = faults.start_vramd(gpu, {"deg": oom_model(faults, "deg", per_request="64GiB")})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 64}).status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "deg")

    r = vd.generate("deg", {"resolution": 1024})
    assert r.status == 503, r
    assert r.error_code() == "out_of_memory", r
    msg = r.error_body()["message"]
    assert "3 attempts" in msg, msg
    assert [e["level"] for e in vd.events("oom", model="deg")] == [0, 1, 2]
    rs = resilience(vd, "deg")
    assert rs["oom_total"] == 3 and rs["degraded_total"] == 2, rs

    r = vd.generate("deg", {"resolution": 1024})
    assert r.status == 503 and r.error_code() == "out_of_memory", r
    assert resilience(vd, "deg")["oom_total"] == 6
    assert not vd.events("worker_recycle", model="deg"), vd.events("worker_recycle")
    assert [i["failed_in_row"] for i in vd.instances("deg")] == [0], vd.instances("deg")

    r = vd.generate("deg", {"resolution": 64})
    assert r.status == 200, r
    assert instance_pid(vd, "deg") == pid, "an OOM without recycle.on_oom must not restart"
    faults.check_clean(vd, base)
    faults.finish()


def test_oom_in_the_json200_style(faults):
    """simworker --oom-style json200 answers an OOM as HTTP 200 {"success": false, "error":
    "... torch.OutOfMemoryError: CUDA out of memory ..."} (TRELLIS.2's style); with
    degrade.detect {json: {path: /success, equals: false}, body_matches: "out of memory"}
    expected the same ladder walk: 200 with success true, X-Vramd-Degrade-Level: 2,
    X-Vramd-Attempts: 3, oom events with status 200. A `success: false` answer that is not
    an OOM (model `flaky`: --fail-prob 1, "RuntimeError: simulated failure") is no OOM by
    body_matches: delivered as the worker sent it (200, attempts 1, no degrade header,
    oom_total 0)."""
    detect = {"json": {"path": "/success", "equals": False}, "body_matches": "out of memory"}
    gpu = faults.gpu_set("8GiB")
    models = {
        "deg": oom_model(faults, "deg", flags=["--oom-style", "json200"],
                         degrade={"detect": detect, "ladder": LADDER}),
        "flaky": oom_model(faults, "flaky", per_request="1GiB",
                           flags=["--oom-style", "json200", "--fail-prob", "1"],
                           degrade={"detect": detect, "ladder": LADDER}),
    }
    vd = faults.start_vramd(gpu, models)
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    r = vd.generate("flaky")
    assert r.status == 200 and r.json()["success"] is False, r
    base = faults.baseline(vd)

    r = vd.generate("deg", {"resolution": 1024})
    assert r.status == 200, r
    assert r.json()["success"] is True, r
    assert r.headers.get("x-vramd-degrade-level") == "2", r.headers
    assert r.headers.get("x-vramd-attempts") == "3", r.headers
    ooms = vd.events("oom", model="deg")
    assert [(e["level"], e["status"]) for e in ooms] == [(0, 200), (1, 200)], ooms

    r = vd.generate("flaky", {"resolution": 1024})
    assert r.status == 200, r
    doc = r.json()
    assert doc["success"] is False and "simulated failure" in doc["error"], doc
    assert r.headers.get("x-vramd-attempts") == "1", r.headers
    assert "x-vramd-degrade-level" not in r.headers, r.headers
    assert resilience(vd, "flaky")["oom_total"] == 0
    assert not vd.events("oom", model="flaky")
    faults.check_clean(vd, base)
    faults.finish()


def test_oom_with_recycle_on_oom_retries_on_a_new_worker(faults):
    """recycle.on_oom: true: an OOM at level 0 recycles the instance (worker_recycle with
    reason "out of memory (recycle.on_oom)"), and the retry at level 1 runs on a new
    worker. Ladder of one level (resolution 512, which fits): expected 200 with
    X-Vramd-Degrade-Level: 1 and X-Vramd-Attempts: 2, a new pid, recycles_total 1."""
    gpu = faults.gpu_set("8GiB")
    m = oom_model(faults, "deg", recycle={"on_oom": True},
                  degrade={"detect": {"status": [500], "body_matches": "out of memory"},
                           "ladder": [{"set": {"resolution": 512}}]})
    vd = faults.start_vramd(gpu, {"deg": m})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "deg")

    r = vd.generate("deg", {"resolution": 1024})
    assert r.status == 200, r
    assert r.headers.get("x-vramd-degrade-level") == "1", r.headers
    assert r.headers.get("x-vramd-attempts") == "2", r.headers
    rec = vd.events("worker_recycle", model="deg")
    assert len(rec) == 1 and rec[0]["pid"] == pid, rec
    assert rec[0]["reason"] == "out of memory (recycle.on_oom)", rec
    assert instance_pid(vd, "deg") != pid
    assert resilience(vd, "deg")["recycles_total"] == 1
    faults.check_clean(vd, base)
    faults.finish()
