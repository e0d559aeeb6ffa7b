"""The simulated GPU kit: environments for processes on a simulated GPU set, and `simgpu
alloc` holders (foreign memory on a simulated GPU until the holder ends)."""
import os
import signal
import subprocess

import pytest

from .paths import binary, build_dir, cuda_lib, nvml_lib

TIMESCALE = 0.05      # simulated durations x 0.05: 1 simulated second = 50 ms
HOLDER_TIMEOUT = 60.0


def sim_s(seconds):
    """A simulated duration for simworker/simgpu flags ("12.5s")."""
    return f"{seconds:g}s"


def size(nbytes):
    """Bytes as a plain number string (vramd and simworker both accept it)."""
    return str(int(nbytes))


def sim_env(gpu_set, timescale=TIMESCALE):
    """The environment of a process (vramd, simworker, simgpu) on a simulated GPU set:
    SIMGPU, SIMGPU_TIMESCALE, VRAMD_NVML_LIBRARY (the NVML simulation), VRAMD_CUDA_LIBRARY (the
    CUDA driver simulation: the checkpoint tier), the build's bin/ first on PATH, no
    CUDA_VISIBLE_DEVICES."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["SIMGPU"] = gpu_set
    env["SIMGPU_TIMESCALE"] = str(timescale)
    env["VRAMD_NVML_LIBRARY"] = str(nvml_lib())
    env["VRAMD_CUDA_LIBRARY"] = str(cuda_lib())
    env["PATH"] = f"{build_dir() / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


class Holder:
    """A `simgpu alloc` process: foreign memory on a simulated GPU, until it ends. Started
    and waited for here (it prints one "allocated ..." line once it holds the memory)."""

    def __init__(self, gpu_set, nbytes, env, gpu=0, hold=None):
        args = [str(binary("simgpu")), "alloc", gpu_set, "--gpu", str(gpu), "--bytes", str(int(nbytes))]
        if hold:
            args += ["--hold", hold]
        self.gpu = gpu
        self.nbytes = nbytes
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.pid = self.proc.pid
        self.line = self.proc.stdout.readline()
        if not self.line.startswith("allocated "):
            self.proc.wait(HOLDER_TIMEOUT)
            pytest.fail(f"simgpu alloc failed ({self.proc.returncode}): {self.line!r} "
                        f"{self.proc.stderr.read()}")

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=HOLDER_TIMEOUT)

    def end(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(HOLDER_TIMEOUT)

    def close(self):
        try:
            self.end()
        except subprocess.TimeoutExpired:
            pass
        for s in (self.proc.stdout, self.proc.stderr):
            if s:
                s.close()
