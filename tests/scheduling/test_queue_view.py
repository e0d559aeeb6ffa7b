"""The visible queue (issue 35; sched/sched_queue.c, serve/queue_api.c): GET /v1/queue, a
queued job's place in GET /v1/jobs/ID, a full queue's Retry-After, `vramctl queue`, and the
swap and expected-wait metrics, over real sockets on the simulated GPU.

The scene of test_swaps.py: models that each need most of a 24 GiB card take turns on it.
Every check compares figures of the same run (positions, expected starts against each other
and against the start the test sees), never a wall-clock rule.
"""
import json
import math
import re
import shutil
import subprocess
import time

import pytest

from vramdkit import sim_s, wait_for
from vramdkit.paths import binary

LOAD_S = 10


def card_model(sched, name, run_s, **over):
    """A model that needs most of the card: 15.5 GiB resident + 2 GiB a request."""
    return sched.model(name, ["--resident", "15.3GiB", "--per-request", "2GiB", "--cache", "release",
                              "--load-time", sim_s(LOAD_S), "--run-time", sim_s(run_s)],
                       "15.5GiB", "2GiB", **over)


def queue(vd, query=""):
    r = vd.get("/v1/queue" + query, timeout=15)
    assert r.status == 200, (r.status, r.body)
    return r.json()


def models_of(doc):
    """{model: (gpu, model part)} of a /v1/queue answer."""
    out = {}
    for g in doc["gpus"]:
        for m in g["models"]:
            out[m["model"]] = (g["gpu"], m)
    return out


def check_model_part(part):
    """Positions 1..n in order, expected starts that never decrease, ends after starts; the
    models here have one slot: each request is expected to start when the one before ends."""
    reqs = part["requests"]
    assert [r["position"] for r in reqs] == list(range(1, len(reqs) + 1)), reqs
    starts = [r["eta_start_ms"] for r in reqs]
    assert starts == sorted(starts), reqs
    for before, r in zip(reqs, reqs[1:]):
        assert r["eta_start_ms"] >= before["eta_done_ms"], reqs
    for r in reqs:
        assert r["eta_done_ms"] >= r["eta_start_ms"] and r["model"] == part["model"], r
        assert r["waited_ms"] >= 0 and r["id"], r


def vramctl(vd, *args):
    p = subprocess.run([str(binary("vramctl")), "--url", f"http://127.0.0.1:{vd.port}", *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_queue_positions_times_and_what_each_waits_for(sched):
    """a holds the card with a queue (2 s runs, real); c waits for its turn behind it
    ("swap": a has work, c's bound is far); a's own queue waits for its slot ("slot"); b
    with a higher priority is due at once and claims the card ("bound"). Positions run
    1..n per model, expected starts never decrease, c starts after a's queue is served."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"a": card_model(sched, "a", 40), "b": card_model(sched, "b", 1),
                                 "c": card_model(sched, "c", 1)})
    for n in ("c", "b", "a"):  # each one's load time is learned; a holds the card
        assert vd.generate(n).status == 200
    futs = [vd.later("a", headers={"X-Request-Id": "a-0"})]
    vd.wait_in_flight("a")
    for i in range(1, 5):  # one after the other: their order is known
        futs.append(vd.later("a", headers={"X-Request-Id": f"a-{i}"}))
        vd.wait_queued("a", i)
    futs += [vd.later("c", headers={"X-Request-Id": f"c-{i}"}) for i in range(2)]
    vd.wait_queued("c", 2)

    doc = queue(vd)
    parts = models_of(doc)
    assert doc["limit"] == 100 and set(parts) == {"a", "c"}, doc
    (ga, a), (gc, c) = parts["a"], parts["c"]
    assert ga == 0 and gc == 0, doc
    check_model_part(a)
    check_model_part(c)
    depth = a["depth"]  # 4, or 3 on a slow machine where a-0 ended while a-4 was sent
    assert depth >= 3 and [r["id"] for r in a["requests"]] == [f"a-{i}" for i in range(5 - depth, 5)], a
    assert {r["waiting_for"] for r in a["requests"]} == {"slot"}, a
    assert c["depth"] == 2 and {r["waiting_for"] for r in c["requests"]} == {"swap"}, c
    # c's turn comes once a has served its queue, and c loads first
    assert c["requests"][0]["eta_start_ms"] >= a["requests"][-1]["eta_done_ms"], (a, c)
    assert a["eta_new_ms"] >= a["requests"][-1]["eta_start_ms"] and a["max_wait_ms"] >= 60000, a
    assert not a["requests"][0]["job"], a

    # a's arrivals stopped: once a run has passed without one, c's turn is expected when a's
    # queue is served (its load after that), not at c's bound as while a's burst arrived
    def c_after_a_drains():
        parts = models_of(queue(vd))
        a_now, c_now = parts["a"][1], parts["c"][1]
        assert a_now["depth"] >= 2, ("a's queue drained before c's estimate followed", c_now)
        first = c_now["requests"][0]["eta_start_ms"]
        return first < 30000 and first >= a_now["requests"][-1]["eta_done_ms"]
    wait_for(c_after_a_drains, timeout=10, interval=0.1, retry=(), what="c's turn expected after a's queue")

    # one model, the limit, the errors
    one = queue(vd, "?model=a&limit=2")
    assert list(models_of(one)) == ["a"] and one["limit"] == 2, one
    a2 = models_of(one)["a"][1]
    assert a2["depth"] >= 2 and len(a2["requests"]) == 2 and a2["eta_new_ms"] > 0, a2
    idle = models_of(queue(vd, "?model=b"))["b"][1]
    assert idle["depth"] == 0 and idle["requests"] == [] and idle["eta_new_ms"] > 0, idle
    r = vd.get("/v1/queue?model=nosuch")
    assert r.status == 404 and r.json()["error"]["code"] == "unknown_model", r.body
    for bad in ("?limit=0", "?limit=1001", "?limit=x", "?color=red"):
        r = vd.get("/v1/queue" + bad)
        assert r.status == 400 and r.json()["error"]["code"] == "bad_request", (bad, r.body)

    # vramctl queue: the table and its JSON
    out = vramctl(vd, "queue")
    lines = out.splitlines()
    assert lines[0] == "GPU 0", out
    head = lines[1].split()
    assert head[:4] == ["MODEL", "ID", "POS", "WAITED"] and "WAITING" in head, out
    rows = [ln.split() for ln in lines[2:] if ln.startswith("  a ") or ln.startswith("  c ")]
    a_rows = [(r[0], r[1], r[2], r[-1]) for r in rows if r[0] == "a"]
    assert a_rows == [("a", f"a-{5 - len(a_rows) + i}", str(i + 1), "slot") for i in range(len(a_rows))], out
    assert [r[-1] for r in rows if r[0] == "c"] == ["swap", "swap"], out
    assert re.search(rf"^  a: {len(a_rows)} waiting; a new request would start in \S+ \(max_wait 1m00s\)$",
                     out, re.M), out
    out = vramctl(vd, "queue", "a", "--limit", "1")
    assert re.search(r"^  a: (\d+) waiting \((\d+) not listed\)", out, re.M) and "c:" not in out, out
    assert models_of(json.loads(vramctl(vd, "queue", "--json")))["c"][1]["depth"] == 2

    # b outranks a: its swap is due at once; b's request waits for the batch ahead ("bound")
    seen = set()
    fb = vd.later("b", headers={"X-Vramd-Priority": "9", "X-Request-Id": "b-0"})

    def b_waits():
        part = models_of(queue(vd, "?model=b"))["b"][1]
        seen.update(r["waiting_for"] for r in part["requests"])
        return "bound" in seen or fb.done()
    wait_for(b_waits, timeout=20, interval=0.02, what="b's request waiting for its due swap")
    assert "bound" in seen and seen <= {"bound", "load"}, seen
    assert fb.result().status == 200
    for f in futs:
        assert f.result().status == 200

    # the swaps counted per GPU and reason, their seconds, the expected wait per model
    text = vd.get("/metrics").body.decode()
    swaps = {m.group(1): float(m.group(2)) for m in
             re.finditer(r'^vramd_swaps_total\{gpu="0",reason="(\w+)"\} (\S+)$', text, re.M)}
    assert set(swaps) == {"idle", "bound", "deadline", "priority", "memory"}, swaps
    assert swaps["priority"] >= 1 and swaps["idle"] >= 1, swaps
    secs = re.search(r'^vramd_swap_seconds_total\{gpu="0"\} (\S+)$', text, re.M)
    assert secs and float(secs.group(1)) > 0, text
    etas = dict(re.findall(r'^vramd_queue_eta_seconds\{model="(\w+)"\} (\S+)$', text, re.M))
    assert set(etas) == {"a", "b", "c"}, etas
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if shutil.which(promtool):
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.stdout, p.stderr)
    vd.assert_no_oom()
    sched.finish()


def test_steady_queue_last_expected_start_is_near_its_real_start(sched):
    """One model, concurrency 1, its run time learned (0.5 s real): 10 requests queued
    behind a running one. The last one's expected start, read once, is within 20 % of when
    it really started (its answer's arrival less its X-Vramd-Run-Ms, on the test's clock)."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"m": card_model(sched, "m", 10)})
    for _ in range(3):  # the run time is learned from these
        assert vd.generate("m").status == 200
    futs = [vd.later("m") for _ in range(10)]
    vd.wait_in_flight("m")
    vd.wait_queued("m", 9)
    last = vd.later("m", headers={"X-Request-Id": "last"})
    vd.wait_queued("m", 10)
    t0 = time.monotonic()
    part = models_of(queue(vd, "?model=m"))["m"][1]
    t_read = (t0 + time.monotonic()) / 2
    check_model_part(part)
    entry = part["requests"][-1]
    assert entry["id"] == "last" and entry["position"] == 10, part
    r = last.result()
    assert r.status == 200, r
    real_start_ms = (r.t_end - t_read) * 1000 - int(r.headers["x-vramd-run-ms"])
    eta = entry["eta_start_ms"]
    print(f"steady queue: last expected start {eta} ms, real {real_start_ms:.0f} ms")
    assert abs(eta - real_start_ms) <= 0.2 * real_start_ms, (eta, real_start_ms, part)
    for f in futs:
        assert f.result().status == 200
    sched.finish()


def test_a_full_queue_says_when_to_retry_from_the_expected_wait(sched):
    """queue_max 2, runs of 2 s (real, learned): a 503 queue_full's Retry-After is the
    expected wait of a new request (GET /v1/queue's eta_new_ms, rounded up to seconds),
    not the old one-second-per-request hint (3 s here)."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"m": card_model(sched, "m", 40, queue_max=2)})
    assert vd.generate("m").status == 200
    futs = [vd.later("m") for _ in range(3)]
    vd.wait_in_flight("m")
    vd.wait_queued("m", 2)
    eta_ms = models_of(queue(vd, "?model=m"))["m"][1]["eta_new_ms"]
    r = vd.generate("m")
    assert r.status == 503 and r.json()["error"]["code"] == "queue_full", r.body
    ra = int(r.headers["retry-after"])
    assert r.json()["error"]["retry_after_s"] == ra
    assert eta_ms > 4000 and math.ceil(eta_ms / 1000) - 1 <= ra <= math.ceil(eta_ms / 1000), (ra, eta_ms)
    for f in futs:
        assert f.result().status == 200
    sched.finish()


def test_a_queued_job_has_its_place_and_expected_times(sched):
    """Five jobs for a busy model (concurrency 1, 2 s runs): the runner hands two at a time
    to vramd; the one whose attempt waits in the model's queue is there at position 1, the
    others wait in the job queue behind it, positions 2, 3, 4, their expected starts in that
    order; a running job has none of these figures."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"m": card_model(sched, "m", 40)})
    assert vd.generate("m").status == 200
    ids = []
    for i in range(5):
        r = vd.post("/v1/jobs", {"model": "m", "path": "/generate", "body": {"n": i}})
        assert r.status == 202, r.body
        ids.append(r.json()["id"])
    vd.wait_queued("m", 1)

    def jobs():
        got = [vd.get(f"/v1/jobs/{i}").json() for i in ids]
        return got if [j["state"] for j in got] == ["running"] + ["queued"] * 4 else None
    got = wait_for(jobs, timeout=20, what="one job running, four queued")
    assert got[0]["position"] is None and got[0]["queued_in"] is None, got[0]
    assert [j["queued_in"] for j in got[1:]] == ["model", "jobs", "jobs", "jobs"], got
    assert [j["position"] for j in got[1:]] == [1, 2, 3, 4], got
    assert got[1]["waiting_for"] == "slot", got[1]
    starts = [j["eta_start_ms"] for j in got[1:]]
    assert starts == sorted(starts) and starts[-1] > starts[1], got
    for i in ids:
        wait_for(lambda: vd.get(f"/v1/jobs/{i}").json()["state"] == "succeeded", timeout=60,
                 what=f"job {i} done")
    sched.finish()
