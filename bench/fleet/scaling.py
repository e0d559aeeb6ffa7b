#!/usr/bin/python3
"""fleet scaling: the same mixed traffic through HAProxy to 1, 2 and 3 vramd hosts (issue 14,
bench/fleet; by hand, not part of `make test`). Results: docs/benchmarks.md, "Fleet: scaling
over 1, 2 and 3 hosts".

Setup (tests/fleet/fleetkit.py, as the fleet tests; needs root for network namespaces): n
vramd hosts, each with its own simulated 24 GiB GPU (an RTX 4090-class host, as in
examples/seed000-miner-4090) in its own network namespace, and HAProxy in front running
contrib/haproxy/haproxy.cfg as shipped, its `chat` backend copied once per model (routed by
path prefix) and the server lines of absent hosts taken out. Every host starts cold (no
model loaded): where each model goes is HAProxy's and the agents' doing.

Models (FIELD.md figures, as in examples/mixed-80gb and examples/seed000-miner-4090):
  llm      Qwen2.5-7B   15.8 GiB + 1 GiB/sequence, 6 s, 8 slots (contention 0.15), load 30 s, deadline 30 s
  sd35     SD3.5 turbo   9.3 GiB + 0.5 GiB,        4 s, 1 slot,                   load 20 s, deadline 30 s
  vlm      RoboBrain 3B  3.3 GiB + 2.1 GiB,       3.5 s, 2 slots,                 load 12 s, deadline 30 s
  trellis  TRELLIS       6.3 GiB + 11.5 GiB,     13.5 s, 2 slots (contention 1.2), load 60 s, deadline 2 m
Residents sum to 34.7 GiB: the four do not fit on one GPU together (23.5 GiB after headroom),
and llm's 8 sequences beside trellis's peak do not either.

--mix fits (the control): sd35, vlm and validator (CLIP/IQA 4.7 GiB + 0.25 GiB, 2.7 s, 4 slots),
which fit one GPU together, peaks included.

Traffic (simulated time; SIMGPU_TIMESCALE --timescale, default 0.05: 1 simulated s = 50 ms);
every setup gets n x the same --per-host requests (default 60: 30 llm, 12 sd35, 12 vlm,
6 trellis), shuffled (seeded), and vramd's queue deadline is 1 h unless said otherwise:
  closed (default)  n x --clients clients (8 per host) work through them, each sending its next
                    request when its last is answered: every setup saturated, every setup doing
                    n times the work of one host, arrivals spread so the agents can steer.
  burst             all sent at t=0 (1 ms apart): HAProxy places them before any agent check.
  open              Poisson arrivals at --rate-per-host requests per simulated minute per host
                    (x n) for --duration simulated seconds, each with its model's deadline
                    (X-Vramd-Deadline, scaled): vramd refuses what cannot start in time (503,
                    retried by HAProxy on another host) or lets it expire (504).
The deadline hit rate is the client's: answered 200 within the model's deadline above,
counted from the send. Setups run alternately (1, 2, 3 hosts, then 3, 2, 1, ...), --reps
times each (default 3); --balance-factor LIST adds setups (2 and 3 hosts) with another
hash-balance-factor in every model backend (0: none; shipped: the file as it is).

Per run: requests ok/sent, throughput (requests and nominal GPU work per simulated second,
over the makespan), makespan (first send to last answer), deadline hit rate, latency p50/p95,
OOMs (vramd_oom_total and "out of memory" in the hosts' logs), 503s the client saw, 503s
vramd answered and HAProxy retried, model loads, evictions, reloads (loads beyond the first of
each model on each host), where each model ran, and the CPU: the box's busy cores over the
run, the share of them used by this fleet, and the load average.

Scaling efficiency(n) = throughput(n) / (n x throughput(1)), per repetition (run r of n hosts
against run r of 1 host), median over repetitions.

  sudo /usr/bin/python3 bench/fleet/scaling.py                     # closed, 3 reps x 1,2,3 hosts: ~6 min
  sudo /usr/bin/python3 bench/fleet/scaling.py --balance-factor shipped,0   # and without the factor: ~10 min
  sudo /usr/bin/python3 bench/fleet/scaling.py --mix fits --reps 2 # the control mix
  sudo /usr/bin/python3 bench/fleet/scaling.py --traffic burst     # all at t=0
  sudo /usr/bin/python3 bench/fleet/scaling.py --smoke             # 1 and 2 hosts, 4 requests each: seconds
Writes bench/results/fleet-scaling-<traffic>-<stamp>.json (--out FILE: there instead).
Everything it starts (vramd, workers, HAProxy, namespaces, veth pairs, simulated GPUs) is
stopped and removed at the end, also on an error or Ctrl-C.
"""
import argparse
import csv
import io
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("VRAMD_BUILD", "build")

from fleet import fleetkit  # noqa: E402
from vramdkit.daemon import sanitizer_reports  # noqa: E402

# name: worker flags (simulated), vramd's memory, slots, deadline (simulated s), share of the mix
MODELS = {
    "llm": {"worker": "qwen2.5-7b-instruct", "resident": "15.5GiB", "per_request": "1GiB", "load": 30,
            "run": 6.0, "jitter": 0.3, "contention": 0.15, "mem": "15.8GiB", "slots": 8, "deadline": 30, "share": 10},
    "sd35": {"worker": "sd35-large-turbo", "resident": "9GiB", "per_request": "512MiB", "load": 20,
             "run": 4.0, "jitter": 0.25, "contention": 1.0, "mem": "9.3GiB", "slots": 1, "deadline": 30, "share": 4},
    "vlm": {"worker": "robobrain2-3b", "resident": "3GiB", "per_request": "2.1GiB", "load": 12,
            "run": 3.5, "jitter": 0.43, "contention": 1.0, "mem": "3.3GiB", "slots": 2, "deadline": 30, "share": 4},
    "trellis": {"worker": "trellis", "resident": "6GiB", "per_request": "11.5GiB", "load": 60,
                "run": 13.5, "jitter": 0.11, "contention": 1.2, "mem": "6.3GiB", "slots": 2, "deadline": 120,
                "share": 2},
}
# --mix fits: three models that fit one GPU together, peaks included (17.3 GiB resident +
# 5.75 GiB of peaks in 23.5): no load after the first on any host count, so what is left is
# the fleet's own dispatch (the control for the memory effect of the mix above)
MIX_FITS = {
    "sd35": MODELS["sd35"],
    "vlm": MODELS["vlm"],
    "validator": {"worker": "clip-iqa-validator", "resident": "4.4GiB", "per_request": "256MiB", "load": 8,
                  "run": 2.7, "jitter": 0.87, "contention": 1.0, "mem": "4.7GiB", "slots": 4, "deadline": 30,
                  "share": 4},
}


def real(sim_seconds, ts):
    """A simulated duration as vramd's (real-time) config string, in ms."""
    return f"{max(1, round(sim_seconds * ts * 1000))}ms"


def model_configs(fleet, host, args):
    out = {}
    for name, m in MODELS.items():
        deadline = "1h" if args.traffic != "open" else real(m["deadline"], args.timescale)
        out[name] = {
            "route": f"/{name}/",
            "cmd": ["simworker", "--port", "{port}", "--name", f"{m['worker']}@{fleet.tag}-{host.name}",
                    "--resident", m["resident"], "--per-request", m["per_request"], "--cache", "release",
                    "--load-time", f"{m['load']}s", "--run-time", f"{m['run']}s",
                    "--run-jitter", str(m["jitter"]), "--contention", str(m["contention"]),
                    "--seed", str(host.i)],
            "memory": {"resident": m["mem"], "per_request": m["per_request"]},
            "concurrency": m["slots"], "queue_max": 4096, "deadline": deadline, "keep_alive": "1h",
            "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
            "startup_timeout": "60s", "stop_timeout": "2s",
        }
    return out


def haproxy_config(n, path, args, factor):
    """The shipped file (or --haproxy-cfg): its chat backend once per model (prefix routes), the
    image backend and the server lines of hosts past n taken out; nothing else changed unless
    factor (--balance-factor) sets `hash-balance-factor` in every model backend (0: takes it out)."""
    text = Path(args.haproxy_cfg).read_text() if args.haproxy_cfg else fleetkit.HAPROXY_CFG.read_text()
    if factor is not None:
        text = re.sub(r"(    hash-type consistent\n)(    hash-balance-factor \d+\n)?",
                      "\\1" + (f"    hash-balance-factor {factor}\n" if factor else ""), text)
    chat = re.search(r"backend vramd_chat\n(.*?)\n\n", text, re.S).group(0)
    image = re.search(r"backend vramd_image\n(.*?)\n\n", text, re.S).group(0)
    text = text.replace(chat, "".join(chat.replace("chat", m) for m in MODELS)).replace(image, "")
    text = re.sub(r"    use_backend vramd_chat .*\n", "".join(
        f"    use_backend vramd_{m} if {{ path_beg /{m}/ }}\n" for m in MODELS), text)
    text = re.sub(r"    use_backend vramd_image .*\n", "", text)
    text = "\n".join(line for line in text.splitlines()
                     if not re.match(r"\s+server h(\d+)(-load)? ", line)
                     or int(re.match(r"\s+server h(\d+)", line).group(1)) <= n)
    path.write_text(text + "\n")
    return path


def plan(n, args):
    """[(t_sim, model)]: the run's arrivals (seeded; the same mix per host for every n)."""
    rng = random.Random(args.seed * 1000 + n)
    if args.traffic in ("burst", "closed"):
        total = sum(m["share"] for m in MODELS.values())
        per_host = []
        for name, m in MODELS.items():
            per_host += [name] * round(args.per_host * m["share"] / total)
        seq = per_host * n
        rng.shuffle(seq)
        return [(i * 0.001 / args.timescale, name) for i, name in enumerate(seq)]
    rate = args.rate_per_host * n / 60.0  # per simulated second
    names = list(MODELS)
    weights = [MODELS[k]["share"] for k in names]
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= args.duration:
            return out
        out.append((t, rng.choices(names, weights)[0]))


def cpu_busy():
    """(busy, total) jiffies of the whole box, /proc/stat."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def proc_cpu(pids):
    """utime+stime(+children's) in seconds of the given processes (those still there)."""
    total = 0
    for pid in pids:
        try:
            parts = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in parts[11:15])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def fleet_pids(fleet):
    pids = [fleet.haproxy.pid] if fleet.haproxy else []
    for h in fleet.hosts:
        out = subprocess.run(["ip", "netns", "pids", h.ns], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    return pids


def start_ticks(pid):
    """A process's start time (/proc/PID/stat field 22): with the pid, names it beyond pid reuse."""
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def metric(host, family, label=None):
    st, _, body = host.get("/metrics")
    total = 0.0
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(family + "{") or line.startswith(family + " "):
            if label and label not in line:
                continue
            total += float(line.split()[-1])
    return total


def per_model(host, family, label=None):
    """{model: value} of a counter family, summed over its other labels."""
    st, _, body = host.get("/metrics")
    out = {}
    for line in body.decode(errors="replace").splitlines():
        if not line.startswith(family + "{") or (label and label not in line):
            continue
        mm = re.search(r'model="([^"]+)"', line)
        if mm:
            out[mm.group(1)] = out.get(mm.group(1), 0) + float(line.split()[-1])
    return out


def send_one(fleet, i, name, args):
    headers = {}
    if args.traffic == "open":
        headers["X-Vramd-Deadline"] = real(MODELS[name]["deadline"], args.timescale)
    sent = time.monotonic()
    st, _, body = fleet.request(f"/{name}/generate", body={"prompt": "x", "seed": i}, headers=headers,
                                timeout=args.request_timeout)
    code = None
    if st != 200:
        try:
            code = json.loads(body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = body[:120].decode(errors="replace")
    return sent, time.monotonic(), st, code


def send_all(fleet, arrivals, n, args):
    """Send the arrivals: burst and open, each at its time (one thread each); closed, by
    n x --clients clients taking the next one as soon as their last is answered.
    [(model, t_sent, latency, status, code, t_done)], times from the start in real seconds."""
    results = [None] * len(arrivals)
    t0 = time.monotonic() + 0.2
    lock = threading.Lock()
    nxt = [0]

    def record(i, name):
        sent, done, st, code = send_one(fleet, i, name, args)
        results[i] = (name, sent - t0, done - sent, st, code, done - t0)

    def timed(i, t_sim, name):
        delay = t0 + t_sim * args.timescale - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        record(i, name)

    def client():
        delay = t0 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(arrivals):
                return
            record(i, arrivals[i][1])

    if args.traffic == "closed":
        threads = [threading.Thread(target=client, daemon=True) for _ in range(n * args.clients)]
    else:
        threads = [threading.Thread(target=timed, args=(i, t, m), daemon=True) for i, (t, m) in enumerate(arrivals)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + args.request_timeout * (len(arrivals) if args.traffic == "closed" else 1) + 60
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic()))
    return [r for r in results if r is not None]


def trace_weights(fleet, out, stop, t0):
    """--trace: every 250 ms, each model backend's servers as HAProxy sees them: weight
    (the agent's last answer), sessions now, queued at HAProxy."""
    while not stop.wait(0.25):
        try:
            text = fleet.hap_cmd("show stat").lstrip("# ")
        except OSError:
            continue
        snap = {}
        for r in csv.DictReader(io.StringIO(text)):
            if r["pxname"].startswith("vramd_") and r["svname"] not in ("FRONTEND", "BACKEND"):
                snap.setdefault(r["pxname"][6:], {})[r["svname"]] = [int(r["weight"] or 0), int(r["scur"] or 0),
                                                                     int(r["qcur"] or 0)]
        out.append([round(time.monotonic() - t0, 2), snap])


def hap_requests(log, epoch0):
    """--trace: each request in HAProxy's log: [accepted (s from the run's start), model, server,
    status, retries]. The log's date is local time to the millisecond."""
    out = []
    pat = r"\[(\d+/\w+/\d+:\d+:\d+:\d+\.\d+)\] vramd vramd_(\w+)/(\S+) \S+ (\d+) .*? \d+/\d+/\d+/\d+/\+?(\d+) "
    for m in re.finditer(pat, log):
        try:
            when = time.mktime(time.strptime(m.group(1)[:-4], "%d/%b/%Y:%H:%M:%S")) + float("0" + m.group(1)[-4:])
        except ValueError:
            continue
        out.append([round(when - epoch0, 3), m.group(2), m.group(3), int(m.group(4)), int(m.group(5))])
    return sorted(out)


def hap_backend_stats(fleet):
    """Per model backend: HAProxy's retries, redispatches, 5xx answered by servers."""
    out = {}
    for m in MODELS:
        rows = fleet.servers(f"vramd_{m}")
        out[m] = {
            "retries": sum(int(r["wretr"] or 0) for r in rows.values()),
            "redispatches": sum(int(r["wredis"] or 0) for r in rows.values()),
            "server_5xx": sum(int(r["hrsp_5xx"] or 0) for r in rows.values()),
            "sessions": {k: int(r["stot"] or 0) for k, r in rows.items()},
        }
    return out


def run_one(n, rep, args, tmp, factor=None):
    fleet = fleetkit.Fleet(tmp, timescale=args.timescale)
    try:
        for h in fleet.make_hosts(n):
            base = h.config

            def cfg(models, jobs=None, base=base):
                c = base(models, jobs)
                c["limits"]["queue_max"] = 16384
                return c
            h.config = cfg
            h.start(model_configs(fleet, h, args))
        fleet.start_haproxy(cfg=haproxy_config(n, tmp / f"haproxy-{n}.cfg", args, factor))
        for m in MODELS:  # every server up and answered by its agent before the traffic
            fleet.wait_weights(f"vramd_{m}", lambda v: all(s.startswith("UP") for s, _ in v.values()),
                               f"{m}: every server up", timeout=20)
        time.sleep(0.5)
        started = {"netns": [h.ns for h in fleet.hosts], "gpu_sets": [h.gpu_set for h in fleet.hosts],
                   "pids": [[pid, start_ticks(pid)] for pid in fleet_pids(fleet)]}
        arrivals = plan(n, args)
        load0 = os.getloadavg()
        busy0, tot0 = cpu_busy()
        ours0 = proc_cpu(fleet_pids(fleet)) + sum(os.times()[:2])
        wall0, epoch0 = time.monotonic(), time.time()
        trace, stop_trace = [], threading.Event()
        tracer = threading.Thread(target=trace_weights, args=(fleet, trace, stop_trace, wall0), daemon=True)
        if args.trace:
            tracer.start()
        results = send_all(fleet, arrivals, n, args)
        stop_trace.set()
        wall = time.monotonic() - wall0
        ours1 = proc_cpu(fleet_pids(fleet)) + sum(os.times()[:2])
        busy1, tot1 = cpu_busy()
        load1 = os.getloadavg()
        ncpu = os.cpu_count() or 1
        ts = args.timescale
        ok = [r for r in results if r[3] == 200]
        first = min(r[1] for r in results)
        last = max(r[5] for r in results)
        makespan = (last - first) / ts
        lat = sorted(r[2] / ts for r in ok)
        hits = sum(1 for r in ok if r[2] / ts <= MODELS[r[0]]["deadline"])
        work = sum(MODELS[r[0]]["run"] for r in ok)
        loads = {h.name: per_model(h, "vramd_model_loads_total") for h in fleet.hosts}
        evictions = sum(metric(h, "vramd_model_unloads_total", 'reason="evicted"') for h in fleet.hosts)
        ooms = sum(metric(h, "vramd_oom_total") for h in fleet.hosts)
        oom_logs = sum(h.log_path.read_text(errors="replace").lower().count("out of memory")
                       for h in fleet.hosts if h.log_path.exists())
        san = sum(len(sanitizer_reports(h.log_path.read_text(errors="replace")))
                  for h in fleet.hosts if h.log_path.exists())
        vramd_503 = sum(metric(h, "vramd_requests_total", f'outcome="{c}"') for h in fleet.hosts
                        for c in ("queue_full", "deadline_unmeetable", "draining", "cannot_fit", "gpu_unavailable",
                                  "model_failed"))
        vramd_504 = sum(metric(h, "vramd_requests_total", 'outcome="deadline_exceeded"') for h in fleet.hosts)
        n_loads = sum(sum(v.values()) for v in loads.values())
        first_loads = sum(1 for v in loads.values() for x in v.values() if x > 0)
        hap = hap_backend_stats(fleet)
        tiers = {}
        for m in re.finditer(r" vramd vramd_(\w+)/(\S+) ", fleet.hap_log_text(10 ** 8)):
            tiers.setdefault(m.group(1), {}).setdefault(m.group(2), 0)
            tiers[m.group(1)][m.group(2)] += 1
        codes = {}
        for r in results:
            if r[3] != 200:
                key = f"{r[3]} {r[4]}"
                codes[key] = codes.get(key, 0) + 1
        return {
            "hosts": n, "rep": rep, "config": config_name(factor, args.haproxy_cfg), "traffic": args.traffic,
            "timescale": ts,
            "sent": len(arrivals), "answered": len(results), "ok": len(ok),
            "failed": codes,
            "client_503": sum(1 for r in results if r[3] == 503),
            "makespan_s": round(makespan, 1),
            "throughput_rps": round(len(ok) / makespan, 4),
            "work_per_s": round(work / makespan, 3),
            "work_done": round(work / sum(MODELS[m]["run"] for _, m in arrivals), 3),
            "deadline_hit": round(hits / len(arrivals), 3),
            "p50_s": round(lat[len(lat) // 2], 1) if lat else None,
            "p95_s": round(lat[int(len(lat) * 0.95)], 1) if lat else None,
            "ooms": int(ooms), "oom_log_lines": oom_logs, "sanitizer_reports": san,
            "vramd_503": int(vramd_503), "vramd_504": int(vramd_504),
            "haproxy_retries": sum(v["retries"] for v in hap.values()),
            "haproxy_redispatches": sum(v["redispatches"] for v in hap.values()),
            "loads": n_loads, "reloads": n_loads - first_loads, "evictions": int(evictions),
            "loads_by_host": loads,
            "served_by_host": {m: {h.name: h.served(m) for h in fleet.hosts} for m in MODELS},
            "haproxy": hap,
            "haproxy_log_servers": tiers,
            "requests_trace": hap_requests(fleet.hap_log_text(10 ** 8), epoch0) if args.trace else [],
            "wall_s": round(wall, 1),
            "started": started,
            "weights_trace": trace,
            "cpu_box_busy_cores": round((busy1 - busy0) / max(1, tot1 - tot0) * ncpu, 2),
            "cpu_fleet_cores": round((ours1 - ours0) / wall, 2),
            "loadavg_start_end": [round(load0[0], 2), round(load1[0], 2)],
        }
    finally:
        fleet.close()


def config_name(factor, cfg=None):
    """How a run's HAProxy config differs (or not) from the file, named by its balance factor."""
    if factor is None:
        m = re.search(r"hash-balance-factor (\d+)", Path(cfg or fleetkit.HAPROXY_CFG).read_text())
        return f"as shipped ({'hash-balance-factor ' + m.group(1) if m else 'no hash-balance-factor'})"
    return f"hash-balance-factor {factor}" if factor else "no hash-balance-factor"


def median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None


def summary(runs, setups, cfg=None):
    """Medians per setup (config, host count), and the scaling efficiency per repetition
    against that repetition's 1-host run (one server: the balance factor changes nothing)."""
    one = {r["rep"]: r for r in runs if r["hosts"] == 1}
    table = []
    for factor, n in setups:
        rs = [r for r in runs if r["hosts"] == n and (n == 1 or r["config"] == config_name(factor, cfg))]
        eff = [r["throughput_rps"] / (n * one[r["rep"]]["throughput_rps"]) for r in rs if r["rep"] in one]
        eff_w = [r["work_per_s"] / (n * one[r["rep"]]["work_per_s"]) for r in rs if r["rep"] in one]
        row = {"config": config_name(factor, cfg) if n > 1 else "(one server)", "hosts": n, "runs": len(rs)}
        for k in ("ok", "sent", "makespan_s", "throughput_rps", "work_per_s", "deadline_hit", "p50_s", "p95_s",
                  "ooms", "client_503", "vramd_503", "vramd_504", "haproxy_retries", "loads", "reloads", "evictions",
                  "cpu_box_busy_cores", "cpu_fleet_cores"):
            row[k] = median([r[k] for r in rs])
        row["efficiency"] = median(eff)
        row["efficiency_work"] = median(eff_w)
        row["efficiency_each"] = [round(e, 3) for e in eff]
        table.append(row)
    return table


def print_table(table):
    cols = [("config", 40), ("hosts", 5), ("ok", 5), ("sent", 5), ("makespan_s", 10), ("throughput_rps", 14),
            ("work_per_s", 10),
            ("efficiency", 10), ("deadline_hit", 12), ("p50_s", 6), ("p95_s", 6), ("ooms", 4), ("client_503", 10),
            ("vramd_503", 9), ("loads", 5), ("reloads", 7), ("evictions", 9), ("cpu_box_busy_cores", 18)]
    print(" ".join(f"{c:>{w}}" for c, w in cols))
    for row in table:
        print(" ".join(f"{'' if row[c] is None else row[c]!s:>{w}}" for c, w in cols))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="1,2,3", help="host counts, comma-separated (1 is needed for the efficiency)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--traffic", choices=("closed", "burst", "open"), default="closed")
    ap.add_argument("--clients", type=int, default=8, help="closed: clients per host")
    ap.add_argument("--mix", choices=("nofit", "fits"), default="nofit",
                    help="nofit: llm, sd35, vlm, trellis (do not fit one GPU together); fits: sd35, vlm, validator")
    ap.add_argument("--per-host", type=int, default=60, help="closed, burst: requests per host")
    ap.add_argument("--rate-per-host", type=float, default=12.0, help="open: requests per simulated minute per host")
    ap.add_argument("--duration", type=float, default=600.0, help="open: simulated seconds of arrivals")
    ap.add_argument("--timescale", type=float, default=0.05, help="SIMGPU_TIMESCALE: simulated -> real time")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--request-timeout", type=float, default=600.0, help="real seconds per request")
    ap.add_argument("--smoke", action="store_true",
                    help="1 and 2 hosts, 1 rep, 4 requests per host, time scale 0.02: checks that it runs, "
                         "not a result")
    ap.add_argument("--haproxy-cfg", help="another HAProxy config in the shipped file's shape (default: contrib's)")
    ap.add_argument("--balance-factor", default="",
                    help="comma-separated: run the 2+ host setups also with hash-balance-factor F in every model "
                         "backend (0: without one; 'shipped': the file as it is, the default)")
    ap.add_argument("--trace", action="store_true", help="record HAProxy's server weights every 250 ms in the JSON")
    ap.add_argument("--out", help="the JSON file to write (default bench/results/fleet-scaling-<traffic>-<stamp>.json)")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.reps, args.per_host, args.timescale = "1,2", 1, 4, 0.02
    hosts = [int(x) for x in args.hosts.split(",")]
    if args.mix == "fits":
        MODELS.clear()
        MODELS.update(MIX_FITS)
    why = fleetkit.netns_unavailable()
    if why:
        sys.exit(f"fleet bench: {why}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks clean up
    runs = []
    started = time.time()
    factors = [None if f in ("", "shipped") else int(f) for f in args.balance_factor.split(",")]
    setups = [(None, n) if n == 1 else (f, n) for n in hosts for f in (factors if n > 1 else [None])]
    for rep in range(args.reps):
        for factor, n in (setups if rep % 2 == 0 else list(reversed(setups))):
            with tempfile.TemporaryDirectory(prefix=f"fleetscale-{n}-") as d:
                r = run_one(n, rep, args, Path(d), factor)
            runs.append(r)
            brief = {k: v for k, v in r.items()
                     if k not in ("haproxy", "loads_by_host", "weights_trace", "requests_trace", "started")}
            print(json.dumps(brief), flush=True)
    table = summary(runs, setups, args.haproxy_cfg)
    print()
    print_table(table)
    kind = ("smoke" if args.smoke else args.traffic) + ("-fits" if args.mix == "fits" else "")
    out = Path(args.out) if args.out else (
        ROOT / "bench" / "results" / f"fleet-scaling-{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"args": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "elapsed_s": round(time.time() - started), "nproc": os.cpu_count(),
            "models": MODELS, "haproxy_cfg": args.haproxy_cfg or str(fleetkit.HAPROXY_CFG.relative_to(ROOT))}
    out.write_text(json.dumps({"meta": meta, "summary": table, "runs": runs}, indent=1) + "\n")
    print(f"\n{out}")


if __name__ == "__main__":
    main()
