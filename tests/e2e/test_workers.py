"""e2e: worker supervision: crashes (before the head and mid-stream), garbage answers,
start failures with backoff and the failed state, admin load/unload, keep_alive idle stop,
stop_timeout escalation to SIGKILL, and external (url:) servers."""
from datetime import datetime

from vramdkit import build_request, pid_alive, wait_for


def parse_ts(ts):
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def wait_not_ready(vd, model, pid):
    """Wait until vramd has noticed that worker pid died (its instance is no longer
    `ready` in /v1/status)."""
    wait_for(lambda: not pid_alive(pid) and
             all(i.get("pid") != pid or i.get("state") != "ready"
                 for i in vd.model(model).get("instances", [])),
             timeout=10, what=f"vramd to notice that worker {pid} exited")


def test_worker_crash_502_then_restarted(vramd):
    """A worker that dies before answering gives 502 worker_failed; the next request is
    served by a new worker process."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    r = vd.get("/w/echo")
    assert r.status == 200
    pid1 = r.json()["pid"]
    r = vd.get("/w/crash")
    assert r.status == 502, r
    assert r.error_code() == "worker_failed"
    wait_not_ready(vd, "w", pid1)
    r = vd.get("/w/echo?after=crash", timeout=60)
    assert r.status == 200, r
    assert r.json()["pid"] != pid1


def test_worker_garbage_answer_502(vramd):
    """A worker that answers bytes that are not HTTP gives 502 worker_failed, and the next
    request works."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    r = vd.get("/w/garbage")
    assert r.status == 502, r
    assert r.error_code() == "worker_failed"
    r = vd.get("/w/echo", timeout=60)
    assert r.status == 200, r


def test_worker_crash_mid_stream_gives_incomplete_response(vramd):
    """A worker that dies after sending the head and part of a chunked body: the client's
    response ends visibly incomplete (no last chunk, connection closed)."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    r = vd.get("/w/echo")
    assert r.status == 200
    pid = r.json()["pid"]
    with vd.conn() as c:
        c.send(build_request("GET", "/w/crash-mid"))
        r = c.read_response(timeout=20)
        assert r.status == 200
        assert not r.complete, f"the response looked complete: {r!r}"
        assert b"partial response" in r.body
        assert c.closed_by_peer(5)
    # a request sent before vramd has reaped the dead worker may fairly get 502; wait
    # until the dead instance is no longer `ready` in /v1/status
    wait_not_ready(vd, "w", pid)
    r = vd.get("/w/echo", timeout=60)
    assert r.status == 200, r


def test_start_failure_backoff_then_failed_then_load_after_fix(vramd):
    """A worker that exits at start is retried with growing delays (seen in the times of
    its output lines in the log), then the model is `failed` and requests get 503
    model_failed; after the cause is fixed, POST /v1/models/NAME/load brings it up."""
    flag = vramd.tmp / "broken"
    flag.write_text("1")
    vd = vramd.start(models={"w": vramd.worker("w", extra_args=("--fail-if-file", str(flag)),
                                               deadline="120s")})

    def failed_answer():
        r = vd.get("/w/echo", timeout=120)
        assert r.status in (502, 503, 504), r
        return r if r.error_code() == "model_failed" else None
    r = wait_for(failed_answer, timeout=90, interval=0.5, what="503 model_failed")
    assert r.status == 503
    assert vd.model("w")["state"] == "failed"

    starts = [parse_ts(e["ts"]) for e in vd.events("worker_output", model="w")
              if "failing start on purpose" in (e.get("line") or "")]
    assert len(starts) >= 4, f"expected several start attempts, saw {len(starts)}"
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[-1] >= 2 * gaps[0] and gaps[-1] >= 1.5, f"delays do not grow: {gaps}"
    assert all(b >= a * 0.8 for a, b in zip(gaps, gaps[1:])), f"delays shrink: {gaps}"

    # still failed: a request is refused at once
    r = vd.get("/w/echo", timeout=10)
    assert r.status == 503 and r.error_code() == "model_failed", r
    flag.unlink()
    r = vd.post("/v1/models/w/load", timeout=30)
    assert r.status == 200, r
    assert r.json()["model"] == "w" and r.json()["state"] == "ready", r
    r = vd.get("/w/echo")
    assert r.status == 200, r


def test_load_unload_admin(vramd):
    """POST /v1/models/NAME/load starts the worker (200 once ready) and unload stops it
    (200 once stopped, process gone); unknown names get 404."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    assert vd.model("w")["state"] == "stopped"
    r = vd.post("/v1/models/w/load", timeout=30)
    assert r.status == 200, r
    assert r.json()["state"] == "ready"
    pids = vd.worker_pids("w")
    assert len(pids) == 1 and pid_alive(pids[0])
    r = vd.post("/v1/models/w/unload", timeout=60)
    assert r.status == 200, r
    assert vd.model("w")["state"] == "stopped"
    wait_for(lambda: not pid_alive(pids[0]), timeout=10, what="the worker to exit")
    r = vd.post("/v1/models/nope/load")
    assert r.status == 404, r


def test_keep_alive_idle_stop_and_restart_on_demand(vramd):
    """keep_alive: 1s stops an idle worker (state stopped, process gone); the next request
    starts a new one."""
    vd = vramd.start(models={"w": vramd.worker("w", keep_alive="1s")})
    r = vd.get("/w/echo")
    assert r.status == 200
    pid1 = r.json()["pid"]
    vd.wait_model_state("w", "stopped", timeout=15)
    wait_for(lambda: not pid_alive(pid1), timeout=10, what="the idle worker to exit")
    r = vd.get("/w/echo")
    assert r.status == 200, r
    assert r.json()["pid"] != pid1


def test_stop_timeout_escalates_to_sigkill(vramd):
    """A worker that ignores SIGTERM is killed after stop_timeout when vramd unloads it
    (case 11: SIGTERM, then SIGKILL after the stated grace). stop_timeout 1500ms. The
    SIGTERM is sent when the instance goes to `stopping` (vramd's instance_state line); the
    worker records when it got it (its own clock, in its "SIGTERM ignored at T" line);
    vramd's worker_kill ("stop timeout") comes no sooner than 1.5 s after the SIGTERM and
    the worker lives until then: it exits by signal 9, reaped after the kill."""
    vd = vramd.start(models={"w": vramd.worker("w", extra_args=("--ignore-term",),
                                               stop_timeout="1500ms")})
    r = vd.get("/w/echo")
    pid = r.json()["pid"]
    r = vd.post("/v1/models/w/unload", timeout=60)
    assert r.status == 200, r
    wait_for(lambda: not pid_alive(pid), timeout=10, what="the SIGTERM-proof worker to die")
    ignored = [e for e in vd.events("worker_output", model="w", pid=pid)
               if "SIGTERM ignored" in (e.get("line") or "")]
    assert len(ignored) == 1, ignored
    t_got_term = float(ignored[0]["line"].rsplit(" at ", 1)[1])
    stopping = vd.wait_event("instance_state", model="w", pid=pid, to="stopping")[0]
    kill = vd.wait_event("worker_kill", model="w", pid=pid)[0]
    exited = vd.wait_event("worker_exit", model="w", pid=pid)[0]
    assert kill["reason"] == "stop timeout", kill
    assert exited["signal"] == 9 and exited["expected"] is True, exited
    t_term, t_kill, t_exit = parse_ts(stopping["ts"]), parse_ts(kill["ts"]), parse_ts(exited["ts"])
    # log times are whole milliseconds, and the stop timer counts from the event loop's
    # cached time, which can be a few ms behind the clock the log line read: 10 ms of slack
    assert t_term - 0.01 <= t_got_term <= t_term + 1.0, (t_term, t_got_term)
    grace = t_kill - t_term
    assert 1.49 <= grace < 1.5 + 2.0, f"SIGKILL {grace:.3f}s after SIGTERM: the grace is 1.5 s"
    assert t_kill - t_got_term >= 0.5, "the worker did not live through the grace after its SIGTERM"
    assert t_exit >= t_kill - 0.001, (kill, exited)


def test_keep_alive_forever_starts_at_startup(vramd):
    """keep_alive: forever starts the worker when vramd starts, without any request."""
    vd = vramd.start(models={"w": vramd.worker("w", keep_alive="forever")})
    vd.wait_model_state("w", "ready", timeout=20)
    pids = vd.worker_pids("w")
    assert pids and pid_alive(pids[0])


def test_external_worker_proxied_health_checked_and_recovers(vramd):
    """An external url: server is proxied as is; when it dies its health checks mark it not
    ready and requests get 502/503; once it is back (same port) it is ready again and
    requests succeed; vramd never stops it."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2},
        "deadline": "10s"}})
    r = vd.get("/ext/echo?x=1")
    assert r.status == 200, r
    assert r.json()["pid"] == ext.proc.pid
    assert r.json()["path"] == "/echo?x=1"

    vd.wait_model_state("ext", "ready", timeout=10)
    ext.kill()
    # the health checks alone (no request) notice that the server is gone
    wait_for(lambda: vd.model("ext")["state"] != "ready", timeout=15,
             what="health checks to mark the dead external server not ready")

    def refused():
        r = vd.get("/ext/echo", timeout=30)
        assert r.status in (200, 502, 503, 504), r
        return r if r.status in (502, 503) else None
    r = wait_for(refused, timeout=20, interval=0.2, what="502/503 after the server died")
    assert r.error_code(), f"not vramd's JSON error shape: {r!r}"

    ext2 = vramd.external("ext", port=ext.port)
    vd.wait_model_state("ext", "ready", timeout=15)
    r = wait_for(lambda: (lambda x: x if x.status == 200 else None)(vd.get("/ext/echo",
                                                                          timeout=30)),
                 timeout=30, interval=0.3, what="requests to succeed after the restart")
    assert r.json()["pid"] == ext2.proc.pid

    assert vd.stop() == 0
    assert ext2.proc.poll() is None, "vramd stopped an external server"
