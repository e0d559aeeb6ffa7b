"""test_jobs_durability: accepted jobs survive kill -9 of vramd, and none runs twice to
completion without cause.

200 small jobs (20-60 ms of work each, concurrency 4) are submitted; vramd is killed with
SIGKILL at random points (once while jobs are being submitted, three times while they run:
the worker holds every job until all are submitted, so work is always left to interrupt)
and started again each time on the same config and state_dir. Then every job must end
succeeded with its expected result (each job's body carries a unique token that the worker
puts in its answer: JSON, chunked JSON or a binary pattern derived from it), and a token may
have been completed by the worker more than once only if its job's attempts > 1 (it was
interrupted by a kill after the worker finished but before the result was committed).
The random seed is printed, so a failure can be replayed (VRAMD_TEST_SEED=N).
"""
import json
import os
import random
import secrets
import time

from vramdkit import http_request, wait_for
from jobs.conftest import job, job_model, restart_killed, submit, worker_events
from jobs.jobworker import pattern  # the bytes the worker answers for a token

N_JOBS = 200


def count_state(vd, state):
    r = http_request(vd.port, "GET", f"/v1/jobs?state={state}&limit=1000", timeout=30)
    assert r.status == 200, r
    return len(r.json()["jobs"])


def explain_stall(vd):
    """What a stalled run looks like: the jobs not succeeded, and the daemon's events above
    debug (the log's last lines are only the test's own polling)."""
    for state in ("queued", "running"):
        r = http_request(vd.port, "GET", f"/v1/jobs?state={state}&limit=1000", timeout=30)
        for j in r.json().get("jobs", [])[:20]:
            print("unfinished:", json.dumps(j)[:600])
    lines = [ln for ln in vd.log_path.read_text(errors="replace").splitlines()
             if '"level":"debug"' not in ln]
    print("-- daemon events above debug, last 80 --")
    print("\n".join(lines[-80:]))


def test_jobs_survive_kill9(vramd, tmp_path):
    seed = int(os.environ.get("VRAMD_TEST_SEED") or random.randrange(1 << 30))
    print(f"seed={seed}")
    rng = random.Random(seed)
    log = tmp_path / "worker.log"
    cfg = vramd.config({"w": job_model(vramd, log, concurrency=4, queue_max=32)},
                       jobs={"max_attempts": 10})
    vd = vramd.start(config=cfg)

    expect = {}  # token -> (kind, bytes)
    ids = {}
    # Every job is held in the worker until all are submitted: the three kills below then
    # always find work running (200 jobs of 20-60 ms at concurrency 4 take about 2 s, and a
    # slow submission, the sanitizer build's, could see them all done before its last kill).
    gate = tmp_path / "hold"
    gate.touch()
    kill_during_submit = rng.randrange(40, 160)
    kills = 0
    for i in range(N_JOBS):
        token = f"t{i:03d}-{secrets.token_hex(4)}"
        kind = "binary" if i % 7 == 0 else "chunked" if i % 5 == 0 else "json"
        nbytes = rng.randrange(1, 200000) if kind == "binary" else 0
        body = {"token": token, "ms": rng.randint(20, 60), "kind": kind, "bytes": nbytes, "hold_while": str(gate)}
        r = submit(vd, {"model": "w", "path": "/work", "body": body})
        assert r.status == 202, r
        ids[token] = r.json()["id"]
        expect[token] = (kind, nbytes)
        if i == kill_during_submit:
            restart_killed(vd)
            kills += 1

    gate.unlink()
    # three more kills while the jobs run, each once the worker has made progress
    for _ in range(3):
        before = sum(1 for e, _ in worker_events(log) if e == "done")
        if before >= N_JOBS:
            break
        want = before + rng.randint(5, 25)
        wait_for(lambda: sum(1 for e, _ in worker_events(log) if e == "done") >= min(want, N_JOBS - 1),
                 timeout=30, what="the worker to finish a few more jobs")
        time.sleep(rng.uniform(0, 0.05))
        restart_killed(vd)
        kills += 1
    assert kills >= 3

    def all_done():
        failed = count_state(vd, "failed") + count_state(vd, "cancelled")
        assert failed == 0, f"{failed} jobs failed or were cancelled"
        return count_state(vd, "succeeded") == N_JOBS
    try:
        wait_for(all_done, timeout=60, interval=0.25, what=f"all {N_JOBS} jobs succeeded")
    except BaseException:
        explain_stall(vd)
        raise

    done_counts = {}
    for event, token in worker_events(log):
        if event == "done":
            done_counts[token] = done_counts.get(token, 0) + 1
    interrupted = 0
    for token, jid in ids.items():
        j = job(vd, jid)
        assert j["state"] == "succeeded", j
        r = http_request(vd.port, "GET", f"/v1/jobs/{jid}/result", timeout=30)
        assert r.status == 200, (token, r)
        kind, nbytes = expect[token]
        if kind == "binary":
            assert r.headers["content-type"] == "application/octet-stream"
            assert r.body == pattern(token, nbytes), token
        else:
            assert r.headers["content-type"] == "application/json"
            assert r.json() == {"token": token, "result": f"R-{token}"}, token
        n = done_counts.get(token, 0)
        assert n >= 1, f"{token}: succeeded but the worker never finished it"
        if n > 1:
            assert j["attempts"] > 1, f"{token} ran to completion {n} times with attempts {j['attempts']}"
        if j["attempts"] > 1:
            interrupted += 1
    print(f"kills={kills} jobs interrupted={interrupted} "
          f"completed twice={sum(1 for n in done_counts.values() if n > 1)}")
