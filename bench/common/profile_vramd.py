"""profile_vramd: a perf profile of vramd under one of the benchmark loads, so that a
performance problem can be shown with evidence instead of guessed.

  /usr/bin/python3 bench/common/profile_vramd.py proxy [--conns 64] [--seconds 10]
      nginx upstream, vramd (concurrency 256) in front, wrk -t1 -cC for S seconds
  /usr/bin/python3 bench/common/profile_vramd.py parked [--n 8000] [--seconds 10]
      holdserver upstream behind vramd (concurrency 1), N closed-loop clients parked,
      then released; the profile covers the dispatch phase only

Runs `perf record -g --call-graph dwarf` on the vramd process only and prints
`perf report --no-children` (top symbols) and the caller-based view; the perf.data file is
kept under bench/results/ (gitignored). Needs root or perf_event_paranoid <= 1 for -p.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def perf_record(pid, seconds, out):
    return subprocess.Popen(["perf", "record", "-q", "-F", "999", "-g", "--call-graph", "dwarf,16384",
                             "-p", str(pid), "-o", out, "--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def report(out, top):
    r = subprocess.run(["perf", "report", "-i", out, "--no-children", "--stdio", "--percent-limit", "1.5",
                        "-g", "none", "--sort", "dso,symbol"], capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    print("\n".join(lines[:top]))
    r = subprocess.run(["perf", "report", "-i", out, "--children", "--stdio", "--percent-limit", "4",
                        "-g", "none", "--sort", "symbol"], capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    print("\n-- inclusive (children) --")
    print("\n".join(lines[:top]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["proxy", "parked"])
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    os.makedirs(bl.RESULTS_DIR, exist_ok=True)
    out = os.path.join(bl.RESULTS_DIR, "perf-%s-%s.data" % (args.scenario, time.strftime("%Y%m%d-%H%M%S")))
    with bl.Procs() as procs:
        if args.scenario == "proxy":
            ng = bl.free_port()
            bl.start_nginx(procs, ng)
            port = bl.free_port()
            v = bl.start_vramd(procs, port, ng, concurrency=256, queue_max=20000, max_connections=9000)
            wrk = subprocess.Popen(["wrk", "-t1", "-c%d" % args.conns, "-d%ds" % (args.seconds + 3),
                                    "http://127.0.0.1:%d/b/ping" % port], stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            perf = perf_record(v.pid, args.seconds, out)
            perf.wait()
            print(wrk.communicate()[0])
        else:
            tools = os.path.join(bl.REPO, "build", "bench")
            hold = procs.start("holdserver", [os.path.join(tools, "holdserver"), "0"],
                               stdout=subprocess.PIPE)
            up = int(hold.stdout.readline().split()[1])
            port = bl.free_port()
            v = bl.start_vramd(procs, port, up, concurrency=1, queue_max=20000, max_connections=9000,
                               deadline="24h")
            hold.send_signal(signal.SIGUSR2)  # close the gate: the next request holds the slot
            time.sleep(0.3)
            procs.start("parkclient", [os.path.join(tools, "parkclient"), "127.0.0.1", str(port), "/b/park",
                                       str(args.n), "3600"])
            deadline = time.monotonic() + 120
            while bl.vramd_queue_depth(port) < args.n - 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            hold.send_signal(signal.SIGUSR1)
            time.sleep(1)
            perf = perf_record(v.pid, args.seconds, out)
            perf.wait()
        if perf.returncode != 0:
            print(perf.stderr.read().decode(), file=sys.stderr)
    report(out, args.top)
    print("\nperf data: %s" % os.path.relpath(out, bl.REPO))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    main()
