"""Processes, read from /proc: state, parent, command line, children, descriptors; the
processes whose command line holds a marker (each test's unique tag appears in every worker
command line it starts)."""
import os
import time
from pathlib import Path


def proc_stat(pid):
    """(state, ppid) of a process from /proc/PID/stat, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_state(pid):
    st = proc_stat(pid)
    return st[0] if st else None


def pid_alive(pid):
    """The process exists and is not a zombie."""
    state = proc_state(pid)
    return state is not None and state not in ("Z", "X")


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def children_of(ppid):
    """[(pid, state)] of every process whose parent is ppid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(entry)
        if st and st[1] == ppid:
            out.append((int(entry), st[0]))
    return out


def descends_from(pid, ancestors):
    """pid is one of ancestors or a descendant of one (walking parent pids up to init)."""
    seen = 0
    while pid and pid > 1 and seen < 64:
        if pid in ancestors:
            return True
        st = proc_stat(pid)
        if not st:
            return False
        pid = st[1]
        seen += 1
    return False


def zombie_children(ppid):
    return [pid for pid, state in children_of(ppid) if state == "Z"]


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def pids_with_cmdline(marker, program=None):
    """Live (non-zombie) processes, other than this one, whose command line contains marker
    (and program, when given: "testworker.py")."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == b"Z" or marker not in cmd or (program and program not in cmd):
            continue
        if int(entry) != os.getpid():
            found.append(int(entry))
    return found


def wait_for_gone(marker, exclude=(), timeout=10.0, program=None):
    """Poll until no process (but those in exclude) has marker in its command line; returns
    the ones still there after timeout ([] when all are gone)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids_with_cmdline(marker, program) if p not in exclude]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def cgroup_usable(mode):
    """Can this machine (as this user) make a cgroup in the hierarchy mode asks for?"""
    where = {"v2": ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"], "v1": ["/sys/fs/cgroup/pids"]}[mode]
    for d in where:
        fs = None
        try:
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    parts = line.split()
                    if parts[4] == d:
                        fs = line.split(" - ")[1].split()[0]
        except OSError:
            return False
        if (mode == "v2" and fs == "cgroup2") or (mode == "v1" and fs == "cgroup"):
            probe = Path(d) / f"vramd-probe-{os.getpid()}"
            try:
                probe.mkdir()
                probe.rmdir()
                return True
            except OSError:
                return False
    return False
