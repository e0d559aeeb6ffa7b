"""A real container engine for the tests: Podman (Debian's podman + runc, `make deps`), one
isolated setup per test, and a small image built locally (nothing is pulled).

Podman(root): containers.conf and storage.conf under root, named by CONTAINERS_CONF and
CONTAINERS_STORAGE_CONF in Podman.env, so that a `podman` started with that environment
(by the test, or by vramd through a model's env:) uses this setup and nothing else:

  containers.conf   runtime "runc" (crun refuses a host with cgroup v1 hierarchies plus
                    cgroup2 at /sys/fs/cgroup/unified), cgroup_manager "cgroupfs" (no
                    systemd), default_ulimits [] (raising RLIMIT_NOFILE may be refused),
                    events_logger "file", lock_type "file" (no shared /dev/shm/libpod_lock),
                    tmp_dir and network_config_dir under root;
  storage.conf      driver vfs (no mounts: a layer is a directory, so clean-up is rm -rf;
                    the image is a few MB), graphroot and runroot under root.

root is a short directory made under /tmp (conmon's sockets live under tmp_dir and a Unix
socket path is at most 107 bytes, so pytest's long tmp_path is not used).

build_simworker_image(): a root filesystem assembled from what the machine has -
build/bin/simworker at /simworker, the shared libraries ldd lists for it and its loader,
busybox-static at /bin/busybox (with /bin/sh and a few applets) when installed, empty /dev/shm,
/tmp, /proc, /sys - `podman import`ed as localhost/vramd-simworker:<random>.
build_vramd_image(): the same with vramd itself: /vramd, /simworker and the NVML simulation
at VRAMD_IMAGE_NVML from $VRAMD_BUILD (an ASan build's runtime comes along through ldd), CMD
/vramd --config VRAMD_IMAGE_CONFIG, as localhost/vramd-sim:<random>
(tests/e2e/test_vramd_in_container.py). build_image() is what both use.

cleanup(): every container of the setup removed (`podman rm -f -t 0`), then `podman system
reset -f`; whatever is still alive (conmon, a container's processes) is SIGKILLed, found by
the setup's root in conmon's command line and by the containers' `libpod-<id>` cgroups;
anything mounted under root is unmounted; root is removed.

podman_usable() -> (ok, reason): whether a container runs here at all (podman and runc
installed, one container of the simworker image started and exited 0); computed once per
process. The `podman` fixture skips the test with the reason when not.

Every podman call is bounded (timeout); nothing waits without a deadline.
"""
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from .paths import binary, nvml_lib

PODMAN_TIMEOUT = 60.0      # one podman command (an import, a run -d, a stop)
CLEANUP_TIMEOUT = 30.0     # each clean-up step
IMAGE_REPO = "localhost/vramd-simworker"
VRAMD_IMAGE_REPO = "localhost/vramd-sim"
VRAMD_IMAGE_NVML = "/usr/lib/vramd/libnvidia-ml-sim.so"  # the NVML simulation in the vramd image
VRAMD_IMAGE_CONFIG = "/etc/vramd/vramd.yaml"              # where its CMD expects the config
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "true", "sleep", "cat", "ls", "ps", "kill", "env")


class PodmanError(RuntimeError):
    pass


def _conf_text(root):
    return f"""[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
lock_type = "file"
tmp_dir = "{root}/tmp"

[network]
network_config_dir = "{root}/net"
"""


def _storage_text(root, driver):
    return f"""[storage]
driver = "{driver}"
graphroot = "{root}/graph"
runroot = "{root}/run"
"""


class Podman:
    """One isolated Podman setup under root (made by new())."""

    def __init__(self, root, driver="vfs"):
        self.root = Path(root)
        self.driver = driver
        self.conf = self.root / "containers.conf"
        self.storage_conf = self.root / "storage.conf"
        for d in ("tmp", "net", "graph", "run"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(_conf_text(self.root))
        self.storage_conf.write_text(_storage_text(self.root, driver))
        self.log = []          # (argv, rc, seconds, stderr tail) of every podman call, for a report
        self.images = []

    @classmethod
    def new(cls, driver="vfs"):
        return cls(tempfile.mkdtemp(prefix="vpm-", dir="/tmp"), driver=driver)

    @property
    def env_vars(self):
        """The variables that select this setup (for a model's env:, or a daemon's)."""
        return {"CONTAINERS_CONF": str(self.conf), "CONTAINERS_STORAGE_CONF": str(self.storage_conf)}

    @property
    def env(self):
        env = dict(os.environ)
        env.update(self.env_vars)
        return env

    # --- commands ---------------------------------------------------------------------
    def run(self, *args, timeout=PODMAN_TIMEOUT, check=True):
        """`podman ARGS` in this setup; a CompletedProcess (text). check: raise PodmanError
        on a non-zero exit; a timeout always raises PodmanError."""
        argv = ["podman", *map(str, args)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.log.append((argv, None, time.monotonic() - t0, "timeout"))
            raise PodmanError(f"{' '.join(argv)}: no exit within {timeout}s") from e
        self.log.append((argv, p.returncode, time.monotonic() - t0, p.stderr[-500:]))
        if check and p.returncode != 0:
            raise PodmanError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
        return p

    def ps(self, *filters, all=True):
        """Containers of this setup as dicts (Names, Id, State, Labels ...); filters:
        "label=K=V", "name=N" ..."""
        args = ["ps", "--format", "json"] + (["-a"] if all else [])
        for f in filters:
            args += ["--filter", f]
        out = self.run(*args, timeout=CLEANUP_TIMEOUT).stdout.strip()
        return json.loads(out) if out else []

    def names(self, *filters, all=True):
        names = []
        for c in self.ps(*filters, all=all):
            n = c.get("Names") or []
            names.extend(n if isinstance(n, list) else [n])
        return names

    def state(self, name):
        """The container's state ("running", "exited" ...), or None when there is none."""
        p = self.run("inspect", "--type", "container", "--format", "{{.State.Status}}", name,
                     check=False, timeout=CLEANUP_TIMEOUT)
        return p.stdout.strip() if p.returncode == 0 else None

    def host_pid(self, name):
        """The host pid of the container's main process (0 when it does not run)."""
        p = self.run("inspect", "--type", "container", "--format", "{{.State.Pid}}", name,
                     timeout=CLEANUP_TIMEOUT)
        return int(p.stdout.strip() or 0)

    def logs(self, name):
        p = self.run("logs", name, check=False, timeout=CLEANUP_TIMEOUT)
        return p.stdout + p.stderr

    # --- the image --------------------------------------------------------------------
    def build_simworker_image(self, extra_files=()):
        """Import a root filesystem holding /simworker (build/bin/simworker), its shared
        libraries and loader, busybox when installed; extra_files: (host path, path in the
        image) pairs. Returns the image reference."""
        return self.build_image(IMAGE_REPO, [(binary("simworker"), "/simworker")],
                                cmd="/simworker", extra_files=extra_files)

    def build_vramd_image(self, extra_files=()):
        """Import a root filesystem holding vramd itself and a worker for it on the simulated
        GPU: /vramd, /simworker, VRAMD_IMAGE_NVML (the NVML simulation, for gpu.nvml_library)
        from the build under test ($VRAMD_BUILD: the ASan build's runtime libraries come with
        it through ldd), their shared libraries and loader, busybox when installed. Returns
        the image reference (CMD /vramd --config VRAMD_IMAGE_CONFIG)."""
        files = [(binary("vramd"), "/vramd"), (binary("simworker"), "/simworker"),
                 (nvml_lib(), VRAMD_IMAGE_NVML)]
        return self.build_image(VRAMD_IMAGE_REPO, files,
                                cmd=["/vramd", "--config", VRAMD_IMAGE_CONFIG], extra_files=extra_files)

    def build_image(self, repo, programs, cmd, extra_files=()):
        """Import a root filesystem as repo:<random>: programs, (host path, path in the image)
        pairs, with every shared library ldd lists for them (the loader included, each at
        its host path), busybox-static at /bin/busybox with /bin/sh and a few applets when
        installed, extra_files (copied as they are, no ldd), an /etc/passwd with root, empty
        /tmp, /dev/shm, /proc, /sys. CMD is cmd (a string: the shell form; a list: the exec
        form). Returns the image reference."""
        tag = f"{repo}:{secrets.token_hex(4)}"
        tar_path = self.root / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            for d in ("bin", "tmp", "dev", "dev/shm", "proc", "sys", "etc"):
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if d in ("tmp", "dev/shm") else 0o755
                tar.addfile(ti)
            files = {}   # path in the image -> host path (each added once)
            for src, dst in programs:
                files[str(dst).lstrip("/")] = str(src)
                for lib in shared_libraries(src):
                    files.setdefault(lib.lstrip("/"), lib)
            if _is_static(BUSYBOX):
                files["bin/busybox"] = BUSYBOX
            for src, dst in extra_files:
                files[str(dst).lstrip("/")] = str(src)
            for dst, src in files.items():
                tar.add(os.path.realpath(src), arcname=dst)
            if _is_static(BUSYBOX):
                for applet in APPLETS:
                    ti = tarfile.TarInfo(f"bin/{applet}")
                    ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(ti)
            for name, text in (("etc/passwd", "root:x:0:0:root:/:/bin/sh\n"),
                               ("etc/group", "root:x:0:\n")):
                data = text.encode()
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
        cmd = cmd if isinstance(cmd, str) else json.dumps(list(cmd), separators=(",", ":"))
        self.run("import", "--change", f"CMD={cmd}", str(tar_path), tag)
        tar_path.unlink()
        self.images.append(tag)
        return tag

    # --- clean-up ---------------------------------------------------------------------
    def container_ids(self):
        """Every container id this setup's storage knows (also when podman cannot answer)."""
        ids = set()
        try:
            for c in self.ps():
                ids.add(c.get("Id", ""))
        except (PodmanError, ValueError):
            pass
        for d in self.root.glob("*/*-containers/*"):
            if len(d.name) == 64:
                ids.add(d.name)
        return {i for i in ids if i}

    def stray_pids(self, ids):
        """Live processes of this setup: those whose command line or environment names
        root (conmon, podman clients, `podman container cleanup`) and those in the
        containers' libpod-<id> cgroups."""
        marks = [f"libpod-{i}" for i in ids]
        root = str(self.root).encode() + b"/"
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read()
                with open(f"/proc/{entry}/cgroup") as f:
                    cg = f.read()
                with open(f"/proc/{entry}/stat", "rb") as f:
                    zombie = f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
            except (OSError, IndexError):
                continue
            if zombie:
                continue
            if root in cmd or root in environ or any(m in cg for m in marks):
                pids.append(int(entry))
        return pids

    def cleanup(self):
        """Remove everything of the setup; returns a list of problems (empty when it all
        went away the ordinary way)."""
        problems = []
        ids = self.container_ids()
        if ids:
            try:
                self.run("rm", "-f", "-t", "0", *sorted(ids), check=False, timeout=CLEANUP_TIMEOUT)
            except PodmanError as e:
                problems.append(str(e))
        try:
            # the storage named explicitly too: a reset never reaches another storage
            self.run("--root", self.root / "graph", "--runroot", self.root / "run",
                     "--tmpdir", self.root / "tmp", "system", "reset", "-f",
                     check=False, timeout=CLEANUP_TIMEOUT)
        except PodmanError as e:
            problems.append(str(e))
        deadline = time.monotonic() + 5
        while True:
            left = self.stray_pids(ids)
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)
        if left:
            problems.append(f"processes of {self.root} still alive after SIGKILL: {left}")
        for mnt in mounts_under(self.root):
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=CLEANUP_TIMEOUT)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.exists():
            problems.append(f"{self.root} could not be removed")
        return problems


# --- helpers --------------------------------------------------------------------------------

def shared_libraries(path):
    """Absolute paths of the shared libraries ldd lists for path, the loader included."""
    p = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30)
    libs = []
    for line in p.stdout.splitlines():
        for word in line.split():
            if word.startswith("/") and os.path.exists(word):
                libs.append(word)
    return libs


def _is_static(path):
    if not os.path.exists(path):
        return False
    p = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30)
    return p.returncode != 0 or "not a dynamic executable" in p.stdout + p.stderr


def mounts_under(root):
    """Mount points under root, deepest first."""
    root = str(root).rstrip("/") + "/"
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mnt = line.split()[4].replace("\\040", " ")
                if mnt.startswith(root):
                    out.append(mnt)
    except OSError:
        pass
    return sorted(out, key=len, reverse=True)


_USABLE = None


def podman_usable():
    """(True, "") when a container runs here; else (False, why). Computed once: podman and
    runc installed, the simworker image built and one container of it run to exit 0."""
    global _USABLE
    if _USABLE is None:
        _USABLE = _probe()
    return _USABLE


def _probe():
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return False, f"{tool} is not installed (make deps installs podman and runc)"
    if not binary("simworker").exists():
        return False, f"{binary('simworker')} is missing: build first (make)"
    if not _is_static(BUSYBOX):
        return False, f"{BUSYBOX} is not busybox-static (make deps installs it)"
    pm = Podman.new()
    try:
        image = pm.build_simworker_image()
        pm.run("run", "--rm", "--network", "host", image, "/bin/true", timeout=PODMAN_TIMEOUT)
        return True, ""
    except PodmanError as e:
        return False, f"podman cannot run a container here: {e}"
    finally:
        pm.cleanup()


@pytest.fixture
def podman():
    """An isolated Podman setup for one test (skips the test when no container can run
    here); everything of it is removed at teardown, and a leftover process fails the test."""
    ok, why = podman_usable()
    if not ok:
        pytest.skip(why)
    pm = Podman.new()
    try:
        yield pm
    finally:
        problems = pm.cleanup()
    if problems:
        pytest.fail("podman clean-up: " + "; ".join(problems))
