"""e2e: end-to-end deadlines (issue 22): the model key `total_deadline` and the header
X-Vramd-Total-Deadline bound a request from its arrival to the last byte of its answer.

Covered, each with what is expected:
- passing while the worker runs it, nothing sent yet: 504 deadline_exceeded with
  "stage":"running", the worker sees its connection closed (testworker's disconnect count),
  the slot is free again and the next request is served; counted in
  vramd_deadline_expiries_total{stage="running"} and /v1/status deadline_expiries;
- passing while queued: 504 deadline_exceeded with "stage":"queued" (the queue bound
  X-Vramd-Deadline answers with the same stage), counted as queued;
- passing while a streamed answer flows: the client's connection is cut before the last
  chunk, the worker sees its connection closed, logged total_deadline_passed streamed=true;
- the header is capped at max_client_deadline (logged deadline_capped bound=total);
- a malformed or zero header is 400 bad_request naming X-Vramd-Total-Deadline; a malformed
  key fails --check-config naming total_deadline;
- an answer held for a verdict (validate: json while it streams in; a validate.cmd still
  judging it): 504 stage running, never a cut, the validator stopped, the slots free;
- on a simulated GPU (simworker --run-time): the request's memory reservation is released
  when the bound passes mid-run (the ledger holds resident reservations only at once); a
  bound its predicted start already passes is refused at once (503 deadline_unmeetable).
"""
import re
import threading

from vramdkit import PeerClosed, RawConn, build_request, http_request, wait_for
from vramdkit.daemon import ledger_is_resident_only
from vramdkit.harness import sched  # noqa: F401  (fixture)
from vramdkit.sim import sim_s


def start_warm(vramd, **kw):
    """One testworker model "w" (concurrency 1) whose worker answered once."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=1, **kw)})
    wait_for(lambda: vd.get("/w/echo?warm=1").status == 200, timeout=30, what="the worker warm")
    return vd


def disconnects(vd):
    return http_request(vd.worker_port("w"), "GET", "/count", timeout=5).json()["disconnects"]


def expiries(vd, stage):
    """vramd_deadline_expiries_total{model="w",stage=...} from /metrics."""
    text = vd.get("/metrics").body.decode()
    m = re.search(r'^vramd_deadline_expiries_total\{model="w",stage="%s"\} (\d+)$' % stage, text, re.M)
    assert m, f"no vramd_deadline_expiries_total for w/{stage} in /metrics"
    return int(m.group(1))


def test_running_past_total_deadline_is_504_and_upstream_closed(vramd):
    """Model total_deadline 1s; /slow?ms=8000 runs past it: 504 deadline_exceeded, stage
    running, the model named; the worker sees the connection closed (it would answer 200
    after 8 s otherwise); in_flight back to 0; the next request (without a slow worker) is
    served; one running expiry in /metrics and /v1/status, none queued."""
    vd = start_warm(vramd, total_deadline="1s")
    before = disconnects(vd)
    r = vd.get("/w/slow?ms=8000")
    assert r.status == 504, r
    err = r.error_body()
    assert err.get("code") == "deadline_exceeded" and err.get("stage") == "running", err
    assert err.get("model") == "w", err
    wait_for(lambda: disconnects(vd) > before, timeout=10, what="the worker to see its connection closed")
    assert vd.model("w")["in_flight"] == 0
    assert vd.get("/w/echo?tag=next").status == 200
    ev = vd.events("total_deadline_passed")
    assert len(ev) == 1 and ev[0]["streamed"] is False and ev[0]["total_ms"] == 1000, ev
    assert expiries(vd, "running") == 1 and expiries(vd, "queued") == 0
    assert vd.model("w")["deadline_expiries"] == {"queued": 0, "running": 1}


def test_queued_past_total_deadline_is_504_stage_queued(vramd):
    """With the only slot busy (/slow?ms=4000, no total bound), a request with
    X-Vramd-Total-Deadline 1s waits in the queue until its bound passes: 504
    deadline_exceeded, stage queued; a queue deadline (X-Vramd-Deadline 500ms) that passes
    answers with the same stage; the busy request still ends 200; two queued expiries."""
    vd = start_warm(vramd)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("busy", vd.get("/w/slow?ms=4000")), daemon=True)
    t.start()
    wait_for(lambda: vd.model("w")["in_flight"] == 1, timeout=15, what="the busy request running")
    r = vd.get("/w/echo?tag=total", headers={"X-Vramd-Total-Deadline": "1s"})
    assert r.status == 504, r
    assert r.error_body().get("code") == "deadline_exceeded" and r.error_body().get("stage") == "queued", r
    r = vd.get("/w/echo?tag=queue", headers={"X-Vramd-Deadline": "500ms"})
    assert r.status == 504 and r.error_body().get("stage") == "queued", r
    t.join(30)
    assert out["busy"].status == 200, out
    assert expiries(vd, "queued") == 2 and expiries(vd, "running") == 0
    targets = vd.get("/w/count").json()["targets"]
    assert not any("tag=total" in k or "tag=queue" in k for k in targets), targets


def test_streamed_answer_cut_at_total_deadline(vramd):
    """A chunked answer of 20 chunks 300 ms apart (6 s) with X-Vramd-Total-Deadline 1s: the
    head (200) and the first chunks arrive, then the connection is closed before the last
    chunk; the worker sees its connection closed; logged total_deadline_passed
    streamed=true; one running expiry."""
    vd = start_warm(vramd)
    before = disconnects(vd)
    with RawConn(vd.port) as c:
        c.send(build_request("GET", "/w/stream?chunks=20&ms=300", headers={"X-Vramd-Total-Deadline": "1s"}))
        status, _, headers = c.read_head()
        assert status == 200, (status, headers)
        got = []
        cut = False
        try:
            for _, data in c.iter_chunks(timeout=20):
                got.append(data)
        except PeerClosed:
            cut = True
    assert cut, f"the stream ended cleanly after {len(got)} chunks: it was not cut"
    assert len(got) < 20, got
    wait_for(lambda: disconnects(vd) > before, timeout=10, what="the worker to see its connection closed")
    ev = vd.events("total_deadline_passed")
    assert len(ev) == 1 and ev[0]["streamed"] is True, ev
    assert expiries(vd, "running") == 1
    wait_for(lambda: vd.model("w")["in_flight"] == 0, timeout=10, what="the slot released")


def test_total_deadline_header_is_capped(vramd):
    """max_client_deadline 2s (and deadline 2s): a client asking X-Vramd-Total-Deadline 60s
    gets 2s: /slow?ms=10000 ends 504 stage running, not 200, and deadline_capped says
    bound=total asked_ms=60000 deadline_ms=2000."""
    vd = start_warm(vramd, deadline="2s", max_client_deadline="2s")
    r = vd.get("/w/slow?ms=10000", headers={"X-Vramd-Total-Deadline": "60s"})
    assert r.status == 504 and r.error_body().get("stage") == "running", r
    ev = vd.events("deadline_capped", bound="total")
    assert len(ev) == 1 and ev[0]["asked_ms"] == 60000 and ev[0]["deadline_ms"] == 2000, ev


def test_bad_total_deadline_header_and_key(vramd):
    """X-Vramd-Total-Deadline "soon" and "0": 400 bad_request whose message names the
    header; nothing reaches the worker. total_deadline: soon in a config: --check-config
    fails naming models.w.total_deadline."""
    vd = start_warm(vramd)
    for value in ("soon", "0", "x" * 80):
        r = vd.get("/w/echo?tag=bad", headers={"X-Vramd-Total-Deadline": value})
        assert r.status == 400, r
        err = r.error_body()
        assert err.get("code") == "bad_request" and "X-Vramd-Total-Deadline" in err.get("message", ""), err
    assert not any("tag=bad" in k for k in vd.get("/w/count").json()["targets"])
    _, p = vramdkit_check(vramd, "models:\n  w:\n    route: /w/\n    url: http://127.0.0.1:9\n"
                                 "    total_deadline: soon\n")
    assert p.returncode != 0 and "total_deadline" in (p.stdout + p.stderr), (p.stdout, p.stderr)
    _, p = vramdkit_check(vramd, "models:\n  w:\n    route: /w/\n    url: http://127.0.0.1:9\n"
                                 "    total_deadline: 90s\n", name="good.yaml")
    assert p.returncode == 0, (p.stdout, p.stderr)


def vramdkit_check(vramd, text, name="check.yaml"):
    return vramd.check_config(text, name=name)


def test_reservation_released_when_total_deadline_passes(sched):  # noqa: F811
    """simworker (1 GiB per request, a 6 s run) behind X-Vramd-Total-Deadline 1s, after a
    plain request that loaded it: 504 stage running, and at that moment /v1/status books no
    request memory (resident only) and nothing is in flight."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"slow": sched.model(
        "slow", ["--resident", "700MiB", "--per-request", "1GiB", "--run-time", sim_s(120)], "1GiB", "1GiB")})
    vd.generate("slow", headers={"X-Vramd-Deadline": "100ms"})  # starts the worker (a queued 504 or a 200)
    vd.wait_ready("slow", timeout=30)
    r = vd.generate("slow", headers={"X-Vramd-Total-Deadline": "1s"})
    assert r.status == 504 and r.error_body().get("stage") == "running", r
    st = vd.status()
    assert ledger_is_resident_only(st), st["gpus"]
    assert vd.model("slow", st)["in_flight"] == 0
    assert vd.model("slow", st)["deadline_expiries"]["running"] == 1
    sched.finish()


def test_total_deadline_unmeetable_is_refused_at_once(sched):  # noqa: F811
    """Model slow (1 s real runs, learned from 2 requests) with one request running and one
    queued: the predicted start of a new one is about 2 s, past X-Vramd-Total-Deadline 1s,
    so it is refused at once with 503 deadline_unmeetable (not queued to expire later), as
    a queue deadline would be; counted in deadline_rejections, not as an expiry. The
    running and queued requests still end 200."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"slow": sched.model(
        "slow", ["--resident", "700MiB", "--per-request", "1GiB", "--run-time", sim_s(20)], "1GiB", "1GiB")})
    for _ in range(2):
        assert vd.generate("slow").status == 200
    running = vd.later("slow")
    vd.wait_in_flight("slow")
    queued = vd.later("slow")
    vd.wait_queued("slow")
    r = vd.generate("slow", headers={"X-Vramd-Total-Deadline": "1s"})
    assert r.status == 503 and r.error_code() == "deadline_unmeetable", r
    m = vd.model("slow")
    assert m["deadline_rejections"] == 1 and m["deadline_expiries"] == {"queued": 0, "running": 0}, m
    for bg in (running, queued):
        assert bg.result().status == 200
    sched.finish()


def test_held_answer_and_validator_past_total_deadline(vramd):
    """Answers held for a verdict never reached the client, so the bound passing is a 504
    stage running, not a cut: (1) validate: json and a 20 x 300 ms chunked answer (held
    while it streams in) with X-Vramd-Total-Deadline 1s; (2) validate.cmd `sleep 30` judging
    a quick answer with X-Vramd-Total-Deadline 2s, once its worker is ready: the validator
    is stopped and both slots are free."""
    vd = vramd.start(models={
        "w": vramd.worker("w", route="/w/", concurrency=1, validate="json"),
        "v": vramd.worker("v", route="/v/", concurrency=1, validate={"cmd": ["sleep", "30"], "timeout": "60s"}),
    })
    wait_for(lambda: vd.get("/w/echo?warm=1").status == 200, timeout=30, what="the worker warm")
    r = vd.get("/w/stream?chunks=20&ms=300", headers={"X-Vramd-Total-Deadline": "1s"})
    assert r.status == 504 and r.error_body().get("stage") == "running", r
    # start v's worker: this first request's bound passes queued (the start) or running
    assert vd.get("/v/echo?tag=warm", headers={"X-Vramd-Total-Deadline": "500ms"}).status == 504
    vd.wait_ready("v", timeout=30)
    before = vd.model("v")["deadline_expiries"]["running"]
    r = vd.get("/v/echo?tag=validated", headers={"X-Vramd-Total-Deadline": "2s"})
    assert r.status == 504 and r.error_body().get("stage") == "running", r
    ev = vd.events("total_deadline_passed")
    assert ev and not any(e["streamed"] for e in ev), ev
    assert vd.model("w")["in_flight"] == 0 and vd.model("v")["in_flight"] == 0
    assert vd.model("w")["deadline_expiries"]["running"] == 1
    assert vd.model("v")["deadline_expiries"]["running"] == before + 1
