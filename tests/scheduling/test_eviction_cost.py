"""Cost-aware eviction (issue 13; docs/design.md "Which idle instances are evicted"): of two
idle models that were both used recently, the one that comes back faster is evicted, even when
the other was used longer ago: the return cost is that of the tier the eviction would take
(a wake for a model with sleep/wake hooks), not its load time. Under the old order (least
recently used first), or with load times as the cost, the model that has to reload would go.
"""
from vramdkit import sim_s

from .test_parking import SLEEP, WAKE


def test_the_model_that_returns_faster_is_evicted_not_the_least_recently_used(sched):
    gpu = sched.gpu_set("10GiB")
    models = {
        # a 40 s (simulated) load, no sleep hook: evicting it means a reload
        "slowload": sched.model("slowload", ["--resident", "4GiB", "--per-request", "256MiB",
                                             "--load-time", sim_s(40), "--run-time", sim_s(0.2)],
                                "4.3GiB", "256MiB"),
        # the same 40 s load, but it sleeps and wakes in about a second: evicting it parks it
        "sleeper": sched.model("sleeper", ["--resident", "4GiB", "--per-request", "256MiB",
                                           "--load-time", sim_s(40),
                                           "--run-time", sim_s(0.2), "--sleep-time", sim_s(0.5),
                                           "--wake-time", sim_s(0.5)],
                               "4.3GiB", "256MiB", sleep=SLEEP, wake=WAKE),
        "third": sched.model("third", ["--resident", "4GiB", "--per-request", "256MiB",
                                       "--run-time", sim_s(0.2)], "4.3GiB", "256MiB"),
    }
    vd = sched.start_vramd(gpu, models, host_memory={"budget": "16GiB", "reserve": 0})
    # slowload first, sleeper after: slowload is the least recently used
    assert vd.generate("slowload", timeout=60).status == 200
    assert vd.generate("sleeper", timeout=60).status == 200
    # third needs one of them out. Their loads took the same (2 s: 40 s x 0.05), so by load
    # time they tie and the least recently used, slowload, would go; but evicting sleeper
    # parks it, and its return is a wake (not measured yet: 1 s is assumed), not a reload
    assert vd.generate("third").status == 200
    evictions = [(e["model"], e["for"]) for e in vd.events("eviction")]
    assert evictions == [("sleeper", "third")], evictions
    st = vd.status()
    assert vd.model("slowload", st)["state"] == "ready", vd.model("slowload", st)
    sleeper = vd.instances("sleeper", st)[0]
    assert sleeper["state"] == "parked" and sleeper["tier"] == "sleeping", sleeper
    vd.assert_no_oom()
    sched.finish()
