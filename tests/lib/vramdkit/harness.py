"""The `sched` fixture: a Harness for tests that run vramd on simulated GPUs (scheduling,
faults, metrics, cli, browser, clients, jobs).

A Harness creates GPU sets (unique names "sched.PID.N.X", always removed), writes vramd
configs (JSON, which YAML reads as flow style), starts vramd on a set (Vramd with gpu_set),
starts external simworkers and `simgpu alloc` holders, and at the end (finish()) checks every
daemon: ledger back to resident reservations only, no sanitizer report, no OOM in any
worker's output (unless the test allows it: vd.allow_oom), clean exit 0 on SIGTERM, and no
simworker left alive. close() (teardown) kills everything the test started."""
import itertools
import json
import os
import secrets
import signal
import subprocess

import pytest

from .daemon import ExternalWorker, Vramd, sanitizer_reports
from .net import TEST_HOSTS, free_port
from .paths import binary, check_binaries
from .proc import pids_with_cmdline, wait_for_gone
from .report import track
from .sim import Holder, sim_env, size
from .waits import wait_for

MiB = 1024 * 1024
GiB = 1024 * MiB
HEADROOM = 128 * MiB
START_TIMEOUT = 30.0
REQUEST_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_counter = itertools.count(1)


class Harness:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.tag = f"sched{os.getpid()}x{next(_counter)}x{secrets.token_hex(3)}"
        self.sets = []
        self.daemons = []
        self.externals = []
        self.holders = []
        self.finished = False

    # environment ---------------------------------------------------------------------
    def env(self, gpu_set):
        return sim_env(gpu_set)

    def gpu_set(self, memory, gpus=1, release_delay=None, pcie_bandwidth=None, checkpoint_bandwidth=None):
        """Create a simulated GPU set (memory: "24GiB"; release_delay: simulated, "10s";
        pcie_bandwidth: cuMemcpy's rate between host and device, "20GB/s" by default;
        checkpoint_bandwidth: the driver checkpoint's rate both ways, by default 2 GB/s out
        and 5 GB/s back)."""
        name = f"sched.{os.getpid()}.{next(_counter)}.{secrets.token_hex(2)}"
        args = [str(binary("simgpu")), "create", name, "--gpus", str(gpus), "--memory", memory]
        if release_delay:
            args += ["--release-delay", release_delay]
        if pcie_bandwidth:
            args += ["--pcie-bandwidth", pcie_bandwidth]
        if checkpoint_bandwidth:
            args += ["--checkpoint-bandwidth", checkpoint_bandwidth, "--restore-bandwidth", checkpoint_bandwidth]
        self.sets.append(name)
        p = subprocess.run(args, capture_output=True, text=True, env=self.env(name), timeout=30)
        if p.returncode != 0:
            pytest.fail(f"simgpu create failed: {p.stdout} {p.stderr}")
        return name

    def show(self, gpu_set):
        p = subprocess.run([str(binary("simgpu")), "show", gpu_set, "--json"],
                           capture_output=True, text=True, env=self.env(gpu_set), timeout=30)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    # configs -------------------------------------------------------------------------
    def worker_cmd(self, name, flags):
        return ["simworker", "--port", "{port}", "--name", f"{name}@{self.tag}", *flags]

    def model(self, name, flags, resident, per_request, **overrides):
        """A supervised simworker model: flags are simworker's, resident/per_request the
        declared memory (sizes as strings or bytes; per_request may be "learn")."""
        mem = {"resident": resident if isinstance(resident, str) else size(resident),
               "per_request": per_request if isinstance(per_request, str) else size(per_request)}
        m = {
            "route": f"/{name}/",
            "cmd": self.worker_cmd(name, flags),
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "startup_timeout": "30s",
            "stop_timeout": "2s",
            "memory": mem,
            "concurrency": 1,
            "queue_max": 64,
            "deadline": "60s",
            "keep_alive": "10m",
        }
        for k, v in overrides.items():
            if k == "memory":
                m["memory"].update(v)
            else:
                m[k] = v
        return m

    def external_model(self, name, worker, resident, per_request, **overrides):
        m = {
            "route": f"/{name}/",
            "url": worker.url,
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "stop_timeout": "2s",
            "memory": {"resident": resident, "per_request": per_request},
            "concurrency": 1,
            "queue_max": 64,
            "deadline": "60s",
        }
        m.update(overrides)
        return m

    def start_vramd(self, gpu_set, models, gpu=None, level="info", extra_env=None, wait=True, **top):
        """extra_env: added to vramd's environment (e.g. another NVML library). wait=False:
        return once the process is started, before it answers (a test that holds it at a
        pause point, common/pause_point.h)."""
        cfg = {
            "listen": f"127.0.0.1:{free_port()}",
            "allowed_hosts": list(TEST_HOSTS),
            "state_dir": str(self.tmp / f"var{len(self.daemons)}"),
            "log": {"format": "json", "level": level},
            "gpu": {"headroom": size(HEADROOM), "poll": "50ms"},
            "limits": {"header_timeout": "10s", "queue_max": 1000, "drain_timeout": "20s"},
            "models": models,
        }
        if gpu:
            cfg["gpu"].update(gpu)
        cfg.update(top)
        vd = Vramd(self.tmp, f"vramd{len(self.daemons)}", cfg, gpu_set=gpu_set, cwd=self.tmp,
                   config_format="json", stdout_apart=False, http="stdlib",
                   start_timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT,
                   request_timeout=REQUEST_TIMEOUT, extra_env=extra_env)
        self.daemons.append(vd)
        vd.start(wait=wait)
        if not wait:
            return vd
        wait_for(lambda: vd.status()["nvml"]["ok"] and vd.status()["gpus"], timeout=START_TIMEOUT,
                 what="vramd reading the simulated GPU through NVML")
        return vd

    def external(self, gpu_set, name, flags, gpu=0):
        """A simworker the test starts itself (url: models, or no vramd at all)."""
        port = free_port()
        env = self.env(gpu_set)
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        w = ExternalWorker([str(binary("simworker")), "--port", str(port), "--name",
                            f"{name}@{self.tag}", *flags],
                           port, name, self.tmp / f"ext-{name}-{port}.log", env=env, cwd=self.tmp,
                           start_timeout=START_TIMEOUT, what="simworker")
        self.externals.append(w)
        return w

    def alloc(self, gpu_set, nbytes, gpu=0, hold=None):
        holder = Holder(gpu_set, nbytes, self.env(gpu_set), gpu=gpu, hold=hold)
        self.holders.append(holder)
        return holder

    # end of a test ---------------------------------------------------------------------
    def finish(self):
        """The checks every test on a simulated GPU ends with (see the module docstring)."""
        for vd in self.daemons:
            if vd.stopped:
                continue
            assert vd.alive(), f"{vd.name} died with {vd.proc.returncode}:\n{vd.log_tail()}"
            vd.assert_ledger_clean()
            models = {m["name"] for m in vd.status()["models"]}
            for name in sorted(models - vd.allow_oom):
                vd.assert_no_oom(name)
        for vd in self.daemons:
            if vd.stopped:
                continue
            rc = vd.stop()
            assert rc == 0, f"{vd.name} did not exit cleanly on SIGTERM (exit {rc}):\n{vd.log_tail()}"
            reports = vd.sanitizer_reports()
            assert not reports, f"{vd.name}: sanitizer report in its log {reports}:\n{vd.log_tail()}"
            bad = vd.format_errors()
            assert not bad, f"{vd.name}: log lines with log_format_error: {bad[:3]}"
        leftover = wait_for_gone(self.tag, exclude={w.pid for w in self.externals})
        assert not leftover, f"worker processes left alive after vramd exited: {leftover}"
        for w in self.externals:
            reports = sanitizer_reports(w.log())
            assert not reports, f"external {w.name}: sanitizer report {reports}"
        self.finished = True

    def close(self):
        """Teardown: stop everything this test started, remove its GPU sets."""
        for vd in self.daemons:
            if vd.alive():
                vd.stop(timeout=10)
        for w in self.externals:
            w.close()
        for holder in self.holders:
            holder.close()
        for pid in pids_with_cmdline(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for name in self.sets:
            subprocess.run([str(binary("simgpu")), "rm", name], capture_output=True, timeout=30)


def harness_fixture(cls):
    """A pytest fixture giving each test a cls(tmp_path) (Harness or a subclass), its
    daemons' logs in a failing test's report, closed at teardown."""
    @pytest.fixture
    def fixture(tmp_path, request):
        check_binaries()
        h = cls(tmp_path)
        track(request.node, h.daemons)
        yield h
        h.close()
    return fixture


sched = harness_fixture(Harness)
