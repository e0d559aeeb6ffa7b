"""Per-request memory learned per class of request (docs/design.md, "Per-request estimates").

The worker's real per-request peak is simworker --per-request 16GiB scaled by
--mem-scale resolution:1024:2 (resolution 256: 1 GiB, 512: 4 GiB, 1024: 16 GiB) on an 8 GiB
card where the worker holds 300 MiB of context + 1 GiB resident. A request at resolution 1024
runs out of memory at level 0 and fits at level 1 (the ladder sets resolution 512).

Before the estimate was kept per class, one OOM burst raised the model's one estimate
towards the whole card, for good: a small request then booked gigabytes it never used and
the model ran one request at a time with nothing beside it.
"""
from vramdkit import sim_s, wait_for

from .faultkit import resilience

GiB = 1024 ** 3
LADDER = [{"set": {"resolution": 512}}]


def estimate_model(faults, name, memory):
    worker = ["--resident", "1GiB", "--per-request", "16GiB", "--mem-scale", "resolution:1024:2",
              "--cache", "release", "--run-time", sim_s(0.4)]
    m = faults.model(name, worker, "1536MiB", "1GiB", memory=memory)
    m["degrade"] = {"detect": {"status": [500], "body_matches": "out of memory"}, "ladder": LADDER}
    return m


def classes(vd, name, level):
    return {c["size_class"]: c for c in vd.model(name)["memory"]["classes"] if c["level"] == level}


def booked_while_running(vd, body, name="deg"):
    """Send body and sample the GPU's request reservations while it runs: the most seen."""
    import threading
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


def test_a_raised_estimate_falls_again_as_requests_succeed(faults):
    """A model that declares no size field has one class per level: one OOM at level 0
    raises it (every level-0 request now books more), and successes at level 0 bring it
    back to the declared 1 GiB (per_request_lowered events), not leaving it raised until a
    restart."""
    gpu = faults.gpu_set("8GiB")
    vd = faults.start_vramd(gpu, {"deg": estimate_model(faults, "deg", {})})
    vd.allow_oom.add("deg")
    assert vd.generate("deg", {"resolution": 256}).status == 200
    r = vd.generate("deg", {"resolution": 1024})
    assert r.status == 200 and r.headers.get("x-vramd-degrade-level") == "1", r
    raised = classes(vd, "deg", 0)[0]["estimate"]
    assert raised > 2 * GiB, raised
    for _ in range(60):
        assert vd.generate("deg", {"resolution": 256}).status == 200
        if classes(vd, "deg", 0)[0]["estimate"] == GiB:
            break
    assert classes(vd, "deg", 0)[0]["estimate"] == GiB, classes(vd, "deg", 0)
    lowered = vd.events("per_request_lowered", model="deg")
    assert len(lowered) >= 2 and lowered[-1]["to"] == GiB, lowered
    wait_for(lambda: vd.model("deg")["memory"]["per_request_estimate"] == GiB,
             what="the status estimate back at the declared 1 GiB")
    faults.finish()

