"""test_jobs_gpu: jobs on a simulated GPU (simgpu + libnvidia-ml-sim + simworker), where the
memory ledger is real.

  - a job for a model that can never fit the card is refused at submit with 422 cannot_fit,
    exactly as a synchronous request would be;
  - a job runs through the same admission as a synchronous request: it is placed on GPU 0,
    its result is the worker's GLB with its content type, and GET shows the GPU;
  - cancelling a running job closes its upstream request and leaves no reservation: the
    ledger goes back to resident reservations only.
The harness (tests/lib/vramdkit/harness.py) checks at the end: ledger resident-only, no OOM,
clean exit 0, no sanitizer report, no simworker left.
"""
from vramdkit import sim_s, wait_for
from vramdkit.harness import sched  # noqa: F401  (fixture)


def job_state(vd, jid):
    r = vd.request("GET", f"/v1/jobs/{jid}")
    assert r.status == 200, r
    return r.json()


def test_jobs_share_admission_with_synchronous_requests(sched):
    gpu = sched.gpu_set("24GiB")
    m = sched.model("m", ["--resident", "2.7GiB", "--per-request", "4GiB", "--cache", "release",
                          "--run-time", sim_s(4), "--time-scale", "steps:1:1", "--output", "glb"],
                    "3GiB", "4GiB")
    big = sched.model("big", ["--resident", "20GiB"], "20GiB", "8GiB")
    vd = sched.start_vramd(gpu, {"m": m, "big": big})

    r = vd.post("/v1/jobs", {"model": "big", "path": "/generate", "body": {}})
    assert r.status == 422 and r.json()["error"]["code"] == "cannot_fit", r

    r = vd.post("/v1/jobs", {"model": "m", "path": "/generate", "body": {"steps": 1}})
    assert r.status == 202, r
    jid = r.json()["id"]
    j = wait_for(lambda: (lambda s: s if s["state"] in ("succeeded", "failed") else None)(job_state(vd, jid)),
                 timeout=60, what="the job to end")
    assert j["state"] == "succeeded", j
    assert j["gpu"] == 0 and j["result"]["content_type"] == "model/gltf-binary", j
    res = vd.request("GET", f"/v1/jobs/{jid}/result")
    assert res.status == 200 and res.body[:4] == b"glTF" and len(res.body) == j["result"]["bytes"]

    # a long job: cancel it while it runs; its reservation must go
    r = vd.post("/v1/jobs", {"model": "m", "path": "/generate", "body": {"steps": 100}})
    jid = r.json()["id"]
    wait_for(lambda: job_state(vd, jid)["state"] == "running", timeout=30, what="the long job running")
    vd.wait_in_flight("m", 1)
    r = vd.request("DELETE", f"/v1/jobs/{jid}")
    assert r.status == 200 and r.json()["was"] == "running", r
    wait_for(lambda: vd.model("m")["in_flight"] == 0, timeout=20, what="the cancelled job's request gone")
    vd.assert_ledger_clean()
    assert job_state(vd, jid)["state"] == "cancelled"
    sched.finish()
