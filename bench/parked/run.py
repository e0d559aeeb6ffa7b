"""parked: what a queued ("parked") request costs a proxy, and whether dispatching from a long
queue costs more per request than from a short one. vramd against HAProxy 2.6.

Setup (127.0.0.1 only; fresh processes for every measurement):
  holdserver  the slow test worker (bench/parked/holdserver.c): answers 200 "ok\\n", but
              while its gate is closed it holds every request (except /health) unanswered.
  HAProxy     mode http, nbthread 1, `server up ... maxconn 1`, timeout queue 10m
  vramd       one external model (url: holdserver, route /b/), concurrency 1,
              queue_max 20000 (model and limits), max_connections 9000, deadline 24h (so that
              the deadline predictor, 8000 ahead x the run time learned from the held
              request, never refuses: this benchmark measures the queue, not the predictor)
  parkclient  (bench/parked/parkclient.c) N keep-alive connections, one request outstanding on
              each; a completed response is followed at once by the next request (closed loop),
              so with one upstream slot N-1 requests stay queued in the proxy.
Steps for one (proxy, N):
  1. start holdserver (gate open) and the proxy; warm up with wrk (16 connections, 1 s);
  2. close the gate; RSS0 = proxy VmRSS;
  3. start parkclient with N connections; wait until the proxy reports N-1 queued
     (vramd: /v1/status queue.depth; HAProxy: `show stat` qcur) and 1 held upstream;
     wait 1 s more; RSS1 = VmRSS; memory per parked request = (RSS1 - RSS0) / N
     (connection + request state: everything the proxy holds for a waiting client);
  4. open the gate (the worker now answers at once); after 1 s of settling, count the
     responses completed over W seconds: the dispatch rate with N queued (the queue stays at
     N-1 throughout: closed loop); also the proxy's CPU per dispatched request;
  5. stop everything.
Shared machine: before each measurement the script waits (up to 10 min) until other processes
use at most 10 % of a core, and repeats a measurement during whose window they used more (4
attempts at most; the share is kept in the JSON).
Ratio "kept" = rate(8000 queued) / rate(256 queued), within a round, median over rounds.
Targets (issue 2): vramd <= 4 KB per parked request (HAProxy: 7.1 KB on the reference box) and
>= 90 % kept (HAProxy: 47 %).

Usage: run.sh [--quick] [--rounds R] [--window S] [--big 8000] [--small 256] [--no-vramd] [--no-haproxy]
Prints a table; writes bench/results/parked-<stamp>.json (and -latest.json).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS_DIR = os.path.join(bl.REPO, "build", "bench")
# Shared box: wait until other processes use <= MAX_FOREIGN of a core before a measurement,
# and repeat one during whose dispatch window they used more (MAX_ATTEMPTS in all).
MAX_FOREIGN = 0.10
MAX_ATTEMPTS = 4
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wshadow",
          "-Wstrict-prototypes", "-Wmissing-prototypes"]


def build_tools():
    os.makedirs(TOOLS_DIR, exist_ok=True)
    paths = {}
    for name in ("holdserver", "parkclient"):
        src = os.path.join(HERE, name + ".c")
        out = os.path.join(TOOLS_DIR, name)
        if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
            r = subprocess.run(["cc"] + CFLAGS + ["-o", out, src], capture_output=True, text=True)
            if r.returncode != 0:
                raise bl.BenchError("cannot build %s:\n%s" % (name, r.stderr))
        paths[name] = out
    return paths


class LineReader:
    """Reads a child's stdout lines in a thread; keeps the latest `stat` line and all others."""

    def __init__(self, proc):
        self.proc = proc
        self.lock = threading.Lock()
        self.last_stat = None
        self.last_served = None
        self.served_seq = 0
        self.lines = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            with self.lock:
                if line.startswith("stat "):
                    f = line.split()
                    self.last_stat = {"t_ns": int(f[1]), "connected": int(f[2]), "completed": int(f[3]),
                                      "non200": int(f[4]), "closed": int(f[5]), "failed_connects": int(f[6])}
                elif line.startswith("served "):
                    f = line.split()
                    self.last_served = {"served": int(f[1]), "accepted": int(f[3]), "held": int(f[5])}
                    self.served_seq += 1
                else:
                    self.lines.append(line)

    def stat(self):
        with self.lock:
            return dict(self.last_stat) if self.last_stat else None

    def served(self, timeout=5.0):
        """Asks holdserver for its counts (SIGHUP) and returns them."""
        with self.lock:
            seq = self.served_seq
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.served_seq > seq:
                    return dict(self.last_served)
            time.sleep(0.01)
        raise bl.BenchError("holdserver does not report its counts")

    def first_line(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.lines:
                    return self.lines[0]
            time.sleep(0.02)
        raise bl.BenchError("no output from %s" % self.proc.bench_name)


def wait_stat_after(reader, t_ns, timeout=5.0):
    """The first stat line printed after monotonic time t_ns."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = reader.stat()
        if s and s["t_ns"] > t_ns:
            return s
        time.sleep(0.02)
    raise bl.BenchError("parkclient stopped reporting")


def measure(proxy, n, window, tools, quick):
    with bl.Procs() as procs:
        hold = procs.start("holdserver", [tools["holdserver"], "0"], stdout=subprocess.PIPE)
        hold_out = LineReader(hold)
        up_port = int(hold_out.first_line().split()[1])
        port = bl.free_port()
        if proxy == "haproxy":
            p, sock = bl.start_haproxy(procs, port, up_port, 1)

            def depth_and_in_flight():
                return bl.haproxy_stat(sock)
        else:
            p = bl.start_vramd(procs, port, up_port, concurrency=1, queue_max=20000, max_connections=9000,
                               deadline="24h")

            def depth_and_in_flight():
                return bl.vramd_model_stat(port)

        def depth():
            return depth_and_in_flight()[0]
        subprocess.run(["wrk", "-t1", "-c16", "-d1s", "http://127.0.0.1:%d/b/warm" % port],
                       capture_output=True, timeout=60)
        deadline = time.monotonic() + 30  # the warm-up's leftovers must be gone first
        while depth_and_in_flight() != (0, 0):
            if time.monotonic() > deadline:
                raise bl.BenchError("%s: queue/in-flight not empty after the warm-up: %r"
                                    % (proxy, depth_and_in_flight()))
            time.sleep(0.1)
        hold.send_signal(signal.SIGUSR2)  # close the gate
        time.sleep(0.5)
        rss0 = bl.rss_kib(p.pid)
        client = procs.start("parkclient", [tools["parkclient"], "127.0.0.1", str(port), "/b/park",
                                            str(n), "3600", "256"], stdout=subprocess.PIPE)
        cl = LineReader(client)
        t_park0 = time.monotonic()
        deadline = t_park0 + 180
        d = -1
        while time.monotonic() < deadline:
            d = depth()
            s = cl.stat()
            if d >= n - 1 and s and s["connected"] == n:
                break
            if client.poll() is not None or p.poll() is not None:
                raise bl.BenchError("%s: a process died while parking:\n%s" % (proxy, procs.log_tail(proxy)))
            time.sleep(0.2)
        else:
            raise bl.BenchError("%s: only %d of %d queued after 180 s (client: %r)" % (proxy, d, n - 1, cl.stat()))
        park_s = time.monotonic() - t_park0
        time.sleep(1.0)
        rss1 = bl.rss_kib(p.pid)
        depth_parked = depth()
        s_before = cl.stat()
        if s_before["completed"] != 0 or s_before["closed"] or s_before["failed_connects"]:
            raise bl.BenchError("%s: while parked: %r" % (proxy, s_before))

        hold.send_signal(signal.SIGUSR1)  # open the gate: dispatch at full speed
        time.sleep(1.0)
        s0 = wait_stat_after(cl, 0)
        cpu0 = bl.cpu_seconds(p.pid)
        client_cpu0, hold_cpu0 = bl.cpu_seconds(client.pid), bl.cpu_seconds(hold.pid)
        up0 = hold_out.served()
        with bl.ForeignLoad([p.pid, client.pid, hold.pid]) as foreign:
            time.sleep(window)
        s1 = wait_stat_after(cl, s0["t_ns"] + int(window * 1e9) - 1)
        cpu1 = bl.cpu_seconds(p.pid)
        client_cpu1, hold_cpu1 = bl.cpu_seconds(client.pid), bl.cpu_seconds(hold.pid)
        up1 = hold_out.served()
        depth_during = depth()
        rss2 = bl.rss_kib(p.pid)
        done = s1["completed"] - s0["completed"]
        rate = done / ((s1["t_ns"] - s0["t_ns"]) / 1e9)
        if s1["non200"] or s1["closed"] or s1["failed_connects"]:
            procs.stop(client)
            cl.thread.join(5)
            raise bl.BenchError("%s N=%d: client errors during dispatch: %r %s; log tail:\n%s"
                                % (proxy, n, s1, " | ".join(cl.lines), procs.log_tail(proxy)))
        return {
            "proxy": proxy, "n": n,
            "park_seconds": park_s,
            "rss0_kib": rss0, "rss_parked_kib": rss1, "rss_dispatching_kib": rss2,
            "bytes_per_parked": (rss1 - rss0) * 1024.0 / n,
            "depth_parked": depth_parked, "depth_during_dispatch": depth_during,
            "dispatched": done, "dispatch_rate": rate,
            "cpu_us_per_dispatch": (cpu1 - cpu0) * 1e6 / done if done else None,
            "client_cpu_us_per_dispatch": (client_cpu1 - client_cpu0) * 1e6 / done if done else None,
            "upstream_cpu_us_per_dispatch": (hold_cpu1 - hold_cpu0) * 1e6 / done if done else None,
            "foreign_core_frac": foreign.foreign_core_frac,
            "upstream_requests": up1["served"] - up0["served"],
            "upstream_connections_opened": up1["accepted"] - up0["accepted"],
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round, 2 s windows (a smoke run, not a result)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--window", type=float, default=None, help="seconds of dispatch counted")
    ap.add_argument("--big", type=int, default=8000)
    ap.add_argument("--small", type=int, default=256)
    ap.add_argument("--no-vramd", action="store_true")
    ap.add_argument("--no-haproxy", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    window = args.window or (2.0 if args.quick else 5.0)
    tools = build_tools()
    binary = None if args.no_vramd else bl.snapshot_vramd()
    env = bl.environment()
    env["vramd_binary"] = binary
    proxies = [] if args.no_haproxy else ["haproxy"]
    result = {"benchmark": "parked", "quick": args.quick, "rounds": rounds, "window_s": window,
              "big": args.big, "small": args.small, "environment": env, "pinning": "none",
              "runs": [], "vramd_available": None}
    if not args.no_vramd:
        if os.access(bl.vramd_binary(), os.X_OK):
            proxies.append("vramd")
        else:
            result["vramd_available"] = False
            result["vramd_error"] = "no binary at %s" % bl.vramd_binary()
            print("vramd: not measured: %s" % result["vramd_error"], file=sys.stderr)
    for rnd in range(rounds):
        order = proxies if rnd % 2 == 0 else list(reversed(proxies))
        for proxy in order:
            sizes = [args.big, args.small] if rnd % 2 == 0 else [args.small, args.big]
            for n in sizes:
                try:
                    for attempt in range(1, MAX_ATTEMPTS + 1):
                        waited = bl.wait_quiet([], MAX_FOREIGN)
                        r = measure(proxy, n, window, tools, args.quick)
                        if r["foreign_core_frac"] <= MAX_FOREIGN or attempt == MAX_ATTEMPTS:
                            break
                        print("round %d %-7s N=%-5d other processes used %.0f %% of a core: run again"
                              % (rnd + 1, proxy, n, r["foreign_core_frac"] * 100), flush=True)
                    r["attempts"] = attempt
                    r["waited_for_quiet_s"] = waited
                except bl.BenchError as e:
                    if proxy == "vramd":
                        print("vramd: not measured: %s" % e, file=sys.stderr)
                        result["vramd_available"] = False
                        result["vramd_error"] = str(e)
                        proxies.remove("vramd")
                        break
                    raise
                r["round"] = rnd
                if proxy == "vramd":
                    result["vramd_available"] = True
                result["runs"].append(r)
                print("round %d %-7s N=%-5d parked in %5.1fs  %6.0f B/parked  dispatch %7.0f req/s  cpu us/req: "
                      "proxy %5.1f client %4.1f upstream %4.1f  depth %d/%d  upstream conns opened %d  others %.0f %%"
                      % (rnd + 1, proxy, n, r["park_seconds"], r["bytes_per_parked"], r["dispatch_rate"],
                         r["cpu_us_per_dispatch"] or 0, r["client_cpu_us_per_dispatch"] or 0,
                         r["upstream_cpu_us_per_dispatch"] or 0, r["depth_parked"], r["depth_during_dispatch"],
                         r["upstream_connections_opened"], r["foreign_core_frac"] * 100), flush=True)

    summary = {}
    for proxy in proxies:
        mine = [r for r in result["runs"] if r["proxy"] == proxy]
        big = [r for r in mine if r["n"] == args.big]
        small = [r for r in mine if r["n"] == args.small]
        kept = []
        for rnd in range(rounds):
            b = [r for r in big if r["round"] == rnd]
            s = [r for r in small if r["round"] == rnd]
            if b and s:
                kept.append(b[0]["dispatch_rate"] / s[0]["dispatch_rate"])
        summary[proxy] = {
            "bytes_per_parked": bl.median([r["bytes_per_parked"] for r in big]),
            "bytes_per_parked_small": bl.median([r["bytes_per_parked"] for r in small]),
            "rate_big": bl.median([r["dispatch_rate"] for r in big]),
            "rate_small": bl.median([r["dispatch_rate"] for r in small]),
            "kept": bl.median(kept),
            "cpu_us_big": bl.median([r["cpu_us_per_dispatch"] for r in big]),
            "cpu_us_small": bl.median([r["cpu_us_per_dispatch"] for r in small]),
        }
    result["summary"] = summary

    print()
    print("parked, %s, %s x %d CPUs, %d round(s), %.0f s windows, medians" %
          (env["date_utc"], env["cpu_model"], env["nproc"], rounds, window))
    header = ["proxy", "B/parked (N=%d)" % args.big, "req/s %d queued" % args.big, "req/s %d queued" % args.small,
              "kept", "cpu us/req @%d" % args.big, "cpu us/req @%d" % args.small]
    rows = []
    for proxy in proxies:
        s = summary[proxy]
        rows.append([proxy, bl.fmt(s["bytes_per_parked"], "%.0f"), bl.fmt(s["rate_big"], "%.0f"),
                     bl.fmt(s["rate_small"], "%.0f"), bl.fmt(None if s["kept"] is None else s["kept"] * 100, "%.0f %%"),
                     bl.fmt(s["cpu_us_big"], "%.1f"), bl.fmt(s["cpu_us_small"], "%.1f")])
    bl.print_table(header, rows)
    if "vramd" in summary and summary["vramd"]["kept"] is not None:
        s = summary["vramd"]
        verdict = ("vramd: %.0f B per parked request (target <= 4096: %s); keeps %.0f %% of its dispatch rate "
                   "with %d queued vs %d (target >= 90 %%: %s)"
                   % (s["bytes_per_parked"], "met" if s["bytes_per_parked"] <= 4096 else "NOT met",
                      s["kept"] * 100, args.big, args.small, "met" if s["kept"] >= 0.9 else "NOT met"))
        result["verdict"] = verdict
        print(verdict)
    elif not args.no_vramd:
        print("vramd: not measured (%s)" % result.get("vramd_error"))
    path = bl.write_results("parked", result)
    print("results: %s" % os.path.relpath(path, bl.REPO))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    try:
        main()
    except bl.BenchError as e:
        print("parked: %s" % e, file=sys.stderr)
        sys.exit(1)
