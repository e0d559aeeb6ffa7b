"""Shared bits of the stand-in servers (tests/standins/*_standin.py): simulated GPU memory.

SimAlloc takes simulated GPU memory on the set named by $SIMGPU, on the device named by
$CUDA_VISIBLE_DEVICES (first entry; default 0), and holds it until release(). It runs
`build/bin/simgpu alloc` as a child process (the memory counts for the stand-in's process
tree in NVML (sim), as a real server's CUDA allocations would): libcuda-sim.so exports only
the cu* driver entry points (sim/cuda/exports.map), not simgpu_alloc, so ctypes cannot take
memory through it directly. A request that does not fit raises SimOOM with the simulated
driver's message.
"""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("VRAMD_BUILD", "build")  # a relative $VRAMD_BUILD is the repository's
SIMGPU_BIN = BUILD / "bin" / "simgpu"


class SimOOM(Exception):
    pass


def device_index():
    dev = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(dev) if dev.isdigit() else 0


class SimAlloc:
    """bytes of simulated GPU memory held until release() (or this process's exit)."""

    def __init__(self, nbytes, gpu=None):
        name = os.environ.get("SIMGPU")
        if not name:
            raise RuntimeError("SIMGPU is not set")
        self.bytes = int(nbytes)
        self.proc = subprocess.Popen(
            [str(SIMGPU_BIN), "alloc", name, "--bytes", str(self.bytes), "--gpu",
             str(device_index() if gpu is None else gpu)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("allocated"):
            err = self.proc.stderr.read()
            self.proc.wait()
            raise SimOOM(err.strip() or "allocation failed")

    def release(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
