"""cli: a model whose worker fails at start (issue 36, items 8 and 9).

test_a_failed_start_says_why: a worker that prints an error and exits 126 at each start;
after five failed starts the model is failed. The 503 model_failed body, /v1/status (the
model's last_failure.output) and `vramctl status` carry the worker's last output lines,
and say what retries it. Failed before: the 503 said only "exited with status 126".

test_a_reload_that_fixes_a_failed_model_retries_it: the same failed model; a reload whose
file is unchanged leaves it failed and says so in its answer (`vramctl reload`, and the
JSON's "failed" list); the config fixed (a working cmd) and SIGHUP: the next request is
served. Failed before: the model stayed failed until `vramctl load`.
"""
import json
import signal

from vramdkit import wait_for

from .conftest import vramctl

ERROR_LINE = "fatal: cannot open /models/weights.bin: No such file or directory"


def _broken(vramd):
    cmd = ["/bin/sh", "-c", f"echo 'loading weights'; echo '{ERROR_LINE}' >&2; exit 126"]
    return vramd.worker("w", cmd=cmd, deadline="120s")


def _failed_answer(vd):
    def attempt():
        r = vd.get("/w/echo", timeout=120)
        assert r.status in (502, 503, 504), r
        return r if r.error_code() == "model_failed" else None
    return wait_for(attempt, timeout=90, interval=0.5, what="503 model_failed")


def test_a_failed_start_says_why(vramd):
    vd = vramd.start(models={"w": _broken(vramd)})
    r = _failed_answer(vd)
    message = r.json()["error"]["message"]
    assert "exited with status 126" in message, message
    assert ERROR_LINE in message and "loading weights" in message, message
    assert "vramctl load w" in message and "reload that changes its config" in message, message

    m = vd.model("w")
    assert m["state"] == "failed", m
    assert m["last_failure"]["output"] == ["loading weights", ERROR_LINE], m
    assert "exited with status 126" in m["last_failure"]["reason"], m
    assert "vramctl load w" in m["failed_retry"], m

    p = vramctl("status", url=f"http://127.0.0.1:{vd.port}")
    assert p.returncode == 0, p
    assert ERROR_LINE in p.stdout and "w failed:" in p.stdout and "vramctl load w" in p.stdout, p.stdout


def test_a_reload_that_fixes_a_failed_model_retries_it(vramd):
    vd = vramd.start(models={"w": _broken(vramd)})
    _failed_answer(vd)

    # the same file: the model stays failed, and the reload's answer says so
    p = vramctl("reload", url=f"http://127.0.0.1:{vd.port}")
    assert p.returncode == 0, p
    assert "w stays failed" in p.stdout and "vramctl load w" in p.stdout, p.stdout
    p = vramctl("reload", "--json", url=f"http://127.0.0.1:{vd.port}")
    body = json.loads(p.stdout)
    assert [f["model"] for f in body["failed"]] == ["w"], body
    assert body["failed"][0]["output"][-1] == ERROR_LINE, body
    r = vd.get("/w/echo", timeout=10)
    assert r.status == 503 and r.error_code() == "model_failed", r

    # the config fixed (a working worker), then SIGHUP: the next request starts it
    cfg = dict(vd.config)
    cfg["models"] = {"w": vramd.worker("w")}
    vd.write_config(cfg)
    vd.signal(signal.SIGHUP)
    vd.wait_event("model_failed_cleared", model="w")
    r = vd.get("/w/echo", timeout=60)
    assert r.status == 200, r
    assert vd.model("w")["state"] == "ready"
    assert "last_failure" not in vd.model("w")
    p = vramctl("reload", "--json", url=f"http://127.0.0.1:{vd.port}")
    assert json.loads(p.stdout) == {"reloaded": True, "failed": []}, p.stdout
