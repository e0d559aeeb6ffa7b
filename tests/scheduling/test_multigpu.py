"""Several GPUs: one ledger page per GPU, `gpus:` restrictions, best-fit placement.

A supervised worker gets CUDA_VISIBLE_DEVICES set to the GPU vramd placed it on (simworker
allocates on the first GPU of that list, so `simgpu show` sees it there). Two models that each
need most of a card land on different GPUs and run at the same time.
"""
from vramdkit import run_threads, sim_s

from .schedkit import Watch


def pids_on(show, index):
    return {p["pid"] for g in show["gpus"] if g["index"] == index for p in g["processes"]
            if not p.get("dead")}


def worker_env(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().split(b"\0")
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def test_model_restricted_to_gpu_1_runs_there(sched):
    """2 x 16 GiB set; model pinned1 has gpus: [1]. Its worker is started with gpu=1
    (worker_started) and CUDA_VISIBLE_DEVICES=1 in its environment, the status instance and ledger entry are on GPU 1, and simgpu show
    lists the worker's pid on GPU 1 and not on GPU 0. Then model mid (any GPU, 6 GiB + 1 GiB)
    goes to GPU 1 as well: best fit, the smallest free space that still holds it, keeps
    GPU 0's larger hole for larger models."""
    gpu = sched.gpu_set("16GiB", gpus=2)
    vd = sched.start_vramd(gpu, {"pinned1": sched.model(
        "pinned1", ["--resident", "700MiB", "--per-request", "512MiB", "--run-time", sim_s(1)],
        "1GiB", "512MiB", gpus=[1]),
        "mid": sched.model("mid", ["--resident", "5.7GiB", "--per-request", "1GiB",
                                   "--run-time", sim_s(1)], "6GiB", "1GiB")})
    r = vd.generate("pinned1")
    assert r.status == 200, r
    started = vd.first("worker_started", model="pinned1")
    assert started["gpu"] == 1, started
    inst = vd.instances("pinned1")[0]
    assert inst["gpu"] == 1, inst
    st = vd.status()
    owners = {g["index"]: {e["owner"] for e in g["ledger"]} for g in st["gpus"]}
    assert "pinned1" in owners[1] and "pinned1" not in owners[0], owners
    assert worker_env(inst["pid"]).get("CUDA_VISIBLE_DEVICES") == "1"
    show = sched.show(gpu)
    assert inst["pid"] in pids_on(show, 1), show
    assert inst["pid"] not in pids_on(show, 0), show

    r = vd.generate("mid")
    assert r.status == 200, r
    assert vd.first("worker_started", model="mid")["gpu"] == 1
    assert vd.instances("mid")[0]["pid"] in pids_on(sched.show(gpu), 1)
    sched.finish()


def test_two_large_models_land_on_different_gpus_and_run_together(sched):
    """2 x 16 GiB set; big_a and big_b each need 10 GiB resident + 2 GiB per request (12 of
    the 15.9 GiB a card offers), so no GPU can hold both. Requested at the same time, they
    are placed on different GPUs (worker_started gpu values differ, simgpu show agrees), and
    the ledger shows a request of each running at the same moment. No OOM."""
    gpu = sched.gpu_set("16GiB", gpus=2)

    def big(name):
        return sched.model(name, ["--resident", "9.7GiB", "--per-request", "2GiB",
                                  "--cache", "release", "--run-time", sim_s(20)], "10GiB", "2GiB")

    vd = sched.start_vramd(gpu, {"big_a": big("big_a"), "big_b": big("big_b")})
    with Watch(vd) as watch:
        replies = run_threads([lambda: vd.generate("big_a"), lambda: vd.generate("big_b")])
    assert [r.status for r in replies] == [200, 200], replies
    assert not watch.problems, watch.problems[:5]
    a = vd.first("worker_started", model="big_a")
    b = vd.first("worker_started", model="big_b")
    assert {a["gpu"], b["gpu"]} == {0, 1}, (a, b)
    for ev in (a, b):
        assert worker_env(ev["pid"]).get("CUDA_VISIBLE_DEVICES") == str(ev["gpu"]), ev
    assert frozenset({"big_a", "big_b"}) in watch.concurrent_models, \
        "the two models never had requests running at the same time"
    show = sched.show(gpu)
    assert a["pid"] in pids_on(show, a["gpu"]) and b["pid"] in pids_on(show, b["gpu"]), show
    assert not vd.events("eviction")
    vd.assert_no_oom()
    sched.finish()
