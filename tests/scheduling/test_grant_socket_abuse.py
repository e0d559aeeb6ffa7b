"""The grant socket and the grant page against a shim that lies (issue 36, defects 3 and 4):
a worker that speaks the protocol by hand (hand_shim_worker.py) or floods the socket.
docs/shim.md ("Failure modes": a bad shim fails that worker, never vramd).

What each case expects:
  - asks of 2^63 and 2^64-1 bytes, also while the asker's page says it holds bytes already
    (so `live + bytes` passes 2^64), and an ordinary ask while its page holds garbage in
    live_total: each refused `too_big` at once (long before grant_wait), nothing held
    against the GPU (`asked` 0), vramd alive, and a neighbour's shim (a real one, in a
    simworker that allocates past its grant) still asks and is granted, none refused;
  - a flood of 2,000 connections that never say HELLO, from one process: all but
    `limits.shim_connections_per_process` (16) closed at once (`shim_conn_refused
    reason=per_process`), vramd's descriptors stay within a few dozen of where they were, and
    a worker started during the flood attaches (HELLO), asks and is granted (its shim
    enforced, not detached);
  - `limits.shim_hello_timeout` and `limits.shim_connections_max`: past the global bound a
    connection is closed at once (`reason=max`); a connection without HELLO is closed at the
    timeout (`shim_hello_timeout`), after which a worker's shim attaches.
"""
import os
import socket
import time

import pytest

from vramdkit import sim_s, wait_for
from vramdkit.paths import PYTHON, shim_library

GiB = 1024 ** 3
MiB = 1024 ** 2
HAND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hand_shim_worker.py")
TOO_BIG = 3  # enum shim_refuse_reason


@pytest.fixture(autouse=True)
def _needs_shim():
    if not os.path.exists(shim_library()):
        pytest.fail(f"{shim_library()} not built")


def shim_env():
    return {"VRAMD_CUDA_SHIM_LIBRARY": shim_library()}


def hand_model(sched, **over):
    m = sched.model("hand", [], "1GiB", "0", startup_timeout="10s", grant_wait="30s", **over)
    m["cmd"] = [PYTHON, HAND, "--port", "{port}", "--name", f"hand@{sched.tag}"]
    m["cuda_shim"] = "auto"
    return m


def under_model(sched):
    """A real shim: 2 GiB weights + 3 GiB per request, declared 1 GiB per request, so each
    request's allocations past its grant ask vramd (and are granted: the card has room)."""
    m = sched.model("under", ["--resident", "2GiB", "--per-request", "3GiB", "--cache", "release",
                              "--run-time", sim_s(1)], "2560MiB", "1GiB", grant_wait="30s")
    m["cuda_shim"] = "auto"
    return m


def shim_of(vd, model):
    insts = vd.instances(model)
    return (insts[0].get("shim") if insts else None) or {}


def load(vd, model):
    r = vd.post(f"/v1/models/{model}/load", timeout=60)
    assert r.status == 200, r
    vd.wait_ready(model)


def neighbour_still_granted(vd):
    """under's first request (its estimate is raised after it: a later one would not ask)."""
    r = vd.generate("under", {"n": 1}, timeout=60)
    assert r.status == 200, r
    s = shim_of(vd, "under")
    assert s["state"] == "attached", s
    assert s["asks"] >= 1 and s["granted"] >= 1 and s["refused"] == 0, s


@pytest.mark.parametrize("nbytes,live", [
    (1 << 63, 0),                    # over any card, no wrap
    (1 << 63, 1 << 63),              # live + bytes is 2^64: wrapped to 0 before the fix
    ((1 << 64) - 1, 1 * MiB),        # wrapped below the grant: granted for nothing before the fix
    (1 * MiB, (1 << 64) - 4096),     # an ordinary ask, garbage in the page's live_total
], ids=["2^63", "2^63-over-live", "2^64-1", "garbage-page"])
def test_huge_grant_asks_refused_too_big_at_once(sched, nbytes, live):
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"hand": hand_model(sched), "under": under_model(sched)}, extra_env=shim_env())
    load(vd, "under")
    load(vd, "hand")
    r = vd.post("/hand/ask", {"bytes": nbytes, "live": live}, timeout=60)
    assert r.status == 200, r
    a = r.json()
    assert a["answer"] == "refuse" and a["aux"] == TOO_BIG, a
    assert a["ms"] < 2000, f"held {a['ms']:.0f} ms instead of refused at once"
    refused = vd.events("shim_refused", model="hand")
    assert refused and refused[-1]["reason"] == "too_big", refused
    assert vd.alive()
    assert all(g["asked"] == 0 for g in vd.gpus()), vd.gpus()
    # its page back to the truth: an ordinary ask within its grant is granted again
    a = vd.post("/hand/ask", {"bytes": 4096, "live": 0}, timeout=60).json()
    assert a["answer"] == "grant", a
    neighbour_still_granted(vd)
    sched.finish()


def grant_socket_path(vd):
    return vd.events("shim_listening")[0]["socket"]


def vramd_fds(vd):
    return len(os.listdir(f"/proc/{vd.proc.pid}/fd"))


def flood(path, n):
    """n connections to the grant socket from this process, none saying anything."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        end = time.monotonic() + 5
        while True:
            try:
                s.connect(path)
                break
            except BlockingIOError:  # the listen backlog is full until vramd accepts
                if time.monotonic() > end:
                    raise
                time.sleep(0.001)
        socks.append(s)
    return socks


def closed_by_vramd(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def test_hello_less_flood_from_one_process_leaves_other_shims_served(sched):
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"under": under_model(sched)}, extra_env=shim_env())
    before = vramd_fds(vd)
    socks = flood(grant_socket_path(vd), 2000)
    try:
        wait_for(lambda: sum(closed_by_vramd(s) for s in socks) >= len(socks) - 16, timeout=20,
                 what="the flood past the per-process bound closed")
        during = vramd_fds(vd)
        assert during <= before + 16 + 16, f"vramd's descriptors {before} -> {during} under the flood"
        refused = vd.events("shim_conn_refused", reason="per_process")
        assert refused and refused[0]["limit"] == 16 and refused[0]["pid"] == os.getpid(), refused
        load(vd, "under")  # a worker started during the flood: its shim says HELLO and asks
        neighbour_still_granted(vd)
        assert vd.alive()
    finally:
        for s in socks:
            s.close()
    sched.finish()


def test_hello_timeout_and_the_global_bound(sched):
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"under": under_model(sched)}, extra_env=shim_env(),
                           limits={"shim_hello_timeout": "1s", "shim_connections_max": 8})
    socks = flood(grant_socket_path(vd), 12)
    try:
        t0 = time.monotonic()
        wait_for(lambda: sum(closed_by_vramd(s) for s in socks) >= 4, timeout=5, what="4 past the bound closed")
        assert vd.events("shim_conn_refused", reason="max"), vd.events("shim_conn_refused")
        wait_for(lambda: all(closed_by_vramd(s) for s in socks), timeout=10, what="every HELLO-less connection closed")
        waited = time.monotonic() - t0
        assert 0.5 <= waited <= 5, waited
        assert vd.events("shim_hello_timeout"), "no shim_hello_timeout logged"
        load(vd, "under")
        neighbour_still_granted(vd)
    finally:
        for s in socks:
            s.close()
    sched.finish()
