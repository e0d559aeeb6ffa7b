#!/usr/bin/python3
"""hand_shim_worker: a model server that speaks to vramd's grant socket by hand, as a CUDA shim
would, so a test can send asks no real shim sends (sizes near 2^64) and write into the grant
page what a broken shim might (garbage in live_total); docs/shim.md, gpu/shim_abi.h.

At start it maps $VRAMD_SHIM_PAGE, claims slot 0 (its pid, ATTACHED), connects to
$VRAMD_SHIM_SOCKET and says HELLO with $VRAMD_SHIM_TOKEN. It serves on --port:
  GET  /health  200
  POST /ask     {"bytes": N, "live": L (optional: written into its slot and live_total first)}
                -> {"answer": "grant"|"refuse", "bytes", "aux", "ms"} once vramd answered
Stdlib only.
"""
import argparse
import json
import mmap
import os
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAGIC = 0x48534D56
VERSION = 2  # SHIM_ABI_VERSION
HELLO, HELLO_OK, ASK, GRANT, REFUSE = 1, 2, 3, 4, 5
LIVE_TOTAL = 32        # offsetof(shim_page_t, live_total)
SLOT0 = 136            # offsetof(shim_page_t, procs)
SLOT_PID, SLOT_STATE, SLOT_LIVE = 0, 4, 8
FMT = "<IHHIIQQ16sQQ"


def msg(mtype, seq=0, nbytes=0, aux=0, token=b"\0" * 16):
    return struct.pack(FMT, MAGIC, VERSION, mtype, seq, 0, nbytes, aux, token, 0, 0)


def recv_msg(s):
    data = b""
    while len(data) < 64:
        b = s.recv(64 - len(data))
        if not b:
            raise ConnectionError("vramd closed the grant connection")
        data += b
    _, _, mtype, seq, _, nbytes, aux, _, _, _ = struct.unpack(FMT, data)
    return mtype, seq, nbytes, aux


class Shim:
    def __init__(self):
        fd = os.open(os.environ["VRAMD_SHIM_PAGE"], os.O_RDWR)
        self.page = mmap.mmap(fd, 0)
        os.close(fd)
        struct.pack_into("<II", self.page, SLOT0 + SLOT_PID, os.getpid(), 1)
        self.token = bytes.fromhex(os.environ["VRAMD_SHIM_TOKEN"])
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.environ["VRAMD_SHIM_SOCKET"])
        self.sock.sendall(msg(HELLO, aux=0, token=self.token))
        mtype = recv_msg(self.sock)[0]
        if mtype != HELLO_OK:
            raise RuntimeError(f"HELLO answered {mtype}")
        self.seq = 0
        self.lock = threading.Lock()

    def ask(self, nbytes, live=None):
        with self.lock:
            if live is not None:
                struct.pack_into("<Q", self.page, SLOT0 + SLOT_LIVE, live)
                struct.pack_into("<Q", self.page, LIVE_TOTAL, live)
            self.seq += 1
            t0 = time.monotonic()
            self.sock.sendall(msg(ASK, seq=self.seq, nbytes=nbytes,
                                  aux=struct.unpack_from("<Q", self.page, LIVE_TOTAL)[0]))
            mtype, seq, got, aux = recv_msg(self.sock)
            ms = (time.monotonic() - t0) * 1000
            return {"answer": {GRANT: "grant", REFUSE: "refuse"}.get(mtype, str(mtype)), "seq": seq,
                    "bytes": got, "aux": aux, "ms": ms}


SHIM = None


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(200, {"status": "ok"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        try:
            self.reply(200, SHIM.ask(int(req["bytes"]), req.get("live")))
        except Exception as e:  # noqa: BLE001 - the test reads what went wrong
            self.reply(500, {"error": str(e)})

    def log_message(self, *args):
        pass


def main():
    global SHIM
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="hand-shim")
    args = ap.parse_args()
    SHIM = Shim()
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening port={args.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
