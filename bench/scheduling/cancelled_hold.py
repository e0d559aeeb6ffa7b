#!/usr/bin/python3
"""bench/scheduling/cancelled_hold.py: what memory.cancelled_hold buys and costs
(docs/benchmarks.md, "A request whose client left").

A real vramd on a simulated 24 GiB GPU, one simworker model like TRELLIS on a 4090 (5.7 GiB
resident, 11.5 GiB per request kept cached, 40 s simulated run = 2 s at timescale 0.05, two
requests at once allowed; two do not fit). Each round: request A's client leaves at 40 % of
its run (the worker runs it to its end, as a Python server does), and request B is sent
0.2 s later. Configurations:
  hold   memory.cancelled_hold auto (default): B waits for A's hold (dispatch + 2 x learned
         run time) instead of being lent the memory A still uses
  off    memory.cancelled_hold 0 (before it existed): B is lent A's memory as cache
Per configuration: B's outcomes (status), B's time at the client (median), and the out-of-
memory lines the worker printed. Rounds alternate the order.

  /usr/bin/python3 bench/scheduling/cancelled_hold.py [--rounds 3] [--n 5]
Result: bench/results/cancelled-hold-<stamp>.json.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import RawConn, TIMESCALE, build_request, sim_s, wait_for  # noqa: E402
from vramdkit.harness import Harness  # noqa: E402

RUN_S = 40
GiB = 1 << 30


def one(h, hold, n):
    gpu = h.gpu_set("24GiB")
    model = h.model("gen", ["--resident", "5.7GiB", "--per-request", "11.5GiB", "--cache", "keep",
                            "--run-time", sim_s(RUN_S)], "6GiB", "11.5GiB", concurrency=2,
                    memory={"cancelled_hold": hold})
    vd = h.start_vramd(gpu, {"gen": model}, level="info")
    try:
        assert vd.generate("gen").status == 200
        statuses, times = {}, []
        for i in range(n):
            wait_for(lambda: vd.instances("gen")[0]["in_flight"] == 0 and
                     vd.instances("gen")[0]["cancelled_held_bytes"] == 0, timeout=60, what="gen idle")
            time.sleep(RUN_S * TIMESCALE)  # the last abandoned run is over in the worker too
            c = RawConn(vd.port)
            c.send(build_request("POST", "/gen/generate", {"Content-Type": "application/json"}, "{}"))
            wait_for(lambda: vd.instances("gen")[0]["in_flight"] == 1, what="A on the worker")
            time.sleep(0.4 * RUN_S * TIMESCALE)
            c.close()
            time.sleep(0.2)
            t0 = time.perf_counter()
            r = vd.generate("gen", {"round": i}, timeout=120)
            times.append(time.perf_counter() - t0)
            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        return {"b_status": statuses, "b_median_s": round(statistics.median(times), 3),
                "b_times_s": [round(t, 3) for t in times], "worker_oom_lines": len(vd.oom_lines("gen")),
                "holds": len(vd.events("cancelled_hold"))}
    finally:
        vd.stop(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=5, help="A/B pairs per configuration and round")
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="vramd-hold-bench-") as tmp:
        h = Harness(Path(tmp))
        try:
            for r in range(args.rounds):
                order = [("hold", "auto"), ("off", "0")]
                if r % 2:
                    order.reverse()
                got = {name: one(h, hold, args.n) for name, hold in order}
                rounds.append(got)
                print(json.dumps(got), flush=True)
        finally:
            h.close()
    summary = {}
    for name in ("hold", "off"):
        st = {}
        for r in rounds:
            for k, v in r[name]["b_status"].items():
                st[k] = st.get(k, 0) + v
        summary[name] = {"b_status": st, "b_median_s": statistics.median(r[name]["b_median_s"] for r in rounds),
                         "worker_oom_lines": sum(r[name]["worker_oom_lines"] for r in rounds)}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit, "n": args.n, "rounds": rounds,
              "summary": summary}
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / f"cancelled-hold-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
