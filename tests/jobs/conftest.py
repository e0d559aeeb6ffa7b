"""conftest: fixtures and helpers for vramd's durable-job tests (SPEC 3.2, docs/jobs.md).

vramd: the end-to-end daemon factory (tests/lib/vramdkit/factory.py, the one tests/e2e uses),
with the kit's report hook, so a failing test shows the daemon's log tail and teardown checks
exit 0 on SIGTERM, no sanitizer report, no log_format_error.

Helpers:
  - job_model(factory, log, **overrides): a supervised tests/jobs/jobworker.py model whose
    events (start/done/closed per token) go to the file `log`;
  - worker_events(log): [(event, token)] read from that file;
  - submit(vd, doc): POST /v1/jobs, returns the Resp;
  - job(vd, id): GET /v1/jobs/{id} as a dict;
  - wait_job(vd, id, states): poll until the job is in one of states; returns the dict;
  - restart_killed(vd): kill -9 the daemon and start it again on the same config and
    state_dir (the log keeps growing in the same file).

Every wait is a poll with a deadline.
Run: /usr/bin/python3 -m pytest tests/jobs                        (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/jobs  (after `make SAN=1`)
"""
import json
import os
import signal
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit import PYTHON, http_request, wait_for  # noqa: E402
from vramdkit.factory import vramd  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)

JOBWORKER = str(Path(__file__).resolve().parent / "jobworker.py")


def job_model(factory, log, route="/w/", **overrides):
    m = {
        "route": route,
        "cmd": [PYTHON, JOBWORKER, "--port", "{port}", "--name", f"jobs@{factory.tag}", "--log", str(log)],
        "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2},
        "startup_timeout": "20s",
        "stop_timeout": "2s",
        "concurrency": 4,
        "queue_max": 32,
        "deadline": "60s",
        "keep_alive": "10m",
    }
    m.update(overrides)
    return m


def worker_events(log):
    try:
        text = Path(log).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        event, _, token = line.partition(" ")
        if token:
            out.append((event, token))
    return out


def submit(vd, doc, headers=None):
    body = json.dumps(doc).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return http_request(vd.port, "POST", "/v1/jobs", h, body, timeout=30)


def job(vd, job_id, headers=None):
    r = http_request(vd.port, "GET", f"/v1/jobs/{job_id}", headers, timeout=30)
    assert r.status == 200, r
    return r.json()


def wait_job(vd, job_id, states, timeout=30.0):
    if isinstance(states, str):
        states = (states,)
    last = {}

    def check():
        last["job"] = job(vd, job_id)
        return last["job"] if last["job"]["state"] in states else None
    try:
        return wait_for(check, timeout=timeout, what=f"job {job_id} in {states}")
    except BaseException:
        print("last seen:", last.get("job"))
        raise


def restart_killed(vd):
    vd.proc.send_signal(signal.SIGKILL)
    vd.proc.wait(20)
    vd._close_files()
    return vd.start()


def pid_gone(pid):
    try:
        os.kill(pid, 0)
        return False
    except OSError:
        return True
