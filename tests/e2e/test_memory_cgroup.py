"""test_memory_cgroup: vramd under a real cgroup memory limit (RELIABILITY case 18): with
`limits.memory_budget: auto` its budget is a quarter of the cgroup's room, and a flood of
uploads and held answers is shed with 503 memory_budget before the kernel's OOM killer acts.

vramd (and its testworkers, which inherit the cgroup) run in a new memory cgroup of
CGROUP_LIMIT bytes: cgroup v2 (memory.max; memory.events oom_kill) when the memory controller
is on the unified hierarchy, else cgroup v1 (memory.limit_in_bytes; memory.oom_control
oom_kill), as on hybrid systems. Skipped, with the reason, where neither can be created
(not root, no memory controller, a read-only /sys/fs/cgroup).

The load: UPLOADS concurrent uploads of UPLOAD bytes to a slow model (each body is held
whole until its request ends) and HELD concurrent answers of BIG bytes from a validated model
(held whole before the client sees them): UPLOADS x UPLOAD alone is more than the cgroup.
 - with `auto`: every answer is 200 or 503 memory_budget (nothing cut, no 502), some of
   each; no OOM kill in the cgroup; vramd alive and serving; the budget back to 0;
 - the control: the same load with `memory_budget: 1GiB` (more than the cgroup) gets vramd
   itself OOM-killed by the kernel (SIGKILL), so it is the budget that kept it alive above.
"""
import os
import secrets
import threading
import time

import pytest

from vramdkit import run_threads, wait_for

MiB = 1 << 20
CGROUP_LIMIT = 192 * MiB
UPLOAD = 7 * MiB
UPLOADS = 30
BIG = 6 * MiB
HELD = 8


class Cgroup:
    """A new memory cgroup with a limit, v2 or v1; .skip_reason when none can be made."""

    def __init__(self, limit):
        self.limit = limit
        self.path = None
        self.version = None
        self.skip_reason = None
        try:
            self._make()
        except OSError as e:
            self.skip_reason = f"cannot create a memory cgroup: {e}"
            self.path = None

    @staticmethod
    def _self_path(want):
        with open("/proc/self/cgroup") as f:
            for line in f:
                num, ctrls, path = line.rstrip("\n").split(":", 2)
                if (want is None and num == "0" and ctrls == "") or (want and want in ctrls.split(",")):
                    return path
        return None

    def _make(self):
        if os.geteuid() != 0:
            self.skip_reason = "not root: cannot create cgroups"
            return
        name = f"vramd-test-{os.getpid()}-{secrets.token_hex(3)}"
        v2 = self._self_path(None)
        if v2 is not None and os.path.exists(f"/sys/fs/cgroup{v2}/memory.max"):
            # a sibling of our own cgroup: its parent already hands the memory controller down
            parent = os.path.dirname(f"/sys/fs/cgroup{v2.rstrip('/')}")
            self.path = os.path.join(parent, name)
            os.mkdir(self.path)
            self.version = 2
            self._write("memory.max", str(self.limit))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self._write("memory.swap.max", "0")
            return
        v1 = self._self_path("memory")
        if v1 is not None and os.path.isdir(f"/sys/fs/cgroup/memory{v1}"):
            self.path = os.path.join(f"/sys/fs/cgroup/memory{v1.rstrip('/')}", name)
            os.mkdir(self.path)
            self.version = 1
            self._write("memory.limit_in_bytes", str(self.limit))
            try:
                self._write("memory.swappiness", "0")
            except OSError:
                pass
            return
        self.skip_reason = ("no usable memory cgroup: no memory.max in this process's cgroup v2 "
                            f"({v2!r}) and no cgroup v1 memory controller mounted "
                            "(/sys/fs/cgroup/memory)")

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def join(self):
        """preexec: move the child (vramd, before exec) into the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def oom_kills(self):
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak(self):
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int(self._read(name))
        except (OSError, ValueError):
            return None

    def procs(self):
        return [int(p) for p in self._read("cgroup.procs").split()]

    def remove(self):
        if not self.path:
            return
        for pid in self.procs():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while self.procs() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


@pytest.fixture
def cgroup():
    """Ask for it before `vramd`: set up first, it is removed (killing what is left in it)
    only after the factory stopped its daemons and checked their exits."""
    cg = Cgroup(CGROUP_LIMIT)
    if cg.skip_reason:
        pytest.skip(cg.skip_reason)
    yield cg
    cg.remove()


def start(vramd, cg, budget):
    models = {"up": vramd.worker("up", route="/up/", concurrency=2, queue_max=64),
              "big": vramd.worker("big", route="/big/", concurrency=4, queue_max=64,
                                  validate={"min_bytes": 1})}
    env = {}
    asan = os.environ.get("ASAN_OPTIONS")
    if asan is not None or "san" in os.environ.get("VRAMD_BUILD", ""):
        # ASan keeps up to 256 MiB of freed memory in quarantine: too much for this cgroup
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=4:malloc_context_size=4"
    return vramd.start(models=models, env=env, preexec=cg.join,
                       limits={"max_body": "8MiB", "memory_budget": budget, "queue_max": 200})


def flood(vd):
    def upload():
        return vd.post("/up/slow?ms=400", body=b"u" * UPLOAD,
                       headers={"Content-Type": "application/octet-stream"}, timeout=60)

    def held():
        return vd.get(f"/big/big?bytes={BIG}", timeout=60)
    calls = [upload] * UPLOADS + [held] * HELD
    out = {}
    errors = []

    def one(i, call):
        try:
            out[i] = call()
        except Exception as e:  # a cut connection (vramd killed) comes back as an error
            errors.append(repr(e))
    threads = [threading.Thread(target=one, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return [out.get(i) for i in range(len(calls))], errors


def test_auto_budget_sheds_load_before_the_oom_killer(cgroup, vramd):
    vd = start(vramd, cgroup, "auto")
    assert vd.proc.pid in cgroup.procs()
    b = vd.status()["memory_budget"]
    assert b["source"] == "cgroup", b
    assert CGROUP_LIMIT // 8 <= b["limit"] <= CGROUP_LIMIT // 4, b
    assert vd.get("/big/big?bytes=10").status == 200  # the workers are up (in the cgroup too)
    replies, errors = flood(vd)
    assert not errors, errors[:3]
    statuses = [(r.status, r.error_code() if r.status != 200 else None) for r in replies]
    bad = [s for s in statuses if s not in ((200, None), (503, "memory_budget"))]
    assert not bad, bad[:5]
    assert (200, None) in statuses and (503, "memory_budget") in statuses, statuses
    assert cgroup.oom_kills() == 0, "the kernel OOM-killed in vramd's cgroup"
    assert vd.alive()
    assert vd.post("/up/slow?ms=1", body=b"x" * MiB).status == 200
    wait_for(lambda: vd.status()["memory_budget"]["used"] == 0, timeout=15, what="budget back to 0")
    peak = cgroup.peak()
    assert peak is None or peak < CGROUP_LIMIT, peak
    print(f"cgroup v{cgroup.version} limit={CGROUP_LIMIT} budget={b['limit']} peak={peak} "
          f"200={statuses.count((200, None))} 503={statuses.count((503, 'memory_budget'))} "
          f"refused={vd.status()['memory_budget']['refused']}")
    assert vd.stop() == 0, "vramd did not exit 0 on SIGTERM after the flood"


def test_without_the_budget_the_same_load_is_oom_killed(cgroup, vramd):
    """The control: memory_budget above the cgroup's limit, the same flood: the kernel's
    OOM killer acts in the cgroup (so the test above shows the budget at work)."""
    vd = start(vramd, cgroup, "1GiB")
    assert vd.get("/big/big?bytes=10").status == 200
    flood(vd)
    wait_for(lambda: cgroup.oom_kills() > 0, timeout=20, what="an OOM kill in the cgroup")
    # the victim is vramd itself: it holds the bodies (the workers are small)
    wait_for(lambda: not vd.alive(), timeout=20, what="vramd OOM-killed")
    assert vd.proc.returncode == -9, vd.proc.returncode
    print(f"control: oom_kill={cgroup.oom_kills()} vramd killed, peak={cgroup.peak()}")
    vd.proc.wait(20)
    vd._close_files()
    vd.stopped = True
