"""e2e: per-client limits (limits.per_client, SPEC 4 "Fairness between clients", RELIABILITY
case 33): one client's burst is capped (429 client_limit with Retry-After) and clients of one
priority take turns, so another client's requests are not stuck behind the whole burst; a
client at max_in_flight waits while others run; one client's 1,000 at once are refused 429
past its cap while two other clients' latency stays near their latency without the burst,
measured in the same test; off by default."""
import statistics
import threading
import time

from vramdkit import build_request, run_threads, wait_for
from vramdkit.swarm import Swarm


RUN_MS = 250


def fair_limits(**kw):
    pc = {"key": "header:X-Client-Id", "max_queued": 20, "max_in_flight": 2}
    pc.update(kw)
    return {"per_client": pc}


def slow(vd, client, ms=RUN_MS):
    def call():
        r = vd.get(f"/w/slow?ms={ms}", headers={"X-Client-Id": client}, timeout=60)
        r.done_at = time.monotonic()
        return r
    return call


def test_client_burst_capped_and_others_take_turns(vramd):
    """Client A sends 40 at once to a one-slot model, B then sends 5: A gets 429
    client_limit past max_queued (20); all of B's are admitted and served while most of
    A's backlog still waits (round-robin between clients, not behind A's 20)."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=1, queue_max=64)},
                     limits=fair_limits())
    assert vd.get("/w/echo?warm=1").status == 200
    a_out = {}

    def burst():
        a_out["r"] = run_threads([slow(vd, "a")] * 40, timeout=60)
    ta = threading.Thread(target=burst, daemon=True)
    ta.start()
    wait_for(lambda: vd.model("w")["queue"]["depth"] >= 19, timeout=10, what="A's burst queued")
    b = run_threads([slow(vd, "b")] * 5, timeout=60)
    ta.join(60)
    a = a_out["r"]
    assert all(not isinstance(r, Exception) and r is not None for r in a + b), (a, b)
    assert [r.status for r in b] == [200] * 5, [r.status for r in b]
    refused = [r for r in a if r.status == 429]
    served = [r for r in a if r.status == 200]
    assert len(served) + len(refused) == 40, sorted(r.status for r in a)
    assert 19 <= len(refused) <= 20 and len(served) in (20, 21), (len(served), len(refused))
    for r in refused:
        assert r.error_code() == "client_limit", r
        assert int(r.headers["retry-after"]) >= 1
    # fairness: B's last answer came while A still had a good part of its backlog waiting
    # (first come, first served would leave none of A's after B's last)
    b_last = max(r.done_at for r in b)
    a_after = sum(1 for r in served if r.done_at > b_last)
    assert a_after >= 8, f"only {a_after} of A's requests finished after B's last"
    st = vd.status()
    assert st["clients"]["refused"] >= 19, st["clients"]
    wait_for(lambda: vd.status()["clients"]["busy"] == 0, timeout=10, what="client counts released")
    assert vd.model("w")["queue"]["depth"] == 0


def test_client_at_max_in_flight_waits_while_others_run(vramd):
    """concurrency 3, max_in_flight 1: client A's three requests run one at a time while
    client B's request runs beside them at once."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=3, queue_max=16)},
                     limits=fair_limits(max_in_flight=1))
    assert vd.get("/w/echo?warm=1").status == 200
    out = {}

    def a_burst():
        out["a"] = run_threads([slow(vd, "a", 600)] * 3, timeout=60)
    t0 = time.monotonic()
    ta = threading.Thread(target=a_burst, daemon=True)
    ta.start()
    wait_for(lambda: vd.model("w")["queue"]["depth"] == 2, timeout=10, what="A: one running, two queued")
    assert vd.model("w")["in_flight"] == 1
    rb = slow(vd, "b", 300)()
    ta.join(60)
    assert rb.status == 200, rb
    assert rb.done_at - rb.t_start < 1.5, "B waited behind A"
    assert [r.status for r in out["a"]] == [200] * 3
    assert max(r.done_at for r in out["a"]) - t0 >= 1.7, "A's requests ran together"
    wait_for(lambda: vd.status()["clients"]["busy"] == 0, timeout=10, what="client counts released")


def test_thousand_from_one_client_capped_and_others_latency_unchanged(vramd):
    """concurrency 4, per client max_queued 20 and max_in_flight 2; every request is 100 ms
    of work. Clients B and C each send 6 requests one after another, alone: their latency
    without a burst. Then client A sends 1,000 at once (1,000 connections), and B and C
    send 6 more each while A's backlog is still waiting. Expected: A's answers are 200 or
    429 client_limit with Retry-After, at least 950 of them 429; B's and C's are all 200,
    and each one's median latency during the burst is within 3x its median without it
    + 100 ms (A takes 2 of the 4 slots, B and C one each: neither waits behind A), while A
    still had requests queued after B's and C's last."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=4, queue_max=64)},
                     limits=fair_limits(max_queued=20, max_in_flight=2))
    assert vd.get("/w/echo?warm=1").status == 200

    def client(name, n=6):
        def run():
            out = []
            for _ in range(n):
                r = slow(vd, name, 100)()
                assert r.status == 200, (name, r)
                out.append(r)
            return out
        return run

    def median(rs):
        return statistics.median(r.done_at - r.t_start for r in rs)
    alone = run_threads([client("b"), client("c")], timeout=60)
    head = build_request("GET", "/w/slow?ms=100", {"X-Client-Id": "a"})
    with Swarm(vd.port, 1000, head) as burst:
        during = run_threads([client("b"), client("c")], timeout=60)
        backlog = vd.model("w")["queue"]["depth"]  # A's, still waiting when B and C are done
        answers = burst.collect(timeout=60)
    for rs in alone + during:
        assert not isinstance(rs, Exception), rs
    codes = [a.status for a in answers]
    refused = [a for a in answers if a.status == 429]
    assert all(c in (200, 429) for c in codes), sorted(set(map(str, codes)))
    assert len(refused) >= 950, f"{len(refused)} refused"
    assert all(b"client_limit" in a.body and int(a.header("retry-after")) >= 1 for a in refused)
    assert backlog >= 1, "A's burst was over before B and C were measured: the test proves nothing"
    for name, base, busy in (("b", alone[0], during[0]), ("c", alone[1], during[1])):
        m0, m1 = median(base), median(busy)
        print(f"client {name}: median {m0 * 1000:.0f} ms alone, {m1 * 1000:.0f} ms beside A's 1,000 "
              f"(A: {len(refused)} refused, {len(answers) - len(refused)} served, "
              f"{backlog} still queued after B's and C's last)")
        assert m1 <= 3 * m0 + 0.100, f"client {name}: {m1 * 1000:.0f} ms vs {m0 * 1000:.0f} ms alone"
    wait_for(lambda: vd.status()["clients"]["busy"] == 0, timeout=10, what="client counts released")


def test_client_limit_off_by_default(vramd):
    """Without limits.per_client nothing is refused 429 and /v1/status says the limits are off."""
    vd = vramd.start(models={"w": vramd.worker("w", route="/w/", concurrency=1, queue_max=64)})
    rs = run_threads([slow(vd, "a", 50)] * 10, timeout=60)
    assert [r.status for r in rs] == [200] * 10
    assert vd.status()["clients"]["on"] is False
