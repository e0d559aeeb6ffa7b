"""e2e: `preset: vllm` against a stand-in vLLM (tests/standins/vllm_standin.py, run as `vllm`
through the PATH shim tests/standins/bin/vllm) on a simulated GPU (24 GiB for the example, 80 GiB for the others).

Covers, and expects:
  - examples/preset-vllm/vramd.yaml as shipped (only `listen:` moved to a free port and JSON
    logs added, which the test reads) starts both vLLM models side by side on the one card:
    each answers an OpenAI chat completion through its route, and each process holds exactly
    {mem_fraction} x the card (8GiB/24GiB -> 0.34, 6GiB/24GiB -> 0.25), which is what the
    preset appended as --gpu-memory-utilization.
  - an admin unload parks qwen by vLLM's level-1 sleep: the sleep hook answers, GET
    /is_sleeping confirms true (sleep_confirm outcome=ok) before the memory counts as freed;
    the process keeps only its residue; the next request wakes it (confirmed false) and is
    answered.
  - a /sleep that answers before the engine sleeps (vLLM's own FIXME; the stand-in's
    VLLM_STANDIN_SLEEP_LAG_MS): vramd asks /is_sleeping again until it says true (asked > 1)
    and parks; when the engine is not asleep within the sleep hook's timeout, the
    confirmation fails (sleep_confirm outcome=failed, is_sleeping false) and the park falls
    to the next tier (the worker is stopped).
  - without dev mode (env VLLM_SERVER_DEV_MODE: null) --check-config warns naming
    models.x.env, the stand-in answers the sleep routes 404 (as vLLM does: the routes are not
    attached), so the park falls to the next tier (the worker is stopped).
  - an explicit --gpu-memory-utilization 0.9 that disagrees with memory.resident: vramd logs
    mem_fraction_mismatch naming both figures at the instance's start, and the stand-in,
    like vLLM, refuses to start when the card's free memory is below 0.9 x 80 GiB (a foreign
    20 GiB holder): exit 1 with vLLM's "Free memory on device ... is less than desired GPU
    memory utilization" text.
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

STANDIN_BIN = REPO_ROOT / "tests" / "standins" / "bin"
EXAMPLE = REPO_ROOT / "examples" / "preset-vllm" / "vramd.yaml"


def standin_env():
    return {"PATH": f"{STANDIN_BIN}:{vramd_binary().parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def start_text(h, gpu_set, text):
    """vramd on gpu_set from a config text (the harness writes JSON dicts; this keeps YAML)."""
    vd = Vramd(h.tmp, f"vramd{len(h.daemons)}", text, gpu_set=gpu_set, cwd=h.tmp, stdout_apart=False,
               http="stdlib", start_timeout=30.0, stop_timeout=30.0, request_timeout=60.0,
               extra_env=standin_env())
    h.daemons.append(vd)
    vd.start()
    wait_for(lambda: vd.status()["nvml"]["ok"] and vd.status()["gpus"], timeout=30.0, what="vramd reading NVML")
    return vd


def chat(vd, model, text="hello"):
    r = vd.post(f"/{model}/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": text}]})
    assert r.status == 200, (r.status, r.body, vd.log_tail())
    return json.loads(r.body)


def process_bytes(h, gpu_set):
    return sorted(p["used"] for g in h.show(gpu_set)["gpus"] for p in g["processes"])


def test_example_runs_unchanged(sched):
    h = sched
    gs = h.gpu_set("24GiB")
    text = EXAMPLE.read_text()
    text = re.sub(r"^listen: .*$", f"listen: 127.0.0.1:{free_port()}\nlog: {{format: json}}", text, flags=re.M)
    vd = start_text(h, gs, text)
    a = chat(vd, "qwen", "hi qwen")
    assert a["object"] == "chat.completion"
    assert a["choices"][0]["message"]["content"] == "[Qwen/Qwen2.5-1.5B-Instruct] hi qwen"
    b = chat(vd, "llama", "hi llama")
    assert b["choices"][0]["message"]["content"] == "[meta-llama/Llama-3.2-1B-Instruct] hi llama"
    # both resident at once, each holding its fraction of the card
    total = 24 * GiB
    want = sorted([int(0.34 * total), int(0.25 * total)])
    got = process_bytes(h, gs)
    assert len(got) == 2 and all(abs(g - w) < 1 << 20 for g, w in zip(got, want)), (got, want)
    assert all(m["state"] == "ready" for m in vd.status()["models"]), vd.status()["models"]
    # park qwen by sleep: confirmed by /is_sleeping before it counts
    r = vd.post("/v1/models/qwen/unload", {})
    assert r.status == 200, (r.status, r.body)
    assert json.loads(r.body)["tier"] == "sleeping", r.body
    ok = vd.wait_event("sleep_confirm", model="qwen", after="sleep")[0]
    assert ok["outcome"] == "ok" and ok["is_sleeping"] == "true", ok
    parked = vd.first("instance_state", model="qwen", to="parked")
    assert vd.first("hook_call", model="qwen", hook="sleep")["_i"] < ok["_i"] < parked["_i"], (ok, parked)
    got = process_bytes(h, gs)
    # the residue: vLLM keeps its CUDA context and graphs on the GPU (the stand-in: a tenth)
    assert abs(min(got) - int(0.34 * total) // 10) < 1 << 20, got
    # the next request wakes it, confirmed the same way
    c = chat(vd, "qwen", "again")
    assert c["choices"][0]["message"]["content"] == "[Qwen/Qwen2.5-1.5B-Instruct] again"
    woke = vd.wait_event("sleep_confirm", model="qwen", after="wake")[0]
    assert woke["outcome"] == "ok" and woke["is_sleeping"] == "false", woke
    h.finish()


def model(cmd, resident="24GiB", **extra):
    m = {"preset": "vllm", "cmd": cmd, "memory": {"resident": resident}, "stop_timeout": "5s",
         "startup_timeout": "30s", "health": {"interval": "200ms"}}
    m.update(extra)
    return m


def test_without_dev_mode_sleep_routes_are_404(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    m = model(["vllm", "serve", "m", "--port", "{port}", "--enable-sleep-mode"], resident="4GiB",
              env={"VLLM_SERVER_DEV_MODE": None})
    path = h.tmp / "check.yaml"
    path.write_text("models:\n  x:\n    preset: vllm\n    cmd: [vllm, serve, m, --port, \"{port}\", "
                    "--enable-sleep-mode]\n    memory: {resident: 24GiB}\n    env: {VLLM_SERVER_DEV_MODE: null}\n")
    p = subprocess.run([str(vramd_binary()), "--check-config", str(path)], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, **standin_env()))
    assert p.returncode == 0, p.stderr
    assert "warning: models.x.env: preset vllm uses the sleep tier but the worker's environment has " \
           "VLLM_SERVER_DEV_MODE=(unset)" in p.stderr, p.stderr
    p = subprocess.run([str(vramd_binary()), "--check-config", "--strict", str(path)], capture_output=True,
                       text=True, timeout=30, env=dict(os.environ, **standin_env()))
    assert p.returncode == 1, p.stderr
    vd = h.start_vramd(gs, {"x": m}, extra_env=standin_env())
    chat(vd, "x")
    port = vd.instances("x")[0]["port"]
    from vramdkit.net import request
    assert request(port, "GET", "/is_sleeping").status == 404
    vd.post("/v1/models/x/unload", {})
    done = vd.wait_event("sleep_hook_done", model="x")[0]
    assert done["status"] == 404, done
    assert not vd.events("sleep_confirm", model="x")
    wait_for(lambda: not process_bytes(h, gs), timeout=20, what="the worker stopped (the tier after sleep)")
    h.finish()


def test_explicit_fraction_mismatch_and_refusal(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    h.alloc(gs, 20 * GiB)  # another process on the card: 60 GiB free
    m = model(["vllm", "serve", "m", "--port", "{port}", "--enable-sleep-mode", "--gpu-memory-utilization", "0.9"],
              deadline="2s")
    vd = h.start_vramd(gs, {"x": m}, extra_env=standin_env())
    r = vd.post("/x/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status != 200, r.body  # vLLM cannot take 72 GiB of a card with 60 GiB free
    mm = vd.wait_event("mem_fraction_mismatch", model="x")[0]
    assert mm["value"] == "0.9" and mm["suggested"] == "0.30", mm
    assert "0.9 takes 72.00 GiB of GPU 0 (80.00 GiB), the model reserves 24.00 GiB" in mm["message"], mm
    lines = "\n".join(vd.worker_lines("x"))
    assert "Free memory on device (60.0/80.0 GiB) on startup is less than desired GPU memory utilization " \
           "(0.9, 72.0 GiB)" in lines, lines
    vd.allow_oom.add("x")
    h.finish()


def test_sleep_answered_before_done_is_asked_again(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    m = model(["vllm", "serve", "m", "--port", "{port}", "--enable-sleep-mode"], resident="4GiB")
    env = dict(standin_env(), VLLM_STANDIN_SLEEP_LAG_MS="400")
    vd = h.start_vramd(gs, {"x": m}, extra_env=env)
    chat(vd, "x")
    r = vd.post("/v1/models/x/unload", {})
    assert r.status == 200 and json.loads(r.body)["tier"] == "sleeping", (r.status, r.body)
    ok = vd.wait_event("sleep_confirm", model="x", after="sleep")[0]
    assert ok["outcome"] == "ok" and ok["asked"] > 1, ok
    h.finish()


def test_sleep_never_confirmed_takes_the_next_tier(sched):
    h = sched
    gs = h.gpu_set("80GiB")
    m = model(["vllm", "serve", "m", "--port", "{port}", "--enable-sleep-mode"], resident="4GiB",
              sleep={"timeout": "1s"})
    env = dict(standin_env(), VLLM_STANDIN_SLEEP_LAG_MS="30000")
    vd = h.start_vramd(gs, {"x": m}, extra_env=env)
    chat(vd, "x")
    vd.post("/v1/models/x/unload", {})
    bad = vd.wait_event("sleep_confirm", model="x", after="sleep")[0]
    assert bad["outcome"] == "failed" and bad["is_sleeping"] == "false", bad
    wait_for(lambda: not process_bytes(h, gs), timeout=20, what="the worker stopped (the tier after sleep)")
    h.finish()
