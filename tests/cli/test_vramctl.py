"""vramctl against a running vramd: status (table and --json), top (plain frames and a real
terminal through a pty), load/unload with and without the admin token, drain, reload with a
bad config, check-config, the "not running" message, usage errors and their exit codes.

Exit codes under test: 0 ok, 1 vramd answered an error, 2 usage error, 3 cannot reach vramd.
"""
import json
import os
import pty
import select
import signal
import socket
import subprocess
import termios
import time

import pytest

from vramdkit import free_port, vramd_binary

from .conftest import TOKEN, assert_no_sanitizer_report, clean_env, vramctl, vramctl_binary

ESC = "\x1b"


# --- status ----------------------------------------------------------------------------------

def test_status_table_shows_gpus_models_and_events(gpu_vramd):
    """The table names the simulated GPU, draws a bar with one glyph per resident model, lists
    both models with their state and pid, and the recent events; no escape codes in a pipe."""
    vd = gpu_vramd
    p = vramctl("status", url=vd.url)
    assert p.returncode == 0, p
    out = p.stdout
    assert "GPU 0" in out and "NVIDIA Simulated GPU" in out, out
    assert "24.0 GiB total" in out, out
    gen = vd.model("gen")
    pid = str(gen["instances"][0]["pid"])
    lines = {line.split()[0]: line.split() for line in out.splitlines()
             if line.strip() and line.split()[0] in ("gen", "val")}
    assert lines["gen"][1] == "ready" and pid in lines["gen"], out
    bar = next(line for line in out.splitlines() if line.strip().startswith("["))
    assert "#" in bar, bar          # gen's resident 6 GiB (the first model's glyph)
    assert bar.strip().endswith("]"), bar
    assert "# gen 6.0" in out, out  # legend: gen holds its declared 6 GiB
    assert "RECENT EVENTS" in out and "started" in out, out
    assert ESC not in out, "escape codes written into a pipe"


def test_status_json_is_v1_status(gpu_vramd):
    """--json prints /v1/status as it is: the same keys, GPUs and models."""
    vd = gpu_vramd
    p = vramctl("status", "--json", url=vd.url)
    assert p.returncode == 0, p
    doc = json.loads(p.stdout)
    ref = vd.status()
    assert set(doc) == set(ref), (set(doc), set(ref))
    assert [g["name"] for g in doc["gpus"]] == [g["name"] for g in ref["gpus"]]
    assert {m["name"] for m in doc["models"]} == {"gen", "val"}
    assert doc["gpus"][0]["total"] == ref["gpus"][0]["total"]
    # --json is accepted before the command too, and VRAMD_URL replaces --url
    p2 = vramctl("--json", "status", env=clean_env(VRAMD_URL=vd.url))
    assert p2.returncode == 0, p2
    assert set(json.loads(p2.stdout)) == set(ref)


def test_status_colour_only_when_asked_for(gpu_vramd):
    """NO_COLOR or a pipe: no colour. (The pty test checks colour on a terminal.)"""
    p = vramctl("status", url=gpu_vramd.url, env=clean_env(NO_COLOR="1"))
    assert p.returncode == 0 and ESC not in p.stdout, p


# --- top -------------------------------------------------------------------------------------

def test_top_into_a_pipe_prints_frames(gpu_vramd):
    """top -n 2 into a pipe: exactly two plain frames, then exit 0."""
    p = vramctl("top", "-n", "2", "--interval", "200ms", url=gpu_vramd.url)
    assert p.returncode == 0, p
    headers = [line for line in p.stdout.splitlines() if line.startswith("vramd ")]
    assert len(headers) == 2, p.stdout
    assert p.stdout.count("GPU 0") == 2, p.stdout
    assert ESC not in p.stdout


def read_until(fd, pred, timeout=20.0):
    """Read from a pty master until pred(text) holds; returns everything read."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the slave side closed
                break
            if not chunk:
                break
            data += chunk
            if pred(data.decode("utf-8", "replace")):
                return data.decode("utf-8", "replace")
    return data.decode("utf-8", "replace")


def drain_pty(fd, proc, timeout=20.0):
    """Keep reading the master (so the child never blocks on a full pty) until it exits."""
    data = b""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data += os.read(fd, 65536)
            except OSError:
                break
    try:
        proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        pytest.fail("vramctl top did not exit")
    # what it wrote just before exiting is still in the pty (the test holds the slave open)
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGINT"])
def test_top_in_a_terminal_quits_and_restores_it(gpu_vramd, how):
    """In a pty: alternate screen, hidden cursor, colours; `q` (or SIGTERM/SIGINT) ends it
    with exit 0, the screen and cursor are given back and the terminal's modes (echo,
    canonical input) are exactly what they were before."""
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        proc = subprocess.Popen([str(vramctl_binary()), "--url", gpu_vramd.url, "top",
                                 "--interval", "300ms"],
                                stdin=slave, stdout=slave, stderr=slave,
                                env=clean_env(TERM="xterm", COLUMNS="120"))
        try:
            seen = read_until(master, lambda t: "GPU 0" in t and "gen" in t)
            assert ESC + "[?1049h" in seen, seen[:500]    # alternate screen
            assert ESC + "[?25l" in seen                   # cursor hidden
            assert "NVIDIA Simulated GPU" in seen
            assert ESC + "[30;42m" in seen, "no colour on a terminal"
            # echo is off while top runs (keys are read, not shown)
            during = termios.tcgetattr(slave)
            assert not during[3] & termios.ECHO and not during[3] & termios.ICANON
            if how == "q":
                os.write(master, b"q")
            else:
                proc.send_signal(getattr(signal, how))
            rest = drain_pty(master, proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert_no_sanitizer_report(seen + rest, "vramctl top")
        assert proc.returncode == 0, (proc.returncode, rest[-500:])
        assert ESC + "[?25h" in rest and ESC + "[?1049l" in rest, rest[-300:]
        assert termios.tcgetattr(slave) == before, "terminal modes not restored"
    finally:
        os.close(master)
        os.close(slave)


def test_top_in_a_terminal_with_n_leaves_the_last_frame(gpu_vramd):
    """top -n 2 in a pty ends by itself (exit 0), gives the terminal back, and prints its last
    frame again on the normal screen."""
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        proc = subprocess.Popen([str(vramctl_binary()), "--url", gpu_vramd.url, "top", "-n", "2",
                                 "--interval", "100ms"],
                                stdin=slave, stdout=slave, stderr=slave, env=clean_env(TERM="xterm"))
        text = drain_pty(master, proc)
        assert_no_sanitizer_report(text, "vramctl top -n 2")
        assert proc.returncode == 0, (proc.returncode, text[-500:])
        after = text.rsplit(ESC + "[?1049l", 1)
        assert len(after) == 2 and "GPU 0" in after[1], text[-800:]
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


# --- admin: load, unload, drain, reload -------------------------------------------------------

def test_unload_and_load_with_token(gpu_vramd):
    """unload/load with the token from --token, $VRAMD_TOKEN and --token-file: one line
    each, or vramd's answer with --json; the model really goes and comes back."""
    vd = gpu_vramd
    p = vramctl("unload", "val", "--token", TOKEN, url=vd.url)
    assert p.returncode == 0, p
    assert p.stdout.strip() == "val: stopped (0 instances)", p.stdout
    assert vd.model("val")["state"] == "stopped"

    p = vramctl("load", "val", env=clean_env(VRAMD_URL=vd.url, VRAMD_TOKEN=TOKEN))
    assert p.returncode == 0, p
    assert p.stdout.strip() == "val: ready (1 instance)", p.stdout
    assert vd.model("val")["state"] == "ready"

    p = vramctl("--json", "load", "val", "--token-file", vd.token_file, url=vd.url)
    assert p.returncode == 0, p
    doc = json.loads(p.stdout)
    assert doc["model"] == "val" and doc["state"] == "ready" and doc["instances"] == 1, doc


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_admin_without_the_right_token_is_refused(gpu_vramd, token):
    """No token or a wrong one: vramd answers 401; vramctl prints its code and message and
    exits 1; --json also prints the error document."""
    args = ["unload", "gen"] + (["--token", token] if token else [])
    p = vramctl(*args, url=gpu_vramd.url)
    assert p.returncode == 1, p
    assert "401 unauthorized" in p.stderr and "bearer token" in p.stderr, p.stderr
    p = vramctl(*args, "--json", url=gpu_vramd.url)
    assert p.returncode == 1, p
    assert json.loads(p.stdout)["error"]["code"] == "unauthorized"
    assert gpu_vramd.model("gen")["state"] == "ready"


def test_load_unknown_model(gpu_vramd):
    p = vramctl("load", "nope", "--token", TOKEN, url=gpu_vramd.url)
    assert p.returncode == 1, p
    assert "404 unknown_model" in p.stderr and "nope" in p.stderr, p.stderr


def test_drain_makes_vramd_exit_0(vramd, tmp_path):
    """drain --wait (token from --token-file): vramd stops admitting and exits 0; vramctl
    returns once it is gone. Afterwards vramctl reports it as not running (exit 3)."""
    token = tmp_path / "admin.token"
    token.write_text("drain-token\n")
    vd = vramd.start(models={"echo": vramd.worker("echo")}, admin_token_file=str(token))
    url = f"http://127.0.0.1:{vd.port}"
    p = vramctl("drain", "--wait", "--token-file", token, "--timeout", "30s", url=url)
    assert p.returncode == 0, p
    assert "draining" in p.stdout and "vramd has exited" in p.stdout, p.stdout
    assert vd.wait_exit(20) == 0, vd.log_tail()
    p = vramctl("status", url=url)
    assert p.returncode == 3, p


def test_reload_with_a_bad_config_is_refused(vramd):
    """reload after the config file was broken: exit 1, the message names the problem (file,
    key) and vramd keeps running; after fixing the file, reload works (exit 0)."""
    vd = vramd.start(models={"echo": vramd.worker("echo")})
    url = f"http://127.0.0.1:{vd.port}"
    good = vd.config_path.read_text()
    vd.config_path.write_text(good + "no_such_key: 1\n")
    p = vramctl("reload", url=url)
    assert p.returncode == 1, p
    assert "400 bad_config" in p.stderr and "no_such_key" in p.stderr, p.stderr
    assert vd.alive()
    vd.config_path.write_text(good)
    p = vramctl("reload", url=url)
    assert p.returncode == 0, p
    assert "reloaded" in p.stdout
    p = vramctl("reload", "--json", url=url)
    assert p.returncode == 0 and json.loads(p.stdout) == {"reloaded": True, "failed": []}, p


# --- check-config ------------------------------------------------------------------------------

GOOD_CONFIG = """listen: 127.0.0.1:18800
models:
  a:
    route: /a/
    url: http://127.0.0.1:9
    memory: { resident: 2GiB, per_request: 1.5GiB }
    clear_cache: { path: /clear_cache }
"""


def test_check_config_good_and_bad(tmp_path):
    """Same verdict and message as `vramd --check-config`; exit 0 / 1; no daemon needed
    (the URL points nowhere)."""
    good = tmp_path / "good.yaml"
    good.write_text(GOOD_CONFIG)
    p = vramctl("check-config", good, url="http://127.0.0.1:9")
    assert p.returncode == 0, p
    assert p.stdout.strip() == f"{good}: ok (1 models)", p.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD_CONFIG.replace("1.5GiB", "12 gigs"))
    p = vramctl("check-config", bad)
    assert p.returncode == 1, p
    assert "models.a.memory.per_request" in p.stderr and "12 gigs" in p.stderr, p.stderr
    ref = subprocess.run([str(vramd_binary()), "--check-config", str(bad)], capture_output=True,
                         text=True, timeout=30)
    assert ref.returncode == 1 and ref.stderr == p.stderr, (ref.stderr, p.stderr)

    p = vramctl("check-config", "--json", bad)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and "12 gigs" in doc["error"], doc
    p = vramctl("check-config", "--json", good)
    assert p.returncode == 0 and json.loads(p.stdout) == {"file": str(good), "ok": True, "models": 1}

    p = vramctl("check-config", tmp_path / "missing.yaml")
    assert p.returncode == 1 and "missing.yaml" in p.stderr, p


# --- not running, timeouts, usage ----------------------------------------------------------------

def test_not_running_says_so_and_exits_3():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    p = vramctl("status", url=url)
    assert p.returncode == 3, p
    assert p.stderr.strip() == (f"vramctl: cannot connect to vramd at {url}: connection refused"
                                " \u2014 is vramd running? (set --url or VRAMD_URL)"), p.stderr
    assert p.stdout == ""
    for args in (["load", "x"], ["jobs", "list"], ["top", "-n", "1"], ["status", "--json"]):
        p = vramctl(*args, env=clean_env(VRAMD_URL=url))
        assert p.returncode == 3, (args, p)
        assert "is vramd running?" in p.stderr


def test_no_answer_within_timeout_exits_3():
    """A listener that never answers: --timeout bounds the wait."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        t0 = time.monotonic()
        p = vramctl("--timeout", "300ms", "status", url=url)
        assert time.monotonic() - t0 < 20
    assert p.returncode == 3, p
    assert "no answer within 300ms" in p.stderr, p.stderr


@pytest.mark.parametrize("args", [
    [],
    ["bogus"],
    ["--bogus", "status"],
    ["status", "--bogus"],
    ["status", "extra"],
    ["load"],
    ["load", "a", "b"],
    ["drain", "now"],
    ["jobs"],
    ["jobs", "frobnicate"],
    ["jobs", "submit"],
    ["jobs", "submit", "m", "--priority", "12"],
    ["jobs", "submit", "m", "--json-body", "{not json"],
    ["jobs", "submit", "m", "--deadline", "soon"],
    ["jobs", "submit", "m", "--path", "relative"],
    ["jobs", "wait"],
    ["jobs", "get", "../etc/passwd"],
    ["jobs", "list", "--state", "sleeping"],
    ["--timeout", "abc", "status"],
    ["--url"],
    ["--url", "https://127.0.0.1:8800", "status"],
    ["top", "-n", "0"],
    ["top", "--json"],
    ["check-config"],
])
def test_usage_errors_exit_2(args):
    """Usage errors exit 2 without contacting anyone (the URL points nowhere) and say what
    was wrong on stderr."""
    p = vramctl(*args, env=clean_env(VRAMD_URL="http://127.0.0.1:9"))
    assert p.returncode == 2, (args, p)
    assert "vramctl" in p.stderr or "usage:" in p.stderr, p.stderr
    assert "cannot connect" not in p.stderr


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["jobs", "--help"],
                                  ["jobs", "submit", "-h"], ["help", "top"]])
def test_help_exits_0(args):
    p = vramctl(*args)
    assert p.returncode == 0, p
    assert "usage: vramctl" in p.stdout, p.stdout


def test_version_and_exit_codes_documented():
    p = vramctl("--version")
    assert p.returncode == 0 and p.stdout.startswith("vramctl "), p
    text = vramctl("--help").stdout
    for code in ("0  ok", "1  vramd answered an error", "2  usage error", "3  cannot reach vramd",
                 "4  the job ended failed or cancelled", "5  timed out waiting"):
        assert code in text, code
