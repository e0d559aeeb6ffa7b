"""The HAProxy agent-check of one host (fleet.agent_listen; SPEC section 7, issue 14).

HAProxy connects to the agent port, optionally sends its agent-send string, reads one line
and closes. These tests speak to it as HAProxy does, on one vramd with a simulated 24 GiB GPU,
and check that the line follows the ledger at the moment of the check: a model that would
have to load weighs little, a resident one with a free slot weighs most, a saturated one or
one whose request no longer fits (foreign memory) weighs 0, draining says drain, a model that
can never fit or is unknown is down; and that every read is bounded (agent_wait, the line
length, agent_timeout, agent_max_connections) with a clear answer to a bad string.
"""
import socket
import time

from vramdkit import free_port, sim_s, wait_for
from vramdkit.harness import GiB

from .agentkit import ask, ask_raw

def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return line.split()[-1]
    raise AssertionError(f"{series} not in /metrics")


RUN_S = 20  # simulated seconds per chat request: 1 s real at the kit's timescale (0.05)


def start(sched, **fleet):
    gpu = sched.gpu_set("24GiB")
    port = free_port()
    vd = sched.start_vramd(gpu, {
        "chat": sched.model("chat", ["--resident", "3.7GiB", "--per-request", "1GiB", "--cache", "release",
                                     "--run-time", sim_s(RUN_S)], "4GiB", "1GiB", queue_max=8),
        "big": sched.model("big", ["--resident", "30GiB"], "30GiB", "1GiB"),
    }, fleet={"agent_listen": f"127.0.0.1:{port}", "agent_wait": "300ms", "agent_timeout": "1s", **fleet})
    return gpu, vd, port


def test_agent_lines_follow_the_ledger(sched):
    gpu, vd, port = start(sched)
    host = ask(port)  # no agent-send: the host, once agent_wait passed in silence
    assert host.up and host.admin == "ready" and host.weight == 100, host
    assert 0.29 <= host.elapsed < 1.5, host
    assert host.maxconn == 1000 + 1 + 1, host  # limits.queue_max + every model's slots
    cold = ask(port, "chat\n")
    assert cold.up and 2 <= cold.weight <= 10, cold  # it would have to load: a little
    assert cold.maxconn == 1 + 8, cold  # slots + queue_max
    assert cold.elapsed < 0.25, cold  # a full line is answered at once, not after agent_wait
    assert ask(port, "model=chat\r\n").weight == cold.weight

    r = vd.generate("chat")
    assert r.status == 200, r
    resident = ask(port, "chat\n")
    assert resident.up and resident.weight == 100, resident

    bg = vd.later("chat")
    vd.wait_in_flight("chat", 1)
    busy = ask(port, "chat\n")  # its one slot taken, no room for a second instance (instances: 1)
    assert busy.up and busy.weight == 0, busy
    # the fleet's view in /metrics: this host's name, the agent's counters, and chat's
    # KV-cache-like fraction (1 GiB reserved beside what is free on its GPU)
    text = vd.get("/metrics").body.decode()
    assert f'vramd_host_info{{host_name="{vd.status()["host"]}"}} 1' in text
    ratio = float(metric(text, 'vramd_model_memory_reserved_ratio{model="chat"}'))
    assert 0.03 < ratio < 0.1, ratio  # 1 GiB of 1 GiB + ~18.9 GiB free
    assert int(metric(text, 'vramd_agent_checks_total{target="model"}')) >= 4
    assert metric(text, 'vramd_model_memory_reserved_ratio{model="big"}') == "0"
    assert bg.result(30).status == 200

    # another program takes all but 0.9 GiB beside the idle resident chat: its next request
    # (1 GiB) does not fit, and nothing vramd could evict would free foreign memory
    holder = sched.alloc(gpu, 24 * GiB - 128 * 1024 * 1024 - 4 * GiB - int(0.9 * GiB))
    full = vd.wait_model("chat", lambda m: True)  # noqa: F841 (a status round trip)
    time.sleep(0.3)  # two NVML polls (50 ms) and their foreign-usage filter
    weight = ask(port, "chat\n")
    assert weight.up and weight.weight == 0, weight
    assert ask(port).weight <= 4, "the host's spare memory is almost gone"
    holder.end()
    time_ok = time.monotonic() + 5
    while ask(port, "chat\n").weight != 100:
        assert time.monotonic() < time_ok, "chat never weighed 100 again after the foreign memory left"
        time.sleep(0.1)
    sched.finish()


def test_agent_down_reasons_and_bad_strings(sched):
    _, vd, port = start(sched)
    big = ask(port, "model=big\n")
    assert big.down and big.weight == 0 and big.reason.startswith("cannot_fit"), big
    unknown = ask(port, "nope\n")
    assert unknown.down and unknown.reason.startswith("unknown_model"), unknown
    for bad, why in [("a b\n", "after the name"), ("model=\n", "names no model"), ("x=y\n", "unknown key"),
                     (b"ch\x00t\n", "0x00"), ("x" * 300, "longer than 256")]:
        a = ask(port, bad)
        assert a.down and "bad agent-send" in a.reason and why in a.reason, (bad, a)
    # no end of line: answered once agent_wait passed; a FIN answers at once
    no_eol = ask(port, "chat")
    assert no_eol.up and 0.29 <= no_eol.elapsed < 1.5, no_eol
    fin = ask(port, "chat", half_close=True)
    assert fin.up and fin.elapsed < 0.25, fin
    # a trickle (a byte every 50 ms, never quiet for agent_wait) is cut at agent_timeout
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        got = b""
        try:
            for _ in range(60):
                s.sendall(b"c")
                time.sleep(0.05)
                s.setblocking(False)
                try:
                    chunk = s.recv(400)
                    if chunk == b"":
                        break
                    got += chunk
                except BlockingIOError:
                    pass
                finally:
                    s.setblocking(True)
        except (BrokenPipeError, ConnectionResetError):
            pass
    assert time.monotonic() - t0 < 2.5, "agent_timeout (1 s) did not bound a trickling connection"
    assert vd.alive()
    # the agent is bound at start only: a reload that moves it is refused, the old one answers on
    cfg = dict(vd.config, fleet={**vd.config["fleet"], "agent_listen": f"127.0.0.1:{free_port()}"})
    vd.write_config(cfg)
    r = vd.post("/v1/admin/reload")
    assert r.status == 400 and "fleet.agent_listen" in r.body.decode(), r
    assert ask(port, "chat\n").up
    sched.finish()


def test_agent_connection_cap_and_drain(sched):
    _, vd, port = start(sched, agent_max_connections=2)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        time.sleep(0.02)
        try:
            data, _ = ask_raw(port, "chat\n")
        except ConnectionResetError:  # closed at once, with our line unread: a reset
            data = b""
        assert data == b"", f"a third connection past agent_max_connections was answered: {data!r}"
    finally:
        for s in idle:
            s.close()

    def answered_again():  # once vramd has seen the two idle ones go (their EOF, a turn later)
        try:
            return ask(port, "chat\n").up
        except ConnectionResetError:
            return False
    wait_for(answered_again, timeout=5, what="the agent answering again below its connection cap")
    assert vd.generate("chat").status == 200
    bg = vd.later("chat")
    vd.wait_in_flight("chat", 1)
    assert vd.post("/v1/admin/drain").status == 202
    drain = ask(port, "chat\n")
    assert drain.admin == "drain" and drain.weight == 0 and not drain.down, drain
    assert ask(port).admin == "drain"
    assert bg.result(30).status == 200
    assert vd.wait_exit(20) == 0
    vd.stop()
    sched.finish()
