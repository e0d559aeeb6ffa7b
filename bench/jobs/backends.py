#!/usr/bin/python3
"""backends: durable jobs on one host with jobs.backend sqlite against postgres.

Same vramd binary, same worker, same host; only the job store differs (docs/fleet-jobs.md):
  sqlite    state_dir/jobs.db (WAL, synchronous=FULL), results as local files
  postgres  a PostgreSQL 15 cluster this script starts (tests/lib/vramdkit/pg.py: initdb as
            the postgres user in a temp dir under --pg-parent, default /var/tmp, 127.0.0.1);
            started DURABLE (fsync on, full_page_writes on, synchronous_commit on), so a
            commit costs an fsync as in SQLite; results as bytea in the database

Setup: bench/jobs/worker.py (external model `bench`, route /b/, concurrency 4), answering
`/work/0` at once; vramd log level warn. Per backend and round:
  latency     N jobs one after the other (c=1): submit, poll GET /v1/jobs/{id} every 1 ms
              until succeeded. Per job: the 202's latency (client clock); pickup =
              created_at -> started_at (server clock, ms steps): from the commit of the
              submit to the request reaching the worker, i.e. the idle host's claim (its
              pump after the 202; PostgreSQL: the claim query and its lease) plus the loopback
              hop (the same for both); send -> succeeded seen (client).
  throughput  M jobs submitted at once over 4 connections, then waited for: jobs/s =
              M / (last finished_at - first submit sent); submits/s = M / time to all 202s.
Medians over --rounds (default 3) of each round's p50/p90.

Usage: make -j2 && /usr/bin/python3 bench/jobs/backends.py [--rounds 3] [--n 100] [--m 500]
       [--quick]. Writes bench/results/jobs-backends-<stamp>.json (and -latest).
"""
import argparse
import calendar
import http.client
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "lib"))
import benchlib as bl  # noqa: E402
from vramdkit import pg as pgkit  # noqa: E402
from vramdkit.net import free_port  # noqa: E402

WORKER = os.path.join(HERE, "worker.py")
PYTHON = "/usr/bin/python3"


def pct(values, q):
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(q / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def wall_ms(text):
    """RFC 3339 UTC with milliseconds -> unix ms."""
    if not text:
        return None
    secs = calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    return secs * 1000 + int(text[20:23])


class Client:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                       headers=headers)
        r = self.c.getresponse()
        data = r.read()
        return r.status, data

    def close(self):
        self.c.close()


def submit(cl, i):
    st, data = cl.call("POST", "/v1/jobs", {"model": "bench", "path": "/work/0", "body": {"i": i}})
    if st != 202:
        raise bl.BenchError("submit answered %d: %r" % (st, data[:200]))
    return json.loads(data)["id"]


def wait_done(cl, jid, poll=0.001, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st, data = cl.call("GET", "/v1/jobs/" + jid)
        if st == 200:
            j = json.loads(data)
            if j["state"] == "succeeded":
                return j
            if j["state"] in ("failed", "cancelled"):
                raise bl.BenchError("job %s ended %s: %r" % (jid, j["state"], j.get("error")))
        time.sleep(poll)
    raise bl.BenchError("job %s did not end in %.0f s" % (jid, timeout))


def latency(port, n):
    cl = Client(port)
    ack, pickup, seen = [], [], []
    try:
        for i in range(n):
            m0 = time.monotonic()
            jid = submit(cl, i)
            ack.append((time.monotonic() - m0) * 1000)
            j = wait_done(cl, jid)
            seen.append((time.monotonic() - m0) * 1000)
            pickup.append(wall_ms(j["started_at"]) - wall_ms(j["created_at"]))
    finally:
        cl.close()
    return {"ack_p50": pct(ack, 50), "ack_p90": pct(ack, 90), "pickup_p50": pct(pickup, 50),
            "pickup_p90": pct(pickup, 90), "seen_p50": pct(seen, 50), "seen_p90": pct(seen, 90)}


def throughput(port, m, conns=4):
    ids, lock, errors = [], threading.Lock(), []
    t_first = time.time()

    def run(k):
        cl = Client(port)
        try:
            for i in range(k, m, conns):
                jid = submit(cl, i)
                with lock:
                    ids.append(jid)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            cl.close()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
    m0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submit_s = time.monotonic() - m0
    if errors:
        raise errors[0]
    cl = Client(port)
    last = 0
    try:
        for jid in ids:
            j = wait_done(cl, jid, poll=0.01)
            last = max(last, wall_ms(j["finished_at"]))
    finally:
        cl.close()
    return {"jobs_per_s": m / ((last - t_first * 1000) / 1000.0), "submits_per_s": m / submit_s}


def start_backend(procs, backend, wport, pg=None):
    port = free_port()
    d = tempfile.mkdtemp(prefix="vramd-" + backend + "-", dir=procs.dir)
    jobs = {"max_active": 64}
    if backend == "postgres":
        jobs.update({"backend": "postgres", "postgres": {"url": pg.url, "host_id": "bench"}})
    cfg = {"listen": "127.0.0.1:%d" % port, "state_dir": d + "/var", "log": {"format": "json", "level": "warn"},
           "limits": {"max_connections": 1000, "queue_max": 4096, "header_timeout": "10s"}, "jobs": jobs,
           "models": {"bench": {"route": "/b/", "url": "http://127.0.0.1:%d" % wport,
                                "health": {"path": "/health", "interval": "5s", "timeout": "2s", "failures": 3},
                                "concurrency": 4, "queue_max": 4096, "deadline": "10m"}}}
    conf = os.path.join(d, "vramd.yaml")
    with open(conf, "w") as f:
        json.dump(cfg, f)  # JSON is YAML
    p = procs.start("vramd-" + backend, [bl.vramd_binary(), "--config", conf])
    bl.wait_port(port, proc=p)
    end = time.monotonic() + 20
    while time.monotonic() < end:  # the store answers (PostgreSQL: connected, schema set up)
        st, _ = bl.http_get(port, "/v1/jobs/" + "0" * 32)
        if st == 404:
            return p, port
        time.sleep(0.1)
    raise bl.BenchError("the job store of %s did not come up:\n%s" % (backend, procs.log_tail("vramd-" + backend)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--m", type=int, default=500)
    ap.add_argument("--pg-parent", default="/var/tmp")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.n, a.m = 1, 20, 100
    if not pgkit.available():
        sys.exit("PostgreSQL 15 binaries not installed")
    tempfile.tempdir = a.pg_parent
    out = {"quick": a.quick, "n": a.n, "m": a.m, "rounds": a.rounds, "environment": bl.environment(),
           "runs": {"sqlite": [], "postgres": []}}
    pg = pgkit.PgCluster(durable=True)
    try:
        pg.start()
        with bl.Procs() as procs:
            wport = free_port()
            procs.start("worker", [PYTHON, WORKER, "--port", str(wport)])
            bl.wait_port(wport)
            for rnd in range(a.rounds):
                order = ("sqlite", "postgres") if rnd % 2 == 0 else ("postgres", "sqlite")
                for backend in order:
                    p, port = start_backend(procs, backend, wport, pg)
                    lat = latency(port, a.n)
                    thr = throughput(port, a.m)
                    procs.stop(p)
                    r = dict(lat, **thr)
                    out["runs"][backend].append(r)
                    print("round %d %-8s 202 p50 %.2f ms  pickup p50 %d ms p90 %d ms  seen p50 %.2f ms  "
                          "%.0f jobs/s  %.0f submits/s" % (rnd + 1, backend, r["ack_p50"], r["pickup_p50"],
                                                          r["pickup_p90"], r["seen_p50"], r["jobs_per_s"],
                                                          r["submits_per_s"]), flush=True)
                    if backend == "postgres":
                        pg.sql("TRUNCATE vramd_jobs CASCADE")
    finally:
        pg.cleanup()
    summary = {}
    for backend, runs in out["runs"].items():
        summary[backend] = {k: bl.median([r[k] for r in runs]) for k in runs[0]}
    out["summary"] = summary
    print("\n| backend | 202 p50 ms | 202 p90 ms | pickup p50 ms | pickup p90 ms | succeeded seen p50 ms "
          "| jobs/s (500 at once) | submits/s |")
    print("|---|---|---|---|---|---|---|---|")
    for backend, s in summary.items():
        print("| %s | %.2f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f |" % (
            backend, s["ack_p50"], s["ack_p90"], s["pickup_p50"], s["pickup_p90"], s["seen_p50"],
            s["jobs_per_s"], s["submits_per_s"]))
    print("results:", bl.write_results("jobs-backends", out))


if __name__ == "__main__":
    bl.exit_cleanly_on_sigterm()
    main()
