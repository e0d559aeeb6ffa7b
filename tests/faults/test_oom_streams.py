"""Streamed answers of a model with OOM detection (issue 34, SPEC 9: streams stream).

Every model here has `preset: llamacpp`, which turns on `degrade` (OOM detection by the
server's text), and is served by simworker's OpenAI chat route: `"stream": true` answers
text/event-stream, chunked, its events spread over the run (--run-time 40 simulated s = 2 s
real: the role event at 0.6 s, then 32 events to 2 s, then `data: [DONE]`).

- a stream reaches the client as the worker sends it: chunked, the first event long before
  the last (before: held whole and sent as one Content-Length body at the end);
- an OOM before the first byte (an HTTP 500 with PyTorch's text: a whole answer, held and
  judged) is retried at the next ladder level, whose answer streams;
- an OOM error event after the first byte (simworker --stream-oom-at, in each of the three
  forms servers write it) ends the stream as the worker ended it (no [DONE]), and counts as a
  held OOM would: the `oom` event (streamed=true), resilience oom_total, the raised estimate,
  vramd_requests_total{outcome="out_of_memory"}, recycle.on_oom's restart;
- limits.max_body bounds what is held only: a stream longer than it passes, a whole answer
  longer than it is still refused (502), and a `validate` model still holds and judges its
  answer whole (a stream is not JSON: invalid_output after its one retry).
"""
import time

import pytest

from vramdkit import open_stream, sim_s, wait_for

from .faultkit import instance_pid, resilience

LIMITS = {"header_timeout": "10s", "queue_max": 1000, "drain_timeout": "20s"}
CHAT = "/{}/v1/chat/completions"


def stream_model(faults, name, flags=(), per_request="1GiB", **overrides):
    worker = ["--resident", "1GiB", "--per-request", per_request, "--cache", "release",
              "--run-time", sim_s(40), *flags]
    m = faults.model(name, worker, "1536MiB", "1GiB", **overrides)
    m["preset"] = "llamacpp"
    m["health"]["path"] = "/health"
    # simworker's cmd names no GGUF file: the env says the stand-in is a single-model server
    # (a cmd naming no model is llama.cpp's router mode, ready only once /models says loaded)
    m.setdefault("env", {})["LLAMA_ARG_MODEL"] = "stand-in.gguf"
    return m


def warm(vd, model):
    """Start the model (on demand) with a short non-streamed answer; its worker's pid."""
    r = vd.post(CHAT.format(model), dict(chat(16), stream=False), timeout=60)
    assert r.status == 200, r
    return instance_pid(vd, model)


def chat(max_tokens=256):
    return {"model": "m", "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello"}]}


def read_stream(vd, model, body):
    """(status, headers, [(t, data)] chunks, t_sent) of one streamed request; raises when the
    answer is not chunked."""
    c = open_stream(vd.port, "POST", CHAT.format(model), body)
    try:
        t0 = time.monotonic()
        status, _, headers = c.read_head()
        h = c.headers
        if "chunked" not in h.get("transfer-encoding", ""):
            body, _ = c.read_body(status, headers)
            pytest.fail(f"not streamed: status {status}, headers {h}, {len(body)} body bytes "
                        f"after {time.monotonic() - t0:.2f}s")
        chunks = list(c.iter_chunks())
        return status, h, chunks, t0
    finally:
        c.close()


def events_of(chunks):
    text = b"".join(d for _, d in chunks).decode()
    return [e for e in text.split("\n\n") if e.strip()]


def test_a_stream_reaches_the_client_as_the_worker_sends_it(faults):
    """Expected: 200 text/event-stream, chunked; the first chunk at least 1 s before the last
    (the worker spreads them over 1.4 s); more than 10 chunks; ending with data: [DONE];
    the request counted ok, no oom."""
    gpu = faults.gpu_set("8GiB")
    vd = faults.start_vramd(gpu, {"s": stream_model(faults, "s")}, limits=LIMITS)
    warm(vd, "s")
    status, h, chunks, t0 = read_stream(vd, "s", chat())
    assert status == 200, h
    assert h["content-type"].startswith("text/event-stream"), h
    first, last = chunks[0][0], chunks[-1][0]
    assert last - first >= 1.0, f"held: first chunk at {first - t0:.2f}s, last at {last - t0:.2f}s"
    assert len(chunks) > 10, len(chunks)
    evs = events_of(chunks)
    assert evs[-1] == "data: [DONE]", evs[-3:]
    assert not vd.events("oom"), vd.events("oom")
    assert not vd.events("stream_incomplete")
    faults.finish()


def test_an_oom_before_the_first_byte_is_degraded_and_the_retry_streams(faults):
    """The worker's real need is 16 GiB x (max_tokens/1024)^2 on an 8 GiB card: max_tokens
    1024 OOMs (HTTP 500, PyTorch's text) before its stream begins; the ladder's level 1 sets
    max_tokens 256 (1 GiB). Expected: 200 streamed (chunked, spread over > 1 s) with
    X-Vramd-Degrade-Level 1 and X-Vramd-Attempts 2, one `oom` (level 0, status 500), and the
    stream complete."""
    gpu = faults.gpu_set("8GiB")
    m = stream_model(faults, "d", flags=("--mem-scale", "max_tokens:1024:2"), per_request="16GiB",
                     degrade={"ladder": [{"set": {"max_tokens": 256}}]})
    vd = faults.start_vramd(gpu, {"d": m}, limits=LIMITS)
    vd.allow_oom.add("d")
    warm(vd, "d")
    status, h, chunks, t0 = read_stream(vd, "d", chat(1024))
    assert status == 200, h
    assert h.get("x-vramd-degrade-level") == "1", h
    assert h.get("x-vramd-attempts") == "2", h
    assert chunks[-1][0] - chunks[0][0] >= 1.0, "the degraded answer was held"
    assert events_of(chunks)[-1] == "data: [DONE]"
    ooms = vd.events("oom", model="d")
    assert [(e["level"], e["status"]) for e in ooms] == [(0, 500)], ooms
    wait_for(lambda: vd.oom_lines("d"), what="the worker's own OOM line")
    faults.finish()


@pytest.mark.parametrize("style", ["event", "data", "llamacpp"])
def test_an_oom_event_mid_stream_ends_it_as_the_worker_did_and_counts(faults, style):
    """simworker --stream-oom-at 5: the 5th chunk event is an OOM error event and the stream
    ends there, without data: [DONE]. Expected: the first chunk well before the end (> 0.25 s:
    4 events at 44 ms apart come first), the error event forwarded as written and the chunked
    body ended cleanly; vramd counts it as a held OOM: `oom` with streamed=true, resilience
    oom_total 1, the per-request estimate raised past the declared 1 GiB,
    vramd_requests_total{outcome="out_of_memory"} 1, and recycle.on_oom restarts the worker
    (the next request is answered by a new worker)."""
    gpu = faults.gpu_set("8GiB")
    m = stream_model(faults, "o", flags=("--stream-oom-at", "5", "--stream-error-style", style),
                     recycle={"on_oom": True})
    vd = faults.start_vramd(gpu, {"o": m}, limits=LIMITS)
    vd.allow_oom.add("o")
    pid = warm(vd, "o")
    status, h, chunks, t0 = read_stream(vd, "o", chat())
    assert status == 200, h
    evs = events_of(chunks)
    assert "out of memory" in evs[-1], evs[-2:]
    assert all("[DONE]" not in e for e in evs), evs
    assert chunks[-1][0] - chunks[0][0] >= 0.1, "held until the stream ended"
    ev = vd.wait_event("oom", model="o")[0]
    assert ev["streamed"] is True and ev["level"] == 0, ev
    assert resilience(vd, "o")["oom_total"] == 1
    assert vd.model("o")["memory"]["per_request_estimate"] > 1024 ** 3
    metrics = vd.get("/metrics").body.decode()
    assert 'vramd_requests_total{model="o",outcome="out_of_memory"} 1' in metrics, \
        [line for line in metrics.splitlines() if line.startswith("vramd_requests_total")]
    vd.wait_event("worker_recycle", model="o")
    wait_for(lambda: not any(i.get("pid") == pid for i in vd.instances("o")),
             what="the recycled worker gone")
    assert warm(vd, "o") != pid
    faults.finish()


def test_max_body_bounds_what_is_held_not_what_streams(faults):
    """limits.max_body 4KiB. The stream (about 7 KB of events) passes whole and as chunks;
    /generate's 64 KiB PNG answer (a whole answer with its length: held for the OOM check)
    is still refused: 502 worker_failed."""
    gpu = faults.gpu_set("8GiB")
    vd = faults.start_vramd(gpu, {"b": stream_model(faults, "b", flags=("--output", "png"))},
                            limits=dict(LIMITS, max_body="4KiB"))
    warm(vd, "b")
    status, h, chunks, _ = read_stream(vd, "b", chat())
    assert status == 200, h
    assert sum(len(d) for _, d in chunks) > 4096
    assert events_of(chunks)[-1] == "data: [DONE]"
    r = vd.post("/b/generate", {"resolution": 64}, timeout=30)
    assert r.status == 502, r
    assert r.error_code() == "worker_failed", r
    faults.finish()


def test_validate_still_holds_and_judges_the_whole_output(faults):
    """validate: {kind: json} on the chat route: the answer is held whole (a stream is no
    exception: the model's own config asks to judge the whole output), and an SSE body is not
    JSON: retried once, then 502 invalid_output; two invalid_output events. A non-streamed
    chat answer (JSON) passes validation: 200 with its Content-Length."""
    gpu = faults.gpu_set("8GiB")
    m = stream_model(faults, "v", validate={"kind": "json"})
    vd = faults.start_vramd(gpu, {"v": m}, limits=LIMITS)
    warm(vd, "v")
    r = vd.post(CHAT.format("v"), chat(), timeout=30)
    assert r.status == 502 and r.error_code() == "invalid_output", r
    assert len(vd.events("invalid_output", model="v")) == 2
    body = dict(chat(), stream=False)
    r = vd.post(CHAT.format("v"), body, timeout=30)
    assert r.status == 200 and "content-length" in r.headers, r
    faults.finish()
