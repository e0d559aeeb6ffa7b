"""simkit: helpers for the simulated-GPU kit's tests (simgpu CLI, libnvidia-ml-sim.so).

(A module of its own, imported relatively: pytest runs tests/sim and tests/e2e in one session,
both have a conftest.py, and a bare `from conftest import ...` could reach the other one.)

Binaries come from $VRAMD_BUILD (default "build", relative to the repository root):
bin/simgpu, lib/libnvidia-ml-sim.so and tests/nvml_probe (tests/helpers/nvml_probe.c, which
dlopens the library and checks NVML's contract itself).

The `sim` fixture (conftest.py) gives each test a Sim: sim.create(...) makes a set with a
unique name ("pt.PID.N"), sim.alloc(...) starts `simgpu alloc` holders; sim.close() SIGKILLs
and reaps every holder still running and removes every set made.
Helpers: sim.run(args) runs the CLI; sim.show(name) parses `show --json`; sim.probe(name)
runs the probe and returns (exit code, parsed JSON). Every wait is a poll with a deadline.
"""
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT = 60.0  # generous: a slow, loaded 2-core machine
_counter = itertools.count(1)


def build_dir():
    path = Path(os.environ.get("VRAMD_BUILD", "build"))
    return path if path.is_absolute() else REPO_ROOT / path


def simgpu_bin():
    return str(build_dir() / "bin" / "simgpu")


def nvml_lib():
    return str(build_dir() / "lib" / "libnvidia-ml-sim.so")


def probe_bin():
    return str(build_dir() / "tests" / "nvml_probe")


def wait_for(cond, timeout=30.0, interval=0.05, what="condition"):
    """Poll cond() until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Holder:
    """One `simgpu alloc` process that holds memory until killed."""

    def __init__(self, proc, gpu, nbytes):
        self.proc = proc
        self.pid = proc.pid
        self.gpu = gpu
        self.nbytes = nbytes

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=COMMAND_TIMEOUT)


class Sim:
    def __init__(self):
        self.sets = []
        self.holders = []
        self.env = dict(os.environ)
        self.env.pop("SIMGPU", None)
        self.env["SIMGPU_TIMESCALE"] = "1"

    def unique_name(self):
        return f"pt.{os.getpid()}.{next(_counter)}"

    def run(self, args, env=None, check=None):
        """Run `simgpu ARGS`; returns CompletedProcess (text). check: expected exit code."""
        res = subprocess.run([simgpu_bin(), *args], capture_output=True, text=True,
                             env=env or self.env, timeout=COMMAND_TIMEOUT)
        if check is not None and res.returncode != check:
            pytest.fail(f"simgpu {args} exited {res.returncode}, expected {check}:\n"
                        f"stdout: {res.stdout}\nstderr: {res.stderr}")
        return res

    def create(self, gpus=1, memory="24GiB", model_name=None, release_delay=None,
               timescale=None):
        name = self.unique_name()
        args = ["create", name, "--gpus", str(gpus), "--memory", memory]
        if model_name is not None:
            args += ["--model-name", model_name]
        if release_delay is not None:
            args += ["--release-delay", release_delay]
        env = dict(self.env)
        if timescale is not None:
            env["SIMGPU_TIMESCALE"] = str(timescale)
        self.sets.append(name)
        self.run(args, env=env, check=0)
        return name

    def show(self, name):
        res = self.run(["show", name, "--json"], check=0)
        return json.loads(res.stdout)

    def alloc(self, name, nbytes, gpu=0):
        """Start a holder of nbytes on gpu and wait until it holds them."""
        proc = subprocess.Popen([simgpu_bin(), "alloc", name, "--gpu", str(gpu),
                                 "--bytes", str(nbytes)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)
        holder = Holder(proc, gpu, nbytes)
        self.holders.append(holder)
        line = proc.stdout.readline()  # the one line it prints once it holds the memory
        if not line.startswith("allocated "):
            proc.wait(timeout=COMMAND_TIMEOUT)
            pytest.fail(f"simgpu alloc failed ({proc.returncode}): {proc.stderr.read()}")
        assert f"pid {proc.pid}" in line
        return holder

    def probe(self, name, *extra, env_extra=None):
        env = dict(self.env)
        if name is not None:
            env["SIMGPU"] = name
        env.update(env_extra or {})
        res = subprocess.run([probe_bin(), nvml_lib(), *extra], capture_output=True, text=True,
                             env=env, timeout=COMMAND_TIMEOUT)
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            pytest.fail(f"probe printed no JSON (exit {res.returncode}):\n{res.stdout}\n"
                        f"{res.stderr}")
        return res.returncode, doc

    def close(self):
        for h in self.holders:
            if h.proc.poll() is None:
                h.proc.kill()
            try:
                h.proc.wait(timeout=COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
            for stream in (h.proc.stdout, h.proc.stderr):
                if stream:
                    stream.close()
        for name in self.sets:
            subprocess.run([simgpu_bin(), "rm", name], capture_output=True,
                           timeout=COMMAND_TIMEOUT)


def check_binaries():
    for path in (simgpu_bin(), nvml_lib(), probe_bin()):
        if not os.path.exists(path):
            pytest.fail(f"{path} is missing: build first (make, or make SAN=1 with "
                        f"VRAMD_BUILD=build-san)")
