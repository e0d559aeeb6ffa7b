"""test_jobs_clients: job attempts count against limits.per_client as their submitter's requests
(docs/jobs.md "Per-client limits"), not as one client 127.0.0.1 (the runner's loopback).

Clients are told apart by their source address: Linux routes all of 127.0.0.0/8 to lo, so a
client socket bound to 127.0.0.2 reaches vramd on 127.0.0.1 as another address. The model's
one slot is held by a request the worker never answers (/hang) until the test closes its
connection, so whatever comes next waits in the queue for as long as the test needs.
"""
import http.client
import json

from vramdkit import Background, RawConn, build_request, wait_for
from jobs.conftest import job, wait_job


def call(port, method, path, source, body=None, headers=None):
    """One request from source (an address of lo); (status, headers, parsed JSON or text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        data = json.dumps(body).encode() if body is not None else None
        h = {"Content-Type": "application/json"} if data else {}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = raw.decode(errors="replace")
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, doc
    finally:
        conn.close()


def queued(vd):
    return vd.model("w")["queue"]["depth"]


def start(vramd, key):
    m = vramd.worker("w", concurrency=1)
    per_client = {"key": key, "max_queued": 1, "max_in_flight": 1}
    vd = vramd.start(models={"w": m}, limits={"per_client": per_client})
    assert vd.get("/w/echo").status == 200
    hold = RawConn(vd.port, timeout=30)  # the one slot, from 127.0.0.1, until hold.close()
    hold.send(build_request("GET", "/w/hang"))
    vd.wait_in_flight("w", 1, timeout=10)
    return vd, hold


def test_job_attempt_counts_as_its_submitters_address(vramd):
    """key: address. Client A (127.0.0.2) submits a job; its attempt waits in the queue as
    A's request: A's own next request is refused 429 client_limit naming addr:127.0.0.2 (A's
    max_queued is 1), while client C (127.0.0.3) is admitted. The worker sees A's address in
    X-Forwarded-For, never vramd's secret header. Before: the attempt counted as 127.0.0.1's
    and A's request was admitted."""
    vd, hold = start(vramd, "address")
    st, _, doc = call(vd.port, "POST", "/v1/jobs", "127.0.0.2",
                      {"model": "w", "path": "/echo", "method": "GET"})
    assert st == 202, doc
    jid = doc["id"]
    wait_for(lambda: queued(vd) == 1, timeout=10, what="the job's attempt queued")
    st, hdrs, doc = call(vd.port, "GET", "/w/echo", "127.0.0.2")
    assert st == 429 and doc["error"]["code"] == "client_limit", (st, doc)
    assert "addr:127.0.0.2" in doc["error"]["message"], doc
    assert "retry-after" in hdrs
    other = Background(lambda: call(vd.port, "GET", "/w/echo", "127.0.0.3"))
    wait_for(lambda: queued(vd) == 2, timeout=10, what="C's request queued beside the job")
    hold.close()
    assert other.result(timeout=30)[0] == 200
    j = wait_job(vd, jid, "succeeded")
    assert j["attempts"] == 1
    st, _, echo = call(vd.port, "GET", f"/v1/jobs/{jid}/result", "127.0.0.2")
    assert st == 200, echo
    seen = {k.lower(): v for k, v in echo["headers"].items()}
    assert seen.get("x-forwarded-for") == "127.0.0.2", seen
    assert "x-vramd-job-client" not in seen, seen


def test_job_attempt_carries_its_submitters_header(vramd):
    """key: header:X-Tenant. A job submitted with X-Tenant: acme (its own headers say
    X-Tenant: other) runs as acme's request: acme's next direct request gets 429 naming
    hdr:acme; tenant zen is admitted. A client cannot claim another's identity through the
    job runner: X-Vramd-Job-Client in a job's headers is refused (400)."""
    vd, hold = start(vramd, "header:X-Tenant")
    st, _, doc = call(vd.port, "POST", "/v1/jobs", "127.0.0.2",
                      {"model": "w", "path": "/echo", "method": "GET", "headers": {"X-Tenant": "other"}},
                      headers={"X-Tenant": "acme"})
    assert st == 202, doc
    jid = doc["id"]
    wait_for(lambda: queued(vd) == 1, timeout=10, what="the job's attempt queued")
    st, _, doc = call(vd.port, "GET", "/w/echo", "127.0.0.4", headers={"X-Tenant": "acme"})
    assert st == 429 and "hdr:acme" in doc["error"]["message"], (st, doc)
    other = Background(lambda: call(vd.port, "GET", "/w/echo", "127.0.0.4", headers={"X-Tenant": "zen"}))
    wait_for(lambda: queued(vd) == 2, timeout=10, what="zen's request queued beside the job")
    hold.close()
    assert other.result(timeout=30)[0] == 200
    wait_job(vd, jid, "succeeded")
    st, _, echo = call(vd.port, "GET", f"/v1/jobs/{jid}/result", "127.0.0.2")
    seen = {k.lower(): v for k, v in echo["headers"].items()}
    assert seen.get("x-tenant") == "acme", seen
    st, _, doc = call(vd.port, "POST", "/v1/jobs", "127.0.0.2",
                      {"model": "w", "path": "/echo", "headers": {"X-Vramd-Job-Client": "x 10.0.0.1:1"}})
    assert st == 400 and "X-Vramd-Job-Client" in doc["error"]["message"], (st, doc)
    assert job(vd, jid)["state"] == "succeeded"


def test_job_attempt_counts_as_its_submitters_token(vramd):
    """key: token. A job submitted with `Authorization: Bearer alice` runs as alice's
    request: alice's next direct request, from another address, gets 429 naming alice's
    token key (never the token); bob is admitted. The journal keeps a digest of the token,
    not the token. Before: the attempt counted as the submitter's address, so alice from
    another address was admitted."""
    vd, hold = start(vramd, "token")
    st, _, doc = call(vd.port, "POST", "/v1/jobs", "127.0.0.2",
                      {"model": "w", "path": "/echo", "method": "GET"},
                      headers={"Authorization": "Bearer alice-secret-token"})
    assert st == 202, doc
    jid = doc["id"]
    wait_for(lambda: queued(vd) == 1, timeout=10, what="the job's attempt queued")
    st, _, doc = call(vd.port, "GET", "/w/echo", "127.0.0.4",
                      headers={"Authorization": "Bearer alice-secret-token"})
    assert st == 429 and "token#" in doc["error"]["message"], (st, doc)
    assert "alice" not in doc["error"]["message"], doc
    other = Background(lambda: call(vd.port, "GET", "/w/echo", "127.0.0.4",
                                    headers={"Authorization": "Bearer bob-token"}))
    wait_for(lambda: queued(vd) == 2, timeout=10, what="bob's request queued beside the job")
    hold.close()
    assert other.result(timeout=30)[0] == 200
    wait_job(vd, jid, "succeeded")
    from pathlib import Path
    state = Path(vd.config["state_dir"])
    files = [f for f in state.rglob("jobs.db*") if f.is_file()]
    assert files, list(state.rglob("*"))
    for f in files:
        assert b"alice-secret-token" not in f.read_bytes(), f
    assert any(b'"key":"token#' in f.read_bytes() for f in files), files
