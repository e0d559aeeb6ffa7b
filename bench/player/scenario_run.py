#!/usr/bin/python3
"""scenario_run: run one field scenario end to end on a simulated GPU, under one setup.

Setups:
  vramd        the scenario's vramd.yaml (time-scaled) in front of its workers
  direct       the same workers started without vramd, no fix (bench/player/direct.py)
  lock         the same, each simworker with --lock (each server serialises itself)
  global-lock  the same, every simworker sharing one --global-lock (one request on the GPU)

Steps: create a fresh simulated GPU from the scenario's gpu.txt (under a unique name),
start the scenario's external servers (every *.sh in the scenario folder), start the setup
(optionally loading models through vramd first: `warm`), replay traffic.json with the
player, stop everything, remove the GPU. Returns the player's summary plus the GPU memory
peak and the OOMs the workers themselves logged. run() may run in several threads at once
(each run its own GPU, port and work folder; examples/demo_parking.py does).

    /usr/bin/python3 bench/player/scenario_run.py examples/seed004-vlm-6gb --setup vramd \\
        --timescale 0.02 --duration 5m --json /tmp/r.json
"""
import argparse
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
if os.path.join(ROOT, "tests", "lib") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))  # the tests' kit (vramdkit)
from vramdkit import free_port  # noqa: E402


_RUNS = itertools.count()


def wait_http(url, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(p, grace=10):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def count_ooms(path):
    try:
        with open(path, errors="replace") as f:
            return sum(1 for line in f if "out of memory" in line.lower())
    except OSError:
        return 0


def warm_vramd(port, names, timeout):
    """Load the models through vramd (POST /v1/models/NAME/load, all at once, each answered
    once READY), so the traffic meets warm models as the direct setup's does."""
    errors = []

    def one(name):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/models/%s/load" % (port, name), data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                if r.status != 200:
                    errors.append("%s answered %d" % (name, r.status))
        except OSError as e:
            errors.append("%s: %s" % (name, e))

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("warm-up: " + "; ".join(errors))


def model_names(vramd_yaml):
    """The model names of a vramd.yaml, in file order (textual: a 2-space-indented key under
    the top-level `models:`)."""
    names, inside = [], False
    with open(vramd_yaml) as f:
        for line in f:
            if line.strip() and not line.startswith((" ", "#")):
                inside = line.startswith("models:")
            elif inside and re.match(r"^  [A-Za-z0-9_.-]+:", line):
                names.append(line.split(":", 1)[0].strip())
    return names


def run(scenario, setup, build="build", timescale=0.02, duration=None, requests=None, seed=None,
        workdir=None, verbose=False, warm=None, config=None, traffic=None):
    """One run. config / traffic: a vramd.yaml / traffic.json to use instead of the
    scenario's own (same GPU, same external servers). warm (vramd only): None, or the
    models to load through vramd before the traffic starts (True: every model of the config),
    as the direct setup starts every worker and waits for it before the traffic."""
    scenario = os.path.abspath(scenario)
    name = os.path.basename(scenario.rstrip("/"))
    build_abs = os.path.join(ROOT, build)
    work = workdir or tempfile.mkdtemp(prefix="scn-%s-%s-" % (name, setup))
    os.makedirs(work, exist_ok=True)
    # unique per run, also when one process runs several at once (examples/demo.py does)
    gpu_name = "scn%d%s%d" % (os.getpid(), re.sub(r"[^a-z0-9]", "", setup), next(_RUNS))
    env = dict(os.environ, SIMGPU=gpu_name, SIMGPU_TIMESCALE=str(timescale),
               PATH=os.path.join(build_abs, "bin") + ":" + os.environ.get("PATH", ""),
               VRAMD_NVML_LIBRARY=os.path.join(build_abs, "lib", "libnvidia-ml-sim.so"),
               VRAMD_CUDA_LIBRARY=os.path.join(build_abs, "lib", "libcuda-sim.so"))
    with open(os.path.join(scenario, "gpu.txt")) as f:
        create = [line for line in f.read().splitlines() if line.strip().startswith("simgpu create")][0]
    argv = shlex.split(create)
    argv[2] = gpu_name
    argv[0] = os.path.join(build_abs, "bin", "simgpu")
    subprocess.run(argv, env=env, check=True, capture_output=True)
    externals, front = [], None
    worker_log = os.path.join(work, "workers.log")
    try:
        for sh in sorted(f for f in os.listdir(scenario) if f.endswith(".sh")):
            externals.append(subprocess.Popen(["sh", os.path.join(scenario, sh)], env=env, cwd=ROOT,
                                              stdout=open(worker_log, "ab"), stderr=subprocess.STDOUT,
                                              start_new_session=True))
        port = free_port()
        if setup == "vramd":
            scaled = subprocess.run([PY, os.path.join(ROOT, "bench/player/scale_config.py"),
                                     config or os.path.join(scenario, "vramd.yaml")], env=env, check=True,
                                    capture_output=True, text=True).stdout
            scaled = re.sub(r"(?m)^listen:.*$", "listen: 127.0.0.1:%d" % port, scaled)
            scaled = re.sub(r"(?m)^state_dir:.*$", "state_dir: %s" % os.path.join(work, "var"), scaled)
            cfg = os.path.join(work, "vramd.yaml")
            with open(cfg, "w") as f:
                f.write(scaled)
            front = subprocess.Popen([os.path.join(build_abs, "bin", "vramd"), "--config", cfg], env=env, cwd=ROOT,
                                     stdout=open(os.path.join(work, "vramd.log"), "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
            ok = wait_http("http://127.0.0.1:%d/healthz" % port, 20)
            if ok and warm:
                warm_vramd(port, model_names(cfg) if warm is True else warm, 300)
        else:
            fix = {"direct": "none", "lock": "lock", "global-lock": "global-lock"}[setup]
            front = subprocess.Popen([PY, os.path.join(ROOT, "bench/player/direct.py"),
                                      config or os.path.join(scenario, "vramd.yaml"), "--port", str(port), "--fix", fix,
                                      "--lock-file", os.path.join(work, "gpu.lock"), "--log", worker_log],
                                     env=env, cwd=ROOT, stdout=open(os.path.join(work, "direct.log"), "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
            # ready when every worker it started answers its health check (models loaded)
            ok = wait_http("http://127.0.0.1:%d/__direct_ready" % port, 300)
        if not ok:
            raise RuntimeError("%s did not start (see %s)" % (setup, work))
        out = os.path.join(work, "player.json")
        cmd = [PY, os.path.join(ROOT, "bench/player/player.py"), traffic or scenario, "--url", "http://127.0.0.1:%d" % port,
               "--json", out, "--timescale", str(timescale), "--simgpu", gpu_name]
        if duration:
            cmd += ["--duration", duration]
        if requests:
            cmd += ["--requests", str(requests)]
        if seed is not None:
            cmd += ["--seed", str(seed)]
        subprocess.run(cmd, env=env, cwd=ROOT, check=True,
                       stdout=None if verbose else subprocess.DEVNULL)
        with open(out) as f:
            result = json.load(f)
    finally:
        stop(front, grace=30)
        for p in externals:
            stop(p)
        subprocess.run([os.path.join(build_abs, "bin", "simgpu"), "rm", gpu_name], env=env, capture_output=True)
    vramd_log = os.path.join(work, "vramd.log")
    result["worker_ooms_logged"] = count_ooms(worker_log) + (count_ooms(vramd_log) if setup == "vramd" else 0)
    result["setup"] = setup
    result["scenario"] = name
    result["workdir"] = work
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--setup", choices=["vramd", "direct", "lock", "global-lock"], default="vramd")
    ap.add_argument("--build", default="build")
    ap.add_argument("--timescale", type=float, default=0.02)
    ap.add_argument("--duration")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    r = run(a.scenario, a.setup, a.build, a.timescale, a.duration, a.requests, a.seed, verbose=a.verbose)
    s = r["summary"]
    print(json.dumps({"scenario": r["scenario"], "setup": r["setup"], "requests": s["requests"],
                      "succeeded": s["succeeded"], "oom": s["oom"], "worker_ooms_logged": r["worker_ooms_logged"],
                      "error_codes": s["error_codes"], "latency_s": s["latency_s"],
                      "deadline_hit_rate": s["deadline_hit_rate"], "gpu_peak": r.get("gpu_peak"),
                      "workdir": r["workdir"]}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
