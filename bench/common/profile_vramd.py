"""profile_vramd: a perf profile of vramd under one of the benchmark loads, so that a
performance problem can be shown with evidence instead of guessed.

  /usr/bin/python3 bench/common/profile_vramd.py proxy [--conns 64] [--seconds 10]
      nginx upstream, vramd (concurrency 256) in front, wrk -t1 -cC for S seconds
  /usr/bin/python3 bench/common/profile_vramd.py parked [--n 8000] [--seconds 10]
      holdserver upstream behind vramd (concurrency 1), N closed-loop clients parked,
      then released; the profile covers the dispatch phase only

  /usr/bin/python3 bench/common/profile_vramd.py syscalls [--seconds 5]
      nginx upstream behind HAProxy and vramd; for each at c=1 and c=64: system calls per
      request (perf stat -e raw_syscalls:sys_enter on the proxy), then a per-call
      breakdown at c=64 (strace -c, 3 s; strace slows the proxy, the counts stay valid)

proxy/parked: runs `perf record -g --call-graph dwarf` on the vramd process only and prints
`perf report --no-children` (top symbols) and the caller-based view; the perf.data file is
kept under bench/results/ (gitignored). Needs root or perf_event_paranoid <= 1 for -p.
"""

import argparse
import json
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


def syscalls(seconds):
    with bl.Procs() as procs:
        ng = bl.free_port()
        bl.start_nginx(procs, ng)
        hp = bl.free_port()
        h, _ = bl.start_haproxy(procs, hp, ng, 64)
        vp = bl.free_port()
        v = bl.start_vramd(procs, vp, ng, concurrency=256, queue_max=20000, max_connections=9000)
        lua = os.path.join(bl.REPO, "bench", "proxy-overhead", "wrk_report.lua")
        for name, port, pid in (("haproxy", hp, h.pid), ("vramd", vp, v.pid)):
            for c in (1, 64):
                wrk = subprocess.Popen(["wrk", "-t1", "-c%d" % c, "-d%ds" % (seconds + 3), "-s", lua,
                                        "http://127.0.0.1:%d/b/ping" % port], stdout=subprocess.PIPE, text=True)
                time.sleep(1)
                t0 = time.monotonic()
                ps = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(pid),
                                     "--", "sleep", str(seconds)], capture_output=True, text=True)
                elapsed = time.monotonic() - t0
                out = wrk.communicate()[0]
                w = json.loads([ln for ln in out.splitlines() if ln.startswith("WRKJSON ")][0][8:])
                rps = w["requests"] / (w["duration_us"] / 1e6)
                calls = int(ps.stderr.strip().splitlines()[-1].split(",")[0])
                print("%-8s c=%-3d %8.0f req/s  %5.2f syscalls/req" % (name, c, rps, calls / (rps * elapsed)),
                      flush=True)
            wrk = subprocess.Popen(["wrk", "-t1", "-c64", "-d6s", "http://127.0.0.1:%d/b/ping" % port],
                                   stdout=subprocess.DEVNULL)
            time.sleep(1)
            st = subprocess.run(["timeout", "-s", "INT", "3", "strace", "-c", "-f", "-p", str(pid)],
                                capture_output=True, text=True)
            wrk.wait()
            print("\n".join(ln for ln in st.stderr.splitlines() if not ln.startswith("strace:")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["proxy", "parked", "syscalls"])
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    if args.scenario == "syscalls":
        syscalls(int(args.seconds) if args.seconds != 10 else 5)
        return
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
