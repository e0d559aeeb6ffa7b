"""Refusals up front: requests that cannot start in time, or can never fit.

SPEC 4: a new request whose predicted start (queue ahead x learned run time, plus load time if
its model is not loaded) is past its deadline gets 503 deadline_unmeetable at once; SPEC 3.4:
a request that can never fit on any allowed GPU gets 422 cannot_fit at once. Neither waits in
the queue, and neither leaves anything in the ledger.
"""
import time

from vramdkit import http_request, sim_s, wait_for

RUN_S = 20  # simulated seconds: 1 s real


def test_deadline_unmeetable_is_refused_at_once(sched):
    """Model slow (concurrency 1) learns its run time from 2 requests (about 1 s real).
    With one request running and one queued, the predicted start of a new one is about
    2 s: a request with X-Vramd-Deadline 1s gets 503 deadline_unmeetable before its
    deadline would have passed (so it was never queued), with retry_after_s > 0 in the
    error body and a Retry-After header; a request with a generous deadline is queued and
    succeeds; the running and queued requests succeed too."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {"slow": sched.model(
        "slow", ["--resident", "700MiB", "--per-request", "1GiB", "--run-time", sim_s(RUN_S)],
        "1GiB", "1GiB")})
    for _ in range(2):
        assert vd.generate("slow").status == 200
    learned = vd.model("slow")["learned_run_ms"]
    assert learned >= 1000, vd.model("slow")

    running = vd.later("slow")
    vd.wait_in_flight("slow")
    queued = vd.later("slow")
    vd.wait_queued("slow")

    t0 = time.monotonic()
    r = vd.generate("slow", headers={"X-Vramd-Deadline": "1s"})
    elapsed = time.monotonic() - t0
    assert r.status == 503, r
    err = r.error_body()
    assert err.get("code") == "deadline_unmeetable", r
    assert err.get("retry_after_s", 0) > 0, err
    assert int(r.headers.get("retry-after", "0")) > 0, r.headers
    assert elapsed < 1.0, f"refused after {elapsed:.2f}s: it waited instead of refusing at once"
    assert vd.model("slow")["deadline_rejections"] == 1

    patient = vd.later("slow", headers={"X-Vramd-Deadline": "60s"})
    for bg in (running, queued, patient):
        rr = bg.result()
        assert rr.status == 200, rr
    vd.assert_no_oom()
    sched.finish()


def test_cannot_fit_is_refused_at_once(sched):
    """Model huge declares 20 GiB resident + 8 GiB per request on a 24 GiB card: its
    requests get 422 cannot_fit immediately, its worker is never started, and the ledger
    stays empty. A model that fits on the same card is unaffected."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "huge": sched.model("huge", ["--resident", "19.7GiB", "--per-request", "8GiB"],
                            "20GiB", "8GiB"),
        "small": sched.model("small", ["--resident", "700MiB", "--per-request", "1GiB",
                                       "--run-time", sim_s(1)], "1GiB", "1GiB"),
    })
    for _ in range(2):
        r = vd.generate("huge")
        assert r.status == 422, r
        assert r.error_body().get("code") == "cannot_fit", r
        assert r.error_body().get("model") == "huge"
        assert r.elapsed < 5.0, r
    assert not vd.events("worker_started", model="huge")
    st = vd.status()
    assert vd.model("huge", st)["instances"] == []
    assert all(not [e for e in g["ledger"] if e["owner"] == "huge"] for g in st["gpus"])
    assert vd.generate("small").status == 200
    # said before any request too: the model shows failed/cannot_fit, its /ready and a load
    # refuse it, and vramd logged it once the first GPU figures were in
    huge = vd.model("huge", vd.status())
    assert huge["state"] == "failed" and huge["failed_code"] == "cannot_fit", huge
    assert "20GiB" in huge["failed_reason"] or "28" in huge["failed_reason"], huge
    assert vd.model("small", vd.status())["state"] != "failed"
    assert [e for e in vd.events("model_cannot_fit") if e["model"] == "huge"]
    assert not [e for e in vd.events("model_cannot_fit") if e["model"] == "small"]
    r = http_request(vd.port, "GET", "/v1/models/huge/ready")
    assert r.status == 503 and r.error_code() == "cannot_fit", r
    r = http_request(vd.port, "POST", "/v1/models/huge/load")
    assert r.status == 422 and r.error_code() == "cannot_fit", r
    assert http_request(vd.port, "GET", "/readyz").status == 200  # small can serve
    sched.finish()


def test_only_model_cannot_fit_is_not_ready(sched):
    """A host whose one model is bigger than any GPU is not ready: /readyz answers 503
    cannot_fit naming the figures, before any request came (the trial's case: /readyz said
    ready and only the first client got 422)."""
    gpu = sched.gpu_set("24GiB")
    vd = sched.start_vramd(gpu, {
        "huge": sched.model("huge", ["--resident", "19.7GiB", "--per-request", "8GiB"],
                            "20GiB", "8GiB")})
    r = wait_for(lambda: (lambda r: r if r.status == 503 and r.error_code() == "cannot_fit" else None)(
        http_request(vd.port, "GET", "/readyz")), timeout=20, what="/readyz 503 cannot_fit")
    assert "huge" in r.error_body().get("message", ""), r
    sched.finish()
