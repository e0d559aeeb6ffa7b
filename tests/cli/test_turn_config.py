"""cli: the configuration of models that take turns on a card (issue 35, SPEC section 9):
`max_wait`, `evicts`, `alias_of` entries and `gpu.idle_model`, as the operator meets them.

test_check_config_takes_the_turn_keys: a file with every form of the keys passes
`vramd --check-config` and `vramctl check-config` (text and --json), which count the
alias_of entry apart from the models; each bad form is refused by both with the same
"FILE:LINE:COL: key.path: message" line, exit 1.

test_a_reload_takes_changed_max_wait_and_evicts: two models whose workers fail at start are
failed; a SIGHUP whose file changes only w1's max_wait (and adds an alias_of entry) is taken:
w1 is tried again (its entry changed), w2 stays failed (its entry did not), as the reload's
answer says; a reload that changes only evicts in defaults: clears w2 too; a reload with a
bad evicts is refused 400 bad_config with its file:line:col, and the daemon keeps serving
its previous configuration.
"""
import json
import re
import signal
import subprocess

from vramdkit import vramd_binary, wait_for

from .conftest import vramctl

GOOD = """\
defaults:
  max_wait: auto
  evicts: any
gpu:
  idle_model: {0: qwen, 1: embed}
  idle_model_after: 45s
models:
  qwen-7b:
    cmd: [/bin/sh, -c, "exec sleep 100 {port}"]
    aliases: [qwen]
    memory: {resident: 15GiB}
    max_wait: 2m
  llama-8b:
    cmd: [/bin/sh, -c, "exec sleep 100 {port}"]
    memory: {resident: 16GiB}
  embed:
    cmd: [/bin/sh, -c, "exec sleep 100 {port}"]
    memory: {resident: 2GiB}
    evicts: idle_only
  chat-any:
    alias_of: [qwen, llama-8b]
    route: /chat/
    aliases: [chat]
"""

# (the text replaced in GOOD, its replacement, the expected error after "FILE:")
BAD = [
    ("    max_wait: 2m\n", "    max_wait: 500ms\n",
     '12:15: models.qwen-7b.max_wait: must be from 1s to 24h (or auto), got "500ms"'),
    ("  evicts: any\n", "  evicts: never\n",
     '3:11: defaults.evicts: expected any or idle_only, got "never"'),
    ("    route: /chat/\n", "    route: /chat/\n    cmd: [x]\n",
     '23:5: models.chat-any.cmd: "cmd" is not allowed here: alias_of entries take only route, strip and '
     'aliases (the models it names carry the rest)'),
    ("alias_of: [qwen, llama-8b]", "alias_of: [qwen, qwen-7b]",
     '21:22: models.chat-any.alias_of[1]: model "qwen-7b" is listed twice (alias_of[0] names it too)'),
    ("alias_of: [qwen, llama-8b]", "alias_of: [qwen, mistral]",
     '21:22: models.chat-any.alias_of[1]: no model "mistral" (alias_of names a model of this file, by its '
     'name or an alias)'),
    ("{0: qwen, 1: embed}", "{0: qwen, 1: chat}",
     '5:28: gpu.idle_model.1: "chat" is an alias_of entry: gpu.idle_model names models that have a server '
     'of their own'),
    ("    aliases: [chat]\n", "    aliases: [qwen]\n",
     '23:15: models.chat-any.aliases[0]: alias "qwen" is already an alias of model "qwen-7b"'),
]


def _vramd_check(path):
    return subprocess.run([str(vramd_binary()), "--check-config", str(path)], capture_output=True, text=True,
                          timeout=30)


def test_check_config_takes_the_turn_keys(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    for p in (_vramd_check(good), vramctl("check-config", str(good))):
        assert p.returncode == 0, p
        assert p.stdout.strip() == f"{good}: ok (3 models, 1 alias_of entry)", p
    p = vramctl("check-config", str(good), "--json")
    body = json.loads(p.stdout)
    assert body == {"file": str(good), "ok": True, "models": 3, "alias_of_entries": 1}, body

    for i, (old, new, error) in enumerate(BAD):
        assert old in GOOD, old
        bad = tmp_path / f"bad{i}.yaml"
        bad.write_text(GOOD.replace(old, new, 1))
        for p in (_vramd_check(bad), vramctl("check-config", str(bad))):
            assert p.returncode == 1, (new, p)
            assert p.stderr.strip() == f"{bad}:{error}", (new, p.stderr)
            assert "ok (" not in p.stdout, p


def _broken(vramd, name, **keys):
    return vramd.worker(name, cmd=["/bin/sh", "-c", "echo 'no weights' >&2; exit 126"], deadline="120s", **keys)


def _failed(vd, name):
    def attempt():
        r = vd.get(f"/{name}/echo", timeout=120)
        assert r.status in (502, 503, 504), r
        return r if r.error_code() == "model_failed" else None
    return wait_for(attempt, timeout=90, interval=0.5, what=f"503 model_failed for {name}")


def _reload_failed(vd):
    p = vramctl("reload", "--json", url=f"http://127.0.0.1:{vd.port}")
    assert p.returncode == 0, p
    body = json.loads(p.stdout)
    assert body["reloaded"] is True, body
    return sorted(f["model"] for f in body["failed"])


def test_a_reload_takes_changed_max_wait_and_evicts(vramd):
    vd = vramd.start(models={"w1": _broken(vramd, "w1", max_wait="1m"), "w2": _broken(vramd, "w2")})
    _failed(vd, "w1")
    _failed(vd, "w2")
    assert _reload_failed(vd) == ["w1", "w2"]  # the same file: both stay failed

    # w1's max_wait changed (and an alias_of entry added): w1's entry is taken as changed
    cfg = dict(vd.config)
    cfg["models"] = {"w1": _broken(vramd, "w1", max_wait="5m"), "w2": _broken(vramd, "w2"),
                     "either": {"alias_of": ["w1", "w2"], "route": "/either/"}}
    vd.write_config(cfg)
    vd.signal(signal.SIGHUP)
    vd.wait_event("model_failed_cleared", model="w1")
    assert _reload_failed(vd) == ["w2"]
    assert not vd.events("model_failed_cleared", model="w2"), vd.log_tail()

    # evicts changed in defaults: (part of every entry): w2 is tried again too
    cfg = dict(cfg, defaults={"evicts": "idle_only"})
    vd.write_config(cfg)
    vd.signal(signal.SIGHUP)
    vd.wait_event("model_failed_cleared", model="w2")

    # a bad evicts is refused with its place; the previous configuration keeps running
    bad = dict(cfg, defaults={"evicts": "never"})
    vd.write_config(bad)
    r = vd.post("/v1/admin/reload")
    assert r.status == 400 and r.error_code() == "bad_config", r
    message = r.json()["error"]["message"]
    assert re.search(r":\d+:\d+: defaults\.evicts: expected any or idle_only, got \"never\"$", message), message
    assert {"w1", "w2"} <= {m["name"] for m in vd.status()["models"]}
    assert vd.get("/healthz").status == 200
