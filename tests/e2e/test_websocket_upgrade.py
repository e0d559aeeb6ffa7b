"""e2e: protocol upgrades (WebSocket) passed through to a worker (model key `upgrade:
[websocket]`, path/proxy_upgrade.c), with a real WebSocket client (Debian's
python3-websockets) against tests/e2e/ws_echo_worker.py.

Covers, and expects:
- text and binary messages (up to 4 MiB) echo back unchanged through vramd; the worker sees
  the route prefix stripped, vramd's X-Request-Id and X-Forwarded-For; /metrics and
  /v1/status count the open tunnel; upgrade_open / upgrade_closed are logged;
- a model without `upgrade:` refuses the upgrade as before (400, code upgrade_not_allowed,
  Connection: close), and so do vramd's own routes; a POST upgrade is a 400 bad_request;
- a worker's non-101 answer (403) reaches the client as a normal response;
- limits.upgrade_idle_timeout closes a silent tunnel (reason idle_timeout);
- limits.upgrades_per_client: one over it is refused 429 too_many_upgrades;
- the worker stopped (admin unload) or killed (SIGKILL) -> the client sees the connection
  close; a drain closes every tunnel (an external server's too) and vramd exits 0;
- a slow reader: 300 messages of 64 KiB sent while the client reads slowly all come back in
  order (backpressure both ways instead of unbounded buffering);
- an open tunnel does not hold the model's concurrency slot: a plain request runs beside it.
The request smuggling tests (test_smuggling.py) keep strict parsing for everything else.
"""
import asyncio
import json
import os
import socket

import pytest
import websockets

from vramdkit import wait_for
from vramdkit.paths import PYTHON

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ws_echo_worker.py")


def ws_model(route="/ws-echo/", **over):
    m = {
        "route": route,
        "cmd": [PYTHON, WORKER, "--port", "{port}"],
        "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2},
        "startup_timeout": "15s",
        "stop_timeout": "2s",
        "concurrency": 1,
        "keep_alive": "10m",
        "upgrade": ["websocket"],
    }
    m.update(over)
    return m


def start(vramd, limits=None, **models):
    models = models or {"echo": ws_model()}
    vd = vramd.start(models=models, limits=limits)
    for name in models:
        vd.post(f"/v1/models/{name}/load")
        vd.wait_ready(name)
    return vd


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def url(vd, path="/ws-echo/ws"):
    return f"ws://127.0.0.1:{vd.port}{path}"


def connect(vd, path="/ws-echo/ws", **kw):
    return websockets.connect(url(vd, path), ping_interval=None, max_size=64 << 20, compression=None, **kw)


def raw_upgrade(vd, path, method="GET", extra=""):
    """An upgrade request by hand; (status line, whole answer) as text."""
    s = socket.create_connection(("127.0.0.1", vd.port), timeout=10)
    s.sendall((f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    text = data.decode(errors="replace")
    return text.split("\r\n", 1)[0], text


def test_echo_text_and_binary_large_and_counted(vramd):
    vd = start(vramd)

    async def go():
        async with connect(vd, "/ws-echo/whoami") as ws:
            who = json.loads(await ws.recv())
            assert who["path"] == "/whoami", who          # the route prefix stripped
            assert who["x-request-id"], who
            assert who["x-forwarded-for"] == "127.0.0.1", who
            for msg in ("hello", "ü" * 1000, b"\x00\x01\xff" * 10, os.urandom(4 << 20), "x" * (1 << 20)):
                await ws.send(msg)
                back = await ws.recv()
                assert type(back) is type(msg) and back == msg, (type(msg), len(msg))
            m = vd.get("/metrics").body.decode()
            assert "vramd_upgraded_connections 1" in m, [l for l in m.splitlines() if "upgraded" in l]
            assert vd.status()["connections"]["upgraded"] == 1
    run(go())
    # RFC 6455 7.1.1: after the closing handshake the server closes TCP first
    assert vd.wait_event("upgrade_closed")[0]["reason"] in ("worker_closed", "client_closed")
    opened = vd.events("upgrade_open", model="echo")
    assert len(opened) == 1, opened
    wait_for(lambda: vd.status()["connections"]["upgraded"] == 0, timeout=10, what="tunnel counted closed")
    assert "vramd_upgraded_connections_total 1" in vd.get("/metrics").body.decode()


def test_model_without_upgrade_and_own_routes_refuse(vramd):
    vd = start(vramd, plain=ws_model(route="/plain/", upgrade=[]), echo=ws_model())
    line, text = raw_upgrade(vd, "/plain/ws")
    assert line.startswith("HTTP/1.1 400"), text
    assert '"upgrade_not_allowed"' in text and "plain" in text, text
    assert "Connection: close" in text, text
    line, text = raw_upgrade(vd, "/v1/status")
    assert line.startswith("HTTP/1.1 400") and '"upgrade_not_allowed"' in text, text
    line, text = raw_upgrade(vd, "/ws-echo/ws", method="POST", extra="Content-Length: 0\r\n")
    assert line.startswith("HTTP/1.1 400") and '"bad_request"' in text, text

    async def refused():
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            async with connect(vd, "/plain/ws"):
                pass
        assert e.value.status_code == 400
    run(refused())


def test_worker_refusal_passed_back(vramd):
    vd = start(vramd)
    line, text = raw_upgrade(vd, "/ws-echo/refuse")
    assert line.startswith("HTTP/1.1 403"), text
    assert text.endswith('{"error":"no websocket here"}'), text
    assert "application/json" in text, text


def test_idle_timeout_closes(vramd):
    vd = start(vramd, limits={"upgrade_idle_timeout": "1s"})

    async def go():
        async with connect(vd) as ws:
            await ws.send("still here")
            assert await ws.recv() == "still here"
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 15)
    run(go())
    vd.wait_event("upgrade_closed", reason="idle_timeout")


def test_per_client_cap(vramd):
    vd = start(vramd, limits={"upgrades_per_client": 2})

    async def go():
        async with connect(vd) as a, connect(vd) as b:
            with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
                async with connect(vd):
                    pass
            assert e.value.status_code == 429
            await a.send("a")
            await b.send("b")
            assert await a.recv() == "a" and await b.recv() == "b"
        # closed ones no longer count
        wait_for(lambda: vd.status()["connections"]["upgraded"] == 0, timeout=10, what="tunnels closed")
        async with connect(vd) as c:
            await c.send("c")
            assert await c.recv() == "c"
    run(go())
    assert vd.events("upgrade_refused", reason="upgrades_per_client")


def test_worker_stopped_closes_tunnel(vramd):
    vd = start(vramd)

    async def go():
        async with connect(vd) as ws:
            await ws.send("before")
            assert await ws.recv() == "before"
            r = vd.post("/v1/models/echo/unload")
            assert r.status in (200, 202), r
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 15)
    run(go())
    ev = vd.wait_event("upgrade_closed")[0]
    assert ev["reason"] == "worker_stopped", ev  # closed by vramd when the instance stops


def test_worker_crash_closes_tunnel(vramd):
    """SIGKILL of the worker: the client sees the close, the tunnel is no longer counted."""
    import signal
    vd = start(vramd)

    async def go():
        async with connect(vd) as ws:
            await ws.send("before")
            assert await ws.recv() == "before"
            for pid in vd.worker_pids("echo"):
                os.kill(pid, signal.SIGKILL)
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 15)
    run(go())
    ev = vd.wait_event("upgrade_closed")[0]
    assert ev["reason"] in ("worker_stopped", "worker_closed"), ev
    wait_for(lambda: vd.status()["connections"]["upgraded"] == 0, timeout=10, what="tunnel counted closed")


def test_slow_reader_backpressure_and_no_slot_held(vramd):
    vd = start(vramd)
    n, size = 300, 64 << 10

    async def go():
        async with connect(vd, max_queue=1) as ws:
            # an open tunnel holds no concurrency slot (concurrency is 1): /health still runs
            assert vd.get("/ws-echo/health").status == 200

            async def sender():
                for i in range(n):
                    await ws.send(i.to_bytes(4, "big") * (size // 4))

            async def reader():
                got = 0
                while got < n:
                    if got < 40:
                        await asyncio.sleep(0.02)  # slow at first: the buffers fill up
                    msg = await ws.recv()
                    assert len(msg) == size and msg[:4] == got.to_bytes(4, "big"), got
                    got += 1
                return got

            _, got = await asyncio.gather(sender(), reader())
            assert got == n
    run(go())
    closed = vd.wait_event("upgrade_closed")[0]
    assert closed["reason"] in ("worker_closed", "client_closed"), closed
    assert closed["to_worker"] >= n * size and closed["to_client"] >= n * size, closed
    # the slow reader made vramd stop reading the worker (debug event) instead of buffering
    assert vd.events("upgrade_paused", side="worker"), "no backpressure on the worker's side"


def test_drain_closes_tunnels_to_an_external_server(vramd, tmp_path):
    """An external server (url:) is never stopped by a drain, so its tunnels would have no
    end: a drain closes every tunnel at its start, and vramd exits 0 (its teardown fails
    the test on a sanitizer report, a leak included)."""
    from vramdkit.daemon import ExternalWorker
    from vramdkit.net import free_port
    port = free_port()
    ext = ExternalWorker([PYTHON, WORKER, "--port", str(port)], port, "wsext", tmp_path / "wsext.log",
                         what="ws echo worker")
    try:
        m = {"route": "/ext/", "url": f"http://127.0.0.1:{port}", "upgrade": ["websocket"],
             "health": {"path": "/health", "interval": "1s", "timeout": "1s", "failures": 2}}
        vd = vramd.start(models={"ext": m})
        vd.wait_ready("ext")

        async def go():
            async with connect(vd, "/ext/ws") as ws:
                await ws.send("x")
                assert await ws.recv() == "x"
                stopper = asyncio.get_running_loop().run_in_executor(None, vd.stop)
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 15)
                await stopper
        run(go())
        assert vd.events("upgrade_closed", reason="draining"), vd.events("upgrade_closed")
    finally:
        ext.close()


@pytest.mark.parametrize("tunnels", [1, 2, 8])
def test_sigterm_with_tunnels_open_exits(vramd, tunnels):
    """SIGTERM with 1, 2 and 8 tunnels open to a supervised worker (issue 36, defect 1): the
    drain closes the tunnels, the drain's end stops the worker (whose stop closed the tunnels
    left, from inside the drain's own walk over them: with two or more, that walk spun for
    ever on a tunnel taken off the list under it). vramd exits 0 within the drain timeout,
    every client sees its connection closed, and the worker is reaped, not left a zombie."""
    import signal
    import time
    drain_s = 10
    vd = start(vramd, limits={"drain_timeout": f"{drain_s}s", "upgrades_per_client": 16})
    pids = vd.worker_pids("echo")
    assert pids

    async def go():
        socks = [await connect(vd) for _ in range(tunnels)]
        for i, ws in enumerate(socks):
            await ws.send(f"m{i}")
            assert await ws.recv() == f"m{i}"
        t0 = time.monotonic()
        vd.signal(signal.SIGTERM)
        for ws in socks:
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), drain_s)
        return t0

    t0 = run(go())
    rc = vd.wait_exit(drain_s + 5)
    assert rc == 0, f"vramd did not exit 0 within the drain timeout (rc={rc}); log:\n{vd.log_tail(40)}"
    assert time.monotonic() - t0 < drain_s, "exit took the whole drain timeout"
    closed = vd.events("upgrade_closed")
    assert len(closed) == tunnels, closed
    assert all(e["reason"] in ("draining", "worker_stopped") for e in closed), closed

    def reaped():
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ", 1)[1].startswith("Z"):
                        return False
            except FileNotFoundError:
                continue
            return False
        return True
    wait_for(reaped, timeout=10, what="the worker gone (no zombie)")
