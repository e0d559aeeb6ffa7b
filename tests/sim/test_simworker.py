"""test_simworker: the simulated model server reproduces the field's failures on its own
(no vramd in front), and speaks HTTP/1.1 the way real servers do.

Field failures (FIELD.md, seeds/):
  - seed004: 3 GB model + 2.1-2.5 GB per request on a 5.6 GB card: one request fits, two at
    once OOM with PyTorch's text;
  - seed001: a 19.6 GB generator and a 4.7 GB validator do not fit one 24 GB card together,
    and do once the validator's /unload_models/ ran;
  - leaks grow the NVML-visible usage per request; a crashed worker's memory stays visible
    until the driver's release delay has passed;
  - PyTorch's caching allocator keeps request memory until /clear_cache/;
  - /unload_models/ leaves a residue; --lock serialises; json200 style; smaller parameters fit.
All durations are simulated with SIMGPU_TIMESCALE=0.01.
"""
import json
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from .simkit import wait_for
from .workerkit import GiB, MiB, TIMESCALE, gpu_used, process_used, workers  # noqa: F401

CONTEXT = 300 * MiB  # simworker's default CUDA-context-like overhead


def concurrently(fns):
    """Run the callables at once; return their results (or exceptions) in order."""
    results = [None] * len(fns)

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as e:  # noqa: BLE001 - returned to the test
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def post(w, path, **kw):
    """A POST on its own connection (for requests sent from several threads at once)."""
    return requests.post(w.url(path), timeout=60, **kw)


def is_torch_oom(resp):
    return (resp.status_code == 500 and "CUDA out of memory. Tried to allocate" in resp.text
            and "total capacity" in resp.text)


# --- the field's failures ------------------------------------------------------------------

def test_seed004_two_concurrent_requests_oom_on_5_6gb(sim, workers):
    gpu = sim.create(memory="5.6GiB", model_name="NVIDIA GeForce RTX 3060 Laptop GPU",
                     timescale=TIMESCALE)
    w = workers.start(gpu, "--name", "robobrain-3b", "--resident", "3GiB",
                      "--per-request", "2.1GiB", "--run-time", "100s", "--path", "/api/chat")
    assert process_used(sim, gpu, w.pid) == CONTEXT + 3 * GiB
    # One request alone fits (5.4 GiB of 5.6 GiB) ...
    r = w.post("/api/chat", json={"session_id": "s", "message": "what do you see?"})
    assert r.status_code == 200, r.text
    w.post("/clear_cache/")
    # ... two at once do not: at least one dies of CUDA OOM, with PyTorch's message.
    results = concurrently([lambda i=i: post(w, "/api/chat", json={"message": str(i)})
                            for i in range(2)])
    for res in results:
        assert isinstance(res, requests.Response), res
    assert any(is_torch_oom(res) for res in results), [res.text for res in results]
    oom = next(res for res in results if is_torch_oom(res))
    assert "GPU 0; 5.60 GiB total capacity" in oom.json()["detail"]
    assert w.status()["requests"]["oom"] >= 1
    # The process is still serving afterwards, and one request alone fits again.
    assert w.post("/api/chat", json={"message": "again"}).status_code == 200
    assert w.get("/health").json()["status"] == "ok"


def test_seed001_generator_and_validator_do_not_fit_24gb_together(sim, workers):
    gpu = sim.create(memory="24GiB", model_name="NVIDIA GeForce RTX 4090", timescale=TIMESCALE)
    validator = workers.start(gpu, "--name", "validation", "--resident", "4.4GiB",
                              "--load-time", "20s", "--unload-residue", "100MiB")
    # 4.7 GiB validator + 19.6 GiB generator = 24.3 GiB > 24 GiB: the generator dies at load.
    gen = workers.start(gpu, "--name", "flux-hunyuan", "--resident", "19.3GiB",
                        "--load-time", "30s", wait_ready=False)
    assert gen.wait_exit() == 1
    assert "CUDA out of memory. Tried to allocate" in gen.log()
    # The seed's hand-made fix: unload the validator first, then the generator fits.
    r = validator.post("/unload_models/")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["memory_before_bytes"] - doc["memory_after_bytes"] == round(4.4 * GiB) - 100 * MiB
    gen = workers.start(gpu, "--name", "flux-hunyuan", "--resident", "19.3GiB", "--load-time", "30s")
    assert gen.get("/health").json()["status"] == "ok"
    # And the validator cannot come back while the generator holds the card.
    r = validator.post("/reload_models/")
    assert r.status_code == 500 and "CUDA out of memory" in r.text
    assert validator.get("/health").json()["status"] == "unloaded"


def test_leak_grows_nvml_visible_usage_per_request(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "6GiB", "--per-request", "2GiB", "--cache", "release",
                      "--leak", "300MiB", "--run-time", "1s")
    seen = [process_used(sim, gpu, w.pid)]
    for _ in range(3):
        assert w.post("/generate", json={}).status_code == 200
        seen.append(process_used(sim, gpu, w.pid))
    assert [b - a for a, b in zip(seen, seen[1:])] == [300 * MiB] * 3
    assert w.status()["process"]["leaked_bytes"] == 900 * MiB


def test_crashed_worker_memory_returns_after_release_delay(sim, workers):
    gpu = sim.create(memory="24GiB", release_delay="300s", timescale=TIMESCALE)  # 3 s real
    w = workers.start(gpu, "--resident", "4GiB", "--per-request", "1GiB", "--crash-after", "1",
                      "--run-time", "10s")
    assert w.post("/generate", json={}).status_code == 200
    with pytest.raises(requests.ConnectionError):
        w.post("/generate", json={})
    assert w.wait_exit() == 1
    assert "illegal memory access" in w.log()
    # Right after the crash the driver still shows the dead process's memory ...
    procs = sim.show(gpu)["gpus"][0]["processes"]
    mine = [p for p in procs if p["pid"] == w.pid]
    assert mine and mine[0]["dead"] and mine[0]["used"] >= CONTEXT + 4 * GiB, procs
    # ... and returns it once the release delay has passed.
    wait_for(lambda: gpu_used(sim, gpu) == 0, what="crashed worker's memory released")


def test_hang_holds_memory_and_never_answers(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "2GiB", "--per-request", "3GiB", "--hang-after", "0",
                      "--run-time", "2s")
    with pytest.raises(requests.Timeout):
        w.post("/generate", json={}, timeout=2)
    assert w.proc.poll() is None
    assert w.get("/health").status_code == 200
    assert process_used(sim, gpu, w.pid) == CONTEXT + 5 * GiB
    assert sim.show(gpu)["gpus"][0]["utilization_gpu"] == 100


def test_cache_keep_holds_request_memory_until_clear_cache(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "6GiB", "--per-request", "4GiB", "--run-time", "1s")
    base = process_used(sim, gpu, w.pid)
    assert base == CONTEXT + 6 * GiB
    assert w.post("/generate", json={}).status_code == 200
    assert process_used(sim, gpu, w.pid) == base + 4 * GiB  # cached, still "used" for NVML
    assert w.status()["process"]["cached_bytes"] == 4 * GiB
    # The next request reuses the cached bytes: no growth.
    assert w.post("/generate", json={}).status_code == 200
    assert process_used(sim, gpu, w.pid) == base + 4 * GiB
    r = w.post("/clear_cache/")
    assert r.status_code == 200 and r.json()["freed_bytes"] == 4 * GiB
    assert process_used(sim, gpu, w.pid) == base


def test_cache_release_returns_request_memory_at_once(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "6GiB", "--per-request", "4GiB", "--cache", "release",
                      "--run-time", "1s")
    base = process_used(sim, gpu, w.pid)
    assert w.post("/generate", json={}).status_code == 200
    assert process_used(sim, gpu, w.pid) == base


def test_unload_leaves_residue_and_reload_restores(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--name", "validator", "--resident", "4.4GiB", "--unload-residue", "400MiB",
                      "--load-time", "10s", "--unload-time", "1s")
    r = w.post("/unload_models/")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["status"] == "success"
    assert doc["memory_before_bytes"] == CONTEXT + round(4.4 * GiB)
    assert doc["memory_after_bytes"] == CONTEXT + 400 * MiB
    assert doc["time_taken"] > 0
    assert process_used(sim, gpu, w.pid) == CONTEXT + 400 * MiB
    assert w.get("/health").json() == {"status": "unloaded", "model": "validator"}
    r = w.post("/generate", json={})
    assert r.status_code == 503 and r.json() == {"error": "models unloaded"}
    r = w.post("/reload_models/")
    assert r.status_code == 200, r.text
    assert r.json()["memory_after_bytes"] == CONTEXT + round(4.4 * GiB)
    assert process_used(sim, gpu, w.pid) == CONTEXT + round(4.4 * GiB)
    assert w.get("/health").json()["status"] == "ok"
    assert w.post("/generate", json={}).status_code == 200


def test_loading_answers_503_until_loaded(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "8GiB", "--load-time", "300s", wait_ready=False)
    r = w.get("/health")
    assert r.status_code == 503 and r.json()["status"] == "loading"
    assert w.post("/generate", json={}).status_code == 503
    # Memory arrives while loading, then the model is ready.
    w.wait_health(200)
    assert process_used(sim, gpu, w.pid) == CONTEXT + 8 * GiB


def test_load_that_does_not_fit_exits_1_with_torch_error(sim, workers):
    gpu = sim.create(memory="8GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "9GiB", wait_ready=False)
    assert w.wait_exit() == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in w.log()


def test_lock_serialises_requests(sim, workers):
    gpu = sim.create(memory="40GiB", timescale=TIMESCALE)
    flags = ["--resident", "1GiB", "--per-request", "4GiB", "--cache", "release", "--run-time", "60s"]
    free = workers.start(gpu, *flags)
    locked = workers.start(gpu, "--lock", *flags)
    for w in (free, locked):
        results = concurrently([lambda w=w: post(w, "/generate", json={}) for _ in range(3)])
        assert all(isinstance(r, requests.Response) and r.status_code == 200 for r in results), results
    # Peak memory shows how many requests ran at once.
    assert free.status()["process"]["peak_bytes"] > CONTEXT + GiB + 4 * GiB
    assert locked.status()["process"]["peak_bytes"] == CONTEXT + GiB + 4 * GiB


def test_global_lock_serialises_across_workers(sim, workers, tmp_path):
    # Two workers whose requests need 10 GiB each on a 16 GiB card: at once they OOM; with a
    # shared lock file only one request is on the GPU at a time and both succeed.
    gpu = sim.create(memory="16GiB", timescale=TIMESCALE)
    lock = str(tmp_path / "gpu0.lock")
    flags = ["--context", "0", "--per-request", "10GiB", "--cache", "release", "--run-time", "60s"]
    a = workers.start(gpu, "--global-lock", lock, *flags)
    b = workers.start(gpu, "--global-lock", lock, *flags)
    for _ in range(2):
        results = concurrently([lambda: post(a, "/generate", json={}),
                                lambda: post(b, "/generate", json={})])
        assert [r.status_code for r in results] == [200, 200], [r.text for r in results]
    c = workers.start(gpu, *flags)
    d = workers.start(gpu, *flags)
    results = concurrently([lambda: post(c, "/generate", json={}), lambda: post(d, "/generate", json={})])
    assert any(is_torch_oom(r) for r in results), [r.text for r in results]


def test_json200_oom_style(sim, workers):
    gpu = sim.create(memory="16GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "8GiB", "--per-request", "12GiB", "--oom-style", "json200",
                      "--run-time", "3s")
    r = w.post("/generate", files={"image": ("in.png", b"\x89PNG...")}, data={"seed": "1"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["success"] is False
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in doc["error"]


def test_mem_scale_makes_a_smaller_resolution_fit(sim, workers):
    gpu = sim.create(memory="16GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "6GiB", "--per-request", "12GiB", "--cache", "release",
                      "--mem-scale", "resolution:1024:2", "--run-time", "5s")
    assert is_torch_oom(w.post("/generate", json={"resolution": 1024}))
    r = w.post("/generate", json={"resolution": 512})  # 12 GiB x (512/1024)^2 = 3 GiB
    assert r.status_code == 200, r.text
    assert w.status()["process"]["active_bytes"] == 0
    # Form fields (urlencoded and multipart) are parameters too.
    assert w.post("/generate", data={"resolution": "512"}).status_code == 200
    assert w.post("/generate", files={"image": ("a.png", b"x")}, data={"resolution": "512"}).status_code == 200
    assert is_torch_oom(w.post("/generate", data={"resolution": "1024"}))


def test_fail_prob(sim, workers):
    gpu = sim.create(memory="16GiB", timescale=TIMESCALE)
    always = workers.start(gpu, "--fail-prob", "1", "--run-time", "1s")
    r = always.post("/generate", json={})
    assert r.status_code == 500 and "simulated failure" in r.text and "out of memory" not in r.text
    never = workers.start(gpu, "--fail-prob", "0", "--run-time", "1s")
    assert never.post("/generate", json={}).status_code == 200


def test_cuda_visible_devices_picks_the_gpu(sim, workers):
    gpu = sim.create(gpus=2, memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "2GiB", env={"CUDA_VISIBLE_DEVICES": "1,0"})
    assert process_used(sim, gpu, w.pid, gpu=1) == CONTEXT + 2 * GiB
    assert process_used(sim, gpu, w.pid, gpu=0) == 0
    bad = workers.start(gpu, env={"CUDA_VISIBLE_DEVICES": "7"}, wait_ready=False)
    assert bad.wait_exit() == 1


def test_sigterm_finishes_running_request_then_exits(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--per-request", "1GiB", "--run-time", "100s", "--output", "ply",
                      "--output-size", "24MiB")
    result = []
    t = threading.Thread(target=lambda: result.append(post(w, "/generate", json={})))
    t.start()
    wait_for(lambda: w.status()["requests"]["running"] == 1, what="request running")
    w.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert result and result[0].status_code == 200
    # The whole answer left before the process did (a 24 MiB body takes several writes).
    assert len(result[0].content) == int(result[0].headers["content-length"]) > 20 * MiB
    assert w.wait_exit() == 0
    assert w.get_refused()


# --- HTTP ------------------------------------------------------------------------------------

def raw_exchange(port, data, timeout=30):
    """Send raw bytes, read until the server closes; returns everything read."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_chunked_body_and_pipelining(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--run-time", "1s")
    out = raw_exchange(w.port,
                       b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"Content-Type: application/json\r\n\r\n"
                       b"6\r\n{\"seed\r\n6\r\n\": 42}\r\n0\r\n\r\n"
                       b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                       b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    heads = [h.split(b"\r\n")[0] for h in out.split(b"HTTP/1.1 ")[1:]]
    assert heads == [b"200 OK", b"200 OK", b"404 Not Found"], out
    first_body = out.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1 ")[0]
    assert json.loads(first_body)["params"] == {"seed": "42"}
    # The generation had ended when the pipelined /health was answered.
    health = json.loads(out.split(b"HTTP/1.1 ")[2].split(b"\r\n\r\n", 1)[1])
    assert health["running"] == 0


def test_bad_requests(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--max-body", "1KiB")
    assert raw_exchange(w.port, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
                        ).startswith(b"HTTP/1.1 413 ")
    assert raw_exchange(w.port, b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert w.post("/generate", data=b"{not json", headers={"Content-Type": "application/json"}
                  ).status_code == 400
    assert w.get("/generate").status_code == 405
    assert w.get("/health").status_code == 200  # still serving


def test_chat_completions_plain_and_streaming(sim, workers):
    gpu = sim.create(memory="24GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--name", "qwen-7b", "--resident", "15GiB", "--per-request", "1GiB",
                      "--run-time", "20s", "--time-scale", "max_tokens:256:1")
    models = w.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["qwen-7b"]
    msg = {"model": "qwen-7b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}
    r = w.post("/v1/chat/completions", json=msg)
    assert r.status_code == 200
    doc = r.json()
    assert doc["object"] == "chat.completion" and doc["model"] == "qwen-7b"
    assert doc["choices"][0]["message"]["role"] == "assistant" and doc["choices"][0]["message"]["content"]
    r = w.post("/v1/chat/completions", json=dict(msg, stream=True), stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line[len(b"data: "):] for line in r.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 4
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text
    # Memory is held while streaming and cached afterwards (allocator keeps it).
    assert process_used(sim, gpu, w.pid) == CONTEXT + 16 * GiB


# --- the traffic player, against a bare simworker (the field's "before") ---------------------

def test_player_counts_ooms_of_seed004_bursts(sim, workers, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    gpu = sim.create(memory="5.6GiB", timescale=TIMESCALE)
    w = workers.start(gpu, "--resident", "3GiB", "--per-request", "2.1GiB", "--run-time", "3.5s",
                      "--path", "/vlm/api/chat")
    out = tmp_path / "result.json"
    res = subprocess.run(["/usr/bin/python3", str(repo / "bench/player/player.py"),
                          str(repo / "examples/seed004-vlm-6gb"), "--url", w.url(""),
                          "--duration", "130s", "--json", str(out), "--simgpu", gpu],
                         capture_output=True, text=True, timeout=120, env=workers.env(gpu))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    s = doc["summary"]
    reqs = doc["requests"]
    assert s["requests"] == doc["planned"] == len(reqs) >= 10
    # Bursts of 5 on a card that fits one request: OOMs, counted from PyTorch's text.
    assert s["oom"] == sum(1 for r in reqs if r["status"] == 500 and "out of memory" in r["error"]) > 0
    assert s["succeeded"] == sum(1 for r in reqs if r["status"] == 200) > 0
    assert s["succeeded"] + s["oom"] == s["requests"]
    assert s["statuses"] == {"200": s["succeeded"], "500": s["oom"]}
    assert 0 < s["deadline_hit_rate"] <= s["success_rate"]
    assert s["latency_s"]["p50"] <= s["latency_s"]["p95"] <= s["latency_s"]["max"]
    assert doc["gpu"]["gpus"][0]["peak_used"] <= 5.6 * GiB
    assert doc["gpu"]["gpus"][0]["peak_used"] >= CONTEXT + 3 * GiB + 2 * GiB
    assert "OOM seen: %d" % s["oom"] in res.stdout
