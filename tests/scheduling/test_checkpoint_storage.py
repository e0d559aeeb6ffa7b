"""The checkpoint tier through the driver's custom storage (issue 25; gpu/cuda_storage.c).

A driver that has custom storage (CUDA 13.4: cuCheckpointOperationComplete in
cuGetProcAddress; libcuda-sim.so with SIMGPU_CUSTOM_STORAGE=1) maps the process's GPU memory
into vramd at a checkpoint; vramd copies it through its pinned pool into host memory of its
own and completes the operation, and at the restore copies it back into the new mapping.
The driver lent here (580) has none, and then the driver copies by itself.

What each case expects:
  - with custom storage: /v1/status `cuda.custom_storage` true; an admin unload checkpoints
    the worker (NVML stops showing its memory, the same pid lives), vramd holds its bytes
    (`custom_storage_held_bytes` = what the driver mapped = the bytes parked), the log's
    cuda_done says so; a request restores it into the same pid and vramd holds nothing after;
  - a driver without it: `custom_storage` false with the reason, the driver's own copy;
  - `gpu.checkpoint_storage: driver`: not used although the driver has it;
  - a worker that dies while checkpointed: what vramd held for it is dropped at the next
    checkpoint (nothing would restore it).
"""
import os
import signal

from vramdkit import GiB, MiB, sim_s, wait_for

CONTEXT = 300 * MiB
CUSTOM = {"SIMGPU_CUSTOM_STORAGE": "1"}


def ckpt_model(sched, name="llm", resident="512MiB"):
    flags = ["--resident", resident, "--per-request", "64MiB", "--run-time", sim_s(0.5), "--load-time", sim_s(20)]
    return sched.model(name, flags, "1GiB", "64MiB", checkpoint=True)


def gpu_held_by(sched, gpu, pid):
    return sum(p["used"] for g in sched.show(gpu)["gpus"] for p in g["processes"] if p["pid"] == pid)


def start(sched, gpu, models, env=None, gpu_cfg=None):
    return sched.start_vramd(gpu, models, extra_env=env or {}, gpu=gpu_cfg or {},
                             host_memory={"budget": "8GiB", "reserve": 0})


def test_custom_storage_parks_through_vramd_and_restores(sched):
    gpu = sched.gpu_set("8GiB")
    vd = start(sched, gpu, {"llm": ckpt_model(sched)}, env=CUSTOM)
    cu = vd.status()["cuda"]
    assert cu["available"] and cu["custom_storage"] and cu["reason"] is None, cu
    assert vd.first("checkpoint_available")["custom_storage"] == "yes"
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    held = gpu_held_by(sched, gpu, pid)
    assert held >= 512 * MiB + CONTEXT, held

    assert vd.post("/v1/models/llm/unload").status == 200
    inst = vd.instances("llm")[0]
    assert inst["state"] == "parked" and inst["tier"] == "checkpointed" and inst["pid"] == pid, inst
    assert gpu_held_by(sched, gpu, pid) == 0
    cu = vd.status()["cuda"]
    assert cu["custom_storage_held_bytes"] == held, (cu, held)  # every byte the driver mapped
    park = [e for e in vd.events("cuda_done", model="llm") if e["op"] == "park"][-1]
    assert park["status"] == "ok" and park["state"] == "checkpointed", park

    r = vd.generate("llm")
    assert r.status == 200, r
    inst = vd.instances("llm")[0]
    assert inst["pid"] == pid and inst["state"] == "ready", inst
    assert gpu_held_by(sched, gpu, pid) >= held
    assert vd.status()["cuda"]["custom_storage_held_bytes"] == 0
    unpark = [e for e in vd.events("cuda_done", model="llm") if e["op"] == "unpark"][-1]
    assert unpark["status"] == "ok" and unpark["state"] == "running", unpark
    assert not vd.events("worker_started", model="llm")[1:]
    vd.assert_no_oom()


def test_without_custom_storage_the_driver_copies(sched):
    gpu = sched.gpu_set("8GiB")
    vd = start(sched, gpu, {"llm": ckpt_model(sched)})
    cu = vd.status()["cuda"]
    assert cu["available"] and not cu["custom_storage"], cu
    assert "cuCheckpointOperationComplete" in cu["reason"], cu
    assert vd.generate("llm").status == 200
    assert vd.post("/v1/models/llm/unload").status == 200
    assert vd.instances("llm")[0]["tier"] == "checkpointed"
    assert vd.status()["cuda"]["custom_storage_held_bytes"] == 0
    assert vd.generate("llm").status == 200


def test_checkpoint_storage_driver_turns_it_off(sched):
    gpu = sched.gpu_set("8GiB")
    vd = start(sched, gpu, {"llm": ckpt_model(sched)}, env=CUSTOM, gpu_cfg={"checkpoint_storage": "driver"})
    cu = vd.status()["cuda"]
    assert not cu["custom_storage"] and cu["reason"] == "turned off", cu
    assert vd.generate("llm").status == 200
    assert vd.post("/v1/models/llm/unload").status == 200
    assert vd.status()["cuda"]["custom_storage_held_bytes"] == 0
    assert vd.generate("llm").status == 200


def test_a_worker_that_dies_checkpointed_is_forgotten_at_the_next_checkpoint(sched):
    gpu = sched.gpu_set("8GiB")
    vd = start(sched, gpu, {"a": ckpt_model(sched, "a"), "b": ckpt_model(sched, "b")}, env=CUSTOM)
    for m in ("a", "b"):
        assert vd.generate(m).status == 200
    assert vd.post("/v1/models/a/unload").status == 200
    held_a = vd.status()["cuda"]["custom_storage_held_bytes"]
    assert held_a >= 512 * MiB
    pid_a = vd.instances("a")[0]["pid"]
    os.kill(pid_a, signal.SIGKILL)
    wait_for(lambda: vd.events("worker_exit", model="a"), timeout=20, what="a's worker exit")
    pid_b = vd.instances("b")[0]["pid"]
    held_b = gpu_held_by(sched, gpu, pid_b)
    assert vd.post("/v1/models/b/unload").status == 200
    assert vd.status()["cuda"]["custom_storage_held_bytes"] == held_b  # b's alone: a's went
    vd.allow_oom |= {"a"}
