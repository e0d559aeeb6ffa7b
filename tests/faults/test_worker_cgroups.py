"""A cgroup per worker instance (issue 21, RELIABILITY cases 7 and 37): a worker that
detaches a GPU-holding helper with setsid, or through a double fork, keeps it in its
instance's cgroup. The helper's bytes are booked to the instance (not foreign); after an
unload, after vramd's SIGKILL and after the next start no such process is left and NVML
shows the bytes back; 100 start/stop cycles leave no process and no cgroup behind.

The modes are tested where this machine has them: v2 (the unified hierarchy, cgroup.kill)
and v1 (pids + freezer), each asked for by name; a test skips, saying why, where the mode
cannot be had. Every wait is a bounded poll.
"""
import os
import signal
import time
from pathlib import Path

import pytest

from vramdkit import binary, cgroup_usable, pid_alive, pids_with_cmdline, proc_cmdline, request, sim_s, wait_for

from .faultkit import instance_pid, wait_gone

WORKER = ["--resident", "512MiB", "--per-request", "256MiB", "--run-time", sim_s(0.2)]
GiB = 1 << 30
HELPER = GiB


def helper_cmd(faults, gpu, mode):
    """The worker: a shell that starts a GPU-holding helper outside its process group
    (mode "setsid": `setsid bash -c ...` in the background; "double-fork": a subshell that
    starts it and exits, so the helper is orphaned), then execs simworker. The helper's
    argv[0] carries the test's tag (exec -a), so leftovers are found and killed."""
    simgpu = binary("simgpu")
    hold = (f"exec -a holder@{faults.tag} {simgpu} alloc {gpu} --bytes {HELPER} --hold 1h "
            "</dev/null >/dev/null 2>&1")
    if mode == "setsid":
        start = f"setsid bash -c '{hold}' &"
    else:
        start = f"( setsid bash -c '{hold}' & ) ;"
    worker = " ".join([str(binary("simworker")), "--port", "{port}", "--name", f"w@{faults.tag}", *WORKER])
    return ["/bin/bash", "-c", f"{start} exec {worker}"]


def helpers(faults):
    """The live helpers (argv[0] is holder@TAG; a shell whose -c text names it is not one)."""
    return [p for p in pids_with_cmdline(f"holder@{faults.tag}")
            if proc_cmdline(p).startswith(f"holder@{faults.tag}")]


def gpu_used(faults, gpu):
    return faults.show(gpu)["gpus"][0]["used"]


def cgroup_of(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        return [line.strip().split(":", 2)[2] for line in f]


def leaves(vd):
    """The leaves under the daemon's cgroup subtree, in the hierarchy it joins."""
    st = vd.status()["cgroup"]
    path = st.get("path")
    if not path:
        return []
    out = []
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer"):
        d = Path(root + path)
        if d.is_dir():
            out += [p.name for p in d.iterdir() if p.is_dir()]
    return out


def start(faults, gpu, mode, cg_mode, state_dir):
    m = faults.model("w", WORKER, "512MiB", "256MiB", cmd=helper_cmd(faults, gpu, mode))
    return faults.start_vramd(gpu, {"w": m}, state_dir=str(state_dir), cgroup={"mode": cg_mode})


def wait_helper(faults):
    return wait_for(lambda: helpers(faults) or None, timeout=20, what="the detached helper to start")[0]


def wait_booked(vd, at_least):
    def booked():
        st = vd.status()
        inst = [i for m in st["models"] for i in m["instances"] if i["state"] == "ready"]
        g = st["gpus"][0]
        return inst and inst[0]["measured_bytes"] >= at_least and g["foreign"] == 0 and (inst[0], g)
    return wait_for(booked, timeout=20, what=f"the instance to be booked >= {at_least} bytes, nothing foreign")


@pytest.mark.parametrize("cg_mode", ["v2", "v1"])
@pytest.mark.parametrize("mode", ["setsid", "double-fork"])
def test_detached_helper_is_the_instances_and_dies_with_it(faults, mode, cg_mode):
    """The helper leaves the worker's process group, and its 1 GiB is booked to the
    instance (measured >= resident + 1 GiB, foreign 0). Unload: the helper is gone and NVML
    shows every byte back. Loaded again, then vramd is SIGKILLed: the guard takes the
    helper (a cgroup member) within seconds. The next start finds nothing left and the
    model serves again."""
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = start(faults, gpu, mode, cg_mode, state_dir)
    assert vd.status()["cgroup"]["mode"] == cg_mode
    assert vd.status()["cgroup"]["cannot_catch"] is None  # a cgroup mode holds every process
    ready = vd.first("cgroup_ready")
    assert ready["level"] == "info" and ready["cannot_catch"] is None, ready
    assert vd.generate("w").status == 200
    worker = instance_pid(vd, "w")
    helper = wait_helper(faults)
    assert os.getpgid(helper) != worker, "the helper is still in the worker's process group"
    inst, g = wait_booked(vd, 512 * (1 << 20) + HELPER)
    assert inst["cgroup"] and any(p == inst["cgroup"] or p.startswith(inst["cgroup"] + "/")
                                  for p in cgroup_of(helper)), (inst["cgroup"], cgroup_of(helper))
    assert vd.status()["nvml"]["attribution"] == "cgroup"

    r = request(vd.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    wait_gone([worker, helper], timeout=10, what="worker and helper after the unload")
    wait_for(lambda: gpu_used(faults, gpu) == 0, timeout=20, what="NVML to show every byte back")
    wait_for(lambda: not leaves(vd), timeout=10, what="the instance's cgroup to be removed")

    assert vd.generate("w").status == 200
    helper2 = wait_helper(faults)
    cg_path = vd.status()["cgroup"]["path"]
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode, vd.stopped = vd.proc.returncode, True
    vd._close_files()
    subtree = [Path(r + path) for r in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/pids",
                                         "/sys/fs/cgroup/freezer") for path in [cg_path]]
    wait_gone([helper2], timeout=10, what="the helper after vramd was SIGKILLed (the guard)")
    wait_for(lambda: not any(d.is_dir() and d != Path("/sys/fs/cgroup") for d in subtree), timeout=10,
             what="the guard to remove the daemon's cgroup subtree")
    wait_for(lambda: gpu_used(faults, gpu) == 0, timeout=20, what="NVML to show the bytes back")

    vd2 = start(faults, gpu, mode, cg_mode, state_dir)
    assert not helpers(faults)
    assert vd2.generate("w").status == 200
    faults.finish()
    assert not helpers(faults), "a helper outlived the clean stop"


@pytest.mark.parametrize("cg_mode", ["v2", "v1"])
def test_next_start_kills_what_a_dead_run_left_in_its_cgroups(faults, cg_mode):
    """RELIABILITY 37 without the guard: the guard is killed first, then vramd. The worker's
    leader dies (PR_SET_PDEATHSIG), the setsid helper does not. The next vramd on the same
    state_dir finds it in its cgroup subtree at start (cgroup_swept), kills it and removes
    the leaf, before it serves."""
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = start(faults, gpu, "setsid", cg_mode, state_dir)
    assert vd.generate("w").status == 200
    helper = wait_helper(faults)
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    os.kill(guard, signal.SIGKILL)
    wait_gone([guard], timeout=5, what="the guard")
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode, vd.stopped = vd.proc.returncode, True
    vd._close_files()
    time.sleep(0.5)
    assert pid_alive(helper), "the helper died without the guard: nothing left to test"

    vd2 = start(faults, gpu, "setsid", cg_mode, state_dir)
    swept = vd2.events("cgroup_swept")
    assert swept and swept[0]["killed"] >= 1, swept
    wait_gone([helper], timeout=5, what="the old run's helper")
    wait_for(lambda: gpu_used(faults, gpu) <= 0 or vd2.status()["gpus"][0]["foreign"] == 0, timeout=20,
             what="no foreign memory left")
    assert vd2.generate("w").status == 200
    faults.finish()


@pytest.mark.parametrize("cg_mode", ["v2"])
def test_a_late_guard_leaves_the_next_vramd_alone(faults, cg_mode):
    """The guard of a SIGKILLed vramd that wakes up only after the next vramd started on the
    same state_dir (a loaded host: the guard is stopped here until then) must not sweep the
    subtree the new vramd now owns (same state_dir, same subtree): the new vramd holds the
    subtree's owner lock, so the guard skips its cgroup sweep. Before the lock, it killed the
    new vramd's worker and removed the subtree under it, and every later start failed with
    "cgroup .../w-N: No such file or directory" (test_jobs_survive_kill9 in CI)."""
    if not cgroup_usable(cg_mode):
        pytest.skip(f"cgroup {cg_mode} cannot be written on this machine")
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    vd = start(faults, gpu, "setsid", cg_mode, state_dir)
    assert vd.generate("w").status == 200
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    os.kill(guard, signal.SIGSTOP)
    try:
        vd.proc.kill()
        vd.proc.wait(30)
        vd.returncode, vd.stopped = vd.proc.returncode, True
        vd._close_files()
        vd2 = start(faults, gpu, "setsid", cg_mode, state_dir)
        assert vd2.generate("w").status == 200
        worker = instance_pid(vd2, "w")
        helper = wait_helper(faults)
    finally:
        os.kill(guard, signal.SIGCONT)
    wait_gone([guard], timeout=10, what="the late guard to finish")
    assert pid_alive(worker) and pid_alive(helper), "the late guard killed the new vramd's worker"
    assert leaves(vd2), "the late guard removed the new vramd's cgroups"
    r = request(vd2.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    assert vd2.generate("w").status == 200  # a new leaf can be made: the subtree is there
    faults.finish()


def test_100_start_stop_cycles_leave_no_process_and_no_cgroup(faults):
    """100 loads and unloads of a worker that detaches a helper each time: after each
    unload the helper is gone; at the end no process of the test and no leaf is left, and
    NVML shows nothing held."""
    mode = "v2" if cgroup_usable("v2") else "v1" if cgroup_usable("v1") else None
    if not mode:
        pytest.skip("no cgroup hierarchy can be written on this machine")
    gpu = faults.gpu_set("16GiB")
    vd = start(faults, gpu, "setsid", mode, faults.tmp / "state")
    for i in range(100):
        r = request(vd.port, "POST", "/v1/models/w/load", timeout=30)
        assert r.status == 200, (i, r)
        r = request(vd.port, "POST", "/v1/models/w/unload", timeout=30)
        assert r.status == 200, (i, r)
    wait_for(lambda: not helpers(faults), timeout=10, what="every helper gone")
    wait_for(lambda: not leaves(vd), timeout=10, what="every leaf removed")
    wait_for(lambda: gpu_used(faults, gpu) == 0, timeout=20, what="NVML to show nothing held")
    starts = vd.events("worker_started", model="w")
    assert len(starts) == 100, len(starts)
    faults.finish()


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_subreaper_fallback_adopts_and_reaps_orphans(faults):
    """cgroup.mode subreaper (what vramd falls back to where no hierarchy can be written):
    a helper orphaned by a double fork is re-parented to vramd, not to init, and reaped by it
    when it exits (no zombie left). The stated limit: the helper is not the instance's (it
    left the process group), so its memory is foreign and it outlives the unload; /v1/status
    and the start's cgroup_ready line (a warning) say so (cannot_catch)."""
    gpu = faults.gpu_set("16GiB")
    vd = start(faults, gpu, "double-fork", "subreaper", faults.tmp / "state")
    cg = vd.status()["cgroup"]
    assert cg["mode"] == "subreaper" and cg["path"] is None, cg
    assert "setsid" in cg["cannot_catch"] and "foreign" in cg["cannot_catch"], cg
    assert "outlives a SIGKILL of vramd" in cg["cannot_catch"], cg
    ready = vd.first("cgroup_ready")
    assert ready["level"] == "warn" and ready["mode"] == "subreaper" and ready["cannot_catch"] == cg["cannot_catch"], ready
    assert vd.generate("w").status == 200
    helper = wait_helper(faults)
    assert ppid_of(helper) == vd.proc.pid, "the orphan was not adopted by vramd"
    wait_for(lambda: vd.status()["gpus"][0]["foreign"] >= HELPER, timeout=20,
             what="the orphan's memory counted foreign (the subreaper's stated limit)")
    r = request(vd.port, "POST", "/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    assert pid_alive(helper), "in subreaper mode the helper outlives the unload (stated limit)"
    os.kill(helper, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{helper}"), timeout=10,
             what="the orphan reaped by vramd (not left a zombie)")
    faults.finish()
