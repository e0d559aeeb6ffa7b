"""test_jobs_postgres: durable jobs on PostgreSQL shared by two vramd hosts (jobs.backend:
postgres; docs/fleet-jobs.md).

Each test gets a fresh database in a PostgreSQL 15 cluster the module starts itself
(vramdkit.pg: runs as the postgres user in a temp dir, 127.0.0.1 and a free port, stopped
at the end) and two vramd processes on loopback, each with its own state_dir and its own
jobworker model; the worker logs ("start"/"done" per token) tell which host ran what.

Covers: submit on A, read, list and fetch the result on B (and the password never in a
log); two hosts claiming N jobs: each job runs exactly once; a host SIGKILLed with running
and queued jobs: every acknowledged job finishes exactly once on the other after the lease;
a fenced late writer (SIGSTOP past the lease, then SIGCONT: its result is refused); a
PostgreSQL restart under load: hosts reconnect and no acknowledged job is lost; on a
simulated GPU, a host claims a job only once its estimate fits what it can admit now; a
PostgreSQL that goes silent (its backend frozen) is left after jobs.postgres.timeout.
"""
import copy
import os
import secrets
import signal
import threading
import time

import pytest

from vramdkit import http_request, sim_s, wait_for
from vramdkit import pg as pgkit
from vramdkit.harness import sched  # noqa: F401  (fixture)
from jobs.conftest import job_model, submit, wait_job, worker_events

pytestmark = pytest.mark.skipif(not pgkit.available(), reason="PostgreSQL 15 binaries not installed")

LEASE = "1500ms"


@pytest.fixture(scope="module")
def cluster():
    c = pgkit.PgCluster()
    try:
        c.start()
        yield c
    finally:
        c.cleanup()


@pytest.fixture
def pgurl(cluster):
    db = "t_" + secrets.token_hex(6)
    cluster.sql(f"CREATE DATABASE {db}")
    return cluster.url.replace("dbname=postgres", f"dbname={db}"), db


def host(vramd, tmp_path, url, name, lease=LEASE, pg=None, **model):
    log = tmp_path / f"worker-{name}.log"
    cfg = vramd.config({"w": job_model(vramd, log, **model)})
    cfg["state_dir"] = str(tmp_path / f"var-{name}")
    cfg["jobs"] = {"backend": "postgres", "max_active": 8,
                   "postgres": {"url": url, "lease": lease, "host_id": name, **(pg or {})}}
    vd = vramd.start(config=cfg)
    wait_for(lambda: "jobs_postgres_ready" in vd.log_text(), timeout=15, what=f"{name} connected to PostgreSQL")
    return vd, log


def work(token, ms=10, **kw):
    body = {"token": token, "ms": ms}
    body.update(kw)
    return {"model": "w", "path": "/work", "body": body}


def done_counts(*logs):
    counts = {}
    for log in logs:
        for ev, tok in worker_events(log):
            if ev == "done":
                counts[tok] = counts.get(tok, 0) + 1
    return counts


def submit_ok(vd, doc):
    r = submit(vd, doc)
    assert r.status == 202, r
    return r.json()["id"]


def all_final(vd, ids, timeout):
    def check():
        states = {}
        for jid in ids:
            r = http_request(vd.port, "GET", f"/v1/jobs/{jid}", timeout=10)
            if r.status != 200:
                return None
            states[jid] = r.json()
        return states if all(s["state"] in ("succeeded", "failed", "cancelled") for s in states.values()) else None
    return wait_for(check, timeout=timeout, what="every job final")


def test_submit_on_a_read_and_result_on_b(vramd, tmp_path, pgurl, cluster):
    url, db = pgurl
    a, log_a = host(vramd, tmp_path, url, "a")
    b, log_b = host(vramd, tmp_path, url, "b")
    jid = submit_ok(a, work("x1", kind="binary", bytes=200000))
    j = wait_job(b, jid, "succeeded", timeout=20)
    assert j["attempts"] == 1 and j["result"]["bytes"] == 200000
    r = http_request(b.port, "GET", f"/v1/jobs/{jid}/result", timeout=10)
    from jobs.jobworker import pattern
    assert r.status == 200 and r.body == pattern("x1", 200000)
    assert r.headers["content-type"] == "application/octet-stream"
    r = http_request(a.port, "GET", f"/v1/jobs/{jid}/result", timeout=10)
    assert r.status == 200 and len(r.body) == 200000
    # list on B shows A's job; a job of the fleet cancels from the other host
    lst = http_request(b.port, "GET", "/v1/jobs?limit=10", timeout=10).json()
    assert [x["id"] for x in lst["jobs"]] == [jid]
    slow = submit_ok(b, work("x2", ms=60000))
    wait_job(a, slow, "running", timeout=20)
    r = http_request(a.port, "DELETE", f"/v1/jobs/{slow}", timeout=10)
    assert r.status == 200 and r.json()["was"] == "running", r
    # the host running it notices at its next renewal and closes the worker's request
    wait_for(lambda: ("closed", "x2") in worker_events(log_a) + worker_events(log_b), timeout=10,
             what="the cancelled job's request closed on its host")
    assert http_request(b.port, "GET", f"/v1/jobs/{slow}/result", timeout=10).json()["error"]["code"] == \
        "job_cancelled"
    # unknown ids are 404 on every host; the password is in no log
    assert http_request(a.port, "GET", "/v1/jobs/" + "0" * 32, timeout=10).status == 404
    assert cluster.sql("SELECT count(*), count(lease) FROM vramd_jobs", db=db) == "2|0"
    assert cluster.sql("SELECT value FROM vramd_meta WHERE key = 'schema_version'", db=db) == "1"
    for vd in (a, b):
        assert cluster.password not in vd.log_text()


def test_two_hosts_claim_each_job_once(vramd, tmp_path, pgurl):
    url, _ = pgurl
    a, log_a = host(vramd, tmp_path, url, "a")
    b, log_b = host(vramd, tmp_path, url, "b")
    n = 40
    ids = []
    for i in range(n):
        ids.append(submit_ok(a if i % 2 else b, work(f"t{i}", ms=30)))
    states = all_final(a, ids, timeout=40)
    assert all(s["state"] == "succeeded" and s["attempts"] == 1 for s in states.values()), states
    counts = done_counts(log_a, log_b)
    assert counts == {f"t{i}": 1 for i in range(n)}, counts
    ran_a = sum(1 for ev, _ in worker_events(log_a) if ev == "done")
    ran_b = sum(1 for ev, _ in worker_events(log_b) if ev == "done")
    assert ran_a > 0 and ran_b > 0, (ran_a, ran_b)  # both hosts took work


def test_killed_host_jobs_finish_once_on_the_other(vramd, tmp_path, pgurl):
    url, _ = pgurl
    a, log_a = host(vramd, tmp_path, url, "a", concurrency=2)
    ids = [submit_ok(a, work(f"k{i}", ms=4000)) for i in range(2)]  # run on A (B is not up yet)
    wait_for(lambda: sum(1 for ev, _ in worker_events(log_a) if ev == "start") >= 2, timeout=20,
             what="A running two jobs")
    ids += [submit_ok(a, work(f"q{i}", ms=10)) for i in range(6)]  # queued (A's window is full)
    a.signal(signal.SIGKILL)
    a.wait_exit(10)
    t0 = time.monotonic()
    b, log_b = host(vramd, tmp_path, url, "b", concurrency=4)
    states = all_final(b, ids, timeout=40)
    assert all(s["state"] == "succeeded" for s in states.values()), states
    for jid in ids[:2]:
        assert states[jid]["attempts"] == 2, states[jid]  # one lost with A, one on B
    done = done_counts(log_b)
    assert all(done.get(t) == 1 for t in ["k0", "k1"] + [f"q{i}" for i in range(6)]), done
    assert not any(ev == "done" for ev, _ in worker_events(log_a))
    assert time.monotonic() - t0 < 30


def test_fenced_late_writer_is_refused(vramd, tmp_path, pgurl):
    url, _ = pgurl
    a, log_a = host(vramd, tmp_path, url, "a")
    jid = submit_ok(a, work("f1", ms=2500))
    wait_for(lambda: ("start", "f1") in worker_events(log_a), timeout=20, what="A running the job")
    a.signal(signal.SIGSTOP)  # A stops renewing; its worker goes on and answers into A's socket
    try:
        b, log_b = host(vramd, tmp_path, url, "b")
        j = wait_job(b, jid, "succeeded", timeout=30)  # the lease expired, B ran it again
        assert ("done", "f1") in worker_events(log_b)
        first = j
    finally:
        a.signal(signal.SIGCONT)
    # A wakes up with the worker's answer in hand: its finish is fenced off
    wait_for(lambda: "job_result_dropped" in a.log_text() or "job_lease_lost" in a.log_text(), timeout=15,
             what="A's late result refused")
    time.sleep(0.5)
    j = wait_job(b, jid, "succeeded")
    assert j["finished_at"] == first["finished_at"] and j["attempts"] == first["attempts"]
    assert a.alive() and b.alive()


def test_postgres_restart_under_load_loses_nothing(vramd, tmp_path, pgurl, cluster):
    url, _ = pgurl
    a, log_a = host(vramd, tmp_path, url, "a")
    b, log_b = host(vramd, tmp_path, url, "b")
    acked, lock, stop = [], threading.Lock(), threading.Event()
    tokens = iter(range(100000))

    def load(vd):
        for _ in range(60):  # bounded: about 25 submits a second per host
            if stop.is_set():
                break
            time.sleep(0.04)
            tok = f"r{next(tokens)}"
            try:
                r = submit(vd, work(tok, ms=20))
            except OSError:
                continue
            if r.status == 202:
                with lock:
                    acked.append((r.json()["id"], tok))
            else:
                assert r.status == 503 and r.error_code() == "jobs_unavailable", r
                time.sleep(0.05)
    threads = [threading.Thread(target=load, args=(vd,), daemon=True) for vd in (a, b)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    cluster.restart(mode="immediate")
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(10)
    assert all("jobs_postgres_down" in vd.log_text() for vd in (a, b))
    wait_for(lambda: all('"reconnected":"true"' in vd.log_text() for vd in (a, b)), timeout=15,
             what="both hosts reconnected")
    ids = [jid for jid, _ in acked]
    assert len(ids) >= 10
    states = all_final(a, ids, timeout=60)
    assert all(s["state"] == "succeeded" for s in states.values()), [s for s in states.values()
                                                                      if s["state"] != "succeeded"]
    counts = done_counts(log_a, log_b)
    assert all(counts.get(tok, 0) >= 1 for _, tok in acked)


def test_host_claims_only_jobs_that_fit_its_gpu_now(sched, pgurl):
    """A host whose GPU is held by another process leaves the job queued (its estimate does
    not fit what the host could admit now); once the memory is free it claims and runs it."""
    url, _ = pgurl
    gpu = sched.gpu_set("8GiB")
    m = sched.model("m", ["--resident", "1.9GiB", "--per-request", "3.5GiB", "--run-time", sim_s(0.3)],
                    "2GiB", "4GiB")
    vd = sched.start_vramd(gpu, {"m": m}, jobs={"backend": "postgres",
                                                "postgres": {"url": url, "lease": LEASE, "host_id": "gpuhost"}})
    wait_for(lambda: "jobs_postgres_ready" in vd.log_text(), timeout=15, what="connected to PostgreSQL")
    hold = sched.alloc(gpu, 4 * 1024 ** 3)  # 8 GiB - 128 MiB headroom - 4 GiB: under the job's 4 GiB
    wait_for(lambda: vd.status()["gpus"][0]["foreign"] >= 4 * 1024 ** 3, timeout=10, what="vramd seeing the holder")
    r = vd.post("/v1/jobs", {"model": "m", "path": "/generate", "body": {}})
    assert r.status == 202, r
    jid = r.json()["id"]
    time.sleep(1.5)  # a tick and more (and the submit's own pump): the host looked and left it
    j = vd.request("GET", f"/v1/jobs/{jid}").json()
    assert j["state"] == "queued" and j["attempts"] == 0, j
    assert "job_attempt_started" not in vd.log_text()
    hold.end()
    j = wait_for(lambda: (lambda s: s if s["state"] in ("succeeded", "failed") else None)(
        vd.request("GET", f"/v1/jobs/{jid}").json()), timeout=30, what="the job to end")
    assert j["state"] == "succeeded" and j["attempts"] == 1, j
    sched.finish()


def test_a_large_job_that_waited_holds_back_smaller_ones(sched, pgurl):
    """Aging: a large job that does not fit now because this host's own work holds the
    memory, and that has waited longer than jobs.postgres.aging, stops the host from claiming
    later smaller jobs, so the memory drains and the large job starts before them."""
    url, _ = pgurl
    gpu = sched.gpu_set("8GiB")
    small = sched.model("small", ["--resident", "0.9GiB", "--per-request", "2.9GiB", "--run-time", sim_s(50)],
                        "1GiB", "3GiB", concurrency=2)
    big = sched.model("big", ["--resident", "0.4GiB", "--per-request", "4.9GiB", "--run-time", sim_s(2)],
                      "512MiB", "5GiB")
    vd = sched.start_vramd(gpu, {"small": small, "big": big},
                           jobs={"backend": "postgres", "postgres": {"url": url, "lease": "5s", "aging": "400ms",
                                                                     "host_id": "aging"}})
    wait_for(lambda: "jobs_postgres_ready" in vd.log_text(), timeout=15, what="connected to PostgreSQL")

    def post(model):
        r = vd.post("/v1/jobs", {"model": model, "path": "/generate", "body": {}})
        assert r.status == 202, r
        return r.json()["id"]

    def get(jid):
        return vd.request("GET", f"/v1/jobs/{jid}").json()
    first = post("small")  # 1 + 3 GiB of the 7.875 GiB for 2.5 s: 3.875 GiB left, under big's 5 GiB
    wait_for(lambda: get(first)["state"] == "running", timeout=20, what="the first small job running")
    large = post("big")
    time.sleep(0.8)  # past `aging`: the large job now starves
    later = post("small")  # 3 GiB would fit beside the first one
    time.sleep(1.0)
    assert get(later)["state"] == "queued", get(later)  # held back for the large job
    done = {}
    for jid in (first, large, later):
        done[jid] = wait_for(lambda: (lambda s: s if s["state"] in ("succeeded", "failed") else None)(get(jid)),
                             timeout=30, what="every job to end")
    assert all(j["state"] == "succeeded" for j in done.values()), done
    assert done[large]["started_at"] < done[later]["started_at"], done
    sched.finish()


def test_host_started_before_postgres_connects_when_it_comes(vramd, tmp_path, pgurl, cluster):
    """PostgreSQL down when vramd starts: the job routes answer 503 jobs_unavailable (never a
    202), /metrics says jobs are unavailable, and vramd connects by itself once it is up."""
    url, _ = pgurl
    cluster.stop()
    try:
        log = tmp_path / "worker-c.log"
        cfg = vramd.config({"w": job_model(vramd, log)})
        cfg["jobs"] = {"backend": "postgres", "postgres": {"url": url, "lease": LEASE, "host_id": "c"}}
        vd = vramd.start(config=cfg)
        wait_for(lambda: "jobs_postgres_down" in vd.log_text(), timeout=10, what="the connection refused")
        r = submit(vd, work("c1"))
        assert r.status == 503 and r.error_code() == "jobs_unavailable", r
        assert r.headers.get("retry-after") == "5"
        assert "vramd_jobs_available 0" in http_request(vd.port, "GET", "/metrics", timeout=10).body.decode()
    finally:
        cluster.start()
    wait_for(lambda: "jobs_postgres_ready" in vd.log_text(), timeout=15, what="connected once PostgreSQL is up")
    jid = submit_ok(vd, work("c2"))
    assert wait_job(vd, jid, "succeeded", timeout=20)["attempts"] == 1
    wait_for(lambda: "vramd_jobs_available 1" in http_request(vd.port, "GET", "/metrics", timeout=10).body.decode(),
             timeout=5, what="jobs available in /metrics")


def test_reload_refuses_a_job_store_change(vramd, tmp_path, pgurl):
    """The job store is opened once: a reload that changes jobs.backend or jobs.postgres.* is
    refused (400 bad_config naming the key) and the running store goes on."""
    url, _ = pgurl
    a, _ = host(vramd, tmp_path, url, "a")
    good = copy.deepcopy(a.config)
    for change, key in ((lambda c: c["jobs"].update(backend="sqlite"), "jobs.backend"),
                        (lambda c: c["jobs"]["postgres"].update(lease="9s"), "jobs.postgres")):
        changed = copy.deepcopy(good)
        change(changed)
        a.write_config(changed)
        r = http_request(a.port, "POST", "/v1/admin/reload", timeout=15)
        assert r.status == 400 and key in r.json()["error"]["message"], r
    a.write_config(good)
    assert http_request(a.port, "POST", "/v1/admin/reload", timeout=15).status == 200
    jid = submit_ok(a, work("rl1"))
    assert wait_job(a, jid, "succeeded", timeout=20)["attempts"] == 1


def test_silent_postgres_is_noticed_within_the_timeout(vramd, tmp_path, pgurl, cluster):
    """PostgreSQL that stops answering without closing anything (its backend frozen: what a
    host sees when its link goes down) is noticed after jobs.postgres.timeout of silence:
    the connection is dropped, a submit gets 503 jobs_unavailable instead of waiting on it,
    and vramd reconnects (to a new backend) by itself."""
    url, db = pgurl
    a, _ = host(vramd, tmp_path, url, "a", pg={"timeout": "1s"})
    pid = int(cluster.sql(f"SELECT pid FROM pg_stat_activity WHERE datname = '{db}'"))
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = submit(a, work("s1"))
        took = time.monotonic() - t0
        assert r.status == 503 and r.error_code() == "jobs_unavailable", r
        assert 0.5 < took < 3.0, took  # waited for the silence, not for TCP
        assert "no answer from PostgreSQL for 1000 ms" in a.log_text()
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: '"reconnected":"true"' in a.log_text(), timeout=15, what="reconnected")
    jid = submit_ok(a, work("s2"))
    assert wait_job(a, jid, "succeeded", timeout=20)["attempts"] == 1
