"""e2e: daemon lifecycle: drain on SIGTERM and POST /v1/admin/drain, config reload on
SIGHUP and POST /v1/admin/reload (good configs apply without dropping work, bad ones are
refused and the old config keeps serving)."""
import copy
import signal
import threading

from vramdkit import PeerClosed, pid_alive, wait_for


def model_ids(vd):
    r = vd.get("/v1/models")
    assert r.status == 200
    return {d["id"] for d in r.json()["data"]}


def background_get(vd, path):
    out = {}

    def run():
        try:
            out["r"] = vd.get(path, timeout=60)
        except Exception as e:  # noqa: BLE001 - surfaced by the caller
            out["r"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


def test_sigterm_drains(vramd):
    """SIGTERM: the in-flight request completes with 200, new requests get 503 draining
    (or the connection is refused), vramd exits 0 and its worker is stopped."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    r = vd.get("/w/echo")
    assert r.status == 200
    pid = r.json()["pid"]
    busy = background_get(vd, "/w/slow?ms=2000")
    wait_for(lambda: vd.model("w")["in_flight"] == 1, timeout=15, what="in flight")
    vd.signal(signal.SIGTERM)

    def draining_seen():
        try:
            return vd.get("/v1/status", timeout=5).json()["draining"] is True
        except (OSError, PeerClosed):
            return True  # listener already closed: also drain
    wait_for(draining_seen, timeout=10, what="draining")
    try:
        r = vd.get("/w/echo?tag=late", timeout=10)
        assert r.status == 503, r
        assert r.error_code() == "draining"
    except (OSError, PeerClosed):
        pass  # connection refused or closed: acceptable while draining
    busy["thread"].join(30)
    assert not isinstance(busy["r"], Exception), busy["r"]
    assert busy["r"].status == 200, busy["r"]
    assert vd.wait_exit(30) == 0, vd.log_tail()
    wait_for(lambda: not pid_alive(pid), timeout=10, what="the worker to be stopped")


def test_admin_drain(vramd):
    """POST /v1/admin/drain answers 202, then vramd exits 0 and stops its workers."""
    vd = vramd.start(models={"w": vramd.worker("w")})
    r = vd.get("/w/echo")
    pid = r.json()["pid"]
    r = vd.post("/v1/admin/drain")
    assert r.status == 202, r
    assert vd.wait_exit(30) == 0, vd.log_tail()
    assert not pid_alive(pid)


def test_sighup_reload_adds_model_without_disturbing_work(vramd):
    """SIGHUP with a good config adds a model to /v1/models and routes to it; a request in
    flight during the reload completes; the unchanged model keeps its worker."""
    vd = vramd.start(models={"a": vramd.worker("a")})
    r = vd.get("/a/echo")
    assert r.status == 200
    pid_a = r.json()["pid"]
    busy = background_get(vd, "/a/slow?ms=1500")
    wait_for(lambda: vd.model("a")["in_flight"] == 1, timeout=15, what="in flight")
    cfg = copy.deepcopy(vd.config)
    cfg["models"]["b"] = vramd.worker("b", aliases=["b-1"])
    vd.write_config(cfg)
    vd.signal(signal.SIGHUP)
    wait_for(lambda: {"b", "b-1"} <= model_ids(vd), timeout=15, what="model b listed")
    r = vd.get("/b/echo")
    assert r.status == 200, r
    assert r.json()["name"].startswith("b@")
    busy["thread"].join(30)
    assert busy["r"].status == 200, busy["r"]
    r = vd.get("/a/echo")
    assert r.status == 200 and r.json()["pid"] == pid_a


def test_sighup_bad_config_keeps_old(vramd):
    """SIGHUP with a broken config logs config_reload_failed and the old config keeps
    serving."""
    vd = vramd.start(models={"a": vramd.worker("a")})
    assert vd.get("/a/echo").status == 200
    good = vd.config
    vd.write_config("listen: 127.0.0.1:1\nmodels:\n  a: [broken\n")
    vd.signal(signal.SIGHUP)
    ev = vd.wait_event("config_reload_failed", timeout=15)
    assert ev, ev
    assert vd.alive()
    assert model_ids(vd) == {"a"}
    r = vd.get("/a/echo")
    assert r.status == 200, r
    vd.write_config(good)


def test_admin_reload_good_and_bad(vramd):
    """POST /v1/admin/reload: a good config answers 200 and applies (a model added, one
    removed with its worker stopped); a bad one answers 400 bad_config naming the file, and
    nothing changes."""
    vd = vramd.start(models={"a": vramd.worker("a"), "b": vramd.worker("b")})
    r = vd.get("/b/echo")
    assert r.status == 200
    pid_b = r.json()["pid"]
    cfg = copy.deepcopy(vd.config)
    cfg["models"]["c"] = vramd.worker("c")
    del cfg["models"]["b"]
    vd.write_config(cfg)
    r = vd.post("/v1/admin/reload")
    assert r.status == 200, r
    wait_for(lambda: model_ids(vd) == {"a", "c"}, timeout=15, what="models a and c only")
    assert vd.get("/c/echo").status == 200
    assert vd.get("/b/echo").status == 404
    wait_for(lambda: not pid_alive(pid_b), timeout=15, what="removed model's worker to stop")

    bad = copy.deepcopy(cfg)
    bad["models"]["c"]["concurrency"] = "lots"
    vd.write_config(bad)
    r = vd.post("/v1/admin/reload")
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["code"] == "bad_config"
    assert str(vd.config_path) in err["message"] and "concurrency" in err["message"], err
    assert model_ids(vd) == {"a", "c"}
    assert vd.get("/c/echo").status == 200
