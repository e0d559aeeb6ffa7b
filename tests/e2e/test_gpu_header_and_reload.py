"""e2e on a simulated GPU set (simgpu, libnvidia-ml-sim.so through gpu.nvml_library, simworker;
each test creates its own set and removes it at teardown):

  - an answer held for a verdict (validate:, degrade:) keeps X-Vramd-Gpu;
  - a reload that changes gpu.devices, gpu.nvml_library or gpu.poll is refused (400
    bad_config naming the key), through the admin route or SIGHUP, and the old config keeps
    serving.
"""
import copy
import signal

import pytest

from e2ekit import (NVML_SIM, assert_alive, gpu_section, sim_model, simgpu, wait_nvml)  # noqa: F401  (simgpu: a fixture)
from vramdkit.waits import wait_for


# --- held answers keep X-Vramd-Gpu -------------------------------------------------

HELD = {
    "validate_kind": {"validate": "json"},
    "validate_mapping": {"validate": {"kind": "json", "min_bytes": 16}},
    "degrade": {"degrade": {"detect": {"status": [500], "body_matches": "out of memory"},
                            "ladder": [{"set": {"resolution": 512}}]}},
}


@pytest.mark.parametrize("case", sorted(HELD))
def test_held_answer_carries_gpu_header(vramd, simgpu, case):
    """Two simworker models on simulated GPU 1 (`gpus: [1]`, so the header's value is not a
    default 0): "plain" streams its answer, "held" declares validate:/degrade: so vramd
    holds the answer for a verdict and rebuilds the head. Both answers must carry
    X-Vramd-Gpu: 1 (the held one lost it)."""
    models = {"plain": sim_model(vramd, "plain", gpus=[1]),
              "held": sim_model(vramd, "held", gpus=[1], **HELD[case])}
    vd = vramd.start(models=models, gpu=gpu_section())
    wait_nvml(vd)
    body = {"prompt": "x"}
    plain = vd.post("/plain/generate", body=body, headers={"Content-Type": "application/json"})
    assert plain.status == 200, plain
    assert plain.headers.get("x-vramd-gpu") == "1", plain.headers
    held = vd.post("/held/generate", body=body, headers={"Content-Type": "application/json"})
    assert held.status == 200, held
    assert held.complete and held.json() is not None
    assert held.headers.get("x-vramd-attempts") == "1", held.headers  # it went through a worker
    assert held.headers.get("x-vramd-gpu") == "1", \
        f"held answer ({case}) has no X-Vramd-Gpu: {held.headers}"
    assert_alive(vd, "after the requests")


# --- reload must refuse gpu.* changes it cannot apply -------------------------------

def other_nvml_library(tmp_path):
    """Another path to the same simulated NVML (a valid library: only the key changes)."""
    link = tmp_path / "libnvidia-ml-other.so"
    if not link.exists():
        link.symlink_to(NVML_SIM)
    return str(link)


GPU_CHANGES = {
    "gpu.poll": lambda tmp: {"poll": "350ms"},
    "gpu.devices": lambda tmp: {"devices": [0]},
    "gpu.nvml_library": lambda tmp: {"nvml_library": other_nvml_library(tmp)},
}


def model_names(vd):
    return {m["name"] for m in vd.status()["models"]}


@pytest.mark.parametrize("key", sorted(GPU_CHANGES))
def test_reload_refuses_gpu_changes(vramd, simgpu, tmp_path, key):
    """Rewrite the config changing one of gpu.poll / gpu.devices / gpu.nvml_library (and
    adding a model "b"), POST /v1/admin/reload: expected 400 bad_config whose message names
    the key, "b" not added, the old config serving (/v1/status, model "a"). Then the same
    file with the old gpu section reloads with 200 and "b" appears (the refusal is about the
    key, not about reloads). Failed: the reload answered 200 and silently kept the old gpu
    settings."""
    vd = vramd.start(models={"a": vramd.worker("a")}, gpu=gpu_section())
    wait_nvml(vd)
    assert vd.get("/a/echo").status == 200
    good = copy.deepcopy(vd.config)

    changed = copy.deepcopy(good)
    changed["gpu"].update(GPU_CHANGES[key](tmp_path))
    changed["models"]["b"] = vramd.worker("b")
    vd.write_config(changed)
    r = vd.post("/v1/admin/reload", timeout=15)
    assert r.status == 400, f"reload changing {key} answered {r!r}"
    err = r.json()["error"]
    assert err["code"] == "bad_config", err
    assert key in err["message"], err
    assert vd.alive()
    assert model_names(vd) == {"a"}
    st = vd.status()
    assert st["nvml"]["ok"] and len(st["gpus"]) == 2, st["gpus"]
    assert vd.get("/a/echo").status == 200
    assert vd.get("/b/echo").status == 404

    fixed = copy.deepcopy(good)
    fixed["models"]["b"] = vramd.worker("b")
    vd.write_config(fixed)
    r = vd.post("/v1/admin/reload", timeout=15)
    assert r.status == 200, r
    wait_for(lambda: model_names(vd) == {"a", "b"}, timeout=15, what="model b added")
    assert vd.get("/b/echo").status == 200


def test_sighup_reload_refuses_gpu_poll_change(vramd, simgpu):
    """The same through SIGHUP: config_reload_failed is logged with an error naming
    gpu.poll, no config_reloaded follows, and the old models keep serving. Failed: the
    reload was logged as config_reloaded."""
    vd = vramd.start(models={"a": vramd.worker("a")}, gpu=gpu_section())
    wait_nvml(vd)
    changed = copy.deepcopy(vd.config)
    changed["gpu"]["poll"] = "350ms"
    changed["models"]["b"] = vramd.worker("b")
    vd.write_config(changed)
    vd.signal(signal.SIGHUP)
    wait_for(lambda: vd.events("config_reload_failed") or vd.events("config_reloaded"),
             timeout=15, what="the reload's outcome in the log")
    assert not vd.events("config_reloaded"), vd.events("config_reloaded")
    ev = vd.events("config_reload_failed")[0]
    assert "gpu.poll" in ev.get("error", ""), ev
    assert vd.alive()
    assert model_names(vd) == {"a"}
    assert vd.get("/a/echo").status == 200
