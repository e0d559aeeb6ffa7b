"""test_simgpu_cli: the `simgpu` command line (create, show, show --json, rm, alloc, list)
and its errors and exit codes (0 ok, 1 error, 2 usage)."""
import json
import re
import signal
import subprocess

from .simkit import COMMAND_TIMEOUT, simgpu_bin, wait_for

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_create_show_rm(sim):
    name = sim.create(gpus=2, memory="24GiB", model_name="NVIDIA GeForce RTX 4090",
                      release_delay="1.5s")
    out = sim.run(["show", name], check=0).stdout
    assert f"{name}: 2 GPUs, release delay 1.5s" in out
    assert out.count("NVIDIA GeForce RTX 4090") == 2
    assert len(re.findall(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                          out)) == 2
    assert out.count("total 24GiB  used 0B  free 24GiB") == 2

    doc = sim.show(name)
    assert doc["name"] == name
    assert doc["release_delay_ms"] == 1500
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    for g in doc["gpus"]:
        assert g["name"] == "NVIDIA GeForce RTX 4090"
        assert (g["total"], g["used"], g["free"]) == (24 * GiB, 0, 24 * GiB)
        assert g["processes"] == []

    sim.run(["rm", name], check=0)
    res = sim.run(["show", name], check=1)
    assert "no simulated GPU set" in res.stderr
    res = sim.run(["rm", name], check=1)
    assert name in res.stderr


def test_show_lists_holders_with_sizes(sim):
    name = sim.create(gpus=1, memory="24GiB")
    holder = sim.alloc(name, int(5.6 * GiB))
    out = sim.run(["show", name], check=0).stdout
    assert re.search(rf"pid {holder.pid}\s+5\.6GiB", out), out
    assert "used 5.6GiB" in out
    doc = sim.show(name)
    gpu = doc["gpus"][0]
    assert gpu["used"] == holder.nbytes
    assert gpu["free"] == 24 * GiB - holder.nbytes
    assert gpu["processes"] == [{"pid": holder.pid, "used": holder.nbytes, "dead": False}]

    # A clean exit (SIGTERM) frees at once, like cudaFree before exit.
    assert holder.kill(signal.SIGTERM) == 0
    assert sim.show(name)["gpus"][0]["used"] == 0


def test_sigkilled_holder_shows_dead_until_release(sim):
    name = sim.create(gpus=1, memory="8GiB", release_delay="3s")
    holder = sim.alloc(name, GiB)
    assert holder.kill(signal.SIGKILL) == -signal.SIGKILL
    out = sim.run(["show", name], check=0).stdout
    assert re.search(rf"pid {holder.pid}\s+1GiB\s+\(dead", out), out
    wait_for(lambda: sim.show(name)["gpus"][0]["used"] == 0, timeout=60,
             what="release after the delay")


def test_alloc_hold_expires_and_frees(sim):
    name = sim.create(gpus=2, memory="1GiB")
    res = sim.run(["alloc", name, "--gpu", "1", "--bytes", "256MiB", "--hold", "100ms"], check=0)
    assert res.stdout.startswith(f"allocated {256 * MiB} on gpu 1 of {name}")
    assert sim.show(name)["gpus"][1]["used"] == 0


def test_alloc_errors(sim):
    name = sim.create(gpus=1, memory="1GiB")
    res = sim.run(["alloc", name, "--bytes", "2GiB"], check=1)
    assert "out of memory" in res.stderr
    res = sim.run(["alloc", name, "--gpu", "3", "--bytes", "1MiB"], check=1)
    assert "no GPU 3" in res.stderr
    res = sim.run(["alloc", sim.unique_name(), "--bytes", "1MiB"], check=1)
    assert "no simulated GPU set" in res.stderr
    sim.run(["alloc", name], check=2)
    sim.run(["alloc", name, "--bytes", "lots"], check=2)


def test_create_errors(sim):
    name = sim.create(gpus=1, memory="1GiB")
    res = sim.run(["create", name, "--memory", "1GiB"], check=1)
    assert "already exists" in res.stderr
    fresh = sim.unique_name()
    sim.sets.append(fresh)
    sim.run(["create", fresh], check=2)                                  # no --memory
    sim.run(["create", fresh, "--memory", "12XB"], check=2)              # bad size
    sim.run(["create", fresh, "--memory", "0"], check=2)
    sim.run(["create", fresh, "--memory", "1GiB", "--gpus", "0"], check=2)
    sim.run(["create", fresh, "--memory", "1GiB", "--gpus", "17"], check=2)
    sim.run(["create", fresh, "--memory", "1GiB", "--release-delay", "soon"], check=2)
    sim.run(["create", fresh, "--memory", "1GiB", "--colour", "red"], check=2)
    sim.run(["create", fresh, "--memory"], check=2)                      # missing value
    sim.run(["create", "bad/name", "--memory", "1GiB"], check=1)
    # None of the failures left a set behind.
    sim.run(["show", fresh], check=1)
    # The --opt=value form works.
    sim.run(["create", fresh, "--memory=2GiB", "--gpus=2"], check=0)
    doc = sim.show(fresh)
    assert [g["total"] for g in doc["gpus"]] == [2 * GiB, 2 * GiB]


def test_usage_errors(sim):
    assert sim.run([]).returncode == 2
    assert sim.run(["frobnicate"]).returncode == 2
    assert sim.run(["show"]).returncode == 2
    assert sim.run(["rm"]).returncode == 2
    res = sim.run(["--help"], check=0)
    assert "simgpu create NAME" in res.stdout


def test_list(sim):
    a = sim.create(gpus=1, memory="1GiB")
    b = sim.create(gpus=3, memory="2GiB")
    out = sim.run(["list"], check=0).stdout
    assert a in out and b in out
    res = subprocess.run([simgpu_bin(), "list", "--json"], capture_output=True, text=True,
                         env=sim.env, timeout=COMMAND_TIMEOUT)
    assert res.returncode == 0
    by_name = {s["name"]: s for s in json.loads(res.stdout)}
    assert by_name[a]["gpus"] == 1 and by_name[a]["total"] == GiB
    assert by_name[b]["gpus"] == 3 and by_name[b]["total"] == 6 * GiB
    sim.run(["rm", a], check=0)
    assert a not in sim.run(["list"], check=0).stdout
