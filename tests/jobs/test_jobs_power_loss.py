"""test_jobs_power_loss: the job journal under a disk whose syncs fail or whose unsynced
writes are lost (RELIABILITY case 36): every job answered 202 survives, and no job that was
refused is stored.

vramd runs with the LD_PRELOAD shim build/tests/fsync_fault.so (tests/preload/fsync_fault.c)
watching the files jobs.db* of its state_dir:
  - while the file `fail` exists, their fdatasync/fsync return EIO without syncing: a submit
    must then be refused (503 `journal_error`, never 202) and vramd keep serving;
  - after each successful sync the shim copies the synced file into `snap/`: the bytes a
    disk holds for sure after a power cut.
Rounds of submits, with some refused, then two endings:
  - kill -9 right after a refused submit (the machine stays up, so everything written is
    still in the page cache): on restart the journal holds exactly the jobs answered 202;
  - kill -9 and "power loss": each jobs.db* file in state_dir replaced by its last synced
    bytes (or removed when never synced), the -shm too: on restart the journal again holds
    exactly the jobs answered 202.
Then every job runs to success (the worker's answers checked by token).
"""
import os
import time
import shutil
import signal

from vramdkit import build_dir, http_request, wait_for
from jobs.conftest import job_model, submit

SHIM = "fsync_fault.so"


def shim_env(tmp):
    so = build_dir() / "tests" / SHIM
    assert so.exists(), f"{so} is missing: build it first (make)"
    env = {"LD_PRELOAD": str(so), "FSYNC_FAULT_MATCH": "/jobs.db",
           "FSYNC_FAULT_FAIL": str(tmp / "fail"), "FSYNC_FAULT_SNAP": str(tmp / "snap"),
           "FSYNC_FAULT_LOG": str(tmp / "syncs.log")}
    # a preloaded library ahead of the sanitizer runtime (build-san) is allowed here
    asan = os.environ.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    (tmp / "snap").mkdir()
    return env


def sync_log(tmp):
    try:
        return (tmp / "syncs.log").read_text().splitlines()
    except FileNotFoundError:
        return []


def listed_ids(vd):
    r = http_request(vd.port, "GET", "/v1/jobs?limit=1000", timeout=30)
    assert r.status == 200, r
    doc = r.json()
    assert doc["next_cursor"] is None
    return {j["id"] for j in doc["jobs"]}


class Rounds:
    """Submits jobs and keeps what vramd answered: acked ids (202) and refusals."""

    def __init__(self, vd, tmp):
        self.vd = vd
        self.tmp = tmp
        self.acked = {}    # id -> token
        self.refused = 0
        self.n = 0

    def fail(self, how):
        """how: None (the disk works), "always" (every sync fails), "once" (the next one)."""
        path = self.tmp / "fail"
        if how:
            path.write_text(how)
        elif path.exists():
            path.unlink()

    def quiet(self):
        """Every acked job succeeded: the runner writes nothing to the journal now (so a
        sync failed "once" is the submit's)."""
        def done():
            r = http_request(self.vd.port, "GET", "/v1/jobs?state=succeeded&limit=1000", timeout=30)
            assert r.status == 200, r
            return {j["id"] for j in r.json()["jobs"]} >= set(self.acked)
        wait_for(done, timeout=30, interval=0.1, what="every acked job succeeded")

    def submit(self, count, failing=None):
        """count submits; failing: None, "always" or "once" (before each submit)."""
        if failing == "once":
            self.quiet()
        for _ in range(count):
            self.fail(failing)
            self.n += 1
            token = f"p{self.n:03d}"
            eio_before = sum(1 for line in sync_log(self.tmp) if line.startswith("eio "))
            r = submit(self.vd, {"model": "w", "path": "/work", "body": {"token": token, "ms": 5}})
            if failing:
                assert r.status == 503, r
                assert r.error_code() == "journal_error", r
                assert r.headers.get("retry-after"), r
                eio = sum(1 for line in sync_log(self.tmp) if line.startswith("eio "))
                assert eio > eio_before, "the shim failed no sync: the test did not test"
                # a sync failed once: the journal overwrote the refused job's frames at once
                message = r.error_body().get("message", "")
                settled = "the job is not stored" in message
                assert settled == (failing == "once"), r
                assert settled or "the disk still fails: settling a failed write: disk I/O error;" in message, r
                self.refused += 1
            else:
                assert r.status == 202, r
                self.acked[r.json()["id"]] = token
        # vramd keeps serving while its disk fails
        assert http_request(self.vd.port, "GET", "/healthz", timeout=10).status == 200


def power_cut(state_dir, snap):
    """Every jobs.db* file of state_dir back to its last synced bytes (removed when never
    synced): what the disk holds after the worst power cut."""
    for name in os.listdir(state_dir):
        if not name.startswith("jobs.db"):
            continue
        live = os.path.join(state_dir, name)
        saved = os.path.join(snap, name)
        if os.path.exists(saved):
            shutil.copyfile(saved, live)
        else:
            os.unlink(live)


def kill9(vd):
    vd.proc.send_signal(signal.SIGKILL)
    vd.proc.wait(20)
    vd._close_files()


def test_acked_jobs_survive_failed_and_lost_syncs(vramd, tmp_path):
    log = tmp_path / "worker.log"
    env = shim_env(tmp_path)
    cfg = vramd.config({"w": job_model(vramd, log, concurrency=2, queue_max=64)},
                       jobs={"max_attempts": 10})
    vd = vramd.start(config=cfg, env=env)
    rounds = Rounds(vd, tmp_path)
    settles = 0

    def disk_recovers():
        nonlocal settles
        rounds.fail(None)
        settles += 1
        vd.wait_event("job_journal_settled", count=settles, timeout=10)

    rounds.submit(8)
    rounds.submit(3, failing="always")
    disk_recovers()
    rounds.submit(8)
    # one sync fails: the submit settles it (its frames overwritten by a synced write);
    # the process dies right then and the machine stays up (the page cache keeps every write)
    rounds.submit(2, failing="once")
    kill9(vd)
    vd.start()
    assert listed_ids(vd) == set(rounds.acked), "after kill -9: the journal is not the acked jobs"

    # the disk fails for a while; vramd settles the failed writes once it works again
    rounds.submit(6)
    rounds.submit(2, failing="always")
    disk_recovers()
    kill9(vd)
    vd.start()
    assert listed_ids(vd) == set(rounds.acked), "after kill -9: the journal is not the acked jobs"

    # power cut while the disk fails: only what was synced is left
    rounds.submit(6)
    rounds.submit(1, failing="always")
    kill9(vd)
    rounds.fail(None)
    power_cut(cfg["state_dir"], tmp_path / "snap")
    vd.start()
    got = listed_ids(vd)
    assert got >= set(rounds.acked), f"acked jobs lost at the power cut: {sorted(set(rounds.acked) - got)}"
    assert got == set(rounds.acked), f"refused jobs stored: {sorted(got - set(rounds.acked))}"
    assert sum(1 for line in sync_log(tmp_path) if line.startswith("ok ")) > 0

    def all_succeeded():
        r = http_request(vd.port, "GET", "/v1/jobs?state=succeeded&limit=1000", timeout=30)
        assert r.status == 200, r
        return len(r.json()["jobs"]) == len(rounds.acked)
    wait_for(all_succeeded, timeout=60, interval=0.25, what="every acked job succeeded")
    for jid, token in rounds.acked.items():
        r = http_request(vd.port, "GET", f"/v1/jobs/{jid}/result", timeout=30)
        assert r.status == 200, (token, r)
        assert r.json() == {"token": token, "result": f"R-{token}"}, token
    print(f"acked={len(rounds.acked)} refused={rounds.refused} syncs={len(sync_log(tmp_path))}")


def test_jobs_finish_after_the_disk_recovers(vramd, tmp_path):
    """Jobs running while every sync fails: their ends cannot be recorded (mark succeeded,
    requeue). Once the disk works again, every acked job still ends succeeded, without a
    restart of vramd (no job left `running` in the journal with nothing running it)."""
    log = tmp_path / "worker.log"
    env = shim_env(tmp_path)
    cfg = vramd.config({"w": job_model(vramd, log, concurrency=2, queue_max=64)},
                       jobs={"max_attempts": 10})
    vd = vramd.start(config=cfg, env=env)
    rounds = Rounds(vd, tmp_path)
    acked = []
    for i in range(6):
        r = submit(vd, {"model": "w", "path": "/work", "body": {"token": f"r{i}", "ms": 300}})
        assert r.status == 202, r
        acked.append(r.json()["id"])
    wait_for(lambda: sum(1 for line in log.read_text().splitlines() if line.startswith("start ")) >= 2
             if log.exists() else False, timeout=20, what="two jobs running on the worker")
    rounds.fail("always")
    time.sleep(1.5)  # the running attempts end while their ends cannot be recorded
    rounds.fail(None)
    vd.wait_event("job_journal_settled", timeout=10)
    bad = vd.events("job_journal_error")
    assert bad, "no journal write failed: the test did not test"

    def all_succeeded():
        states = [http_request(vd.port, "GET", f"/v1/jobs/{jid}", timeout=30).json()["state"] for jid in acked]
        return all(s == "succeeded" for s in states) or None
    wait_for(all_succeeded, timeout=30, interval=0.25, what="every acked job succeeded after the disk recovered")
    # the attempts whose end could not be recorded were queued again and ran again
    assert vd.events("job_orphans_requeued"), "no job was left running: the test did not test"
