"""vramctl ps against a running vramd (the module's gpu_vramd: `gen` pinned, `val` on demand
with keep_alive 10m): one line per instance with model, id, state, GPU, GiB, in flight,
queue, keep-alive and pid; a model without instances gets a line with id "-"; --json gives
the same rows as JSON, matching /v1/status."""
import json
import re

from .conftest import TOKEN, vramctl


def rows(out):
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0] == ["MODEL", "ID", "STATE", "GPU", "GIB", "IN_FLIGHT", "QUEUE", "KEEP_ALIVE", "PID"], out
    return lines[1:]


def test_ps_lists_instances_with_keep_alive_and_pid(gpu_vramd):
    vd = gpu_vramd
    p = vramctl("unload", "val", "--token", TOKEN, url=vd.url)
    assert p.returncode == 0, p
    p = vramctl("ps", url=vd.url)
    assert p.returncode == 0, p
    by_model = {r[0]: r for r in rows(p.stdout)}
    gen = vd.model("gen")["instances"][0]
    assert by_model["gen"][1] == str(gen["id"]) and by_model["gen"][2] == "ready", p.stdout
    assert by_model["gen"][3] == "0" and by_model["gen"][7] == "pinned", p.stdout
    assert by_model["gen"][8] == str(gen["pid"]), p.stdout
    assert re.fullmatch(r"\d+\.\d/6\.0", by_model["gen"][4]), p.stdout  # measured/reserved GiB
    assert by_model["val"][1:3] == ["-", "stopped"], p.stdout

    p = vramctl("load", "val", "--token", TOKEN, url=vd.url)
    assert p.returncode == 0, p
    st = vd.model("val")
    inst = st["instances"][0]
    assert st["pinned"] is False and st["keep_alive_ms"] == 600000, st
    assert 0 < inst["keep_alive_left_ms"] <= 600000 and inst["keep_alive_expires"] > 0, inst
    assert vd.model("gen")["instances"][0]["keep_alive_left_ms"] is None
    p = vramctl("ps", url=vd.url)
    val = next(r for r in rows(p.stdout) if r[0] == "val")
    assert val[2] == "ready" and val[5] == "0" and val[6] == "0", p.stdout
    assert re.fullmatch(r"in (9m\d\ds|10m00s)", " ".join(val[7:9])), p.stdout
    assert val[9] == str(inst["pid"]), p.stdout


def test_ps_json_rows(gpu_vramd):
    vd = gpu_vramd
    p = vramctl("ps", "--json", url=vd.url)
    assert p.returncode == 0, p
    doc = json.loads(p.stdout)
    gen = next(r for r in doc if r["model"] == "gen")
    ref = vd.model("gen")["instances"][0]
    assert gen["pinned"] is True and gen["pid"] == ref["pid"] and gen["state"] == "ready", gen
    assert gen["reserved_bytes"] == ref["reserved_bytes"] and gen["queue_depth"] == 0, gen
    assert set(gen) >= {"id", "gpu", "measured_bytes", "in_flight", "keep_alive_left_ms", "keep_alive_expires",
                        "cancelled_held_bytes"}


def test_ps_usage():
    p = vramctl("ps", "extra")
    assert p.returncode == 2 and "unexpected argument" in p.stderr, p
