#!/usr/bin/python3
"""worker: the fixed-cost model server of the durable-jobs benchmark (stdlib only).

Job: answer every request in a known, small, fixed time, so that what a request costs on
its way through vramd (synchronously, or as a durable job) is what the benchmark sees.
One asyncio loop, HTTP/1.1 with keep-alive, many connections at once:

  GET  /health        200 {"status":"ok"}
  ANY  /work/<ms>     reads the body (Content-Length or chunked), waits <ms> milliseconds
                      (0: answers at once, without a timer), answers 200 application/json
                      {"work_ms": <ms>, "body_bytes": <n>}
  ANY  other          404

Invariants: bounded reads (head 16 KiB, body 1 MiB, <ms> at most 60000); a request that
breaks these rules gets 400 and its connection closed; nothing is logged per request (the
worker's own time must stay small and constant). Flags: --port P (127.0.0.1 only).
"""
import argparse
import asyncio
import json
import sys

MAX_HEAD = 16 * 1024
MAX_BODY = 1024 * 1024
MAX_MS = 60000


def answer(status, body, close=False):
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "X")
    head = ("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (status, reason, len(body), "Connection: close\r\n" if close else ""))
    return head.encode() + body


async def read_body(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return bytes(body)
            if len(body) + size > MAX_BODY:
                raise ValueError("body too large")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    n = int(headers.get("content-length", "0"))
    if n < 0 or n > MAX_BODY:
        raise ValueError("bad content-length")
    return await reader.readexactly(n) if n else b""


async def serve(reader, writer):
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                writer.write(answer(400, b'{"error":"head too large"}', close=True))
                break
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                writer.write(answer(400, b'{"error":"bad request line"}', close=True))
                break
            method, target = parts[0], parts[1]
            headers = {}
            for line in lines[1:]:
                if line:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
            try:
                body = await read_body(reader, headers)
            except ValueError as e:
                writer.write(answer(400, json.dumps({"error": str(e)}).encode(), close=True))
                break
            close = headers.get("connection", "").lower() == "close"
            path = target.split("?", 1)[0]
            if method == "GET" and path == "/health":
                writer.write(answer(200, b'{"status":"ok"}', close))
            elif path.startswith("/work/") and path[6:].isdigit() and int(path[6:]) <= MAX_MS:
                ms = int(path[6:])
                if ms:
                    await asyncio.sleep(ms / 1000.0)
                writer.write(answer(200, b'{"work_ms":%d,"body_bytes":%d}' % (ms, len(body)), close))
            else:
                writer.write(answer(404, b'{"error":"no such route"}', close))
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main_async(port):
    server = await asyncio.start_server(serve, "127.0.0.1", port, limit=MAX_HEAD, backlog=1024)
    sys.stdout.write("worker listening on %d\n" % port)
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    try:
        asyncio.run(main_async(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
