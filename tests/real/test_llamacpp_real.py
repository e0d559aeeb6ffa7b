"""real: `preset: llamacpp` in front of the REAL llama-server (llama.cpp build 10587, CPU
only, tiny GGUF models that answer gibberish at about 1,000 tokens/s), found at
../shared/realservers/llama.cpp relative to the repository root, or $VRAMD_REALSERVERS/llama.cpp;
every test is skipped, naming the missing path, where it is not there.

The real server holds no (simulated) GPU memory: each entry declares memory.resident so that
vramd books, evicts and reloads on a simulated card as for a GPU server. Configs are what a
user writes (docs/config.md, "Presets"): preset, cmd or url, served_model, memory; only the
health interval is shortened.

Covers, and expects:
  - single-model (`-m FILE -np 2`): "model": "qa" (the entry's name, as vramd's /v1/models
    lists it) answers 200, a streamed chat arrives complete and well-formed (SSE chunks, then
    `data: [DONE]`); the entry's concurrency is the server's 2 slots.
  - router (`--models-dir`, and one set by LLAMA_ARG_MODELS_DIR alone, no flag): "model": "qa",
    or no model at all, reaches the entry's served_model (the router answers with its name);
    "model": "tiny-b" through qa's route is refused 400 wrong_model and the router never
    loads tiny-b; `?model=tiny-b` likewise; /models/load and /models/unload through a route
    are 403 hook_path; streamed chat complete.
  - eviction and reload: two supervised routers whose declared models (6 + 9 GiB) do not fit
    the 12 GiB card together: served one after the other, each unload and load through the
    router's routes, the reloaded model ready only once /models says it is loaded; no
    model_failed, no worker exit.
  - a router changed behind vramd's back (an external router; someone else unloads or loads a
    model on its own port): vramd's unload of a model not running (400 "model is not running")
    and load of a running one (400 "model is already running") count as done: every chat 200,
    no model_failed; a supervised router whose model was never loaded is evicted without
    being killed.
  - a client that leaves mid-stream: the model serves the next request, nothing stays in
    flight, the ledger is clean.
  - drain (SIGTERM): a stream in flight completes with [DONE]; vramd exits 0 and the server
    is gone.
Each test is bounded: a few seconds of generation at most (-t 1, small -c, max_tokens).
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from vramdkit.daemon import ExternalWorker
from vramdkit.net import free_port, request
from vramdkit.paths import REPO_ROOT
from vramdkit.waits import wait_for

GiB = 1 << 30


def llamacpp_dir():
    base = os.environ.get("VRAMD_REALSERVERS")
    root = Path(base) if base else REPO_ROOT.parent / "shared" / "realservers"
    return root / "llama.cpp"


def llama_server():
    """The real llama-server, or skip saying which path is missing."""
    path = llamacpp_dir() / "bin" / "llama-server"
    if not os.access(path, os.X_OK):
        pytest.skip(f"real llama-server not found at {path} (set VRAMD_REALSERVERS to the realservers folder)")
    return str(path)


def models_dir():
    return str(llamacpp_dir() / "models")


def gguf(name):
    return str(llamacpp_dir() / "models" / f"{name}.gguf")


def entry(cmd=None, served=None, resident="6GiB", **more):
    """An entry as a user writes it, with a short health interval."""
    m = {"preset": "llamacpp", "memory": {"resident": resident}, "health": {"interval": "100ms"},
         "startup_timeout": "20s", "stop_timeout": "3s"}
    if cmd is not None:
        m["cmd"] = cmd
    if served is not None:
        m["served_model"] = served
    m.update(more)
    return m


def single_cmd(model="tiny-a", slots=2):
    return [llama_server(), "-m", gguf(model), "--port", "{port}", "-c", "4096", "-np", str(slots), "-t", "1"]


def router_cmd():
    return [llama_server(), "--models-dir", models_dir(), "--models-max", "1", "--port", "{port}", "-c", "4096",
            "-np", "1", "-t", "1"]


def chat_body(model=None, max_tokens=8, stream=False, ignore_eos=False):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    if model is not None:
        body["model"] = model
    if stream:
        body["stream"] = True
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def chat(vd, path, body, timeout=30):
    return request(vd.port, "POST", path, body=json.dumps(body).encode(),
                   headers={"Content-Type": "application/json"}, timeout=timeout)


def chat_ok(vd, path, body):
    r = chat(vd, path, body)
    assert r.status == 200, (r.status, r.body[:400], vd.log_tail(40))
    return json.loads(r.body)


def send_stream(vd, path, body, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", vd.port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn


def open_stream(vd, path, body, timeout=30):
    conn = send_stream(vd, path, body, timeout)
    return conn, conn.getresponse()


def read_sse(resp):
    """Every `data:` payload of an SSE answer, the last one [DONE]; each other a chunk."""
    assert resp.status == 200, (resp.status, resp.read()[:300])
    assert resp.getheader("Content-Type", "").startswith("text/event-stream"), resp.getheaders()
    events = []
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            events.append(line[6:])
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop"), chunks[-1]
    return chunks


def stream_ok(vd, path, body):
    conn, resp = open_stream(vd, path, body)
    try:
        return read_sse(resp)
    finally:
        conn.close()


PORTS = {}


def router_status(vd, name):
    """The router's own GET /models, asked on its port (noted while it had an instance
    listed): {id: status value}."""
    insts = vd.model(name)["instances"]
    if insts:
        PORTS[(vd.port, name)] = insts[0]["port"]
    r = request(PORTS[(vd.port, name)], "GET", "/models", timeout=10)
    assert r.status == 200
    return {m["id"]: m["status"]["value"] for m in json.loads(r.body)["data"]}


def no_failures(vd):
    assert not vd.events("model_failed"), vd.events("model_failed")
    assert not vd.events("worker_exit"), vd.events("worker_exit")
    assert not vd.events("worker_kill"), vd.events("worker_kill")


def pids_of(vd, names):
    return [i["pid"] for n in names for i in vd.model(n)["instances"] if i.get("pid")]


def finish(h, vd, pids):
    """The harness's end checks, then: every llama-server it ran is gone (the harness's own
    leftover check finds its workers by a tag that llama-server's argv cannot carry)."""
    h.finish()
    for pid in pids:
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or
                 Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z",
                 timeout=10, what=f"llama-server {pid} gone")


# --- single-model ------------------------------------------------------------------------------

def test_single_names_stream_and_slots(sched):
    h = sched
    gs = h.gpu_set("12GiB")
    vd = h.start_vramd(gs, {"qa": entry(single_cmd(slots=2))})
    names = [m["id"] for m in json.loads(vd.get("/v1/models").body)["data"]]
    assert "qa" in names
    a = chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))
    assert a["object"] == "chat.completion" and a["choices"][0]["message"]["content"]
    b = chat_ok(vd, "/v1/chat/completions", chat_body("qa"))  # routed by "model" alone
    assert b["object"] == "chat.completion"
    chunks = stream_ok(vd, "/qa/v1/chat/completions", chat_body("qa", max_tokens=200, stream=True, ignore_eos=True))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(text) >= 100, text
    # concurrency: the server's 2 slots run two streams at once (none waits in vramd's queue)
    conns = [send_stream(vd, "/qa/v1/chat/completions", chat_body("qa", max_tokens=1500, stream=True,
                                                                  ignore_eos=True)) for _ in range(2)]
    wait_for(lambda: vd.model("qa")["in_flight"] == 2, timeout=10, what="two requests running at once")
    for conn in conns:
        assert len(read_sse(conn.getresponse())) >= 1000
        conn.close()
    no_failures(vd)
    finish(h, vd, pids_of(vd, ["qa"]))


# --- router ------------------------------------------------------------------------------------

def test_router_pins_its_model(sched):
    h = sched
    gs = h.gpu_set("12GiB")
    env_router = entry([llama_server(), "--port", "{port}", "--models-max", "1", "-c", "4096", "-t", "1"],
                       served="tiny-c", resident="2GiB", env={"LLAMA_ARG_MODELS_DIR": models_dir()})
    vd = h.start_vramd(gs, {"qa": entry(router_cmd(), served="tiny-a"), "qc": env_router})
    a = chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))
    assert a["model"] == "tiny-a", a
    b = chat_ok(vd, "/qa/v1/chat/completions", chat_body())  # no "model": the entry's
    assert b["model"] == "tiny-a"
    c = chat_ok(vd, "/v1/chat/completions", chat_body("tiny-a"))  # the server's own name
    assert c["model"] == "tiny-a"
    r = chat(vd, "/qa/v1/chat/completions", chat_body("tiny-b"))
    assert r.status == 400 and json.loads(r.body)["error"]["code"] == "wrong_model", (r.status, r.body[:300])
    r = request(vd.port, "GET", "/qa/props?model=tiny-b", timeout=10)
    assert r.status == 400 and json.loads(r.body)["error"]["code"] == "wrong_model", (r.status, r.body[:300])
    for p in ("/qa/models/load", "/qa/models/unload"):
        r = chat(vd, p, {"model": "tiny-b"})
        assert r.status == 403 and json.loads(r.body)["error"]["code"] == "hook_path", (p, r.status, r.body[:200])
    assert router_status(vd, "qa") == {"tiny-a": "loaded", "tiny-b": "unloaded", "tiny-c": "unloaded"}
    # router mode found from the environment alone (LLAMA_ARG_MODELS_DIR, no flag)
    d = chat_ok(vd, "/qc/v1/chat/completions", chat_body("qc"))
    assert d["model"] == "tiny-c"
    chunks = stream_ok(vd, "/qa/v1/chat/completions", chat_body("qa", max_tokens=100, stream=True, ignore_eos=True))
    assert chunks[0]["model"] == "tiny-a"
    no_failures(vd)
    finish(h, vd, pids_of(vd, ["qa", "qc"]))


def test_router_eviction_and_reload(sched):
    h = sched
    gs = h.gpu_set("12GiB")
    vd = h.start_vramd(gs, {"qa": entry(router_cmd(), served="tiny-a", resident="6GiB"),
                            "qb": entry(router_cmd(), served="tiny-b", resident="9GiB")})
    for _ in range(2):
        chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))
        assert router_status(vd, "qa")["tiny-a"] == "loaded"
        chat_ok(vd, "/qb/v1/chat/completions", chat_body("qb"))  # qa evicted: 6 + 9 > 12
        assert router_status(vd, "qa")["tiny-a"] == "unloaded"
        assert router_status(vd, "qb")["tiny-b"] == "loaded"
    hooks = [(e["model"], e["hook"]) for e in vd.events("hook_call")]
    assert ("qa", "unload") in hooks and ("qa", "reload") in hooks and ("qb", "unload") in hooks, hooks
    bad = [e for e in vd.events() if e.get("event", "").endswith("_done") and e.get("outcome") not in (None, "ok")]
    assert not bad, bad
    no_failures(vd)
    finish(h, vd, pids_of(vd, ["qa", "qb"]))


def start_router(h, gs, models_max=3):
    port = free_port()
    argv = [llama_server(), "--models-dir", models_dir(), "--models-max", str(models_max), "--port", str(port),
            "-c", "4096", "-np", "1", "-t", "1"]
    w = ExternalWorker(argv, port, "router", h.tmp / f"router-{port}.log", env=h.env(gs), cwd=h.tmp,
                       what="llama-server router")
    h.externals.append(w)
    return w


def router_call(w, path, model):
    return request(w.port, "POST", path, body=json.dumps({"model": model}).encode(),
                   headers={"Content-Type": "application/json"}, timeout=10)


def router_models(w):
    r = request(w.port, "GET", "/models", timeout=10)
    return {m["id"]: m["status"]["value"] for m in json.loads(r.body)["data"]}


def test_router_changed_behind_vramds_back(sched):
    h = sched
    gs = h.gpu_set("12GiB")
    w = start_router(h, gs)
    ext = {"url": w.url}
    vd = h.start_vramd(gs, {"qa": entry(served="tiny-a", resident="6GiB", **ext),
                            "qb": entry(served="tiny-b", resident="9GiB", **ext),
                            "qs": entry(router_cmd(), served="tiny-c", resident="5GiB")})
    # the supervised router started by an admin load: its model is never loaded
    r = request(vd.port, "POST", "/v1/models/qs/load", timeout=30)
    assert r.status == 200, (r.status, r.body[:300])
    qs_pid = vd.model("qs")["instances"][0]["pid"]
    chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))  # 6 + 5 GiB fit
    # someone else unloads tiny-a on the router's own port; vramd evicts qa and qs for qb
    # (9 GiB): qa's unload answers 400 "model is not running", qs's too: both are done
    assert router_call(w, "/models/unload", "tiny-a").status == 200
    chat_ok(vd, "/qb/v1/chat/completions", chat_body("qb"))
    assert vd.model("qs")["instances"][0]["pid"] == qs_pid  # not killed
    # someone else loads tiny-a; vramd's load answers 400 "model is already running": done
    assert router_call(w, "/models/load", "tiny-a").status == 200
    wait_for(lambda: router_models(w)["tiny-a"] == "loaded", timeout=10, what="tiny-a loaded by someone else")
    chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))
    assert router_models(w)["tiny-a"] == "loaded"
    chat_ok(vd, "/qs/v1/chat/completions", chat_body("qs"))
    assert vd.model("qs")["instances"][0]["pid"] == qs_pid
    nothing = [e for e in vd.events() if e.get("nothing_to_do")]
    assert nothing, "no hook answered 'nothing to do'"
    no_failures(vd)
    finish(h, vd, pids_of(vd, ["qs"]))


# --- streams: a client that leaves, a drain ----------------------------------------------------

def one_slot_vramd(h):
    """vramd with one single-model entry of one slot, answered once (the server warm)."""
    vd = h.start_vramd(h.gpu_set("12GiB"), {"qa": entry(single_cmd(slots=1))})
    chat_ok(vd, "/qa/v1/chat/completions", chat_body("qa"))
    return vd


def test_client_leaves_mid_stream(sched):
    h = sched
    vd = one_slot_vramd(h)
    s = socket.create_connection(("127.0.0.1", vd.port), timeout=10)
    body = json.dumps(chat_body("qa", max_tokens=3000, stream=True, ignore_eos=True)).encode()
    s.sendall(b"POST /qa/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    wait_for(lambda: vd.model("qa")["in_flight"] == 1, timeout=10, what="the stream running")
    # Where vramd passes the stream through as it comes (SPEC 9), the first chunks are here
    # now and the client leaves mid-stream; where it still holds a streamed answer to judge
    # it, nothing has come yet. Either way the client leaves while the server generates.
    s.settimeout(0.5)
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()
    wait_for(lambda: vd.model("qa")["in_flight"] == 0, timeout=15, what="the request let go")
    chunks = stream_ok(vd, "/qa/v1/chat/completions", chat_body("qa", max_tokens=20, stream=True, ignore_eos=True))
    assert chunks
    no_failures(vd)
    finish(h, vd, pids_of(vd, ["qa"]))


def test_drain_lets_a_stream_finish(sched):
    h = sched
    vd = one_slot_vramd(h)
    pids = pids_of(vd, ["qa"])
    conn, resp = open_stream(vd, "/qa/v1/chat/completions",
                             chat_body("qa", max_tokens=1500, stream=True, ignore_eos=True))
    vd.signal(signal.SIGTERM)
    t0 = time.monotonic()
    chunks = read_sse(resp)
    conn.close()
    assert len(chunks) >= 1000 and time.monotonic() - t0 < 20
    assert vd.wait_exit(timeout=30) == 0
    for pid in pids:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what=f"llama-server {pid} gone")
    assert not vd.sanitizer_reports()
