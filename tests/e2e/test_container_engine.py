"""e2e with a real container engine: Podman (runc, cgroupfs) in an isolated setup per test
(vramdkit.containers), a simworker image built locally from build/bin/simworker, workers on
a simulated GPU set shared with the containers through -v /dev/shm:/dev/shm.

Part 1, the engine and the simulator alone (no vramd):
  - a simworker container (private PID namespace, the default) becomes healthy, its memory
    is booked on the simulated GPU, `podman stop` ends it and the memory comes back;
  - the same with --pid host (the simulator books the host pid itself).

Part 2, vramd supervising containers (docs: the `container:` model block and the cgroup
contract of issue 21; skipped while `vramd --check-config` refuses a `container:` block):
  - a `container:` model is served through vramd, and its memory is booked to its instance;
  - an unload stops it with the engine: no container left, the memory back;
  - vramd SIGKILLed while its container runs, started again with the same state_dir: no
    container of the first run is left, the memory comes back;
  - a plain `cmd: [podman, run, ...]` model is served and unloaded the same way.

Each test is bounded well under 60 s; the `podman` fixture removes every container, image and
the storage at teardown, and fails the test when a process of the setup outlives it. Tests
skip (with the reason) where no container can run.
"""
import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

from e2ekit import SIMGPU, TIMESCALE, gpu_section, simgpu, wait_nvml  # noqa: F401  (simgpu: a fixture)
from vramdkit.containers import podman  # noqa: F401  (fixture)
from vramdkit.net import free_port, request
from vramdkit.paths import vramd_binary
from vramdkit.waits import wait_for

MiB = 1 << 20
CONTEXT = 64 * MiB
RESIDENT = 256 * MiB
HELD = CONTEXT + RESIDENT          # what a loaded simworker holds with the flags below
WORKER_FLAGS = ["--context", "64MiB", "--resident", "256MiB", "--per-request", "128MiB",
                "--output", "json", "--output-size", "1KiB", "--run-time", "0.1s"]


# --- the simulated GPU's view ---------------------------------------------------------------

def sim_show(gpu_set):
    p = subprocess.run([str(SIMGPU), "show", gpu_set, "--json"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def wait_for_booking(gpu_set, gpu=0, timeout=5.0):
    """GPU gpu's record once it holds at least HELD bytes, or None after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        g = sim_show(gpu_set)["gpus"][gpu]
        if g["used"] >= HELD:
            return g
        time.sleep(0.1)
    return None


def wait_memory_back(gpu_set, what, timeout=15):
    wait_for(lambda: all(g["used"] == 0 for g in sim_show(gpu_set)["gpus"]), timeout=timeout,
             what=f"the simulated GPUs' memory back after {what}")


# --- part 1: podman and the simulator, no vramd -------------------------------------------------

class Attached:
    """`podman run --rm ...` in the foreground (as a supervisor runs it), output to a file."""

    def __init__(self, pm, argv, log_path):
        self.pm = pm
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(["podman", *argv], env=pm.env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def output(self):
        return self.log_path.read_text(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


def run_worker(pm, image, gpu_set, name, port, tmp_path, *extra_run):
    argv = ["run", "--rm", "--name", name, "--network", "host", *extra_run,
            "-v", "/dev/shm:/dev/shm", "-e", f"SIMGPU={gpu_set}", "-e", f"SIMGPU_TIMESCALE={TIMESCALE}",
            image, "/simworker", "--port", str(port), "--name", name, *WORKER_FLAGS]
    return Attached(pm, argv, tmp_path / f"{name}.out")


def wait_healthy(worker, port, timeout=30):
    def healthy():
        if worker.proc.poll() is not None:
            pytest.fail(f"podman run exited {worker.proc.returncode}:\n{worker.output()}")
        return request(port, "GET", "/health", timeout=5).status == 200
    wait_for(healthy, timeout=timeout, what=f"the container's simworker /health on {port}")


def stop_and_check_gone(pm, worker, name, gpu_set):
    t0 = time.monotonic()
    pm.run("stop", "-t", "2", name)
    assert worker.proc.wait(15) == 0, f"podman run exited {worker.proc.returncode}:\n{worker.output()}"
    wait_for(lambda: name not in pm.names(), timeout=10, what=f"container {name} removed (--rm)")
    wait_memory_back(gpu_set, f"podman stop of {name}")
    assert time.monotonic() - t0 < 10, "podman stop -t 2 of a worker that exits on SIGTERM took over 10 s"


def test_podman_worker_private_pid_namespace_books_and_returns_memory(podman, simgpu, tmp_path):
    """`podman run --rm --network host -v /dev/shm:/dev/shm -e SIMGPU=... IMAGE /simworker`
    in its own PID namespace (the default): healthy on its port, its context + resident
    memory booked on simulated GPU 0, and after `podman stop -t 2` the container is gone and
    the memory is back."""
    pm = podman
    image = pm.build_simworker_image()
    port, name = free_port(), f"pm1-{os.getpid()}"
    worker = run_worker(pm, image, simgpu, name, port, tmp_path)
    try:
        wait_healthy(worker, port)
        assert pm.state(name) == "running"
        host_pid = pm.host_pid(name)
        assert host_pid > 0
        booked = wait_for_booking(simgpu, timeout=10)
        assert booked and booked["used"] >= HELD, booked
        # SPEC 8: a process in another PID namespace is booked under its host pid, as NVML does
        assert [p["pid"] for p in booked["processes"]] == [host_pid], (booked, host_pid)
        stop_and_check_gone(pm, worker, name, simgpu)
    finally:
        worker.close()


def test_podman_worker_host_pid_namespace_books_and_returns_memory(podman, simgpu, tmp_path):
    """The same container with --pid host: the simulator sees the host pid itself, so the
    booking is there today, under the container process's host pid."""
    pm = podman
    image = pm.build_simworker_image()
    port, name = free_port(), f"pm2-{os.getpid()}"
    worker = run_worker(pm, image, simgpu, name, port, tmp_path, "--pid", "host")
    try:
        wait_healthy(worker, port)
        host_pid = pm.host_pid(name)
        booked = wait_for_booking(simgpu, timeout=10)
        assert booked, f"no booking on simulated GPU 0: {sim_show(simgpu)}"
        assert booked["used"] >= HELD, booked
        assert [p["pid"] for p in booked["processes"]] == [host_pid], booked
        stop_and_check_gone(pm, worker, name, simgpu)
    finally:
        worker.close()


# --- part 2: vramd supervising containers ----------------------------------------------------

def vramd_supports_containers():
    """True when `vramd --check-config` accepts a model with a `container:` block."""
    if not vramd_binary().exists():
        return False
    with tempfile.TemporaryDirectory(prefix="vramd-cc-") as d:
        path = os.path.join(d, "check.yaml")
        with open(path, "w") as f:
            f.write(f"""listen: 127.0.0.1:1
state_dir: {d}/var
models:
  w:
    route: /w/
    container:
      engine: podman
      image: localhost/vramd-simworker:check
      network: host
      gpus: none
      volumes: ["/dev/shm:/dev/shm"]
      env: {{SIMGPU: x}}
      command: [/simworker, --port, "{{port}}"]
""")
        try:
            p = subprocess.run([str(vramd_binary()), "--check-config", path], capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return p.returncode == 0


needs_containers = pytest.mark.skipif(
    not vramd_supports_containers(),
    reason="vramd --check-config refuses a `container:` model block (issue 21 not in this build)")


@pytest.fixture
def cvramd(podman, simgpu, vramd):
    """(vramd factory, podman setup, simulated GPU set), set up in that order so that vramd
    stops (and stops its containers) before the podman setup is removed."""
    return vramd, podman, simgpu


def container_model(vd_factory, pm, image, gpu_set, name, **over):
    """A `container:` model: simworker in the image, host network, no GPU flags (a simulated
    GPU), the set shared through /dev/shm; the podman setup's variables in the model's env
    (they reach the podman command vramd runs)."""
    m = {
        "route": f"/{name}/",
        "container": {
            "engine": "podman",
            "image": image,
            "network": "host",
            "gpus": "none",
            "volumes": ["/dev/shm:/dev/shm"],
            "env": {"SIMGPU": gpu_set, "SIMGPU_TIMESCALE": TIMESCALE},
            "command": ["/simworker", "--port", "{port}", "--name", f"{name}@{vd_factory.tag}",
                        *WORKER_FLAGS],
        },
        "env": pm.env_vars,
        "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
        "startup_timeout": "30s",
        "stop_timeout": "2s",
        "memory": {"resident": "512MiB", "per_request": "256MiB"},
        "concurrency": 1,
        "queue_max": 16,
        "deadline": "30s",
        "keep_alive": "10m",
    }
    m.update(over)
    return m


def plain_podman_model(vd_factory, pm, image, gpu_set, name):
    """The same worker as a plain `cmd: [podman, run, ...]`."""
    m = container_model(vd_factory, pm, image, gpu_set, name)
    del m["container"]
    m["cmd"] = ["podman", "run", "--rm", "--name", f"vramd-{name}", "--network", "host",
                "-v", "/dev/shm:/dev/shm", "-e", f"SIMGPU={gpu_set}",
                "-e", f"SIMGPU_TIMESCALE={TIMESCALE}", image,
                "/simworker", "--port", "{port}", "--name", f"{name}@{vd_factory.tag}", *WORKER_FLAGS]
    return m


def serve_one(vd, model):
    r = vd.post(f"/{model}/generate", body={"prompt": "x"},
                headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200, r
    return r


def model_containers(pm, model):
    return pm.ps(f"label=vramd.model={model}")


def wait_booked_to_instance(vd, model):
    """The model's ready instance measures at least HELD bytes on its GPU, and that GPU shows
    no foreign memory (the container's bytes are the instance's). Returns (instance, gpu)."""
    def booked():
        st = vd.status()
        for inst in vd.instances(model, st):
            if inst["state"] == "ready" and inst.get("gpu") is not None and inst["measured_bytes"] >= HELD:
                gpu = next(g for g in st["gpus"] if g["index"] == inst["gpu"])
                if gpu["foreign"] == 0:
                    return inst, gpu
        return None
    return wait_for(booked, timeout=15,
                    what=f"{model}'s container memory measured for its instance, none foreign")


def start_container_vramd(vramd_f, pm, gpu_set, model_fn=container_model, name="w"):
    image = pm.build_simworker_image()
    models = {name: model_fn(vramd_f, pm, image, gpu_set, name)}
    vd = vramd_f.start(models=models, gpu=gpu_section())
    wait_nvml(vd)
    return vd


def sigkill(vd):
    """SIGKILL vramd and reap it; the factory then expects no exit 0 from it."""
    vd.proc.kill()
    vd.proc.wait(10)
    vd.returncode = vd.proc.returncode
    vd._close_files()
    vd.stopped = True


@needs_containers
def test_container_model_is_served_and_booked_to_its_instance(cvramd):
    """(a) a request through vramd is served by the container; (b) the container's memory
    (context + resident) is measured for the instance, none of it foreign. The container
    carries vramd's labels and the default name vramd-{name}."""
    vramd_f, pm, gpu_set = cvramd
    vd = start_container_vramd(vramd_f, pm, gpu_set)
    serve_one(vd, "w")
    vd.wait_ready("w")
    cs = model_containers(pm, "w")
    assert len(cs) == 1 and cs[0]["State"] == "running", cs
    assert cs[0]["Names"] == ["vramd-w"], cs
    assert any(k == "vramd.owner" for k in (cs[0].get("Labels") or {})), cs
    inst, gpu = wait_booked_to_instance(vd, "w")
    assert inst["measured_bytes"] >= HELD, inst


@needs_containers
def test_container_unload_stops_it_with_the_engine(cvramd):
    """(c) POST /v1/models/w/unload: 200 once stopped; no container of the model is left
    (`podman ps -a`), and the simulated GPUs' memory is back."""
    vramd_f, pm, gpu_set = cvramd
    vd = start_container_vramd(vramd_f, pm, gpu_set)
    serve_one(vd, "w")
    wait_booked_to_instance(vd, "w")
    r = vd.post("/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    wait_for(lambda: not model_containers(pm, "w"), timeout=10,
             what="no container of model w after its unload")
    assert pm.ps() == [], pm.ps()
    wait_memory_back(gpu_set, "the unload")
    serve_one(vd, "w")  # and it loads again on demand


@needs_containers
def test_container_of_a_sigkilled_vramd_is_removed_at_its_next_start(cvramd):
    """(d) vramd SIGKILLed while its container runs (the engine's conmon keeps a container
    running after its client dies); vramd started again with the same state_dir removes
    every container labelled with its owner hash: none of the first run is left, and the
    memory comes back."""
    vramd_f, pm, gpu_set = cvramd
    vd = start_container_vramd(vramd_f, pm, gpu_set)
    serve_one(vd, "w")
    wait_booked_to_instance(vd, "w")
    first = {c["Id"] for c in model_containers(pm, "w")}
    assert len(first) == 1, first
    sigkill(vd)
    vd2 = vramd_f.start(config=vd.config)
    wait_for(lambda: not first & {c["Id"] for c in pm.ps()}, timeout=20,
             what="the first run's container removed by the restarted vramd")
    wait_memory_back(gpu_set, "the restarted vramd's sweep")
    assert vd2.alive()


@needs_containers
def test_plain_podman_run_cmd_is_served_and_unloaded(cvramd):
    """A plain `cmd: [podman, run, --rm, --name vramd-p, ...]` is a container too: served
    through vramd, its memory measured for its instance; an unload leaves no container and
    gives the memory back."""
    vramd_f, pm, gpu_set = cvramd
    vd = start_container_vramd(vramd_f, pm, gpu_set, model_fn=plain_podman_model, name="p")
    serve_one(vd, "p")
    assert pm.names() == ["vramd-p"], pm.ps()
    wait_booked_to_instance(vd, "p")
    r = vd.post("/v1/models/p/unload", timeout=30)
    assert r.status == 200, r
    wait_for(lambda: not pm.ps(), timeout=10, what="no container left after the unload")
    wait_memory_back(gpu_set, "the unload")


@needs_containers
def test_container_whose_cli_is_killed_is_removed(cvramd):
    """The `podman run` process vramd started is SIGKILLed (the CLI crashed; conmon would
    keep the container running without it): vramd removes the container with the engine
    (`podman rm -f`), kills what is left of the instance's cgroup, the memory comes back, and
    the next request starts a new container."""
    vramd_f, pm, gpu_set = cvramd
    vd = start_container_vramd(vramd_f, pm, gpu_set)
    serve_one(vd, "w")
    wait_booked_to_instance(vd, "w")
    first = {c["Id"] for c in model_containers(pm, "w")}
    cli = vd.worker_pids("w")[0]
    os.kill(cli, signal.SIGKILL)
    wait_for(lambda: not first & {c["Id"] for c in pm.ps()}, timeout=20,
             what="the container of the killed podman CLI removed")
    wait_memory_back(gpu_set, "the removal of the CLI's container")
    serve_one(vd, "w")


@needs_containers
def test_container_worker_parks_by_checkpoint_and_comes_back(cvramd):
    """The checkpoint tier on a container's process: vramd checkpoints it by its host pid
    (what NVML lists; the simulated driver, as the real one, takes host pids). An admin
    unload parks it (same container, same process, nothing left on the GPU), and the next
    request restores it and is served by the same process."""
    from vramdkit.paths import cuda_lib
    vramd_f, pm, gpu_set = cvramd
    image = pm.build_simworker_image()
    m = container_model(vramd_f, pm, image, gpu_set, "w", checkpoint=True)
    vd = vramd_f.start(models={"w": m}, gpu=gpu_section(cuda_library=str(cuda_lib())),
                       host_memory={"budget": "4GiB", "reserve": 0})
    wait_nvml(vd)
    serve_one(vd, "w")
    inst, _ = wait_booked_to_instance(vd, "w")
    host_pid = pm.host_pid("vramd-w")
    r = vd.post("/v1/models/w/unload", timeout=30)
    assert r.status == 200, r
    inst = vd.instances("w")[0]
    assert inst["state"] == "parked" and inst["tier"] == "checkpointed", inst
    assert pm.state("vramd-w") == "running" and pm.host_pid("vramd-w") == host_pid
    serve_one(vd, "w")
    inst = vd.instances("w")[0]
    assert inst["state"] == "ready" and inst["tier"] == "resident", inst
    assert pm.host_pid("vramd-w") == host_pid
    assert vd.events("resumed", model="w")
