"""e2e: workers die with vramd. A worker behind a shell wrapper (a grandchild included) dies
within 1 s of vramd's SIGKILL; the guard process holds nothing and leaves with a clean exit.
Bounded well under 20 s each."""
import os
import time

from vramdkit import PYTHON, children_of, pid_alive, proc_cmdline, wait_for
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


# --- workers die with vramd, wrappers included --------------------------------------------

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
