"""A vramd restarted right after a kill -9 (systemd's Restart=on-failure) always has the
cgroup subtree it believes it has, whatever the order of the dead run's guard, its death and
the new start (issue 32). Each interleaving is held at its exact point: the guard or the new
vramd stops itself at a named pause point (VRAMD_PAUSE_AT, common/pause_point.h), or is
SIGSTOPped by the test, and is let go with SIGCONT.

  - the guard sweeps between the new start's cgroup_tree_open and its owner lock (what
    test_jobs_survive_kill9 met in CI: the subtree the new vramd had found was removed
    under it, and every worker start failed with "No such file or directory");
  - the guard holds the owner lock (sweeping) while the new vramd starts: the new one waits
    for it (cgroup_lock_waiting), then makes the subtree again;
  - the subtree removed under a running vramd (by an operator, or a guard whose lock wait
    ran out): the next worker start makes it again (cgroup_subtree_remade).
The late guard (it wakes after the new vramd holds the lock) is in test_worker_cgroups.py.
Every wait is a bounded poll.
"""
import os
import signal
from pathlib import Path

import pytest

from vramdkit import cgroup_usable, pid_alive, proc_state, request, sim_s, wait_for

from .faultkit import instance_pid, wait_gone

WORKER = ["--resident", "512MiB", "--per-request", "256MiB", "--run-time", sim_s(0.1)]
ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer")
MODES = ["v2", "v1"]


def start(faults, gpu, cg_mode, state_dir, **kw):
    m = faults.model("w", WORKER, "512MiB", "256MiB")
    return faults.start_vramd(gpu, {"w": m}, state_dir=str(state_dir), cgroup={"mode": cg_mode}, **kw)


def subtree_dirs(rel):
    """The daemon's subtree directories that exist now, in every hierarchy."""
    return [Path(r + rel) for r in ROOTS if Path(r + rel).is_dir() and Path(r + rel) != Path("/sys/fs/cgroup")]


def kill9(vd):
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode, vd.stopped = vd.proc.returncode, True
    vd._close_files()


def wait_stopped(pid, what):
    wait_for(lambda: proc_state(pid) == "T", timeout=30, what=f"{what} (pid {pid}) to stop at its pause point")


def resume(vd):
    """SIGCONT a vramd held at a pause point, then wait until it answers and reads the GPU."""
    os.kill(vd.proc.pid, signal.SIGCONT)
    wait_for(vd._healthz, timeout=60, what="vramd /healthz after its pause")
    wait_for(lambda: vd.status()["nvml"]["ok"] and vd.status()["gpus"], timeout=30,
             what="vramd reading the simulated GPU")


def serves(vd):
    """The model's worker starts, lives and answers; no start failed for its cgroup."""
    r = vd.generate("w")
    assert r.status == 200, (r, vd.log_tail(40))
    worker = instance_pid(vd, "w")
    assert pid_alive(worker)
    assert not vd.events("worker_spawn_failed"), vd.events("worker_spawn_failed")
    inst = [i for m in vd.status()["models"] for i in m["instances"]]
    assert inst and inst[0]["cgroup"], inst
    return worker


@pytest.mark.parametrize("cg_mode", MODES)
def test_guard_sweeps_between_the_new_starts_open_and_its_lock(faults, cg_mode):
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = start(faults, gpu, cg_mode, state_dir)
    assert vd.generate("w").status == 200
    rel = vd.status()["cgroup"]["path"]
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    os.kill(guard, signal.SIGSTOP)
    try:
        kill9(vd)
        vd2 = start(faults, gpu, cg_mode, state_dir, extra_env={"VRAMD_PAUSE_AT": "cgroup_opened"}, wait=False)
        wait_stopped(vd2.proc.pid, "the new vramd")
        assert subtree_dirs(rel), "the new vramd's open found or made no subtree"
    finally:
        os.kill(guard, signal.SIGCONT)
    wait_gone([guard], timeout=20, what="the dead run's guard to sweep and exit")
    # the interleaving of the CI failure: the guard had the lock, swept, removed the subtree
    assert not subtree_dirs(rel), "the guard did not remove the subtree: the race was not reproduced"
    resume(vd2)
    serves(vd2)
    assert subtree_dirs(rel), "the new vramd did not make its subtree again"
    r = request(vd2.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    serves(vd2)
    faults.finish()


@pytest.mark.parametrize("cg_mode", MODES)
def test_new_start_waits_for_a_sweeping_guard_then_remakes_the_subtree(faults, cg_mode):
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    # the guard inherits vramd's environment: it stops once it holds the lock, before its sweep
    vd = start(faults, gpu, cg_mode, state_dir, extra_env={"VRAMD_PAUSE_AT": "guard_locked"})
    assert vd.generate("w").status == 200
    rel = vd.status()["cgroup"]["path"]
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    try:
        kill9(vd)
        wait_stopped(guard, "the guard")
        vd2 = start(faults, gpu, cg_mode, state_dir, wait=False)
        vd2.wait_event("cgroup_lock_waiting", timeout=30)
        assert subtree_dirs(rel)
    finally:
        os.kill(guard, signal.SIGCONT)
    wait_gone([guard], timeout=20, what="the guard to sweep and exit")
    wait_for(vd2._healthz, timeout=60, what="vramd /healthz once the guard let go of the lock")
    wait_for(lambda: vd2.status()["nvml"]["ok"] and vd2.status()["gpus"], timeout=30, what="vramd reading the GPU")
    assert vd2.events("cgroup_lock_taken"), "the new vramd did not wait for the guard's lock"
    serves(vd2)
    faults.finish()


@pytest.mark.parametrize("cg_mode", MODES)
def test_a_subtree_removed_under_a_running_vramd_is_made_again_at_the_next_start(faults, cg_mode):
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    vd = start(faults, gpu, cg_mode, faults.tmp / "state")
    serves(vd)
    rel = vd.status()["cgroup"]["path"]
    r = request(vd.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r

    def removed():
        try:
            for d in subtree_dirs(rel):
                for leaf in [p for p in d.iterdir() if p.is_dir()]:
                    leaf.rmdir()
                d.rmdir()
        except OSError:  # EBUSY: the unloaded worker is still leaving its leaf
            return False
        return not subtree_dirs(rel)
    wait_for(removed, timeout=10, what="the test to remove the subtree")
    serves(vd)
    assert vd.events("cgroup_subtree_remade"), "no cgroup_subtree_remade event"
    faults.finish()
