"""faultkit: helpers for the fault tests of vramd's resilience features (issue 5).

The tests run the real binaries (vramd, simgpu, libnvidia-ml-sim.so, simworker) from
$VRAMD_BUILD (default "build") through the shared kit's harness (tests/lib/vramdkit:
harness.Harness; /proc readers in proc.py; open_stream() in net.py reads a chunked response
chunk by chunk, so a test can act between two SSE events and see a stream cut short), and
add what a fault test needs on top of it:

  - FaultHarness (the `faults` fixture): Harness plus
      * faultworker_model(): a model served by tests/faults/faultworker.py (empty 200s,
        {"score": 0} answers: things simworker never does);
      * baseline(vd) / check_clean(vd, base): the end-of-case checks every case runs: the
        ledger holds resident reservations only (each GPU reserved == reserved_resident,
        reserved_requests == 0), no zombie child of vramd, every live child of vramd is an
        instance /v1/status lists and every live worker process of this test is one or
        descends from one (no leaked worker or validator process), and vramd's descriptor
        count, less what its live workers explain (2 pipes per worker, 1 per idle pooled
        connection), is back to its baseline within FD_TOLERANCE;
      * finish(): the harness's finish (clean SIGTERM exit, no sanitizer report, no worker
        left) plus no log line with a log_format_error field.
  - wait_gone(pids), instance_pid(), wait_worker_running(), resilience().

Invariants: every wait is a poll with a deadline (a slow, loaded 2-core box, ASan builds);
nothing here sleeps a fixed time where a condition can be polled; every process a test
starts is killed at teardown (Harness.close, which also kills any process whose command line
holds the test's tag).
"""
import os
import time
from pathlib import Path

import pytest

from vramdkit import (PYTHON, children_of, descends_from, fd_count, pid_alive, pids_with_cmdline,
                      proc_cmdline, request, wait_for, zombie_children)
from vramdkit.harness import Harness, harness_fixture

FAULTWORKER = str(Path(__file__).resolve().parent / "faultworker.py")
FD_TOLERANCE = 2          # descriptors vramd may hold beyond its baseline (connections closing)
CLEAN_TIMEOUT = 15.0      # how long the end-of-case checks poll before failing


def wait_gone(pids, timeout=10.0, what="processes to exit"):
    """Poll until none of pids is alive; fail after timeout."""
    pids = list(pids)
    return wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=timeout,
                    what=f"{what} (pids {pids})")


# --- the harness ------------------------------------------------------------------------------

class Baseline:
    """vramd's descriptors in a steady state, less the ones its live workers explain."""

    def __init__(self, vramd_pid, fds, own):
        self.vramd_pid = vramd_pid
        self.fds = fds      # what /proc showed
        self.own = own      # fds - the workers' share (see FaultHarness.fd_load)

    def __repr__(self):
        return f"<Baseline vramd={self.vramd_pid} fds={self.fds} own={self.own}>"


class FaultHarness(Harness):
    """Harness with the fault suite's end-of-case checks (see the module docstring)."""

    def faultworker_model(self, name, **overrides):
        """A model served by faultworker.py (uses no GPU memory: no memory section)."""
        m = {
            "route": f"/{name}/",
            "cmd": [PYTHON, FAULTWORKER, "--port", "{port}", "--name", f"{name}@{self.tag}"],
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "startup_timeout": "30s",
            "stop_timeout": "2s",
            "concurrency": 1,
            "queue_max": 64,
            "deadline": "60s",
            "keep_alive": "10m",
        }
        m.update(overrides)
        return m

    # end-of-case checks ------------------------------------------------------------------
    @staticmethod
    def settled_fds(pid, samples=5, interval=0.05):
        """vramd's descriptor count, the smallest of a few samples (a connection the test
        just closed may take a loop turn to be closed on vramd's side)."""
        best = None
        for _ in range(samples):
            n = fd_count(pid)
            best = n if best is None else min(best, n)
            time.sleep(interval)
        return best

    def fd_load(self, vd):
        """(fds, own): vramd's descriptor count, and that count less what its live workers
        explain: 2 per live worker process (its stdout and stderr pipes) and 1 per idle
        pooled upstream connection (idle_connections in /v1/status). `own` is what must not
        grow: a leak shows there whatever the number of workers or pooled connections."""
        pid = vd.proc.pid
        for _ in range(5):
            before = self.settled_fds(pid, samples=3)
            st = vd.status()
            after = self.settled_fds(pid, samples=3)
            if before == after:
                break
        live = idle = 0
        for m in st["models"]:
            for i in m.get("instances", []):
                if i.get("pid") and pid_alive(i["pid"]):
                    live += 1
                idle += i.get("idle_connections", 0)
        return after, after - 2 * live - idle

    def baseline(self, vd):
        """Descriptor baseline of a running vramd, taken in a steady state (nothing in
        flight)."""
        fds, own = self.fd_load(vd)
        return Baseline(vd.proc.pid, fds, own)

    def instance_pids(self, vd, status=None):
        st = status or vd.status()
        return {i["pid"] for m in st["models"] for i in m.get("instances", []) if i.get("pid")}

    def check_clean(self, vd, base, timeout=CLEAN_TIMEOUT, exclude=()):
        """The checks each case ends with: ledger back to resident reservations only; no
        zombie child of vramd; every live child of vramd is an instance in /v1/status and
        every live process of this test's workers is one or descends from one; descriptors
        back to the baseline."""
        assert vd.alive(), f"{vd.name} died ({vd.proc.returncode}):\n{vd.log_tail()}"
        vd.assert_ledger_clean(timeout=timeout)
        pid = vd.proc.pid
        last = {}

        def no_zombies():
            last["z"] = zombie_children(pid)
            return not last["z"]
        deadline = time.monotonic() + timeout
        while not no_zombies():
            if time.monotonic() > deadline:
                pytest.fail(f"zombie children of vramd: {last['z']}")
            time.sleep(0.05)

        def processes_match():
            st = vd.status()
            listed = self.instance_pids(vd, st)
            kids = {p for p, s in children_of(pid) if s not in ("Z", "X")}
            workers = {p for p in pids_with_cmdline(self.tag) if p not in exclude}
            workers -= {w.pid for w in self.externals}
            # a worker's own children (a wrapper shell's server) belong to its instance
            workers = {p for p in workers if not descends_from(p, listed)}
            last["p"] = (listed, kids, workers)
            return kids <= listed and not workers
        deadline = time.monotonic() + timeout
        while not processes_match():
            if time.monotonic() > deadline:
                listed, kids, workers = last["p"]
                extra = {p: proc_cmdline(p) for p in (kids - listed) | workers}
                pytest.fail(f"processes not listed as instances in /v1/status: {extra} "
                            f"(listed: {sorted(listed)})")
            time.sleep(0.1)

        def fds_back():
            last["fds"] = self.fd_load(vd)
            return last["fds"][1] <= base.own + FD_TOLERANCE
        deadline = time.monotonic() + timeout
        while not fds_back():
            if time.monotonic() > deadline:
                fds = sorted(os.readlink(f"/proc/{pid}/fd/{fd}")
                             for fd in os.listdir(f"/proc/{pid}/fd")
                             if os.path.exists(f"/proc/{pid}/fd/{fd}"))
                pytest.fail(f"vramd's own descriptors (less 2 per live worker and 1 per idle "
                            f"pooled connection): {last['fds'][1]} of {last['fds'][0]}, baseline "
                            f"{base} (+{FD_TOLERANCE} allowed): {fds}")
            time.sleep(0.1)
        return last["fds"]

    def finish(self):
        """Harness.finish, then: no log line of any daemon has a log_format_error field."""
        super().finish()
        for vd in self.daemons:
            bad = vd.format_errors()
            assert not bad, f"{vd.name}: log lines with log_format_error: {bad[:3]}"


faults = harness_fixture(FaultHarness)


# --- small readers ------------------------------------------------------------------------------

def resilience(vd, model):
    return vd.model(model)["resilience"]


def instance_pid(vd, model, timeout=30.0):
    """The pid of the model's READY instance (waits for one)."""
    def find():
        for i in vd.instances(model):
            if i["state"] == "ready" and i.get("pid"):
                return i["pid"]
        return None
    return wait_for(find, timeout=timeout, what=f"a ready instance of {model}")


def wait_worker_running(vd, model, n=1, timeout=30.0):
    """Poll the simworker's own /status until n requests run inside it (vramd's in_flight
    counts a request from its dispatch, before the worker has it)."""
    def running():
        for i in vd.instances(model):
            if i["state"] == "ready" and i.get("port"):
                r = request(i["port"], "GET", "/status", timeout=5)
                if r.status == 200 and r.json()["requests"]["running"] >= n:
                    return i["pid"]
        return None
    return wait_for(running, timeout=timeout,
                    what=f"{n} request(s) running inside {model}'s worker")
