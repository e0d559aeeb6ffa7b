"""preset: comfyui and ComfyUI's own queue (path/prompt_hold.c), behind the ComfyUI stand-in
(tests/standins/comfyui_standin.py) on a simulated set of one 8 GiB GPU.

ComfyUI answers POST /prompt at once and runs the prompt later. Two models (two stand-in
instances) share the GPU; each prompt takes 5 GiB for about 1 s, declared as
memory.per_request: 5GiB, so the two do not fit together.

  - prompt_hold: false (the hold turned off by hand): both prompts are admitted, both run at
    once on the card, and one of them fails in /history with "CUDA out of memory";
  - the preset's hold: each client still gets its 200 with a prompt_id at once, the second
    prompt waits in vramd's queue until /history shows the first done: both succeed, no OOM;
    the hold's end is logged (prompt_hold_end how=done) and the reservation is gone after it;
  - a held prompt whose worker is killed: the hold ends (how=gone), the model holds no slot
    and no memory afterwards;
  - a prompt still running at prompt_hold_timeout: the hold ends (how=timeout);
  - a prompt that fails in /history with an out-of-memory exception_message (its declared
    per_request far below what it takes, so both run) counts in the model's oom_total and
    logs "oom" with async=1.
"""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from e2ekit import SIMGPU, TIMESCALE, gpu_section, wait_nvml
from vramdkit.net import http_request
from vramdkit.waits import Background, wait_for

STANDIN = Path(__file__).resolve().parents[1] / "standins" / "comfyui_standin.py"
JSON = {"Content-Type": "application/json"}
GiB = 1 << 30


@pytest.fixture
def gpu1(monkeypatch):
    """A simulated set of one 8 GiB GPU (SIMGPU set for vramd and its workers)."""
    name = f"e2ecomfy.{os.getpid()}.{os.urandom(3).hex()}"
    env = dict(os.environ, SIMGPU=name, SIMGPU_TIMESCALE=TIMESCALE)
    p = subprocess.run([str(SIMGPU), "create", name, "--gpus", "1", "--memory", "8GiB"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert p.returncode == 0, p.stderr
    monkeypatch.setenv("SIMGPU", name)
    monkeypatch.setenv("SIMGPU_TIMESCALE", TIMESCALE)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield name
    finally:
        subprocess.run([str(SIMGPU), "rm", name], capture_output=True, env=env, timeout=30)


def comfy(per_request="5GiB", **over):
    m = {"preset": "comfyui",
         "cmd": ["/usr/bin/python3", str(STANDIN), "--listen", "127.0.0.1", "--port", "{port}"],
         "health": {"interval": "200ms", "timeout": "2s", "failures": 3},
         "startup_timeout": "30s", "stop_timeout": "2s",
         "memory": {"resident": "64MiB", "per_request": per_request, "learn": False},
         "concurrency": 4, "deadline": "30s", "prompt_poll": "50ms"}
    m.update(over)
    return m


def workflow(gib, steps=25, gate=None):
    """width x height x batch x 64 bytes = gib GiB; steps x 40 ms of run; gate: a file the
    prompt's checkpoint load waits for (its GPU work starts once the test creates it)."""
    extra = {"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": str(gate)}}} if gate else {}
    return {"prompt": {**extra,
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 8192, "height": 2048 * gib, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"steps": steps, "latent_image": ["5", 0]}},
        "9": {"class_type": "SaveImage", "inputs": {"images": ["3", 0]}}}}


def start(vramd, **models):
    vd = vramd.start(models=models, gpu=gpu_section(devices="all"))
    vd.allow_oom.update(models)
    wait_nvml(vd, gpus=1)
    for name in models:  # start each stand-in (models load at their first request)
        r = vd.get(f"/{name}/queue", timeout=30)
        assert r.status == 200, r
    return vd


def read_history(vd, model, pid):
    """The prompt's /history entry, read from the stand-in itself (a read through vramd would
    be one more request of the model, admitted and possibly loading it), or None."""
    r = http_request(vd.worker_port(model), "GET", f"/history/{pid}", timeout=10)
    assert r.status == 200, r
    return r.json().get(pid)


def history(vd, model, pid):
    def done():
        return read_history(vd, model, pid)
    return wait_for(done, timeout=20, what=f"prompt {pid} of {model} in /history")


def send(vd, model, gib, steps=25, gate=None):
    """POST /prompt; the client gets its 200 (with a prompt_id) as ComfyUI gives it."""
    r = vd.post(f"/{model}/prompt", body=workflow(gib, steps, gate), headers=JSON, timeout=30)
    assert r.status == 200, r
    return r.json()["prompt_id"]


def later(vd, model, gib, steps=25):
    return Background(lambda: vd.post(f"/{model}/prompt", body=workflow(gib, steps), headers=JSON, timeout=30))


def results(vd, pids):
    return {m: history(vd, m, p)["status"] for m, p in pids.items()}


def one_fails(vd, pids):
    """Wait until one of the prompts failed in /history; (its model, its status)."""
    def failed():
        for m, p in pids.items():
            h = read_history(vd, m, p)
            if h and h["status"]["status_str"] == "error":
                return m, h["status"]
        return None
    return wait_for(failed, timeout=20, what="one prompt failing in /history")


def test_without_hold_two_prompts_overlap_and_one_ooms(vramd, gpu1, tmp_path):
    """prompt_hold: false: a's prompt is answered and is still loading its checkpoint (a gate
    file) when b's prompt comes: vramd admits b (a's request is over as far as it knows), and
    once the gate opens both prompts (10 s each) hold 5 GiB at once on the 8 GiB card: one
    fails with CUDA out of memory in /history. (Shows what the hold is for: fails if b is
    not admitted or nothing fails.)"""
    vd = start(vramd, a=comfy(prompt_hold=False), b=comfy(prompt_hold=False))
    gate = tmp_path / "ckpt"
    pids = {"a": send(vd, "a", 5, steps=250, gate=gate)}
    pids["b"] = send(vd, "b", 5, steps=250)
    gate.touch()
    model, st = one_fails(vd, pids)
    assert "CUDA out of memory" in json.dumps(st["messages"]), st
    assert not vd.events("prompt_hold")


def test_hold_runs_prompts_one_after_the_other(vramd, gpu1, tmp_path):
    """The same two prompts as without the hold (a's still loading its checkpoint when b's
    comes), with the preset's hold: a's client gets its 200 at once, but a's prompt keeps its
    5 GiB until /history shows it done, so b's /prompt waits in vramd's queue (queued while
    a's gate is closed); then both succeed, a's hold ended (how=done) before b's began, no
    OOM, and both slots are free afterwards."""
    vd = start(vramd, a=comfy(), b=comfy())
    gate = tmp_path / "ckpt"
    pa = send(vd, "a", 5, gate=gate)
    vd.wait_event("prompt_hold", model="a")
    pending = later(vd, "b", 5)
    vd.wait_queued("b", 1)
    assert not pending.done()
    gate.touch()
    rb = pending.result(timeout=30)
    assert rb.status == 200, rb
    st = results(vd, {"a": pa, "b": rb.json()["prompt_id"]})
    assert all(s["status_str"] == "success" for s in st.values()), st
    end_a = vd.wait_event("prompt_hold_end", model="a", how="done")[0]
    hold_b = vd.wait_event("prompt_hold", model="b")[0]
    assert end_a["_i"] < hold_b["_i"], "b's prompt was held before a's hold ended"
    vd.wait_event("prompt_hold_end", model="b", how="done")
    wait_for(lambda: vd.model("a")["in_flight"] == 0 and vd.model("b")["in_flight"] == 0,
             timeout=10, what="slots released")
    assert not vd.events("oom")


def test_hold_released_when_worker_dies(vramd, gpu1):
    """A held prompt (10 s of run) whose stand-in is SIGKILLed: the hold ends (how=gone) and
    the model holds no slot afterwards."""
    vd = start(vramd, a=comfy())
    send(vd, "a", 1, steps=250)
    vd.wait_event("prompt_hold", model="a")
    assert vd.model("a")["in_flight"] == 1
    for pid in vd.worker_pids("a"):
        os.kill(pid, signal.SIGKILL)
    vd.wait_event("prompt_hold_end", model="a", how="gone", timeout=20)
    wait_for(lambda: vd.model("a")["in_flight"] == 0, timeout=10, what="a's slot released")


def test_hold_bounded_by_prompt_hold_timeout(vramd, gpu1):
    """A prompt that runs 10 s under prompt_hold_timeout: 1s: the hold ends how=timeout
    while the prompt still runs, and the model's slot is free (the bound holds even when
    /history never shows the prompt)."""
    vd = start(vramd, a=comfy(prompt_hold_timeout="1s"))
    send(vd, "a", 1, steps=250)
    ev = vd.wait_event("prompt_hold_end", model="a", how="timeout")[0]
    assert ev["held_ms"] >= 1000, ev
    wait_for(lambda: vd.model("a")["in_flight"] == 0, timeout=10, what="a's slot released")


def test_oom_in_history_is_counted(vramd, gpu1, tmp_path):
    """Both models declare 1 GiB per prompt but take 5 GiB (10 s each): vramd admits both
    (held: 2 GiB), a's starts when the gate opens after b's 200, one prompt fails with CUDA
    out of memory in /history, and its hold counts it: oom_total 1 on that model, event oom
    with async=1, the hold ended how=error_oom."""
    vd = start(vramd, a=comfy(per_request="1GiB"), b=comfy(per_request="1GiB"))
    gate = tmp_path / "ckpt"
    pids = {"a": send(vd, "a", 5, steps=250, gate=gate)}
    pids["b"] = send(vd, "b", 5, steps=250)
    gate.touch()
    model, st = one_fails(vd, pids)
    ev = vd.wait_event("prompt_hold_end", how="error_oom")[0]
    assert ev["model"] == model
    vd.wait_event("oom", model=model, **{"async": 1})
    assert vd.model(model)["resilience"]["oom_total"] == 1


def test_web_ui_websocket_through_vramd(vramd, gpu1):
    """ComfyUI's web UI follows its prompts on /ws: through vramd (the preset sets
    `upgrade: [websocket]`), a real WebSocket client (python3-websockets) connected to
    /a/ws?clientId=... gets the stand-in's "status" at once, then, for a prompt sent through
    vramd meanwhile, execution_start ... executing with node null (ComfyUI's "prompt done")
    for that prompt_id, while the prompt's hold ends as usual. The tunnel holds no slot."""
    import asyncio
    websockets = pytest.importorskip("websockets")
    vd = start(vramd, a=comfy())

    async def go():
        url = f"ws://127.0.0.1:{vd.port}/a/ws?clientId=e2e"
        async with websockets.connect(url, ping_interval=None, close_timeout=1) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert first["type"] == "status", first
            assert vd.model("a")["in_flight"] == 0  # the tunnel holds no slot
            loop = asyncio.get_running_loop()
            pid = await loop.run_in_executor(None, lambda: send(vd, "a", 1, steps=2))
            seen = []
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 20))
                seen.append(msg["type"])
                d = msg.get("data", {})
                if msg["type"] == "executing" and d.get("node") is None and d.get("prompt_id") == pid:
                    return pid, seen

    pid, seen = asyncio.run(go())
    assert seen[0] == "execution_start", seen
    assert history(vd, "a", pid)["status"]["status_str"] == "success"
    vd.wait_event("prompt_hold_end", model="a", how="done")
    vd.wait_event("upgrade_closed")
