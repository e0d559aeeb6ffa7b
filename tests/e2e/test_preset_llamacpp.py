"""e2e: `preset: llamacpp` against the llama-server stand-in (tests/standins/llamacpp_standin.py,
written from ggml-org/llama.cpp tools/server/README.md).

Covers:
- router mode with examples/preset-llamacpp/vramd.yaml as it ships (only its listen port and
  state_dir moved; vramd runs in a folder holding its ./models): two models whose sum does
  not fit the simulated 12 GiB GPU are served one after the other with no OOM; vramd unloads
  the idle one through POST /models/unload {"model": SERVED_MODEL} and loads it back through
  POST /models/load (the preset's router hooks); each entry's measured memory is its own
  model's; the router's GET /models shows what vramd did; a POST /v1/chat/completions without
  the route prefix reaches the entry whose served_model its "model" names;
- single-model mode (`llama-server -m FILE --port {port}`): /health answers 503 while the
  model loads, vramd waits for 200, the memory is the model's, no hooks are called;
- the stand-in's --models-max evicts the least recently used model, like the real router, and
  its --sleep-idle-seconds unloads an idle model by itself (what the docs say to leave unset).
Expected: every answer 200, GPU use never over its size, the hooks named, the status figures
equal to the GGUF sizes.
"""
import json
import os
import re
import subprocess

from e2ekit import SIMGPU
from vramdkit.daemon import Vramd
from vramdkit.net import free_port, request
from vramdkit.paths import PYTHON, REPO_ROOT
from vramdkit.sim import sim_env
from vramdkit.waits import wait_for

GiB = 1 << 30
EXAMPLE = REPO_ROOT / "examples" / "preset-llamacpp" / "vramd.yaml"
STANDINS = REPO_ROOT / "tests" / "standins" / "bin"
SIZES = {"qwen2.5-7b-instruct-q4_k_m": 6 * GiB, "gemma-3-12b-it-q4_k_m": 9 * GiB}


def gguf_dir(root):
    root.mkdir(parents=True, exist_ok=True)
    for name, size in SIZES.items():
        with open(root / f"{name}.gguf", "wb") as f:
            f.truncate(size)  # sparse: its size is the model's memory, nothing on disk
    return root


def sim_gpu(tmp_path):
    name = f"e2ellama.{os.getpid()}.{tmp_path.name[-8:]}"
    p = subprocess.run([str(SIMGPU), "create", name, "--gpus", "1", "--memory", "12GiB"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return name


def gpu_used(gpu_set):
    p = subprocess.run([str(SIMGPU), "show", gpu_set, "--json"], capture_output=True, text=True, timeout=30)
    doc = json.loads(p.stdout)
    dev = doc["gpus"][0] if "gpus" in doc else doc["devices"][0]
    assert dev["used"] <= dev["total"]
    return dev["used"]


def stop_clean(vd):
    """vramd exits 0 on SIGTERM and its log holds no sanitizer report (as the vramd fixture
    checks; these tests start their daemon themselves, on their own GPU set)."""
    assert vd.stop() == 0
    text = vd.log_path.read_text(errors="replace")
    assert "AddressSanitizer" not in text and "runtime error:" not in text and "LeakSanitizer" not in text


def instance_of(vd, model):
    insts = vd.model(model)["instances"]
    assert len(insts) == 1, insts
    return insts[0]


def chat(vd, model, served):
    body = {"model": served, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = request(vd.port, "POST", f"/{model}/v1/chat/completions", body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200, (r.status, r.body[:300])
    assert json.loads(r.body)["model"] == served


def router_models(inst):
    r = request(inst["port"], "GET", "/models", timeout=10)
    assert r.status == 200
    return {m["id"]: m["status"]["value"] for m in json.loads(r.body)["data"]}


def test_router_models_one_after_the_other(tmp_path):
    gpu_set = sim_gpu(tmp_path)
    vd = None
    try:
        gguf_dir(tmp_path / "models")
        text = EXAMPLE.read_text()
        text = re.sub(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{free_port()}", text)
        text = re.sub(r"(?m)^state_dir: .*$", f"state_dir: {tmp_path / 'var'}", text)
        env = {"PATH": f"{STANDINS}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        vd = Vramd(tmp_path, "vramd", text, gpu_set=gpu_set, extra_env=env, cwd=tmp_path)
        vd.start()
        qwen_name, gemma_name = list(SIZES)

        chat(vd, "qwen", qwen_name)  # the router loads it on the first request (autoload)
        qwen = instance_of(vd, "qwen")
        assert router_models(qwen)[qwen_name] == "loaded"
        wait_for(lambda: instance_of(vd, "qwen")["measured_bytes"] == SIZES[qwen_name], timeout=10,
                 what="qwen's memory")
        gpu_used(gpu_set)

        chat(vd, "gemma", gemma_name)  # does not fit beside qwen: qwen unloaded through its router
        gpu_used(gpu_set)
        unloads = [e["model"] for e in vd.events("hook_call") if e.get("hook") == "unload"]
        assert unloads == ["qwen"], unloads
        assert router_models(qwen)[qwen_name] == "unloaded"
        assert instance_of(vd, "qwen")["state"] == "unloaded"
        gemma = instance_of(vd, "gemma")
        wait_for(lambda: instance_of(vd, "gemma")["measured_bytes"] == SIZES[gemma_name], timeout=10,
                 what="gemma's memory")

        chat(vd, "qwen", qwen_name)  # back: gemma unloaded, qwen loaded by POST /models/load
        gpu_used(gpu_set)
        assert router_models(gemma)[gemma_name] == "unloaded"
        assert router_models(qwen)[qwen_name] == "loaded"
        # one OpenAI base URL for every model: POST /v1/... routed by "model" = served_model
        body = {"model": qwen_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        r = request(vd.port, "POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status == 200 and json.loads(r.body)["model"] == qwen_name, (r.status, r.body[:300])
        calls = [(e["model"], e["hook"], e["path"]) for e in vd.events("hook_call")]
        assert calls == [("qwen", "unload", "/models/unload"), ("gemma", "unload", "/models/unload"),
                         ("qwen", "reload", "/models/load")], calls
        assert not vd.events("worker_exit")
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_single_model_health_503_while_loading(tmp_path):
    gpu_set = sim_gpu(tmp_path)
    vd = None
    try:
        models = gguf_dir(tmp_path / "models")
        qwen = list(SIZES)[0]
        cfg = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "var"),
               "log": {"format": "json", "level": "debug"},
               "models": {"llm": {"preset": "llamacpp",
                                  "cmd": ["llama-server", "-m", str(models / f"{qwen}.gguf"), "--port", "{port}"],
                                  "memory": {"resident": "6GiB"}, "health": {"interval": "1s"}}}}
        env = {"PATH": f"{STANDINS}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "LLAMACPP_STANDIN_LOAD_MS": "1500"}
        vd = Vramd(tmp_path, "vramd", cfg, gpu_set=gpu_set, extra_env=env)
        vd.start()
        r = request(vd.port, "POST", "/llm/completion", body=b'{"prompt":"hi","n_predict":4}',
                    headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status == 200, (r.status, r.body[:300])
        assert json.loads(r.body)["tokens_predicted"] == 4
        # the server said 503 while loading, and vramd waited for its 200
        outs = [e["line"] for e in vd.events("worker_output") if "GET /health" in e.get("line", "")]
        assert any('" 503 ' in o for o in outs) and any('" 200 ' in o for o in outs), outs
        assert instance_of(vd, "llm")["measured_bytes"] == SIZES[qwen]
        assert not vd.events("hook_call")  # single-model: no router hooks
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_standin_models_max_evicts_lru(tmp_path):
    """The stand-in alone, as its reference says the router behaves: with --models-max 1 a
    request for a second model unloads the first."""
    gpu_set = sim_gpu(tmp_path)
    proc = None
    try:
        models = gguf_dir(tmp_path / "models")
        port = free_port()
        proc = subprocess.Popen([PYTHON, str(REPO_ROOT / "tests" / "standins" / "llamacpp_standin.py"),
                                 "--models-dir", str(models), "--models-max", "1", "--port", str(port)],
                                env=sim_env(gpu_set), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: request(port, "GET", "/health", timeout=2).status == 200, timeout=15, what="stand-in up")
        qwen, gemma = list(SIZES)
        for name in (qwen, gemma):
            r = request(port, "POST", "/v1/chat/completions",
                        body=json.dumps({"model": name, "messages": [], "max_tokens": 1}).encode(),
                        headers={"Content-Type": "application/json"}, timeout=30)
            assert r.status == 200, r.body
        r = request(port, "GET", "/models", timeout=10)
        status = {m["id"]: m["status"]["value"] for m in json.loads(r.body)["data"]}
        assert status == {qwen: "unloaded", gemma: "loaded"}
        assert gpu_used(gpu_set) == SIZES[gemma]
        r = request(port, "POST", "/v1/chat/completions", body=b'{"messages": []}',
                    headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status == 400  # router mode: "model" is required
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_one_shared_router_accounted_per_model(tmp_path):
    """One llama-server router (started apart, url:) serving two entries, each its
    served_model: the router's GET /models (the entries' health check) says which are loaded;
    vramd books each loaded one at its memory.resident (the router gives no bytes; whatever the
    process holds beyond that counts as foreign), takes an unlisted one as unloaded, and serves
    two models whose sum does not fit one after the other through /models/unload and
    /models/load on the same server."""
    gpu_set = sim_gpu(tmp_path)
    vd = server = None
    try:
        models = gguf_dir(tmp_path / "models")
        sport = free_port()
        server = subprocess.Popen([str(STANDINS / "llama-server"), "--models-dir", str(models), "--models-max", "4",
                                   "--port", str(sport)], env=sim_env(gpu_set), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_for(lambda: request(sport, "GET", "/health", timeout=2).status == 200, timeout=15, what="router up")
        qwen_name, gemma_name = list(SIZES)
        entries = {"qwen": (qwen_name, "6GiB"), "gemma": (gemma_name, "9GiB")}
        cfg = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "var"),
               "log": {"format": "json", "level": "debug"}, "gpu": {"poll": "100ms", "headroom": "256MiB"},
               "models": {name: {"url": f"http://127.0.0.1:{sport}", "preset": "llamacpp", "served_model": served,
                                 "memory": {"resident": res}, "health": {"interval": "200ms"}}
                          for name, (served, res) in entries.items()}}
        vd = Vramd(tmp_path, "vramd", cfg, gpu_set=gpu_set)
        vd.start()
        router = {"port": sport}
        wait_for(lambda: all(instance_of(vd, n)["state"] == "unloaded" for n in entries), timeout=10,
                 what="both taken as unloaded (the router lists neither as loaded)")

        chat(vd, "gemma", gemma_name)
        assert router_models(router) == {qwen_name: "unloaded", gemma_name: "loaded"}
        wait_for(lambda: instance_of(vd, "gemma")["measured_bytes"] == SIZES[gemma_name], timeout=10,
                 what="gemma's figure")
        assert instance_of(vd, "qwen")["measured_bytes"] == 0

        chat(vd, "qwen", qwen_name)  # gemma unloaded on the shared router first
        assert gpu_used(gpu_set) <= 12 * GiB
        assert router_models(router) == {qwen_name: "loaded", gemma_name: "unloaded"}
        wait_for(lambda: instance_of(vd, "qwen")["measured_bytes"] == SIZES[qwen_name], timeout=10,
                 what="qwen's figure")
        assert instance_of(vd, "gemma")["measured_bytes"] == 0
        calls = [(e["model"], e["hook"], e["path"]) for e in vd.events("hook_call")]
        assert calls == [("gemma", "reload", "/models/load"), ("gemma", "unload", "/models/unload"),
                         ("qwen", "reload", "/models/load")], calls
        assert not vd.events("model_failed")
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_standin_sleep_idle_seconds(tmp_path):
    """The stand-in alone: --sleep-idle-seconds N unloads the model after N idle seconds (what
    vramd's docs say to leave unset, so that vramd alone unloads) and the next request loads it
    again."""
    gpu_set = sim_gpu(tmp_path)
    proc = None
    try:
        models = gguf_dir(tmp_path / "models")
        qwen = list(SIZES)[0]
        port = free_port()
        proc = subprocess.Popen([PYTHON, str(REPO_ROOT / "tests" / "standins" / "llamacpp_standin.py"),
                                 "-m", str(models / f"{qwen}.gguf"), "--sleep-idle-seconds", "3",
                                 "--port", str(port)], env=sim_env(gpu_set), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait_for(lambda: request(port, "GET", "/health", timeout=2).status == 200, timeout=15, what="loaded")
        wait_for(lambda: gpu_used(gpu_set) == 0, timeout=10, what="unloaded after 3 s idle")
        r = request(port, "POST", "/completion", body=b'{"prompt":"hi","n_predict":2}', timeout=30)
        assert r.status == 200 and json.loads(r.body)["tokens_predicted"] == 2
        assert gpu_used(gpu_set) == SIZES[qwen]  # loaded again for the request (and for 3 s after it)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)
