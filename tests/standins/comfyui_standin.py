"""A ComfyUI stand-in: `python comfyui_standin.py --listen 127.0.0.1 --port P [--reserve-vram GB]`.

Routes, after ComfyUI's server.py (github.com/comfyanonymous/ComfyUI, server.py, PromptServer
routes) and its docs (docs.comfy.org, "Server Routes"):
  GET  /system_stats      {"system": {...}, "devices": [{"vram_total", "vram_free", ...}]}
  POST /prompt            {"prompt": {node_id: {"class_type", "inputs"}}} -> 200
                          {"prompt_id", "number", "node_errors": {}} at once; the prompt runs
                          later on the queue (PromptQueue in execution.py), one at a time on a
                          worker thread (main.py's prompt_worker)
  GET  /history/{id}      {} until the prompt ran, then {id: {"prompt", "outputs",
                          "status": {"status_str": "success"|"error", "completed",
                          "messages": [[event, data], ...]}}} (execution_error carries
                          exception_message, e.g. PyTorch's "CUDA out of memory. ...")
  GET  /queue             {"queue_running": [...], "queue_pending": [...]}
  POST /free              {"unload_models", "free_memory"}: nothing resident here, 200
  GET  /ws                WebSocket (RFC 6455, server side hand-rolled): "status" at connect,
                          (to that client), then execution_start, executing {node}, executed,
                          executing {node: null} (done), execution_success / execution_error
                          as JSON text frames to every client
A CheckpointLoaderSimple node with an absolute ckpt_name waits until that file exists before
the prompt's GPU work (a checkpoint load; tests open it when they choose).
Memory: a prompt takes width x height x batch_size x 64 bytes (its EmptyLatentImage node) of
simulated GPU memory (standin_common.SimAlloc) for its run (KSampler steps x 40 ms), and fails
with "CUDA out of memory" text when that does not fit. --reserve-vram is accepted (ComfyUI:
GB kept free for other programs) and shown in /system_stats.
"""
import argparse
import base64
import hashlib
import json
import os
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_common import SimAlloc, SimOOM  # noqa: E402

LOCK = threading.Condition()
QUEUE, HISTORY, RUNNING, SOCKETS = [], {}, [], []
COUNTER = [0]
ARGS = None
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


WS_LOCK = threading.Lock()  # one frame at a time on every socket


def broadcast(kind, data, only=None):
    """A JSON text frame (unmasked, server to client) to every /ws client, or to `only`."""
    frame = json.dumps({"type": kind, "data": data}).encode()
    n = len(frame)
    head = bytes([0x81, n]) if n < 126 else (bytes([0x81, 126]) + struct.pack(">H", n) if n < 65536
                                            else bytes([0x81, 127]) + struct.pack(">Q", n))
    with WS_LOCK:
        for s in [only] if only else list(SOCKETS):
            try:
                s.sendall(head + frame)
            except OSError:
                if s in SOCKETS:
                    SOCKETS.remove(s)


def load_checkpoint(prompt):
    """A CheckpointLoaderSimple whose ckpt_name is an absolute path "loads" it: waits until
    the file exists (at most 30 s), as ComfyUI reads the checkpoint before sampling. Tests
    use it to start a prompt's GPU work when they choose. None, or the error text."""
    for node in prompt.values():
        name = node.get("inputs", {}).get("ckpt_name", "")
        if node.get("class_type") == "CheckpointLoaderSimple" and os.path.isabs(name):
            end = time.monotonic() + 30
            while not os.path.exists(name):
                if time.monotonic() > end:
                    return "[Errno 2] No such file or directory: %r" % name
                time.sleep(0.02)
    return None


def prompt_cost(prompt):
    nbytes, steps = 0, 1
    for node in prompt.values():
        inp = node.get("inputs", {})
        if node.get("class_type") == "EmptyLatentImage":
            nbytes += int(inp.get("width", 512)) * int(inp.get("height", 512)) * int(inp.get("batch_size", 1)) * 64
        if node.get("class_type") == "KSampler":
            steps = int(inp.get("steps", 20))
    return nbytes, steps


def run_prompt(pid, prompt):
    nbytes, steps = prompt_cost(prompt)
    msgs = [["execution_start", {"prompt_id": pid}]]
    broadcast("execution_start", {"prompt_id": pid})
    broadcast("executing", {"node": "3", "prompt_id": pid})
    missing = load_checkpoint(prompt)
    if missing:
        err = {"prompt_id": pid, "exception_type": "FileNotFoundError", "exception_message": missing}
        msgs.append(["execution_error", err])
        return {"status_str": "error", "completed": False, "messages": msgs}, {}
    try:
        alloc = SimAlloc(nbytes) if nbytes else None
    except SimOOM as e:
        err = {"prompt_id": pid, "exception_type": "torch.OutOfMemoryError",
               "exception_message": "CUDA out of memory. Tried to allocate %d bytes. %s" % (nbytes, e)}
        msgs.append(["execution_error", err])
        broadcast("execution_error", err)
        return {"status_str": "error", "completed": False, "messages": msgs}, {}
    try:
        time.sleep(steps * 0.04)
    finally:
        if alloc:
            alloc.release()
    out = {"9": {"images": [{"filename": "%s.png" % pid, "type": "output"}]}}
    broadcast("executed", {"node": "9", "output": out["9"], "prompt_id": pid})
    broadcast("executing", {"node": None, "prompt_id": pid})  # ComfyUI's "prompt finished"
    msgs.append(["execution_success", {"prompt_id": pid}])
    broadcast("execution_success", {"prompt_id": pid})
    return {"status_str": "success", "completed": True, "messages": msgs}, out


def worker():
    while True:
        with LOCK:
            while not QUEUE:
                LOCK.wait()
            item = QUEUE.pop(0)
            RUNNING.append(item)
        status, outputs = run_prompt(item[1], item[2])
        with LOCK:
            RUNNING.remove(item)
            HISTORY[item[1]] = {"prompt": list(item), "outputs": outputs, "status": status}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/system_stats":
            self.reply(200, {"system": {"comfyui_version": "standin", "argv": sys.argv,
                                        "reserve_vram_gb": ARGS.reserve_vram},
                             "devices": [{"name": "cuda:0", "type": "cuda", "index": 0}]})
        elif self.path.startswith("/history/"):
            pid = self.path[len("/history/"):]
            with LOCK:
                h = HISTORY.get(pid)
            self.reply(200, {pid: h} if h else {})
        elif self.path == "/queue":
            with LOCK:
                self.reply(200, {"queue_running": [list(i) for i in RUNNING],
                                 "queue_pending": [list(i) for i in QUEUE]})
        elif self.path.startswith("/ws"):
            self.websocket()
        else:
            self.reply(404, {"error": "not found"})

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            self.reply(400, {"error": "expected a WebSocket upgrade"})
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        with LOCK:
            remaining = len(QUEUE) + len(RUNNING)
        broadcast("status", {"status": {"exec_info": {"queue_remaining": remaining}}, "sid": uuid.uuid4().hex},
                  only=self.connection)
        SOCKETS.append(self.connection)
        try:
            while self.rfile.read(1):  # until the client closes (frames from it are ignored)
                pass
        finally:
            if self.connection in SOCKETS:
                SOCKETS.remove(self.connection)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n) if n else b""
        if self.path == "/free":
            self.reply(200, {})
            return
        if self.path != "/prompt":
            self.reply(404, {"error": "not found"})
            return
        try:
            prompt = json.loads(raw)["prompt"]
            assert isinstance(prompt, dict)
        except Exception:
            self.reply(400, {"error": {"type": "no_prompt", "message": "No prompt provided"}, "node_errors": {}})
            return
        pid = str(uuid.uuid4())
        with LOCK:
            COUNTER[0] += 1
            number = COUNTER[0]
            QUEUE.append((number, pid, prompt))
            LOCK.notify()
        self.reply(200, {"prompt_id": pid, "number": number, "node_errors": {}})


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8188)
    ap.add_argument("--reserve-vram", type=float, default=None)
    ap.add_argument("--disable-smart-memory", action="store_true")
    ap.add_argument("--lowvram", action="store_true")
    ARGS = ap.parse_args()
    threading.Thread(target=worker, daemon=True).start()
    ThreadingHTTPServer((ARGS.listen, ARGS.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
