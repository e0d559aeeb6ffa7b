#!/usr/bin/python3
"""ollama_standin: a stand-in for `ollama serve` on the simulated GPU, for vramd's
`preset: ollama` tests (tests/e2e/test_preset_ollama.py). Python stdlib plus ctypes into the
simulated CUDA driver (build/lib/libcuda-sim.so: cuMemAlloc_v2/cuMemFree_v2), so NVML (sim)
shows a loaded model's memory against this process, as it shows a real Ollama's.

Its reference is Ollama's own documentation (github:ollama/ollama):
  docs/api.md
    GET  /api/version          {"version": "..."}
    GET  /api/tags             the local models
    GET  /api/ps               the loaded models: name, model, size, digest, details,
                               expires_at, size_vram (bytes of the model in GPU memory)
    POST /api/generate         {"model", "prompt", "stream" (default true: NDJSON chunks),
                               "keep_alive", "options": {"num_predict"}}; "Load a model: if an
                               empty prompt is provided, the model will be loaded into memory"
                               (answer done_reason "load"); "Unload a model: if an empty prompt
                               is provided and the keep_alive parameter is set to 0, a model
                               will be unloaded from memory" (done_reason "unload")
    POST /api/chat             the same with "messages" (empty messages: load / unload)
    keep_alive                 a duration string ("10m", "24h") or a number of seconds; a
                               negative value keeps the model loaded; 0 unloads it as soon as
                               the request is answered; default 5m
    a model that is not there  404 {"error": "model \"NAME\" not found, try pulling it first"}
  docs/faq.md
    OLLAMA_HOST                the bind address, host:port (default 127.0.0.1:11434)
    OLLAMA_KEEP_ALIVE          the default keep_alive
    OLLAMA_MAX_LOADED_MODELS   how many models may be loaded at once; loading one more first
                               unloads the least recently used idle one (the scheduler also
                               unloads idle models when the new one does not fit in VRAM)
    OLLAMA_MODELS              where models are stored
  docs/openai.md
    POST /v1/chat/completions  OpenAI chat completions; "model" names the Ollama model (loaded
                               on demand like /api/chat)
  GET / answers "Ollama is running" (server/routes.go).

Models: $OLLAMA_MODELS/manifests/registry.ollama.ai/library/NAME/TAG, Ollama's manifest
layout; a manifest's layer of mediaType application/vnd.ollama.image.model gives the model's
size, and the stand-in's size_vram is that size (the weights; KV cache is not simulated
apart). NAME without a tag means NAME:latest.

Simulated, not real: the text generated (the words "token N"), the load time
(OLLAMA_STANDIN_LOAD_MS, default 100 ms) and the time per token (OLLAMA_STANDIN_TOKEN_MS,
default 5 ms). A load that does not fit after unloading every idle model answers 500 with
Ollama's out-of-memory text.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = "0.12.0-standin"
MODEL_LAYER = "application/vnd.ollama.image.model"


def cuda_path():
    """The simulated CUDA driver: $VRAMD_CUDA_LIBRARY, else build/lib/libcuda-sim.so."""
    path = os.environ.get("VRAMD_CUDA_LIBRARY")
    if not path:
        build = Path(os.environ.get("VRAMD_BUILD", "build"))
        if not build.is_absolute():
            build = Path(__file__).resolve().parents[2] / build
        path = str(build / "lib" / "libcuda-sim.so")
    return path


def reexec_for_sanitizer(path):
    """A sanitizer build's libcuda-sim.so (make SAN=1) needs the ASan runtime loaded first,
    which a plain python3 does not have: run this script again with it preloaded (and no leak
    report: python's own allocations are not the library's)."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return
    asan = next((line.split("=>")[1].split()[0] for line in out.splitlines()
                 if "libasan" in line and "=>" in line), None)
    if asan:
        env = dict(os.environ, LD_PRELOAD=asan,
                   ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def cuda():
    path = cuda_path()
    reexec_for_sanitizer(path)
    return CudaDevice0(ctypes.CDLL(path))


class CudaDevice0:
    """The driver calls a server makes: cuInit, the primary context of visible device 0, made
    current in whichever thread allocates (the driver's current context is per thread)."""

    def __init__(self, lib):
        self.lib = lib
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        dev, self.ctx = ctypes.c_int(0), ctypes.c_void_p()
        for rc in (lib.cuInit(0), lib.cuDeviceGet(ctypes.byref(dev), 0),
                   lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev)):
            if rc != 0:
                raise SystemExit(f"CUDA error {rc} (no simulated GPU: SIMGPU, CUDA_VISIBLE_DEVICES)")

    def cuMemAlloc_v2(self, dptr, size):  # noqa: N802 (the driver's name)
        self.lib.cuCtxSetCurrent(self.ctx)
        return self.lib.cuMemAlloc_v2(dptr, size)

    def cuMemFree_v2(self, ptr):  # noqa: N802
        self.lib.cuCtxSetCurrent(self.ctx)
        return self.lib.cuMemFree_v2(ptr)


def parse_keep_alive(value, default):
    """Seconds (None = forever) from keep_alive as api.md documents it."""
    if value is None:
        value = default
    if isinstance(value, bool):
        raise ValueError("keep_alive must be a duration or a number")
    if isinstance(value, (int, float)):
        return None if value < 0 else float(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        v = float(text)
        return None if v < 0 else v
    total, pos = 0.0, 0
    neg = text.startswith("-")
    text = text.lstrip("-")
    for m in re.finditer(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text):
        if m.start() != pos:
            raise ValueError(f"time: invalid duration {value!r}")
        total += float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"time: invalid duration {value!r}")
    return None if neg else total


def full_name(name):
    return name if ":" in name else name + ":latest"


class Model:
    def __init__(self, name, size, digest):
        self.name, self.size, self.digest = name, size, digest
        self.ptr = None  # the device pointer while loaded
        self.busy = 0
        self.expires = None  # monotonic deadline; None = never
        self.keep_alive = None
        self.last_used = 0.0


class Ollama:
    def __init__(self):
        self.lib = cuda()
        self.lock = threading.Condition()
        self.default_keep_alive = parse_keep_alive(None, os.environ.get("OLLAMA_KEEP_ALIVE", "5m"))
        self.max_loaded = int(os.environ.get("OLLAMA_MAX_LOADED_MODELS", "0") or 0)  # 0 = 3 per GPU
        if self.max_loaded <= 0:
            self.max_loaded = 3
        self.load_s = int(os.environ.get("OLLAMA_STANDIN_LOAD_MS", "100")) / 1000
        self.token_s = int(os.environ.get("OLLAMA_STANDIN_TOKEN_MS", "5")) / 1000
        self.models = {}
        root = Path(os.environ.get("OLLAMA_MODELS", Path.home() / ".ollama" / "models"))
        lib = root / "manifests" / "registry.ollama.ai" / "library"
        for manifest in sorted(lib.glob("*/*")) if lib.is_dir() else []:
            doc = json.loads(manifest.read_text())
            layer = next(x for x in doc["layers"] if x["mediaType"] == MODEL_LAYER)
            name = f"{manifest.parent.name}:{manifest.name}"
            self.models[name] = Model(name, int(layer["size"]), layer["digest"])

    def find(self, name):
        return self.models.get(full_name(name)) if name else None

    def _unload_locked(self, m, why):
        if m.ptr is not None:
            self.lib.cuMemFree_v2(m.ptr)
            m.ptr = None
            m.expires = None
            print(f"ollama-standin: unloaded {m.name} ({why})", flush=True)

    def _evict_one_locked(self):
        idle = [x for x in self.models.values() if x.ptr is not None and x.busy == 0]
        if not idle:
            return False
        self._unload_locked(min(idle, key=lambda x: x.last_used), "making room")
        return True

    def load(self, m, keep_alive):
        """Load m (unloading idle models for room as Ollama's scheduler does); its keep-alive
        is set from this request. Returns None or an error text."""
        with self.lock:
            m.busy += 1
            m.keep_alive = keep_alive
            if m.ptr is not None:
                return None
            while sum(x.ptr is not None for x in self.models.values()) >= self.max_loaded:
                if not self._evict_one_locked():
                    self.lock.wait(0.05)
            while True:
                ptr = ctypes.c_uint64(0)
                rc = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), m.size)
                if rc == 0:
                    m.ptr = ptr.value
                    break
                if not self._evict_one_locked():
                    m.busy -= 1
                    return (f"model requires more system memory than is available: cudaMalloc failed: "
                            f"out of memory (CUDA error {rc})")
        time.sleep(self.load_s)
        print(f"ollama-standin: loaded {m.name} size_vram={m.size}", flush=True)
        return None

    def done(self, m):
        """A request on m ended: its keep-alive starts (0: unloaded now)."""
        with self.lock:
            m.busy -= 1
            m.last_used = time.monotonic()
            if m.busy == 0:
                if m.keep_alive == 0:
                    self._unload_locked(m, "keep_alive 0")
                elif m.ptr is not None:
                    m.expires = None if m.keep_alive is None else time.monotonic() + m.keep_alive
            self.lock.notify_all()

    def reaper(self):
        while True:
            time.sleep(0.05)
            with self.lock:
                now = time.monotonic()
                for m in self.models.values():
                    if m.ptr is not None and m.busy == 0 and m.expires is not None and now >= m.expires:
                        self._unload_locked(m, "keep_alive expired")

    def ps(self):
        with self.lock:
            out = []
            for m in self.models.values():
                if m.ptr is None:
                    continue
                if m.busy or m.expires is None:
                    left = None if m.keep_alive is None else m.keep_alive
                else:
                    left = max(0.0, m.expires - time.monotonic())
                exp = (datetime(2318, 1, 1, tzinfo=timezone.utc) if left is None
                       else datetime.now(timezone.utc) + timedelta(seconds=left))
                out.append({"name": m.name, "model": m.name, "size": m.size, "digest": m.digest,
                            "details": {"format": "gguf", "family": "standin"},
                            "expires_at": exp.isoformat(), "size_vram": m.size})
            return {"models": out}


OLLAMA = None


def now_iso():
    return datetime.now(timezone.utc).isoformat()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("ollama-standin: " + (fmt % args) + "\n")

    def send_json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        if self.path == "/":
            self.send_response(200)
            self.send_header("Content-Length", "17")
            self.end_headers()
        else:
            self.send_error(404)

    def do_GET(self):
        if self.path == "/":
            body = b"Ollama is running"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/api/version":
            self.send_json(200, {"version": VERSION})
        elif self.path == "/api/ps":
            self.send_json(200, OLLAMA.ps())
        elif self.path == "/api/tags":
            self.send_json(200, {"models": [{"name": m.name, "model": m.name, "size": m.size,
                                             "digest": m.digest} for m in OLLAMA.models.values()]})
        else:
            self.send_json(404, {"error": "404 page not found"})

    def do_POST(self):
        if self.path not in ("/api/generate", "/api/chat", "/v1/chat/completions"):
            self.send_json(404, {"error": "404 page not found"})
            return
        try:
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n) or b"{}")
            if not isinstance(req, dict):
                raise ValueError("expected a JSON object")
            keep_alive = parse_keep_alive(req.get("keep_alive"), os.environ.get("OLLAMA_KEEP_ALIVE", "5m"))
        except (ValueError, json.JSONDecodeError) as e:
            self.send_json(400, {"error": str(e)})
            return
        openai = self.path == "/v1/chat/completions"
        chat = self.path == "/api/chat"
        name = req.get("model")
        m = OLLAMA.find(name)
        if not name:
            self.send_json(400, {"error": "model is required"})
            return
        if m is None:
            self.send_json(404, {"error": f'model "{name}" not found, try pulling it first'})
            return
        empty = not req.get("messages") if chat else not req.get("prompt")
        if openai:
            self.openai_chat(m, req, keep_alive)
            return
        if empty and keep_alive == 0:  # "Unload a model"
            with OLLAMA.lock:
                if m.busy == 0:
                    OLLAMA._unload_locked(m, "keep_alive 0 request")
                else:
                    m.keep_alive = 0  # unloaded when its running requests end
            self.send_json(200, self.final(m, chat, "unload"))
            return
        err = OLLAMA.load(m, keep_alive)
        if err:
            self.send_json(500, {"error": err})
            return
        try:
            if empty:  # "Load a model"
                self.send_json(200, self.final(m, chat, "load"))
            else:
                self.generate(m, req, chat)
        finally:
            OLLAMA.done(m)

    def openai_chat(self, m, req, keep_alive):
        err = OLLAMA.load(m, keep_alive)
        if err:
            self.send_json(500, {"error": {"message": err, "type": "api_error"}})
            return
        try:
            n = max(1, min(int(req.get("max_tokens") or 8), 4096))
            time.sleep(n * OLLAMA.token_s)
            text = "".join(f"token {i} " for i in range(n))
            self.send_json(200, {"id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                                 "model": m.name, "choices": [{"index": 0, "finish_reason": "length",
                                                               "message": {"role": "assistant", "content": text}}],
                                 "usage": {"completion_tokens": n}})
        finally:
            OLLAMA.done(m)

    def final(self, m, chat, reason, tokens=0):
        doc = {"model": m.name, "created_at": now_iso(), "done": True, "done_reason": reason}
        if chat:
            doc["message"] = {"role": "assistant", "content": ""}
        else:
            doc["response"] = ""
        if tokens:
            doc.update({"eval_count": tokens, "total_duration": int(tokens * OLLAMA.token_s * 1e9)})
        return doc

    def generate(self, m, req, chat):
        tokens = int((req.get("options") or {}).get("num_predict", 8))
        tokens = max(1, min(tokens, 4096))
        stream = req.get("stream", True)
        pieces = []
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        for i in range(tokens):
            time.sleep(OLLAMA.token_s)
            piece = f"token {i} "
            pieces.append(piece)
            if stream:
                doc = {"model": m.name, "created_at": now_iso(), "done": False}
                if chat:
                    doc["message"] = {"role": "assistant", "content": piece}
                else:
                    doc["response"] = piece
                self.chunk(json.dumps(doc).encode() + b"\n")
        last = self.final(m, chat, "stop" if tokens < 4096 else "length", tokens)
        if stream:
            self.chunk(json.dumps(last).encode() + b"\n")
            self.chunk(b"")
        else:
            if chat:
                last["message"]["content"] = "".join(pieces)
            else:
                last["response"] = "".join(pieces)
            self.send_json(200, last)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def bind_address():
    host = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434")
    host = re.sub(r"^https?://", "", host).rstrip("/")
    if ":" in host:
        h, _, p = host.rpartition(":")
        return (h or "127.0.0.1", int(p))
    return (host, 11434)


def main(argv):
    global OLLAMA
    if len(argv) < 2 or argv[1] != "serve":
        sys.stderr.write("usage: ollama serve   (the stand-in implements only `serve`)\n")
        return 2
    OLLAMA = Ollama()
    threading.Thread(target=OLLAMA.reaper, daemon=True).start()
    server = ThreadingHTTPServer(bind_address(), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"ollama-standin: Listening on {server.server_address[0]}:{server.server_address[1]} "
          f"(version {VERSION}), models {sorted(OLLAMA.models)}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
