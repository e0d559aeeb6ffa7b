#!/usr/bin/python3
"""bench/parking/seed001.py: seed001's generation-and-validation round with the validator
parked, against unload/reload (issue 13).

examples/seed001-gen-and-validate-4090 as it is (the generator supervised, the validator an
external server started like validator.sh, on a free port), on its simulated 24 GiB card:
each generation (8.3 + 11.3 GiB) needs the validator (4.7 GiB) out of the way, each
validation needs it back. One round = POST /gen/generate/ then POST
/val/validate_txt_to_3d_ply/ (traffic.json's pipeline), sent one after the other by one
client (closed loop), so a round's time is what one generation-and-validation costs. Three
setups of the validator, the rest unchanged:

  unload      the example: unload/reload hooks (/unload_models/ 1 s, /reload_models/ = its 8 s load)
  checkpoint  + `checkpoint: true` (the CUDA driver parks it; simulated PCIe 20 GB/s), hooks kept as the next tier
  sleep       + sleep/wake hooks (/sleep?level=1, /wake_up: --sleep-time/--wake-time 4.7 GiB at 20 GB/s)

with `host_memory: { budget: 16GiB, reserve: 2GiB }` for the two park setups. The setups
run in turn, the order reversed every other repetition.

  /usr/bin/python3 bench/parking/seed001.py [--rounds 6] [--reps 2] [--timescale 0.1]

Run from the repository root after `make`. Prints per setup the median round (simulated s),
its parts, and vramd's events; writes bench/results/parking-seed001-STAMP.json.
"""
import argparse
import json
import os
import re
import shlex
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lib"))

from vramdkit import binary, free_port, sim_env  # noqa: E402
from vramdkit.daemon import ExternalWorker, Vramd  # noqa: E402

SCN = ROOT / "examples" / "seed001-gen-and-validate-4090"
COPY_S = 4.7 * 2**30 / 20e9  # the validator's 4.7 GiB at 20 GB/s
UNLOAD_LINE = "    unload: { method: POST, path: /unload_models/ }\n"
SETUPS = ("unload", "checkpoint", "sleep")


def config_text(setup, port, state_dir, val_port, timescale):
    text = (SCN / "vramd.yaml").read_text()
    assert UNLOAD_LINE in text, "examples/seed001: the validator's unload hook line changed"
    if setup == "checkpoint":
        text = text.replace(UNLOAD_LINE, "    checkpoint: true\n" + UNLOAD_LINE)
    elif setup == "sleep":
        text = text.replace(UNLOAD_LINE, "    sleep: { method: POST, path: /sleep?level=1 }\n"
                            "    wake: { method: POST, path: /wake_up }\n" + UNLOAD_LINE)
    if setup != "unload":
        text = re.sub(r"(?m)^models:\s*$", "host_memory: { budget: 16GiB, reserve: 2GiB }\nmodels:", text, count=1)
    text = text.replace("url: http://127.0.0.1:10006", "url: http://127.0.0.1:%d" % val_port)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    scaled = subprocess.run([sys.executable, str(ROOT / "bench/player/scale_config.py"), f.name,
                             "--timescale", str(timescale)], check=True, capture_output=True, text=True).stdout
    os.unlink(f.name)
    scaled = re.sub(r"(?m)^listen:.*$", "listen: 127.0.0.1:%d" % port, scaled)
    scaled = re.sub(r"(?m)^state_dir:.*$", "state_dir: %s" % state_dir, scaled)
    scaled = re.sub(r"(?m)^log:.*$", "log: { format: json, level: info }", scaled)
    return scaled.replace("./build/lib/", str(ROOT / "build" / "lib") + "/")


def validator_argv(port):
    sh = (SCN / "validator.sh").read_text().replace("\\\n", " ")
    line = next(ln for ln in sh.splitlines() if ln.strip().startswith("exec simworker"))
    argv = shlex.split(line)[1:]
    argv = [a for a in argv if a != '"$@"' and a != "$@"]
    i = argv.index("--port")
    argv[i + 1] = str(port)
    argv[0] = str(binary("simworker"))
    return argv + ["--sleep-time", "%.3fs" % COPY_S, "--wake-time", "%.3fs" % COPY_S]


def post(vd, path, body, ctype):
    t0 = time.monotonic()
    r = vd.request("POST", path, body, {"Content-Type": ctype}, timeout=600)
    dt = time.monotonic() - t0
    if r.status != 200:
        raise RuntimeError("%s: HTTP %s %r\n%s" % (path, r.status, r.body[:300], vd.log_tail(40)))
    return dt


def run_setup(setup, a, tmp):
    traffic = json.loads((SCN / "traffic.json").read_text())["requests"]
    gen, val = traffic["generate"], traffic["validate"]
    gen_body = "&".join("%s=%s" % (k, v.replace("{rand}", "7").replace(" ", "+")) for k, v in gen["form"].items())
    val_body = json.dumps(val["json"])
    gpu_set = "pbseed001.%d.%s" % (os.getpid(), setup)
    env = sim_env(gpu_set, a.timescale)
    create = [ln for ln in (SCN / "gpu.txt").read_text().splitlines() if ln.startswith("simgpu create")][0]
    argv = shlex.split(create)
    argv[0], argv[2] = str(binary("simgpu")), gpu_set
    subprocess.run(argv, env=env, check=True, capture_output=True)
    vd = worker = None
    try:
        val_port = free_port()
        worker = ExternalWorker(validator_argv(val_port), val_port, "validator", tmp / ("val-%s.log" % setup),
                                env=env, cwd=tmp, start_timeout=60, what="validator")
        cfg = config_text(setup, free_port(), tmp / ("var-%s" % setup), val_port, a.timescale)
        vd = Vramd(tmp, "vramd-%s" % setup, cfg, gpu_set=gpu_set, cwd=ROOT, stdout_apart=False, http="stdlib",
                   start_timeout=60, stop_timeout=120, request_timeout=600,
                   extra_env={"SIMGPU_TIMESCALE": str(a.timescale)})
        vd.start()
        post(vd, gen["path"], gen_body, "application/x-www-form-urlencoded")  # warm: loads, first swap
        post(vd, val["path"], val_body, "application/json")
        rounds = []
        for _ in range(a.rounds):
            g = post(vd, gen["path"], gen_body, "application/x-www-form-urlencoded")
            v = post(vd, val["path"], val_body, "application/json")
            rounds.append({"round_s": (g + v) / a.timescale, "generate_s": g / a.timescale,
                           "validate_s": v / a.timescale})
        count = lambda ev: len(vd.events(ev, model="validator"))  # noqa: E731
        text = vd.log_text() + worker.log()
        row = {"setup": setup, "rounds": rounds,
               "round_median_s": round(st.median(r["round_s"] for r in rounds), 2),
               "generate_median_s": round(st.median(r["generate_s"] for r in rounds), 2),
               "validate_median_s": round(st.median(r["validate_s"] for r in rounds), 2),
               "evictions": count("eviction"), "parked": count("parked"), "resumed": count("resumed"),
               "park_refused": count("park_refused"), "unload_hooks": count("unload_hook_done"),
               "reload_hooks": count("reload_hook_done"),
               "tiers": sorted({e.get("tier") for e in vd.events("parked", model="validator")}),
               "oom_lines": text.count("out of memory")}
        return row
    finally:
        if vd is not None and vd.alive():
            vd.stop(timeout=120)
        if worker is not None:
            worker.close()
        subprocess.run([str(binary("simgpu")), "rm", gpu_set], env=env, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--timescale", type=float, default=0.1)
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(a.json or ROOT / "bench" / "results" / ("parking-seed001-%s.json" % stamp))
    out.parent.mkdir(parents=True, exist_ok=True)
    setups = a.setups.split(",")
    reps = []
    with tempfile.TemporaryDirectory(prefix="pbseed001-") as d:
        for rep in range(a.reps):
            runs = {}
            for setup in (setups if rep % 2 == 0 else list(reversed(setups))):
                row = run_setup(setup, a, Path(d))
                runs[setup] = row
                print("rep %d %-10s round median %6.2f s sim (generate %6.2f, validate %5.2f); evictions %d "
                      "parked %d (%s) resumed %d refused %d unload/reload hooks %d/%d; OOM lines %d"
                      % (rep, setup, row["round_median_s"], row["generate_median_s"], row["validate_median_s"],
                         row["evictions"], row["parked"], "/".join(row["tiers"]) or "-", row["resumed"],
                         row["park_refused"], row["unload_hooks"], row["reload_hooks"], row["oom_lines"]), flush=True)
            if "unload" in runs:
                for s in runs:
                    runs[s]["ratio_to_unload"] = round(runs[s]["round_median_s"] / runs["unload"]["round_median_s"], 3)
            reps.append(runs)
            out.write_text(json.dumps({"args": vars(a), "reps": reps}, indent=1) + "\n")
    for s in setups:
        rm = st.median(r[s]["round_median_s"] for r in reps)
        ratio = [r[s].get("ratio_to_unload") for r in reps if r[s].get("ratio_to_unload")]
        print("%-10s round median over reps %6.2f s sim; / unload within a rep: %s"
              % (s, rm, ", ".join("%.3f" % x for x in ratio) or "-"))
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
