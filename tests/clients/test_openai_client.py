"""clients: the official openai npm package (tests/js/node_modules/openai, v4), pointed at
vramd, completes a chat and a streamed chat against a simworker, lists the models, and sees
vramd's errors as OpenAI errors. The model has no route: requests are routed by the JSON
"model" field (its name or an alias, SPEC 3.1); /v1/models is vramd's own list."""
import json
import shutil
import subprocess

import pytest

from vramdkit import GiB, MiB, REPO_ROOT

SCRIPT = REPO_ROOT / "tests" / "js" / "openai_chat.mjs"
NODE_MODULES = REPO_ROOT / "tests" / "js" / "node_modules"


def node_or_skip():
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed (Debian package nodejs; make deps)")
    if not (NODE_MODULES / "openai" / "package.json").exists():
        pytest.skip("tests/js/node_modules/openai is missing (npm ci in tests/js; make deps)")
    return node


def test_openai_npm_client_chat_stream_models(sched):
    node = node_or_skip()
    gpus = sched.gpu_set("8GiB")
    flags = ["--resident", "1GiB", "--load-time", "2s", "--per-request", "512MiB",
             "--run-time", "4s"]
    model = sched.model("chat", flags, 1 * GiB, 512 * MiB, route=None,
                        aliases=["gpt-4o-mini", "org/chat:latest"])
    vd = sched.start_vramd(gpus, {"chat": model})

    p = subprocess.run([node, str(SCRIPT), f"http://127.0.0.1:{vd.port}/v1", "chat",
                        "gpt-4o-mini"], capture_output=True, text=True, timeout=180,
                       cwd=SCRIPT.parent)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, f"node exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    out = json.loads(lines[-1])

    chat = out["chat"]
    assert chat["object"] == "chat.completion", chat
    assert chat["role"] == "assistant" and chat["finish_reason"] == "stop", chat
    assert isinstance(chat["content"], str) and chat["content"].strip(), chat
    assert chat["model"].startswith("chat@"), chat  # simworker answered, through vramd
    assert chat["usage"] and chat["usage"]["completion_tokens"] > 0, chat
    assert chat["request_id"], "vramd's X-Request-Id reached the client"
    assert chat["queue_ms"] is not None, "vramd's X-Vramd-Queue-Ms reached the client"

    stream = out["stream"]
    assert stream["chunks"] > 1 and stream["content_chunks"] > 1, stream
    assert stream["content"].strip(), stream
    assert stream["objects"] == ["chat.completion.chunk"], stream
    assert stream["roles"] == ["assistant"] and stream["finish_reason"] == "stop", stream

    assert {"chat", "gpt-4o-mini", "org/chat:latest"} <= set(out["models"]), out["models"]

    unknown = out["unknown"]
    assert unknown["error"] and unknown["status"] == 404, unknown
    assert unknown["code"] == "unknown_model", unknown

    # vramd counted both requests and holds no request reservation any more
    st = vd.assert_ledger_clean()
    m = vd.model("chat", st)
    assert m["requests_total"] == 2, m
    assert m["queue"]["depth"] == 0 and m["in_flight"] == 0, m
    assert st["requests_total"] >= 2, st.get("requests_total")
    sched.finish()
