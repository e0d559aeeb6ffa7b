"""A request whose client leaves while the worker runs it (memory.cancelled_hold).

vramd closes the worker's connection, but a Python model server does not notice: it runs
the request to its end, with its memory (simworker does the same). That memory stays
booked on the instance, and NVML readings cannot tell it from the allocator's idle cache.
Lent as cache to the instance's next request, the worker would need it twice: an OOM
vramd could have prevented. With cancelled_hold (auto: twice the learned run time from the
dispatch) the next request books fresh memory, or waits for the hold to end.

`gen` on a 24 GiB card: 6 GiB resident, 11.5 GiB per request (4 s, kept cached), two at
once allowed: after a warm-up its process holds 6.3 + 11.5 GiB cached, and two requests
at once (29.3 GiB) do not fit.
"""
import json
import time

from vramdkit import TIMESCALE, RawConn, build_request, sim_s, wait_for

GiB = 1 << 30
RUN_S = 40  # simulated: 2 s at the tests' timescale


def _start(sched, **memory):
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "gen": sched.model("gen", ["--resident", "5.7GiB", "--per-request", "11.5GiB", "--cache", "keep",
                                   "--run-time", sim_s(RUN_S), "--time-scale", "steps:1:1"], "6GiB", "11.5GiB",
                           concurrency=2, memory=memory),
    })
    assert vd.generate("gen").status == 200  # warm-up: the run time is learned, 11.5 GiB cached
    wait_for(lambda: vd.instances("gen")[0]["reserved_bytes"] >= 17 * GiB and
             vd.instances("gen")[0]["in_flight"] == 0, what="gen booked with its cache")
    return vd


def _leave_while_running(vd, steps=1, after=0.4):
    """A request (`steps` x the usual run) whose client leaves at `after` x the usual run
    (past 30 % of its own run: the worker has taken all its memory); returns when vramd let
    go of it."""
    c = RawConn(vd.port)
    c.send(build_request("POST", "/gen/generate", {"Content-Type": "application/json"},
                         json.dumps({"steps": steps})))
    wait_for(lambda: vd.instances("gen")[0]["in_flight"] == 1, what="the request on the worker")
    time.sleep(after * RUN_S * TIMESCALE)
    c.close()
    wait_for(lambda: vd.first("request_cancelled", model="gen"), what="vramd letting go of the request")
    time.sleep(0.2)  # a few readings (poll 50 ms): the worker's memory is measured, not assumed


def test_a_request_left_running_is_not_lent_as_cache(sched):
    """After the client left, the instance shows the memory held back
    (cancelled_held_bytes = the request's 11.5 GiB, event cancelled_hold); the next request
    waits for the hold instead of taking that memory as cache, succeeds, and the worker
    never runs out of memory; the hold then ends (cancelled_hold_end) and nothing stays
    held; the model's status and /metrics count one hold, of twice the learned run time."""
    vd = _start(sched)
    _leave_while_running(vd)
    ev = vd.first("cancelled_hold", model="gen")
    assert ev and ev["bytes"] >= 11 * GiB, ev
    assert vd.instances("gen")[0]["cancelled_held_bytes"] >= 11 * GiB
    r = vd.generate("gen")
    assert r.status == 200, r
    vd.assert_no_oom()
    assert vd.first("cancelled_hold_end", model="gen")
    assert vd.instances("gen")[0]["cancelled_held_bytes"] == 0
    mem = vd.model("gen")["memory"]
    assert mem["cancelled_holds_total"] == 1 and mem["cancelled_hold_ms"] >= 2 * RUN_S * TIMESCALE * 1000, mem
    assert 'vramd_cancelled_holds_total{model="gen"} 1' in vd.get("/metrics").body.decode()
    sched.finish()


def test_a_request_that_overran_is_held_from_its_cancel(sched):
    """A request 2.5 times the usual length (5 s where 2 s was learned) whose client gives
    up at 4.5 s, past the 4 s the hold gives from its dispatch: it still runs, so it is held
    for half the hold from the cancel (2 s, past its real end at 5 s), and the next request
    waits for it instead of running out of memory."""
    vd = _start(sched)
    _leave_while_running(vd, steps=2.5, after=2.25)
    ev = vd.first("cancelled_hold", model="gen")
    assert ev and ev["bytes"] >= 11 * GiB and ev["until_ms"] >= 1500, ev
    r = vd.generate("gen")
    assert r.status == 200, r
    vd.assert_no_oom()
    sched.finish()


def test_without_the_hold_the_worker_runs_out_of_memory(sched):
    """The control: with memory.cancelled_hold 0 the next request is lent the cached memory
    the abandoned request still uses, and the worker runs out of memory (what the hold
    prevents)."""
    vd = _start(sched, cancelled_hold="0")
    _leave_while_running(vd)
    assert not vd.first("cancelled_hold")
    vd.generate("gen")  # an OOM answer; the worker's output says why
    assert vd.oom_lines("gen"), "the worker did not run out of memory: the scene did not happen"
    vd.allow_oom.add("gen")
    sched.finish()
