"""simkit: helpers for the simulated-GPU kit's tests (simgpu CLI, libnvidia-ml-sim.so), on top
of the shared kit (tests/lib/vramdkit: paths, sim.Holder, waits.wait_for).

Binaries come from $VRAMD_BUILD (default "build", relative to the repository root):
bin/simgpu, lib/libnvidia-ml-sim.so and tests/nvml_probe (tests/helpers/nvml_probe.c, which
dlopens the library and checks NVML's contract itself).

The `sim` fixture (conftest.py) gives each test a Sim: sim.create(...) makes a set with a
unique name ("pt.PID.N"), sim.alloc(...) starts `simgpu alloc` holders; sim.close() SIGKILLs
and reaps every holder still running and removes every set made.
Helpers: sim.run(args) runs the CLI; sim.show(name) parses `show --json`; sim.probe(name)
runs the probe and returns (exit code, parsed JSON). Every wait is a poll with a deadline.
"""
import functools
import itertools
import json
import os
import subprocess

import pytest

from vramdkit import Holder, binary, nvml_lib, probe_bin
from vramdkit import wait_for as _wait_for

COMMAND_TIMEOUT = 60.0  # generous: a slow, loaded 2-core machine
_counter = itertools.count(1)

# an exception raised by the condition fails the test at once (nothing is retried)
wait_for = functools.partial(_wait_for, timeout=30.0, retry=())


def simgpu_bin():
    return str(binary("simgpu"))


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
        holder = Holder(name, nbytes, self.env, gpu=gpu)
        self.holders.append(holder)
        assert f"pid {holder.pid}" in holder.line
        return holder

    def probe(self, name, *extra, env_extra=None):
        env = dict(self.env)
        if name is not None:
            env["SIMGPU"] = name
        env.update(env_extra or {})
        res = subprocess.run([str(probe_bin()), str(nvml_lib()), *extra], capture_output=True, text=True,
                             env=env, timeout=COMMAND_TIMEOUT)
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            pytest.fail(f"probe printed no JSON (exit {res.returncode}):\n{res.stdout}\n"
                        f"{res.stderr}")
        return res.returncode, doc

    def close(self):
        for h in self.holders:
            h.close()
        for name in self.sets:
            subprocess.run([simgpu_bin(), "rm", name], capture_output=True,
                           timeout=COMMAND_TIMEOUT)

