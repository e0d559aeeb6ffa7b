"""Runtime pin, unpin and graceful restart (POST /v1/models/{name}/pin|unpin|restart).

On a simulated 16 GiB GPU (15.875 GiB after headroom) each simworker model here is 6 GiB
resident and 1 GiB per request: two fit with room for a request, a third evicts an idle one.

Expected:
  - pin loads the model and keeps it: a third model's load evicts the other idle model, never
    the pinned one (even though the pinned one is the least recently used); status shows
    `pinned: true, pinned_by: "admin"`; the pin survives a SIGHUP reload;
  - unpin makes it evictable again (the next third model's load evicts it) and puts back its
    keep_alive; a model pinned by config (keep_alive: forever) answers 409 pinned_by_config;
  - restart: a request in flight finishes (200) on the old instance; a request queued before
    the restart and one sent during it wait in the queue and are served (200) by the new
    instance, which has a new id and pid; the call answers 200 once it is ready;
  - the three routes answer 401 without the admin token and 404 for an unknown model; every
    call is a log event.
"""
import signal

from vramdkit import sim_s, wait_for
from vramdkit.harness import sched  # noqa: F401  (fixture)
from vramdkit.waits import Background

TOKEN = "pin-restart-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def six_gib(sched, name, run_s=0.2, **extra):
    return sched.model(name, ["--resident", "5.7GiB", "--per-request", "1GiB", "--cache", "release",
                              "--run-time", sim_s(run_s)], "6GiB", "1GiB", **extra)


def start(sched, models):
    token = sched.tmp / "admin.token"
    token.write_text(TOKEN + "\n")
    gpu = sched.gpu_set("16GiB")
    return sched.start_vramd(gpu, models, admin_token_file=str(token))


def evicted(vd):
    return [(e["model"], e["for"]) for e in vd.events("eviction")]


def post(vd, model, action, headers=AUTH, timeout=60):
    return vd.post(f"/v1/models/{model}/{action}", headers=headers, timeout=timeout)


def test_pin_survives_pressure_and_reload_then_unpin_makes_it_evictable(sched):
    vd = start(sched, {n: six_gib(sched, n) for n in ("a", "b", "c")})
    r = post(vd, "a", "pin")
    assert r.status == 200, r
    assert '"pinned":true' in r.body.decode() and '"pinned_by":"admin"' in r.body.decode(), r
    m = vd.model("a")
    assert m["state"] == "ready" and m["pinned"] is True and m["pinned_by"] == "admin", m
    assert m["keep_alive_ms"] == 600000, m  # the configured value, back after unpin
    assert vd.first("admin_pin", model="a") and vd.first("model_pinned", model="a")
    # b, then c: the GPU holds two; c's load must evict b (a is older but pinned)
    assert vd.generate("b").status == 200
    assert vd.generate("c").status == 200
    assert evicted(vd) == [("b", "c")], evicted(vd)
    assert vd.model("a")["state"] == "ready"
    # a config reload keeps the runtime pin
    vd.signal(signal.SIGHUP)
    vd.wait_event("config_reloaded", timeout=10)
    m = vd.model("a")
    assert m["pinned"] is True and m["pinned_by"] == "admin", m
    assert vd.generate("b").status == 200
    assert evicted(vd) == [("b", "c"), ("c", "b")], evicted(vd)
    # unpin: a goes back to keep_alive and is evictable: the least recently used goes first
    r = post(vd, "a", "unpin")
    assert r.status == 200 and '"pinned":false' in r.body.decode(), r
    m = vd.model("a")
    assert m["pinned"] is False and m["pinned_by"] is None and m["keep_alive_ms"] == 600000, m
    wait_for(lambda: vd.model("a")["instances"][0]["keep_alive_left_ms"] is not None, timeout=10,
             what="a's keep_alive countdown after unpin")
    assert vd.generate("c").status == 200
    assert evicted(vd)[-1] == ("a", "c"), evicted(vd)
    assert vd.first("model_unpinned", model="a")
    assert not [e for e in vd.events() if "log_format_error" in e]
    sched.finish()


def test_config_pin_unpin_409_and_auth(sched):
    vd = start(sched, {"fixed": six_gib(sched, "fixed", keep_alive="forever"), "b": six_gib(sched, "b")})
    vd.wait_ready("fixed")
    m = vd.model("fixed")
    assert m["pinned"] is True and m["pinned_by"] == "config" and m["keep_alive_ms"] is None, m
    assert vd.model("b")["pinned_by"] is None
    r = post(vd, "fixed", "unpin")
    assert r.status == 409 and b"pinned_by_config" in r.body, r
    assert vd.model("fixed")["pinned_by"] == "config"
    r = post(vd, "fixed", "pin")  # already pinned by config: loaded, still "config"
    assert r.status == 200 and b'"pinned_by":"config"' in r.body, r
    assert not vd.events("model_pinned")  # nothing recorded: the config pins it
    for action in ("pin", "unpin", "restart"):
        r = post(vd, "b", action, headers={})
        assert r.status == 401 and b"unauthorized" in r.body, (action, r)
        r = post(vd, "b", action, headers={"Authorization": "Bearer wrong"})
        assert r.status == 401, (action, r)
        r = post(vd, "nope", action)
        assert r.status == 404 and b"unknown_model" in r.body, (action, r)
    assert vd.model("b")["state"] == "stopped"  # nothing the refused calls did
    assert len(vd.events("admin_unauthorized")) == 6
    sched.finish()


def test_restart_finishes_in_flight_and_serves_queued_by_the_new_instance(sched):
    """concurrency 1: A runs (a simulated 40 s, 2 s here), B waits in the queue behind it;
    the restart is called, then C arrives during it. A finishes on the old worker; B and C
    are served by the new one (its requests_total is 2); the restart answers 200 once the
    new instance is ready."""
    vd = start(sched, {"m": six_gib(sched, "m", run_s=40)})
    r = post(vd, "m", "load")
    assert r.status == 200, r
    old = vd.instances("m")[0]
    a = vd.later("m")
    vd.wait_in_flight("m")
    b = vd.later("m")
    vd.wait_queued("m", 1)
    restart = Background(lambda: post(vd, "m", "restart", timeout=60))
    vd.wait_event("admin_restart_begin", model="m", timeout=10)
    c = vd.later("m")
    vd.wait_queued("m", 2)  # B and C: the old worker takes no new request
    assert a.result().status == 200  # in flight: finished on the old instance
    done_by = [e["pid"] for e in vd.events("worker_output") if "request_done" in e["line"]]
    assert done_by and done_by[0] == old["pid"], done_by
    r = restart.result()
    assert r.status == 200, r
    assert '"state":"ready"' in r.body.decode(), r
    assert b.result().status == 200 and c.result().status == 200
    new = vd.instances("m")
    assert len(new) == 1 and new[0]["id"] > old["id"] and new[0]["pid"] != old["pid"], (old, new)
    assert new[0]["requests_total"] == 2, new  # B and C, served by the new instance
    e = vd.first("admin_restart_begin", model="m")
    assert str(e["in_flight"]) == "1" and str(e["queued"]) == "1", e
    assert vd.first("admin_restart_done", model="m")
    assert not [e for e in vd.events() if "log_format_error" in e]
    sched.finish()
