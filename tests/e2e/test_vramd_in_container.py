"""e2e: vramd itself in a container (docs/operations.md, "vramd itself in a container";
issue 21), with Podman (runc, cgroupfs: vramdkit.containers) on the simulated GPU.

The image (Podman.build_vramd_image) holds the build under test's vramd, simworker and NVML
simulation ($VRAMD_BUILD: with build-san the ASan runtime comes along through ldd), their
shared libraries and loader, and busybox. vramd runs in the foreground of `podman run --rm`
(as a supervisor would run it) with

    --network host --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v /dev/shm:/dev/shm
    -v STATE:STATE -v CONFIG:/etc/vramd/vramd.yaml:ro -e SIMGPU=<set> -e SIMGPU_TIMESCALE=...

and gpu.nvml_library naming the simulation in the image; the simulated GPU set is made on the
host (the host side of its pid namespaces, as the driver is) and shared through /dev/shm. One
supervised simworker model: vramd starts it inside the same container.

With --pid=host (what the docs ask for):
  - vramd answers /healthz on the host, a request through it is served;
  - /v1/status: nvml ok, cgroup mode v2 or v1 (not subreaper), its subtree under the
    container's own cgroup (libpod-<id>), the instance's measured_bytes covers the worker's
    context + resident bytes and GPU 0 has no foreign memory: the pid NVML reports (the host
    pid, the one `simgpu show` books) is the instance's pid as vramd sees it;
  - ended by `podman stop` (vramd drains and exits 0) or by SIGKILL of vramd's host pid (the
    container's main process ends; vramd's guard or the engine's clean-up of the container's
    cgroups kills the worker, whichever comes first: the guard's log lines reach the
    container's log in some runs only, as conmon may be gone by then): no process of the
    container and no simworker is left, the container is removed, its cgroups are gone, and
    the simulated memory is back.

Without --pid=host (why it is needed): vramd and its worker share a private PID namespace.
What happens here: the request is still served, the cgroup mode is still v2 (the cgroup
mount does not depend on the PID namespace), but NVML's pid for the worker's memory is its
host pid (or 0 while no host-side process has found it yet), which is no process of vramd's
namespace; so the worker's bytes are all counted foreign on GPU 0 and the instance measures
0, for as long as it runs, while vramd's ledger still holds the instance's own reservation
(the same bytes count twice against the GPU). `podman stop` still ends everything (the PID
namespace dies with vramd).

Each test is bounded well under 60 s (every wait and podman call has a deadline). Teardown
stops the container if it still runs (and fails the test when vramd then does not exit 0),
fails the test on a sanitizer report in vramd's log,
on a simworker of the test left alive or on a cgroup of the container left behind (each is
removed anyway); the `podman` fixture then removes containers, images and the storage, and
the `simgpu` fixture the simulated set. Skips (with the reason) where Podman cannot run.
"""
import json
import os
import secrets
import signal
import subprocess
import time
from glob import glob

import pytest

from e2ekit import SIMGPU, TIMESCALE, simgpu  # noqa: F401  (simgpu: a fixture)
from vramdkit.containers import (CLEANUP_TIMEOUT, VRAMD_IMAGE_CONFIG, VRAMD_IMAGE_NVML,
                                 PodmanError, podman)  # noqa: F401  (podman: a fixture)
from vramdkit.daemon import Vramd
from vramdkit.net import free_port
from vramdkit.paths import binary, nvml_lib
from vramdkit.proc import pids_with_cmdline, wait_for_gone
from vramdkit.report import track
from vramdkit.waits import wait_for

MiB = 1 << 20
HELD = (64 + 256) * MiB          # a loaded simworker's context + resident bytes (flags below)
WORKER_FLAGS = ["--context", "64MiB", "--resident", "256MiB", "--per-request", "128MiB",
                "--output", "json", "--output-size", "1KiB", "--run-time", "0.1s"]
TEST_BOUND = 60.0                # each test, start to end (teardown apart)
SAN_VARS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")


# --- the simulated GPU's view from the host ----------------------------------------------------

def sim_show(gpu_set):
    p = subprocess.run([str(SIMGPU), "show", gpu_set, "--json"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def wait_memory_back(gpu_set, what, timeout=15):
    wait_for(lambda: all(g["used"] == 0 for g in sim_show(gpu_set)["gpus"]), timeout=timeout,
             what=f"the simulated GPUs' memory back after {what}")


# --- cgroups and processes of one container ----------------------------------------------------

def container_cgroup_dirs(cid):
    """The container's cgroup directories in every mounted hierarchy (cgroupfs manager:
    .../libpod_parent/libpod-<id>, on a v1, hybrid or v2 host)."""
    return sorted(glob(f"/sys/fs/cgroup/libpod_parent/libpod-{cid}")
                  + glob(f"/sys/fs/cgroup/*/libpod_parent/libpod-{cid}"))


def pids_in_cgroup_named(mark):
    """Live processes whose /proc/PID/cgroup names mark (a libpod-<id>)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                cg = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if mark in cg and state not in (b"Z", b"X"):
            out.append(int(entry))
    return out


def remove_cgroup_tree(path, timeout=5.0):
    """SIGKILL every member of path and below, then rmdir deepest first; True when gone."""
    deadline = time.monotonic() + timeout
    while os.path.isdir(path) and time.monotonic() < deadline:
        dirs = sorted((d for d, _, _ in os.walk(path)), key=len, reverse=True)
        for d in dirs:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
            except OSError:
                pass
            try:
                os.rmdir(d)
            except OSError:
                pass
        time.sleep(0.05)
    return not os.path.isdir(path)


# --- vramd in a container --------------------------------------------------------------------

class ContainedVramd(Vramd):
    """vramd as the main process of `podman run --rm IMAGE` (the image's CMD: /vramd --config
    /etc/vramd/vramd.yaml) in the foreground; self.proc is the podman client (its exit status
    is vramd's), its stdout and stderr (vramd's) go to the usual files. The HTTP, status and
    log helpers are Vramd's."""

    def __init__(self, pm, image, tmp, config, run_args, name):
        super().__init__(tmp, name, config, http="raw", start_timeout=30.0, stop_timeout=20.0,
                         request_timeout=30.0)
        self.pm = pm
        self.image = image
        self.run_args = list(run_args)
        self.container = f"{name}-{os.getpid()}-{secrets.token_hex(3)}"
        self.cid = None

    def start(self, wait=True):
        self.log_file = open(self.log_path, "ab")
        self.stdout_file = open(self.stdout_path, "ab")
        argv = ["podman", "run", "--rm", "--name", self.container, *self.run_args,
                "-v", f"{self.config_path}:{VRAMD_IMAGE_CONFIG}:ro", self.image]
        self.proc = subprocess.Popen(argv, env=self.pm.env, stdin=subprocess.DEVNULL,
                                     stdout=self.stdout_file, stderr=self.log_file)
        self.stopped = False
        if wait:
            wait_for(self._healthz, timeout=self.start_timeout,
                     what=f"vramd in container {self.container}: /healthz on {self.port} from the host")
            self.cid = self.pm.run("inspect", "--type", "container", "--format", "{{.Id}}",
                                   self.container, timeout=CLEANUP_TIMEOUT).stdout.strip()
        return self

    def host_pid(self):
        return self.pm.host_pid(self.container)

    def podman_stop(self, timeout=10):
        """`podman stop -t timeout`; returns the podman client's (vramd's) exit status."""
        self.pm.run("stop", "-t", timeout, self.container, timeout=timeout + 15)
        return self._reap()

    def _reap(self, timeout=20):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"podman run of {self.container} still running {timeout}s after its end")
        self._close_files()
        self.stopped = True
        return self.returncode

    def stop(self, timeout=None):
        """Teardown: stop the container if it still runs; the exit status (None: killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.pm.run("stop", "-t", 10, self.container, check=False, timeout=25)
            except PodmanError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.pm.run("rm", "-f", "-t", 0, self.container, check=False, timeout=CLEANUP_TIMEOUT)
                self.proc.kill()
                self.proc.wait(10)
                self._close_files()
                self.stopped = True
                return None
        self.returncode = self.proc.returncode
        self._close_files()
        self.stopped = True
        return self.returncode


class Kit:
    """What one test needs: the podman setup, the simulated set, a tag in every worker's
    command line, the vramd image (built once), a state directory for the volume."""

    def __init__(self, pm, gpu_set, tmp):
        self.pm = pm
        self.gpu_set = gpu_set
        self.tmp = tmp
        self.tag = f"{tmp.name}-{secrets.token_hex(4)}"
        self.state = tmp / "state"
        self.state.mkdir()
        self.daemons = []
        self.image = None

    def config(self):
        return {
            "listen": f"127.0.0.1:{free_port()}",
            "state_dir": str(self.state),
            "log": {"format": "json", "level": "debug"},
            "gpu": {"nvml_library": VRAMD_IMAGE_NVML, "devices": "all", "poll": "100ms",
                    "headroom": "128MiB"},
            "models": {"w": {
                "route": "/w/",
                "cmd": ["/simworker", "--port", "{port}", "--name", f"w@{self.tag}", *WORKER_FLAGS],
                "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
                "startup_timeout": "30s",
                "stop_timeout": "2s",
                "memory": {"resident": "512MiB", "per_request": "256MiB"},
                "concurrency": 1,
                "queue_max": 16,
                "deadline": "30s",
                "keep_alive": "10m",
            }},
        }

    def start(self, host_pid):
        """vramd in a container (with --pid=host when host_pid), answering on the host."""
        if self.image is None:
            self.image = self.pm.build_vramd_image()
        args = ["--network", "host", "--cgroupns=host",
                "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/dev/shm:/dev/shm",
                "-v", f"{self.state}:{self.state}",
                "-e", f"SIMGPU={self.gpu_set}", "-e", f"SIMGPU_TIMESCALE={TIMESCALE}"]
        if host_pid:
            args.append("--pid=host")
        for var in SAN_VARS:
            if os.environ.get(var):
                args += ["-e", f"{var}={os.environ[var]}"]
        vd = ContainedVramd(self.pm, self.image, self.tmp, self.config(), args,
                            f"vramd-c{len(self.daemons)}")
        self.daemons.append(vd)
        return vd.start()

    def workers(self):
        """Host pids of this test's simworkers (their command line holds the tag)."""
        return pids_with_cmdline(self.tag, program="simworker")

    def cleanup(self):
        problems = []
        for vd in self.daemons:
            if vd.proc is not None and vd.proc.poll() is None:
                code = vd.stop()
                if code != 0:
                    problems.append(f"{vd.name}: exit status {code} after podman stop at teardown"
                                    " (None: had to be killed)")
            for marker in vd.sanitizer_reports():
                problems.append(f"{vd.name}: sanitizer report in its log ({marker!r})")
            if vd.cid:
                if not wait_for_cgroups_gone(vd.cid, timeout=10):
                    left = container_cgroup_dirs(vd.cid)
                    for d in left:
                        remove_cgroup_tree(d)
                    problems.append(f"cgroups of {vd.container} left after it ended: {left}")
        left = wait_for_gone(self.tag, program="simworker", timeout=10)
        if left:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            problems.append(f"simworker processes left alive: {left}")
        return problems


def wait_for_cgroups_gone(cid, timeout):
    deadline = time.monotonic() + timeout
    while container_cgroup_dirs(cid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def kit(podman, simgpu, tmp_path, request):  # noqa: F811  (fixtures by name)
    """A Kit; after the test, its containers stopped and checked (the podman fixture, set up
    before it, removes the setup after it)."""
    for path in (binary("vramd"), binary("simworker"), nvml_lib()):
        if not path.exists():
            pytest.fail(f"{path} is missing: build first (make)")
    k = Kit(podman, simgpu, tmp_path)
    track(request.node, k.daemons)
    try:
        yield k
    finally:
        problems = k.cleanup()
    if problems:
        pytest.fail("; ".join(problems))


def serve_one(vd):
    r = vd.post("/w/generate", body={"prompt": "x"},
                headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r
    return r


def worker_host_pid(k):
    pids = wait_for(k.workers, timeout=10, what="the test's simworker on the host")
    assert len(pids) == 1, pids
    return pids[0]


def sim_processes(gpu_set, gpu=0):
    return sim_show(gpu_set)["gpus"][gpu]["processes"]


def check_everything_gone(k, vd, gpu_set, what):
    """No container, no process in its cgroups, no simworker, no cgroup dir, memory back."""
    wait_for(lambda: vd.container not in k.pm.names(), timeout=15,
             what=f"container {vd.container} removed (--rm) after {what}")
    wait_for(lambda: not pids_in_cgroup_named(f"libpod-{vd.cid}"), timeout=10,
             what=f"no process left in the cgroups of {vd.container} after {what}")
    assert wait_for_gone(k.tag, program="simworker", timeout=10) == [], \
        f"a simworker outlived {what}"
    assert wait_for_cgroups_gone(vd.cid, timeout=10), \
        f"cgroups of {vd.container} left after {what}: {container_cgroup_dirs(vd.cid)}"
    wait_memory_back(gpu_set, what)


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("end", ["podman-stop", "sigkill"])
def test_vramd_in_container_with_host_pid_books_its_worker(kit, simgpu, end):  # noqa: F811
    """--pid=host: served; the worker's memory measured for its instance, none foreign; the
    cgroup mode v2/v1 under the container's cgroup; after `podman stop` (vramd exits 0) or a
    SIGKILL of vramd's host pid (the podman client exits 137) nothing of it is left and the
    simulated memory is back."""
    t0 = time.monotonic()
    vd = kit.start(host_pid=True)
    serve_one(vd)
    st = vd.status()
    assert st["cgroup"]["mode"] in ("v2", "v1"), st["cgroup"]
    assert f"/libpod-{vd.cid}/vramd-" in st["cgroup"]["path"], (st["cgroup"], vd.cid)

    def booked():
        s = vd.status()
        inst = [i for i in vd.instances("w", s) if i["state"] == "ready"]
        g0 = s["gpus"][0]
        if s["nvml"]["ok"] and inst and inst[0]["measured_bytes"] >= HELD and g0["foreign"] == 0:
            return s, inst[0]
        return None
    st, inst = wait_for(booked, timeout=15,
                        what="the worker's memory measured for its instance, none foreign")
    assert st["gpus"][0]["foreign"] == 0, st["gpus"][0]
    assert inst["gpu"] == 0 and inst["cgroup"].startswith(st["cgroup"]["path"] + "/"), inst
    # NVML's pid (host pid) is the pid vramd knows its worker by: --pid=host
    wpid = worker_host_pid(kit)
    assert inst["pid"] == wpid, (inst, wpid)
    procs = sim_processes(simgpu)
    assert [p["pid"] for p in procs] == [wpid] and procs[0]["used"] >= HELD, procs
    assert "ns_pid" not in procs[0], procs    # booked in the host's namespace itself

    if end == "podman-stop":
        code = vd.podman_stop()
        assert code == 0, f"vramd in the container exited {code} on podman stop"
        assert vd.events("vramd_stopped", exit_code=0), vd.log_tail(20)
    else:
        os.kill(vd.host_pid(), signal.SIGKILL)
        code = vd._reap()
        assert code == 137, f"podman run exited {code} after SIGKILL of vramd"
    check_everything_gone(kit, vd, simgpu, end)
    assert time.monotonic() - t0 < TEST_BOUND


def test_vramd_in_container_without_host_pid_counts_its_worker_foreign(kit, simgpu):  # noqa: F811
    """Without --pid=host (see the module docstring): served, cgroup mode still v2/v1, but the
    worker's bytes are foreign on GPU 0 and its instance measures 0, and it stays so: NVML
    books them under the worker's host pid, vramd knows the worker by its pid in the
    container's namespace. `podman stop` still leaves nothing and the memory comes back."""
    t0 = time.monotonic()
    vd = kit.start(host_pid=False)
    serve_one(vd)
    st = vd.status()
    assert st["cgroup"]["mode"] in ("v2", "v1"), st["cgroup"]
    assert st["nvml"]["ok"], st["nvml"]
    vd.wait_ready("w")
    inst = vd.instances("w")[0]
    wpid = worker_host_pid(kit)
    # vramd's pid for its worker is the one of the container's PID namespace, not the host's
    assert inst["pid"] != wpid, (inst, wpid)
    procs = sim_processes(simgpu)
    assert [p["pid"] for p in procs] == [wpid] and procs[0]["used"] >= HELD, procs
    assert procs[0].get("ns_pid") == inst["pid"], (procs, inst)

    def foreign():
        s = vd.status()
        i = vd.instances("w", s)[0]
        if s["gpus"][0]["foreign"] >= HELD and i["measured_bytes"] == 0:
            return s
        return None
    wait_for(foreign, timeout=15, what="the worker's memory counted foreign, its instance at 0")
    # not a moment's view: it stays so over a second of NVML polls (100 ms)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        s = vd.status()
        i = vd.instances("w", s)[0]
        assert i["state"] == "ready" and i["measured_bytes"] == 0, i
        assert s["gpus"][0]["foreign"] >= HELD, s["gpus"][0]
        # the instance's reservation is still in the ledger beside the foreign bytes
        assert s["gpus"][0]["reserved"] >= 512 * MiB, s["gpus"][0]
        time.sleep(0.2)
    code = vd.podman_stop()
    assert code == 0, f"vramd in the container exited {code} on podman stop"
    check_everything_gone(kit, vd, simgpu, "podman stop")
    assert time.monotonic() - t0 < TEST_BOUND
