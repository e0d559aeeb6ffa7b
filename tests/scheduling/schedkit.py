"""schedkit: what the scheduling tests add to the shared kit (tests/lib/vramdkit, whose
harness.py holds the `sched` fixture's Harness: simulated GPU sets, simworker models, vramd).

  - Watch: a thread that polls /v1/status while a test runs, checks the ledger's
    arithmetic at every sample, and records how many request reservations existed at once
    (per GPU, per model) and which instance states were seen.
  - order()/after(): the order of log events (Vramd.events gives each its position "_i").
"""
import threading
import time

from vramdkit import ledger_problems


class Watch:
    """Polls /v1/status in a thread while a scenario runs.

    Records, over all samples: the largest number of request reservations at once per GPU
    (max_requests_gpu[index]) and per model (max_requests_model[name]), the instance
    states seen per model, the largest `foreign` and smallest `capacity` per GPU, and any
    ledger arithmetic problem (ledger_problems) seen in a sample.
    """

    def __init__(self, vd, interval=0.02):
        self.vd = vd
        self.interval = interval
        self.samples = 0
        self.max_requests_gpu = {}
        self.max_requests_model = {}
        self.max_requests_total = 0
        self.concurrent_models = set()  # frozensets of models with requests at the same time
        self.states = {}
        self.max_foreign = {}
        self.min_capacity = {}
        self.problems = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def _run(self):
        while not self._stop.is_set():
            try:
                st = self.vd.status()
            except Exception:  # the daemon may be busy; poll again
                time.sleep(self.interval)
                continue
            self.record(st)
            self._stop.wait(self.interval)

    def record(self, st):
        self.samples += 1
        self.problems.extend(ledger_problems(st))
        per_model = {}
        total = 0
        for g in st["gpus"]:
            reqs = [e for e in g["ledger"] if e["kind"] == "request"]
            total += len(reqs)
            idx = g["index"]
            self.max_requests_gpu[idx] = max(self.max_requests_gpu.get(idx, 0), len(reqs))
            self.max_foreign[idx] = max(self.max_foreign.get(idx, 0), g["foreign"])
            self.min_capacity[idx] = min(self.min_capacity.get(idx, g["capacity"]),
                                         g["capacity"])
            for e in reqs:
                per_model[e["owner"]] = per_model.get(e["owner"], 0) + 1
        self.max_requests_total = max(self.max_requests_total, total)
        for name, n in per_model.items():
            self.max_requests_model[name] = max(self.max_requests_model.get(name, 0), n)
        if len(per_model) > 1:
            self.concurrent_models.add(frozenset(per_model))
        for m in st["models"]:
            seen = self.states.setdefault(m["name"], set())
            for inst in m.get("instances", []):
                seen.add(inst["state"])


def order(*events):
    """Assert that log events (dicts from Vramd.events, or None) appear in this order."""
    for e in events:
        assert e is not None, f"missing event in {[x and x.get('event') for x in events]}"
    for a, b in zip(events, events[1:]):
        assert a["_i"] < b["_i"], f"{a} should come before {b}"


def after(events, ref):
    """The first of events that comes after ref (a log event), or None."""
    for e in events:
        if e["_i"] > ref["_i"]:
            return e
    return None
