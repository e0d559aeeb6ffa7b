"""Reliability of the daemon itself: what happens to workers when vramd is SIGKILLed, when
vramd runs out of descriptors, when a reload touches the listener or the admin token, what
/readyz tells a load balancer, and what a failed start prints.

Every test starts what it needs through the `vramd` fixture (or runs the binary itself and
stops it), and is bounded well under 20 s."""
import json
import os
import resource
import signal
import socket
import subprocess
import time

import pytest

from vramdkit import (PYTHON, REPO_ROOT, children_of, fill_descriptors, free_port, pid_alive, proc_cmdline,
                      release_descriptors,
                      vramd_binary, wait_for, yaml_dump)
from vramdkit.factory import TESTWORKER


def group_members(pgid):
    """Live (non-zombie) processes in process group pgid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def sigkill_vramd(vd):
    """SIGKILL vramd (no drain, no clean-up of its own) and reap it; the fixture then does
    not expect exit 0 from it."""
    vd.proc.kill()
    vd.proc.wait(10)
    vd.returncode = vd.proc.returncode
    vd._close_files()
    vd.stopped = True


def guard_pid(vd):
    ev = vd.wait_event("guard_started", timeout=5)
    return ev[0]["pid"]


def wrapped_worker(vramd):
    """A worker behind a shell wrapper that keeps a grandchild: the shell is vramd's child
    (the process group leader named in the pid file), the testworker its child."""
    line = f"{PYTHON} {TESTWORKER} --port {{port}} --name w@{vramd.tag} & wait"
    return vramd.worker("w", cmd=["/bin/sh", "-c", line])


# --- 1. workers die with vramd, wrappers included --------------------------------------------

def test_wrapped_worker_dies_within_1s_of_vramd_sigkill(vramd):
    """cmd: [/bin/sh, -c, "python3 testworker.py ... & wait"]: PR_SET_PDEATHSIG kills only
    the shell. Expected: within 1 s of vramd's SIGKILL no process of the worker's group is
    alive (the guard killed the group), and the guard itself is gone too."""
    vd = vramd.start(models={"w": wrapped_worker(vramd)})
    assert vd.get("/w/echo").status == 200
    shell = vd.worker_pids("w")[0]
    inner = [p for p, s in children_of(shell) if s != "Z"]
    assert len(inner) == 1 and "testworker.py" in proc_cmdline(inner[0]), inner
    started = vd.first("guard_started")

    sigkill_vramd(vd)
    t0 = time.monotonic()
    left = None
    while time.monotonic() - t0 < 1.0:
        left = group_members(shell) + [p for p in inner if pid_alive(p)]
        if not left:
            break
        time.sleep(0.02)
    assert not left, (f"worker processes alive 1 s after vramd was SIGKILLed: "
                      f"{ {p: proc_cmdline(p) for p in set(left)} }")
    assert started, "no guard_started event"
    wait_for(lambda: not pid_alive(started["pid"]), timeout=2, what="the guard to exit after its vramd died")


def test_guard_holds_nothing_and_leaves_with_a_clean_exit(vramd):
    """The guard is not vramd's child (vramd's children are its workers), holds no socket
    (not the listener: a restarted vramd can bind the port at once), keeps no descriptor
    but stdin/stdout (/dev/null), stderr (the log) and its pipe, and exits when vramd exits
    0 after a drain."""
    vd = vramd.start(models={"a": vramd.worker("a")})
    assert vd.get("/a/echo").status == 200
    guard = guard_pid(vd)
    assert guard not in {p for p, _ in children_of(vd.proc.pid)}
    fds = {int(fd): os.readlink(f"/proc/{guard}/fd/{fd}") for fd in os.listdir(f"/proc/{guard}/fd")}
    assert set(fds) <= {0, 1, 2, 3}, fds
    assert not [t for t in fds.values() if t.startswith("socket:")], fds
    assert fds[3].startswith("pipe:"), fds
    assert vd.stop() == 0
    wait_for(lambda: not pid_alive(guard), timeout=1, what="the guard to exit after a drain")


# --- 2. descriptor exhaustion --------------------------------------------------------------

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


# --- 3. a reload never opens the admin routes -------------------------------------------------

def test_reload_cannot_move_listen_or_drop_the_token(vramd):
    """Started on 0.0.0.0:P with a token. A reload to 127.0.0.1:P without a token is refused
    (400 bad_config naming listen): admin routes still need the token. A reload that keeps
    0.0.0.0:P and drops the token is refused (naming admin_token_file). A reload to a busy
    port is refused (naming listen)."""
    token = vramd.tmp / "token"
    token.write_text("s3cret\n")
    port = free_port()
    vd = vramd.start(models={"a": vramd.worker("a")}, listen=f"0.0.0.0:{port}",
                     admin_token_file=str(token))
    auth = {"Authorization": "Bearer s3cret"}
    good = dict(vd.config)

    open_cfg = dict(good, listen=f"127.0.0.1:{port}")
    del open_cfg["admin_token_file"]
    vd.write_config(open_cfg)
    r = vd.post("/v1/admin/reload", headers=auth)
    assert r.status == 400 and r.error_code() == "bad_config", r
    assert "listen" in r.json()["error"]["message"], r
    assert vd.post("/v1/admin/drain").status == 401
    assert vd.post("/v1/models/a/unload").status == 401

    no_token = dict(good)
    del no_token["admin_token_file"]
    vd.write_config(no_token)
    r = vd.post("/v1/admin/reload", headers=auth)
    assert r.status == 400 and r.error_code() == "bad_config", r
    assert "admin_token_file" in r.json()["error"]["message"], r

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        vd.write_config(dict(good, listen=f"0.0.0.0:{busy.getsockname()[1]}"))
        r = vd.post("/v1/admin/reload", headers=auth)
        assert r.status == 400 and "listen" in r.json()["error"]["message"], r
    finally:
        busy.close()
    vd.write_config(good)
    assert vd.post("/v1/admin/reload", headers=auth).status == 200
    assert vd.post("/v1/admin/drain").status == 401


def test_reload_to_a_busy_port_is_refused(vramd):
    vd = vramd.start(models={"a": vramd.worker("a")})
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        vd.write_config(dict(vd.config, listen=f"127.0.0.1:{busy.getsockname()[1]}"))
        r = vd.post("/v1/admin/reload")
        assert r.status == 400 and r.error_code() == "bad_config", r
        assert "listen" in r.json()["error"]["message"], r
        assert vd.first("config_reload_failed"), vd.log_tail()
    finally:
        busy.close()


# --- 4. /readyz ------------------------------------------------------------------------------

def external_model(port):
    return {"url": f"http://127.0.0.1:{port}", "route": None,
            "health": {"path": "/health", "interval": "200ms", "timeout": "500ms", "failures": 1}}


def test_readyz_is_503_when_every_model_failed_and_per_model_readiness(vramd):
    """Two external models whose servers are down: both failed, /readyz 503
    all_models_failed, each /v1/models/NAME/ready 503 model_failed. One server comes up:
    /readyz 200, that model's /ready 200, the other still 503; unknown names 404."""
    px, py = free_port(), free_port()
    vd = vramd.start(models={"x": external_model(px), "y": external_model(py)})
    vd.wait_model_state("x", "failed", timeout=10)
    vd.wait_model_state("y", "failed", timeout=10)
    r = vd.get("/readyz")
    assert r.status == 503 and r.error_code() == "all_models_failed", r
    for name in ("x", "y"):
        r = vd.get(f"/v1/models/{name}/ready")
        assert r.status == 503 and r.error_code() == "model_failed", r
    assert vd.get("/v1/models/nope/ready").status == 404

    vramd.external("x", port=px)
    wait_for(lambda: vd.get("/v1/models/x/ready").status == 200, timeout=10, what="x ready again")
    r = vd.get("/v1/models/x/ready")
    assert r.json()["ready"] is True and r.json()["model"] == "x"
    assert vd.get("/readyz").status == 200
    assert vd.get("/v1/models/y/ready").status == 503


def test_model_ready_for_a_model_not_loaded_yet(vramd):
    """A model not loaded yet can admit work (it loads on demand): 200, state stopped."""
    vd = vramd.start(models={"a": vramd.worker("a")})
    r = vd.get("/v1/models/a/ready")
    assert r.status == 200 and r.json()["state"] == "stopped", r
    assert vd.get("/readyz").status == 200


# --- 5. one line for a failed start ------------------------------------------------------------

@pytest.mark.parametrize("case", ["bad_key", "port_busy"])
def test_failed_start_prints_one_line(tmp_path, case):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        if case == "bad_key":
            text = f"listen: 127.0.0.1:{free_port()}\nstate_dir: {tmp_path}/var\nbogus: 1\n"
        else:
            text = (f"listen: 127.0.0.1:{busy.getsockname()[1]}\nstate_dir: {tmp_path}/var\n"
                    f"models:\n  a:\n    url: http://127.0.0.1:{free_port()}\n")
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        p = subprocess.run([str(vramd_binary()), "--config", str(path)], capture_output=True,
                           text=True, timeout=15, cwd=REPO_ROOT)
    finally:
        busy.close()
    assert p.returncode == 1
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    if case == "bad_key":  # nothing else happened: one line
        assert len(lines) == 1, p.stderr
    # port busy: the start's own log lines come first (guard_started, fd_limit_low, ...);
    # the failure is still said once, as the last line
    errors = [line for line in lines if not line.startswith("{") or '"level":"error"' in line]
    assert errors == [lines[-1]], p.stderr
    e = json.loads(lines[-1])
    assert e["event"] == "vramd_start_failed", e
    if case == "bad_key":
        assert f"{path}:3:1: bogus" in e["error"], e
    else:
        assert "address already in use" in e["error"], e
