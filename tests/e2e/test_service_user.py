"""e2e: the same config as root and as an unprivileged service user with a delegated cgroup
(issue 21; docs/operations.md "Workers in cgroups and containers").

As systemd's Delegate=yes does for a service, the test (root) makes a cgroup directory, hands
it to the user `nobody` (the directory, its cgroup.procs, cgroup.threads and
cgroup.subtree_control), puts vramd's process in it and drops to nobody before exec. vramd
then makes its subtree under its own cgroup (cgroup.path auto), and a worker that detaches a
helper with setsid is held whole: the helper is in the instance's leaf, dies at the unload,
and a clean stop leaves the delegated directory empty. v2 and v1 (pids + freezer) where this
machine has them. The same model config runs as root in the other cgroup tests.
"""
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from vramdkit import pid_alive, pids_with_cmdline, proc_cmdline, wait_for
from vramdkit.factory import VramdFactory

NOBODY = 65534
ROOTS = {"v2": ["/sys/fs/cgroup/unified"], "v1": ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer"]}


def delegated(mode):
    """Directories handed to nobody, one per hierarchy the mode uses; None when this machine
    (or this user) cannot make them."""
    if os.geteuid() != 0:
        return None
    name = f"vramd-deleg-{os.getpid()}-{secrets.token_hex(3)}"
    made = []
    try:
        for root in ROOTS[mode]:
            d = Path(root) / name
            d.mkdir()
            made.append(d)
            for f in ("", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"):
                p = d / f if f else d
                if p.exists():
                    os.chown(p, NOBODY, NOBODY)
    except OSError:
        for d in made:
            d.rmdir()
        return None
    return made


def remove_tree(d):
    """rmdir a cgroup directory bottom-up (cgroup files cannot be unlinked)."""
    for sub, dirs, _ in sorted(os.walk(d), key=lambda t: -t[0].count("/")):
        try:
            os.rmdir(sub)
        except OSError:
            pass


@pytest.mark.parametrize("mode", ["v2", "v1"])
def test_service_user_with_a_delegated_cgroup(mode, request):
    dirs = delegated(mode)
    if not dirs:
        pytest.skip(f"cannot delegate a cgroup {mode} directory here")
    home = Path(tempfile.mkdtemp(prefix="vramd-user-"))
    os.chmod(home, 0o755)
    (home / "var").mkdir()
    os.chown(home / "var", NOBODY, NOBODY)
    factory = VramdFactory(home, request.node)
    try:
        def as_service_user():
            for d in dirs:
                with open(d / "cgroup.procs", "w") as f:
                    f.write("0")
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        m = factory.worker("w")
        inner = " ".join(f"'{w}'" for w in m["cmd"])
        helper = f"exec -a helper@{factory.tag} sleep 600"
        m["cmd"] = ["/bin/bash", "-c", f"setsid bash -c '{helper}' </dev/null >/dev/null 2>&1 & exec {inner}"]
        vd = factory.start(models={"w": m}, preexec=as_service_user, cgroup={"mode": mode})
        assert os.stat(f"/proc/{vd.proc.pid}").st_uid == NOBODY
        st = vd.status()
        assert st["cgroup"]["mode"] == mode, st["cgroup"]
        assert st["cgroup"]["path"].startswith("/" + dirs[0].name + "/vramd-"), st["cgroup"]
        assert vd.get("/w/echo").status == 200
        helpers = wait_for(lambda: [p for p in pids_with_cmdline(f"helper@{factory.tag}")
                                    if proc_cmdline(p).startswith("helper@")] or None,
                           timeout=10, what="the detached helper")
        inst = vd.instances("w")[0]
        with open(f"/proc/{helpers[0]}/cgroup") as f:
            assert inst["cgroup"] in f.read()
        assert vd.post("/v1/models/w/unload").status == 200
        wait_for(lambda: not pid_alive(helpers[0]), timeout=10, what="the helper to die with its instance")
        assert vd.stop() == 0
        for d in dirs:
            left = [p.name for p in d.iterdir() if p.is_dir()]
            assert not left, f"cgroups left in the delegated {d}: {left}"
    finally:
        problems = factory.cleanup()
        for pid in pids_with_cmdline(f"helper@{factory.tag}"):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for d in dirs:
            remove_tree(d)
        shutil.rmtree(home, ignore_errors=True)
    assert not problems, problems
