"""Learning the per-request reservation from NVML (`per_request: learn`).

vramd starts from the declared value and, once a few requests have run alone on an instance,
reserves a high quantile of the measured peaks plus a margin (scheduler.h: p95 of the last 32
samples + 10 %). A declared start that is too low converges up to the truth, one that is too
high converges down, both to within ~15 % above the true peak.
"""
from vramdkit import GiB, MiB, sim_s

TRUE_PEAK = 2 * GiB  # simworker --per-request


def learn_model(sched, name, declared):
    return sched.model(name, ["--resident", "1GiB", "--per-request", "2GiB", "--cache", "release",
                              "--run-time", sim_s(8)],
                       "1.3GiB", declared, memory={"learn": True})


def test_per_request_learn_converges_from_below_and_from_above(sched):
    """Two models on a 24 GiB card, both really using 2 GiB per request: `low` declares
    512 MiB, `high` declares 8 GiB. Before any request each estimate is its declared value;
    after 4 sequential requests each has logged per_request_learned and its estimate lies
    in [true peak, true peak + 15 %]; the status counts the samples."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"low": learn_model(sched, "low", "512MiB"),
                                 "high": learn_model(sched, "high", "8GiB")})
    st = vd.status()
    assert vd.model("low", st)["memory"]["per_request_estimate"] == 512 * MiB
    assert vd.model("high", st)["memory"]["per_request_estimate"] == 8 * GiB
    assert vd.model("low", st)["memory"]["learn"] is True

    for i in range(4):
        for name in ("low", "high"):
            r = vd.generate(name)
            assert r.status == 200, f"{name} request {i + 1}: {r}"

    st = vd.status()
    for name, declared in (("low", 512 * MiB), ("high", 8 * GiB)):
        mem = vd.model(name, st)["memory"]
        est = mem["per_request_estimate"]
        assert mem["samples"] >= 3, mem
        assert TRUE_PEAK <= est <= TRUE_PEAK * 1.15, f"{name}: estimate {est / GiB:.2f} GiB, {mem}"
        learned = vd.events("per_request_learned", model=name)
        assert learned, f"no per_request_learned event for {name}"
        assert learned[0]["samples"] >= 3
    vd.assert_no_oom()
    sched.finish()
