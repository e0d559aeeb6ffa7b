"""The `vramd` fixture (tests/e2e and the suites built on it: jobs, ops, cli): a
VramdFactory that starts daemons with tests/e2e/testworker.py models for one test, without a
simulated GPU.

At teardown it stops every daemon and fails the test when one does not exit 0 on SIGTERM,
when a log holds a sanitizer report or a log_format_error field, or when a testworker
process started for the test outlives its daemon. Each test gets a unique tag (its tmp dir
name + a random suffix) that appears in every testworker command line it starts."""
import secrets
import signal
import os
import subprocess

import pytest

from .daemon import ExternalWorker, Vramd
from .net import TEST_HOSTS, free_port
from .paths import PYTHON, REPO_ROOT, vramd_binary
from .proc import wait_for_gone
from .report import track

TESTWORKER = str(REPO_ROOT / "tests" / "e2e" / "testworker.py")

# Generous bounds for a slow, loaded 2-core machine.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0


def worker_cmd(name, tag, *extra):
    return [PYTHON, TESTWORKER, "--port", "{port}", "--name", f"{name}@{tag}", *extra]


def worker_model(name, tag, route=None, extra_args=(), **overrides):
    """A supervised testworker model with quick health checks."""
    m = {
        "route": route if route is not None else f"/{name}/",
        "cmd": worker_cmd(name, tag, *extra_args),
        "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2},
        "startup_timeout": "15s",
        "stop_timeout": "2s",
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30s",
        "keep_alive": "10m",
    }
    m.update(overrides)
    return m


class VramdFactory:
    """Starts daemons for one test; the fixture cleans up after it."""

    def __init__(self, tmp_path, node):
        self.tmp = tmp_path
        self.tag = f"{tmp_path.name}-{secrets.token_hex(4)}"
        self.instances = []
        self.externals = []
        track(node, self.instances)

    def worker(self, name, route=None, extra_args=(), **overrides):
        return worker_model(name, self.tag, route=route, extra_args=extra_args, **overrides)

    def config(self, models, limits=None, **top):
        cfg = {
            "listen": f"127.0.0.1:{free_port()}",
            "allowed_hosts": list(TEST_HOSTS),
            "state_dir": str(self.tmp / "var"),
            "log": {"format": "json", "level": "debug"},
            "limits": {"header_timeout": "2s", "max_body": "1MiB", "max_header": "8KiB",
                       "queue_max": 100},
        }
        if limits:
            cfg["limits"].update(limits)
        cfg.update(top)
        cfg["models"] = models
        return cfg

    def start(self, models=None, limits=None, config=None, wait=True, env=None, preexec=None, **top):
        """env: variables added to the daemon's environment (an LD_PRELOAD shim...);
        preexec: a function run in the child before exec (joining a cgroup...)."""
        if config is None:
            config = self.config(models or {}, limits=limits, **top)
        vd = Vramd(self.tmp, f"vramd{len(self.instances)}", config, http="raw",
                   start_timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT,
                   request_timeout=REQUEST_TIMEOUT, extra_env=env, preexec=preexec)
        vd.factory, vd.tag = self, self.tag
        self.instances.append(vd)
        return vd.start(wait=wait)

    def external(self, name="ext", port=None):
        """A testworker the test starts itself (for url: models)."""
        port = port or free_port()
        w = ExternalWorker([PYTHON, TESTWORKER, "--port", str(port), "--name", f"{name}@{self.tag}-ext"],
                           port, name, self.tmp / f"{name}-{port}.log", cwd=REPO_ROOT,
                           start_timeout=START_TIMEOUT, what="external testworker")
        self.externals.append(w)
        return w

    def check_config(self, text, name="check.yaml"):
        path = self.tmp / name
        path.write_text(text)
        p = subprocess.run([str(vramd_binary()), "--check-config", str(path)],
                           capture_output=True, text=True, timeout=30, cwd=REPO_ROOT)
        return path, p

    def cleanup(self):
        problems = []
        for vd in self.instances:
            if vd.proc is not None and vd.proc.poll() is None:
                code = vd.stop()
                if code != 0:
                    problems.append(f"{vd.name}: exit status {code} after SIGTERM at teardown"
                                    " (None: had to be killed)")
            for marker in vd.sanitizer_reports():
                problems.append(f"{vd.name}: sanitizer report in its log ({marker!r})")
            bad = vd.format_errors()
            if bad:
                problems.append(f"{vd.name}: log lines with log_format_error: {bad[:3]}")
        for w in self.externals:
            w.close()
        # supervised workers must be gone once vramd has exited
        leftover = wait_for_gone(self.tag, program="testworker.py")
        if leftover:
            for pid in leftover:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            problems.append(f"testworker processes left alive after vramd exited: {leftover}")
        return problems


@pytest.fixture
def vramd(tmp_path, request):
    """Factory: vramd.start(models={...}) -> a running Vramd. Cleans up and checks for
    leaked worker processes at teardown."""
    if not vramd_binary().exists():
        pytest.fail(f"{vramd_binary()} not found: build vramd first")
    factory = VramdFactory(tmp_path, request.node)
    yield factory
    problems = factory.cleanup()
    if problems:
        pytest.fail("; ".join(problems))
