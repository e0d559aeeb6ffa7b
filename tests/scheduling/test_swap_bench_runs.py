"""The swaps benchmark (bench/scheduling/swaps.py, issue 35) runs and measures what it says.

Runs `swaps.py --quick` (8 requests for 3 models that each need most of a 24 GiB card, all at
once, through vramd, through the FIFO swapper and against the computed bound; the real
llama.cpp router is left out here) and checks structure and correctness only, never timing:
every request is answered 200 with a chat completion through vramd and through the FIFO
swapper; the swapper's swap count equals the model changes in the order it received the
requests (the first load on an empty card counted; the order is the swapper's own, since
requests sent 2 ms apart may be read in another order on a loaded machine); vramd's
loads counted from its log agree with its /v1/status `loads_total` and cover every model; the
bound is one load per model. Timing figures belong in docs/benchmarks.md, not here.
"""
import json
import os
import subprocess

from vramdkit.paths import PYTHON, REPO_ROOT, build_dir, check_binaries

BENCH = REPO_ROOT / "bench" / "scheduling" / "swaps.py"


def test_swap_bench_quick_run(tmp_path):
    check_binaries()
    out = tmp_path / "swaps.json"
    p = subprocess.run([PYTHON, str(BENCH), "--quick", "--setups", "vramd,fifo,bound", "--build", str(build_dir()),
                        "--json", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["quick"] is True
    [run] = data["runs"]
    assert run["n_models"] == 3 and run["pattern"] == "burst"
    seq = run["sequence"]
    assert len(seq) == 8 and set(seq) <= set("abc")
    assert set(run["setups"]) == {"vramd", "fifo", "bound"}
    for name in ("vramd", "fifo"):
        s = run["setups"][name]
        assert s["requests"] == len(seq) and s["ok"] == len(seq) and s["failures"] == 0, (name, s["failure_codes"])
        assert [r["status"] for r in s["records"]] == [200] * len(seq), name
        assert all(r["body_ok"] for r in s["records"]), name
        assert [r["model"] for r in s["records"]] == list(seq), name
        assert all(r["queue_ms"] is not None for r in s["records"]), name
        assert s["exit_code"] == 0, name
        for key in ("makespan_s", "p50_s", "p99_s", "longest_wait_s"):
            assert isinstance(s[key], (int, float)) and s[key] >= 0, (name, key, s[key])
    fifo = run["setups"]["fifo"]
    changes = sum(1 for i, m in enumerate(fifo["order_received"]) if i == 0 or fifo["order_received"][i - 1] != m)
    assert fifo["loads"] == changes == fifo["changes_in_order_received"], fifo
    assert sorted(fifo["order_received"]) == sorted(seq)  # every request, in the order it arrived
    assert sum(fifo["swaps_by_model"].values()) == fifo["loads"]
    assert fifo["served"] == len(seq)
    vd = run["setups"]["vramd"]
    assert vd["loads"] == vd["loads_total_status"], vd
    assert set(vd["worker_starts_by_model"]) == set(seq)
    assert run["setups"]["bound"]["loads"] == len(set(seq))
    assert "makespan" in p.stdout and "longest wait" in p.stdout  # the table was printed
