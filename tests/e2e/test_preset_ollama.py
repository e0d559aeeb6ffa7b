"""e2e: `preset: ollama` against the Ollama stand-in (tests/standins/ollama_standin.py, written
from ollama/ollama docs/api.md and docs/faq.md), with examples/preset-ollama/vramd.yaml as it
ships (only its listen port and state_dir are moved to the test's own).

Covers: two Ollama models whose sum does not fit the simulated 12 GiB GPU are served one
after the other with no OOM: vramd unloads the idle one through the preset's unload hook
(POST /api/generate {"model": SERVED_MODEL, "keep_alive": 0}: no hand-written hook per name),
its memory comes back (NVML), the other is started; asked for again, the first is loaded
back through the reload hook (keep_alive -1). The worker gets the preset's environment
(OLLAMA_HOST with its port, OLLAMA_KEEP_ALIVE=-1, OLLAMA_MAX_LOADED_MODELS=1), so Ollama
never unloads by itself. vramd's status shows each model's measured memory equal to what the
server's own GET /api/ps reports as its size_vram. And one `ollama serve` started apart (url:)
shared by two entries is accounted per model from its /api/ps (NVML sees one process).
Expected: every answer 200 with Ollama's JSON, GPU use never over its size, the hooks'
bodies naming the served models, the status figures equal to /api/ps.
"""
import json
import os
import re
import subprocess

from e2ekit import SIMGPU, gpu_section  # noqa: F401  (paths checked by the import)
from vramdkit.daemon import Vramd
from vramdkit.net import free_port, request
from vramdkit.paths import REPO_ROOT
from vramdkit.sim import sim_env
from vramdkit.waits import wait_for

GiB = 1 << 30
EXAMPLE = REPO_ROOT / "examples" / "preset-ollama" / "vramd.yaml"
STANDINS = REPO_ROOT / "tests" / "standins" / "bin"
SIZES = {"qwen3:8b": 6 * GiB, "gemma3:12b": 9 * GiB}  # the example's memory.resident


def model_store(root):
    """Ollama's model store layout (OLLAMA_MODELS): one manifest per model, its model layer's
    size is what the stand-in loads."""
    for name, size in SIZES.items():
        model, tag = name.split(":")
        d = root / "manifests" / "registry.ollama.ai" / "library" / model
        d.mkdir(parents=True, exist_ok=True)
        layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{model}{tag}", "size": size}
        (d / tag).write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    return root


def sim_gpu(tmp_path):
    name = f"e2eollama.{os.getpid()}.{tmp_path.name[-8:]}"
    p = subprocess.run([str(SIMGPU), "create", name, "--gpus", "1", "--memory", "12GiB"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return name


def gpu_used(gpu_set):
    p = subprocess.run([str(SIMGPU), "show", gpu_set, "--json"], capture_output=True, text=True, timeout=30)
    doc = json.loads(p.stdout)
    dev = doc["gpus"][0] if "gpus" in doc else doc["devices"][0]
    return dev["used"], dev["total"]


def example_text(port, state_dir):
    text = EXAMPLE.read_text()
    text = re.sub(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{port}", text)
    return re.sub(r"(?m)^state_dir: .*$", f"state_dir: {state_dir}", text)


def ask(vd, model, served, chat):
    path, body = ((f"/{model}/api/chat", {"model": served, "messages": [{"role": "user", "content": "hi"}],
                                          "stream": False}) if chat else
                  (f"/{model}/api/generate", {"model": served, "prompt": "hi", "stream": False}))
    r = request(vd.port, "POST", path, body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200, (r.status, r.body[:300])
    doc = json.loads(r.body)
    assert doc["done"] is True and doc["model"] == served, doc
    return doc


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


def api_ps(inst):
    """The server's own /api/ps, asked directly (through vramd it would be a request that
    loads the model)."""
    r = request(inst["port"], "GET", "/api/ps", timeout=10)
    assert r.status == 200
    return {m["name"]: m["size_vram"] for m in json.loads(r.body)["models"]}


def test_two_ollama_models_that_do_not_fit_together(tmp_path):
    gpu_set = sim_gpu(tmp_path)
    vd = None
    try:
        store = model_store(tmp_path / "ollama-models")
        env = {"PATH": f"{STANDINS}:{os.environ.get('PATH', '/usr/bin:/bin')}", "OLLAMA_MODELS": str(store)}
        port = free_port()
        vd = Vramd(tmp_path, "vramd", example_text(port, tmp_path / "var"), gpu_set=gpu_set, extra_env=env)
        vd.start()
        peak = [0]

        def watch_used():
            used, total = gpu_used(gpu_set)
            peak[0] = max(peak[0], used)
            assert used <= total

        ask(vd, "gemma3-12b", "gemma3:12b", chat=False)
        gemma = instance_of(vd, "gemma3-12b")
        # per-model memory: NVML's figure for the worker is what Ollama's /api/ps reports
        wait_for(lambda: instance_of(vd, "gemma3-12b")["measured_bytes"] == SIZES["gemma3:12b"], timeout=10,
                 what="gemma's measured memory")
        assert api_ps(gemma) == {"gemma3:12b": SIZES["gemma3:12b"]}
        # and vramd's status carries the server's own figure (its health check is GET /api/ps)
        wait_for(lambda: instance_of(vd, "gemma3-12b")["server_vram_bytes"] == SIZES["gemma3:12b"], timeout=15,
                 what="gemma's /api/ps size_vram in status")
        watch_used()

        ask(vd, "qwen3-8b", "qwen3:8b", chat=True)  # does not fit beside gemma: gemma is unloaded first
        watch_used()
        calls = [e for e in vd.events("hook_call") if e.get("hook") == "unload"]
        assert [c["model"] for c in calls] == ["gemma3-12b"], calls
        assert api_ps(gemma) == {}  # Ollama let go of it (keep_alive 0), its server still runs
        assert instance_of(vd, "gemma3-12b")["state"] == "unloaded"
        qwen = instance_of(vd, "qwen3-8b")
        wait_for(lambda: instance_of(vd, "qwen3-8b")["measured_bytes"] == SIZES["qwen3:8b"], timeout=10,
                 what="qwen's measured memory")
        assert api_ps(qwen) == {"qwen3:8b": SIZES["qwen3:8b"]}
        wait_for(lambda: instance_of(vd, "qwen3-8b")["server_vram_bytes"] == SIZES["qwen3:8b"], timeout=15,
                 what="qwen's /api/ps size_vram in status")

        ask(vd, "gemma3-12b", "gemma3:12b", chat=True)  # back: qwen unloaded, gemma reloaded (keep_alive -1)
        watch_used()
        assert api_ps(qwen) == {}
        assert api_ps(gemma) == {"gemma3:12b": SIZES["gemma3:12b"]}
        reloads = [e for e in vd.events("hook_call") if e.get("hook") == "reload"]
        assert [c["model"] for c in reloads] == ["gemma3-12b"], reloads
        assert not vd.events("worker_exit")  # nothing was stopped: unloading is Ollama's own call
        assert peak[0] <= 12 * GiB
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_preset_environment(tmp_path):
    """The worker's environment carries the preset's variables with its own port (OLLAMA_HOST
    filled from {port}), so the stand-in listens where vramd looks."""
    gpu_set = sim_gpu(tmp_path)
    vd = None
    try:
        store = model_store(tmp_path / "ollama-models")
        env = {"PATH": f"{STANDINS}:{os.environ.get('PATH', '/usr/bin:/bin')}", "OLLAMA_MODELS": str(store)}
        vd = Vramd(tmp_path, "vramd", example_text(free_port(), tmp_path / "var"), gpu_set=gpu_set, extra_env=env)
        vd.start()
        ask(vd, "qwen3-8b", "qwen3:8b", chat=False)
        inst = instance_of(vd, "qwen3-8b")
        with open(f"/proc/{inst['pid']}/environ", "rb") as f:
            wenv = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        assert wenv[b"OLLAMA_HOST"] == f"127.0.0.1:{inst['port']}".encode()
        assert wenv[b"OLLAMA_KEEP_ALIVE"] == b"-1"
        assert wenv[b"OLLAMA_MAX_LOADED_MODELS"] == b"1"
        assert api_ps(inst) == {"qwen3:8b": SIZES["qwen3:8b"]}
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)


def test_one_shared_ollama_accounted_per_model(tmp_path):
    """One `ollama serve` (started apart, url:) holding a varying set of models: two entries
    name it, each with its served_model. NVML sees one process; vramd books each entry at what
    the server's /api/ps reports for its model (size_vram), so the two models whose sum does
    not fit are served one after the other, the idle one unloaded with keep_alive 0 on the
    same server, and the status shows each model's own figure; a POST /v1/chat/completions
    without a route prefix reaches the entry whose served_model its "model" names."""
    gpu_set = sim_gpu(tmp_path)
    vd = server = None
    try:
        store = model_store(tmp_path / "ollama-models")
        sport = free_port()
        senv = dict(sim_env(gpu_set), OLLAMA_MODELS=str(store), OLLAMA_HOST=f"127.0.0.1:{sport}",
                    OLLAMA_KEEP_ALIVE="-1", OLLAMA_MAX_LOADED_MODELS="3")
        server = subprocess.Popen([str(STANDINS / "ollama"), "serve"], env=senv, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_for(lambda: request(sport, "GET", "/api/version", timeout=2).status == 200, timeout=15,
                 what="the shared ollama")
        url = f"http://127.0.0.1:{sport}"
        models = {name: {"url": url, "preset": "ollama", "served_model": served,
                         "memory": {"resident": size_text}, "health": {"interval": "200ms"}}
                  for name, served, size_text in (("qwen3-8b", "qwen3:8b", "6GiB"),
                                                   ("gemma3-12b", "gemma3:12b", "9GiB"))}
        cfg = {"listen": f"127.0.0.1:{free_port()}", "state_dir": str(tmp_path / "var"),
               "log": {"format": "json", "level": "debug"},
               "gpu": {"poll": "100ms", "headroom": "256MiB"}, "models": models}
        vd = Vramd(tmp_path, "vramd", cfg, gpu_set=gpu_set)
        vd.start()
        shared = {"port": sport}

        ask(vd, "gemma3-12b", "gemma3:12b", chat=False)
        assert api_ps(shared) == {"gemma3:12b": SIZES["gemma3:12b"]}
        wait_for(lambda: instance_of(vd, "gemma3-12b")["measured_bytes"] == SIZES["gemma3:12b"], timeout=10,
                 what="gemma's own figure")
        assert instance_of(vd, "qwen3-8b")["measured_bytes"] == 0  # same process, nothing of its own
        gpu_used(gpu_set)

        ask(vd, "qwen3-8b", "qwen3:8b", chat=True)  # gemma unloaded on the shared server first
        assert gpu_used(gpu_set)[0] <= 12 * GiB
        assert api_ps(shared) == {"qwen3:8b": SIZES["qwen3:8b"]}
        wait_for(lambda: instance_of(vd, "qwen3-8b")["measured_bytes"] == SIZES["qwen3:8b"], timeout=10,
                 what="qwen's own figure")
        assert instance_of(vd, "gemma3-12b")["measured_bytes"] == 0
        assert instance_of(vd, "qwen3-8b")["server_vram_bytes"] == SIZES["qwen3:8b"]

        # and back, through one OpenAI base URL: POST /v1/chat/completions routed by served_model
        body = {"model": "gemma3:12b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        r = request(vd.port, "POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status == 200 and json.loads(r.body)["model"] == "gemma3:12b", (r.status, r.body[:300])
        assert api_ps(shared) == {"gemma3:12b": SIZES["gemma3:12b"]}
        unloads = [e["model"] for e in vd.events("hook_call") if e.get("hook") == "unload"]
        assert unloads[-2:] == ["gemma3-12b", "qwen3-8b"], unloads
        assert not [e for e in vd.events("model_failed")]
        stop_clean(vd)
    finally:
        if vd is not None:
            vd.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        subprocess.run([str(SIMGPU), "rm", gpu_set], capture_output=True, timeout=30)
