#!/usr/bin/python3
"""vllm_standin: a stand-in for `vllm serve` (vLLM's OpenAI-compatible server) on a simulated
GPU, for vramd's preset tests. Python 3 stdlib plus ctypes into the simulated CUDA driver
(build/lib/libcuda-sim.so, or $VRAMD_CUDA_LIBRARY; the GPU set named by $SIMGPU, the device
by $CUDA_VISIBLE_DEVICES), so that NVML (sim) shows its memory under its pid as it shows a
real vLLM's.

Usage, as vLLM's own CLI (https://docs.vllm.ai/en/latest/cli/serve.html):
    vllm serve MODEL [--host H] [--port P] [--gpu-memory-utilization F] [--enable-sleep-mode]
                     [--served-model-name NAME] [--max-model-len N] [other flags: ignored]
(tests/standins/bin/vllm runs this file; flags take `--flag V`, `--flag=V` or underscores,
as vLLM's FlexibleArgumentParser does.)

What it copies from vLLM, and where from:
  - Memory at start (https://docs.vllm.ai/en/latest/configuration/conserving_memory.html and
    vllm/v1/worker/gpu_worker.py): vLLM takes --gpu-memory-utilization (default 0.9) x the
    card's total memory at start, for weights, activations and the KV cache, whatever the
    model needs. If the card's free memory is less than that it refuses to start:
    "ValueError: Free memory on device (F/T GiB) on startup is less than desired GPU memory
    utilization (U, R GiB). Decrease GPU memory utilization or reduce GPU memory used by other
    processes." (exit 1; the text as vLLM prints it, e.g. vllm-project/vllm issue #20305:
    "Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory
    utilization (0.95, 45.01 GiB)"). Here: a residue (CUDA context, graphs: min(1 GiB, 10 %)), the
    weights (40 %) and the KV cache (the rest), each a cuMemAlloc.
  - Routes (vllm/entrypoints/openai/api_server.py; https://docs.vllm.ai/en/latest/serving/
    openai_compatible_server.html): GET /health (200, empty body), GET /v1/models, POST
    /v1/chat/completions, POST /v1/completions (OpenAI's shapes: id, object, created, model,
    choices, usage).
  - Sleep mode (https://docs.vllm.ai/en/latest/features/sleep_mode/ and
    vllm/entrypoints/serve/sleep/api_router.py, whose attach_router returns at once unless
    envs.VLLM_SERVER_DEV_MODE): POST /sleep?level=1, POST /wake_up and GET /is_sleeping
    ({"is_sleeping": bool}) exist only with VLLM_SERVER_DEV_MODE=1 in the environment (404
    otherwise). Level 1 offloads the weights to CPU memory and discards the KV cache: here
    both allocations are freed, the residue stays. The engine sleeps only when started with
    --enable-sleep-mode (its CuMemAllocator pool); without it this stand-in answers /sleep
    500 and stays awake (its choice: vLLM's own answer differs by version). /sleep and
    /wake_up answer 200 with an empty body; sleeping twice or waking an awake engine is a
    no-op, as in vLLM. While asleep, generation answers 503.
  - An answer before the work: vLLM's own api_router has "FIXME: in v0 with frontend
    multiprocessing, the sleep command is sent but does not finish yet when we return a
    response". VLLM_STANDIN_SLEEP_LAG_MS=N (the stand-in's one knob, for tests) does that:
    /sleep answers 200 at once and the engine falls asleep N ms later (/is_sleeping false
    until then).
  - Out of memory: a wake whose allocations do not fit answers 500 with
    "CUDA out of memory" (vLLM surfaces torch's OutOfMemoryError text).
"""
import ctypes
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

GiB = 1 << 30


def asan_reexec(path):
    """A sanitized libcuda-sim.so (`make SAN=1`) needs the ASan runtime first in the process:
    run this script again with it preloaded (leak checks off: they are about the C code
    under test, not Python's own allocations). Returns only when nothing is needed."""
    if os.environ.get("STANDIN_ASAN_PRELOADED"):
        return
    try:
        with open(path, "rb") as f:
            if b"libasan.so" not in f.read():
                return
    except OSError:
        return
    import subprocess
    runtime = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=runtime, STANDIN_ASAN_PRELOADED="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")  # the last one wins
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]], env)


class SimCuda:
    """cuInit, a context on visible device 0, cuMemGetInfo, cuMemAlloc/cuMemFree."""

    def __init__(self):
        path = os.environ.get("VRAMD_CUDA_LIBRARY") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", os.environ.get("VRAMD_BUILD", "build"),
            "lib", "libcuda-sim.so")
        asan_reexec(path)
        self.lib = ctypes.CDLL(path)
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.lock = threading.Lock()

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUDA error {rc}")

    def _current(self):
        self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def mem_get_info(self):
        self._current()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    def alloc(self, nbytes):
        """A device pointer, or None when it does not fit (CUDA_ERROR_OUT_OF_MEMORY)."""
        self._current()
        ptr = ctypes.c_uint64()
        rc = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(nbytes)))
        if rc == 2:
            return None
        self._check(rc, "cuMemAlloc")
        return ptr.value

    def free(self, ptr):
        self._current()
        self._check(self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")


def parse_args(argv):
    """vllm serve MODEL [flags]: a dict of the flags vLLM names them by (dashes)."""
    if len(argv) < 2 or argv[0] != "serve":
        sys.stderr.write("usage: vllm serve MODEL [--port P] [--gpu-memory-utilization F] ...\n")
        sys.exit(2)
    opts = {"model": argv[1], "host": None, "port": 8000, "gpu-memory-utilization": 0.9,
            "enable-sleep-mode": False, "served-model-name": None, "max-model-len": 4096}
    flags = {"enable-sleep-mode"}
    i = 2
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--"):
            sys.stderr.write(f"vllm: error: unrecognized argument: {word}\n")
            sys.exit(2)
        name, _, value = word[2:].partition("=")
        name = name.replace("_", "-")
        if name in flags:
            opts[name] = True
        else:
            if not value:
                i += 1
                value = argv[i] if i < len(argv) else ""
            opts[name] = value
        i += 1
    opts["port"] = int(opts["port"])
    opts["gpu-memory-utilization"] = float(opts["gpu-memory-utilization"])
    opts["max-model-len"] = int(opts["max-model-len"])
    return opts


class Engine:
    def __init__(self, opts, cuda):
        self.opts = opts
        self.cuda = cuda
        self.lock = threading.Lock()
        self.sleeping = False
        self.falling_asleep = False
        free, total = cuda.mem_get_info()
        util = opts["gpu-memory-utilization"]
        requested = int(util * total)
        if free < requested:
            sys.stderr.write(
                f"ValueError: Free memory on device ({round(free / GiB, 2)}/{round(total / GiB, 2)} GiB) on startup "
                f"is less than desired GPU memory utilization ({util}, {round(requested / GiB, 2)} GiB). Decrease "
                f"GPU memory utilization or reduce GPU memory used by other processes.\n")
            sys.exit(1)
        self.residue = min(GiB, requested // 10)
        self.weights = int(requested * 0.4)
        self.kv = requested - self.residue - self.weights
        self.held = {}
        for tag, size in (("residue", self.residue), ("weights", self.weights), ("kv_cache", self.kv)):
            ptr = cuda.alloc(size)
            if ptr is None:
                sys.stderr.write(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                 f"{size / GiB:.2f} GiB\n")
                sys.exit(1)
            self.held[tag] = ptr
        print(f"INFO: non-default args: {{'model': {opts['model']!r}, 'port': {opts['port']}, "
              f"'gpu_memory_utilization': {util}, 'enable_sleep_mode': {opts['enable-sleep-mode']}}}", flush=True)
        print(f"INFO: GPU memory taken at start: {requested / GiB:.2f} GiB "
              f"(gpu_memory_utilization {util} x {total / GiB:.2f} GiB)", flush=True)

    def sleep(self, level):
        with self.lock:
            if self.sleeping:
                return 200, b""
            if not self.opts["enable-sleep-mode"]:
                return 500, json.dumps({"error": "sleep mode is not enabled: start vllm serve with "
                                        "--enable-sleep-mode"}).encode()
            lag = int(os.environ.get("VLLM_STANDIN_SLEEP_LAG_MS") or 0)
            if self.falling_asleep:
                return 200, b""
            if lag > 0:
                self.falling_asleep = True
                timer = threading.Timer(lag / 1000.0, self._fall_asleep, (level,))
                timer.daemon = True
                timer.start()
                return 200, b""
            self._free_for_sleep(level)
            return 200, b""

    def _fall_asleep(self, level):
        with self.lock:
            self.falling_asleep = False
            if not self.sleeping:
                self._free_for_sleep(level)

    def _free_for_sleep(self, level):
        for tag in ("weights", "kv_cache"):
            self.cuda.free(self.held.pop(tag))
        self.sleeping = True
        print(f"INFO: It took 0.1 seconds to fall asleep (level {level}); "
              f"{self.residue / GiB:.2f} GiB still in use", flush=True)

    def wake_up(self):
        with self.lock:
            if not self.sleeping:
                return 200, b""
            for tag, size in (("weights", self.weights), ("kv_cache", self.kv)):
                ptr = self.cuda.alloc(size)
                if ptr is None:
                    return 500, json.dumps({"error": f"CUDA out of memory. Tried to allocate "
                                            f"{size / GiB:.2f} GiB"}).encode()
                self.held[tag] = ptr
            self.sleeping = False
            print("INFO: It took 0.1 seconds to wake up", flush=True)
            return 200, b""

    def model_id(self):
        return self.opts["served-model-name"] or self.opts["model"]


def make_handler(engine):
    dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE", "0") not in ("", "0")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stdout.write("INFO: %s %s\n" % (self.address_string(), fmt % args))
            sys.stdout.flush()

        def send(self, status, body=b"", ctype="application/json"):
            self.send_response(status)
            if body:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_json(self, status, obj):
            self.send(status, json.dumps(obj).encode())

        def not_found(self):
            self.send_json(404, {"detail": "Not Found"})

        def read_json(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return None

        def do_GET(self):
            path = urlsplit(self.path).path
            if path == "/health":
                self.send(200)
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{
                    "id": engine.model_id(), "object": "model", "created": int(time.time()), "owned_by": "vllm",
                    "root": engine.opts["model"], "parent": None, "max_model_len": engine.opts["max-model-len"]}]})
            elif path == "/is_sleeping" and dev_mode:
                self.send_json(200, {"is_sleeping": engine.sleeping})
            else:
                self.not_found()

        def do_POST(self):
            url = urlsplit(self.path)
            if url.path == "/sleep" and dev_mode:
                self.read_json()
                level = int(parse_qs(url.query).get("level", ["1"])[0])
                self.send(*engine.sleep(level))
            elif url.path == "/wake_up" and dev_mode:
                self.read_json()
                self.send(*engine.wake_up())
            elif url.path in ("/v1/chat/completions", "/v1/completions"):
                self.generate(url.path)
            else:
                self.read_json()
                self.not_found()

        def generate(self, path):
            body = self.read_json()
            if not isinstance(body, dict):
                self.send_json(400, {"object": "error", "message": "invalid JSON body", "type": "BadRequestError",
                                     "code": 400})
                return
            if engine.sleeping:
                self.send_json(503, {"object": "error", "message": "the engine is sleeping", "code": 503})
                return
            chat = path.endswith("chat/completions")
            if chat:
                msgs = body.get("messages") or []
                prompt = str(msgs[-1].get("content", "")) if msgs and isinstance(msgs[-1], dict) else ""
            else:
                prompt = str(body.get("prompt", ""))
            text = f"[{engine.model_id()}] {prompt[:200]}"
            words = len(prompt.split())
            choice = {"index": 0, "finish_reason": "stop", "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            self.send_json(200, {
                "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": body.get("model") or engine.model_id(),
                "choices": [choice],
                "usage": {"prompt_tokens": words, "completion_tokens": len(text.split()),
                          "total_tokens": words + len(text.split())}})

    return Handler


def main(argv):
    opts = parse_args(argv)
    try:
        cuda = SimCuda()
    except (OSError, RuntimeError) as e:
        sys.stderr.write(f"RuntimeError: no CUDA GPU available ({e})\n")
        return 1
    engine = Engine(opts, cuda)
    server = ThreadingHTTPServer((opts["host"] or "0.0.0.0", opts["port"]), make_handler(engine))
    server.daemon_threads = True
    print(f"INFO: Started server process [{os.getpid()}]; Uvicorn running on http://{opts['host'] or '0.0.0.0'}:"
          f"{opts['port']}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main(sys.argv[1:]))
