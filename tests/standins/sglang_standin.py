#!/usr/bin/python3
"""sglang_standin: a stand-in for SGLang's server (`python -m sglang.launch_server`) on a
simulated GPU, for vramd's preset tests. Python 3 stdlib plus ctypes into the simulated CUDA
driver (vllm_standin.SimCuda: build/lib/libcuda-sim.so, $SIMGPU, $CUDA_VISIBLE_DEVICES).

Usage, as SGLang's own (https://docs.sglang.ai/advanced_features/server_arguments.html):
    python3 -m sglang.launch_server --model-path M [--host H] [--port P]
        [--mem-fraction-static F] [--enable-memory-saver] [--served-model-name N] [others: ignored]
(tests/standins/pymod/sglang/launch_server.py runs this file: put tests/standins/pymod on
PYTHONPATH.) Defaults: port 30000, mem-fraction-static 0.88.

What it copies from SGLang, and where from:
  - Memory at start (server arguments, "--mem-fraction-static: the fraction of the memory used
    for static allocation (model weights and KV cache memory pool)"; sglang/srt/model_executor/
    model_runner.py): it takes that fraction of the card's total at start; when the card's free
    memory is less, it fails with "RuntimeError: Not enough memory. Please try to increase
    --mem-fraction-static." (exit 1). Here: a residue (CUDA context and graphs: min(1 GiB,
    10 %)), the weights (40 %) and the KV cache pool (the rest), each a cuMemAlloc.
  - Routes (sglang/srt/entrypoints/http_server.py; https://docs.sglang.ai/basic_usage/
    native_api.html and openai_api): GET /health (200), GET /v1/models, POST /generate
    ({"text", "sampling_params"} -> {"text", "meta_info"}), POST /v1/chat/completions.
  - Memory saver (https://docs.sglang.ai/advanced_features/server_arguments.html,
    "--enable-memory-saver: allow saving memory using release_memory_occupation and
    resume_memory_occupation"; the adapter is torch_memory_saver):
    POST /release_memory_occupation {} frees the weights and the KV cache (the residue stays),
    POST /resume_memory_occupation {} takes them back; both answer 200. Without
    --enable-memory-saver SGLang's scheduler refuses (its TorchMemorySaverAdapter.check_validity:
    "You must enable memory saver (e.g. --enable-memory-saver) to use
    release_memory_occupation"): here 500 with that text, nothing freed. While released,
    generation answers 503.
"""
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_standin import GiB, SimCuda  # noqa: E402


def parse_args(argv):
    opts = {"model-path": None, "host": "127.0.0.1", "port": 30000, "mem-fraction-static": 0.88,
            "enable-memory-saver": False, "served-model-name": None}
    flags = {"enable-memory-saver"}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--"):
            sys.stderr.write(f"launch_server.py: error: unrecognized arguments: {word}\n")
            sys.exit(2)
        name, _, value = word[2:].partition("=")
        name = name.replace("_", "-")
        if name == "model":
            name = "model-path"
        if name in flags:
            opts[name] = True
        else:
            if not value:
                i += 1
                value = argv[i] if i < len(argv) else ""
            opts[name] = value
        i += 1
    if not opts["model-path"]:
        sys.stderr.write("launch_server.py: error: the following arguments are required: --model-path\n")
        sys.exit(2)
    opts["port"] = int(opts["port"])
    opts["mem-fraction-static"] = float(opts["mem-fraction-static"])
    return opts


class Engine:
    def __init__(self, opts, cuda):
        self.opts = opts
        self.cuda = cuda
        self.lock = threading.Lock()
        self.released = False
        free, total = cuda.mem_get_info()
        fraction = opts["mem-fraction-static"]
        requested = int(fraction * total)
        if free < requested:
            sys.stderr.write("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n")
            sys.exit(1)
        self.residue = min(GiB, requested // 10)
        self.weights = int(requested * 0.4)
        self.kv = requested - self.residue - self.weights
        self.held = {}
        for tag, size in (("residue", self.residue), ("weights", self.weights), ("kv_cache", self.kv)):
            ptr = cuda.alloc(size)
            if ptr is None:
                sys.stderr.write(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {size / GiB:.2f} GiB\n")
                sys.exit(1)
            self.held[tag] = ptr
        print(f"[INFO] server_args: model_path={opts['model-path']!r}, port={opts['port']}, "
              f"mem_fraction_static={fraction}, enable_memory_saver={opts['enable-memory-saver']}", flush=True)
        print(f"[INFO] Memory pool taken: {requested / GiB:.2f} GiB", flush=True)

    def release(self):
        """None when done, else the error text."""
        with self.lock:
            if not self.opts["enable-memory-saver"]:
                return ("You must enable memory saver (e.g. --enable-memory-saver) to use "
                        "release_memory_occupation")
            if self.released:
                return None
            for tag in ("weights", "kv_cache"):
                self.cuda.free(self.held.pop(tag))
            self.released = True
            print("[INFO] release_memory_occupation: weights and KV cache released", flush=True)
            return None

    def resume(self):
        with self.lock:
            if not self.opts["enable-memory-saver"]:
                return False
            if not self.released:
                return True
            for tag, size in (("weights", self.weights), ("kv_cache", self.kv)):
                ptr = self.cuda.alloc(size)
                if ptr is None:
                    return False
                self.held[tag] = ptr
            self.released = False
            print("[INFO] resume_memory_occupation: weights and KV cache back", flush=True)
            return True

    def model_id(self):
        return self.opts["served-model-name"] or self.opts["model-path"]


def make_handler(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stdout.write("[INFO] %s %s\n" % (self.address_string(), fmt % args))
            sys.stdout.flush()

        def send(self, status, body=b""):
            self.send_response(status)
            if body:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_json(self, status, obj):
            self.send(status, json.dumps(obj).encode())

        def read_json(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return None

        def do_GET(self):
            path = urlsplit(self.path).path
            if path in ("/health", "/health_generate"):
                self.send(200)
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": engine.model_id(), "object": "model",
                                                                 "created": int(time.time()), "owned_by": "sglang",
                                                                 "root": engine.opts["model-path"]}]})
            elif path == "/get_model_info":
                self.send_json(200, {"model_path": engine.opts["model-path"], "is_generation": True})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def do_POST(self):
            path = urlsplit(self.path).path
            body = self.read_json()
            if path == "/release_memory_occupation":
                error = engine.release()
                if error:
                    self.send_json(500, {"error": {"message": error}})
                else:
                    self.send(200)
            elif path == "/resume_memory_occupation":
                if engine.resume():
                    self.send(200)
                else:
                    self.send_json(500, {"error": "CUDA out of memory"})
            elif path in ("/generate", "/v1/chat/completions"):
                self.generate(path, body)
            else:
                self.send_json(404, {"detail": "Not Found"})

        def generate(self, path, body):
            if not isinstance(body, dict):
                self.send_json(400, {"error": {"message": "invalid JSON body"}})
                return
            if engine.released:
                self.send_json(503, {"error": {"message": "memory released: resume_memory_occupation first"}})
                return
            if path == "/generate":
                prompt = str(body.get("text", ""))
                text = f"[{engine.model_id()}] {prompt[:200]}"
                self.send_json(200, {"text": text, "meta_info": {
                    "id": uuid.uuid4().hex, "finish_reason": {"type": "stop"},
                    "prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}})
                return
            msgs = body.get("messages") or []
            prompt = str(msgs[-1].get("content", "")) if msgs and isinstance(msgs[-1], dict) else ""
            text = f"[{engine.model_id()}] {prompt[:200]}"
            self.send_json(200, {
                "id": uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or engine.model_id(),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()),
                          "total_tokens": len(prompt.split()) + len(text.split())}})

    return Handler


def main(argv):
    opts = parse_args(argv)
    try:
        cuda = SimCuda()
    except (OSError, RuntimeError) as e:
        sys.stderr.write(f"RuntimeError: no CUDA GPU available ({e})\n")
        return 1
    engine = Engine(opts, cuda)
    server = ThreadingHTTPServer((opts["host"], opts["port"]), make_handler(engine))
    server.daemon_threads = True
    print(f"[INFO] The server is fired up and ready to roll! (http://{opts['host']}:{opts['port']})", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main(sys.argv[1:]))
