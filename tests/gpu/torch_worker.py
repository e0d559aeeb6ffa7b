#!/usr/bin/env python3
"""A tiny PyTorch model server for tests/gpu: real CUDA allocations behind HTTP.

GET /health -> 200 once the "model" (a resident tensor of --resident-mib) is on the GPU; its
JSON says how long CUDA's start and the load took (ms). --load-from-host fills the tensor in
host memory first and copies it over (a load of weights already in the page cache).
POST /generate {"mib": N, "ms": M} -> allocates N MiB more for M ms (a matmul keeps the GPU
busy), then frees it (PyTorch keeps it cached, as real servers do); answers JSON.
POST /clear_cache/ -> torch.cuda.empty_cache(). A CUDA OOM answers 500 with PyTorch's text.
GET /memory -> torch.cuda.memory_reserved() and memory_allocated() of this process, its pid,
and the allocator backend (PYTORCH_CUDA_ALLOC_CONF), for the CUDA shim's test.
--random-fill fills the resident tensor with random bytes on the GPU; GET /checksum -> its
sum and a position-weighted sum of a strided sample (read on the GPU: a park that lost or
moved bytes changes them).
"""
import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
ap.add_argument("--resident-mib", type=int, default=512)
ap.add_argument("--load-from-host", action="store_true")
ap.add_argument("--random-fill", action="store_true")
args = ap.parse_args()
device = torch.device("cuda:0")  # CUDA_VISIBLE_DEVICES (set by vramd) picks the card
t0 = time.monotonic()
torch.zeros(1, device=device)  # the CUDA context
cuda_init_ms = (time.monotonic() - t0) * 1000
if args.load_from_host:
    host = torch.empty(args.resident_mib * 2**20, dtype=torch.uint8).fill_(1)
    t1 = time.monotonic()
    resident = host.to(device)
    del host
else:
    t1 = time.monotonic()
    resident = torch.empty(args.resident_mib * 2**20, dtype=torch.uint8, device=device)
if args.random_fill:
    resident.random_(0, 256)
torch.cuda.synchronize()
TIMES = {"cuda_init_ms": cuda_init_ms, "load_ms": (time.monotonic() - t1) * 1000}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/checksum"):
            sample = resident[::4093].to(torch.int64)
            weights = torch.arange(1, sample.numel() + 1, device=device, dtype=torch.int64)
            return self.reply(200, {"sum": int(torch.sum(resident, dtype=torch.int64)),
                                    "weighted": int(torch.sum(sample * weights)), "pid": os.getpid()})
        if self.path.startswith("/memory"):
            return self.reply(200, {"reserved": torch.cuda.memory_reserved(device),
                                    "allocated": torch.cuda.memory_allocated(device), "pid": os.getpid(),
                                    "backend": torch.cuda.get_allocator_backend(),
                                    "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")})
        self.reply(200, {"status": "ok", **TIMES}) if self.path.startswith("/health") else self.reply(404, {})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path.startswith("/clear_cache"):
            torch.cuda.empty_cache()
            return self.reply(200, {"cleared": True})
        try:
            mib, ms = int(req.get("mib", 256)), int(req.get("ms", 200))
            t = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
            a = torch.randn(1024, 1024, device=device)
            end = time.time() + ms / 1000
            while time.time() < end:
                a = a @ a
                a = a / a.norm()
            torch.cuda.synchronize()
            del t, a
            self.reply(200, {"ok": True, "allocated_mib": mib, "pid": os.getpid()})
        except torch.cuda.OutOfMemoryError as e:
            self.reply(500, {"detail": "CUDA out of memory. " + str(e)})


ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
