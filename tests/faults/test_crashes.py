"""Workers that die or hang: SIGKILL before the answer and mid-stream, SIGSTOP past
recycle.hang_timeout, and a crash loop that ends in the `failed` state.

Every case ends with faults.check_clean (ledger back to resident reservations only, no
zombie child of vramd, no leaked worker process, descriptors back to the baseline) and
faults.finish (clean SIGTERM exit, no sanitizer report, no log_format_error).
Run times are simulated: simworker --run-time 1s with --time-scale steps:1:1, so a request's
{"steps": N} runs N simulated seconds (N x 50 ms real at the harness's TIMESCALE 0.05).
"""
import json
import os
import signal

from vramdkit import PeerClosed, open_stream, pid_alive, sim_s

from .faultkit import instance_pid, resilience, wait_gone, wait_worker_running

WORKER = ["--resident", "1GiB", "--per-request", "512MiB", "--run-time", sim_s(1),
          "--time-scale", "steps:1:1"]


def simple_model(faults, name, flags=(), **overrides):
    return faults.model(name, [*WORKER, *flags], "1536MiB", "1GiB", **overrides)


def test_sigkill_before_response_is_502_and_next_request_runs_on_a_new_worker(faults):
    """A worker SIGKILLed while its request runs (nothing sent to the client yet):
    expected 502 worker_failed (retry: never, so no second try), the crash is logged
    (worker_exit signal 9, unexpected; worker_failure "crash: killed by signal 9"), and the
    next request succeeds on a restarted worker with a new pid."""
    gpu = faults.gpu_set("16GiB")
    vd = faults.start_vramd(gpu, {"crashy": simple_model(faults, "crashy", retry="never")})
    assert vd.generate("crashy").status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "crashy")

    running = vd.later("crashy", {"steps": 100})     # 5 s real: killed long before its end
    assert wait_worker_running(vd, "crashy") == pid
    os.kill(pid, signal.SIGKILL)
    r = running.result()
    assert r.status == 502, r
    assert r.error_code() == "worker_failed", r
    assert r.error_body().get("model") == "crashy", r

    exited = vd.wait_event("worker_exit", model="crashy", pid=pid)[0]
    assert exited["signal"] == 9 and exited["expected"] is False, exited
    failure = vd.wait_event("worker_failure", model="crashy")[0]
    assert "killed by signal 9" in failure["reason"], failure

    r = vd.generate("crashy")
    assert r.status == 200, r
    assert r.headers.get("x-vramd-attempts") == "1", r.headers
    new_pid = instance_pid(vd, "crashy")
    assert new_pid != pid
    assert not pid_alive(pid)
    faults.check_clean(vd, base)
    faults.finish()


def test_sigkill_mid_stream_cuts_the_client_stream(faults):
    """A streamed chat completion ("stream": true, text/event-stream, re-chunked by vramd)
    whose worker is SIGKILLed after the first SSE event: expected the client sees the 200
    head and the first event, then the connection ends without the last chunk and without
    "data: [DONE]" (an incomplete response, never a fake success). The next request (not
    streamed) succeeds on a restarted worker."""
    gpu = faults.gpu_set("16GiB")
    vd = faults.start_vramd(gpu, {"chat": simple_model(faults, "chat")})
    r = vd.post("/chat/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200, r
    base = faults.baseline(vd)
    pid = instance_pid(vd, "chat")

    body = {"messages": [{"role": "user", "content": "tell me"}], "stream": True,
            "max_tokens": 64, "steps": 100}    # 5 s real; the stream starts at 30 %
    s = open_stream(vd.port, "POST", "/chat/v1/chat/completions", body, timeout=60.0)
    try:
        assert s.read_head()[0] == 200, s.headers
        assert s.headers.get("content-type", "").startswith("text/event-stream"), s.headers
        assert "chunked" in s.headers.get("transfer-encoding", ""), s.headers
        got = b""
        while b"\n\n" not in got:              # the first whole SSE event
            chunk = s.read_chunk()
            assert chunk is not None, f"stream ended normally after {got!r}"
            got += chunk
        assert got.startswith(b"data: "), got
        os.kill(pid, signal.SIGKILL)
        cut = False
        try:
            while True:
                chunk = s.read_chunk()
                if chunk is None:
                    break                       # a final chunk: the stream was ended as complete
                got += chunk
        except PeerClosed:
            cut = True
        assert cut, f"the stream ended with a final chunk after the worker died: {got!r}"
        assert b"[DONE]" not in got, got
    finally:
        s.close()

    exited = vd.wait_event("worker_exit", model="chat", pid=pid)[0]
    assert exited["signal"] == 9, exited
    r = vd.post("/chat/v1/chat/completions", {"messages": [{"role": "user", "content": "again"}]})
    assert r.status == 200, r
    assert r.json()["object"] == "chat.completion", r
    assert instance_pid(vd, "chat") != pid
    faults.check_clean(vd, base)
    faults.finish()


def test_sigstop_hang_is_504_and_the_instance_is_replaced(faults):
    """A worker SIGSTOPped while its request runs (a normal run would take 0.5 s) with
    recycle.hang_timeout 2s: expected 504 worker_hang once the timeout passes, worker_hang
    and worker_kill ("request hang") logged, the stopped process SIGKILLed (its pid gone),
    resilience.hangs_total 1, and the next request succeeds on a new instance (new pid)."""
    gpu = faults.gpu_set("16GiB")
    vd = faults.start_vramd(gpu, {"hangy": simple_model(faults, "hangy",
                                                        recycle={"hang_timeout": "2s"})})
    assert vd.generate("hangy").status == 200
    base = faults.baseline(vd)
    pid = instance_pid(vd, "hangy")

    running = vd.later("hangy", {"steps": 10})
    assert wait_worker_running(vd, "hangy") == pid
    os.kill(pid, signal.SIGSTOP)
    try:
        r = running.result()
    finally:
        try:
            os.kill(pid, signal.SIGCONT)   # in case vramd did not kill it
        except ProcessLookupError:
            pass
    assert r.status == 504, r
    assert r.error_code() == "worker_hang", r
    hang = vd.wait_event("worker_hang", model="hangy")[0]
    assert hang["pid"] == pid and hang["hang_timeout_ms"] == 2000, hang
    kill = vd.wait_event("worker_kill", model="hangy", pid=pid)[0]
    assert kill["reason"] == "request hang", kill
    wait_gone([pid], what="the hung worker")
    assert resilience(vd, "hangy")["hangs_total"] == 1

    r = vd.generate("hangy", {"steps": 2})
    assert r.status == 200, r
    assert instance_pid(vd, "hangy") != pid
    faults.check_clean(vd, base)
    faults.finish()


def test_crash_loop_backs_off_then_fails_then_admin_load_recovers(faults):
    """A model whose worker exits at start (a bad flag), asked for by one request: the
    request stays queued while vramd restarts the worker with backoff. Expected
    worker_failure events with growing backoff_ms (1000, 2000, 4000, 8000: each double the
    one before), then after the 5th failure within 10 min model_state -> failed; the queued
    request and a new one both get 503 model_failed. A config reload that changes the
    model's entry (a good cmd, POST /v1/admin/reload) is the admin's fix: it clears `failed`
    (issue 36 item 8; SPEC 5's "until an admin loads it" read as "until an admin acts on it":
    a reload that leaves the entry unchanged keeps it failed, test_failed_model.py);
    POST /v1/models/NAME/load then answers 200 with the model ready, a
    request succeeds, and after an admin unload vramd is back to its descriptor baseline
    (taken before the first start, with no worker)."""
    gpu = faults.gpu_set("16GiB")
    good = simple_model(faults, "loop")
    bad = dict(good, cmd=[*good["cmd"], "--no-such-flag"])
    vd = faults.start_vramd(gpu, {"loop": bad})
    base = faults.baseline(vd)

    queued = vd.later("loop", timeout=90)
    vd.wait_event("model_state", timeout=60, model="loop", to="failed")
    r = queued.result()
    assert r.status == 503 and r.error_code() == "model_failed", r
    failures = vd.events("worker_failure", model="loop")
    assert len(failures) == 5, [f["backoff_ms"] for f in failures]
    delays = [f["backoff_ms"] for f in failures[:4]]
    assert delays == [1000, 2000, 4000, 8000], delays
    assert all(f["reason"].startswith("start failed") for f in failures), failures
    assert [f["consecutive"] for f in failures] == [1, 2, 3, 4, 5], failures
    assert vd.model("loop")["state"] == "failed"
    r = vd.generate("loop")
    assert r.status == 503 and r.error_code() == "model_failed", r

    # fix the cause: the same model with a good command line
    cfg = json.loads(vd.config_path.read_text())
    cfg["models"]["loop"] = good
    vd.config_path.write_text(json.dumps(cfg, indent=1) + "\n")
    r = vd.post("/v1/admin/reload")
    assert r.status == 200, r
    assert vd.model("loop")["state"] == "stopped", "a reload that fixed the entry left it failed"
    r = vd.post("/v1/models/loop/load", timeout=60)
    assert r.status == 200, r
    assert r.json().get("state") == "ready", r
    r = vd.generate("loop")
    assert r.status == 200, r
    r = vd.post("/v1/models/loop/unload", timeout=60)
    assert r.status == 200, r
    vd.wait_model("loop", lambda m: m["state"] == "stopped" and not m["instances"],
                  what="loop stopped")
    faults.check_clean(vd, base)
    faults.finish()
