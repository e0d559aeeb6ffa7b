"""The driver's per-cgroup limits (nvmlDeviceSetMemoryLimits_v1, driver r615+) on vramd's
workers, on the simulated NVML (which has them when SIMGPU_DRIVER_LIMITS=1 is in vramd's
environment, and enforces them in simgpu: an allocation past its cgroup's hard limit fails
with CUDA_ERROR_OUT_OF_MEMORY). docs/shim.md, "The driver's limits".

What each case expects (workers in cgroup v2 leaves; skipped where this machine cannot make
one):
  - the limit is set on the worker's leaf before the worker runs (driver_limit_set is logged
    before worker_started), follows the booking: raised before a request reaches the worker
    (to resident + the request's reservation), lowered once it ended; reset before the leaf
    is removed (the simulated driver counts a limit whose cgroup vanished while set: 0);
  - a worker that allocates past what vramd booked for it fails in that worker alone (its
    OOM, with its card half empty), while its neighbour's request is answered;
  - with the CUDA shim as well, both agree: the under-declared worker's ask is granted and
    the limit raised before the answer, so the allocation passes; limit = booking = the
    shim's grant + its context;
  - a driver slow to answer: after 2 s nothing waits for it (the worker starts, requests
    run), and the limit follows again once it answered;
  - vramd SIGKILLed with a limit set and started again: the guard sweeps the leaf (its limit
    goes with it), the new vramd's worker gets its own limit on the leaf made anew;
  - a driver without the calls (the variable unset: driver 580): no limit, status says why,
    the worker serves.
"""
import os
import signal

import pytest

from vramdkit import cgroup_usable, sim_s, wait_for
from vramdkit.paths import build_dir

GiB = 1024 ** 3
MiB = 1024 ** 2
LIMITS = {"SIMGPU_DRIVER_LIMITS": "1"}


@pytest.fixture(autouse=True)
def _needs_v2():
    if not cgroup_usable("v2"):
        pytest.skip("no writable cgroup v2 hierarchy here: the driver's limits go on a worker's v2 leaf")


def model(sched, name, resident, per_request, flags, declared_resident, declared_per_request, **overrides):
    worker = ["--resident", resident, "--per-request", per_request, "--cache", "release", *flags]
    return sched.model(name, worker, declared_resident, declared_per_request, **overrides)


def start(sched, gpu, models, env=LIMITS):
    return sched.start_vramd(gpu, models, extra_env=dict(env), gpu={"driver_limits": "auto"}, cgroup={"mode": "v2"})


def load(vd, name):
    r = vd.post(f"/v1/models/{name}/load", timeout=60)
    assert r.status == 200, r
    vd.wait_ready(name)


def limit_of(vd, name):
    insts = vd.instances(name)
    return insts[0].get("driver_limit") if insts else None


def sim_limits(sched, gpu):
    st = sched.show(gpu)
    return st["gpus"][0]["limits"], st["limits_dropped"]


def test_limit_set_before_start_follows_requests_and_is_reset_before_the_leaf_goes(sched):
    gpu = sched.gpu_set("16GiB")
    models = {"w": model(sched, "w", "2GiB", "4GiB", ["--run-time", sim_s(40)], "2560MiB", "4GiB")}
    vd = start(sched, gpu, models)
    load(vd, "w")
    set_ev = vd.events("driver_limit_set", model="w")
    started = vd.events("worker_started", model="w")
    assert set_ev and started, (set_ev, started)
    assert set_ev[0]["_i"] < started[0]["_i"], "the worker ran before its limit was set"
    # while it loaded: its booking plus the card's free room; ready and idle: the booking
    # (resident entry), on the worker's leaf
    assert set_ev[0]["bytes"] > 12 * GiB, set_ev[0]
    dl = wait_for(lambda: (lambda d: d if d and d["state"] == "set" and d["limit_bytes"] == d["target_bytes"]
                           and d["limit_bytes"] < 6 * GiB else None)(limit_of(vd, "w")),
                  timeout=10, what="the limit settled on the booking")
    inst = vd.instances("w")[0]
    assert dl["cgroup"].endswith(inst["cgroup"]), (dl, inst["cgroup"])
    limits, dropped = sim_limits(sched, gpu)
    assert len(limits) == 1 and limits[0]["cgroup"] == dl["cgroup"], limits
    rest = limits[0]["hard"]
    assert 2 * GiB <= rest < 6 * GiB, rest
    # a request: raised to resident + its 4 GiB before it reached the worker
    h = vd.later("w", {"n": 1})
    vd.wait_in_flight("w")
    wait_for(lambda: vd.instances("w")[0]["measured_bytes"] > 5 * GiB, timeout=30, what="the request's 4 GiB")
    limits, _ = sim_limits(sched, gpu)
    assert limits[0]["hard"] >= rest + 4 * GiB, (limits, rest)
    assert limits[0]["used"] <= limits[0]["hard"], limits
    assert h.result().status == 200
    # ended: lowered again (lazily, DRIVER_LIMIT_LOWER_MS)
    wait_for(lambda: sim_limits(sched, gpu)[0][0]["hard"] < rest + 4 * GiB, timeout=10,
             what="the limit lowered after the request")
    # unloaded: reset, then the leaf removed (a limit whose leaf went first would be counted)
    r = vd.post("/v1/models/w/unload", timeout=60)
    assert r.status in (200, 202), r
    wait_for(lambda: not vd.instances("w"), timeout=30, what="the instance gone")
    wait_for(lambda: vd.events("driver_limit_reset", model="w"), timeout=10, what="the reset")
    limits, dropped = sim_limits(sched, gpu)
    assert limits == [] and dropped == 0, (limits, dropped)
    st = vd.status()["nvml"]["driver_limits"]
    assert st["available"] and st["sets"] >= 3 and st["resets"] == 1 and st["failures"] == 0, st
    sched.finish()


def test_allocation_past_the_limit_fails_in_that_worker_alone(sched):
    """under: 2 GiB + 6 GiB per request, declared 1 GiB per request. honest: 2 GiB + 4 GiB,
    declared so. The 24 GiB card has room for both at their real sizes, so without the limit
    nobody would fail: under's request is refused by its own limit (resident + 1 GiB), and
    honest's request, running at the same time, is answered with no OOM."""
    gpu = sched.gpu_set("24GiB")
    models = {
        "honest": model(sched, "honest", "2GiB", "4GiB", ["--run-time", sim_s(60)], "2560MiB", "4GiB"),
        "under": model(sched, "under", "2GiB", "6GiB", ["--run-time", sim_s(4)], "2560MiB", "1GiB"),
    }
    vd = start(sched, gpu, models)
    vd.allow_oom.add("under")
    load(vd, "honest")
    load(vd, "under")
    h = vd.later("honest", {"n": 1})
    vd.wait_in_flight("honest")
    ru = vd.generate("under", {"n": 2})
    assert ru.status in (500, 503), ru
    assert b"out of memory" in ru.body.lower(), ru.body[:500]
    st = sched.show(gpu)["gpus"][0]
    assert st["free"] > 8 * GiB, f"the card was full ({st['free']} free): the OOM proves nothing"
    assert h.result().status == 200
    vd.assert_no_oom("honest")
    sched.finish()


def test_limit_and_shim_agree(sched):
    """The under-declared worker with the shim: its allocations past the grant ask, are
    granted (the card has room), and the driver's limit is raised before the GRANT is sent:
    the request is 200 with no OOM; during it the limit equals the booking, which is the
    shim's grant plus its context."""
    lib = str(build_dir() / "lib" / "libvramd-cuda.so")
    if not os.path.exists(lib):
        pytest.fail(f"{lib} not built")
    gpu = sched.gpu_set("24GiB")
    models = {"under": model(sched, "under", "2GiB", "6GiB", ["--run-time", sim_s(40)], "2560MiB", "1GiB",
                             cuda_shim="auto", grant_wait="30s")}
    vd = start(sched, gpu, models, env={**LIMITS, "VRAMD_CUDA_SHIM_LIBRARY": lib})
    load(vd, "under")
    wait_for(lambda: (vd.instances("under")[0].get("shim") or {}).get("state") == "attached", timeout=30,
             what="the shim attached")
    h = vd.later("under", {"n": 1})
    vd.wait_in_flight("under")
    wait_for(lambda: vd.instances("under")[0]["shim"]["live_bytes"] >= 8 * GiB, timeout=30,
             what="the request's 6 GiB through the shim")

    def agreed():
        inst = vd.instances("under")[0]
        s, d = inst["shim"], inst["driver_limit"]
        return d["limit_bytes"] == d["target_bytes"] and d["limit_bytes"] == s["grant_bytes"] + s["context_bytes"] \
            and (s, d)
    s, d = wait_for(agreed, timeout=10, what="limit == booking == grant + context")
    assert d["limit_bytes"] >= 8 * GiB, d
    assert s["granted"] >= 1 and s["refused"] == 0, s
    assert h.result().status == 200
    sched.finish()


def test_a_driver_slow_to_answer_holds_nothing_for_long(sched):
    """The driver takes 6 s to answer the first limit (the one set before the worker starts).
    After 2 s (DRIVER_LIMIT_WAIT_MS) vramd logs driver_limit_stuck and starts the worker
    without waiting longer; a request meanwhile is answered, not held; once the driver
    answers, the limit follows the booking again. The GPU figures stay fresh all along (the
    limit call does not hold the reads' lock)."""
    gpu = sched.gpu_set("16GiB")
    models = {"w": model(sched, "w", "2GiB", "2GiB", ["--run-time", sim_s(1)], "2560MiB", "2GiB")}
    vd = start(sched, gpu, models, env={**LIMITS, "SIMGPU_NVML_LIMIT_DELAY_MS": "6000",
                                        "SIMGPU_NVML_LIMIT_DELAY_CALLS": "1"})
    load(vd, "w")
    stuck = vd.events("driver_limit_stuck", model="w")
    started = vd.events("worker_started", model="w")
    assert stuck and started and stuck[0]["_i"] < started[0]["_i"], (stuck, started)
    assert limit_of(vd, "w")["state"] == "stuck", limit_of(vd, "w")
    assert not vd.status()["nvml"]["stale"], "a limit call in the driver made the GPU figures stale"
    assert vd.generate("w", {"n": 1}).status == 200
    wait_for(lambda: limit_of(vd, "w")["state"] == "set" and limit_of(vd, "w")["limit_bytes"] < 6 * GiB,
             timeout=20, what="the limit following the booking once the driver answered")
    assert vd.generate("w", {"n": 2}).status == 200
    sched.finish()


def test_vramd_killed_with_limits_set_and_started_again(sched):
    """vramd is SIGKILLed while its worker's leaf has a limit: its guard kills the worker and
    sweeps the leaf, and removing the cgroup clears the limit (NVIDIA's documented rule; the
    simulated driver counts it dropped). A vramd started again on the same state_dir makes the
    same leaf name anew: it gets a new limit (the old one is not inherited), and serves."""
    gpu = sched.gpu_set("16GiB")
    models = {"w": model(sched, "w", "2GiB", "2GiB", ["--run-time", sim_s(20)], "2560MiB", "2GiB")}
    state = str(sched.tmp / "var-shared")
    vd = sched.start_vramd(gpu, models, extra_env=dict(LIMITS), gpu={"driver_limits": "auto"}, cgroup={"mode": "v2"},
                           state_dir=state)
    load(vd, "w")
    first = wait_for(lambda: (lambda d: d if d and d["state"] == "set" else None)(limit_of(vd, "w")), timeout=10,
                     what="the first vramd's limit")
    pending = vd.later("w", {"n": 1})
    vd.wait_in_flight("w")
    old_pids = vd.worker_pids("w")
    vd.signal(signal.SIGKILL)
    vd.wait_exit(10)
    vd.stopped = True
    pending.result()
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in old_pids), timeout=20,
             what="the old worker gone with its vramd")
    wait_for(lambda: not os.path.isdir(first["cgroup"]), timeout=20, what="the old leaf swept")
    limits, dropped = sim_limits(sched, gpu)
    assert limits == [] and dropped == 1, (limits, dropped)
    vd2 = sched.start_vramd(gpu, models, extra_env=dict(LIMITS), gpu={"driver_limits": "auto"}, cgroup={"mode": "v2"},
                            state_dir=state)
    load(vd2, "w")
    second = wait_for(lambda: (lambda d: d if d and d["state"] == "set" and d["limit_bytes"] < 6 * GiB else None)(
        limit_of(vd2, "w")), timeout=10, what="the second vramd's limit")
    assert second["cgroup"] == first["cgroup"], (first, second)  # the same leaf name, made anew
    limits, _ = sim_limits(sched, gpu)
    assert len(limits) == 1 and limits[0]["hard"] == second["limit_bytes"], limits
    assert vd2.generate("w", {"n": 2}).status == 200
    sched.finish()


def test_driver_without_limits(sched):
    gpu = sched.gpu_set("16GiB")
    models = {"w": model(sched, "w", "2GiB", "2GiB", ["--run-time", sim_s(1)], "2560MiB", "2GiB")}
    vd = start(sched, gpu, models, env={})
    load(vd, "w")
    st = vd.status()["nvml"]["driver_limits"]
    assert not st["available"] and "support" in st["reason"], st
    assert limit_of(vd, "w") is None
    assert vd.generate("w", {"n": 1}).status == 200
    assert sim_limits(sched, gpu)[0] == []
    sched.finish()
