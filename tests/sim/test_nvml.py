"""test_nvml: libnvidia-ml-sim.so through the NVML probe (tests/helpers/nvml_probe.c).

The probe dlopens the library, checks NVML's contract itself (init refcount, UNINITIALIZED
before init and after the last shutdown, handles by index and UUID, INSUFFICIENT_SIZE for
short buffers, free + used == total, processes summing to used) and prints what it saw as
JSON; these tests check that what it saw matches the simulated set made through the CLI.
"""
import re
import signal

from .simkit import wait_for

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MiB = 1024 * 1024
GiB = 1024 * MiB


def assert_clean(rc, doc):
    assert doc.get("violations") == [], doc.get("violations")
    assert rc == 0, doc


def test_init_without_simgpu_is_driver_not_loaded(sim):
    rc, doc = sim.probe(None)
    assert rc == 3
    assert doc["init"] == 9
    assert doc["init_error"] == "Driver Not Loaded"
    assert doc["violations"] == []  # UNINITIALIZED before init held


def test_init_with_missing_set_is_driver_not_loaded(sim):
    rc, doc = sim.probe(sim.unique_name())
    assert rc == 3
    assert doc["init"] == 9


def test_counts_names_uuids_and_memory(sim):
    name = sim.create(gpus=3, memory="24GiB", model_name="NVIDIA GeForce RTX 4090")
    rc, doc = sim.probe(name)
    assert_clean(rc, doc)
    assert doc["count"] == 3
    assert doc["driver_version"]
    assert doc["error_string_9"] == "Driver Not Loaded"
    shown = sim.show(name)
    uuids = []
    for i, dev in enumerate(doc["devices"]):
        assert dev["index"] == i
        assert dev["name"] == "NVIDIA GeForce RTX 4090"
        assert UUID_RE.match(dev["uuid"]), dev["uuid"]
        assert dev["uuid"] == shown["gpus"][i]["uuid"]
        assert dev["memory"] == {"total": 24 * GiB, "free": 24 * GiB, "used": 0}
        assert dev["processes"] == []
        assert dev["processes_first_call"]["ret"] == 0
        assert dev["utilization"] == {"gpu": 0, "memory": 0}
        uuids.append(dev["uuid"])
    assert len(set(uuids)) == 3

    # UUIDs are stable: a second probe sees the same ones.
    _, again = sim.probe(name)
    assert [d["uuid"] for d in again["devices"]] == uuids


def test_cuda_visible_devices_is_ignored(sim):
    name = sim.create(gpus=2, memory="8GiB")
    rc, doc = sim.probe(name, env_extra={"CUDA_VISIBLE_DEVICES": "1"})
    assert_clean(rc, doc)
    assert doc["count"] == 2


def test_process_list_insufficient_size_protocol(sim):
    name = sim.create(gpus=2, memory="16GiB")
    sizes = [(i + 1) * 100 * MiB for i in range(6)]
    holders = [sim.alloc(name, size, gpu=1) for size in sizes]
    expected = {h.pid: h.nbytes for h in holders}

    for guess, first_ret in ((2, 7), (0, 7), (5, 7), (6, 0), (32, 0)):
        rc, doc = sim.probe(name, "--first-guess", str(guess))
        assert_clean(rc, doc)
        gpu0, gpu1 = doc["devices"]
        assert gpu0["processes"] == []
        first = gpu1["processes_first_call"]
        assert first["ret"] == first_ret, (guess, first)
        assert first["count"] == 6  # needed count on INSUFFICIENT_SIZE, written count on SUCCESS
        got = {p["pid"]: p["used"] for p in gpu1["processes"]}
        assert got == expected
        assert gpu1["memory"]["used"] == sum(sizes)
        assert gpu1["memory"]["free"] == 16 * GiB - sum(sizes)
        for p in gpu1["processes"]:
            assert p["gpu_instance_id"] == 0xFFFFFFFF
            assert p["compute_instance_id"] == 0xFFFFFFFF


def test_many_processes_allocate_and_die(sim):
    # 50 s simulated release delay at time scale 0.1 = 5 s real.
    name = sim.create(gpus=1, memory="8GiB", release_delay="50s", timescale=0.1)
    assert sim.show(name)["release_delay_real_ms"] == 5000
    holders = [sim.alloc(name, (50 + i) * MiB) for i in range(50)]
    total_held = sum(h.nbytes for h in holders)
    rc, doc = sim.probe(name, "--first-guess", "8")
    assert_clean(rc, doc)
    assert len(doc["devices"][0]["processes"]) == 50
    assert doc["devices"][0]["memory"]["used"] == total_held

    sigkilled = holders[0::2]    # 25 crash: their memory waits for the release delay
    terminated = holders[1:10:2]  # 5 exit cleanly: they free at once
    survivors = [h for h in holders if h not in sigkilled and h not in terminated]
    for h in sigkilled:
        assert h.kill(signal.SIGKILL) == -signal.SIGKILL
    for h in terminated:
        assert h.kill(signal.SIGTERM) == 0

    # Right after: the crashed ones still hold their memory, shown as dead.
    rc, doc = sim.probe(name, "--first-guess", "1")
    assert_clean(rc, doc)
    listed = {p["pid"]: p["used"] for p in doc["devices"][0]["processes"]}
    assert listed == {h.pid: h.nbytes for h in sigkilled + survivors}
    shown = sim.show(name)["gpus"][0]
    dead = {p["pid"] for p in shown["processes"] if p["dead"]}
    assert dead == {h.pid for h in sigkilled}

    # After the delay only the survivors remain and the totals add up.
    def released():
        _, d = sim.probe(name)
        procs = d["devices"][0]["processes"]
        return d if len(procs) == len(survivors) else None

    doc = wait_for(released, timeout=60, interval=0.2, what="release of the killed holders")
    dev = doc["devices"][0]
    assert doc["violations"] == []
    assert {p["pid"]: p["used"] for p in dev["processes"]} == {h.pid: h.nbytes for h in survivors}
    assert dev["memory"]["used"] == sum(h.nbytes for h in survivors)
    assert dev["memory"]["free"] + dev["memory"]["used"] == 8 * GiB


def test_utilization_memory_follows_usage(sim):
    name = sim.create(gpus=1, memory="4GiB")
    sim.alloc(name, GiB)
    rc, doc = sim.probe(name)
    assert_clean(rc, doc)
    assert doc["devices"][0]["utilization"]["memory"] == 25
