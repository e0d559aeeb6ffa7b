#!/usr/bin/python3
"""bad_shim_worker: a model server whose "CUDA shim" breaks the grant socket's protocol, for
the test that a malformed message fails that worker and never vramd (docs/shim.md).

It serves GET /health (200) on --port, and at start speaks to $VRAMD_SHIM_SOCKET as a shim
would, then breaks a rule chosen by --mode:
  garbage      64 random bytes as its first message
  ask-first    a well-formed ASK before any HELLO
  bad-token    a HELLO with a token that names no instance
  bad-slot     a HELLO with its token for a slot it did not claim (another pid's)
Each case writes "shim-sent MODE" on stderr once the bytes are out. Stdlib only.
"""
import argparse
import os
import socket
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAGIC = 0x48534D56
VERSION = 1
HELLO, ASK = 1, 3


def msg(mtype, seq=0, nbytes=0, aux=0, token=b"\0" * 16):
    return struct.pack("<IHHIIQQ16sQQ", MAGIC, VERSION, mtype, seq, 0, nbytes, aux, token, 0, 0)


def speak(mode):
    path = os.environ["VRAMD_SHIM_SOCKET"]
    token = bytes.fromhex(os.environ["VRAMD_SHIM_TOKEN"])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if mode == "garbage":
        s.sendall(os.urandom(64))
    elif mode == "ask-first":
        s.sendall(msg(ASK, seq=1, nbytes=1 << 20))
    elif mode == "bad-token":
        s.sendall(msg(HELLO, token=bytes(16)))
    elif mode == "bad-slot":
        s.sendall(msg(HELLO, aux=63, token=token))
    sys.stderr.write(f"shim-sent {mode}\n")
    sys.stderr.flush()
    return s  # kept open: vramd closes it


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["garbage", "ask-first", "bad-token", "bad-slot"], required=True)
    ap.add_argument("--name", default="bad-shim")
    args = ap.parse_args()
    keep = speak(args.mode)
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Health)
    print(f"listening port={args.port}", flush=True)
    try:
        srv.serve_forever()
    finally:
        keep.close()


if __name__ == "__main__":
    main()
