"""seed001: a generation server (19.6 GB) and a validation server (4.7 GB) on one 24 GB card.

In the field the generator calls the validator's /unload_models/ and /reload_models/ by hand.
Behind vramd there is one ledger for both: the supervised generator is loaded only after the
external validator was unloaded through its hook and NVML showed the memory back; the
validator is reloaded through its hook after the generator was stopped and its memory came
back. Nobody runs out of memory.
"""
from vramdkit import GiB, sim_s

from .schedkit import after, order


def test_seed001_generator_and_validator_take_turns(sched):
    """generate, validate, generate, validate on a 24 GiB card (release delay 10 s simulated):
    every generator start comes after eviction -> unload_hook_done -> memory_reclaimed of the
    validator; every validator reload comes after the generator's eviction and
    memory_reclaimed (vramd waited for NVML: the process's memory stays for the release delay
    after it exits, and the reclaim took at least part of it); all answers are 200; no OOM
    in the generator's output or in the validator's log."""
    gpu = sched.gpu_set("24GiB", release_delay="10s")
    validator = sched.external(gpu, "validator", [
        "--resident", "4.4GiB", "--per-request", "200MiB", "--run-time", sim_s(4),
        "--load-time", sim_s(2), "--unload-time", sim_s(1), "--path", "/validate_txt_to_3d_ply/"])
    models = {
        "generator": sched.model("generator", [
            "--resident", "19.3GiB", "--per-request", "512MiB", "--run-time", sim_s(10),
            "--load-time", sim_s(4)], "19.6GiB", "512MiB"),
        "validator": sched.external_model(
            "validator", validator, "4.7GiB", "200MiB",
            unload={"method": "POST", "path": "/unload_models/"},
            reload={"method": "POST", "path": "/reload_models/"}),
    }
    vd = sched.start_vramd(gpu, models)
    # the external validator is booked on the GPU from the start
    vd.wait_model("validator", lambda m: m["instances"] and m["instances"][0]["state"] == "ready"
                  and m["instances"][0]["reserved_bytes"] >= 4 * GiB, what="validator booked")

    for cycle in range(2):
        r = vd.generate("generator")
        assert r.status == 200, f"generate {cycle + 1}: {r}"
        r = vd.post("/validator/validate_txt_to_3d_ply/", {"prompt": "a chair", "data": "UExZ"})
        assert r.status == 200, f"validate {cycle + 1}: {r}"

    starts = vd.events("worker_started", model="generator")
    reloads = vd.events("reload_hook_done", model="validator")
    assert len(starts) == 2, starts
    assert len(reloads) == 2, reloads
    for start in starts:
        evictions = [e for e in vd.events("eviction", model="validator") if e["_i"] < start["_i"]]
        assert evictions, f"generator started without evicting the validator: {start}"
        ev = evictions[-1]
        assert ev["for"] == "generator"
        unload = after(vd.events("unload_hook_done", model="validator"), ev)
        reclaimed = after(vd.events("memory_reclaimed", model="validator"), ev)
        order(ev, unload, reclaimed, start)
        assert unload["status"] == 200
    for reload in reloads:
        evictions = [e for e in vd.events("eviction", model="generator") if e["_i"] < reload["_i"]]
        assert evictions, f"validator reloaded without evicting the generator: {reload}"
        ev = evictions[-1]
        assert ev["for"] == "validator"
        exited = after(vd.events("worker_exit", model="generator"), ev)
        reclaimed = after(vd.events("memory_reclaimed", model="generator"), ev)
        order(ev, exited, reclaimed, reload)
        assert reload["status"] == 200
        # the simulated driver keeps a dead process's memory for 0.5 s real: vramd waited
        assert reclaimed["wait_ms"] >= 250, reclaimed
    # the validator went through the hook-driven states
    st = vd.status()
    assert vd.model("validator", st)["unloads_total"] >= 2
    assert not validator.oom_lines(), validator.oom_lines()[:5]
    vd.assert_no_oom("generator")
    sched.finish()
