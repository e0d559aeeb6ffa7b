"""bench/fleet/scaling.py --smoke: the fleet scaling bench (by hand, docs/benchmarks.md) still
runs against today's vramd, simworker and contrib/haproxy/haproxy.cfg, every request comes
back 200 through HAProxy on 1 and 2 hosts, no host logged a sanitizer report (run with
VRAMD_BUILD=build-san), the JSON has the figures the docs quote, and
nothing it started is left: no process, no network namespace, no simulated GPU. No timing
figure is checked here (the bench's figures go in docs, never in tests)."""
import json
import os
import subprocess
import sys
import time

import pytest

from vramdkit import binary
from vramdkit.paths import REPO_ROOT

from .fleetkit import netns_unavailable

BENCH = REPO_ROOT / "bench" / "fleet" / "scaling.py"


def test_scaling_bench_smoke_runs_and_cleans_up(tmp_path):
    why = netns_unavailable()
    if why:
        pytest.skip(f"the fleet bench needs network namespaces and haproxy: {why}")
    out = tmp_path / "smoke.json"
    p = subprocess.run([sys.executable, str(BENCH), "--smoke", "--out", str(out)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ), cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [r["hosts"] for r in data["runs"]] == [1, 2]
    for r in data["runs"]:
        assert r["sent"] == 4 * r["hosts"] and r["ok"] == r["sent"], (r["hosts"], r["failed"])
        assert r["ooms"] == 0 and r["oom_log_lines"] == 0
        assert r["sanitizer_reports"] == 0, "a host's log has a sanitizer report (VRAMD_BUILD=build-san)"
        assert r["makespan_s"] > 0 and r["loads"] >= 1
        served = sum(v for per_host in r["served_by_host"].values() for v in per_host.values())
        assert served == r["sent"], r["served_by_host"]
    two = [row for row in data["summary"] if row["hosts"] == 2][0]
    assert two["efficiency"] is not None and two["efficiency"] > 0
    # nothing left behind
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    sets = subprocess.run([str(binary("simgpu")), "list"], capture_output=True, text=True).stdout
    for r in data["runs"]:
        for ns in r["started"]["netns"]:
            assert ns not in netns, f"namespace {ns} left behind"
        for s in r["started"]["gpu_sets"]:
            assert s not in sets.split(), f"simulated GPU set {s} left behind"
        for pid, start in r["started"]["pids"]:
            assert wait_gone(pid, start), f"process {pid} left behind"


def wait_gone(pid, start, timeout=5.0):
    """True once the process that had this pid and start time is gone or a zombie (a
    process killed at the end may take a moment to die and be reaped by its new parent)."""
    t_end = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[19]) != start or fields[0] in ("Z", "X"):
                return True
        except (OSError, IndexError, ValueError):
            return True
        if time.monotonic() > t_end:
            return False
        time.sleep(0.05)
