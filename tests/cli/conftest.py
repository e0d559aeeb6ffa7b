"""conftest: fixtures for the tests of vramctl, vramd's command-line client.

The tests run the real vramctl binary ($VRAMD_BUILD/bin/vramctl) against real vramd daemons:
  - `gpu_vramd` (one per module): a vramd on a simulated 24 GiB GPU (scheduling/schedkit.py's
    Harness: simgpu + libnvidia-ml-sim + simworker) with two models and an admin token;
    at the end of the module it must pass the harness's checks (ledger back to resident
    reservations, clean exit 0, no sanitizer report, no worker left);
  - `vramd` (one per test): tests/e2e's factory, for daemons a test stops or breaks (drain,
    reload with a bad config). Loaded from tests/e2e/conftest.py by file path, under its own
    module name, so that tests/e2e keeps the plain name "conftest" for itself;
  - vramctl(*args): runs the binary, returns the CompletedProcess (text, 60 s bound); a
    sanitizer report on its stderr fails the test.

Every wait is a poll with a deadline; every process started here is stopped at teardown.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduling.schedkit import Harness, check_binaries, sim_s

_E2E = Path(__file__).resolve().parents[1] / "e2e" / "conftest.py"
_spec = importlib.util.spec_from_file_location("vramctl_e2e_helpers", _E2E)
e2e = importlib.util.module_from_spec(_spec)
sys.modules["vramctl_e2e_helpers"] = e2e
_spec.loader.exec_module(e2e)

REPO_ROOT = e2e.REPO_ROOT
TOKEN = "cli-test-token-0123456789"
RUN_TIMEOUT = 60


def build_dir():
    path = Path(os.environ.get("VRAMD_BUILD", "build"))
    return path if path.is_absolute() else REPO_ROOT / path


def vramctl_binary():
    return build_dir() / "bin" / "vramctl"


def clean_env(**extra):
    """The environment vramctl runs with: none of the user's VRAMD_* or colour settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VRAMD_") and k not in ("NO_COLOR", "COLUMNS")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def vramctl(*args, env=None, input=None, timeout=RUN_TIMEOUT, url=None):
    """Run vramctl; url (when given) is passed as --url."""
    binary = vramctl_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not found: build it first (make BUILD=...)")
    argv = [str(binary)]
    if url:
        argv += ["--url", url]
    argv += [str(a) for a in args]
    p = subprocess.run(argv, capture_output=True, text=True, env=env or clean_env(),
                       input=input, timeout=timeout, cwd=REPO_ROOT)
    assert_no_sanitizer_report(p.stderr, argv)
    return p


def assert_no_sanitizer_report(text, what):
    """Under ASan+UBSan a report may come with the very exit code a test expects (1)."""
    found = [m for m in e2e.SANITIZER_MARKERS if m in text]
    assert not found, f"sanitizer report from {what}:\n{text[-4000:]}"


@pytest.fixture(scope="module")
def gpu_vramd(tmp_path_factory):
    """A vramd on one simulated 24 GiB GPU with models `gen` (6 GiB + 2 GiB per request,
    pinned: loaded at start) and `val` (2 GiB + 1 GiB, loaded on demand) and an admin token.
    Yields the schedkit Vramd with .url and .token_file added."""
    check_binaries()
    tmp = tmp_path_factory.mktemp("cli")
    h = Harness(tmp)
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    gpu = h.gpu_set("24GiB")
    gen = h.model("gen", ["--resident", "5.7GiB", "--per-request", "2GiB", "--cache", "release",
                          "--run-time", sim_s(1), "--time-scale", "steps:1:1", "--output", "json"],
                  "6GiB", "2GiB",
                  keep_alive="forever")
    val = h.model("val", ["--resident", "1.7GiB", "--per-request", "1GiB", "--cache", "release",
                          "--run-time", sim_s(1), "--output", "json"], "2GiB", "1GiB")
    vd = h.start_vramd(gpu, {"gen": gen, "val": val}, admin_token_file=str(token_file))
    vd.url = f"http://127.0.0.1:{vd.port}"
    vd.token_file = token_file
    vd.harness = h
    vd.wait_ready("gen", timeout=30)
    try:
        yield vd
        h.finish()
    finally:
        h.close()


@pytest.fixture
def vramd(tmp_path, request):
    """tests/e2e's factory: vramd.start(models={...}) -> a running e2e Vramd (testworker
    models); stopped and checked for leaked workers at teardown."""
    if not e2e.vramd_binary().exists():
        pytest.fail(f"{e2e.vramd_binary()} not found: build vramd first")
    factory = e2e.VramdFactory(tmp_path, request.node)
    yield factory
    problems = factory.cleanup()
    if problems:
        pytest.fail("; ".join(problems))
