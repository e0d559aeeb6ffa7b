"""Who parks and for how long (issue 13; workers/park_evict.c, workers/park_host.c).

- keep_alive running out parks a model that has a park tier (sleep hooks or `checkpoint:
  true`) instead of stopping it, when the host budget allows; the parked instance then has its
  own host keep-alive (`park_keep_alive`), after which it is stopped and its host memory
  released; `park_keep_alive: 0` turns parking off (stopped as before).
- a park over the host budget stops an older parked instance when that is cheaper (here: a
  lower priority; or, at equal priority, one whose host keep-alive is about to end anyway),
  and the budget is never exceeded.
- an admin unload clears the allocator cache first (as eviction does), so that what is parked
  is the model's floor, not its cache.
"""
import threading

from vramdkit import GiB, MiB, sim_s, wait_for

from .schedkit import after, order

SLEEP = {"method": "POST", "path": "/sleep?level=1"}
WAKE = {"method": "POST", "path": "/wake_up"}
CONTEXT = 300 * MiB  # simworker's CUDA context


def sleep_model(sched, name="llm", flags_extra=(), **over):
    flags = ["--resident", "4GiB", "--per-request", "256MiB", "--run-time", sim_s(1),
             "--sleep-time", sim_s(1), "--wake-time", sim_s(1), *flags_extra]
    return sched.model(name, flags, "4.3GiB", "256MiB", **{"sleep": SLEEP, "wake": WAKE, **over})


def ckpt_model(sched, name, flags_extra=(), **over):
    flags = ["--resident", "4GiB", "--per-request", "256MiB", "--run-time", sim_s(1), *flags_extra]
    return sched.model(name, flags, "4.3GiB", "256MiB", checkpoint=True, **over)


def gpu_held_by(sched, gpu, pid):
    return sum(p["used"] for g in sched.show(gpu)["gpus"] for p in g["processes"] if p["pid"] == pid)


class HostWatch:
    """Polls /v1/status's host_memory.parked in a thread: the largest value seen."""

    def __init__(self, vd):
        self.vd, self.max_parked, self._stop = vd, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.max_parked = max(self.max_parked, self.vd.status()["host_memory"]["parked"])
            except Exception:  # busy daemon: poll again
                pass
            self._stop.wait(0.01)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(10)


def test_keep_alive_parks_then_park_keep_alive_stops(sched):
    """keep_alive (300 ms) runs out: llm, with sleep/wake hooks and room on the host, is parked
    (same process, weights off the GPU, booked on the host), not stopped. Its next request wakes
    it. Idle again, it is parked again; after park_keep_alive (1 s) parked it is stopped
    (park_expired), its host memory given back (the host book at 0), and the next request
    starts a fresh worker."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": sleep_model(sched, keep_alive="300ms", park_keep_alive="1s")},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    wait_for(lambda: vd.instances("llm") and vd.instances("llm")[0]["state"] == "parked", timeout=10,
             what="llm parked when its keep_alive ran out")
    inst = vd.instances("llm")[0]
    assert inst["pid"] == pid and inst["tier"] == "sleeping", inst
    assert vd.status()["host_memory"]["parked"] == inst["parked_bytes"] >= 4 * GiB - 64 * MiB
    assert gpu_held_by(sched, gpu, pid) < 1 * GiB
    parked = vd.first("parked", model="llm")
    order(vd.first("sleep_hook_done", model="llm"), parked)
    assert not vd.events("worker_exit", model="llm")

    assert vd.generate("llm").status == 200  # woken, the same process
    assert vd.instances("llm")[0]["pid"] == pid
    resumed = vd.first("resumed", model="llm")
    parked2 = vd.wait_event("parked", model="llm", count=2, timeout=10)[1]
    expired = vd.wait_event("park_expired", model="llm", timeout=10)[0]
    order(parked, resumed, parked2, expired)
    assert 1000 <= expired["parked_ms"] < 3000 and expired["park_keep_alive_ms"] == 1000, expired
    wait_for(lambda: not vd.instances("llm"), what="llm stopped after park_keep_alive")
    exited = after(vd.events("worker_exit", model="llm"), expired)
    assert exited and exited["expected"] is True, exited
    assert vd.status()["host_memory"]["parked"] == 0
    assert vd.model("llm")["parking"]["parks_total"] == 2

    assert vd.generate("llm").status == 200
    assert vd.instances("llm")[0]["pid"] != pid
    sched.finish()


def test_park_keep_alive_0_stops_as_before(sched):
    """park_keep_alive 0: the model is never parked: keep_alive's expiry stops it (no sleep hook
    called), and so does an admin unload."""
    gpu = sched.gpu_set("8GiB")
    vd = sched.start_vramd(gpu, {"llm": sleep_model(sched, keep_alive="300ms", park_keep_alive=0)},
                           host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    wait_for(lambda: not vd.instances("llm"), timeout=10, what="llm stopped when its keep_alive ran out")
    assert not vd.events("sleep_hook_done", model="llm") and not vd.events("parked", model="llm")
    assert vd.generate("llm").status == 200
    assert vd.post("/v1/models/llm/unload").status == 200
    wait_for(lambda: not vd.instances("llm"), what="llm stopped by the admin unload")
    assert not vd.events("sleep_hook_done", model="llm")
    assert vd.status()["host_memory"]["parked"] == 0
    sched.finish()


def test_host_pressure_stops_a_lower_priority_park(sched):
    """The host budget (6 GiB) holds one 4.3 GiB park. `low` (priority 3) is parked by its
    keep_alive first; when `high` (priority 5) is parked the same way, `low` is stopped to make
    room (park_displaced) rather than `high` being refused; the host book never exceeds the
    budget."""
    gpu = sched.gpu_set("12GiB")
    vd = sched.start_vramd(gpu, {
        "low": ckpt_model(sched, "low", priority=3, keep_alive="300ms", park_keep_alive="forever"),
        "high": ckpt_model(sched, "high", priority=5, keep_alive="300ms", park_keep_alive="forever"),
    }, host_memory={"budget": "6GiB", "reserve": 0})
    with HostWatch(vd) as hw:
        assert vd.generate("low").status == 200
        wait_for(lambda: vd.instances("low")[0]["state"] == "parked", timeout=10, what="low parked")
        low_pid = vd.instances("low")[0]["pid"]
        assert vd.generate("high").status == 200
        displaced = vd.wait_event("park_displaced", model="low", timeout=10)[0]
        wait_for(lambda: vd.instances("high")[0]["state"] == "parked", timeout=10, what="high parked")
        wait_for(lambda: not vd.instances("low"), what="low stopped")
    assert displaced["for"] == "high", displaced
    # low's stop is asked before high's park is booked; its process may exit before or just
    # after high's copy ends (the book, not the process's exit, is what the park waits for:
    # park_host.c), so each is checked after the displacement, not against each other
    order(displaced, after(vd.events("worker_exit", model="low", pid=low_pid), displaced))
    order(displaced, vd.first("parked", model="high"))
    assert not vd.events("park_refused", model="high")
    st = vd.status()
    assert st["host_memory"]["parked"] == vd.instances("high")[0]["parked_bytes"] <= 6 * GiB
    assert hw.max_parked <= 6 * GiB, hw.max_parked
    sched.finish()


def test_host_pressure_equal_priority_stops_the_park_about_to_expire(sched):
    """Equal priorities, a 6 GiB budget, loads of 2 s (40 s simulated): `old`, whose
    park_keep_alive (4 s) is half over when `new` is parked and whose last request is the older,
    costs less to lose than refusing `new`'s park (30 min ahead of it): `old` is stopped, `new`
    parked. Then `old`
    again (fresh start), and when it is parked, `new` (parked for 30 min, just used) is not
    displaced: `old`'s park is refused (park_displace_declined, park_refused) and it is
    stopped."""
    gpu = sched.gpu_set("12GiB")
    slow = ["--load-time", sim_s(40)]
    vd = sched.start_vramd(gpu, {
        "old": ckpt_model(sched, "old", slow, keep_alive="200ms", park_keep_alive="4s"),
        "new": ckpt_model(sched, "new", slow, keep_alive="200ms", park_keep_alive="30m"),
    }, host_memory={"budget": "6GiB", "reserve": 0})
    with HostWatch(vd) as hw:
        assert vd.generate("old").status == 200
        wait_for(lambda: vd.instances("old")[0]["state"] == "parked", timeout=10, what="old parked")
        assert vd.generate("new").status == 200
        displaced = vd.wait_event("park_displaced", model="old", timeout=10)[0]
        wait_for(lambda: vd.instances("new")[0]["state"] == "parked", timeout=10, what="new parked")
        assert displaced["for"] == "new" and displaced["cost_ms"] < displaced["refusal_cost_ms"], displaced
        wait_for(lambda: not vd.instances("old"), what="old stopped")
        assert vd.generate("old").status == 200
        declined = vd.wait_event("park_displace_declined", model="old", timeout=10)[0]
        refused = after(vd.events("park_refused", model="old"), declined)
        assert refused and refused["reason"] == "over_budget", refused
        wait_for(lambda: not vd.instances("old"), what="old stopped, its park refused")
    assert vd.instances("new")[0]["state"] == "parked"
    assert len(vd.events("park_displaced")) == 1
    assert hw.max_parked <= 6 * GiB, hw.max_parked
    sched.finish()


def test_admin_unload_clears_the_cache_before_the_park(sched):
    """llm holds 4 GiB resident + 6 GiB of allocator cache (simworker --cache keep) and has a
    clear_cache hook. An admin unload (vramctl unload) asks it to clear its cache first
    (park_clear_cache for=admin), then checkpoints only what is left: the parked bytes are its
    floor, not floor + cache; the 6 GiB host budget would have refused the whole."""
    gpu = sched.gpu_set("12GiB")
    llm = sched.model("llm", ["--resident", "4GiB", "--per-request", "6GiB", "--cache", "keep",
                              "--run-time", sim_s(1)], "4.3GiB", "6GiB", checkpoint=True,
                      clear_cache={"method": "POST", "path": "/clear_cache/"})
    vd = sched.start_vramd(gpu, {"llm": llm}, host_memory={"budget": "6GiB", "reserve": 0})
    assert vd.generate("llm").status == 200
    pid = vd.instances("llm")[0]["pid"]
    wait_for(lambda: gpu_held_by(sched, gpu, pid) >= 10 * GiB, what="llm holding its cache")
    r = vd.post("/v1/models/llm/unload")
    assert r.status == 200, r
    clear = vd.first("park_clear_cache", model="llm")
    assert clear and clear["for"] == "admin" and clear["cached"] >= 5 * GiB, clear
    cleared = vd.first("park_cleared_cache", model="llm")
    assert cleared["cleared"] == "true" and cleared["after"] <= 4 * GiB + CONTEXT + 64 * MiB, cleared
    parked = vd.first("parked", model="llm")
    order(clear, vd.first("clear_cache_done", model="llm"), cleared, parked)
    assert parked["host"] <= 4 * GiB + CONTEXT + 64 * MiB, parked
    inst = vd.instances("llm")[0]
    assert inst["state"] == "parked" and inst["pid"] == pid, inst
    assert vd.status()["host_memory"]["parked"] == inst["parked_bytes"] <= 4 * GiB + CONTEXT + 64 * MiB
    assert not vd.events("park_refused", model="llm")
    assert vd.generate("llm").status == 200
    assert vd.instances("llm")[0]["pid"] == pid
    sched.finish()


def test_admin_unload_of_an_external_server_clears_its_cache_first(sched):
    """The same for an external server (url:) with sleep/wake and clear_cache hooks: the admin
    unload is answered only once the cache was cleared and the server slept, and what is parked
    on the host is its floor."""
    gpu = sched.gpu_set("12GiB")
    ext = sched.external(gpu, "extllm", ["--resident", "3GiB", "--per-request", "4GiB", "--cache", "keep",
                                         "--run-time", sim_s(1), "--sleep-time", sim_s(1),
                                         "--wake-time", sim_s(1)])
    vd = sched.start_vramd(gpu, {"extllm": sched.external_model(
        "extllm", ext, "3.3GiB", "4GiB", sleep=SLEEP, wake=WAKE,
        clear_cache={"method": "POST", "path": "/clear_cache/"})},
        host_memory={"budget": "16GiB", "reserve": 0})
    assert vd.generate("extllm").status == 200
    wait_for(lambda: gpu_held_by(sched, gpu, ext.pid) >= 7 * GiB, what="the server holding its cache")
    r = vd.post("/v1/models/extllm/unload")
    assert r.status == 200, r
    inst = vd.instances("extllm")[0]
    assert inst["state"] == "parked" and inst["tier"] == "sleeping", inst
    assert inst["parked_bytes"] <= 3 * GiB + 64 * MiB, inst
    clear = vd.first("park_clear_cache", model="extllm")
    assert clear and clear["for"] == "admin", clear
    order(clear, vd.first("park_cleared_cache", model="extllm"), vd.first("sleep_hook_done", model="extllm"),
          vd.first("parked", model="extllm"))
    assert gpu_held_by(sched, gpu, ext.pid) < 1 * GiB
    assert vd.generate("extllm").status == 200
    assert not ext.oom_lines()
    sched.finish()
