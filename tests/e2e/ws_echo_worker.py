#!/usr/bin/env python3
"""A small WebSocket echo worker for vramd's upgrade tests (tests/e2e/test_websocket_upgrade.py).

Serves, on --port (127.0.0.1), with Debian's python3-websockets (RFC 6455 server):
  GET /health           200 "ok" (vramd's health check; a plain HTTP request)
  GET /ws               WebSocket: every message (text or binary) is sent back unchanged;
                        the first message of each connection is preceded by nothing else.
  GET /whoami (ws)      WebSocket: sends one text message, the request path and the
                        X-Request-Id / X-Forwarded-For headers it got, as JSON, then echoes.
  GET /refuse           403 with a JSON body, never upgraded (a worker that says no).
Anything else: 404. No pings from the server (the tests set their own idle bounds).
"""
import argparse
import asyncio
import http
import json

import websockets


async def process_request(path, headers):
    if path == "/health":
        return http.HTTPStatus.OK, [("Content-Type", "text/plain")], b"ok\n"
    if path == "/refuse":
        return (http.HTTPStatus.FORBIDDEN, [("Content-Type", "application/json")],
                b'{"error":"no websocket here"}')
    if path not in ("/ws", "/whoami"):
        return http.HTTPStatus.NOT_FOUND, [("Content-Type", "text/plain")], b"not found\n"
    return None


async def handler(ws, path):
    if path == "/whoami":
        await ws.send(json.dumps({"path": path, "x-request-id": ws.request_headers.get("X-Request-Id"),
                                  "x-forwarded-for": ws.request_headers.get("X-Forwarded-For")}))
    try:
        async for msg in ws:
            await ws.send(msg)
    except websockets.ConnectionClosed:
        pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="", help="ignored: a tag in the command line that tests find it by")
    a = ap.parse_args()
    async with websockets.serve(handler, "127.0.0.1", a.port, process_request=process_request,
                                ping_interval=None, max_size=64 << 20, compression=None):
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
