"""A step of the system's wall clock within a run (NTP, `date -s`) must not fail queued jobs.

vramd runs with the LD_PRELOAD shim build/tests/clock_step.so (tests/preload/clock_step.c),
which adds the offset written in a file to every wall-clock reading of the process while its
monotonic clocks run on. Job deadlines are measured on the jobs' clock (src/jobs/jobs.h
jobs_wall_ms: the wall clock read once at start, advanced by the monotonic clock), so a
forward step of a day neither fails a queued job nor finishes it early; before, the runner's
overdue sweep failed it with deadline_exceeded within a second of the step.
"""
import json
import os
import time

from vramdkit import build_dir, http_request, wait_for
from jobs.conftest import job, job_model, submit, wait_job, worker_events

SHIM = "clock_step.so"
DAY_MS = 24 * 3600 * 1000


def shim_env(tmp_path):
    so = build_dir() / "tests" / SHIM
    assert so.exists(), f"{so} is missing: build it first (make)"
    env = {"LD_PRELOAD": str(so), "CLOCK_STEP_FILE": str(tmp_path / "clock_offset_ms")}
    asan = os.environ.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    return env


def stamps(vd):
    """The "ts" of every JSON line of vramd's log (the wall clock as the process sees it)."""
    out = []
    for line in vd.log_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line)["ts"])
            except (ValueError, KeyError):
                pass
    return out


def work(token, ms):
    return {"model": "w", "path": "/work", "body": {"token": token, "ms": ms}}


def test_a_clock_step_forward_does_not_fail_a_queued_job(vramd, tmp_path):
    """Eight slow jobs fill the model's attempts (4 slots x 2); a ninth with a 60 s deadline
    waits in the journal. The wall clock jumps a day ahead: the ninth job is still queued
    seconds later (the runner's overdue sweep runs every tick), and once the slow jobs are
    cancelled it runs and succeeds. The shim is checked to be on the path: vramd's log
    lines, stamped by the wall clock, move a day ahead."""
    log = tmp_path / "worker.log"
    cfg = vramd.config({"w": job_model(vramd, log)})
    vd = vramd.start(config=cfg, env=shim_env(tmp_path))
    busy = [submit(vd, work(f"slow{i}", 20000)).json()["id"] for i in range(8)]
    for b in busy[:4]:
        wait_job(vd, b, "running")
    jid = submit(vd, dict(work("waits", 10), deadline="60s")).json()["id"]
    assert job(vd, jid)["state"] == "queued"

    (tmp_path / "clock_offset_ms").write_text(str(DAY_MS))
    # the shim is on the path: a log line written after the step is stamped a day ahead
    before = stamps(vd)[-1]
    time.sleep(0.1)  # the shim reads its file again every 20 ms
    # logs job_submitted; slow like the others, so that it cannot finish while the busy ones
    # are cancelled one by one (a 10 ms probe started and succeeded before its DELETE: 409)
    busy.append(submit(vd, work("probe", 20000)).json()["id"])
    wait_for(lambda: any(ts[:10] > before[:10] for ts in stamps(vd)),
             what="a log line stamped a day ahead")
    # the runner's overdue sweep runs every tick (1 s): give it several
    time.sleep(3.0)
    j = job(vd, jid)
    assert j["state"] == "queued", j
    for b in busy:
        r = http_request(vd.port, "DELETE", f"/v1/jobs/{b}")
        assert r.status == 200, r
    j = wait_job(vd, jid, ("succeeded", "failed"), timeout=30)
    assert j["state"] == "succeeded", j
    assert ("start", "waits") in worker_events(log)
