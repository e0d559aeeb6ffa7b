"""e2e: vramd's descriptors. At start it raises its RLIMIT_NOFILE and warns when the limit is
too low; running out of descriptors never kills a healthy worker.

Shortage: with vramd's RLIMIT_NOFILE lowered while it runs and its descriptor table filled
with idle client connections, a proxied request and an admin unload (its hook) cannot open a
socket to the worker. Each must be answered 503 local_resource_exhausted with Retry-After,
and leave the worker alone: no suspect mark, no outlier count, no failed model, the same
process; once the connections are gone the same worker serves again and the counters show
what happened; a reload's hook short of descriptors waits and is not a failure.

A connection to vramd is opened before the table is filled (a new one could not be
accepted then) and the request is sent on it afterwards."""
import json
import resource
import signal
import socket
import subprocess
import time

import pytest

from vramdkit import (REPO_ROOT, RawConn, fill_descriptors, pid_alive, release_descriptors,
                      vramd_binary, wait_for, yaml_dump)


# --- descriptor exhaustion --------------------------------------------------------------

def run_vramd(tmp, name, cfg, limit):
    """vramd under RLIMIT_NOFILE=limit (soft, hard), stderr in tmp/NAME.log."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml_dump(cfg) + "\n")
    log = open(tmp / f"{name}.log", "wb")
    proc = subprocess.Popen([str(vramd_binary()), "--config", str(path)], stdout=log, stderr=log,
                            cwd=REPO_ROOT, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit))
    log.close()
    return proc


def log_events(path, event):
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            e = json.loads(line)
            if e.get("event") == event:
                out.append(e)
    return out


def soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def test_start_raises_the_descriptor_limit_and_warns_when_it_is_too_low(vramd, tmp_path):
    """Soft limit 64 under a higher hard limit: vramd raises its soft limit to the hard one.
    Hard limit 64 with limits.max_connections 1000: vramd starts, but logs fd_limit_low
    with what it needs and what it has."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 256:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} too low to test raising it")
    want = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    for name, limit in (("raise", (64, want)), ("low", (64, 64))):
        cfg = vramd.config({"a": vramd.worker("a")}, limits={"max_connections": 1000})
        port = int(cfg["listen"].rsplit(":", 1)[1])
        proc = run_vramd(tmp_path, name, cfg, limit)
        try:
            wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0 or proc.poll() is not None,
                     timeout=10, what="vramd listening")
            assert proc.poll() is None, (tmp_path / f"{name}.log").read_text()
            low = log_events(tmp_path / f"{name}.log", "fd_limit_low")
            if name == "raise":
                assert soft_nofile(proc.pid) == want
                assert not low, low
            else:
                assert soft_nofile(proc.pid) == 64
                assert len(low) == 1, (tmp_path / f"{name}.log").read_text()
                assert low[0]["limit"] == 64 and low[0]["need"] > 1000, low
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0


def test_descriptor_exhaustion_does_not_kill_a_healthy_worker(vramd):
    """vramd's descriptors exhausted (RLIMIT_NOFILE lowered to 64 while it runs, 80 idle
    client connections): its health checks cannot open a socket. That is vramd's problem,
    not the worker's: expected local_resource_exhausted, no worker_unhealthy, the same
    worker alive; once the connections are gone it serves again."""
    m = vramd.worker("a", health={"path": "/health", "interval": "300ms", "timeout": "1s", "failures": 2})
    vd = vramd.start(models={"a": m}, limits={"header_timeout": "30s", "max_connections": 1000})
    r = vd.get("/a/echo")
    assert r.status == 200
    pid = r.json()["pid"]
    socks = fill_descriptors(vd)
    try:
        vd.wait_event("local_resource_exhausted", timeout=8, model="a")
        time.sleep(1.5)  # several more checks at 300 ms: each would be a failure today
        assert not vd.events("worker_unhealthy"), vd.events("worker_unhealthy")
        assert pid_alive(pid)
    finally:
        release_descriptors(vd, socks)
    r = wait_for(lambda: (lambda x: x if x.status == 200 else None)(vd.get("/a/echo", timeout=5)),
                 timeout=10, what="a served request after the connections closed")
    assert r.json()["pid"] == pid


def metric(vd, series):
    """The value of one series of GET /metrics, by its exact name{labels}; None if absent."""
    for line in vd.get("/metrics", timeout=15).body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ", 1)[1])
    return None


def request_while_full(vd, method, path):
    """method path sent on a connection opened before vramd's descriptor table was filled."""
    c0 = RawConn(vd.port, timeout=10)
    socks = fill_descriptors(vd)
    try:
        return c0.request(method, path, {}, b"")
    finally:
        c0.close()
        release_descriptors(vd, socks)


def served(vd, path):
    return wait_for(lambda: (lambda x: x if x.status == 200 else None)(vd.get(path, timeout=5)),
                    timeout=10, what=f"{path} served after the connections closed")


def test_proxied_request_short_of_descriptors_is_503_not_the_workers(vramd):
    """The worker is loaded by an admin load (no pooled connection to it): the request on the
    connection opened beforehand finds no descriptor for the upstream. Expected 503
    local_resource_exhausted with Retry-After: 1, no upstream_failed / worker_suspect /
    worker_ejected, the instance not suspect with failed_in_row 0; afterwards the same pid
    answers, and /v1/status and /metrics count one proxy shortage."""
    m = vramd.worker("a", health={"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2})
    vd = vramd.start(models={"a": m}, limits={"header_timeout": "30s", "max_connections": 1000})
    assert vd.post("/v1/models/a/load", timeout=20).status == 200
    pid = vd.worker_pids("a")[0]
    r = request_while_full(vd, "GET", "/a/echo")
    assert r.status == 503, r
    assert r.error_code() == "local_resource_exhausted", r
    assert r.headers.get("retry-after") == "1", r.headers
    ev = vd.wait_event("local_resource_exhausted", timeout=5, call="proxy")
    assert ev[0]["model"] == "a", ev
    for bad in ("upstream_failed", "worker_suspect", "worker_ejected", "worker_unhealthy"):
        assert not vd.events(bad), (bad, vd.events(bad))
    inst = vd.instances("a")[0]
    assert inst["suspect"] is False and inst["failed_in_row"] == 0 and inst["pid"] == pid, inst
    assert served(vd, "/a/echo").json()["pid"] == pid
    st = vd.status()
    assert st["local_resource_exhausted"]["proxy"] == 1, st["local_resource_exhausted"]
    assert metric(vd, 'vramd_local_resource_exhausted_total{call="proxy"}') == 1
    assert metric(vd, 'vramd_requests_total{model="a",outcome="local_resource_exhausted"}') == 1


def test_admin_unload_hook_short_of_descriptors_is_503_and_the_server_untouched(vramd):
    """An external server with an unload hook: the admin unload, sent on a connection opened
    before the table filled, cannot call the hook. Expected 503 local_resource_exhausted with
    Retry-After, the model not failed and still ready, the hook never reached the server; once
    the connections are gone the same admin call unloads it (the hook reached once).
    vramd_hook_calls_total counts the call not made as local_shortage, the one made as ok."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2},
        "unload": {"path": "/unload-hook"}, "reload": {"path": "/reload-hook"}}},
        limits={"header_timeout": "30s", "max_connections": 1000})
    vd.wait_model_state("ext", "ready", timeout=15)
    r = request_while_full(vd, "POST", "/v1/models/ext/unload")
    assert r.status == 503, r
    assert r.error_code() == "local_resource_exhausted", r
    assert r.headers.get("retry-after") == "1", r.headers
    vd.wait_event("local_resource_exhausted", timeout=5, call="/unload-hook")
    model = vd.model("ext")
    assert model["state"] == "ready" and "failed_reason" not in model, model
    assert vd.get("/ext/count").json()["targets"].get("/unload-hook") is None
    assert vd.status()["local_resource_exhausted"]["hook"] == 1
    assert metric(vd, 'vramd_local_resource_exhausted_total{call="hook"}') == 1
    unload_calls = 'vramd_hook_calls_total{model="ext",hook="unload",outcome="%s"}'
    assert metric(vd, unload_calls % "local_shortage") == 1
    assert metric(vd, unload_calls % "ok") == 0
    # within the hook's retry hold (1 s) the same answer, without a call; then it unloads
    r = wait_for(lambda: (lambda x: x if x.status != 503 else None)(vd.post("/v1/models/ext/unload", timeout=20)),
                 timeout=5, what="the admin unload once the hold passed")
    assert r.status == 200 and r.json()["state"] != "ready", r
    assert vd.status()["local_resource_exhausted"]["hook"] == 1
    assert vd.events("unload_hook_done", status=200), vd.log_tail(40)
    assert metric(vd, unload_calls % "ok") == 1 and metric(vd, unload_calls % "local_shortage") == 1


def test_reload_hook_short_of_descriptors_waits_and_is_not_a_failure(vramd):
    """An external server unloaded by an admin call; the next request needs its reload hook,
    but vramd has no descriptor to call it. The instance stays unloaded (no worker_failure,
    the model not failed) and the hook is tried again every second; once the connections are
    gone it reloads and the waiting request is answered 200."""
    ext = vramd.external("ext")
    vd = vramd.start(models={"ext": {
        "route": "/ext/", "url": f"http://127.0.0.1:{ext.port}",
        "health": {"path": "/health", "interval": "5s", "timeout": "1s", "failures": 2},
        "unload": {"path": "/unload-hook"}, "reload": {"path": "/reload-hook"}, "deadline": "30s"}},
        limits={"header_timeout": "30s", "max_connections": 1000})
    vd.wait_model_state("ext", "ready", timeout=15)
    r = vd.post("/v1/models/ext/unload", timeout=20)
    assert r.status == 200 and r.json()["state"] != "ready", r
    c0 = RawConn(vd.port, timeout=20)
    socks = fill_descriptors(vd)
    try:
        c0.send(b"GET /ext/echo HTTP/1.1\r\nHost: x\r\n\r\n")
        vd.wait_event("local_resource_exhausted", timeout=5, call="/reload-hook", count=2)  # tried again
        assert not vd.events("worker_failure"), vd.events("worker_failure")
    finally:
        release_descriptors(vd, socks)
    r = c0.read_response(timeout=15)
    c0.close()
    assert r.status == 200, r
    assert vd.events("reload_hook_done", status=200), vd.log_tail(40)
    model = vd.model("ext")
    assert model["state"] == "ready" and "failed_reason" not in model, model
    assert vd.status()["local_resource_exhausted"]["hook"] >= 2
