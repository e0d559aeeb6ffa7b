"""workerkit: helpers to run simworker processes in tests (test_simworker.py, test_outputs.py).

The `workers` fixture gives a test a Workers factory: workers.start(gpu_set, *flags) starts
$VRAMD_BUILD/bin/simworker --port 0 ... with SIMGPU=gpu_set and SIMGPU_TIMESCALE=0.01 (every
simulated duration 100x shorter), reads the port it printed ("listening ... port=N"), and
by default waits until /health answers 200. At teardown every worker still running is
SIGKILLed and reaped, and the test fails if a worker's log holds a sanitizer report (ASan,
LSan, UBSan: runs with VRAMD_BUILD=build-san). A worker's stderr goes to a file in the
test's tmp dir (w.log()).

Simulated GPU sets come from the `sim` fixture (conftest.py); create them with
sim.create(..., timescale=TIMESCALE) so that release delays are scaled like the workers.
Every wait is a poll with a deadline; deadlines are generous for a slow, loaded 2-core box.
"""
import os
import re
import signal
import subprocess
import time

import pytest
import requests

from vramdkit import binary, sanitizer_reports

from .simkit import wait_for

TIMESCALE = "0.01"
MiB = 1024 * 1024
GiB = 1024 * MiB
HTTP_TIMEOUT = 30.0
START_TIMEOUT = 30.0


def simworker_bin():
    return str(binary("simworker"))


class Worker:
    def __init__(self, proc, log_path, port):
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.port = port
        self.session = requests.Session()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path, **kw):
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return self.session.get(self.url(path), **kw)

    def post(self, path, **kw):
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return self.session.post(self.url(path), **kw)

    def get_refused(self):
        """True when nothing listens on the worker's port any more."""
        try:
            requests.get(self.url("/health"), timeout=5)
        except requests.ConnectionError:
            return True
        return False

    def status(self):
        r = self.get("/gpu_status/")
        assert r.status_code == 200, r.text
        return r.json()

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_health(self, status=200, timeout=START_TIMEOUT):
        def ok():
            try:
                return self.get("/health", timeout=5).status_code == status
            except requests.ConnectionError:
                if self.proc.poll() is not None:
                    pytest.fail(f"simworker exited {self.proc.returncode}:\n{self.log()}")
                return False
        wait_for(ok, timeout=timeout, what=f"simworker /health {status}")

    def wait_exit(self, timeout=START_TIMEOUT):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"simworker {self.pid} did not exit within {timeout}s:\n{self.log()}")

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=START_TIMEOUT)


class Workers:
    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.started = []

    def env(self, gpu_set, extra=None):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.pop("PORT", None)
        env["SIMGPU"] = gpu_set
        env["SIMGPU_TIMESCALE"] = TIMESCALE
        env.update(extra or {})
        return env

    def start(self, gpu_set, *flags, env=None, wait_ready=True, prefix=()):
        """Start a simworker; returns a Worker once it listens (and is ready, by default).
        If it exits before listening, returns the Worker with proc already ended.
        prefix: a command that runs it (`unshare --pid --kill-child ...`); Worker.pid is then
        that command's pid."""
        binary = simworker_bin()
        if not os.path.exists(binary):
            pytest.fail(f"{binary} is missing: build first (make)")
        n = len(self.started)
        log_path = self.tmp_path / f"simworker{n}.log"
        logf = open(log_path, "wb")
        proc = subprocess.Popen([*prefix, binary, "--port", "0", *[str(f) for f in flags]],
                                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                env=self.env(gpu_set, env))
        logf.close()
        w = Worker(proc, log_path, None)
        self.started.append(w)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            m = re.search(r"listening .*port=(\d+)", w.log())
            if m:
                w.port = int(m.group(1))
                break
            if proc.poll() is not None:
                return w
            if time.monotonic() > deadline:
                pytest.fail(f"simworker did not start listening:\n{w.log()}")
            time.sleep(0.02)
        if wait_ready:
            w.wait_health(200)
        return w

    def close(self):
        """Kill what still runs; return the sanitizer reports found in the workers' logs."""
        reports = []
        for w in self.started:
            if w.proc.poll() is None:
                w.proc.kill()
            try:
                w.proc.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
            w.session.close()
            text = w.log()
            if sanitizer_reports(text):
                reports.append(f"simworker {w.pid}:\n{text[-4000:]}")
        return reports


@pytest.fixture
def workers(tmp_path):
    ws = Workers(tmp_path)
    yield ws
    reports = ws.close()
    if reports:  # an ASan/UBSan build (VRAMD_BUILD=build-san) found something
        pytest.fail("sanitizer report in a simworker log:\n" + "\n".join(reports))


def process_used(sim, gpu_set, pid, gpu=0):
    """Bytes the simulated GPU (NVML's view) says pid holds, 0 when it holds nothing."""
    for p in sim.show(gpu_set)["gpus"][gpu]["processes"]:
        if p["pid"] == pid:
            return p["used"]
    return 0


def gpu_used(sim, gpu_set, gpu=0):
    return sim.show(gpu_set)["gpus"][gpu]["used"]
