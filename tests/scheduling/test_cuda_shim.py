"""vramd in the allocation path: the CUDA shim (libvramd-cuda.so) in simworkers on a simulated
GPU, through the same driver calls a real GPU takes (simworker allocates through the CUDA
driver API of libcuda-sim.so; the shim cannot tell it from the real driver). docs/shim.md.

What each case expects:
  - an under-declared worker beside an honest one on one card: its allocations past its
    grant wait while the other's request holds the card, and proceed when it ends: both
    requests 200, no OOM anywhere, the shim's `waited` > 0 and `refused` 0;
  - the same with the other busy past grant_wait: the excess is refused in the
    under-declared worker alone (its request fails with an OOM, the honest one is 200 with no
    OOM in its output), `shim_refused reason=no_room`;
  - an under-declared worker beside an idle one: its ask has the idle one evicted, logged
    with reason "shim grant";
  - two under-declared workers waiting for each other's memory: the younger request's ask is
    refused at once (`reason=deadlock`, long before grant_wait), the older one proceeds;
  - the dlopen+dlsym path and the cuGetProcAddress path (as the CUDA runtime resolves the
    driver): the shim attaches and counts the worker's bytes exactly (live bytes = what the
    worker allocated through the driver);
  - a worker that sizes a cache from cuMemGetInfo (vLLM's --gpu-memory-utilization) takes its
    grant's share, not the card's;
  - a shim that cannot reach vramd (the socket gone) leaves the worker running unchecked
    (`detached`), and the request is answered;
  - `cuda_shim: required` without the library: the worker is not started, with the reason;
  - a worker whose shim breaks the protocol is killed and restarted; vramd stays up;
  - vramd SIGKILLed under load and started again: its workers went with it (the guard), the
    new vramd's workers attach to its new socket and serve.
"""
import os
import signal
import time

import pytest

from vramdkit import sim_s, wait_for
from vramdkit.paths import PYTHON, shim_library

GiB = 1024 ** 3
MiB = 1024 ** 2
BAD_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_shim_worker.py")


shim_lib = shim_library


@pytest.fixture(autouse=True)
def _needs_shim():
    if not os.path.exists(shim_lib()):
        pytest.fail(f"{shim_lib()} not built")


def shim_env():
    return {"VRAMD_CUDA_SHIM_LIBRARY": shim_lib()}


def sim_model(sched, name, resident, per_request, flags, declared_resident, declared_per_request,
              shim="auto", **overrides):
    worker = ["--resident", resident, "--per-request", per_request, "--cache", "release", *flags]
    m = sched.model(name, worker, declared_resident, declared_per_request, **overrides)
    m["cuda_shim"] = shim
    return m


def shim_of(vd, model):
    insts = vd.instances(model)
    return insts[0].get("shim") if insts else None


def load(vd, model):
    r = vd.post(f"/v1/models/{model}/load", timeout=60)
    assert r.status == 200, r
    vd.wait_ready(model)


def wait_attached(vd, model):
    return wait_for(lambda: (shim_of(vd, model) or {}).get("state") == "attached" and shim_of(vd, model),
                    timeout=30, what=f"{model}'s shim attached")


def test_under_declared_waits_for_the_neighbour_and_nobody_ooms(sched):
    """16 GiB card. honest: 2 GiB weights + 8 GiB per request, declared so, a request of 3
    real seconds. under: 2 GiB + 6 GiB per request, declared 1 GiB per request. vramd books
    both at once (2.5+8 + 2.5+1 GiB), which without the shim ends in an OOM (2.3+2.3+8+6 GiB
    > 16). With it, under's allocations past its grant ask; the card has ~1.9 GiB: the first
    step is granted, the next ones wait until honest's request ends, then proceed."""
    gpu = sched.gpu_set("16GiB")
    models = {
        "honest": sim_model(sched, "honest", "2GiB", "8GiB", ["--run-time", sim_s(60)], "2560MiB", "8GiB"),
        "under": sim_model(sched, "under", "2GiB", "6GiB", ["--run-time", sim_s(4)], "2560MiB", "1GiB",
                           grant_wait="60s"),
    }
    vd = sched.start_vramd(gpu, models, extra_env=shim_env())
    # loaded, not warmed with a request: a warm request of under's that NVML happened to
    # sample taught vramd its real 6 GiB, so it booked under honestly, queued it behind
    # honest and the shim never had to wait (failed now and then, under ASan most)
    for m in models:
        load(vd, m)
    # now at once:
    h = vd.later("honest", {"n": 1})
    vd.wait_in_flight("honest")
    wait_for(lambda: vd.instances("honest")[0]["measured_bytes"] > 9 * GiB, timeout=30,
             what="honest's request holding its 8 GiB")
    u = vd.later("under", {"n": 2})
    rh, ru = h.result(), u.result()
    assert rh.status == 200, rh
    assert ru.status == 200, ru
    s = shim_of(vd, "under")
    assert s["waited"] >= 1, s
    assert s["refused"] == 0, s
    assert vd.events("shim_waiting", model="under"), "under's ask never waited: the case tested nothing"
    sched.finish()  # no OOM in any worker's output, ledger back to residents


def test_excess_refused_in_the_under_declared_worker_alone(sched):
    """As above, but honest's request holds the card for 10 real seconds and under's
    grant_wait is 300 ms: under's ask is refused (no_room) and its request fails with the
    worker's own OOM; honest's request is 200 and its output has no OOM."""
    gpu = sched.gpu_set("16GiB")
    models = {
        "honest": sim_model(sched, "honest", "2GiB", "8GiB", ["--run-time", sim_s(200)], "2560MiB", "8GiB"),
        "under": sim_model(sched, "under", "2GiB", "6GiB", ["--run-time", sim_s(4)], "2560MiB", "1GiB",
                           grant_wait="300ms"),
    }
    vd = sched.start_vramd(gpu, models, extra_env=shim_env())
    vd.allow_oom.add("under")
    load(vd, "under")
    h = vd.later("honest", {"n": 1})
    vd.wait_in_flight("honest")
    wait_for(lambda: vd.instances("honest")[0]["measured_bytes"] > 9 * GiB, timeout=30,
             what="honest's request holding its 8 GiB")
    ru = vd.generate("under", {"n": 2})
    assert ru.status in (500, 503), ru
    assert b"out of memory" in ru.body.lower(), ru.body[:500]
    refused = vd.events("shim_refused", model="under")
    assert refused and refused[0]["reason"] == "no_room", refused
    rh = h.result()
    assert rh.status == 200, rh
    vd.assert_no_oom("honest")
    sched.finish()


def test_two_workers_waiting_for_each_other_the_younger_is_refused(sched):
    """Two under-declared workers (2 GiB + 6 GiB each, declared 1 GiB per request) on a
    10 GiB card, both requests running: each takes what is free, then both wait for memory
    only the other could give back. vramd refuses the ask of the one whose request began
    last at once (deadlock; grant_wait is 60 s), whose request then fails; the first one's
    ask is granted once that memory is back, and its request is 200."""
    gpu = sched.gpu_set("10GiB")
    models = {
        "first": sim_model(sched, "first", "2GiB", "6GiB", ["--run-time", sim_s(20)], "2560MiB", "1GiB",
                           grant_wait="60s"),
        "second": sim_model(sched, "second", "2GiB", "6GiB", ["--run-time", sim_s(20)], "2560MiB", "1GiB",
                            grant_wait="60s"),
    }
    vd = sched.start_vramd(gpu, models, extra_env=shim_env())
    vd.allow_oom.update({"first", "second"})
    load(vd, "first")
    load(vd, "second")
    a = vd.later("first", {"n": 1})
    vd.wait_in_flight("first")
    b = vd.later("second", {"n": 2})
    t0 = time.monotonic()
    ra, rb = a.result(), b.result()
    took = time.monotonic() - t0
    dead = vd.events("shim_refused", reason="deadlock")
    assert dead, vd.events("shim_refused")
    assert dead[0]["model"] == "second", dead
    assert ra.status == 200, ra
    assert rb.status in (500, 503), rb
    assert took < 55, f"the deadlock waited for grant_wait ({took:.1f} s)"
    sched.finish()


def test_an_eviction_a_shim_grant_asked_for_is_logged_as_one(sched):
    """16 GiB card: idle (6 GiB, declared 6.5 GiB) loaded and idle beside under (2 GiB + 8 GiB
    per request, declared 2.5 GiB + 1 GiB). under's allocations past its grant ask for more
    than is free (~5.9 GiB): the shim grants ask the scheduler for room on the card
    (sched_make_room_on), which evicts idle; the eviction is logged with the reason that
    asked, "shim grant" (it was logged as a parked instance's "wake waiting"), and under's
    request is 200 with nothing refused."""
    gpu = sched.gpu_set("16GiB")
    models = {
        "idle": sim_model(sched, "idle", "6GiB", "64MiB", ["--run-time", sim_s(0.2)], "6656MiB", "64MiB"),
        "under": sim_model(sched, "under", "2GiB", "8GiB", ["--run-time", sim_s(4)], "2560MiB", "1GiB",
                           grant_wait="60s"),
    }
    vd = sched.start_vramd(gpu, models, extra_env=shim_env())
    load(vd, "idle")
    load(vd, "under")
    wait_attached(vd, "under")
    r = vd.generate("under", {"n": 1})
    assert r.status == 200, r
    evictions = vd.events("eviction", model="idle")
    assert evictions, "idle was never evicted: the case tested nothing"
    assert evictions[0]["for"] == "under", evictions
    assert evictions[0]["reason"] == "shim grant", evictions
    assert vd.events("shim_waiting", model="under"), "under's ask never waited for room"
    assert (shim_of(vd, "under") or {}).get("refused") == 0, shim_of(vd, "under")
    sched.finish()


@pytest.mark.parametrize("resolve", ["dlsym", "proc-address"])
def test_shim_counts_the_workers_bytes_on_both_resolution_paths(sched, resolve):
    """simworker resolves the driver's entry points with dlsym (a program linked against the
    driver) or through cuGetProcAddress (the CUDA runtime's way): either way the shim sees the
    allocations: attached, live bytes == the worker's weights (2 GiB, allocated through the
    driver), and after a request of 3 GiB (kept cached) live == 5 GiB."""
    gpu = sched.gpu_set("24GiB")
    flags = ["--run-time", sim_s(1)] + (["--cuda-proc-address"] if resolve == "proc-address" else [])
    model = sim_model(sched, "m", "2GiB", "3GiB", flags, "2560MiB", "3GiB")
    model["cmd"] = [a if a != "release" else "keep" for a in model["cmd"]]
    vd = sched.start_vramd(gpu, {"m": model}, extra_env=shim_env())
    load(vd, "m")
    s = wait_attached(vd, "m")
    assert s["live_bytes"] == 2 * GiB, s
    assert vd.generate("m", {"n": 1}).status == 200
    wait_for(lambda: shim_of(vd, "m")["live_bytes"] == 5 * GiB, timeout=10,
             what=f"live bytes 5 GiB (now {shim_of(vd, 'm')})")
    sched.finish()


def test_free_memory_sizing_worker_takes_its_grant_not_the_card(sched):
    """simworker --size-from-free 0.9 takes 0.9 x what cuMemGetInfo reports as total, as vLLM's
    --gpu-memory-utilization does. On a 24 GiB card with 6 GiB booked for it, under the shim
    it holds about 0.9 x its grant (< 6 GiB), not 0.9 x 24 GiB."""
    gpu = sched.gpu_set("24GiB")
    model = sim_model(sched, "kv", "1GiB", "0", ["--size-from-free", "0.9"], "6GiB", "0")
    vd = sched.start_vramd(gpu, {"kv": model}, extra_env=shim_env())
    load(vd, "kv")
    wait_attached(vd, "kv")
    wait_for(lambda: vd.instances("kv")[0]["measured_bytes"] > 4 * GiB, timeout=20,
             what="the worker's cache taken")
    measured = vd.instances("kv")[0]["measured_bytes"]
    assert measured <= 6 * GiB + 64 * MiB, f"it took {measured / GiB:.2f} GiB: the card's share"
    sched.finish()


def test_shim_that_cannot_reach_vramd_runs_unchecked(sched):
    """The grant socket is removed before the worker starts: its shim cannot connect when its
    request's allocations pass the grant, so it detaches (the worker runs as it would without
    it); the request is answered and the status says `detached`."""
    gpu = sched.gpu_set("24GiB")
    model = sim_model(sched, "lone", "2GiB", "4GiB", ["--run-time", sim_s(1)], "2560MiB", "1GiB",
                      keep_alive="10m")
    state = str(sched.tmp / "var-lone")
    vd = sched.start_vramd(gpu, {"lone": model}, extra_env=shim_env(), state_dir=state)
    sock = os.path.join(state, "shim", "grant.sock")
    load(vd, "lone")
    os.unlink(sock)
    vd.post("/v1/models/lone/restart")
    load(vd, "lone")
    # its request needs 4 GiB, 1 GiB declared: past the grant, the shim asks and cannot
    assert vd.generate("lone", {"n": 1}).status == 200
    wait_for(lambda: (shim_of(vd, "lone") or {}).get("state") == "detached", timeout=30,
             what=f"the shim detached (now {shim_of(vd, 'lone')})")
    sched.finish()


def test_required_shim_without_the_library_does_not_start_the_worker(sched):
    """cuda_shim: required and no libvramd-cuda.so: the worker is never started; the start
    fails with the reason, the request is answered with an error, vramd stays up."""
    gpu = sched.gpu_set("24GiB")
    model = sim_model(sched, "req", "1GiB", "1GiB", [], "1536MiB", "1GiB", shim="required",
                      startup_timeout="5s")
    vd = sched.start_vramd(gpu, {"req": model}, extra_env={"VRAMD_CUDA_SHIM_LIBRARY": "/nonexistent/libvramd-cuda.so"})
    r = vd.generate("req", {"n": 1}, timeout=60)
    assert r.status >= 500, r
    failed = vd.events("worker_spawn_failed", model="req")
    assert failed and "cuda_shim: required" in failed[0]["error"], failed
    assert vd.alive()
    sched.finish()


@pytest.mark.parametrize("mode", ["garbage", "ask-first", "bad-token", "bad-slot"])
def test_malformed_shim_fails_its_worker_not_vramd(sched, mode):
    """A worker whose shim breaks the grant socket's protocol: vramd logs shim_malformed,
    kills that worker (restarted as after a crash), and keeps serving its status."""
    gpu = sched.gpu_set("8GiB")
    model = sched.model("bad", [], "1GiB", "0", startup_timeout="10s")
    model["cmd"] = [PYTHON, BAD_SHIM, "--port", "{port}", "--mode", mode, "--name", f"bad@{sched.tag}"]
    model["cuda_shim"] = "auto"
    vd = sched.start_vramd(gpu, {"bad": model}, extra_env=shim_env())
    vd.post("/v1/models/bad/load")
    wait_for(lambda: vd.events("shim_malformed", model="bad"), timeout=30, what="shim_malformed")
    assert vd.alive()
    assert vd.status()["ready"] is not None
    sched.finish()


def test_vramd_killed_under_load_and_started_again(sched):
    """vramd is SIGKILLed while requests run on a shim worker: its guard takes the workers
    with it; a vramd started again on the same state_dir makes a new socket and new pages,
    its worker attaches and serves."""
    gpu = sched.gpu_set("24GiB")
    model = sim_model(sched, "w", "2GiB", "2GiB", ["--run-time", sim_s(20)], "2560MiB", "2GiB",
                      concurrency=4)
    state = str(sched.tmp / "var-shared")
    vd = sched.start_vramd(gpu, {"w": model}, extra_env=shim_env(), state_dir=state)
    load(vd, "w")
    wait_attached(vd, "w")
    pending = [vd.later("w", {"n": i}) for i in range(4)]
    vd.wait_in_flight("w", 2)
    old_pids = vd.worker_pids("w")
    vd.signal(signal.SIGKILL)
    vd.wait_exit(10)
    vd.stopped = True
    for p in pending:
        p.result()
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in old_pids), timeout=20,
             what="the old workers gone with their vramd")
    vd2 = sched.start_vramd(gpu, {"w": model}, extra_env=shim_env(), state_dir=state)
    assert vd2.generate("w", {"n": 9}).status == 200
    wait_attached(vd2, "w")
    sched.finish()
