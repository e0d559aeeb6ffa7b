"""lower_bound: what a scenario's traffic costs the GPU, and the shortest makespan any
scheduler could reach with it, computed from the traffic and the workers' flags alone.

Job: turn a scenario (vramd.yaml, gpu.txt, traffic.json) and an arrival plan into a list of
GPU jobs (one per request, pipeline steps included), each with its model, its memory at peak
(simworker --per-request x its --mem-scale factors for the request's parameters) and its run
time alone (--run-time x its --time-scale factors), and compute:

  C       memory left for requests = GPU total - headroom - residents of the models the
          traffic uses (a resident is max(vramd.yaml memory.resident, simworker --context
          (default 300MiB) + --resident)); with several GPUs, their sum (optimistic).
  chain   max over arrivals of (arrival + the run times of its pipeline steps): nothing can
          finish sooner than its own work, run alone, right at arrival.
  memory  max over release times a of a + (sum over jobs released at or after a of
          mem x time) / C + the shortest pipeline rest among them: at any instant the running
          jobs' peaks fit in C, so the area (memory x time) still to do after a needs at least
          area / C seconds after a, and the job that ends last still has its later pipeline
          steps (if any) to run.
  model   per model, max over a of a + (sum of its jobs' time released at or after a) / rate
          + the shortest pipeline rest among them,
          rate = max over k <= floor(C / smallest peak) of k / (1 + (k-1) x contention):
          simworker's --contention makes k requests at once each run 1+(k-1)c times slower,
          so running them together helps only as much as that.
  lower bound on makespan = max(chain, memory, model), measured from the first arrival.
  all-resident bound = the same, and for each pair of models whose smallest peaks do not
          fit in C together, the two models' work serialised (each at its best rate): what
          a scheduler that never evicts (every used model resident, as C assumes) could at
          best reach. A scheduler that evicts or parks idle models gets more than C once
          they are out, so the lower bound proper leaves this term out.

A job's release is its arrival, or for a pipeline step, its first step's arrival plus the run
times of the steps before it. The same bound with each model's concurrency capped at vramd.yaml
`concurrency` is reported as `config` (what vramd, as configured, could at best reach).

What it ignores (so a real run can only be slower): model load and eviction/reload times
(the benchmark loads every model before the traffic starts), run-time jitter (times are the
nominal, i.e. expected, ones: with --run-jitter F a run's time is uniform in (1-F, 1+F)), the
memory ramp (a request takes its peak over the first 30 % of its run: the bound reserves the
peak for the whole run, as any reservation-based scheduler must), allocator caches and leaks
(memory a worker keeps after a request), the NVML polling delay and the HTTP path. With
jitter, a run can beat the nominal bound by a little; the bound is on expected makespan.

Functions raise ValueError on a scenario they cannot read; nothing here starts a process.
"""

import json
import os
import re
import shlex
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "player"))
import player as traffic_player  # noqa: E402  (bench/player/player.py: the arrival plan)

SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$")
SIZE_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
              "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12}
GiB = float(1 << 30)
DEFAULT_CONTEXT = 300 * (1 << 20)   # simworker --context default
DEFAULT_HEADROOM = 512 * (1 << 20)  # vramd gpu.headroom default


def parse_size(v, what):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = SIZE_RE.match(str(v))
    if not m:
        raise ValueError("%s: expected a size like 12GiB, got %r" % (what, v))
    return float(m.group(1)) * SIZE_UNITS[m.group(2)]


def parse_duration(v, what):
    try:
        return traffic_player.parse_duration_s(v, what)
    except traffic_player.ScenarioError as e:
        raise ValueError(str(e))


def simworker_flags(cmd):
    """simworker's command line (a list) -> {flag: value or [values] for repeatable ones}."""
    flags = {"mem-scale": [], "time-scale": []}
    i = 1
    while i < len(cmd):
        a = str(cmd[i])
        if not a.startswith("--"):
            i += 1
            continue
        name, eq, val = a[2:].partition("=")
        if not eq:
            if name == "lock" or i + 1 >= len(cmd):
                flags[name] = True
                i += 1
                continue
            val = str(cmd[i + 1])
            i += 1
        if name in ("mem-scale", "time-scale"):
            p, base, exp = val.split(":")
            flags[name].append((p, float(base), float(exp)))
        else:
            flags[name] = val
        i += 1
    return flags


def cost_factor(rules, params):
    """simworker's sw_cost_factor: x (param / base)^exp for each rule whose param is a number > 0."""
    f = 1.0
    for p, base, exp in rules:
        v = params.get(p)
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if v <= 0:
            continue
        f *= (v / base) ** exp
    return min(max(f, 1e-6), 1e6)


class Model:
    def __init__(self, name, doc):
        self.name = name
        self.route = doc.get("route")
        self.aliases = list(doc.get("aliases") or [])
        self.concurrency = int(doc.get("concurrency", 1))
        mem = doc.get("memory") or {}
        cmd = doc.get("cmd")
        if not cmd or os.path.basename(str(cmd[0])) != "simworker":
            raise ValueError("model %s: not a simworker (the bound needs its flags)" % name)
        f = simworker_flags(cmd)
        self.flags = f
        worker_resident = parse_size(f.get("context", DEFAULT_CONTEXT), name + " --context") + \
            parse_size(f.get("resident", 0), name + " --resident")
        declared = parse_size(mem["resident"], name + ".memory.resident") if "resident" in mem else 0.0
        self.resident = max(worker_resident, declared)
        self.per_request = parse_size(f.get("per-request", 0), name + " --per-request")
        self.run_time = parse_duration(f.get("run-time", "1s"), name + " --run-time")
        self.contention = float(f.get("contention", 1.0))
        self.jitter = float(f.get("run-jitter", 0.0))
        self.load_time = parse_duration(f.get("load-time", 0), name + " --load-time")

    def cost(self, params):
        """(peak memory bytes, nominal run time s) of one request with these parameters."""
        return (self.per_request * cost_factor(self.flags["mem-scale"], params),
                self.run_time * cost_factor(self.flags["time-scale"], params))

    def best_rate(self, capacity, smallest_peak, cap=None):
        """Most work-seconds per second this worker can do: k at once each run 1+(k-1)c slower."""
        k_max = int(capacity // smallest_peak) if smallest_peak > 0 else 64
        k_max = max(1, min(k_max, 64 if cap is None else cap))
        return max(k / (1.0 + (k - 1) * self.contention) for k in range(1, k_max + 1))


class Scenario:
    """A scenario directory: its models, GPU and traffic."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "vramd.yaml")) as f:
            self.cfg = yaml.safe_load(f)
        with open(os.path.join(path, "traffic.json")) as f:
            self.traffic_doc = json.load(f)
        self.traffic = traffic_player.Scenario(self.traffic_doc)
        with open(os.path.join(path, "gpu.txt")) as f:
            line = [x for x in f.read().splitlines() if x.strip().startswith("simgpu create")][0]
        argv = shlex.split(line)
        self.gpu_total = parse_size(argv[argv.index("--memory") + 1], "gpu.txt --memory")
        self.n_gpus = int(argv[argv.index("--gpus") + 1]) if "--gpus" in argv else 1
        self.headroom = parse_size((self.cfg.get("gpu") or {}).get("headroom", DEFAULT_HEADROOM), "gpu.headroom")
        defaults = self.cfg.get("defaults") or {}
        self.models = {}
        for name, doc in (self.cfg.get("models") or {}).items():
            merged = dict(defaults)
            merged.update(doc or {})
            self.models[name] = Model(name, merged)

    def model_for(self, tpl):
        """The model a request template goes to: longest route prefix, else a JSON body's
        "model" (name or alias) for POST /v1/..."""
        best = None
        for m in self.models.values():
            r = m.route
            if not r:
                continue
            r = r if r.startswith("/") else "/" + r
            if (tpl.path.startswith(r) or tpl.path == r.rstrip("/")) and (best is None or len(r) > len(best.route)):
                best = m
        if best is None and tpl.body_kind == "json" and isinstance(tpl.body, dict):
            want = tpl.body.get("model")
            for m in self.models.values():
                if want == m.name or want in m.aliases:
                    best = m
        if best is None:
            raise ValueError("template %s (%s): no model" % (tpl.name, tpl.path))
        return best

    @staticmethod
    def params_of(tpl):
        """The request's parameters as simworker reads them (top-level scalars)."""
        if tpl.body_kind in ("json", "form") and isinstance(tpl.body, dict):
            return dict(tpl.body)
        if tpl.body_kind == "multipart" and isinstance(tpl.body, dict):
            return dict(tpl.body.get("fields") or {})
        return {}

    def template_cost(self, name):
        tpl = self.traffic.templates[name]
        m = self.model_for(tpl)
        mem, t = m.cost(self.params_of(tpl))
        return m, mem, t

    def used_models(self):
        """Names of the models the traffic's templates (with weight > 0, and their `then`
        chains) reach."""
        names = set()
        for s in self.traffic.streams:
            for tname, w in zip(s.names, s.weights):
                while w > 0 and tname is not None:
                    names.add(self.model_for(self.traffic.templates[tname]).name)
                    tname = self.traffic.templates[tname].then
        return names

    def capacity(self):
        used = self.used_models()
        residents = sum(self.models[n].resident for n in used)
        return self.n_gpus * (self.gpu_total - self.headroom) - residents

    def jobs(self, seed, duration=None, count=None):
        """The arrival plan as GPU jobs: dicts with seq, template, model, arrival, release,
        mem, time, last_step, after (run time of the pipeline's later steps)."""
        out = []
        for seq, (t_arr, name) in enumerate(self.traffic.schedule(seed, duration, count), 1):
            release = t_arr
            steps = []
            while name is not None:
                m, mem, t = self.template_cost(name)
                nxt = self.traffic.templates[name].then
                steps.append({"seq": seq, "template": name, "model": m.name, "arrival": t_arr,
                              "release": release, "mem": mem, "time": t, "last_step": nxt is None})
                release += t
                name = nxt
            for j in steps:
                j["after"] = release - j["release"] - j["time"]
            out.extend(steps)
        return out


def _tail_bound(jobs, weight, t0):
    """max over release times a of (a - t0) + sum of weight(job) for the jobs released at or
    after a + the shortest `after` among them (the one that finishes last still has its
    pipeline's later steps to run)."""
    by_release = sorted(jobs, key=lambda j: j["release"])
    best, total, after = 0.0, 0.0, float("inf")
    for j in reversed(by_release):
        total += weight(j)
        after = min(after, j["after"])
        best = max(best, j["release"] - t0 + total + after)
    return best


def lower_bound(scn, jobs):
    """The bound's terms (simulated seconds from the first arrival) for these jobs."""
    if not jobs:
        return None
    t0 = min(j["arrival"] for j in jobs)
    cap = scn.capacity()
    if cap <= 0:
        raise ValueError("the residents of the used models do not fit the GPU")
    chain = max(j["release"] + j["time"] for j in jobs if j["last_step"]) - t0
    memory = _tail_bound(jobs, lambda j: j["mem"] * j["time"] / cap, t0)
    per_model, per_model_cfg, concurrency = {}, {}, {}
    for name in sorted({j["model"] for j in jobs}):
        mine = [j for j in jobs if j["model"] == name]
        m = scn.models[name]
        smallest = min(j["mem"] for j in mine)
        rate = m.best_rate(cap, smallest)
        rate_cfg = m.best_rate(cap, smallest, cap=m.concurrency)
        per_model[name] = _tail_bound(mine, lambda j, r=rate: j["time"] / r, t0)
        per_model_cfg[name] = _tail_bound(mine, lambda j, r=rate_cfg: j["time"] / r, t0)
        concurrency[name] = {"memory_allows": int(cap // smallest) if smallest > 0 else None,
                             "best_rate": round(rate, 3), "configured": m.concurrency}
    model_term = max(per_model.values())
    bound = max(chain, memory, model_term)
    bound_cfg = max(chain, memory, max(per_model_cfg.values()))
    pairs = _exclusive_pairs(scn, jobs, cap, t0)
    bound_resident = max([bound] + [p["bound_s"] for p in pairs])
    total_time = sum(j["time"] for j in jobs)
    # How many requests memory lets run at once, at most: the most jobs whose peaks fit in C,
    # smallest first (> 1 means memory allows concurrency).
    peaks = sorted(j["mem"] for j in jobs)
    fit, used = 0, 0.0
    for p in peaks:
        if used + p > cap:
            break
        used += p
        fit += 1
    distinct_fit = _distinct_models_fit(jobs, cap)
    return {
        "capacity_gib": round(cap / GiB, 3),
        "gpu_total_gib": round(scn.n_gpus * scn.gpu_total / GiB, 3),
        "headroom_gib": round(scn.headroom / GiB, 3),
        "residents_gib": {n: round(scn.models[n].resident / GiB, 3) for n in sorted(scn.used_models())},
        "jobs": len(jobs),
        "arrivals": len({j["seq"] for j in jobs}),
        "first_arrival_s": t0,
        "last_arrival_s": max(j["arrival"] for j in jobs),
        "total_work_s": round(total_time, 3),
        "total_area_gib_s": round(sum(j["mem"] * j["time"] for j in jobs) / GiB, 3),
        "max_concurrency_memory": fit,
        "max_concurrency_memory_distinct_models": distinct_fit,
        "terms_s": {"chain": round(chain, 3), "memory": round(memory, 3),
                    "model": {k: round(v, 3) for k, v in per_model.items()}},
        "per_model": concurrency,
        "bound_s": round(bound, 3),
        "bound_config_s": round(bound_cfg, 3),
        "bound_all_resident_s": round(bound_resident, 3),
        "exclusive_pairs": pairs,
        "binding_term": ("chain" if bound == chain else "memory" if bound == memory else
                         "model " + max(per_model, key=per_model.get)),
    }


def _exclusive_pairs(scn, jobs, cap, t0):
    """Pairs of models whose smallest requests cannot run at the same time in C (their peaks
    sum to more): with every used model resident (C is what is left beside all of them),
    their work is serialised, so max over a of a + (both models' time released at or after
    a, each at its own best rate) + the shortest pipeline rest is a bound for any scheduler
    that keeps every model resident. A scheduler that evicts idle models (or parks them)
    has more than C and is not bound by it: `bound_s` leaves it out."""
    by_model = {}
    for j in jobs:
        by_model.setdefault(j["model"], []).append(j)
    rate = {}
    for name, mine in by_model.items():
        rate[name] = scn.models[name].best_rate(cap, min(j["mem"] for j in mine))
    out = []
    names = sorted(by_model)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pa = min(j["mem"] for j in by_model[a])
            pb = min(j["mem"] for j in by_model[b])
            if pa + pb <= cap:
                continue
            both = by_model[a] + by_model[b]
            t = _tail_bound(both, lambda j: j["time"] / rate[j["model"]], t0)
            out.append({"models": [a, b], "smallest_peaks_gib": [round(pa / GiB, 3), round(pb / GiB, 3)],
                        "bound_s": round(t, 3)})
    return sorted(out, key=lambda p: -p["bound_s"])


def _distinct_models_fit(jobs, cap):
    """Most requests of different models that fit in C at once (one smallest request per
    model, smallest first): what memory allows a --lock-per-worker setup or any scheduler
    that runs one request per model."""
    smallest = {}
    for j in jobs:
        smallest[j["model"]] = min(smallest.get(j["model"], float("inf")), j["mem"])
    fit, used = 0, 0.0
    for p in sorted(smallest.values()):
        if used + p > cap:
            break
        used += p
        fit += 1
    return fit


def offered_work(scn, template_names):
    """Nominal run time (s) per template name, for the 'work completed' figure; templates that
    reach no model (weight 0 in every stream, their model dropped) are left out."""
    out = {}
    for n in template_names:
        try:
            out[n] = scn.template_cost(n)[2]
        except ValueError:
            pass
    return out


def main():
    import argparse
    ap = argparse.ArgumentParser(description="Lower bound on a scenario's makespan.")
    ap.add_argument("scenario")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--duration")
    ap.add_argument("--requests", type=int)
    a = ap.parse_args()
    scn = Scenario(a.scenario)
    seed = a.seed if a.seed is not None else scn.traffic.seed
    dur = parse_duration(a.duration, "--duration") if a.duration else None
    print(json.dumps(lower_bound(scn, scn.jobs(seed, dur, a.requests)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
