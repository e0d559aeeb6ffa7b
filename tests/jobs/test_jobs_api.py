"""test_jobs_api: the /v1/jobs routes over real sockets against the real vramd binary.

Covers: submit/get/list/result roundtrips with JSON, chunked and binary (body_base64)
results and their content types; validation errors (400 naming the field, 404
unknown_model); cancelling a queued and a running job (the worker sees its request closed,
no reservation is left, the job is cancelled); failure after max_attempts with the reason;
results TTL and size cap (410 result_expired, oldest removed first); the disk guard on a
small tmpfs state_dir (507 disk_full; a result that does not fit fails its job while vramd
keeps working); path traversal attempts on ids (raw requests, never a file read); curl and
wget fetching a result; the list route needing the admin token when one is set.
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from vramdkit import RawConn, http_request, wait_for
from jobs.conftest import job, job_model, restart_killed, submit, wait_job, worker_events
from jobs.jobworker import pattern  # the bytes the worker answers for a token


def start(vramd, tmp_path, jobs=None, top=None, **model):
    log = tmp_path / "worker.log"
    cfg = vramd.config({"w": job_model(vramd, log, **model)})
    if jobs:
        cfg["jobs"] = jobs
    if top:
        cfg.update(top)
    vd = vramd.start(config=cfg)
    return vd, log


def work(token, **kw):
    body = {"token": token, "ms": 10}
    body.update(kw)
    return {"model": "w", "path": "/work", "body": body}


def result(vd, job_id, method="GET"):
    return http_request(vd.port, method, f"/v1/jobs/{job_id}/result", timeout=30)


# --- roundtrips -------------------------------------------------------------------------

def test_submit_get_result_json_chunked_binary(vramd, tmp_path):
    vd, log = start(vramd, tmp_path)
    r = submit(vd, work("a1"))
    assert r.status == 202, r
    doc = r.json()
    jid = doc["id"]
    assert doc["state"] == "queued" and len(jid) == 32 and all(ch in "0123456789abcdef" for ch in jid)
    assert r.headers["location"] == f"/v1/jobs/{jid}"
    j = wait_job(vd, jid, "succeeded")
    assert j["model"] == "w" and j["attempts"] == 1 and j["error"] is None
    assert j["created_at"].endswith("Z") and j["started_at"] and j["finished_at"]
    assert j["result"]["content_type"] == "application/json"
    assert j["result"]["url"] == f"/v1/jobs/{jid}/result"
    res = result(vd, jid)
    assert res.status == 200 and res.headers["content-type"] == "application/json"
    assert res.json() == {"token": "a1", "result": "R-a1"}
    assert j["result"]["bytes"] == len(res.body)
    head = result(vd, jid, "HEAD")
    assert head.status == 200 and head.body == b"" and int(head.headers["content-length"]) == len(res.body)

    # chunked answer from the worker: stored whole
    jid2 = submit(vd, work("c1", kind="chunked")).json()["id"]
    wait_job(vd, jid2, "succeeded")
    assert result(vd, jid2).json() == {"token": "c1", "result": "R-c1"}

    # binary: a body_base64 request, a binary answer
    payload = json.dumps({"token": "b1", "ms": 5, "kind": "binary", "bytes": 300000}).encode()
    r = submit(vd, {"model": "w", "path": "/work", "body_base64": base64.b64encode(payload).decode(),
                    "headers": {"Content-Type": "application/json", "X-Custom": "yes"}, "priority": 7})
    assert r.status == 202, r
    jid3 = r.json()["id"]
    j3 = wait_job(vd, jid3, "succeeded")
    assert j3["priority"] == 7 and j3["result"]["content_type"] == "application/octet-stream"
    res = result(vd, jid3)
    assert res.status == 200 and res.headers["content-type"] == "application/octet-stream"
    assert res.body == pattern("b1", 300000)

    # every run went through the worker once
    done = [t for e, t in worker_events(log) if e == "done"]
    assert sorted(done) == ["a1", "b1", "c1"]

    # result before done: 409 not_done with Retry-After
    jid4 = submit(vd, work("slow", ms=3000)).json()["id"]
    r = result(vd, jid4)
    assert r.status == 409 and r.error_code() == "not_done" and "retry-after" in r.headers
    wait_job(vd, jid4, "running")
    assert job(vd, jid4)["started_at"] is not None
    http_request(vd.port, "DELETE", f"/v1/jobs/{jid4}")


def test_validation_errors(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path)
    cases = [
        ({"path": "/work"}, "model"),
        ({"model": "w"}, "path"),
        ({"model": "w", "path": "work"}, "path"),
        ({"model": "w", "path": "/work", "bogus": 1}, "bogus"),
        ({"model": "w", "path": "/work", "method": "GE T"}, "method"),
        ({"model": "w", "path": "/work", "headers": {"X-A": "a\r\nX-B: b"}}, "headers.X-A"),
        ({"model": "w", "path": "/work", "headers": {"X-A": 5}}, "headers.X-A"),
        ({"model": "w", "path": "/work", "headers": {"Transfer-Encoding": "chunked"}}, "Transfer-Encoding"),
        ({"model": "w", "path": "/work", "headers": {"Host": "x"}}, "Host"),
        ({"model": "w", "path": "/work", "body": {}, "body_base64": "e30="}, "body"),
        ({"model": "w", "path": "/work", "body_base64": "not base64!"}, "body_base64"),
        ({"model": "w", "path": "/work", "priority": 10}, "priority"),
        ({"model": "w", "path": "/work", "priority": 1.5}, "priority"),
        ({"model": "w", "path": "/work", "deadline": "soon"}, "deadline"),
        ({"model": "w", "path": "/work", "body": "x" * (2 * 1024 * 1024)}, "body"),
    ]
    for doc, field in cases:
        r = submit(vd, doc)
        assert r.status in (400, 413), (doc, r)
        if r.status == 400:
            assert r.error_code() == "bad_request", r
            assert field in r.json()["error"]["message"], (field, r)
    r = http_request(vd.port, "POST", "/v1/jobs", {"Content-Type": "application/json"}, b"{not json")
    assert r.status == 400 and r.error_code() == "bad_request"
    r = submit(vd, {"model": "nope", "path": "/work"})
    assert r.status == 404 and r.error_code() == "unknown_model"
    r = http_request(vd.port, "PUT", "/v1/jobs")
    assert r.status == 405 and r.error_code() == "method_not_allowed", r
    assert r.json()["error"]["message"] == "allowed: GET, HEAD, POST", r
    # nothing was stored
    assert http_request(vd.port, "GET", "/v1/jobs").json()["jobs"] == []


# --- cancel ------------------------------------------------------------------------------

def test_cancel_queued_and_running(vramd, tmp_path):
    vd, log = start(vramd, tmp_path, concurrency=1, queue_max=2)
    # window for this model: min(1 x 1 x 2, 2 / 2) = 1 job in flight at a time
    r1 = submit(vd, work("run1", ms=20000)).json()["id"]
    r2 = submit(vd, work("wait2", ms=10)).json()["id"]
    wait_job(vd, r1, "running")
    wait_for(lambda: ("start", "run1") in worker_events(log), what="worker saw run1", timeout=15.0)
    assert job(vd, r2)["state"] == "queued"

    r = http_request(vd.port, "DELETE", f"/v1/jobs/{r2}")
    assert r.status == 200 and r.json()["state"] == "cancelled" and r.json()["was"] == "queued"
    r = http_request(vd.port, "DELETE", f"/v1/jobs/{r1}")
    assert r.status == 200 and r.json()["was"] == "running"
    wait_for(lambda: ("closed", "run1") in worker_events(log), what="worker saw run1 closed", timeout=15.0)
    assert job(vd, r1)["state"] == "cancelled" and job(vd, r2)["state"] == "cancelled"

    def released():
        m = vd.model("w")
        return m["in_flight"] == 0 and m["queue"]["depth"] == 0 and \
            all(i.get("in_flight", 0) == 0 for i in m.get("instances", []))
    # the model uses no GPU memory here, so "no reservation left" is: nothing in flight or queued
    wait_for(released, what="no request of the cancelled jobs left in vramd", timeout=15.0)

    r = result(vd, r1)
    assert r.status == 409 and r.error_code() == "job_cancelled"
    r = http_request(vd.port, "DELETE", f"/v1/jobs/{r1}")
    assert r.status == 409 and r.error_code() == "already_finished"
    assert ("done", "wait2") not in worker_events(log) and ("start", "wait2") not in worker_events(log)
    # vramd keeps running jobs afterwards
    r3 = submit(vd, work("after", ms=10)).json()["id"]
    wait_job(vd, r3, "succeeded")


def test_failure_after_max_attempts(vramd, tmp_path):
    vd, log = start(vramd, tmp_path, jobs={"max_attempts": 2})
    jid = submit(vd, work("f500", status=500)).json()["id"]
    j = wait_job(vd, jid, "failed", timeout=40)
    assert j["attempts"] == 2 and j["max_attempts"] == 2
    assert j["http_status"] == 500 and j["error"]["code"] == "worker_error"
    assert "2 of 2 attempts" in j["error"]["message"] and "500" in j["error"]["message"]
    assert [t for e, t in worker_events(log) if e == "start"] == ["f500", "f500"]
    r = result(vd, jid)
    assert r.status == 409 and r.error_code() == "job_failed"

    # a 4xx from the worker fails at once, with an excerpt of its answer
    jid = submit(vd, work("f404", status=404)).json()["id"]
    j = wait_job(vd, jid, "failed")
    assert j["attempts"] == 1 and j["http_status"] == 404 and j["error"]["code"] == "worker_rejected"
    assert "asked for 404" in j["error"]["message"]

    # a job whose deadline cannot be met fails with the deadline code, without running:
    # the model's 4 slots are busy with slow jobs, so it cannot start within 200 ms
    busy = [submit(vd, work(f"busy{i}", ms=20000)).json()["id"] for i in range(4)]
    for b in busy:
        wait_job(vd, b, "running")
    jid = submit(vd, dict(work("late", ms=10), deadline="200ms")).json()["id"]
    j = wait_job(vd, jid, "failed")
    assert j["error"]["code"] in ("deadline_exceeded", "deadline_unmeetable"), j
    assert ("start", "late") not in worker_events(log)
    for b in busy:
        assert http_request(vd.port, "DELETE", f"/v1/jobs/{b}").status == 200


def test_a_burst_of_failures_is_one_backoff_step(vramd, tmp_path):
    """Every attempt in flight fails from one cause (the worker answers 503 to all 8): the
    model backs off one step (1 s), not one doubling per failed attempt (1, 2, 4 ... 30 s,
    which left a burst of 8 jobs waiting 30 s once the worker was well again)."""
    vd, log = start(vramd, tmp_path, jobs={"max_attempts": 5})
    failing = tmp_path / "failing"
    failing.write_text("")
    ids = [submit(vd, work(f"b{i}", ms=1500, status=503, status_while=str(failing))).json()["id"]
           for i in range(8)]
    wait_for(lambda: len(vd.events("job_attempt_failed")) >= 8, timeout=30,
             what="the 8 attempts in flight to fail")
    failing.unlink()
    for jid in ids:
        wait_job(vd, jid, "succeeded", timeout=30)
    steps = [int(e["backoff_ms"]) for e in vd.events("job_attempt_failed")]
    assert steps[:8] == [1000] * 8, steps


# --- result housekeeping -------------------------------------------------------------------

def test_results_ttl(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path, jobs={"results_ttl": "2s", "records_ttl": "1h"})
    jid = submit(vd, work("ttl")).json()["id"]
    wait_job(vd, jid, "succeeded")
    assert result(vd, jid).status == 200
    # housekeeping runs every minute; a restart runs it at once
    time.sleep(2.2)
    vd.stop()
    vd.start()
    r = result(vd, jid)
    assert r.status == 410 and r.error_code() == "result_expired", r
    j = job(vd, jid)
    assert j["state"] == "succeeded" and j["result"] is None and j["result_state"] == "removed"
    assert not (tmp_path / "var" / "results" / jid).exists()


def test_results_size_cap_oldest_first(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path, jobs={"results_max_bytes": "250KiB"}, concurrency=1)
    ids = []
    for i in range(3):
        jid = submit(vd, work(f"cap{i}", kind="binary", bytes=100 * 1024)).json()["id"]
        wait_job(vd, jid, "succeeded")
        ids.append(jid)
    # 3 x 100 KiB > 250 KiB: the oldest went when the third was committed
    r = result(vd, ids[0])
    assert r.status == 410 and r.error_code() == "result_expired"
    assert result(vd, ids[1]).body == pattern("cap1", 100 * 1024)
    assert result(vd, ids[2]).body == pattern("cap2", 100 * 1024)
    # one result over the cap fails its job with a clear error and stores nothing
    jid = submit(vd, work("huge", kind="binary", bytes=300 * 1024)).json()["id"]
    j = wait_job(vd, jid, "failed")
    assert j["error"]["code"] == "result_too_large" and "results_max_bytes" in j["error"]["message"]
    assert not (tmp_path / "var" / "results" / jid).exists()
    assert result(vd, ids[2]).status == 200


# --- disk guard ------------------------------------------------------------------------------

def mount_tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the disk guard test: {p.stderr.strip()}")


def test_disk_guard_small_filesystem(vramd, tmp_path):
    state = tmp_path / "small"
    mount_tmpfs(state, "4m")
    try:
        vd, log = start(vramd, tmp_path, jobs={"min_free_disk": "1MiB", "results_max_bytes": "64MiB"},
                        top={"state_dir": str(state)}, concurrency=1)
        ok = submit(vd, work("fits", kind="binary", bytes=100 * 1024)).json()["id"]
        wait_job(vd, ok, "succeeded")
        # a result bigger than the filesystem: the job fails, nothing partial stays
        big = submit(vd, work("toobig", kind="binary", bytes=6 * 1024 * 1024)).json()["id"]
        j = wait_job(vd, big, "failed", timeout=40)
        assert j["error"]["code"] == "disk_full", j
        assert not any(n.startswith(".") or n == big for n in os.listdir(state / "results"))
        # vramd keeps working
        assert result(vd, ok).body == pattern("fits", 100 * 1024)
        # fill the filesystem below min_free_disk: new jobs are refused with 507
        filler = state / "filler"
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * (int(3.3 * 1024 * 1024)))
            except OSError:
                pass
        r = submit(vd, work("refused"))
        assert r.status == 507 and r.error_code() == "disk_full" and "retry-after" in r.headers, r
        filler.unlink()
        r = submit(vd, work("again"))
        assert r.status == 202, r
        wait_job(vd, r.json()["id"], "succeeded")
        vd.stop()
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


# --- ids and paths -------------------------------------------------------------------------

def test_path_traversal_and_bad_ids(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path)
    jid = submit(vd, work("t")).json()["id"]
    wait_job(vd, jid, "succeeded")
    # a file next to the store that a traversal would like to read
    secret = tmp_path / "var" / "secret"
    secret.write_text("SECRET")
    targets = [
        "/v1/jobs/..%2f..%2fetc%2fpasswd/result",
        "/v1/jobs/../../etc/passwd",
        "/v1/jobs/../secret/result",
        "/v1/jobs/%2e%2e/secret/result",
        "/v1/jobs/" + jid.upper() + "/result",
        "/v1/jobs/" + jid + "%00/result",
        "/v1/jobs/" + jid[:-1] + "/result",
        "/v1/jobs/" + jid + "0/result",
        "/v1/jobs/" + "a" * 4000 + "/result",
        "/v1/jobs/" + jid + "/result/../../secret",
        "/v1/jobs/" + jid + "/../secret",
        "/v1/jobs/.." + jid[2:] + "/result",
        "/v1/jobs/%2e%2e%2f%2e%2e%2fsecret",
        "/v1/jobs/",
    ]
    for t in targets:
        with RawConn(vd.port) as c:
            c.send(f"GET {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            r = c.read_response()
        assert r.status == 404 and r.error_code() == "not_found", (t, r)
        assert b"SECRET" not in r.body and b"root:" not in r.body
    with RawConn(vd.port) as c:
        c.send(f"DELETE /v1/jobs/..%2f..%2fetc%2fpasswd HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert c.read_response().status == 404
    # an unknown but well-formed id
    r = http_request(vd.port, "GET", "/v1/jobs/" + "0" * 32 + "/result")
    assert r.status == 404 and r.error_code() == "not_found"
    assert result(vd, jid).status == 200


# --- clients and the list ------------------------------------------------------------------

def test_curl_and_wget_fetch_results(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path)
    jid = submit(vd, work("cw", kind="binary", bytes=200000)).json()["id"]
    wait_job(vd, jid, "succeeded")
    url = f"http://127.0.0.1:{vd.port}/v1/jobs/{jid}/result"
    want = pattern("cw", 200000)
    if shutil.which("curl"):
        out = tmp_path / "curl.out"
        p = subprocess.run(["curl", "-sS", "-f", "-o", str(out), "-w", "%{content_type}", url],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert p.stdout == "application/octet-stream" and out.read_bytes() == want
    else:
        pytest.fail("curl is not installed")
    if shutil.which("wget"):
        out = tmp_path / "wget.out"
        p = subprocess.run(["wget", "-q", "-S", "-O", str(out), url], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert "Content-Type: application/octet-stream" in p.stderr and out.read_bytes() == want
    else:
        pytest.fail("wget is not installed")


def test_list_filters_paging_and_token(vramd, tmp_path):
    token = "jobs-list-token-42"
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    vd, _ = start(vramd, tmp_path, top={"admin_token_file": str(tf)})
    auth = {"Authorization": f"Bearer {token}"}
    ids = [submit(vd, work(f"l{i}")).json()["id"] for i in range(5)]
    for jid in ids:
        wait_job(vd, jid, "succeeded")
    r = http_request(vd.port, "GET", "/v1/jobs")
    assert r.status == 401 and r.error_code() == "unauthorized"
    r = http_request(vd.port, "GET", "/v1/jobs", {"Authorization": "Bearer wrong"})
    assert r.status == 401
    # one job is readable by its id without the token
    assert job(vd, ids[0])["state"] == "succeeded"
    seen, cursor = [], None
    while True:
        q = "/v1/jobs?state=succeeded&model=w&limit=2" + (f"&cursor={cursor}" if cursor else "")
        r = http_request(vd.port, "GET", q, auth)
        assert r.status == 200, r
        page = r.json()
        assert len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(ids) and seen == list(reversed(ids))
    for q in ("limit=0", "limit=1001", "limit=x", "state=done", "bogus=1", "cursor=zzz"):
        r = http_request(vd.port, "GET", f"/v1/jobs?{q}", auth)
        assert r.status == 400 and r.error_code() == "bad_request", (q, r)
    assert http_request(vd.port, "GET", "/v1/jobs?state=queued", auth).json()["jobs"] == []


# --- routing rule and drain ----------------------------------------------------------------

def test_model_without_route_uses_body_model(vramd, tmp_path):
    log = tmp_path / "worker.log"
    cfg = vramd.config({"o": job_model(vramd, log, route=None, aliases=["o-alias"]),
                        "w": job_model(vramd, tmp_path / "w.log")})
    vd = vramd.start(config=cfg)
    # OpenAI-style: POST /v1/..., the JSON body names the model (an alias works)
    r = submit(vd, {"model": "o-alias", "path": "/v1/work",
                    "body": {"model": "o-alias", "token": "o1", "ms": 5}})
    assert r.status == 202, r
    j = wait_job(vd, r.json()["id"], "succeeded")
    assert j["model"] == "o" and j["path"] == "/v1/work"
    assert ("done", "o1") in worker_events(log)
    # refused at submit: no model in the body, another method, one of vramd's own routes
    for doc in ({"model": "o", "path": "/v1/work", "body": {"token": "x"}},
                {"model": "o", "path": "/v1/work", "method": "PUT", "body": {"model": "o"}},
                {"model": "o", "path": "/v1/jobs", "body": {"model": "o"}},
                {"model": "o", "path": "/work", "body": {"model": "o"}}):
        r = submit(vd, doc)
        assert r.status == 400 and r.error_code() == "bad_request", (doc, r)
    # a routed model: the route is put in front of a path outside it, kept when inside
    r = submit(vd, {"model": "w", "path": "/w/work", "body": {"token": "w1", "ms": 5}})
    j = wait_job(vd, r.json()["id"], "succeeded")
    assert j["path"] == "/w/work"
    r = submit(vd, {"model": "w", "path": "/work", "body": {"token": "w2", "ms": 5}})
    j = wait_job(vd, r.json()["id"], "succeeded")
    assert j["path"] == "/w/work"


def test_drain_commits_in_flight_and_keeps_queued(vramd, tmp_path):
    vd, log = start(vramd, tmp_path, concurrency=1, queue_max=2)
    running = submit(vd, work("d-run", ms=1500)).json()["id"]
    queued = [submit(vd, work(f"d-q{i}", ms=5)).json()["id"] for i in range(3)]
    wait_job(vd, running, "running")
    vd.signal(signal.SIGTERM)
    assert vd.wait_exit(30) == 0
    vd._close_files()
    # the attempt in flight finished and its result was committed before the exit; the
    # queued jobs were not started
    events = worker_events(log)
    assert ("done", "d-run") in events
    assert not any(t.startswith("d-q") for _, t in events), events
    vd.start()
    j = job(vd, running)
    assert j["state"] == "succeeded" and j["attempts"] == 1, j
    assert result(vd, running).json() == {"token": "d-run", "result": "R-d-run"}
    # the queued ones were kept and run now
    for jid in queued:
        wait_job(vd, jid, "succeeded")


def test_result_client_leaves_mid_stream(vramd, tmp_path):
    vd, _ = start(vramd, tmp_path)
    n = 6 * 1024 * 1024
    jid = submit(vd, work("big", kind="binary", bytes=n)).json()["id"]
    wait_job(vd, jid, "succeeded", timeout=60)
    # several clients read the head and a little of the body, then go away
    for _ in range(3):
        c = RawConn(vd.port)
        c.send(f"GET /v1/jobs/{jid}/result HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, _, headers = c.read_head()
        assert status == 200 and int(dict((k.lower(), v) for k, v in headers)["content-length"]) == n
        c.sock.recv(1000)
        c.close()
    # pipelined: two results on one keep-alive connection, both whole
    with RawConn(vd.port) as c:
        c.send((f"GET /v1/jobs/{jid}/result HTTP/1.1\r\nHost: x\r\n\r\n" * 2).encode())
        for _ in range(2):
            r = c.read_response()
            assert r.status == 200 and r.complete and r.body == pattern("big", n)
    assert vd.get("/healthz").status == 200


def test_priority_then_age(vramd, tmp_path):
    vd, log = start(vramd, tmp_path, concurrency=1, queue_max=2)
    first = submit(vd, work("p-first", ms=800)).json()["id"]
    wait_job(vd, first, "running")
    low = [submit(vd, dict(work(f"p-low{i}"), priority=1)).json()["id"] for i in range(2)]
    high = submit(vd, dict(work("p-high"), priority=9)).json()["id"]
    for jid in low + [high]:
        wait_job(vd, jid, "succeeded")
    starts = [t for e, t in worker_events(log) if e == "start"]
    assert starts == ["p-first", "p-high", "p-low0", "p-low1"], starts


def test_orphan_results_swept_at_start(vramd, tmp_path):
    """A result file without a job record that stores it (left by a crash between the
    file's rename and the journal commit, or by a purge) is removed at start; a stored
    result survives the restart."""
    vd, log = start(vramd, tmp_path)
    jid = submit(vd, work("kept")).json()["id"]
    wait_job(vd, jid, "succeeded")
    results = Path(vd.config["state_dir"]) / "results"
    assert (results / jid).is_file()
    orphan = results / ("ab" * 16)
    orphan.write_bytes(b"left behind by a crash")
    restart_killed(vd)
    wait_for(lambda: not orphan.exists(), what="the orphan result removed at start", timeout=15.0)
    assert result(vd, jid).json() == {"token": "kept", "result": "R-kept"}


def test_queued_job_fails_when_its_deadline_passes_in_the_journal(vramd, tmp_path):
    """The runner hands a model at most 8 attempts at once here (4 slots x 2). With 8 slow
    jobs out, a ninth job with a 1 s deadline waits in the journal; it must fail with
    deadline_exceeded within a tick or two of its deadline, not when its turn comes (20 s)."""
    vd, log = start(vramd, tmp_path)
    busy = [submit(vd, work(f"slow{i}", ms=20000)).json()["id"] for i in range(8)]
    for b in busy[:4]:
        wait_job(vd, b, "running")
    jid = submit(vd, dict(work("waits", ms=10), deadline="1s")).json()["id"]
    j = wait_job(vd, jid, ("failed", "succeeded"), timeout=10)
    assert j["state"] == "failed", j
    assert j["error"]["code"] == "deadline_exceeded" and "waited" in j["error"]["message"], j
    assert j["attempts"] == 0 and ("start", "waits") not in worker_events(log)
    for b in busy:
        assert http_request(vd.port, "DELETE", f"/v1/jobs/{b}").status == 200
