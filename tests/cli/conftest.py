"""conftest: fixtures for the tests of vramctl, vramd's command-line client.

The tests run the real vramctl binary ($VRAMD_BUILD/bin/vramctl) against real vramd daemons:
  - `gpu_vramd` (one per module): a vramd on a simulated 24 GiB GPU (vramdkit's Harness:
    simgpu + libnvidia-ml-sim + simworker) with two models and an admin token;
    at the end of the module it must pass the harness's checks (ledger back to resident
    reservations, clean exit 0, no sanitizer report, no worker left);
  - `vramd` (one per test): the e2e factory (vramdkit.factory), for daemons a test stops or
    breaks (drain, reload with a bad config);
  - vramctl(*args): runs the binary, returns the CompletedProcess (text, 60 s bound); a
    sanitizer report on its stderr fails the test.

A failing test's report gets the tail of its daemons' logs (vramdkit.report).
Every wait is a poll with a deadline; every process started here is stopped at teardown.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit import REPO_ROOT, binary, check_binaries, sanitizer_reports, sim_s  # noqa: E402
from vramdkit.factory import vramd  # noqa: E402,F401  (fixture)
from vramdkit.harness import Harness  # noqa: E402
from vramdkit.report import pytest_runtest_makereport, track  # noqa: E402,F401  (hook)

TOKEN = "cli-test-token-0123456789"
RUN_TIMEOUT = 60


def vramctl_binary():
    return binary("vramctl")


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
    found = sanitizer_reports(text)
    assert not found, f"sanitizer report from {what}:\n{text[-4000:]}"


@pytest.fixture(scope="module")
def gpu_vramd(tmp_path_factory, request):
    """A vramd on one simulated 24 GiB GPU with models `gen` (6 GiB + 2 GiB per request,
    pinned: loaded at start) and `val` (2 GiB + 1 GiB, loaded on demand) and an admin token.
    Yields the vramdkit Vramd with .url and .token_file added."""
    check_binaries()
    tmp = tmp_path_factory.mktemp("cli")
    h = Harness(tmp)
    track(request.node, h.daemons)
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

