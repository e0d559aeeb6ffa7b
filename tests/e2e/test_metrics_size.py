"""e2e: /metrics, /v1/status and /v1/models stay complete when their bodies pass 64 KiB
(100 models); vramd keeps running. Every socket has a timeout.
"""
import json
import os
import shutil
import subprocess

import pytest

from e2ekit import assert_alive, external_model
from vramdkit.net import RawConn, free_port


# --- large /metrics, /v1/status, /v1/models ----------------------------------------

N_MODELS = 100


def get_complete(port, path):
    """One request: (headers, body, problem). The body must be exactly Content-Length
    bytes: not cut short by a close, not missing (a client waiting for the promised bytes
    times out instead)."""
    with RawConn(port, timeout=15) as c:
        c.send(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        status, _, headers = c.read_head(timeout=15)
        h = {k.lower(): v for k, v in headers}
        if status != 200 or "content-length" not in h:
            return h, b"", f"GET {path}: {status} {headers}"
        n = int(h["content-length"])
        try:
            body, complete = c.read_body(status, headers, timeout=15)
        except TimeoutError:
            return h, c.buf, (f"GET {path}: 200 with Content-Length {n} but only {len(c.buf)} "
                              f"body bytes within 15 s")
        if not complete or len(body) != n:
            return h, body, (f"GET {path}: 200 with Content-Length {n}, but the connection "
                             f"closed after {len(body)} body bytes")
        return h, body, None


def test_large_metrics_status_and_models_are_complete(vramd):
    """100 external models (url: to a closed port; health checks 1 h apart, so they stay
    ready): /metrics (~360 KB), /v1/status (~80 KB) and /v1/models answer complete bodies,
    the JSON ones list all 100 models and promtool accepts the exposition. Failed: a body
    past 64 KiB came as 200 with its Content-Length and no body bytes."""
    closed = free_port()
    models = {f"m{i:03d}": external_model(closed, f"m{i:03d}") for i in range(N_MODELS)}
    vd = vramd.start(models=models, log={"format": "json", "level": "info"})
    names = set(models)
    got = {path: get_complete(vd.port, path) for path in ("/v1/models", "/v1/status", "/metrics")}
    problems = [p for _, _, p in got.values() if p]
    assert not problems, "; ".join(problems)

    ids = {d["id"] for d in json.loads(got["/v1/models"][1])["data"]}
    assert names <= ids, sorted(names - ids)[:5]
    st = json.loads(got["/v1/status"][1])
    assert {m["name"] for m in st["models"]} == names

    h, body, _ = got["/metrics"]
    assert h.get("content-type", "").startswith("text/plain"), h
    assert len(body) > 64 * 1024, f"/metrics is only {len(body)} bytes: the case proves nothing"
    text = body.decode("utf-8")
    for name in ("m000", f"m{N_MODELS // 2:03d}", f"m{N_MODELS - 1:03d}"):
        assert f'model="{name}"' in text, name
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not os.path.exists(promtool):
        pytest.skip("promtool is not installed (Debian package prometheus)")
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, f"promtool check metrics exit {p.returncode}: {p.stdout}{p.stderr}"
    assert_alive(vd, "after the large scrapes")
