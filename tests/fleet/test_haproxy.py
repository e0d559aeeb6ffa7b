"""Three vramd hosts behind a real HAProxy (SPEC section 7, issue 14).

Each host is a vramd with its own simulated 24 GiB GPU in its own network namespace
(fleetkit.py); HAProxy runs contrib/haproxy/haproxy.cfg as shipped (addresses from the
environment) with its agent checks every 150 ms. Models: chat (4 GiB resident + 1 GiB per
request, 2 slots, 0.3 s per request) and image (8 GiB + 4 GiB, 1 slot, 0.5 s).

What must hold:
  * requests spread by spare memory: a host whose GPU is taken by memory vramd does not
    manage gets none of the new work; the JSON "model" field and the X-Vramd-Model header
    pick the backend as the route prefix does;
  * a model loaded on one host gets its requests there until that host is saturated, and
    only then do other hosts load it;
  * `vramctl drain` on one host under traffic: new work moves away, no request fails;
  * a rolling restart of all three hosts under traffic: no request fails.
"""
import subprocess
import threading
import time

from vramdkit import binary, sim_env, sim_s, wait_for

from .fleetkit import fleet  # noqa: F401  (fixture)

RUN_S = 6  # simulated seconds per chat request: 0.3 s at the kit's timescale (0.05)


def models(fleet_, host):
    def worker(name, *flags):
        return ["simworker", "--port", "{port}", "--name", f"{name}@{fleet_.tag}-{host.name}", *flags]
    common = {"health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
              "startup_timeout": "30s", "stop_timeout": "2s", "keep_alive": "10m", "queue_max": 64}
    return {
        "chat": {"route": "/chat/", "cmd": worker("chat", "--resident", "3.7GiB", "--per-request", "1GiB",
                                                  "--cache", "release", "--run-time", sim_s(RUN_S)),
                 "memory": {"resident": "4GiB", "per_request": "1GiB"}, "concurrency": 2, **common},
        "image": {"route": "/image/", "cmd": worker("image", "--resident", "7.7GiB", "--per-request", "4GiB",
                                                    "--cache", "release", "--run-time", sim_s(10),
                                                    "--path", "/v1/images/generations"),
                  "memory": {"resident": "8GiB", "per_request": "4GiB"}, "concurrency": 1, **common},
    }


def start(fleet_):
    for h in fleet_.make_hosts(3):
        h.start(models(fleet_, h))
    fleet_.start_haproxy()
    for backend in ("vramd_chat", "vramd_image"):
        # every server up, and the agents heard: nothing is loaded, so the resident tier
        # weighs 0 everywhere and the load tier by spare memory
        fleet_.wait_weights(backend, lambda v: len(v) == 6 and all(s == "UP" for s, _ in v.values()) and
                            all(w == 0 for n, (_, w) in v.items() if not n.endswith("-load")) and
                            all(w > 0 for n, (_, w) in v.items() if n.endswith("-load")),
                            f"{backend}: every server up with its agent's weight")
    return fleet_.hosts


def served(hosts, model):
    return {h.name: h.served(model) for h in hosts}


class Traffic:
    """Client threads sending chat requests through HAProxy until stopped; every answer kept."""

    def __init__(self, fleet_, clients=4, path="/chat/generate"):
        self.fleet = fleet_
        self.path = path
        self.stop_flag = threading.Event()
        self.results = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def client(self):
        while not self.stop_flag.is_set():
            t0 = time.monotonic()
            st, _, body = self.fleet.request(self.path)
            with self.lock:
                self.results.append((t0, st, body[:300]))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        for t in self.threads:
            t.join(60)

    def failures(self):
        return [(st, body) for _, st, body in self.results if st != 200]


def test_spread_by_spare_memory_and_model_routing(fleet):
    hosts = start(fleet)
    h1 = hosts[0]
    # another program takes 20 GiB of h1's 24: chat (5 GiB with one request) cannot fit there
    # now, and nothing vramd could evict would change that
    holder = subprocess.Popen([str(binary("simgpu")), "alloc", h1.gpu_set, "--bytes", str(20 << 30)],
                              stdout=subprocess.PIPE, text=True, env=sim_env(h1.gpu_set))
    try:
        assert holder.stdout.readline().startswith("allocated ")
        fleet.wait_weights("vramd_chat", lambda v: v["h1-load"][1] == 0 and v["h2-load"][1] > 0 and
                           v["h3-load"][1] > 0, "h1 out of the load tier (foreign memory)")
        results = []

        def client():
            for _ in range(3):
                results.append(fleet.request("/chat/generate")[0])
        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [200] * 12, results
        counts = served(hosts, "chat")
        assert counts["h1"] == 0, f"the host whose GPU is full took work: {counts}"
        assert counts["h2"] + counts["h3"] == 12, counts
    finally:
        holder.kill()
        holder.wait(10)
    # the JSON "model" field and the X-Vramd-Model header route as the prefix does
    before = sum(served(hosts, "image").values())
    st, _, body = fleet.request("/v1/images/generations", {"model": "image", "prompt": "x"})
    assert st == 200, body
    assert sum(served(hosts, "image").values()) == before + 1, "the JSON model field did not reach image"
    st, _, body = fleet.request("/image/generate", headers={"X-Vramd-Model": "image"})
    assert st == 200, body
    fleet.check_hosts_clean()


def test_resident_model_stays_on_its_host_until_saturated(fleet):
    hosts = start(fleet)
    h2 = hosts[1]
    st, _, body = h2.post("/chat/generate")  # chat is now loaded on h2 only
    assert st == 200, body
    fleet.wait_weights("vramd_chat", lambda v: v["h2"][1] >= 50 and v["h1"][1] == 0 and v["h3"][1] == 0,
                       "h2 alone in the resident tier")
    for _ in range(8):
        st, _, body = fleet.request("/chat/generate")
        assert st == 200, body
    counts = served(hosts, "chat")
    assert counts == {"h1": 0, "h2": 9, "h3": 0}, f"sequential requests left the host where chat is loaded: {counts}"
    # saturate h2 (2 slots, 0.3 s a request) with 8 clients: its agent says 0, the backups load chat
    with Traffic(fleet, clients=8) as traffic:
        time.sleep(1.5)
    assert not traffic.failures(), traffic.failures()[:5]
    counts = served(hosts, "chat")
    assert counts["h1"] + counts["h3"] > 0, f"no other host took the overflow of a saturated h2: {counts}"
    assert counts["h2"] > max(counts["h1"], counts["h3"]) / 2, counts
    fleet.check_hosts_clean()


def test_drain_moves_work_away_without_a_failed_request(fleet):
    hosts = start(fleet)
    h2 = hosts[1]
    with Traffic(fleet, clients=6) as traffic:
        time.sleep(0.8)
        p = subprocess.run([str(binary("vramctl")), "--url", f"http://{h2.addr}:8800", "--token",
                            fleet.token, "drain"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        t_drain = time.monotonic()
        assert h2.proc.wait(30) == 0, h2.log_tail()
        before_exit = served([hosts[0], hosts[2]], "chat")
        time.sleep(1.0)
    assert not traffic.failures(), f"{len(traffic.failures())} failed: {traffic.failures()[:5]}"
    after = served([hosts[0], hosts[2]], "chat")
    assert sum(after.values()) > sum(before_exit.values()), "no work moved to the other hosts"
    late = [t for t, _, _ in traffic.results if t > t_drain]
    assert late, "no request was sent after the drain"
    fleet.check_hosts_clean()


def test_rolling_restart_under_traffic_fails_nothing(fleet):
    hosts = start(fleet)
    with Traffic(fleet, clients=4) as traffic:
        time.sleep(0.5)
        for h in hosts:
            assert h.stop() == 0, h.log_tail()  # SIGTERM: drain, finish, exit 0
            h.start(models(fleet, h))
            fleet.wait_weights("vramd_chat", lambda v, n=h.name: v[n][0] == "UP" and v[n + "-load"][0] == "UP",
                               f"{h.name} back up")
        time.sleep(0.5)
    assert not traffic.failures(), f"{len(traffic.failures())} failed: {traffic.failures()[:5]}"
    assert len(traffic.results) >= 12, len(traffic.results)
    fleet.check_hosts_clean()
