"""Supervision (SPEC 5): workers die with vramd (PR_SET_PDEATHSIG), a new vramd on the same
state_dir cleans up after a previous run (pid files), and many kill/restart cycles leave
no zombie and no descriptor behind.
"""
import os
import signal
import threading
import time

import pytest

from vramdkit import (binary, children_of, pid_alive, pids_with_cmdline, proc_cmdline, proc_state,
                      request, sim_s, wait_for, zombie_children)

from .faultkit import instance_pid, wait_gone

WORKER = ["--resident", "256MiB", "--per-request", "256MiB", "--run-time", sim_s(0.5)]


def kill_vramd(vd):
    """SIGKILL vramd (no drain, no cleanup of its own) and reap it."""
    vd.proc.kill()
    vd.proc.wait(30)
    vd.returncode = vd.proc.returncode
    vd._close_files()
    vd.stopped = True


def pid_file_pids(state_dir):
    """The worker pids named by vramd's pid files (state_dir/pids/MODEL.ID.pid: "pid pgid
    starttime")."""
    d = state_dir / "pids"
    return {int(p.read_text().split()[0]) for p in d.glob("*.pid")} if d.exists() else set()


def test_vramd_sigkill_takes_its_workers_and_a_new_vramd_starts_clean(faults):
    """vramd with two models whose workers run (one of them mid-request) is SIGKILLed:
    expected every worker pid gone within a few seconds (PR_SET_PDEATHSIG; nobody else
    kills them), the client of the running request sees its connection end without an
    answer, and no process of this test is left. The old run's pid files stay behind. A
    new vramd with the same state_dir then starts cleanly: the stale pid files name dead
    processes (or zombies not yet reaped by init, which it may "kill": stale_worker_killed
    only ever for the old pids), it removes them, no process but its own workers is alive,
    both models serve requests on new workers, and the pid files are the new workers'
    only."""
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    models = {"a": faults.model("a", WORKER, "1GiB", "512MiB"),
              "b": faults.model("b", [*WORKER, "--time-scale", "steps:1:1"], "1GiB", "512MiB")}
    vd = faults.start_vramd(gpu, models, state_dir=str(state_dir))
    assert vd.generate("a").status == 200
    assert vd.generate("b").status == 200
    old = [instance_pid(vd, "a"), instance_pid(vd, "b")]
    running = vd.later("b", {"steps": 200})          # 10 s real: still running at the kill
    vd.wait_in_flight("b")
    assert pid_file_pids(state_dir) == set(old)

    kill_vramd(vd)
    wait_gone(old, timeout=10, what="workers after vramd was SIGKILLed")
    r = running.result()
    assert r.status is None, f"a request through a SIGKILLed vramd got an answer: {r}"
    left = pids_with_cmdline(faults.tag)
    assert not left, {p: proc_cmdline(p) for p in left}
    assert pid_file_pids(state_dir) == set(old), "the killed vramd's pid files are the stale ones"

    vd2 = faults.start_vramd(gpu, models, state_dir=str(state_dir))
    base = faults.baseline(vd2)
    # an old worker may still be a zombie (dead, waiting for init to reap it) when the new
    # vramd reads the pid files; killing that is harmless; anything else is not
    stale = vd2.events("stale_worker_killed")
    assert {e["pid"] for e in stale} <= set(old), stale
    left = pids_with_cmdline(faults.tag)
    assert set(left) <= set(instance_pids_of(vd2)), {p: proc_cmdline(p) for p in left}
    assert vd2.generate("a").status == 200
    assert vd2.generate("b").status == 200
    new = [instance_pid(vd2, "a"), instance_pid(vd2, "b")]
    assert not set(new) & set(old)
    assert pid_file_pids(state_dir) == set(new)
    faults.check_clean(vd2, base)
    faults.finish()


def instance_pids_of(vd):
    return {i["pid"] for m in vd.status()["models"] for i in m["instances"] if i.get("pid")}


def test_worker_behind_a_shell_wrapper_is_killed_by_the_next_vramd(faults):
    """A worker started through a shell wrapper (cmd: [/bin/sh, -c, "simworker ...; exit
    $?"], as `cmd: [bash, start.sh]` does): the shell is vramd's child, simworker its
    child, both in the worker's process group. vramd is SIGKILLed: PR_SET_PDEATHSIG kills
    the shell only, and simworker is left running (its guard is killed first: the guard
    would otherwise kill it at once). Expected (SPEC 5: "on start, vramd kills
    workers left behind by a previous run (pid files in state_dir)"): a new vramd with the
    same state_dir kills it (its process group) at start, so no process of the old run is
    alive once the new vramd answers /healthz, and the model serves requests again. (The
    shell, the group leader whose pid the pid file names, is gone by then: vramd must kill
    the group, not only a leader that is still there.)"""
    gpu = faults.gpu_set("16GiB")
    state_dir = faults.tmp / "state"
    name = f"wrapped@{faults.tag}"
    line = " ".join([str(binary("simworker")), "--port", "{port}", "--name", name, *WORKER])
    m = faults.model("wrapped", WORKER, "1GiB", "512MiB")
    m["cmd"] = ["/bin/sh", "-c", f"{line}; exit $?"]
    vd = faults.start_vramd(gpu, {"wrapped": m}, state_dir=str(state_dir))
    assert vd.generate("wrapped").status == 200
    shell = instance_pid(vd, "wrapped")
    inner = [p for p, _ in children_of(shell)]
    assert len(inner) == 1 and "simworker" in proc_cmdline(inner[0]), inner

    # the guard (process_guard.c) would kill simworker within a second of vramd's death
    # (tests/e2e/test_workers_die_with_vramd.py): kill it first, so this tests the next
    # vramd's stale kill, the safety net for when the guard died too
    guard = vd.wait_event("guard_started", timeout=5)[0]["pid"]
    os.kill(guard, signal.SIGKILL)
    wait_gone([guard], timeout=5, what="the guard")
    kill_vramd(vd)
    wait_gone([shell], timeout=10, what="the wrapper shell after vramd was SIGKILLed")
    # the orphaned simworker is what this case is about: it is still there
    assert pid_alive(inner[0]), "simworker died with the shell: nothing left behind to test"
    # the dead shell (the group leader) is a zombie until init reaps it; on a host, init
    # reaps at once. Wait for that, so the new vramd sees what it would see on a host.
    deadline = time.monotonic() + 15
    while proc_state(shell) is not None:
        if time.monotonic() > deadline:
            pytest.skip("this system's init does not reap orphaned zombies")
        time.sleep(0.1)

    vd2 = faults.start_vramd(gpu, {"wrapped": m}, state_dir=str(state_dir))
    base = faults.baseline(vd2)
    still = [p for p in inner if pid_alive(p)]
    assert not still, (f"worker of the previous run still alive after the new vramd started: "
                       f"{ {p: proc_cmdline(p) for p in still} }; stale kills logged: "
                       f"{vd2.events('stale_worker_killed')}")
    assert vd2.generate("wrapped").status == 200
    faults.check_clean(vd2, base)
    faults.finish()


def test_a_thousand_kill_restart_cycles_leave_no_zombie_and_no_descriptor(faults):
    """1,000 worker kill/restart cycles: 10 models x 100 rounds. Each round SIGKILLs every
    model's worker, waits until vramd has seen each exit (the old pid leaves /v1/status),
    and asks for each model again with POST /v1/models/NAME/load (which clears the restart
    backoff and answers 200 once a new worker is ready; without it each crash would wait
    1 s of backoff). Expected: every load answers 200 with state ready, vramd logged 1,000
    unexpected worker_exit events (signal 9) and 1,000 restarts (plus one per failed start,
    if any), and at the end: no zombie
    child, exactly the 10 current workers alive (no leaked process), vramd's own
    descriptors (less 2 per live worker and 1 per idle pooled connection) at the
    baseline within a small tolerance, the ledger back to resident reservations only, and
    every model serves a request."""
    models_n, rounds = 10, 100
    gpu = faults.gpu_set("24GiB")
    names = [f"m{i}" for i in range(models_n)]
    flags = ["--context", "64MiB", "--resident", "64MiB", "--per-request", "64MiB",
             "--run-time", sim_s(0.1)]
    models = {n: faults.model(n, flags, "256MiB", "128MiB") for n in names}
    vd = faults.start_vramd(gpu, models, level="info")
    for n in names:
        assert vd.generate(n).status == 200
    base = faults.baseline(vd)
    vpid = vd.proc.pid
    errors = []

    def load(n):
        r = request(vd.port, "POST", f"/v1/models/{n}/load", body={}, timeout=60)
        if r.status != 200 or r.json().get("state") != "ready":
            errors.append((n, r))

    t0 = time.monotonic()
    for rnd in range(rounds):
        st = vd.status()
        pids = {}
        for m in st["models"]:
            ready = [i["pid"] for i in m["instances"] if i["state"] == "ready" and i.get("pid")]
            assert len(ready) == 1, (rnd, m["name"], m["instances"])
            pids[m["name"]] = ready[0]
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)

        def exits_seen():
            listed = {i.get("pid") for m in vd.status()["models"] for i in m["instances"]}
            return not (listed & set(pids.values()))
        wait_for(exits_seen, timeout=30, what=f"round {rnd}: vramd seeing the workers' exits")
        threads = [threading.Thread(target=load, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not errors, (rnd, errors[:3])
    elapsed = time.monotonic() - t0

    exits = vd.events("worker_exit")
    unexpected = [e for e in exits if e["signal"] == 9 and e["expected"] is False]
    assert len(unexpected) == models_n * rounds, (len(unexpected), len(exits))
    # one start per cycle, plus one per failed start (a worker can lose its {port} to another
    # process between vramd choosing it and the worker binding it: a start failure, retried)
    start_failures = [e for e in vd.events("worker_failure")
                      if e["reason"].startswith("start failed")]
    assert len(vd.events("worker_started")) == models_n * (rounds + 1) + len(start_failures)
    assert not zombie_children(vpid)
    for n in names:
        assert vd.generate(n).status == 200
    fds, own = faults.check_clean(vd, base)
    live = [p for p, s in children_of(vpid) if s != "Z"]
    assert len(live) == models_n, live
    print(f"{models_n * rounds} kill/restart cycles in {elapsed:.1f} s; descriptors at the "
          f"start {base}, at the end {fds} (own {own})")
    faults.finish()
