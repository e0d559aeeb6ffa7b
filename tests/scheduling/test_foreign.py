"""Foreign memory: GPU memory held by a process vramd does not manage.

vramd measures it through NVML (used minus what its own workers hold), subtracts it from the
capacity it admits requests against, and gives the memory back to its own requests once the
foreign process is gone.
"""
from vramdkit import GiB, HEADROOM, run_threads, sim_s, wait_for

from .schedkit import Watch

TOTAL = 24 * GiB
FOREIGN = 10 * GiB


def burst(vd, n=6):
    with Watch(vd) as watch:
        replies = run_threads([lambda: vd.generate("m") for _ in range(n)])
    assert [r.status for r in replies] == [200] * n, replies
    assert not watch.problems, watch.problems[:5]
    return watch


def test_foreign_usage_shrinks_capacity_and_requests_still_succeed(sched):
    """24 GiB card; model m: 3 GiB resident, 4 GiB per request, concurrency 4. Alone, 4
    requests run at once. A `simgpu alloc` of 10 GiB appears while vramd serves: status
    shows foreign >= 10 GiB and capacity = total - headroom - foreign; 6 concurrent requests
    all succeed with no OOM, never more than 2 at once (3 + 2 x 4 + 10 <= 23.9 GiB; 4 at
    once would need 29 GiB and OOM the worker). When the foreign process ends, foreign
    drops to 0, capacity returns, and 4 requests run at once again."""
    gpu = sched.gpu_set("24GiB")
    model = sched.model("m", ["--resident", "2.7GiB", "--per-request", "4GiB", "--cache", "release",
                              "--run-time", sim_s(10), "--contention", "0"], "3GiB", "4GiB",
                        concurrency=4)
    vd = sched.start_vramd(gpu, {"m": model})
    assert vd.generate("m").status == 200  # load it

    alone = burst(vd)
    assert alone.max_requests_model.get("m") == 4, alone.max_requests_model
    assert alone.max_foreign.get(0, 0) == 0

    # the foreign process arrives while a request runs
    running = vd.later("m")
    vd.wait_in_flight("m")
    holder = sched.alloc(gpu, FOREIGN, hold="10m")
    g = wait_for(lambda: [g for g in vd.gpus() if g["foreign"] >= FOREIGN],
                 what="status showing the foreign allocation")[0]
    assert g["capacity"] == TOTAL - HEADROOM - g["foreign"], g
    assert g["capacity"] <= TOTAL - HEADROOM - FOREIGN
    assert running.result().status == 200

    shared = burst(vd)
    assert shared.max_requests_model.get("m") <= 2, shared.max_requests_model
    assert shared.max_requests_model.get("m") >= 1
    assert min(shared.min_capacity.values()) <= TOTAL - HEADROOM - FOREIGN
    vd.assert_no_oom("m")

    holder.end()
    g = wait_for(lambda: [g for g in vd.gpus() if g["foreign"] == 0], what="foreign back to 0")[0]
    assert g["capacity"] == TOTAL - HEADROOM, g
    again = burst(vd)
    assert again.max_requests_model.get("m") == 4, again.max_requests_model
    vd.assert_no_oom("m")
    sched.finish()
