"""e2e: `preset: sglang` against a stand-in SGLang (tests/standins/sglang_standin.py, run as
`python3 -m sglang.launch_server` with tests/standins/pymod on PYTHONPATH) on a simulated GPU.

Covers, and expects:
  - examples/preset-sglang/vramd.yaml as shipped (only `listen:` moved to a free port and JSON
    logs added) starts SGLang with --mem-fraction-static {mem_fraction} appended by the preset
    (20GiB of an 80 GiB card -> 0.25): the process holds exactly 0.25 x the card; /generate
    (SGLang's native API) and /v1/chat/completions answer through the model's route.
  - an admin unload parks it by /release_memory_occupation (--enable-memory-saver is in the
    example's cmd): the process keeps only its residue, the instance is parked (tier
    sleeping); the next request resumes it (/resume_memory_occupation) and is answered.
  - without --enable-memory-saver, --check-config warns naming models.s.cmd (exit 1 with
    --strict), and SGLang refuses the release (500, "You must enable memory saver"): the park
    falls to the next tier (the worker is stopped).
"""
import json
import os
import re
import subprocess

from vramdkit.daemon import Vramd
from vramdkit.harness import GiB, harness_fixture, Harness
from vramdkit.net import free_port
from vramdkit.paths import REPO_ROOT, vramd_binary
from vramdkit.waits import wait_for

sched = harness_fixture(Harness)

EXAMPLE = REPO_ROOT / "examples" / "preset-sglang" / "vramd.yaml"
PYMOD = REPO_ROOT / "tests" / "standins" / "pymod"


def standin_env():
    return {"PYTHONPATH": str(PYMOD), "PATH": f"/usr/bin:{os.environ.get('PATH', '/bin')}"}


def process_bytes(h, gpu_set):
    return sorted(p["used"] for g in h.show(gpu_set)["gpus"] for p in g["processes"])


def test_example_runs_unchanged(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    text = EXAMPLE.read_text()
    text = re.sub(r"^listen: .*$", f"listen: 127.0.0.1:{free_port()}\nlog: {{format: json}}", text, flags=re.M)
    vd = Vramd(h.tmp, "vramd0", text, gpu_set=gs, cwd=h.tmp, stdout_apart=False, http="stdlib",
               start_timeout=30.0, stop_timeout=30.0, request_timeout=60.0, extra_env=standin_env())
    h.daemons.append(vd)
    vd.start()
    r = vd.post("/qwen/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 8}})
    assert r.status == 200, (r.status, r.body, vd.log_tail())
    assert json.loads(r.body)["text"] == "[Qwen/Qwen2.5-7B-Instruct] hello"
    r = vd.post("/qwen/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200 and json.loads(r.body)["choices"][0]["message"]["content"].endswith("hi"), r.body
    total = 80 * GiB
    assert [abs(b - int(0.25 * total)) < 1 << 20 for b in process_bytes(h, gs)] == [True], process_bytes(h, gs)
    r = vd.post("/v1/models/qwen/unload", {})
    assert r.status == 200 and json.loads(r.body)["tier"] == "sleeping", (r.status, r.body)
    assert abs(process_bytes(h, gs)[0] - GiB) < 1 << 20, process_bytes(h, gs)  # the residue
    assert vd.first("hook_call", model="qwen", hook="sleep")["path"] == "/release_memory_occupation"
    r = vd.post("/qwen/generate", {"text": "again"})
    assert r.status == 200 and json.loads(r.body)["text"].endswith("again"), r.body
    assert vd.first("hook_call", model="qwen", hook="wake")["path"] == "/resume_memory_occupation"
    assert abs(process_bytes(h, gs)[0] - int(0.25 * total)) < 1 << 20
    h.finish()


def test_without_memory_saver(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    cmd = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "{port}"]
    path = h.tmp / "check.yaml"
    path.write_text("models:\n  s:\n    preset: sglang\n    cmd: [python3, -m, sglang.launch_server, --model-path, "
                    "m, --port, \"{port}\"]\n    memory: {resident: 4GiB}\n")
    p = subprocess.run([str(vramd_binary()), "--check-config", str(path)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and "warning: models.s.cmd: preset sglang uses the sleep tier " \
        "(sleep: /release_memory_occupation) but cmd lacks --enable-memory-saver" in p.stderr, p.stderr
    p = subprocess.run([str(vramd_binary()), "--check-config", "--strict", str(path)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1, p.stderr
    m = {"preset": "sglang", "cmd": cmd, "memory": {"resident": "4GiB"}, "stop_timeout": "1s",
         "startup_timeout": "30s", "health": {"interval": "200ms"}}
    vd = h.start_vramd(gs, {"s": m}, extra_env=standin_env())
    r = vd.post("/s/generate", {"text": "x"})
    assert r.status == 200, (r.status, r.body)
    vd.post("/v1/models/s/unload", {})
    done = vd.wait_event("sleep_hook_done", model="s")[0]
    assert done["status"] == 500 and done["outcome"] != "ok", done  # SGLang refuses without the flag
    wait_for(lambda: not process_bytes(h, gs), timeout=20, what="the worker stopped (the tier after sleep)")
    h.finish()
