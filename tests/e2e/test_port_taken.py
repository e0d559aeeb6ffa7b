"""e2e: a worker's port taken by another process before the worker binds it.

vramd picks a supervised worker's port with bind(0) and lets it go; until the worker binds it,
another process can take it. If a server there answers the health check, vramd must not take
it for the worker (requests would go to that stranger): the first healthy answer counts only
when /proc shows the port's listener in the worker's process group or cgroup (the decoy leaves
both; a server the worker itself detaches stays in its cgroup and is its own: the second test). Here the first start's
port is taken by a decoy outside the group that answers everything 200; the worker exits
("address already in use"), vramd restarts it on a new port, and the request is served by the
real worker. Before the fix vramd declared the decoy's answers healthy (worker_ready) and
forwarded the request to it.
"""
import os
import signal
import sys
from pathlib import Path

import pytest

from vramdkit import pid_alive, wait_for

THIEF = str(Path(__file__).with_name("port_thief.py"))


def test_a_stranger_on_the_workers_port_is_not_the_worker(vramd, tmp_path):
    marker = tmp_path / "decoy.pid"
    m = vramd.worker("w")
    m["cmd"] = [sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3", THIEF,
                str(marker), *m["cmd"]]
    m["health"] = {"path": "/health", "interval": "200ms", "timeout": "1s", "failures": 2}
    vd = vramd.start(models={"w": m})
    try:
        r = vd.get("/w/echo", timeout=30)
        assert r.status == 200, r
        body = r.json()
        assert "decoy" not in body and body.get("pid"), body
        taken = vd.events("worker_port_taken")
        assert taken, "the decoy's answers were taken for the worker's"
        ready = vd.events("worker_ready")
        assert ready and all(e["instance"] != taken[0]["instance"] for e in ready), (taken, ready)
        assert vd.events("worker_failure"), "the first start should have failed"
    finally:
        if marker.exists():
            try:
                os.kill(int(marker.read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def test_a_server_the_worker_detached_is_the_worker(vramd):
    """The worker's command keeps running (a container CLI, a wrapper that waits) while the
    server it started with setsid serves the port: outside the worker's process group, inside
    its cgroup. vramd takes its health answer as the worker's (no worker_port_taken), the
    request is served by it, and at the unload both die."""
    m = vramd.worker("w")
    inner = " ".join(f"'{w}'" if "{" not in w else f'"{w}"' for w in m["cmd"])
    m["cmd"] = ["/bin/sh", "-c", f"setsid {inner} & wait"]
    vd = vramd.start(models={"w": m})
    st = vd.status()
    if st["cgroup"]["mode"] not in ("v1", "v2"):
        pytest.skip(f"no cgroup per worker here (mode {st['cgroup']['mode']})")
    r = vd.get("/w/echo", timeout=30)
    assert r.status == 200, r
    server = r.json()["pid"]
    assert os.getpgid(server) != vd.worker_pids("w")[0]
    assert not vd.events("worker_port_taken")
    assert vd.post("/v1/models/w/unload").status == 200
    wait_for(lambda: not pid_alive(server), timeout=10, what="the detached server to die with its instance")
