"""e2e: vramd's command line (--version, --check-config), its own routes (/healthz,
/readyz, /v1/status) and admin authentication."""
import re
import subprocess

from vramdkit import REPO_ROOT, free_port, http_request, pid_alive, vramd_binary, wait_for


def test_version():
    """`vramd --version` exits 0 and prints "vramd <version>"."""
    p = subprocess.run([str(vramd_binary()), "--version"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p
    assert re.match(r"^vramd \S+", p.stdout.strip()), p.stdout


def test_check_config_good(vramd):
    """--check-config on a valid file exits 0 with "FILE: ok" and starts nothing."""
    port = free_port()
    text = f"""listen: 127.0.0.1:{port}
state_dir: {vramd.tmp}/var
log: {{ format: json, level: info }}
limits: {{ header_timeout: 2s, max_body: 1MiB }}
models:
  a:
    route: /a/
    aliases: [a-1]
    url: http://127.0.0.1:9
"""
    path, p = vramd.check_config(text)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert f"{path}: ok" in p.stdout + p.stderr
    # nothing listens on the configured port
    try:
        http_request(port, "GET", "/healthz", timeout=1)
        raise AssertionError("--check-config started a server")
    except OSError:
        pass


def test_check_config_unknown_key_names_file_line_col(vramd):
    """An unknown key is an error with FILE:LINE:COL: key.path, exit 1."""
    text = """listen: 127.0.0.1:18999
models:
  a:
    route: /a/
    url: http://127.0.0.1:9
    concurency: 2
"""
    path, p = vramd.check_config(text, "bad-key.yaml")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert re.search(rf"{re.escape(str(path))}:6:\d+: models\.a\.concurency", p.stderr), p.stderr


def test_check_config_bad_size_value(vramd):
    """A bad size is an error naming the line and the key path limits.max_body."""
    text = """listen: 127.0.0.1:18999
limits:
  max_body: 12 gigs
models:
  a: { route: /a/, url: "http://127.0.0.1:9" }
"""
    path, p = vramd.check_config(text, "bad-size.yaml")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert re.search(rf"{re.escape(str(path))}:3:\d+: limits\.max_body", p.stderr), p.stderr


def test_check_config_yaml_syntax_error(vramd):
    """Broken YAML is reported with the file and a line number, exit 1."""
    text = "listen: 127.0.0.1:18999\nmodels:\n  a: [unclosed\n"
    path, p = vramd.check_config(text, "syntax.yaml")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert re.search(rf"{re.escape(str(path))}:\d+:\d+:", p.stderr), p.stderr


def test_non_loopback_listen_requires_admin_token(vramd):
    """listen on 0.0.0.0 without admin_token_file is refused (check-config and start);
    with a token file the same config is accepted."""
    port = free_port()
    base = (f"listen: 0.0.0.0:{port}\nstate_dir: {vramd.tmp}/var\n"
            "models:\n  a: {route: /a/, url: 'http://127.0.0.1:9'}\n")
    path, p = vramd.check_config(base, "open.yaml")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "admin_token_file" in p.stderr, p.stderr

    start = subprocess.run([str(vramd_binary()), "--config", str(path)], capture_output=True,
                           text=True, timeout=30, cwd=REPO_ROOT)
    assert start.returncode != 0
    assert "admin_token_file" in start.stderr, start.stderr

    token = vramd.tmp / "token"
    token.write_text("s3cret\n")
    path2, p2 = vramd.check_config(base + f"admin_token_file: {token}\n", "open-token.yaml")
    assert p2.returncode == 0, (p2.stdout, p2.stderr)


def test_own_routes_and_status_shape(vramd):
    """/healthz answers 200 JSON, /readyz 200 or 503 JSON, /v1/status has the documented
    shape, and an unknown vramd route is 404 JSON."""
    vd = vramd.start(models={"a": vramd.worker("a", aliases=["a-1"])})
    r = vd.get("/healthz")
    assert r.status == 200 and r.headers.get("content-type", "").startswith("application/json")
    r.json()
    r = vd.get("/readyz")
    assert r.status in (200, 503)
    r.json()
    st = vd.status()
    for key in ("version", "uptime_ms", "draining", "models", "events"):
        assert key in st, st
    assert st["draining"] is False
    m = next(m for m in st["models"] if m["name"] == "a")
    assert m["route"] == "/a/"
    assert m["aliases"] == ["a-1"]
    assert m["state"] == "stopped"  # nothing started before the first request
    assert m["queue"]["depth"] == 0
    assert len(m["queue"]["by_priority"]) == 10
    assert m["in_flight"] == 0
    r = vd.get("/v1/no-such-route")
    assert r.status == 404
    assert r.error_code() in ("not_found", "unknown_model"), r


def test_admin_token(vramd):
    """With admin_token_file, admin routes need the bearer token (none or wrong -> 401
    unauthorized, right -> 200); other routes need none."""
    token = vramd.tmp / "token"
    token.write_text("s3cret-token\n")
    vd = vramd.start(models={"a": vramd.worker("a")}, admin_token_file=str(token))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
        r = vd.post("/v1/admin/reload", headers=headers)
        assert r.status == 401, (headers, r)
        assert r.error_code() == "unauthorized"
        r = vd.post("/v1/models/a/load", headers=headers)
        assert r.status == 401, (headers, r)
    r = vd.post("/v1/admin/drain", headers={"Authorization": "Bearer nope"})
    assert r.status == 401
    assert vd.alive()

    good = {"Authorization": "Bearer s3cret-token"}
    r = vd.post("/v1/admin/reload", headers=good)
    assert r.status == 200, r
    r = vd.post("/v1/models/a/load", headers=good, timeout=30)
    assert r.status == 200, r
    assert r.json()["model"] == "a" and r.json()["state"] == "ready"
    # non-admin routes are open
    assert vd.get("/v1/status").status == 200
    r = vd.get("/a/echo")
    assert r.status == 200, r
    pid = r.json()["pid"]
    r = vd.post("/v1/models/a/unload", headers=good, timeout=60)
    assert r.status == 200, r
    assert vd.model("a")["state"] == "stopped"
    wait_for(lambda: not pid_alive(pid), timeout=10, what="the unloaded worker to exit")


WARNED = """listen: 127.0.0.1:{port}
state_dir: {tmp}/var
models:
  a:
    route: /a/
    url: http://127.0.0.1:9
    deadline: 30000
  b:
    route: /b/
    cmd: ["python3 serve.py"]
    memory: {{ resident: 6000 }}
"""


def test_check_config_warnings_and_strict(vramd):
    """Warnings (legal, but likely mistakes) go to stderr as FILE:LINE:COL: warning: key.path:
    message and keep exit 0; --strict (before or after the file) makes them errors, exit 1;
    vramctl check-config agrees."""
    path, p = vramd.check_config(WARNED.format(port=free_port(), tmp=vramd.tmp), "warned.yaml")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.strip() == f"{path}: ok (2 models)", p.stdout
    lines = p.stderr.splitlines()
    want = [rf"{re.escape(str(path))}:5:5: warning: models\.a: not memory-gated",
            rf"{re.escape(str(path))}:7:15: warning: models\.a\.deadline: a bare number is seconds: 30000 is 500m",
            rf"{re.escape(str(path))}:10:11: warning: models\.b\.cmd\[0\]: \"python3 serve\.py\" is one word",
            rf"{re.escape(str(path))}:10:10: warning: models\.b\.cmd: no \{{port\}} in cmd or env: .*\$PORT",
            rf"{re.escape(str(path))}:11:25: warning: models\.b\.memory\.resident: a bare number is bytes: 6000"]
    assert len(lines) == len(want), p.stderr
    for line, pattern in zip(lines, want):
        assert re.match(pattern, line), (line, pattern)
    for args in (["--check-config", "--strict", str(path)], ["--check-config", str(path), "--strict"],
                 ["--strict", "--check-config", str(path)]):
        s = subprocess.run([str(vramd_binary()), *args], capture_output=True, text=True, timeout=30)
        assert s.returncode == 1, (args, s.stdout, s.stderr)
        assert s.stdout == "" and s.stderr.splitlines()[:-1] == lines, (args, s.stderr)
        assert s.stderr.splitlines()[-1] == f"{path}: 5 warnings (--strict makes warnings errors)", s.stderr
    ctl = vramd_binary().parent / "vramctl"
    c = subprocess.run([str(ctl), "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert c.returncode == 0 and c.stderr == p.stderr and c.stdout == p.stdout, c
    c = subprocess.run([str(ctl), "check-config", "--strict", str(path)], capture_output=True, text=True,
                       timeout=30)
    assert c.returncode == 1 and c.stderr.splitlines()[:-1] == lines, c


def test_config_warnings_logged_at_start(vramd):
    """vramd logs each warning at start as a config_warning event with model, key and message."""
    vd = vramd.start(config=vramd.config({"a": {"route": "/a/", "url": "http://127.0.0.1:9",
                                                "keep_alive": "forever", "memory": {"resident": "1GiB"},
                                                "unload": {"path": "/unload"}}}))
    events = vd.events("config_warning")
    assert len(events) == 1, vd.log_tail()
    e = events[0]
    assert e["model"] == "a" and e["key"] == "models.a.keep_alive", e
    assert "never evicted" in e["message"] and re.match(r".*\.yaml:\d+:\d+$", e["at"]), e
