#!/usr/bin/python3
"""llamacpp_standin: a stand-in for llama.cpp's `llama-server` on the simulated GPU, for vramd's
`preset: llamacpp` tests (tests/e2e/test_preset_llamacpp.py). Python stdlib plus ctypes into
the simulated CUDA driver (build/lib/libcuda-sim.so: cuMemAlloc_v2/cuMemFree_v2), so NVML
(sim) shows a loaded model's memory against this process.

Its reference is llama.cpp's tools/server/README.md (github:ggml-org/llama.cpp):
  flags      -m/--model FILE (single-model mode), --host (default 127.0.0.1), --port (default
             8080), --models-dir DIR (router mode: no -m; every *.gguf in DIR is a model whose
             id is the file name without .gguf), --models-max N (router: models loaded at once,
             default 4; loading one more unloads the least recently used), --no-models-autoload
             (router: a request for a model that is not loaded is refused instead of loading
             it), --sleep-idle-seconds N (the model is unloaded after N idle seconds and loaded
             again by the next request; -1 = never, the default)
  GET  /health               200 {"status":"ok"}; 503 {"error":{"code":503,"message":"Loading
                             model","type":"unavailable_error"}} while the model loads
  POST /completion           {"prompt", "n_predict", "stream"} -> {"content", "tokens_predicted", ...}
  POST /v1/chat/completions  OpenAI chat completions ("model" routes in router mode)
  GET  /v1/models            OpenAI model list
  GET  /models               router: {"data":[{"id", "object":"model", "path", "status":{"value":
                             "loaded"|"loading"|"unloaded"}}]}
  POST /models/load          router: {"model": NAME} -> {"success": true}
  POST /models/unload        router: {"model": NAME} -> {"success": true}
  In router mode each request is routed by its "model" field (a missing or unknown model:
  400/404 with an OpenAI-style error).

A model's GPU memory is its GGUF file's size (the weights; the KV cache is not simulated apart).
The real router runs each model in a child process; the stand-in holds them in its own
process (the same process tree for NVML's attribution). Simulated, not real: the text (the
words "token N"), the load time (LLAMACPP_STANDIN_LOAD_MS, default 200 ms) and the time per
token (LLAMACPP_STANDIN_TOKEN_MS, default 5 ms). A load that does not fit answers 500 with
llama.cpp's allocation failure text ("failed to allocate CUDA0 buffer ... out of memory").
"""
import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


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


class Model:
    def __init__(self, mid, path):
        self.id, self.path = mid, path
        self.size = path.stat().st_size
        self.ptr = None
        self.status = "unloaded"
        self.busy = 0
        self.last_used = 0.0


class Server:
    def __init__(self, args):
        self.args = args
        self.lib = cuda()
        self.lock = threading.Condition()
        self.load_s = int(os.environ.get("LLAMACPP_STANDIN_LOAD_MS", "200")) / 1000
        self.token_s = int(os.environ.get("LLAMACPP_STANDIN_TOKEN_MS", "5")) / 1000
        self.router = args.model is None
        if self.router:
            d = Path(args.models_dir) if args.models_dir else Path.home() / ".cache" / "llama.cpp"
            self.models = {p.name[:-5]: Model(p.name[:-5], p) for p in sorted(d.glob("*.gguf"))}
        else:
            p = Path(args.model)
            self.models = {p.name[:-5] if p.name.endswith(".gguf") else p.name: Model(p.name, p)}

    def log(self, text):
        print(f"llama-server-standin: {text}", flush=True)

    def _free_locked(self, m, why):
        if m.ptr is not None:
            self.lib.cuMemFree_v2(m.ptr)
            m.ptr = None
        m.status = "unloaded"
        self.log(f"unloaded {m.id} ({why})")

    def load(self, m):
        """Load m (router: the LRU idle model makes room past --models-max). None or an error."""
        with self.lock:
            while m.status == "loading":
                self.lock.wait(0.05)
            if m.status == "loaded":
                return None
            if self.router:
                while sum(x.status != "unloaded" for x in self.models.values()) >= self.args.models_max:
                    idle = [x for x in self.models.values() if x.status == "loaded" and x.busy == 0]
                    if not idle:
                        self.lock.wait(0.05)
                        continue
                    self._free_locked(min(idle, key=lambda x: x.last_used), "--models-max")
            ptr = ctypes.c_uint64(0)
            rc = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), m.size)
            if rc != 0:
                return (f"failed to allocate CUDA0 buffer of size {m.size}: cudaMalloc failed: out of memory "
                        f"(CUDA error {rc})")
            m.ptr = ptr.value
            m.status = "loading"
        time.sleep(self.load_s)
        with self.lock:
            m.status = "loaded"
            m.last_used = time.monotonic()
            self.lock.notify_all()
        self.log(f"loaded {m.id} ({m.size} bytes)")
        return None

    def unload(self, m):
        with self.lock:
            while m.busy > 0 or m.status == "loading":
                self.lock.wait(0.05)
            self._free_locked(m, "unload request")

    def idle_sleeper(self):
        """--sleep-idle-seconds: unload a model idle that long."""
        while True:
            time.sleep(0.1)
            with self.lock:
                for m in self.models.values():
                    if (m.status == "loaded" and m.busy == 0 and
                            time.monotonic() - m.last_used >= self.args.sleep_idle_seconds):
                        self._free_locked(m, "sleep-idle-seconds")


SERVER = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("llama-server-standin: " + (fmt % args) + "\n")

    def send_json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, message, kind):
        self.send_json(status, {"error": {"code": status, "message": message, "type": kind}})

    def do_GET(self):
        s = SERVER
        if self.path == "/health":
            loading = not s.router and next(iter(s.models.values())).status == "loading"
            if loading:
                self.error(503, "Loading model", "unavailable_error")
            else:
                self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": m.id, "object": "model", "owned_by": "llamacpp"}
                                                            for m in s.models.values()]})
        elif self.path == "/models" and s.router:
            with s.lock:
                self.send_json(200, {"data": [{"id": m.id, "object": "model", "owned_by": "llamacpp",
                                               "path": str(m.path), "status": {"value": m.status}}
                                              for m in s.models.values()]})
        else:
            self.error(404, "File Not Found", "not_found_error")

    def body(self):
        n = int(self.headers.get("Content-Length", "0"))
        doc = json.loads(self.rfile.read(n) or b"{}")
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        return doc

    def do_POST(self):
        s = SERVER
        try:
            req = self.body()
        except (ValueError, json.JSONDecodeError) as e:
            self.error(400, str(e), "invalid_request_error")
            return
        if self.path in ("/models/load", "/models/unload") and s.router:
            m = s.models.get(req.get("model") or "")
            if m is None:
                self.error(404, f"model {req.get('model')!r} not found", "not_found_error")
                return
            if self.path == "/models/unload":
                s.unload(m)
            else:
                err = s.load(m)
                if err:
                    self.error(500, err, "server_error")
                    return
            self.send_json(200, {"success": True})
            return
        if self.path not in ("/completion", "/v1/chat/completions"):
            self.error(404, "File Not Found", "not_found_error")
            return
        m = self.pick(req)
        if m is None:
            return
        with s.lock:
            m.busy += 1
        try:
            if m.status != "loaded" and (s.router and s.args.no_models_autoload):
                self.error(400, f"model {m.id!r} is not loaded", "invalid_request_error")
                return
            err = s.load(m)
            if err:
                self.error(500, err, "server_error")
                return
            self.answer(m, req)
        finally:
            with s.lock:
                m.busy -= 1
                m.last_used = time.monotonic()
                s.lock.notify_all()

    def pick(self, req):
        s = SERVER
        if not s.router:
            return next(iter(s.models.values()))
        name = req.get("model")
        if not name:
            self.error(400, "\"model\" is required in router mode", "invalid_request_error")
            return None
        m = s.models.get(name)
        if m is None:
            self.error(404, f"model {name!r} not found", "not_found_error")
        return m

    def answer(self, m, req):
        n = int(req.get("n_predict", req.get("max_tokens", 8)) or 8)
        n = max(1, min(n, 4096))
        time.sleep(n * SERVER.token_s)
        text = "".join(f"token {i} " for i in range(n))
        if self.path == "/completion":
            self.send_json(200, {"content": text, "model": m.id, "tokens_predicted": n, "stop": True})
        else:
            self.send_json(200, {"id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                                 "model": m.id, "choices": [{"index": 0, "finish_reason": "length",
                                                             "message": {"role": "assistant", "content": text}}],
                                 "usage": {"completion_tokens": n}})


def parse(argv):
    p = argparse.ArgumentParser(prog="llama-server")
    p.add_argument("-m", "--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--models-dir")
    p.add_argument("--models-max", type=int, default=4)
    p.add_argument("--no-models-autoload", action="store_true")
    p.add_argument("--sleep-idle-seconds", type=float, default=-1)
    args, _ = p.parse_known_args(argv)  # the many tuning flags (-ngl, -c, ...) change nothing here
    if args.models_max < 1:
        p.error("--models-max must be at least 1")
    return args


def main(argv):
    global SERVER
    args = parse(argv[1:])
    SERVER = Server(args)
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    SERVER.log(f"listening on http://{args.host}:{args.port} ({'router' if SERVER.router else 'single-model'} "
               f"mode, models {sorted(SERVER.models)})")
    if args.sleep_idle_seconds >= 0:
        threading.Thread(target=SERVER.idle_sleeper, daemon=True).start()
    if not SERVER.router:  # single-model: load at start (/health answers 503 meanwhile)
        threading.Thread(target=lambda: SERVER.load(next(iter(SERVER.models.values()))), daemon=True).start()
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
