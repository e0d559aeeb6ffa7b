"""`vramctl status` with --url given more than once: several hosts shown together (issue 14,
"vramctl able to show several hosts at once"). Two vramd hosts on their own simulated GPUs
and one address where nothing listens: one line per host (name, state, free memory,
queued, running), one line per model with a column per host, exit 3 because one host is
unreachable; --json gives every host's /v1/status or its error."""
import json
import subprocess

from vramdkit import binary, free_port, sim_s


def run(*args):
    p = subprocess.run([str(binary("vramctl")), *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_status_of_several_hosts(sched):
    models = {"chat": sched.model("chat", ["--resident", "1.7GiB", "--run-time", sim_s(1)], "2GiB", "1GiB")}
    a = sched.start_vramd(sched.gpu_set("24GiB"), models, fleet={"host_name": "gpu-a"})
    b = sched.start_vramd(sched.gpu_set("16GiB"), {**models, "other": sched.model("other", [], "1GiB", "1GiB")},
                          fleet={"host_name": "gpu-b"})
    assert a.generate("chat").status == 200
    nowhere = f"http://127.0.0.1:{free_port()}"
    urls = [f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}", nowhere]
    rc, out, err = run("status", *[x for u in urls for x in ("--url", u)])
    assert rc == 3, (rc, out, err)
    lines = out.splitlines()
    assert lines[0] == "vramd fleet: 3 hosts, 2 ready, 1 unreachable", out
    row_a = next(line for line in lines if line.startswith("gpu-a "))
    row_b = next(line for line in lines if line.startswith("gpu-b "))
    assert urls[0] in row_a and " ready " in row_a and "/23.9 " in row_a, row_a
    assert "/15.9 " in row_b, row_b
    assert any(nowhere in line and "unreachable" in line for line in lines), out
    chat = next(line for line in lines if line.startswith("chat "))
    assert chat.split()[1:] == ["ready", "0q/0r", "stopped", "0q/0r", "-"], chat
    other = next(line for line in lines if line.startswith("other "))
    assert other.split()[1:] == ["-", "stopped", "0q/0r", "-"], other
    assert nowhere in err
    rc, out, _ = run("status", "--json", "--url", urls[0], "--url", urls[1], "--url", nowhere)
    assert rc == 3
    doc = json.loads(out)
    assert [h["url"] for h in doc["hosts"]] == urls
    assert doc["hosts"][0]["status"]["host"] == "gpu-a" and doc["hosts"][1]["status"]["host"] == "gpu-b"
    assert "error" in doc["hosts"][2] and "status" not in doc["hosts"][2]
    rc, out, _ = run("status", "--url", urls[0], "--url", urls[1])
    assert rc == 0 and out.startswith("vramd fleet: 2 hosts, 2 ready\n"), out
    sched.finish()
