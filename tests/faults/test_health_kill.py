"""The health checker kills a wedged worker the way a request's timeout does (case 3).

A supervised worker whose health checks fail `health.failures` times in a row is killed as a
hung one: SIGABRT first (a core dump for the operator), SIGKILL after `stop_timeout` when it
is still there, and the request it was running ends 504 `worker_hang`, not 502. Before, the
health path sent SIGKILL alone (no core) and the client got 502 `worker_failed`.

  * a SIGSTOPped worker (it cannot act on SIGABRT: the SIGKILL follows after the grace);
  * a worker that answers nothing, health checks included, but is not stopped: it dies of
    the SIGABRT itself (exit signal 6), no SIGKILL needed.

Both keep the health checker on with short settings (interval 200ms, timeout 500ms,
failures 3) and the default response_timeout (10 min) and no hang_timeout, so the health
path is the only one that can kill. Every case ends with faults.check_clean and
faults.finish (see test_crashes.py).
"""
import os
import signal
import time

from vramdkit import Background

from .faultkit import instance_pid, resilience, wait_gone
from .test_hangs_outliers_retries import fw_model, in_flight, log_time, metrics

HEALTH = {"path": "/health", "interval": "200ms", "timeout": "500ms", "failures": 3}


def health_model(faults, name):
    m = fw_model(faults, name, health=dict(HEALTH), stop_timeout="1s")
    assert "response_timeout" not in m and "recycle" not in m  # the health path alone kills
    return m


def test_sigstopped_worker_killed_by_health_checks_gets_sigabrt_then_sigkill_and_504(faults):
    """A worker SIGSTOPped while its request sleeps. Expected: three failed health checks,
    worker_unhealthy, worker_kill SIGABRT (reason "health checks failing", grace_ms 1000) then
    SIGKILL no sooner than the grace after it; the worker exits by signal 9 (stopped, the
    SIGABRT stays pending); the client gets 504 worker_hang; no worker_hang line (the
    response_timeout path never fired); the next request runs on a new worker."""
    gpu = faults.gpu_set("16GiB")
    vd = faults.start_vramd(gpu, {"hc": health_model(faults, "hc")})
    assert vd.post("/hc/score").status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "hc")

    running = Background(lambda: vd.post("/hc/slow", {"sleep": 60}, timeout=40))
    vd.wait_in_flight("hc")
    time.sleep(0.3)
    os.kill(pid, signal.SIGSTOP)
    try:
        r = running.result(timeout=40)
        kills = vd.wait_event("worker_kill", model="hc", pid=pid, count=2)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert r.status == 504, r
    assert r.error_code() == "worker_hang", r
    assert "unhealthy" in r.error_body()["message"], r
    assert r.elapsed < 15, r
    fails = vd.events("health_check_failed", model="hc", pid=pid)
    assert len(fails) >= 3, fails
    assert vd.events("worker_unhealthy", model="hc", pid=pid), "no worker_unhealthy line"
    abort, kill = kills[:2]
    assert (abort["signal"], kill["signal"]) == (6, 9), kills
    assert abort["reason"] == kill["reason"] == "health checks failing", kills
    assert abort["grace_ms"] == 1000, abort
    grace = log_time(kill) - log_time(abort)  # 10 ms of slack: ms log times, libuv's cached clock
    assert 0.99 <= grace < 3.0, f"SIGKILL {grace:.3f}s after SIGABRT: the grace is 1 s"
    exited = vd.wait_event("worker_exit", model="hc", pid=pid)[0]
    assert exited["signal"] == 9, exited
    assert not vd.events("worker_hang", model="hc"), "the response_timeout path fired"
    wait_gone([pid], what="the wedged worker")
    assert in_flight(vd) == 0
    restarts = metrics(vd)
    assert restarts['vramd_worker_restarts_total{model="hc",reason="unhealthy"}'] == 1, restarts
    assert restarts['vramd_worker_restarts_total{model="hc",reason="hang"}'] == 0, restarts
    assert resilience(vd, "hc")["hangs_total"] == 0  # a request's own timeout never fired
    r = vd.post("/hc/score")
    assert r.status == 200, r
    assert instance_pid(vd, "hc") != pid
    faults.check_clean(vd, base)
    faults.finish()


def test_mute_worker_killed_by_health_checks_dies_of_sigabrt_and_its_request_gets_504(faults):
    """A worker that stops answering everything (faultworker /mute), its health checks
    included, while a request waits in it; it is not stopped, so it acts on the SIGABRT.
    Expected: worker_kill SIGABRT only (it exits before the grace ends: no SIGKILL line), the
    worker's exit signal 6 (a core dump, where the host keeps them), the request 504
    worker_hang, the next request on a new worker."""
    gpu = faults.gpu_set("16GiB")
    vd = faults.start_vramd(gpu, {"mute": health_model(faults, "mute")})
    assert vd.post("/mute/score").status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "mute")

    assert vd.post("/mute/mute").status == 200
    r = vd.post("/mute/score", timeout=40)
    assert r.status == 504, r
    assert r.error_code() == "worker_hang", r
    exited = vd.wait_event("worker_exit", model="mute", pid=pid)[0]
    assert exited["signal"] == 6, exited
    kills = vd.events("worker_kill", model="mute", pid=pid)
    assert [k["signal"] for k in kills] == [6], kills
    assert kills[0]["reason"] == "health checks failing", kills
    wait_gone([pid], what="the mute worker")
    assert in_flight(vd) == 0
    r = vd.post("/mute/score")
    assert r.status == 200, r
    assert instance_pid(vd, "mute") != pid
    faults.check_clean(vd, base)
    faults.finish()
