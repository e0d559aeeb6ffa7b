#!/usr/bin/python3
"""debian_root: installs vramd's .debs into a throwaway root, runs the installed vramd,
purges, and reports what was left behind (used by test_debian_package.py).

Run as root inside a private mount namespace (`unshare --mount --propagation private`):
  debian_root.py WORKDIR VRAMD_DEB VRAMD_SIM_DEB PORT
It mounts a tmpfs on WORKDIR/ov, then an overlay over each of /etc, /usr and /var whose
upper layer is there, so that dpkg, adduser and the maintainer scripts run as they would on
a host while every write lands in the tmpfs and the host's own files stay as they are (the
namespace, its mounts and the tmpfs go away when this process and its children end). /run
gets a tmpfs of its own, so the maintainer scripts find no running systemd and call no
systemctl of the host; /usr/sbin/policy-rc.d forbids service starts besides.

Steps, each a key of the JSON object printed on the last line of stdout:
  install   dpkg -i of both packages (exit status, output)
  after_install   the vramd user and group, the owner and mode of /etc/vramd, its
            vramd.yaml and /var/lib/vramd, whether the vramd user reads the config and
            nobody does not, the copyright files, the unit enabled (its
            multi-user.target.wants link), the conffile
  serve     vramd from /usr/bin/vramd as the vramd user (runuser), with the installed
            /etc/vramd/vramd.yaml plus one simworker model (/usr/lib/vramd/simworker) on a
            simulated GPU (/usr/lib/vramd/simgpu, libnvidia-ml-sim.so): /readyz, a request
            through vramd, `vramctl drain` (the installed vramctl), vramd's exit status
  purge     dpkg --purge of both packages
  left      files in the overlay's upper layers after the purge, other than dpkg's own
            database and logs, the ld.so cache, the account files (the vramd user is kept,
            docs/packaging.md) and caches; a non-empty list is something the packages left
"""
import json
import os
import pwd
import grp
import stat
import subprocess
import sys
import time
import urllib.request

import yaml

LAYERS = ("etc", "usr", "var")
# what dpkg, adduser and triggers change on any install + purge: not the packages' files
ALLOWED_PREFIXES = ("var/lib/dpkg/", "var/log/", "var/cache/", "var/lib/systemd/deb-systemd-helper-masked/")
ALLOWED_FILES = {"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow", "etc/passwd-", "etc/group-",
                 "etc/shadow-", "etc/gshadow-", "etc/.pwd.lock", "etc/ld.so.cache", "etc/subuid", "etc/subgid",
                 "etc/subuid-", "etc/subgid-"}


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    return {"rc": p.returncode, "out": (p.stdout + p.stderr)[-4000:]}


def mount_root(work):
    ov = os.path.join(work, "ov")
    os.makedirs(ov, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "vramd-pkgtest", ov], check=True)
    for layer in LAYERS:
        upper, wk = os.path.join(ov, "upper", layer), os.path.join(ov, "work", layer)
        os.makedirs(upper)
        os.makedirs(wk)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir=/{layer},upperdir={upper},workdir={wk}", f"/{layer}"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "vramd-pkgtest-run", "/run"], check=True)
    os.makedirs("/run/lock", exist_ok=True)
    with open("/usr/sbin/policy-rc.d", "w") as f:
        f.write("#!/bin/sh\nexit 101\n")
    os.chmod("/usr/sbin/policy-rc.d", 0o755)
    return os.path.join(ov, "upper")


def after_install():
    out = {}
    try:
        pw = pwd.getpwnam("vramd")
        out["user"] = {"uid": pw.pw_uid, "home": pw.pw_dir, "shell": pw.pw_shell,
                       "group": grp.getgrgid(pw.pw_gid).gr_name}
    except KeyError:
        out["user"] = None
    try:
        st = os.stat("/var/lib/vramd")
        out["state_dir"] = {"owner": pwd.getpwuid(st.st_uid).pw_name, "mode": oct(stat.S_IMODE(st.st_mode))}
    except (OSError, KeyError) as e:
        out["state_dir"] = str(e)
    out["modes"] = {p: _owner_mode(p) for p in ("/etc/vramd", "/etc/vramd/vramd.yaml", "/var/lib/vramd")}
    # the service's user reads the config through its group; another user reads nothing there
    out["check_config_as_vramd"] = sh(["runuser", "-u", "vramd", "--", "/usr/bin/vramd", "--check-config",
                                       "/etc/vramd/vramd.yaml"])
    out["read_as_nobody"] = sh(["runuser", "-u", "nobody", "--", "cat", "/etc/vramd/vramd.yaml"])
    out["copyright"] = {}
    for pkg in ("vramd", "vramd-sim"):
        try:
            with open(f"/usr/share/doc/{pkg}/copyright") as f:
                out["copyright"][pkg] = f.read()
        except OSError as e:
            out["copyright"][pkg] = str(e)
    link = "/etc/systemd/system/multi-user.target.wants/vramd.service"
    out["enabled"] = os.readlink(link) if os.path.islink(link) else None
    out["conffiles"] = sh(["dpkg-query", "-W", "-f=${Conffiles}", "vramd"])["out"]
    out["files"] = {p: os.path.exists(p) for p in (
        "/usr/bin/vramd", "/usr/bin/vramctl", "/lib/systemd/system/vramd.service", "/etc/vramd/vramd.yaml",
        "/usr/lib/vramd/simgpu", "/usr/lib/vramd/simworker", "/usr/lib/vramd/libnvidia-ml-sim.so",
        "/usr/lib/vramd/libcuda-sim.so", "/usr/lib/vramd/simcuda-checkpoint",
        "/usr/share/doc/vramd/examples/vramd.yaml")}
    with open("/lib/systemd/system/vramd.service") as f:
        out["exec_start"] = [line.strip() for line in f if line.startswith("ExecStart=")]
    out["check_config"] = sh(["/usr/bin/vramd", "--check-config", "/etc/vramd/vramd.yaml"])
    return out


def _owner_mode(path):
    try:
        st = os.stat(path)
        return f"{pwd.getpwuid(st.st_uid).pw_name}:{grp.getgrgid(st.st_gid).gr_name} {stat.S_IMODE(st.st_mode):04o}"
    except (OSError, KeyError) as e:
        return str(e)


def get(url, data=None, timeout=10):
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)


def serve(port):
    """The installed vramd on a simulated GPU, as the vramd user, until `vramctl drain`."""
    out = {}
    # on the namespace's own /run (a tmpfs): readable by the vramd user, gone with the namespace
    run = "/run/vramd-pkgtest"
    os.makedirs(run, mode=0o755, exist_ok=True)
    gpu_set = f"pkgtest.{os.getpid()}"
    env = {"PATH": "/usr/bin:/bin", "SIMGPU": gpu_set, "SIMGPU_TIMESCALE": "0.02", "LANG": "C.UTF-8"}
    with open("/etc/vramd/vramd.yaml") as f:
        cfg = yaml.safe_load(f)
    cfg["listen"] = f"127.0.0.1:{port}"
    cfg["gpu"]["nvml_library"] = "/usr/lib/vramd/libnvidia-ml-sim.so"
    cfg["gpu"]["poll"] = "100ms"
    cfg["models"] = {"sim": {
        "route": "/sim/",
        "cmd": ["/usr/lib/vramd/simworker", "--port", "{port}", "--name", "sim", "--context", "64MiB",
                "--resident", "256MiB", "--per-request", "128MiB", "--output", "json",
                "--output-size", "1KiB", "--run-time", "0.1s"],
        "health": {"path": "/health", "interval": "200ms", "timeout": "2s", "failures": 3},
        "startup_timeout": "30s", "stop_timeout": "2s",
        "memory": {"resident": "512MiB", "per_request": "256MiB"},
        "deadline": "30s"}}
    path = os.path.join(run, "vramd.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    os.chmod(path, 0o644)
    as_vramd = ["runuser", "-u", "vramd", "--"]
    out["simgpu_create"] = sh(as_vramd + ["env", f"SIMGPU={gpu_set}", "/usr/lib/vramd/simgpu", "create", gpu_set,
                                          "--gpus", "1", "--memory", "8GiB"])
    log = open(os.path.join(run, "vramd.log"), "wb")
    proc = subprocess.Popen(as_vramd + ["env"] + [f"{k}={v}" for k, v in env.items()]
                            + ["/usr/bin/vramd", "--config", path], cwd="/var/lib/vramd",
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            status, _ = get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            if status == 200:
                break
            time.sleep(0.1)
        out["readyz"] = status
        out["request"] = get(f"http://127.0.0.1:{port}/sim/generate", data=b'{"prompt": "hello"}', timeout=30)
        # runuser's child: vramd itself, running as the vramd user
        out["vramd_user_pids"] = sh(["pgrep", "-u", "vramd", "-x", "vramd"])["out"].split()
        out["drain"] = sh(["/usr/bin/vramctl", "--url", f"http://127.0.0.1:{port}", "drain", "--wait"], timeout=60)
        try:
            out["exit"] = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            out["exit"] = "still running after drain"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        sh(["/usr/lib/vramd/simgpu", "rm", gpu_set], env={"SIMGPU": gpu_set, "PATH": "/usr/bin:/bin"})
        log.close()
        with open(os.path.join(run, "vramd.log"), errors="replace") as f:
            out["log_tail"] = f.read()[-3000:]
    # nothing of the vramd user may outlive the drain (workers included); an exited child
    # reparented to this machine's init shows as a zombie until init reaps it: not counted
    deadline = time.monotonic() + 10
    while True:
        ps = sh(["ps", "-u", "vramd", "-o", "pid=,stat=,args="])["out"].splitlines()
        live = [line.strip() for line in ps if line.split()[1:2] and not line.split()[1].startswith("Z")]
        if not live or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out["left_processes"] = live
    return out


def leftovers(upper):
    os.remove("/usr/sbin/policy-rc.d")
    left = []
    for layer in LAYERS:
        base = os.path.join(upper, layer)
        for dirpath, dirnames, filenames in os.walk(base):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, upper)
                st = os.lstat(full)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    continue  # a whiteout: something removed, not left
                if rel in ALLOWED_FILES or rel.startswith(ALLOWED_PREFIXES):
                    continue
                if rel.endswith("/__pycache__") or "/__pycache__/" in rel:
                    continue
                left.append(rel)
    # directories whose name says vramd, anywhere in the upper layers
    for layer in LAYERS:
        for dirpath, dirnames, _ in os.walk(os.path.join(upper, layer)):
            for d in dirnames:
                if "vramd" in d:
                    rel = os.path.relpath(os.path.join(dirpath, d), upper)
                    if not rel.startswith(ALLOWED_PREFIXES):
                        left.append(rel + "/")
    return sorted(left)


def main():
    work, deb, simdeb, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    result = {}
    upper = mount_root(work)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result["install"] = sh(["dpkg", "-i", deb, simdeb], env=env)
    if result["install"]["rc"] == 0:
        result["after_install"] = after_install()
        result["serve"] = serve(port)
    result["purge"] = sh(["dpkg", "--purge", "vramd-sim", "vramd"], env=env)
    result["after_purge"] = {"user_kept": _user_exists(), "state_dir": os.path.exists("/var/lib/vramd"),
                             "etc_vramd": os.path.exists("/etc/vramd")}
    result["left"] = leftovers(upper)
    print(json.dumps(result))


def _user_exists():
    try:
        pwd.getpwnam("vramd")
        return True
    except KeyError:
        return False


if __name__ == "__main__":
    main()
