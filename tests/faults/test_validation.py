"""Output validation (SPEC 5): a 2xx answer that fails the declared validator is retried
once, then answered 502 invalid_output; a retry that passes is delivered (200,
X-Vramd-Attempts: 2). Validators: the built-in structural ones (glb, ply, png, json),
min_bytes, a JSON value declared as a false success, and an external command (body on
stdin, exit 0 = valid, killed at validate.timeout).

simworker --corrupt-every N breaks every Nth output, cycling through the kinds of breakage
of its format (glb: truncated, wrong total length, bad magic, unparsable JSON chunk,
accessor outside its buffer, empty; ply: truncated, header count larger than the data, bad
magic, empty; png: truncated, bad CRC, bad signature, empty; json: truncated, not JSON,
empty) and logs each as "corrupt_output" (which vramd's log carries as worker_output).
Every case ends with faults.check_clean and faults.finish (see test_crashes.py).
"""
from vramdkit import sim_s, wait_for

from .faultkit import resilience

# kind -> (number of broken variants simworker cycles through, magic at the start of a good body)
KINDS = {"glb": (6, b"glTF"), "ply": (4, b"ply\n"), "png": (4, b"\x89PNG\r\n\x1a\n"),
         "json": (3, b"{")}


def output_model(faults, name, kind, corrupt_every, **overrides):
    flags = ["--output", kind, "--output-size", "8KiB", "--run-time", sim_s(0.2)]
    if corrupt_every:
        flags += ["--corrupt-every", str(corrupt_every)]
    return faults.model(name, flags, "512MiB", "256MiB", **overrides)


def corrupt_lines(vd, model):
    return [e["line"] for e in vd.events("worker_output", model=model)
            if "corrupt_output" in e["line"]]


def test_every_output_corrupt_is_retried_once_then_502_invalid_output(faults):
    """--corrupt-every 1 with validate: glb | ply | png | json: expected every request to
    answer 502 invalid_output whose message names 2 attempts, two invalid_output events per
    request (retries 0 then 1), resilience invalid_total 2 per request, and every broken
    output the worker produced (one corrupt_output line each; enough requests to cycle
    through all its variants) caught: corrupt_output lines == invalid_output events."""
    gpu = faults.gpu_set("16GiB")
    models = {k: output_model(faults, k, k, 1, validate=k) for k in KINDS}
    vd = faults.start_vramd(gpu, models)
    base = None

    for kind, (variants, _) in KINDS.items():
        requests = (variants + 1) // 2          # two outputs per request
        for i in range(requests):
            r = vd.generate(kind)
            assert r.status == 502, (kind, i, r)
            assert r.error_code() == "invalid_output", (kind, r)
            assert "2 attempts" in r.error_body()["message"], r
            if base is None:
                base = faults.baseline(vd)
        inv = vd.events("invalid_output", model=kind)
        assert [e["retries"] for e in inv] == [0, 1] * requests, (kind, inv)
        assert all(e["status"] == 200 for e in inv), inv
        assert resilience(vd, kind)["invalid_total"] == 2 * requests
        # the worker's lines reach vramd's log through its stderr pipe, maybe after the answer
        wait_for(lambda: len(corrupt_lines(vd, kind)) >= len(inv),
                 what=f"{kind}'s corrupt_output lines")
        lines = corrupt_lines(vd, kind)
        assert len(lines) == len(inv), (kind, lines, inv)
        variants_seen = {line.rsplit("variant=", 1)[1] for line in lines}
        assert len(variants_seen) == variants, (kind, variants_seen)
    faults.check_clean(vd, base)
    faults.finish()


def test_every_second_output_corrupt_the_retry_succeeds(faults):
    """--corrupt-every 2 with validate: glb | ply | png: the first request gets the good
    output 1 (200, X-Vramd-Attempts: 1); the second gets broken output 2, is retried once
    and gets good output 3: expected 200 with X-Vramd-Attempts: 2 and a body in the right
    format, one invalid_output event (retries 0), invalid_total 1, one request_retry with
    reason "invalid output"."""
    gpu = faults.gpu_set("16GiB")
    kinds = ("glb", "ply", "png")
    vd = faults.start_vramd(gpu, {k: output_model(faults, k, k, 2, validate=k) for k in kinds})
    base = None
    for kind in kinds:
        magic = KINDS[kind][1]
        r = vd.generate(kind)
        assert r.status == 200, (kind, r)
        assert r.headers.get("x-vramd-attempts") == "1", r.headers
        if base is None:
            base = faults.baseline(vd)
        r = vd.generate(kind)
        assert r.status == 200, (kind, r)
        assert r.headers.get("x-vramd-attempts") == "2", (kind, r.headers)
        assert r.body.startswith(magic), (kind, r.body[:16])
        inv = vd.events("invalid_output", model=kind)
        assert [e["retries"] for e in inv] == [0], inv
        assert resilience(vd, kind)["invalid_total"] == 1
        retries = vd.events("request_retry", model=kind)
        assert [e["reason"] for e in retries] == ["invalid output"], retries
        wait_for(lambda: corrupt_lines(vd, kind), what=f"{kind}'s corrupt_output line")
        assert len(corrupt_lines(vd, kind)) == 1
    faults.check_clean(vd, base)
    faults.finish()


def test_empty_200_and_score_zero_are_invalid(faults):
    """Field failures simworker cannot produce, served by faultworker.py:
    - an empty 200 (a worker that skipped the work) with validate {kind: none,
      min_bytes: 1}: expected 502 invalid_output after 2 attempts, reason names 0 bytes;
    - a false success {"score": 0} with validate {kind: json, json: {path: /score,
      equals: 0}}: expected 502 invalid_output after 2 attempts; {"score": 0.8} from the
      same worker is delivered (200, attempts 1)."""
    gpu = faults.gpu_set("16GiB")
    models = {
        "skip": faults.faultworker_model("skip", validate={"kind": "none", "min_bytes": 1}),
        "scored": faults.faultworker_model("scored", validate={
            "kind": "json", "json": {"path": "/score", "equals": 0}}),
    }
    vd = faults.start_vramd(gpu, models)
    r = vd.post("/scored/score", {"score": 0.8})
    assert r.status == 200 and r.json()["score"] == 0.8, r
    r = vd.post("/skip/score", {"score": 1})
    assert r.status == 200, r
    base = faults.baseline(vd)

    r = vd.post("/skip/empty", {})
    assert r.status == 502 and r.error_code() == "invalid_output", r
    assert "2 attempts" in r.error_body()["message"], r
    inv = vd.events("invalid_output", model="skip")
    assert len(inv) == 2 and all(e["bytes"] == 0 for e in inv), inv
    assert "0 bytes" in inv[0]["reason"], inv

    r = vd.post("/scored/score", {"score": 0})
    assert r.status == 502 and r.error_code() == "invalid_output", r
    assert "2 attempts" in r.error_body()["message"], r
    inv = vd.events("invalid_output", model="scored")
    assert len(inv) == 2 and "/score" in inv[0]["reason"], inv
    r = vd.post("/scored/score", {"score": 0.8})
    assert r.status == 200 and r.headers.get("x-vramd-attempts") == "1", r
    assert resilience(vd, "scored")["invalid_total"] == 2
    assert resilience(vd, "skip")["invalid_total"] == 2
    faults.check_clean(vd, base)
    faults.finish()


def test_external_validator_commands(faults):
    """validate {cmd: [...]} runs the command with the body on stdin; exit 0 = valid:
    - [sleep, "10"] with timeout 500ms: expected 502 invalid_output after 2 attempts
      ("validator timed out after 500 ms"), and no validator process left (check_clean:
      every live child of vramd is a listed instance, no zombie);
    - sh -c "grep -q '\"success\": true'" (reads the body): expected 200;
    - [true] (exits without reading its stdin; a 256 KiB PLY body, more than a pipe
      holds): expected 200;
    - sh -c "grep -q NOT-THERE": expected 502 invalid_output ("validator exited with
      status 1")."""
    gpu = faults.gpu_set("16GiB")

    def model(name, cmd, timeout="10s", kind="json", size="8KiB"):
        m = output_model(faults, name, kind, 0, validate={"cmd": cmd, "timeout": timeout})
        m["cmd"] += ["--output-size", size]
        return m
    models = {
        "slow": model("slow", ["sleep", "10"], timeout="500ms"),
        "good": model("good", ["/bin/sh", "-c", "grep -q '\"success\": true'"]),
        "deaf": model("deaf", ["true"], kind="ply", size="256KiB"),
        "bad": model("bad", ["/bin/sh", "-c", "grep -q NOT-THERE"]),
    }
    vd = faults.start_vramd(gpu, models)
    r = vd.generate("good")
    assert r.status == 200 and r.json()["success"] is True, r
    base = faults.baseline(vd)

    r = vd.generate("slow")
    assert r.status == 502 and r.error_code() == "invalid_output", r
    assert "2 attempts" in r.error_body()["message"], r
    inv = vd.events("invalid_output", model="slow")
    assert [e["reason"] for e in inv] == ["validator timed out after 500 ms"] * 2, inv

    r = vd.generate("deaf")
    assert r.status == 200, r
    assert len(r.body) > 128 * 1024 and r.body.startswith(b"ply\n"), r.body[:64]
    assert r.headers.get("x-vramd-attempts") == "1", r.headers

    r = vd.generate("bad")
    assert r.status == 502 and r.error_code() == "invalid_output", r
    inv = vd.events("invalid_output", model="bad")
    assert [e["reason"] for e in inv] == ["validator exited with status 1"] * 2, inv

    r = vd.generate("good")
    assert r.status == 200 and r.headers.get("x-vramd-attempts") == "1", r
    faults.check_clean(vd, base)
    faults.finish()
