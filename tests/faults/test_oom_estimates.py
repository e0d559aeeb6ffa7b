"""Per-request memory learned per class of request (docs/design.md, "Per-request estimates").

The worker's real per-request peak is simworker --per-request 16GiB scaled by
--mem-scale resolution:1024:2 (resolution 256: 1 GiB, 512: 4 GiB, 1024: 16 GiB) on an 8 GiB
card where the worker holds 300 MiB of context + 1 GiB resident. A request at resolution 1024
runs out of memory at level 0 and fits at level 1 (the ladder sets resolution 512).

Before the estimate was kept per class, one OOM burst raised the model's one estimate
towards the whole card, for good: a small request then booked gigabytes it never used and
the model ran one request at a time with nothing beside it.
"""
import threading

from vramdkit import sim_s

from .faultkit import resilience

GiB = 1024 ** 3
LADDER = [{"set": {"resolution": 512}}]


def estimate_model(faults, name, memory):
    worker = ["--resident", "1GiB", "--per-request", "16GiB", "--mem-scale", "resolution:1024:2",
              "--cache", "release", "--run-time", sim_s(4)]
    m = faults.model(name, worker, "1536MiB", "1GiB", memory=memory)
    m["degrade"] = {"detect": {"status": [500], "body_matches": "out of memory"}, "ladder": LADDER}
    return m


def classes(vd, name, level):
    return {c["size_class"]: c for c in vd.model(name)["memory"]["classes"] if c["level"] == level}


def booked_while_running(vd, body, name="deg"):
    """Send body and sample the GPU's request reservations while it runs: the most seen."""
    most = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            for g in vd.status()["gpus"]:
                most[0] = max(most[0], g["reserved_requests"])
    t = threading.Thread(target=sample)
    t.start()
    try:
        r = vd.generate(name, body)
    finally:
        done.set()
        t.join()
    assert r.status == 200, r
    return most[0]


def test_an_oom_burst_at_a_large_input_leaves_small_requests_booking_what_they_use(faults):
    """Small requests (resolution 256, 1 GiB real) are measured first; then 20 requests at
    resolution 1024 each OOM at level 0 (and succeed at level 1). Expected: the level-0 class
    of resolution 1024 is raised (its OOM floor, several GiB); the class of resolution 256 is
    not: a small request afterwards books within 2x of what it really uses (measured while it
    runs from the GPU's request reservations), and every request still succeeds."""
    gpu = faults.gpu_set("8GiB")
    mem = {"learn": True, "size_field": "/resolution"}
    vd = faults.start_vramd(gpu, {"deg": estimate_model(faults, "deg", mem)})
    vd.allow_oom.add("deg")
    for _ in range(4):
        assert vd.generate("deg", {"resolution": 256}).status == 200
    before = booked_while_running(vd, {"resolution": 256})
    assert 0 < before <= 2 * GiB, before

    for _ in range(20):
        r = vd.generate("deg", {"resolution": 1024})
        assert r.status == 200, r
        assert r.headers.get("x-vramd-degrade-level") == "1", r.headers
    assert resilience(vd, "deg")["oom_total"] >= 20
    level0 = classes(vd, "deg", 0)
    large = max(level0.values(), key=lambda c: c["size_class"])
    assert large["ooms"] >= 20 and large["oom_floor"] >= 4 * GiB, level0
    raised = vd.events("per_request_raised", model="deg")
    assert raised and all(e["level"] == 0 and e["size_class"] == large["size_class"] for e in raised), raised

    after = booked_while_running(vd, {"resolution": 256})
    assert 0 < after <= 2 * GiB, (after, level0)
    assert after <= 2 * before, (before, after)
    # the status's per_request_estimate is the most a level-0 request may book now
    assert vd.model("deg")["memory"]["per_request_estimate"] >= 4 * GiB
    faults.finish()


def test_a_raised_estimate_falls_again_as_its_class_is_measured(faults):
    """Two requests at resolution 512 (4 GiB real each, declared 1 GiB) run at once on the
    6.7 GiB left: one runs out of memory (and succeeds at level 1, resolution 256), which
    raises the level-0 class of resolution 512. Later requests of that class run alone under
    the raise and are measured at about 4 GiB: every 4 successes halve the raise towards the
    measured figure (per_request_lowered events), until the class books what it measured,
    not what the OOM guessed. Two at once then queue behind each other: no new OOM."""
    gpu = faults.gpu_set("8GiB")
    mem = {"learn": True, "size_field": "/resolution"}
    m = estimate_model(faults, "deg", mem)
    m["concurrency"] = 2
    m["degrade"]["ladder"] = [{"set": {"resolution": 256}}]
    vd = faults.start_vramd(gpu, {"deg": m})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    both = [None, None]

    def send(i):
        both[i] = vd.generate("deg", {"resolution": 512})
    ts = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(r.status == 200 for r in both), both
    assert resilience(vd, "deg")["oom_total"] == 1, resilience(vd, "deg")
    cls = [c for c in classes(vd, "deg", 0).values() if c["ooms"] == 1]
    assert len(cls) == 1, classes(vd, "deg", 0)
    size_class = cls[0]["size_class"]
    raised = cls[0]["estimate"]
    assert raised > 5 * GiB, cls

    def now():
        return classes(vd, "deg", 0)[size_class]
    for _ in range(80):
        r = vd.generate("deg", {"resolution": 512})
        assert r.status == 200 and r.headers.get("x-vramd-degrade-level") in (None, "0"), r
        c = now()
        if c["oom_floor"] == 0 or c["estimate"] <= c["learned"]:
            break
    c = now()
    assert c["samples"] >= 3 and 4 * GiB <= c["learned"] <= 5 * GiB, c
    assert c["estimate"] == c["learned"], c
    lowered = [e for e in vd.events("per_request_lowered", model="deg") if e["size_class"] == size_class]
    assert len(lowered) >= 2 and lowered[-1]["to"] == c["learned"], lowered

    for t in (ts := [threading.Thread(target=send, args=(i,)) for i in range(2)]):
        t.start()
    for t in ts:
        t.join()
    assert all(r.status == 200 for r in both), both
    assert resilience(vd, "deg")["oom_total"] == 1, "the measured class ran out of memory again"
    faults.finish()
