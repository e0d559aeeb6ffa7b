"""A second vramd on a running one's state_dir (issue 36, defect 2): an operator runs
`vramd --config /etc/vramd/vramd.yaml` by hand while the service runs. Before the state_dir
lock it SIGKILLed the running daemon's workers as stale at once, waited 30 s without a line
and exited on "address already in use"; on another port it ran beside the first, sharing
jobs.db, the results and the shim socket, and when it stopped the first could start no
worker (its cgroup subtree was gone). Now it exits 1 at once, naming the running pid, and
touches nothing: the first daemon's worker, its queued job and its cgroups are untouched.
"""
import time

import pytest

from vramdkit import pid_alive, request, sim_s, wait_for

from .faultkit import instance_pid

WORKER = ["--resident", "512MiB", "--per-request", "256MiB", "--run-time", sim_s(0.1)]


def model(faults):
    return {"w": faults.model("w", WORKER, "512MiB", "256MiB")}


@pytest.mark.parametrize("port", ["same", "another"])
def test_a_second_vramd_on_a_running_ones_state_dir_exits_at_once_and_touches_nothing(faults, port):
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = faults.start_vramd(gpu, model(faults), state_dir=str(state_dir))
    assert vd.generate("w").status == 200
    worker = instance_pid(vd, "w")
    job = request(vd.port, "POST", "/v1/jobs", body={"model": "w", "path": "/generate", "body": {}}, timeout=10)
    assert job.status == 202, job

    top = {"state_dir": str(state_dir)}
    if port == "same":
        top["listen"] = f"127.0.0.1:{vd.port}"
    started = time.monotonic()
    vd2 = faults.start_vramd(gpu, model(faults), wait=False, **top)
    code = vd2.wait_exit(timeout=20)
    took = time.monotonic() - started
    vd2.stopped = True
    vd2._close_files()
    assert code == 1, (code, vd2.log_tail(20))
    assert took < 10, f"the second vramd took {took:.1f} s to give up"
    taken = vd2.events("state_dir_taken")
    assert taken and taken[0]["running_pid"] == vd.proc.pid, vd2.log_tail(20)
    assert f"pid {vd.proc.pid}" in vd2.log_text()
    assert not vd2.events("stale_workers_killed"), "the second vramd killed the first one's workers"

    assert pid_alive(worker), "the running daemon's worker was killed"
    assert instance_pid(vd, "w") == worker
    assert vd.generate("w").status == 200
    # its cgroups are still there: a fresh worker can start after an unload
    r = request(vd.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    assert vd.generate("w").status == 200
    assert not vd.events("worker_spawn_failed")
    jid = job.json()["id"]
    wait_for(lambda: request(vd.port, "GET", f"/v1/jobs/{jid}", timeout=5).json()["state"] == "succeeded",
             timeout=30, what="the first daemon's job to succeed")
    faults.finish()


def test_the_state_dir_is_free_again_once_its_vramd_is_gone(faults):
    """The lock is a descriptor's flock: a vramd that died (SIGKILL) holds nothing, and the
    next start on the same state_dir takes it at once."""
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = faults.start_vramd(gpu, model(faults), state_dir=str(state_dir))
    assert vd.generate("w").status == 200
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode, vd.stopped = vd.proc.returncode, True
    vd._close_files()
    vd2 = faults.start_vramd(gpu, model(faults), state_dir=str(state_dir))
    assert not vd2.events("state_dir_taken")
    assert vd2.generate("w").status == 200
    faults.finish()
