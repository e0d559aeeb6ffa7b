#!/usr/bin/python3
"""jobs: what a durable job costs against the same request sent synchronously through vramd.

A job (docs/jobs.md) is journaled in SQLite (WAL, synchronous=FULL: one fsync per commit)
before its 202, marked running and then succeeded (two more commits), sent to the worker
through vramd's own front door over a loopback HTTP connection, and its answer is written
to a result file (fsync, rename, fsync of the directory). This benchmark measures what that
adds, in one run, against a synchronous request through the same vramd to the same worker.

Setup (127.0.0.1 only, every process stopped at the end, also on Ctrl-C / SIGTERM):
  worker  bench/jobs/worker.py, one asyncio process, external model (url:) of vramd;
          `ANY /work/<ms>` answers a 30-byte JSON after <ms> ms (variants: 0 and 50 ms)
  vramd   the binary of --build (copied to a private temp file for the run), log level warn,
          one model `bench` (route /b/, concurrency C = --concurrency, default 4),
          state_dir on the real disk (--state-parent, default /var/tmp; a tmpfs or ramfs
          is refused unless --allow-tmpfs: fsync is the cost being measured)
Per round and variant (the order of variants, and of sync/job within a pair, alternates):
  latency     N pairs (--n, default 100), c=1: one synchronous POST /b/work/<ms>, one job
              {"model": "bench", "path": "/work/<ms>", "body": {...}} submitted and polled
              (GET /v1/jobs/{id} every --poll-ms, default 1) until succeeded, then its
              result fetched (and checked). Per job: the 202's latency, the server's
              created_at -> finished_at, send -> succeeded seen, send -> result in hand.
  throughput  M (--m, default 500) synchronous requests over C keep-alive connections
              (closed loop, c = the model's concurrency) -> req/s; M jobs submitted at once
              over C connections, then waited for -> jobs/s = M / (last finished_at - first
              submit sent) (server clock = client clock: same host, CLOCK_REALTIME); also
              vramd's CPU time (utime+stime) per request / per job.
Rounds: --rounds (default 5); medians over rounds of each round's median/p90; ratios
(job / sync) and differences are taken within a round, then the median over rounds.
Also measured once, on the same filesystem, outside vramd: a 4 KiB write+fsync, one SQLite
commit (WAL, synchronous=FULL, Python's sqlite3 on the same libsqlite3), and a result-style
file commit (write, fsync, rename, directory fsync): what the job path is made of.
Shared machine: before each phase the script waits (at most --quiet-wait s) until other
processes use at most 15 % of a core (benchlib.wait_quiet); a phase during which they used
more is run again (at most 3 attempts, the last kept and flagged); shares are in the JSON.

Builds nothing: run `make BUILD=DIR` first. Usage:
  /usr/bin/python3 bench/jobs/run.py [--build DIR] [--rounds 5] [--n 100] [--m 500]
                                     [--variants 0,50] [--concurrency 4] [--quick]
Prints tables (plain and Markdown); writes bench/results/jobs-<stamp>.json and
jobs-latest.json (a --quick run: jobs-quick-<stamp>.json only; a run with --allow-tmpfs on a
tmpfs: jobs-tmpfs-<stamp>.json and jobs-tmpfs-latest.json, the same path without fsync cost).
"""

import argparse
import calendar
import http.client
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import benchlib as bl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
PYTHON = "/usr/bin/python3"
MODEL = "bench"
ROUTE = "/b/"
MAX_FOREIGN = 0.15
MAX_ATTEMPTS = 3
JOB_TIMEOUT_S = 120.0
TMPFS_TYPES = ("tmpfs", "ramfs")


# ---- small helpers ---------------------------------------------------------------------

def pct(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(q / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def med(values):
    return bl.median([x for x in values if x is not None])


def rfc3339_ms(text):
    """'2026-11-22T09:42:16.123Z' -> unix milliseconds (vramd writes UTC with ms)."""
    if text is None:
        return None
    date, _, frac = text.rstrip("Z").partition(".")
    secs = calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%S"))
    return secs * 1000 + int((frac or "0")[:3].ljust(3, "0"))


def cpu_ns(pid):
    """Nanoseconds a process's threads (vramd's loop and its libuv thread pool) have run on a
    CPU, summed over /proc/PID/task/*/schedstat (exact, unlike the 10 ms ticks of /proc/PID/stat)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def cpu_split(pid):
    """(user s, system s) of a whole process, from /proc/PID/stat (10 ms ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / bl.CLK_TCK, int(fields[12]) / bl.CLK_TCK


def cpu_sample(pid):
    return (cpu_ns(pid),) + cpu_split(pid)


def cpu_each(pid, before, count):
    """vramd's CPU per item since `before` (cpu_sample): us in all, us user, us system."""
    after = cpu_sample(pid)
    return {"vramd_cpu_us_each": (after[0] - before[0]) / 1e3 / count,
            "vramd_user_us_each": (after[1] - before[1]) * 1e6 / count,
            "vramd_sys_us_each": (after[2] - before[2]) * 1e6 / count}


def compact(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def expected_answer(ms, body):
    return {"work_ms": ms, "body_bytes": len(body)}


def mount_of(path):
    """(mount point, fstype, source, options) of the filesystem holding path (/proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            mnt = lf[4].encode().decode("unicode_escape")
            if path == mnt or path.startswith(mnt.rstrip("/") + "/") or mnt == "/":
                if best is None or len(mnt) >= len(best[0]):
                    best = (mnt, rf[0], rf[1] if len(rf) > 1 else "", lf[5] + "," + (rf[2] if len(rf) > 2 else ""))
    return best


class Client:
    """One keep-alive HTTP/1.1 connection to vramd. No retries: a failure is a failure."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method, path, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return r.status, r.read()

    def close(self):
        self.conn.close()


# ---- the filesystem alone --------------------------------------------------------------

def fs_probe(parent, n):
    """Medians/p90 (ms) of: 4 KiB pwrite+fsync; one SQLite commit (WAL, synchronous=FULL,
    a row like a job's); a result-style commit (create, write, fsync, rename, dir fsync)."""
    d = tempfile.mkdtemp(prefix="vramd-bench-jobs-probe-", dir=parent)
    try:
        out = {}
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT, 0o600)
        lat = []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            os.fsync(fd)
            lat.append((time.perf_counter() - t) * 1e3)
        os.close(fd)
        out["write4k_fsync_ms"] = {"p50": med(lat), "p90": pct(lat, 90)}

        db = sqlite3.connect(os.path.join(d, "probe.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, state TEXT, created_ms INTEGER, body BLOB)")
        lat = []
        warm = 600  # past the first auto-checkpoint: the WAL is then rewritten in place, as in a running vramd
        for i in range(warm + n):
            t = time.perf_counter()
            db.execute("INSERT INTO jobs VALUES (?, 'queued', ?, ?)", ("%032x" % i, i, b"{\"i\":1}" * 8))
            if i >= warm:
                lat.append((time.perf_counter() - t) * 1e3)
        db.close()
        out["sqlite_commit_ms"] = {"p50": med(lat), "p90": pct(lat, 90)}

        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        lat = []
        for i in range(n):
            t = time.perf_counter()
            tmp, final = os.path.join(d, ".r%d.tmp" % i), os.path.join(d, "r%d" % i)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b'{"work_ms":0,"body_bytes":7}')
            os.fsync(fd)
            os.close(fd)
            os.rename(tmp, final)
            os.fsync(dfd)
            lat.append((time.perf_counter() - t) * 1e3)
        os.close(dfd)
        out["result_commit_ms"] = {"p50": med(lat), "p90": pct(lat, 90)}
        out["samples"] = n
        out["sqlite_version"] = sqlite3.sqlite_version
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- processes -------------------------------------------------------------------------

def start_worker(procs, port):
    p = procs.start("worker", [PYTHON, WORKER, "--port", str(port)])
    try:
        bl.wait_port(port, proc=p)
    except bl.BenchError as e:
        raise bl.BenchError("%s\n%s" % (e, procs.log_tail("worker")))
    return p


def start_vramd(procs, port, worker_port, state_dir, concurrency):
    d = os.path.join(procs.dir, "vramd")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "vramd.yaml")
    with open(conf, "w") as f:
        f.write("""listen: 127.0.0.1:%d
state_dir: %s
log: { format: json, level: warn }
limits: { max_connections: 1024, queue_max: 4096, header_timeout: 30s }
jobs: { max_active: 64, max_attempts: 3 }
models:
  %s:
    route: %s
    url: http://127.0.0.1:%d
    health: { path: /health, interval: 5s, timeout: 2s, failures: 3 }
    concurrency: %d
    queue_max: 4096
    deadline: 10m
""" % (port, state_dir, MODEL, ROUTE, worker_port, concurrency))
    p = procs.start("vramd", [bl.vramd_binary(), "--config", conf])
    try:
        bl.wait_port(port, proc=p)
    except bl.BenchError as e:
        raise bl.BenchError("%s; vramd log tail:\n%s" % (e, procs.log_tail("vramd")))
    deadline = time.monotonic() + 30
    last = None
    while time.monotonic() < deadline:
        c = Client(port)
        try:
            last = c.request("POST", ROUTE + "work/0", compact({"i": 0}), {"Content-Type": "application/json"})
            if last[0] == 200 and json.loads(last[1]) == expected_answer(0, compact({"i": 0})):
                return p
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = repr(e)
        finally:
            c.close()
        time.sleep(0.2)
    raise bl.BenchError("vramd does not proxy to the worker (last answer: %r); log tail:\n%s"
                        % (last, procs.log_tail("vramd")))


# ---- one synchronous request, one job --------------------------------------------------

def sync_one(client, ms, i):
    body = compact({"i": i})
    t0 = time.perf_counter()
    status, data = client.request("POST", "%swork/%d" % (ROUTE, ms), body, {"Content-Type": "application/json"})
    t1 = time.perf_counter()
    if status != 200 or json.loads(data) != expected_answer(ms, body):
        raise bl.BenchError("sync request %d answered %d %r" % (i, status, data[:200]))
    return (t1 - t0) * 1e3


def submit(client, ms, i):
    doc = compact({"model": MODEL, "path": "/work/%d" % ms, "body": {"i": i}})
    status, data = client.request("POST", "/v1/jobs", doc, {"Content-Type": "application/json"})
    if status != 202:
        raise bl.BenchError("job submit %d answered %d %r" % (i, status, data[:300]))
    return json.loads(data)["id"]


def job_one(client, ms, i, poll_s):
    """Submits a job, polls it until succeeded, fetches and checks its result. Returns times (ms)."""
    t0_wall = time.time()
    t0 = time.perf_counter()
    jid = submit(client, ms, i)
    t1 = time.perf_counter()
    polls = 0
    while True:
        status, data = client.request("GET", "/v1/jobs/" + jid)
        polls += 1
        rec = json.loads(data)
        if status != 200:
            raise bl.BenchError("GET job %s answered %d %r" % (jid, status, data[:300]))
        if rec["state"] == "succeeded":
            break
        if rec["state"] in ("failed", "cancelled"):
            raise bl.BenchError("job %s ended %s: %r" % (jid, rec["state"], rec.get("error")))
        if time.perf_counter() - t0 > JOB_TIMEOUT_S:
            raise bl.BenchError("job %s not done after %.0f s: %r" % (jid, JOB_TIMEOUT_S, rec))
        time.sleep(poll_s)
    t2 = time.perf_counter()
    status, data = client.request("GET", "/v1/jobs/%s/result" % jid)
    t3 = time.perf_counter()
    if status != 200 or json.loads(data) != expected_answer(ms, compact({"i": i})):
        raise bl.BenchError("result of job %s: %d %r" % (jid, status, data[:200]))
    created, started, finished = (rfc3339_ms(rec[k]) for k in ("created_at", "started_at", "finished_at"))
    return {
        "submit_ms": (t1 - t0) * 1e3,                 # the durable 202
        "server_ms": finished - created,              # created_at -> finished_at (server clock, 1 ms steps)
        "to_start_ms": started - created,             # created_at -> started_at (handed to the worker)
        "start_to_finish_ms": finished - started,
        "done_ms": finished - t0_wall * 1e3,          # send -> finished_at (same host clock)
        "seen_ms": (t2 - t0) * 1e3,                   # send -> a poll saw `succeeded`
        "total_ms": (t3 - t0) * 1e3,                  # send -> result in hand
        "polls": polls,
        "attempts": rec["attempts"],
    }


def latency_phase(port, ms, n, poll_s):
    sc, jc = Client(port), Client(port)
    sync, jobs = [], []
    try:
        for i in range(n):
            if i % 2 == 0:
                sync.append(sync_one(sc, ms, i))
                jobs.append(job_one(jc, ms, i, poll_s))
            else:
                jobs.append(job_one(jc, ms, i, poll_s))
                sync.append(sync_one(sc, ms, i))
    finally:
        sc.close()
        jc.close()
    out = {"n": n, "sync_p50_ms": med(sync), "sync_p90_ms": pct(sync, 90)}
    for k in ("submit_ms", "server_ms", "to_start_ms", "start_to_finish_ms", "done_ms", "seen_ms", "total_ms"):
        vals = [j[k] for j in jobs]
        out["job_%s_p50" % k[:-3]] = med(vals)
        out["job_%s_p90" % k[:-3]] = pct(vals, 90)
    out["job_polls_p50"] = med([j["polls"] for j in jobs])
    out["job_retried"] = sum(1 for j in jobs if j["attempts"] != 1)
    return out


# ---- throughput ------------------------------------------------------------------------

def run_threads(port, conc, total, fn):
    """Runs fn(client, i) for i in 0..total-1 over `conc` threads, each with its own
    keep-alive connection, taking the next i as soon as it is free. Returns the results by i."""
    lock = threading.Lock()
    nxt = [0]
    results = [None] * total
    errors = []

    def loop():
        c = Client(port)
        try:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= total or errors:
                    return
                results[i] = fn(c, i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=loop) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise bl.BenchError("a client thread failed: %r" % errors[0])
    return results


def list_ids(client, state, limit):
    status, data = client.request("GET", "/v1/jobs?state=%s&limit=%d" % (state, limit))
    if status != 200:
        raise bl.BenchError("GET /v1/jobs?state=%s answered %d %r" % (state, status, data[:300]))
    return json.loads(data)["jobs"]


def sync_throughput(port, ms, m, conc, vramd_pid):
    cpu0 = cpu_sample(vramd_pid)
    t0 = time.perf_counter()
    lat = run_threads(port, conc, m, lambda c, i: sync_one(c, ms, i))
    elapsed = time.perf_counter() - t0
    r = {"count": m, "elapsed_s": elapsed, "per_s": m / elapsed, "p50_ms": med(lat), "p90_ms": pct(lat, 90)}
    r.update(cpu_each(vramd_pid, cpu0, m))
    return r


def job_throughput(port, ms, m, conc, vramd_pid):
    cpu0 = cpu_sample(vramd_pid)
    t0_wall = time.time()
    t0 = time.perf_counter()
    ids = run_threads(port, conc, m, lambda c, i: submit(c, ms, i))
    t_submitted = time.perf_counter()
    mine = set(ids)
    c = Client(port)
    try:
        while True:
            if not list_ids(c, "queued", 1) and not list_ids(c, "running", 1):
                done = {j["id"]: j for j in list_ids(c, "succeeded", 1000) if j["id"] in mine}
                if len(done) == m:
                    break
                failed = [j for j in list_ids(c, "failed", 1000) if j["id"] in mine]
                if failed:
                    raise bl.BenchError("%d job(s) failed, e.g. %r" % (len(failed), failed[0]))
            if time.perf_counter() - t0 > JOB_TIMEOUT_S * 5:
                raise bl.BenchError("%d jobs not all done after %.0f s" % (m, JOB_TIMEOUT_S * 5))
            time.sleep(0.02)
        t_seen = time.perf_counter()
    finally:
        c.close()
    cpu = cpu_each(vramd_pid, cpu0, m)
    last_finished = max(rfc3339_ms(j["finished_at"]) for j in done.values())
    first_created = min(rfc3339_ms(j["created_at"]) for j in done.values())
    elapsed = (last_finished - t0_wall * 1e3) / 1e3
    r = {"count": m, "elapsed_s": elapsed, "per_s": m / elapsed,
         "submit_s": t_submitted - t0, "submit_per_s": m / (t_submitted - t0),
         "seen_s": t_seen - t0, "server_span_s": (last_finished - first_created) / 1e3,
         "retried": sum(1 for j in done.values() if j["attempts"] != 1)}
    r.update(cpu)
    return r


# ---- rounds ----------------------------------------------------------------------------

def guarded(label, pids, quiet_wait, fn):
    """Runs fn() when the machine is quiet; again (at most MAX_ATTEMPTS) when others used
    more than MAX_FOREIGN of a core meanwhile. Returns fn's dict with the load facts added."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        waited = bl.wait_quiet(pids, MAX_FOREIGN, max_wait=quiet_wait)
        with bl.ForeignLoad(pids) as fl:
            r = fn()
        if fl.foreign_core_frac <= MAX_FOREIGN or attempt == MAX_ATTEMPTS:
            break
        print("  %s: other processes used %.0f %% of a core: run again" % (label, fl.foreign_core_frac * 100),
              flush=True)
    r.update({"foreign_core_frac": fl.foreign_core_frac, "steal_s": fl.steal_s, "attempts": attempt,
              "waited_for_quiet_s": waited, "flagged": fl.foreign_core_frac > MAX_FOREIGN})
    return r


def summarize(rounds, variants):
    s = {}
    for ms in variants:
        lat = [r["latency"][str(ms)] for r in rounds]
        thr = [r["throughput"][str(ms)] for r in rounds]
        v = {"rounds": len(lat)}
        for k in lat[0]:
            if k.endswith(("_p50", "_p90", "_ms")) or k.startswith("sync_") or k.startswith("job_"):
                if isinstance(lat[0][k], (int, float)) and not isinstance(lat[0][k], bool):
                    v[k] = med([x[k] for x in lat])
        v["added_seen_p50_ms"] = med([x["job_seen_p50"] - x["sync_p50_ms"] for x in lat])
        v["added_done_p50_ms"] = med([x["job_done_p50"] - x["sync_p50_ms"] for x in lat])
        v["added_total_p50_ms"] = med([x["job_total_p50"] - x["sync_p50_ms"] for x in lat])
        v["ratio_seen_p50"] = med([x["job_seen_p50"] / x["sync_p50_ms"] for x in lat])
        v["ratio_total_p50"] = med([x["job_total_p50"] / x["sync_p50_ms"] for x in lat])
        v["sync_per_s"] = med([x["sync"]["per_s"] for x in thr])
        v["jobs_per_s"] = med([x["jobs"]["per_s"] for x in thr])
        v["ratio_throughput"] = med([x["jobs"]["per_s"] / x["sync"]["per_s"] for x in thr])
        v["jobs_submit_per_s"] = med([x["jobs"]["submit_per_s"] for x in thr])
        v["sync_cpu_us_each"] = med([x["sync"]["vramd_cpu_us_each"] for x in thr])
        v["jobs_cpu_us_each"] = med([x["jobs"]["vramd_cpu_us_each"] for x in thr])
        for kind in ("sync", "jobs"):
            for part in ("user", "sys"):
                v["%s_%s_us_each" % (kind, part)] = med([x[kind]["vramd_%s_us_each" % part] for x in thr])
        v["ratio_cpu"] = med([x["jobs"]["vramd_cpu_us_each"] / x["sync"]["vramd_cpu_us_each"] for x in thr])
        v["sync_thr_p50_ms"] = med([x["sync"]["p50_ms"] for x in thr])
        v["flagged_phases"] = sum(1 for x in lat if x["flagged"]) + sum(
            1 for x in thr for y in (x["sync"], x["jobs"]) if y["flagged"])
        s[str(ms)] = v
    return s


def tables(result, markdown):
    s, conc = result["summary"], result["concurrency"]
    h1 = ["worker", "sync p50", "sync p90", "202 p50", "202 p90", "created->finished p50", "send->finished p50",
          "send->seen p50", "send->seen p90", "+result p50", "added p50 (finished..seen)", "x sync (seen)"]
    h2 = ["worker", "sync req/s (c=%d)" % conc, "jobs/s", "x sync", "submits/s", "vramd CPU us/req (user/sys)",
          "vramd CPU us/job (user/sys)", "CPU x sync"]
    r1, r2 = [], []
    for ms in result["variants"]:
        v = s[str(ms)]
        f = bl.fmt
        r1.append(["%d ms" % ms, f(v["sync_p50_ms"], "%.2f"), f(v["sync_p90_ms"], "%.2f"),
                   f(v["job_submit_p50"], "%.2f"), f(v["job_submit_p90"], "%.2f"), f(v["job_server_p50"], "%.1f"),
                   f(v["job_done_p50"], "%.2f"), f(v["job_seen_p50"], "%.2f"), f(v["job_seen_p90"], "%.2f"),
                   f(v["job_total_p50"], "%.2f"),
                   "%s..%s" % (f(v["added_done_p50_ms"], "%+.2f"), f(v["added_seen_p50_ms"], "%+.2f")),
                   f(v["ratio_seen_p50"], "%.2f")])
        r2.append(["%d ms" % ms, f(v["sync_per_s"], "%.0f"), f(v["jobs_per_s"], "%.0f"),
                   f(v["ratio_throughput"], "%.2f"), f(v["jobs_submit_per_s"], "%.0f"),
                   "%s (%s/%s)" % (f(v["sync_cpu_us_each"], "%.0f"), f(v["sync_user_us_each"], "%.0f"),
                                   f(v["sync_sys_us_each"], "%.0f")),
                   "%s (%s/%s)" % (f(v["jobs_cpu_us_each"], "%.0f"), f(v["jobs_user_us_each"], "%.0f"),
                                   f(v["jobs_sys_us_each"], "%.0f")),
                   f(v["ratio_cpu"], "%.1f")])
    if not markdown:
        print("latency, c=1, ms (medians over rounds of per-round p50/p90; created->finished: server clock, 1 ms steps):")
        bl.print_table(h1, r1)
        print()
        print("throughput, %d at once:" % result["m"])
        bl.print_table(h2, r2)
        return
    for h, rows in ((h1, r1), (h2, r2)):
        print("| " + " | ".join(h) + " |")
        print("|" + "---|" * len(h))
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")
        print()


def env_line(result):
    e, fs, b = result["environment"], result["filesystem"], result["environment"].get("vramd_binary") or {}
    return ("%s; %s, %d CPUs (%s), kernel %s; state_dir on %s (%s, mounted at %s); SQLite %s; "
            "vramd %s (binary built %s, sha256 %s...)"
            % (e["date_utc"], e["cpu_model"], e["nproc"], e.get("virtualization") or "?", e["kernel"],
               fs["fstype"], fs["source"], fs["mount_point"], result["fs_probe"]["sqlite_version"],
               e.get("vramd") or "?", b.get("mtime", "-"), (b.get("sha256") or "-")[:12]))


def print_report(result):
    flagged = sum(v["flagged_phases"] for v in result["summary"].values())
    print("jobs, %d round(s): latency n=%d pairs, throughput m=%d; %s; phases flagged for other load: %d"
          % (result["rounds"], result["n"], result["m"], env_line(result), flagged))
    p = result["fs_probe"]
    print("filesystem alone (p50/p90 ms): 4 KiB write+fsync %.2f/%.2f; SQLite commit %.2f/%.2f; "
          "result commit %.2f/%.2f" % (p["write4k_fsync_ms"]["p50"], p["write4k_fsync_ms"]["p90"],
                                       p["sqlite_commit_ms"]["p50"], p["sqlite_commit_ms"]["p90"],
                                       p["result_commit_ms"]["p50"], p["result_commit_ms"]["p90"]))
    tables(result, markdown=False)
    print()
    tables(result, markdown=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory holding bin/vramd (default build)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--n", type=int, default=None, help="latency pairs per round and variant (default 100)")
    ap.add_argument("--m", type=int, default=None, help="requests / jobs at once in the throughput phase (default 500)")
    ap.add_argument("--variants", default="0,50", help="worker times in ms (default 0,50)")
    ap.add_argument("--concurrency", type=int, default=4, help="the model's concurrency = sync clients (default 4)")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="poll interval of a job in the latency phase")
    ap.add_argument("--state-parent", default="/var/tmp", help="where state_dir is created (real disk)")
    ap.add_argument("--allow-tmpfs", action="store_true")
    ap.add_argument("--quiet-wait", type=float, default=300.0, help="max seconds to wait for a quiet machine per phase")
    ap.add_argument("--quick", action="store_true", help="1 round, n=20, m=100: a smoke run, not a result")
    ap.add_argument("--report", metavar="JSON", help="print the tables of an earlier run's JSON and exit")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            result = json.load(f)
        print_report(result)
        return
    rounds = args.rounds or (1 if args.quick else 5)
    n = args.n or (20 if args.quick else 100)
    m = args.m or (100 if args.quick else 500)
    variants = [int(x) for x in args.variants.split(",")]

    build = args.build if os.path.isabs(args.build) else os.path.join(bl.REPO, args.build)
    if "VRAMD_BIN" not in os.environ:
        os.environ["VRAMD_BIN"] = os.path.join(build, "bin", "vramd")
    binary = bl.snapshot_vramd()
    if binary is None:
        raise bl.BenchError("no vramd binary at %s (build it first: make BUILD=%s)" % (bl.vramd_binary(), args.build))

    mnt = mount_of(args.state_parent)
    fs = {"path": os.path.realpath(args.state_parent), "mount_point": mnt[0], "fstype": mnt[1], "source": mnt[2],
          "options": mnt[3]}
    if fs["fstype"] in TMPFS_TYPES and not args.allow_tmpfs:
        raise bl.BenchError("%s is on %s: fsync costs nothing there; pick a disk with --state-parent "
                            "(or --allow-tmpfs)" % (args.state_parent, fs["fstype"]))
    env = bl.environment()
    for k in ("nginx", "haproxy", "wrk"):
        env.pop(k, None)
    env["vramd_binary"] = binary
    env["python"] = platform.python_version()
    result = {"benchmark": "jobs", "quick": args.quick, "rounds": rounds, "n": n, "m": m, "variants": variants,
              "concurrency": args.concurrency, "poll_ms": args.poll_ms, "environment": env, "filesystem": fs,
              "argv": sys.argv[1:], "max_foreign": MAX_FOREIGN, "rounds_data": []}
    print("state_dir under %s: %s on %s (%s)" % (fs["path"], fs["fstype"], fs["source"], fs["options"]), flush=True)
    result["fs_probe"] = fs_probe(args.state_parent, 50 if args.quick else 200)
    p = result["fs_probe"]
    print("filesystem alone: 4 KiB write+fsync p50 %.2f ms; SQLite commit (WAL, FULL) p50 %.2f ms; "
          "result commit (write, fsync, rename, dir fsync) p50 %.2f ms"
          % (p["write4k_fsync_ms"]["p50"], p["sqlite_commit_ms"]["p50"], p["result_commit_ms"]["p50"]), flush=True)

    state_dir = tempfile.mkdtemp(prefix="vramd-bench-jobs-", dir=args.state_parent)
    try:
        with bl.Procs() as procs:
            wport, vport = bl.free_port(), bl.free_port()
            worker = start_worker(procs, wport)
            vramd = start_vramd(procs, vport, wport, state_dir, args.concurrency)
            pids = [worker.pid, vramd.pid]
            # warm-up: connections, SQLite pages, the result directory, run-time learning
            for ms in variants:
                latency_phase(vport, ms, 10, args.poll_ms / 1e3)
                sync_throughput(vport, ms, 50, args.concurrency, vramd.pid)
                job_throughput(vport, ms, 50, args.concurrency, vramd.pid)
            for rnd in range(rounds):
                rd = {"round": rnd, "latency": {}, "throughput": {}}
                order = variants if rnd % 2 == 0 else list(reversed(variants))
                for ms in order:
                    lab = "round %d, %d ms" % (rnd + 1, ms)
                    lat = guarded(lab + " latency", pids, args.quiet_wait,
                                  lambda: latency_phase(vport, ms, n, args.poll_ms / 1e3))
                    rd["latency"][str(ms)] = lat
                    print("%s: sync p50 %.2f ms | job 202 p50 %.2f, server %.0f, seen %.2f, +result %.2f ms | others %.0f %%"
                          % (lab, lat["sync_p50_ms"], lat["job_submit_p50"], lat["job_server_p50"],
                             lat["job_seen_p50"], lat["job_total_p50"], lat["foreign_core_frac"] * 100), flush=True)
                    thr = {}
                    kinds = ("sync", "jobs") if rnd % 2 == 0 else ("jobs", "sync")
                    for kind in kinds:
                        fn = sync_throughput if kind == "sync" else job_throughput
                        thr[kind] = guarded("%s %s throughput" % (lab, kind), pids, args.quiet_wait,
                                            lambda: fn(vport, ms, m, args.concurrency, vramd.pid))
                    rd["throughput"][str(ms)] = thr
                    print("%s: %d sync at c=%d %.0f req/s (CPU %.0f us/req) | %d jobs %.0f jobs/s (CPU %.0f us/job, "
                          "submits %.0f/s) | others %.0f/%.0f %%"
                          % (lab, m, args.concurrency, thr["sync"]["per_s"], thr["sync"]["vramd_cpu_us_each"], m,
                             thr["jobs"]["per_s"], thr["jobs"]["vramd_cpu_us_each"], thr["jobs"]["submit_per_s"],
                             thr["sync"]["foreign_core_frac"] * 100, thr["jobs"]["foreign_core_frac"] * 100),
                          flush=True)
                    for proc in procs.procs:
                        if proc.poll() is not None:
                            raise bl.BenchError("%s exited (rc %s):\n%s" % (
                                proc.bench_name, proc.returncode, procs.log_tail(proc.bench_name)))
                result["rounds_data"].append(rd)
            db = os.path.join(state_dir, "jobs.db")
            result["journal_bytes_at_end"] = sum(os.path.getsize(db + x) for x in ("", "-wal") if os.path.exists(db + x))
            result["vramd_warn_log_tail"] = procs.log_tail("vramd", 10)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)

    result["summary"] = summarize(result["rounds_data"], variants)
    print()
    print_report(result)
    # a run on tmpfs (--allow-tmpfs: what the job path costs without fsync) never becomes jobs-latest
    path = bl.write_results("jobs-tmpfs" if fs["fstype"] in TMPFS_TYPES else "jobs", result)
    print("results: %s" % os.path.relpath(path, bl.REPO))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    try:
        main()
    except bl.BenchError as e:
        print("jobs: %s" % e, file=sys.stderr)
        sys.exit(1)
