"""Per-model worker logs: GET /v1/models/NAME/logs and `vramctl logs MODEL [-n N] [-f]`
against a vramd supervising a testworker that writes one stderr line per request (and its
"listening" line on stdout). The ring is bounded by limits.worker_log_lines: older lines
go, a cursor past them reports them as missed."""
import json
import subprocess
import time

from vramdkit import wait_for

from .conftest import clean_env, vramctl, vramctl_binary

TOKEN = "logs-token-0123456789"


def start(vramd, tmp_path, lines=5):
    token = tmp_path / "admin.token"
    token.write_text(TOKEN + "\n")
    # health checks only while starting (each is a worker line too)
    health = {"path": "/health", "interval": "1h", "timeout": "1s", "failures": 2}
    vd = vramd.start(models={"echo": vramd.worker("echo", health=health)}, admin_token_file=str(token),
                     limits={"worker_log_lines": lines})
    vd.url = f"http://127.0.0.1:{vd.port}"
    return vd


def get_logs(vd, query="", token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = vd.get(f"/v1/models/echo/logs{query}", headers=headers)
    return r.status, (json.loads(r.body) if r.body else None)


def request_lines(vd, tags):
    for t in tags:
        assert vd.get(f"/echo/echo?tag={t}").status == 200
    wait_for(lambda: any(tags[-1] in ln["line"] for ln in get_logs(vd)[1]["lines"]), timeout=10,
             what=f"{tags[-1]} in the ring")


def test_logs_route_ring_and_cursor(vramd, tmp_path):
    vd = start(vramd, tmp_path, lines=50)
    request_lines(vd, ["req-0", "req-1", "req-2"])
    st, doc = get_logs(vd)
    assert st == 200 and doc["model"] == "echo", doc
    assert "listening on" in doc["lines"][0]["line"] and doc["lines"][0]["stream"] == "stdout", doc
    assert doc["lines"][0]["seq"] == 1 and doc["missed"] == 0 and doc["dropped_total"] == 0, doc
    assert [ln["stream"] for ln in doc["lines"][-3:]] == ["stderr"] * 3, doc
    assert ["req-%d" % i in doc["lines"][i - 3]["line"] for i in range(3)] == [True] * 3, doc
    pid = vd.model("echo")["instances"][0]["pid"]
    assert all(ln["pid"] == pid for ln in doc["lines"]), doc
    cursor = doc["cursor"]
    assert cursor == doc["lines"][-1]["seq"] == len(doc["lines"]), doc
    st, doc2 = get_logs(vd, "?lines=2")
    assert [ln["seq"] for ln in doc2["lines"]] == [cursor - 1, cursor], doc2
    assert get_logs(vd, token=None)[0] == 401
    assert get_logs(vd, "?lines=abc")[0] == 400
    assert vd.get("/v1/models/nope/logs", headers={"Authorization": f"Bearer {TOKEN}"}).status == 404
    # a cursor: the lines after it, once
    request_lines(vd, ["req-3", "req-4"])
    st, doc = get_logs(vd, f"?after={cursor}")
    assert [ln["seq"] for ln in doc["lines"]] == [cursor + 1, cursor + 2], doc
    assert "req-3" in doc["lines"][0]["line"] and doc["cursor"] == cursor + 2, doc
    st, doc = get_logs(vd, f"?after={cursor + 2}")
    assert doc["lines"] == [] and doc["cursor"] == cursor + 2, doc


def test_logs_ring_is_bounded(vramd, tmp_path):
    """limits.worker_log_lines 5: the oldest lines go; a cursor behind them says how many
    it missed."""
    vd = start(vramd, tmp_path, lines=5)
    tags = [f"req-{i}" for i in range(8)]
    request_lines(vd, tags)
    st, doc = get_logs(vd, "?lines=100")
    assert len(doc["lines"]) == 5, doc
    last = doc["cursor"]
    assert [ln["seq"] for ln in doc["lines"]] == list(range(last - 4, last + 1)), doc
    assert [t in ln["line"] for t, ln in zip(tags[3:], doc["lines"])] == [True] * 5, doc
    assert doc["dropped_total"] == last - 5, doc
    st, doc = get_logs(vd, "?after=1")
    assert doc["missed"] == last - 5 - 1 and len(doc["lines"]) == 5, doc


def test_vramctl_logs_and_follow(vramd, tmp_path):
    vd = start(vramd, tmp_path, lines=1000)
    assert vd.get("/echo/echo?tag=first").status == 200
    wait_for(lambda: any("first" in ln["line"] for ln in get_logs(vd)[1]["lines"]), timeout=10,
             what="the first request line")
    p = vramctl("logs", "echo", "--token", TOKEN, url=vd.url)
    assert p.returncode == 0, p
    out = p.stdout.splitlines()
    assert "listening on" in out[0] and "first" in out[-1], p.stdout
    p = vramctl("logs", "echo", "-n", "1", "--timestamps", "--token", TOKEN, url=vd.url)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1, p
    assert p.stdout.split()[1] == "stderr" and p.stdout[:2] == "20", p.stdout
    p = vramctl("logs", "echo", url=vd.url)
    assert p.returncode == 1 and "401 unauthorized" in p.stderr, p
    # -f: new lines printed once each, ended by --for
    argv = [str(vramctl_binary()), "--url", vd.url, "logs", "echo", "-n", "1", "-f", "--for", "4s",
            "--token", TOKEN]
    f = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env())
    time.sleep(1.2)
    for i in range(3):
        assert vd.get(f"/echo/echo?tag=follow-{i}").status == 200
    out, err = f.communicate(timeout=30)
    assert f.returncode == 0, (out, err)
    lines = out.splitlines()
    assert "first" in lines[0], out
    for i in range(3):
        assert sum(f"follow-{i}" in ln for ln in lines) == 1, out
