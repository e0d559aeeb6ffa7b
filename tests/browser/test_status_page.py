"""The live status page (GET /): served by vramd itself, drawn in a real browser.

test_page_route_headers: the page's bytes and headers over plain HTTP (no browser): the
embedded file exactly, text/html, no-cache, a Content-Security-Policy that allows nothing
but the page's own style and script elements (by SHA-256) and requests to its own origin.

test_status_page_in_chromium: a 24 GiB simulated GPU with foreign memory on it; model gen
runs one slow request with two more queued, validator is loaded and idle, captioner is not
loaded. tests/js/status_page.mjs opens the page in Debian's headless chromium
(playwright-core), reads it, loads captioner through the admin route and waits until the
page shows it without a reload, makes the page's status requests fail (it must say the
connection is lost, then recover by itself) and takes a screenshot. The test then checks
that the page showed the same figures as /v1/status: each GPU's memory split by owner
(bytes exactly in data attributes, GiB figures within rounding, bar widths in proportion),
model states, queue depths, events; that it requested nothing from another origin and
logged no error. With VRAMD_UPDATE_SCREENSHOT=1 the screenshot is also written to
docs/status-page.png.

Skipped (with the reason) only when node, chromium or tests/js/node_modules/playwright-core
is missing; mk/deps.sh installs all three.
"""
import base64
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess

import pytest

from vramdkit import GiB, MiB, REPO_ROOT, request, sim_s, wait_for

CHROMIUM = "/usr/bin/chromium"
JS_DIR = REPO_ROOT / "tests" / "js"
SCRIPT = JS_DIR / "status_page.mjs"
PAGE_SOURCE = REPO_ROOT / "src" / "obs" / "page.html"
SCREENSHOT_DOC = REPO_ROOT / "docs" / "status-page.png"
HALF_HUNDREDTH_GIB = 0.005 * GiB + 1  # a figure printed as "x.xx GiB"


def need_browser():
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed (mk/deps.sh installs nodejs)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (mk/deps.sh installs chromium)")
    if not (JS_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.skip("tests/js/node_modules/playwright-core is missing (run `npm ci` in tests/js)")
    return node


class HeldRequest:
    """A request written on a raw socket and left open: it stays queued or running in
    vramd until close() (a client that goes away leaves no reservation behind)."""

    def __init__(self, port, path, body=b"{}", headers=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n{extra}\r\n".encode() + body)

    def close(self):
        self.sock.close()


def model(sched, name, flags, resident, per_request, **over):
    return sched.model(name, ["--context", "0", "--cache", "release", "--contention", "0", *flags],
                       resident, per_request, **over)


def csp_hash(html, tag):
    text = html.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_page_route_headers(sched):
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"m": model(sched, "m", ["--resident", "1GiB"], "1GiB", "1GiB")})
    html = PAGE_SOURCE.read_text()

    r = vd.request("GET", "/")
    assert r.status == 200, r
    assert r.body == PAGE_SOURCE.read_bytes()
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = r.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'none'", csp
    assert directives["style-src"] == csp_hash(html, "style"), csp
    assert directives["script-src"] == csp_hash(html, "script"), csp
    assert directives["connect-src"] == "'self'", csp
    assert "unsafe" not in csp and "*" not in csp and "http" not in csp

    head = vd.request("HEAD", "/")
    assert head.status == 200 and head.body == b""
    assert int(head.headers["content-length"]) == len(r.body)
    assert "content-security-policy" in head.headers
    # a query string is still the page; other paths and methods are not
    assert vd.request("GET", "/?refresh=1").body == r.body
    post = vd.request("POST", "/", body={})
    assert post.status == 404 and b"<html" not in post.body, post
    assert vd.request("GET", "/index.html").status == 404
    sched.finish()


def expected_segments(g):
    """What the page must draw for one /v1/status GPU: {segment: bytes}."""
    out = {}
    for e in g["ledger"]:
        key = ("resident:" if e["kind"] == "resident" else "running:") + e["owner"]
        out[key] = out.get(key, 0) + e["bytes"]
    for key in ("claimed", "foreign", "headroom"):
        if g[key] > 0:
            out[key] = g[key]
    out["free"] = max(0, g["capacity"] - g["reserved"] - g["claimed"])
    return out


def gib_text(text):
    m = re.fullmatch(r"(\d+\.\d\d) GiB", text)
    assert m, f"not a GiB figure: {text!r}"
    return float(m.group(1)) * GiB


def check_page_matches_status(shown, status):
    """Every figure the page shows against the /v1/status document it should reflect."""
    assert shown["version"] == status["version"]
    assert shown["daemon_state"] == ("draining" if status["draining"] else "ready")
    assert [g["index"] for g in shown["gpus"]] == [g["index"] for g in status["gpus"]]
    for pg, g in zip(shown["gpus"], status["gpus"]):
        assert g["name"] and g["name"] in pg["name"], (pg["name"], g["name"])
        assert pg["total_bytes"] == g["total"]
        assert abs(gib_text(pg["total_text"].replace(" total", "")) - g["total"]) <= HALF_HUNDREDTH_GIB
        want = expected_segments(g)
        bar = {s["segment"]: s["bytes"] for s in pg["segments"]}
        legend = {s["segment"]: s["bytes"] for s in pg["legend"]}
        assert bar == want, (bar, want)
        assert legend == want, (legend, want)
        for item in pg["legend"]:
            assert abs(gib_text(item["value"]) - item["bytes"]) <= HALF_HUNDREDTH_GIB, item
            owner = item["segment"].split(":", 1)[-1]
            assert owner in item["label"], item  # named in text, not by colour alone
        # widths in proportion to bytes (the bar is total memory wide; 1 px borders, rounding)
        scale = max(g["total"], sum(want.values()))
        inner = sum(s["width"] for s in pg["segments"])
        assert abs(inner - pg["bar_width"]) <= 4, (inner, pg["bar_width"])
        for s in pg["segments"]:
            assert abs(s["width"] - pg["bar_width"] * s["bytes"] / scale) <= 3, s
            assert s["title"], s  # a tooltip on every segment
    models = {m["name"]: m for m in status["models"]}
    assert [m["name"] for m in shown["models"]] == [m["name"] for m in status["models"]]
    for pm in shown["models"]:
        m = models[pm["name"]]
        assert pm["state"] == m["state"] and pm["state_text"] == m["state"], (pm, m["state"])
        assert pm["in_flight"] == m["in_flight"], pm
        assert pm["queue_depth"] == m["queue"]["depth"], pm
        assert pm["requests"] == m["requests_total"], pm
        assert pm["restarts"] == m["restarts_total"], pm
        for inst in m["instances"]:
            if inst["pid"]:
                assert f"pid {inst['pid']}" in pm["instances"], (pm, inst)
    for pq in shown["queues"]:
        m = models[pq["name"]]
        assert pq["depth"] == m["queue"]["depth"] and pq["max"] == m["queue"]["max"], pq
    assert shown["queue_summary"].startswith(f"{status['queues']['queued']} queued of "), shown["queue_summary"]
    # events: newest first, all of them known to vramd
    texts = [e["text"] for e in status["events"]]
    assert shown["events"], "no event shown"
    assert all(e["text"] in texts for e in shown["events"])
    stamps = [e["ts_ms"] for e in shown["events"]]
    assert stamps == sorted(stamps, reverse=True)


def run_page_script(node, url, screenshot, load):
    cmd = [node, str(SCRIPT), "--url", url, "--screenshot", str(screenshot), "--load", load,
           "--timeout-ms", "45000"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=JS_DIR)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, f"status_page.mjs printed no JSON (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    out = json.loads(lines[-1])
    assert "error" not in out, f"status_page.mjs: {out['error']}\n{p.stderr}"
    assert p.returncode == 0, p.stderr
    return out


def test_status_page_in_chromium(sched, tmp_path):
    node = need_browser()
    gpu = sched.gpu_set("24GiB")
    models = {
        "gen": model(sched, "gen", ["--resident", "7.5GiB", "--per-request", "4GiB",
                                    "--run-time", sim_s(4000)], "8GiB", "4GiB"),
        "validator": model(sched, "validator", ["--resident", "3GiB", "--per-request", "512MiB",
                                                "--run-time", sim_s(1)], "3GiB", "1GiB"),
        "captioner": model(sched, "captioner", ["--resident", "2GiB", "--per-request", "256MiB",
                                                "--run-time", sim_s(1)], "2GiB", "512MiB",
                           priority=7),
    }
    vd = sched.start_vramd(gpu, models, gpu={"headroom": "512MiB"})
    sched.alloc(gpu, 2 * GiB, hold="10m")
    wait_for(lambda: vd.gpus()[0]["foreign"] >= 2 * GiB, what="foreign memory in /v1/status")
    assert vd.post("/v1/models/validator/load").status == 200
    assert vd.request("POST", "/validator/generate", body={}).status == 200

    held = [HeldRequest(vd.port, "/gen/generate")]
    try:
        vd.wait_in_flight("gen")
        held.append(HeldRequest(vd.port, "/gen/generate", headers={"X-Vramd-Priority": "8"}))
        held.append(HeldRequest(vd.port, "/gen/generate"))
        vd.wait_queued("gen", 2)

        screenshot = tmp_path / "status-page.png"
        out = run_page_script(node, f"http://127.0.0.1:{vd.port}/", screenshot, "captioner")

        # served by vramd, strict CSP, nothing from elsewhere, no error in the console
        assert out["http_status"] == 200
        assert out["headers"]["content-type"] == "text/html; charset=utf-8"
        assert out["headers"]["cache-control"] == "no-cache"
        assert (out["headers"]["content-security-policy"] or "").startswith("default-src 'none'")
        origin = f"http://127.0.0.1:{vd.port}/"
        foreign_urls = [u for u in out["requests"] if not u.startswith(origin)]
        assert not foreign_urls, foreign_urls
        assert any(u.startswith(origin + "v1/status") for u in out["requests"])
        for phase in ("first", "after", "recovered"):
            assert not out["console_errors"].get(phase), out["console_errors"]
            assert not out["page_errors"].get(phase), out["page_errors"]
        assert not out["page_errors"].get("outage"), out["page_errors"]

        # first reading: gen resident + running, validator resident, foreign, headroom, free
        first = out["first"]
        assert first["conn"] == "live" and first["polls"] >= 1
        segs = {s["segment"] for s in first["gpus"][0]["segments"]}
        assert {"resident:gen", "running:gen", "resident:validator", "foreign", "headroom",
                "free"} <= segs, segs
        assert "resident:captioner" not in segs
        gen_res = next(s for s in first["gpus"][0]["segments"] if s["segment"] == "resident:gen")
        gen_run = next(s for s in first["gpus"][0]["segments"] if s["segment"] == "running:gen")
        assert gen_run["bytes"] == 4 * GiB
        assert "gradient" in gen_run["background"] and gen_res["background"] != gen_run["background"]
        firstm = {m["name"]: m for m in first["models"]}
        assert firstm["captioner"]["state"] == "stopped"
        assert firstm["gen"]["in_flight"] == 1 and firstm["gen"]["queue_depth"] == 2
        queues = {q["name"]: q for q in first["queues"]}
        assert queues["gen"]["by_priority"] == "priority 8: 1, priority 5: 1", queues["gen"]
        # the waiting requests' table, from /v1/queue: gen's two, in service order
        assert first["queue_polls"] >= 1 and first["waiting_note"] == "2 waiting", first["waiting_note"]
        assert [(w["model"], w["gpu"], w["position"], w["waiting_for"]) for w in first["waiting"]] == \
            [("gen", "0", 1, "slot"), ("gen", "0", 2, "slot")], first["waiting"]

        # it refreshed by itself: captioner loaded through the admin route shows up
        assert out["load_status"] == 200, out.get("load_body")
        after = out["after"]
        assert after["polls"] >= first["polls"] + 2 and after["updated_ms"] > first["updated_ms"]
        assert {m["name"]: m for m in after["models"]}["captioner"]["state"] == "ready"
        assert "resident:captioner" in {s["segment"] for s in after["gpus"][0]["segments"]}
        check_page_matches_status(after, out["status_after"])
        want = [(r["id"], r["model"], r["position"], r["waiting_for"])
                for g in out["queue_after"]["gpus"] for m in g["models"] for r in m["requests"]]
        assert [(w["id"], w["model"], w["position"], w["waiting_for"]) for w in after["waiting"]] == want, \
            (after["waiting"], out["queue_after"])
        for w in after["waiting"]:
            assert w["cells"]["id"] == w["id"] and w["cells"]["position"] == str(w["position"]), w
            assert all(re.fullmatch(r"\d+\.\d s|\d+m \d\ds", w["cells"][k]) for k in
                       ("waited", "eta_start", "eta_done")), w
        st = vd.status()  # nothing changed since: same figures
        assert {k: expected_segments(g) for k, g in enumerate(st["gpus"])} == \
            {k: expected_segments(g) for k, g in enumerate(out["status_after"]["gpus"])}

        # a lost connection is shown, and the page recovers by itself
        assert out["outage"]["conn"] == "lost" and out["outage"]["stale"], out["outage"]
        assert "lost" in out["outage"]["conn_text"] and out["outage"]["gpus_still_shown"] == 1
        assert out["recovered"]["conn"] == "live" and not out["recovered"]["stale"]

        png = screenshot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000
        if os.environ.get("VRAMD_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(screenshot, SCREENSHOT_DOC)
    finally:
        for h in held:
            h.close()
    vd.assert_ledger_clean(timeout=20)
    sched.finish()
