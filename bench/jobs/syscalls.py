#!/usr/bin/python3
"""syscalls: the system calls vramd makes per synchronous request and per durable job
(evidence for bench/jobs/run.py's CPU numbers; not a benchmark: strace slows vramd down).

Starts the same worker and vramd as run.py (state_dir on --state-parent, a real disk by
default), warms up, then for each kind (sync, jobs) attaches `strace -c -f` to vramd for M
(--m, default 500) items with a 0 ms worker, and prints every system call's count per item.
Writes the strace summaries and the counts to bench/results/jobs-syscalls-<stamp>.json.

  /usr/bin/python3 bench/jobs/syscalls.py [--build DIR] [--m 500] [--state-parent /var/tmp]
Needs strace (and ptrace permission on vramd, i.e. root or the same user without Yama).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402
import run as jobs_bench  # noqa: E402


def parse_strace_c(text):
    """{syscall: calls} from `strace -c` output."""
    counts = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[0].replace(".", "", 1).isdigit() and cols[-1] != "total":
            calls = cols[3]
            if calls.isdigit():
                counts[cols[-1]] = int(calls)
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--m", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--state-parent", default="/var/tmp")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        raise bl.BenchError("strace is not installed")
    build = args.build if os.path.isabs(args.build) else os.path.join(bl.REPO, args.build)
    os.environ.setdefault("VRAMD_BIN", os.path.join(build, "bin", "vramd"))
    binary = bl.snapshot_vramd()
    if binary is None:
        raise bl.BenchError("no vramd binary at %s" % bl.vramd_binary())
    mnt = jobs_bench.mount_of(args.state_parent)
    result = {"benchmark": "jobs-syscalls", "m": args.m, "environment": bl.environment(),
              "filesystem": {"path": args.state_parent, "fstype": mnt[1], "source": mnt[2]}, "kinds": {}}
    result["environment"]["vramd_binary"] = binary
    state_dir = tempfile.mkdtemp(prefix="vramd-bench-jobs-sys-", dir=args.state_parent)
    try:
        with bl.Procs() as procs:
            wport, vport = bl.free_port(), bl.free_port()
            jobs_bench.start_worker(procs, wport)
            vramd = jobs_bench.start_vramd(procs, vport, wport, state_dir, args.concurrency)
            jobs_bench.job_throughput(vport, 0, 100, args.concurrency, vramd.pid)
            jobs_bench.sync_throughput(vport, 0, 100, args.concurrency, vramd.pid)
            for kind in ("sync", "jobs"):
                out = os.path.join(procs.dir, "strace-%s.txt" % kind)
                tr = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(vramd.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)  # strace attaches to every thread
                fn = jobs_bench.sync_throughput if kind == "sync" else jobs_bench.job_throughput
                fn(vport, 0, args.m, args.concurrency, vramd.pid)
                tr.send_signal(signal.SIGINT)
                tr.wait(30)
                with open(out) as f:
                    text = f.read()
                counts = parse_strace_c(text)
                result["kinds"][kind] = {"strace_c": text, "calls": counts,
                                         "per_item": {k: v / args.m for k, v in counts.items()}}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    names = sorted(set(result["kinds"]["sync"]["calls"]) | set(result["kinds"]["jobs"]["calls"]),
                   key=lambda k: -result["kinds"]["jobs"]["calls"].get(k, 0))
    rows = [[k, "%.1f" % result["kinds"]["sync"]["per_item"].get(k, 0.0),
             "%.1f" % result["kinds"]["jobs"]["per_item"].get(k, 0.0)] for k in names]
    rows.append(["(all)", "%.1f" % sum(result["kinds"]["sync"]["per_item"].values()),
                 "%.1f" % sum(result["kinds"]["jobs"]["per_item"].values())])
    print("system calls of vramd per item, %d items, 0 ms worker, c=%d, state_dir on %s (%s)"
          % (args.m, args.concurrency, mnt[1], mnt[2]))
    bl.print_table(["syscall", "per sync request", "per job"], rows)
    result["quick"] = True  # evidence, never a -latest
    os.makedirs(bl.RESULTS_DIR, exist_ok=True)
    path = os.path.join(bl.RESULTS_DIR, "jobs-syscalls-%s.json" % time.strftime("%Y%m%d-%H%M%S"))
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    print("results: %s" % os.path.relpath(path, bl.REPO))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    try:
        main()
    except bl.BenchError as e:
        print("jobs-syscalls: %s" % e, file=sys.stderr)
        sys.exit(1)
