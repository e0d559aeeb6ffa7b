"""The fleet's one job queue: three vramd hosts in their own network namespaces, each with
`jobs.backend: postgres`, a PostgreSQL 15 cluster and HAProxy (contrib/haproxy/haproxy.cfg as
shipped) in front, all started here (fleetkit.py) and stopped at the end. Issue 14, "What
it must show"; docs/fleet-jobs.md.

Each host runs the jobworker model (tests/jobs/jobworker.py, one slot: a host's window is
2 jobs, one running and one claimed behind it) whose log says which host ran what ("start"
and "done" per token); the lease is 1.5 s. Jobs are submitted and read through HAProxy
(`/v1/jobs` goes to the `vramd_any` backend: any host).

What must hold:
  * a host cut off by taking its link down while it runs a job, past the lease: another
    host runs the job and its outcome is the job's; when the link comes back the cut-off
    host's late result is refused (fenced by the lease token), nothing is lost or doubled,
    and the host reconnects to PostgreSQL and takes work again;
  * a host SIGKILLed with a running and a claimed job: every job acknowledged with 202
    finishes exactly once on the other two after the lease;
  * PostgreSQL restarted (immediate) under submits through HAProxy, retried by the client
    on 503 as a user would: every host reconnects, no acknowledged job is lost.
"""
import json
import signal
import threading
import time

import pytest

from vramdkit import wait_for
from vramdkit import pg as pgkit
from jobs.conftest import job_model, worker_events

from .fleetkit import fleet  # noqa: F401  (fixture)

pytestmark = pytest.mark.skipif(not pgkit.available(), reason="PostgreSQL 15 binaries not installed "
                                "(postgresql-15, see mk/deps.sh)")

LEASE = "1500ms"
FINAL = ("succeeded", "failed", "cancelled")


def worker_log(fleet_, h):
    return fleet_.tmp / f"worker-{h.name}.log"


def start(fleet_, **pg):
    """Three hosts on one database (pg: more jobs.postgres keys), HAProxy in front; returns
    (hosts, cluster, db)."""
    hosts = fleet_.make_hosts(3)
    cluster, db = fleet_.start_postgres()
    for h in hosts:
        model = job_model(fleet_, worker_log(fleet_, h), concurrency=1)
        h.start({"w": model}, jobs={"backend": "postgres", "max_active": 8,
                                    "postgres": {"url": fleet_.pg_url(h, db), "lease": LEASE, "host_id": h.name,
                                                 **pg}})
    for h in hosts:
        wait_for(lambda h=h: "jobs_postgres_ready" in h.log_text(), timeout=15,
                 what=f"{h.name} connected to PostgreSQL")
    fleet_.start_haproxy()
    fleet_.wait_weights("vramd_any", lambda v: len(v) == 3 and all(s == "UP" and w > 0 for s, w in v.values()),
                        "every host up in vramd_any")
    return hosts, cluster, db


def work(token, ms, **more):
    return {"model": "w", "path": "/work", "body": {"token": token, "ms": ms, **more}}


def submit(fleet_, token, ms, **more):
    """POST /v1/jobs through HAProxy: (status, id or None, body)."""
    st, _, body = fleet_.request("/v1/jobs", work(token, ms, **more), timeout=15)
    jid = json.loads(body)["id"] if st == 202 else None
    return st, jid, body


def submit_ok(fleet_, token, ms, **more):
    st, jid, body = submit(fleet_, token, ms, **more)
    assert st == 202, (st, body)
    return jid


def job(fleet_, jid, host=None):
    """GET /v1/jobs/{id} through HAProxy (or on one host): the record, None if not 200."""
    st, _, body = host.get(f"/v1/jobs/{jid}") if host else fleet_.get(f"/v1/jobs/{jid}")
    return json.loads(body) if st == 200 else None


def all_final(fleet_, ids, timeout):
    def check():
        states = {jid: job(fleet_, jid) for jid in ids}
        return states if all(s and s["state"] in FINAL for s in states.values()) else None
    return wait_for(check, timeout=timeout, what="every job final (read through HAProxy)")


def events(fleet_, h, ev):
    return [tok for e, tok in worker_events(worker_log(fleet_, h)) if e == ev]


def done_counts(fleet_, hosts):
    counts = {}
    for h in hosts:
        for tok in events(fleet_, h, "done"):
            counts[tok] = counts.get(tok, 0) + 1
    return counts


@pytest.mark.parametrize("back", ["after", "during"])
def test_host_cut_off_by_link_down_is_fenced_and_comes_back(fleet, back):
    """A cut shorter than jobs.postgres.timeout (20 s here): the host does not notice, its
    connection carries on when the link is back, and what it sends late is refused. back:
    the link comes back after the other host finished the job ("after": the job is final
    when the late result lands), or while the other host still runs it ("during": the rerun
    takes 3 s, so the job is `running` again under another lease when the late result lands:
    only the lease token refuses it)."""
    hosts, cluster, db = start(fleet, timeout="20s")
    rerun = {"mark": str(fleet.tmp / "cut.mark"), "again_ms": 3000} if back == "during" else {}
    jid = submit_ok(fleet, "cut", 1200, **rerun)
    victim = wait_for(lambda: next((h for h in hosts if "cut" in events(fleet, h, "start")), None), timeout=20,
                      interval=0.02, what="a host running the job")
    others = [h for h in hosts if h is not victim]
    fleet.link(victim, False)
    t_down = time.monotonic()
    try:
        # cut off, the victim's worker still finishes (its answer has nowhere to go but the
        # victim's hung PostgreSQL connection); the lease expires, another host runs it again
        wait_for(lambda: "cut" in events(fleet, victim, "done"), timeout=10, what="the victim's worker done")
        if back == "after":
            first = wait_for(lambda: (lambda j: j if j and j["state"] == "succeeded" else None)(
                job(fleet, jid, others[0])), timeout=20, what="the job succeeded on another host")
            assert sum(events(fleet, h, "done").count("cut") for h in others) == 1, done_counts(fleet, hosts)
        else:
            wait_for(lambda: (lambda j: j and j["state"] == "running" and j["attempts"] == 2)(
                job(fleet, jid, others[0])), timeout=20, interval=0.02, what="the job running on another host")
            assert not any("cut" in events(fleet, h, "done") for h in others)
        t_done = time.monotonic() - t_down
        assert not any(e in victim.log_text() for e in ("job_lease_lost", "job_result_dropped", "jobs_postgres_down"))
    finally:
        fleet.link(victim, True)
    t_up = time.monotonic()
    # the late writer's renewals and result reach PostgreSQL now: refused by the lease token
    wait_for(lambda: f'"event":"job_result_dropped","job_id":"{jid}"' in victim.log_text(),
             timeout=20, what="the victim's late result refused")
    t_fenced = time.monotonic() - t_up
    if back == "during":
        view = job(fleet, jid, others[0])
        assert view["state"] == "running", f"the rerun ended before the late result was refused: {view}"
    # the victim carries on (HAProxy sees it up again) and answers for the fleet's jobs
    fleet.wait_weights("vramd_any", lambda v: v[victim.name][0] == "UP", f"{victim.name} up again", timeout=20)
    wait_for(lambda: job(fleet, jid, victim) is not None, timeout=20, what="the victim answering from PostgreSQL")
    t_back = time.monotonic() - t_up
    if back == "during":
        first = wait_for(lambda: (lambda j: j if j and j["state"] == "succeeded" else None)(job(fleet, jid)),
                         timeout=20, what="the job succeeded on the other host")
        assert sum(events(fleet, h, "done").count("cut") for h in others) == 1, done_counts(fleet, hosts)
    assert first["attempts"] == 2, first
    # any host, HAProxy included, gives the other host's outcome; the result is the job's
    for view in [job(fleet, jid)] + [job(fleet, jid, h) for h in hosts]:
        assert view and view["state"] == "succeeded", view
        assert (view["finished_at"], view["attempts"]) == (first["finished_at"], 2), (view, first)
    st, _, body = fleet.get(f"/v1/jobs/{jid}/result")
    assert st == 200 and json.loads(body)["result"] == "R-cut", (st, body)
    assert cluster.sql(f"SELECT state, attempts, lease IS NULL FROM vramd_jobs WHERE id = '{jid}'", db=db) == \
        "succeeded|2|t"
    # and claims work again: 9 jobs of 0.6 s are more than the other two hosts' windows hold
    ids = [submit_ok(fleet, f"after{i}", 600) for i in range(9)]
    states = all_final(fleet, ids, timeout=30)
    assert all(s["state"] == "succeeded" and s["attempts"] == 1 for s in states.values()), states
    counts = done_counts(fleet, hosts)
    assert all(counts.get(f"after{i}") == 1 for i in range(9)), counts
    assert any(t.startswith("after") for t in events(fleet, victim, "done")), "the victim took no work afterwards"
    print(f"link down {victim.name} (back {back}): job {'succeeded' if back == 'after' else 'running'} elsewhere "
          f"{t_done:.2f}s after the cut; "
          f"late result refused {t_fenced:.2f}s after the link came back; host answering again after {t_back:.2f}s")
    fleet.check_hosts_clean()


def test_killed_host_jobs_finish_once_on_the_others(fleet):
    hosts, cluster, db = start(fleet)
    # 6 jobs, windows of 2: once every job is claimed each host holds exactly 2 (one running)
    ids = {submit_ok(fleet, f"k{i}", 1000): f"k{i}" for i in range(6)}

    def claims():
        rows = cluster.sql("SELECT owner, state FROM vramd_jobs WHERE lease IS NOT NULL", db=db).splitlines()
        return [r.split("|") for r in rows]
    victim = hosts[1]
    wait_for(lambda: (lambda c: len(c) == 6 and ["h2", "running"] in c)(claims()) and events(fleet, victim, "start"),
             timeout=20, interval=0.02, what="every job claimed and one running on h2")
    held = [tok for tok in events(fleet, victim, "start")]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    t_kill = time.monotonic()
    mine = sorted(state for owner, state in claims() if owner == victim.name)
    assert mine == ["queued", "running"], claims()  # what h2 held when it died
    states = all_final(fleet, list(ids), timeout=30)
    t_all = time.monotonic() - t_kill
    assert all(s["state"] == "succeeded" for s in states.values()), states
    survivors = [h for h in hosts if h is not victim]
    counts = done_counts(fleet, survivors)
    assert counts == {tok: 1 for tok in ids.values()}, counts  # each once, on the others
    assert not events(fleet, victim, "done"), events(fleet, victim, "done")
    for jid, tok in ids.items():
        assert states[jid]["attempts"] == (2 if tok in held else 1), (tok, held, states[jid])
    assert cluster.sql("SELECT count(*) FROM vramd_jobs WHERE lease IS NOT NULL", db=db) == "0"
    print(f"SIGKILL h2 holding {held}: all 6 jobs done {t_all:.2f}s after the kill")
    fleet.check_hosts_clean()


def test_postgres_restart_under_load_loses_no_acknowledged_job(fleet):
    hosts, cluster, db = start(fleet)
    acked, refused, lock, stop = [], [], threading.Lock(), threading.Event()
    seq = iter(range(100000))

    def client():
        # a user's client: a 503 (every host refused: jobs_unavailable, or HAProxy had no
        # server up) is sent again with a new token, so a job that committed under a 503
        # (docs/fleet-jobs.md, "Reconnects") cannot hide a lost one
        while not stop.is_set():
            with lock:
                tok = f"r{next(seq)}"
            st, jid, body = submit(fleet, tok, 20)
            with lock:
                if st == 202:
                    acked.append((jid, tok))
                else:
                    refused.append((st, body[:200]))
            if st != 202:
                assert st in (503, None), (st, body)
                time.sleep(0.1)
            else:
                time.sleep(0.03)
    threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        before = len(acked)
        cluster.restart(mode="immediate")
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert before >= 5 and len(acked) > before, (before, len(acked), refused[:5])
    for h in hosts:
        wait_for(lambda h=h: '"reconnected":"true"' in h.log_text(), timeout=15, what=f"{h.name} reconnected")
        assert "jobs_postgres_down" in h.log_text()
    states = all_final(fleet, [jid for jid, _ in acked], timeout=40)
    assert all(s["state"] == "succeeded" for s in states.values()), \
        [s for s in states.values() if s["state"] != "succeeded"]
    counts = done_counts(fleet, hosts)
    assert all(counts.get(tok, 0) >= 1 for _, tok in acked), [tok for _, tok in acked if not counts.get(tok)]
    # every job the database holds ends, those that committed under a 503 too: none stuck
    wait_for(lambda: cluster.sql("SELECT count(*) FROM vramd_jobs WHERE state <> 'succeeded'", db=db) == "0",
             timeout=20, what="every job in the database succeeded")
    print(f"PostgreSQL restart: {len(acked)} acknowledged ({before} before), {len(refused)} refused and resubmitted")
    fleet.check_hosts_clean()


def local_submit(h, token, ms):
    """POST /v1/jobs from a client on the host itself (in its namespace): (status, body)."""
    p = h.inside("curl", "-s", "-m", "8", "-o", "-", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                 "--data", json.dumps(work(token, ms)), "http://127.0.0.1:8800/v1/jobs", timeout=15)
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body


def test_host_cut_off_longer_than_the_timeout_notices_and_reconnects(fleet):
    """jobs.postgres.timeout (1 s here): a host whose link stays down notices the silence,
    drops the connection (its own clients get 503 jobs_unavailable at once instead of
    waiting on it), retries, and reconnects once the link is back; the job it ran is run
    again elsewhere and its own late result is never written."""
    hosts, cluster, db = start(fleet, timeout="1s")
    jid = submit_ok(fleet, "long", 1500)
    victim = wait_for(lambda: next((h for h in hosts if "long" in events(fleet, h, "start")), None), timeout=20,
                      interval=0.02, what="a host running the job")
    others = [h for h in hosts if h is not victim]
    fleet.link(victim, False)
    t_down = time.monotonic()
    try:
        wait_for(lambda: "no answer from PostgreSQL" in victim.log_text(), timeout=4, interval=0.02,
                 what="the victim noticing the silence (timeout 1 s, a query at least every 375 ms)")
        t_notice = time.monotonic() - t_down
        t0 = time.monotonic()
        st, body = local_submit(victim, "local", 10)
        assert st == 503 and json.loads(body)["error"]["code"] == "jobs_unavailable", (st, body)
        assert time.monotonic() - t0 < 3, "a submit on the cut-off host waited on the dead connection"
        first = wait_for(lambda: (lambda j: j if j and j["state"] == "succeeded" else None)(job(fleet, jid, others[0])),
                         timeout=20, what="the job succeeded on another host while the victim is cut off")
        assert first["attempts"] == 2, first
        wait_for(lambda: "long" in events(fleet, victim, "done"), timeout=10, what="the victim's worker done")
    finally:
        fleet.link(victim, True)
    t_up = time.monotonic()
    wait_for(lambda: '"reconnected":"true"' in victim.log_text(), timeout=15, what="the victim reconnected")
    t_back = time.monotonic() - t_up
    # the victim's result had nowhere to go (no connection): never written, the job is the
    # other host's
    assert f'"event":"job_journal_error","job_id":"{jid}","op":"mark_succeeded"' in victim.log_text()
    for view in [job(fleet, jid)] + [job(fleet, jid, h) for h in hosts]:
        assert view and (view["state"], view["attempts"], view["finished_at"]) == \
            ("succeeded", 2, first["finished_at"]), (view, first)
    assert sum(events(fleet, h, "done").count("long") for h in others) == 1, done_counts(fleet, hosts)
    # the victim takes submits again and they run
    st, body = local_submit(victim, "again", 10)
    assert st == 202, (st, body)
    assert all_final(fleet, [json.loads(body)["id"]], timeout=20)[json.loads(body)["id"]]["state"] == "succeeded"
    print(f"link down {victim.name} (timeout 1s): noticed after {t_notice:.2f}s, "
          f"reconnected {t_back:.2f}s after the link came back")
    fleet.check_hosts_clean()
