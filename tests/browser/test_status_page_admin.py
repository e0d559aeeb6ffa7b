"""The live status page's admin actions (load, unload, restart, pin, unpin) in headless Chromium.

vramd has an admin token and two simworker models on a simulated 16 GiB GPU: `a` (loaded
before the page opens) and `b` (stopped). tests/js/status_page_admin.mjs drives the page
(steps and what it reads: its header comment). Expected:
  - without a token the page has no action button and no Actions column, and a POST to an
    admin route from the page is answered 401 by vramd;
  - a wrong token typed in shows the 401 error (`401 unauthorized`) and no button appears;
  - the right token: load, unload, restart and pin buttons on each row (never in the URL:
    kept in sessionStorage only); clicking unload stops `a`, load makes `b` ready, restart
    gives `b` a new instance (new id, ready), pin marks `b` pinned by admin (its button
    turns into unpin), unpin clears it; each answer shows in the page's message line;
  - after a page reload in the same tab the buttons are still there (sessionStorage);
  - a token that stopped being right (a click answered 401) shows the 401 error and the
    buttons go away, the token forgotten;
  - vramd agrees: the log has the admin calls, and the final state is what the page showed.

Skipped (with the reason) only when node, chromium or tests/js/node_modules/playwright-core
is missing; mk/deps.sh installs all three.
"""
import json
import re
import subprocess

from vramdkit import REPO_ROOT, sim_s

from .test_status_page import need_browser

SCRIPT = REPO_ROOT / "tests" / "js" / "status_page_admin.mjs"
TOKEN = "page-admin-token-0123456789"


def model(sched, name):
    return sched.model(name, ["--resident", "3GiB", "--per-request", "512MiB", "--cache", "release",
                              "--run-time", sim_s(1)], "3GiB", "1GiB")


def run_script(node, url, loaded, stopped):
    cmd = [node, str(SCRIPT), "--url", url, "--token", TOKEN, "--loaded", loaded, "--stopped", stopped,
           "--timeout-ms", "30000"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=SCRIPT.parent)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, f"status_page_admin.mjs printed no JSON (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    out = json.loads(lines[-1])
    assert "error" not in out, f"status_page_admin.mjs: {json.dumps(out)}\n{p.stderr}"
    assert p.returncode == 0, p.stderr
    return out


def instance_ids(text):
    return [int(x) for x in re.findall(r"#(\d+) ", text)]


def test_admin_buttons_only_with_the_token(sched):
    node = need_browser()
    token = sched.tmp / "admin.token"
    token.write_text(TOKEN + "\n")
    gpu = sched.gpu_set("16GiB")
    vd = sched.start_vramd(gpu, {"a": model(sched, "a"), "b": model(sched, "b")},
                           admin_token_file=str(token))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert vd.post("/v1/models/a/load", headers=auth).status == 200
    out = run_script(node, f"http://127.0.0.1:{vd.port}/", "a", "b")

    assert not out["page_errors"], out["page_errors"]
    # the only console errors are the refused or unknown requests the steps make on purpose
    assert all("status of 401" in e or "status of 404" in e for e in out["console_errors"]), out["console_errors"]
    assert not any(TOKEN in u for u in out["requests"]), "the token went into a URL"

    no = out["no_token"]
    assert no["buttons"] == 0 and no["admin"] == "off" and no["actions_head_hidden"], no
    assert no["post_status"] == 401, no
    assert no["rows"]["a"]["state"] == "ready", no  # the refused POST changed nothing

    wrong = out["wrong_token"]
    assert wrong["buttons"] == 0 and wrong["admin"] == "off", wrong
    assert wrong["msg_state"] == "error" and "401 unauthorized" in wrong["msg"], wrong

    ok = out["with_token"]
    assert ok["admin"] == "on" and not ok["actions_head_hidden"], ok
    assert ok["rows"]["a"]["actions"] == ["load", "unload", "restart", "pin"], ok
    assert ok["rows"]["b"]["actions"] == ["load", "unload", "restart", "pin"], ok
    assert TOKEN not in ok["url"] and ok["stored"] == TOKEN, ok

    assert out["unload"]["rows"]["a"]["state"] == "stopped", out["unload"]
    assert out["unload"]["msg_state"] == "ok" and out["unload"]["msg"].startswith("unload a: "), out["unload"]
    assert out["load"]["rows"]["b"]["state"] == "ready", out["load"]
    assert out["load"]["msg"].startswith("load b: ready"), out["load"]

    r = out["restart"]
    assert r["msg_state"] == "ok" and r["msg"].startswith("restart b: ready"), r
    old, new = instance_ids(r["before"]), instance_ids(r["rows"]["b"]["instances"])
    assert old and new and min(new) > max(old), (old, new)

    assert out["pin"]["rows"]["b"]["pinned"] == "admin", out["pin"]
    assert out["pin"]["rows"]["b"]["actions"] == ["load", "unload", "restart", "unpin"], out["pin"]
    assert out["unpin"]["rows"]["b"]["pinned"] == "", out["unpin"]
    assert out["reloaded"]["buttons"] > 0 and out["reloaded"]["admin"] == "on", out["reloaded"]

    stale = out["stale_token"]
    assert stale["buttons"] == 0 and stale["admin"] == "off" and stale["stored"] is None, stale
    assert stale["msg_state"] == "error" and "401 unauthorized" in stale["msg"], stale

    # vramd's side: the calls were made, and it shows what the page showed last
    for ev in ("admin_unload", "admin_load", "admin_restart_done", "admin_pin", "admin_unpin"):
        assert vd.first(ev), ev
    assert len(vd.events("admin_unauthorized")) >= 3  # page POST, wrong token, stale token
    st = vd.status()
    assert vd.model("a", st)["state"] == "stopped"
    b = vd.model("b", st)
    assert b["state"] == "ready" and b["pinned"] is False and b["pinned_by"] is None, b
    sched.finish()
