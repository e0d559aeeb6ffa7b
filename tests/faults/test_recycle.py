"""Recycling (SPEC 5): a worker is replaced after recycle.after_requests requests, and when
its measured memory grew by more than recycle.max_growth since its load, always between
requests (in-flight ones finish first), so no request fails because of it.

Every case ends with faults.check_clean and faults.finish (see test_crashes.py).
"""
import re

from vramdkit import request, sim_s, wait_for

from .faultkit import instance_pid, resilience

WORKER = ["--resident", "1GiB", "--per-request", "512MiB", "--run-time", sim_s(1)]


def served_by(vd, model):
    """[(pid, number of requests it finished)] in the order the workers first answered,
    from the workers' own request_done lines in vramd's log."""
    counts = {}
    for e in vd.events("worker_output", model=model):
        if " request_done " in e.get("line", ""):
            counts[e["pid"]] = counts.get(e["pid"], 0) + 1
    return list(counts.items())


def measured_current(vd, model):
    """vramd's last measurement of the model's ready instance equals what the simworker says
    it holds (so vramd has seen its current memory)."""
    for i in vd.instances(model):
        if i["state"] == "ready" and i["in_flight"] == 0:
            r = request(i["port"], "GET", "/status", timeout=5)
            return r.status == 200 and i["measured_bytes"] == r.json()["process"]["held_bytes"]
    return False


def test_memory_growth_past_max_growth_recycles_between_requests(faults):
    """simworker --leak 300MiB keeps 300 MiB more after every request (--cache release: the
    leak is the only growth); recycle.max_growth 500MiB. Requests run one after another
    (the first one starts the worker) until vramd recycles: expected a worker_recycle whose
    reason is "memory grew by N MiB since load" with N > 500, taken with nothing in flight
    (in_flight 0) after at least 2 requests; every request before and after it answers
    200; the next requests run on a new worker (new pid); recycles_total 1."""
    gpu = faults.gpu_set("16GiB")
    m = faults.model("leaky", [*WORKER, "--leak", "300MiB", "--cache", "release"],
                     "1536MiB", "1GiB", recycle={"max_growth": "500MiB"})
    vd = faults.start_vramd(gpu, {"leaky": m})
    r = vd.generate("leaky")
    assert r.status == 200, r
    base = faults.baseline(vd)
    first_pid = instance_pid(vd, "leaky")

    sent = 1
    while not vd.events("worker_recycle", model="leaky") and sent < 12:
        r = vd.generate("leaky")
        assert r.status == 200, (sent, r)
        sent += 1
        # before the next request, let vramd's idle snapshot see what the worker holds now
        # (it recycles in that snapshot when the growth is over the cap)
        wait_for(lambda: (vd.events("worker_recycle", model="leaky") or
                          measured_current(vd, "leaky")),
                 what="vramd measuring the worker's current memory")
    rec = vd.events("worker_recycle", model="leaky")
    assert rec, (f"no recycle after {sent} requests leaking 300 MiB each, vramd measured "
                 f"them all (instances: {vd.instances('leaky')})")
    assert len(rec) == 1, rec
    m_ = re.fullmatch(r"memory grew by (\d+) MiB since load", rec[0]["reason"])
    assert m_ and int(m_.group(1)) > 500, rec
    assert rec[0]["in_flight"] == 0 and rec[0]["pid"] == first_pid, rec
    assert rec[0]["requests"] >= 2, rec

    for _ in range(2):
        r = vd.generate("leaky")
        assert r.status == 200, r
    assert instance_pid(vd, "leaky") != first_pid
    assert resilience(vd, "leaky")["recycles_total"] == 1
    faults.check_clean(vd, base)
    faults.finish()


def test_after_requests_recycles_after_the_third_request(faults):
    """recycle.after_requests 3, seven requests one after another: expected all 200, a
    worker_recycle with reason "after_requests" after requests 3 and 6 (requests field 3,
    in_flight 0), the workers' own logs show three pids serving 3, 3 and 1 requests, and
    recycles_total 2."""
    gpu = faults.gpu_set("16GiB")
    m = faults.model("cycled", WORKER, "1536MiB", "1GiB", recycle={"after_requests": 3})
    vd = faults.start_vramd(gpu, {"cycled": m})
    r = vd.generate("cycled")
    assert r.status == 200, r
    base = faults.baseline(vd)

    for i in range(6):
        r = vd.generate("cycled")
        assert r.status == 200, (i + 2, r)
    rec = vd.events("worker_recycle", model="cycled")
    assert [(e["reason"], e["requests"], e["in_flight"]) for e in rec] == \
        [("after_requests", 3, 0)] * 2, rec
    # the workers' lines reach vramd's log through their stderr pipes, maybe after the answer
    wait_for(lambda: sum(n for _, n in served_by(vd, "cycled")) >= 7,
             what="the workers' request_done lines in vramd's log")
    served = served_by(vd, "cycled")
    assert [n for _, n in served] == [3, 3, 1], served
    assert len({pid for pid, _ in served}) == 3, served
    assert instance_pid(vd, "cycled") == served[-1][0]
    assert resilience(vd, "cycled")["recycles_total"] == 2
    faults.check_clean(vd, base)
    faults.finish()
