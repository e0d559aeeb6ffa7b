"""ops: vramd ships as Debian packages and through `make install` (docs/packaging.md).

test_lintian: `dpkg-buildpackage -us -uc -b` on a copy of the tree (the checkout stays
clean) gives vramd_*.deb and vramd-sim_*.deb; lintian reports no error on them, and nothing
on their copyright files. test_the_packages_carry_the_license: LICENSE is the Apache
License 2.0 and each package ships /usr/share/doc/PACKAGE/copyright.

test_install_serve_purge: both packages installed with dpkg into a throwaway root (overlays
over /etc, /usr and /var in a private mount namespace: tests/ops/debian_root.py; the host's
files are never touched). Expected: a vramd system user and group, /var/lib/vramd owned by
it (0750), /etc/vramd root:vramd 0750 and its vramd.yaml root:vramd 0640 (the vramd user
reads it, nobody does not), the Apache-2.0 copyright file of each package, the unit enabled and pointing at /usr/bin/vramd, /etc/vramd/vramd.yaml a conffile
that vramd accepts (no models); the installed vramd, run as the vramd user with that config
plus one simworker model on the vramd-sim package's simulated GPU, answers /readyz and a
request, drains on `vramctl drain` and exits 0 with no process of the vramd user left; purge
removes /etc/vramd and /var/lib/vramd and leaves no file behind besides dpkg's database and
logs and the kept vramd account.

test_make_install_uninstall: `make install DESTDIR=... PREFIX=/usr/local` installs exactly
the documented file list (man pages and completions when the tree has them), the unit's
ExecStart= names $(PREFIX)/bin/vramd; `make uninstall` leaves no file.

The package tests skip where dpkg-buildpackage, debhelper or lintian are missing (`make test`
installs them: mk/deps.sh test), in the sanitizer pass (VRAMD_BUILD=build-san: the package
does not come from that build; the plain pass covers it), and the install test where this
is not root or unshare is missing. The build takes about 30 s on 2 cores (DEB_BUILD_OPTIONS=nocheck parallel=2).
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from vramdkit import REPO_ROOT, build_dir, free_port

HELPER = REPO_ROOT / "tests" / "ops" / "debian_root.py"


def _copy_tree(dst):
    """The tree as git sees it (tracked and untracked-not-ignored files), without build/."""
    try:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                               capture_output=True, check=True, timeout=60).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO_ROOT, dst, symlinks=True, ignore=shutil.ignore_patterns(
            "build", "build-*", "node_modules", ".git", "__pycache__", "debian/build"))
        return
    for f in files:
        if not f:
            continue
        rel = f.decode()
        src = REPO_ROOT / rel
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet in git
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    if "san" in build_dir().name:
        # the packages are built from the sources with Debian's flags, not from VRAMD_BUILD:
        # the plain build's pass of `make test` builds and checks them once
        pytest.skip("the Debian package is checked in the plain build's pass")
    for tool in ("dpkg-buildpackage", "dh", "lintian"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing (make test installs it: sh mk/deps.sh test)")
    top = tmp_path_factory.mktemp("debian-build")
    src = top / "vramd"
    src.mkdir()
    _copy_tree(src)
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck parallel=2", DEB_BUILD_PROFILES="nocheck")
    p = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"dpkg-buildpackage failed:\n{(p.stdout + p.stderr)[-6000:]}"
    found = {f.name.split("_")[0]: top / f.name for f in top.iterdir() if f.name.endswith(".deb")}
    assert "vramd" in found and "vramd-sim" in found, sorted(found)
    changes = [top / f.name for f in top.iterdir() if f.name.endswith(".changes")]
    assert len(changes) == 1, changes
    return {"vramd": found["vramd"], "vramd-sim": found["vramd-sim"], "changes": changes[0], "top": top}


def _deb_listing(deb):
    """{path: (mode string, owner)} of a .deb's data, as `dpkg-deb -c` lists it."""
    p = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, timeout=60, check=True)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        out[f[5].lstrip(".")] = (f[0], f[1])
    return out


def test_the_packages_carry_the_license(debs):
    """LICENSE (Apache-2.0) is at the root; each package installs debian/copyright."""
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    common = pathlib.Path("/usr/share/common-licenses/Apache-2.0")
    if common.exists():  # the standard text, as Debian ships it
        assert text == common.read_text()
    for pkg in ("vramd", "vramd-sim"):
        files = _deb_listing(debs[pkg])
        assert f"/usr/share/doc/{pkg}/copyright" in files, sorted(files)


def test_lintian(debs):
    p = subprocess.run(["lintian", "--pedantic", "-I", str(debs["changes"])], capture_output=True,
                       text=True, timeout=300)
    out = p.stdout + p.stderr
    errors = [line for line in out.splitlines() if line.startswith("E:")]
    assert not errors, f"lintian errors:\n{out}"
    licensing = [line for line in out.splitlines() if "copyright" in line or "license" in line]
    assert not licensing, f"lintian on the license:\n{out}"
    # every warning is either fixed or listed with its reason in docs/packaging.md
    doc = (REPO_ROOT / "docs" / "packaging.md").read_text()
    for line in out.splitlines():
        if line.startswith("W:"):
            tag = line.split()[2]
            assert tag in doc, f"lintian warning not listed in docs/packaging.md: {line}"


def test_install_serve_purge(debs, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("installing into a throwaway root needs root and unshare")
    work = tmp_path / "root"
    work.mkdir()
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "/usr/bin/python3", str(HELPER),
                        str(work), str(debs["vramd"]), str(debs["vramd-sim"]), str(free_port())],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip(), f"debian_root.py failed:\n{p.stdout[-4000:]}{p.stderr[-4000:]}"
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["install"]["rc"] == 0, r["install"]["out"]

    a = r["after_install"]
    assert a["user"] is not None, "no vramd user after install"
    assert a["user"]["group"] == "vramd" and a["user"]["uid"] < 1000, a["user"]
    assert a["user"]["home"] == "/var/lib/vramd" and a["user"]["shell"] == "/usr/sbin/nologin", a["user"]
    assert a["state_dir"] == {"owner": "vramd", "mode": "0o750"}, a["state_dir"]
    # /etc/vramd is the service's group's alone: a token file put there is not world-readable
    assert a["modes"] == {"/etc/vramd": "root:vramd 0750", "/etc/vramd/vramd.yaml": "root:vramd 0640",
                          "/var/lib/vramd": "vramd:vramd 0750"}, a["modes"]
    assert a["check_config_as_vramd"]["rc"] == 0, a["check_config_as_vramd"]
    assert a["read_as_nobody"]["rc"] != 0 and "Permission denied" in a["read_as_nobody"]["out"], a["read_as_nobody"]
    # the license (Apache-2.0, LICENSE and debian/copyright) is installed with each package
    for pkg, text in a["copyright"].items():
        assert text.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"), (pkg, text)
        assert "License: Apache-2.0" in text and "/usr/share/common-licenses/Apache-2.0" in text, (pkg, text)
    assert a["enabled"] == "/lib/systemd/system/vramd.service", "the unit is not enabled"
    assert "/etc/vramd/vramd.yaml" in a["conffiles"], a["conffiles"]
    assert all(a["files"].values()), a["files"]
    assert a["exec_start"] == ["ExecStart=/usr/bin/vramd --config /etc/vramd/vramd.yaml"], a["exec_start"]
    assert a["check_config"]["rc"] == 0 and "ok (0 models)" in a["check_config"]["out"], a["check_config"]

    s = r["serve"]
    log = s.get("log_tail", "")
    assert s["simgpu_create"]["rc"] == 0, s["simgpu_create"]
    assert s["readyz"] == 200, f"readyz {s['readyz']}\n{log}"
    assert s["request"][0] == 200 and '"success": true' in s["request"][1], f"{s['request']}\n{log}"
    assert len(s["vramd_user_pids"]) == 1, f"vramd was not running as the vramd user: {s['vramd_user_pids']}"
    assert s["drain"]["rc"] == 0, f"{s['drain']}\n{log}"
    assert s["exit"] == 0, f"vramd exit {s['exit']}\n{log}"
    assert s["left_processes"] == [], s["left_processes"]

    assert r["purge"]["rc"] == 0, r["purge"]["out"]
    after = r["after_purge"]
    assert after["state_dir"] is False, "purge left /var/lib/vramd"
    assert after["etc_vramd"] is False, "purge left /etc/vramd"
    assert after["user_kept"] is True, "the vramd user is kept on purge (docs/packaging.md)"
    assert r["left"] == [], f"purge left files behind: {r['left']}"


def _files(root):
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def test_make_install_uninstall(tmp_path):
    build = build_dir()
    if not (build / "bin" / "vramd").exists():
        pytest.fail(f"{build}/bin/vramd is missing: build first (make)")
    dest = tmp_path / "dest"
    args = ["make", "--no-print-directory", "-s", "-C", str(REPO_ROOT), f"BUILD={build}",
            f"DESTDIR={dest}", "PREFIX=/usr/local"]
    p = subprocess.run(args + ["install"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr

    docs = {"usr/local/share/doc/vramd/" + f.name for f in (REPO_ROOT / "docs").glob("*.md")}
    mans = {f"usr/local/share/man/man{f.suffix[1:]}/{f.name}" for f in (REPO_ROOT / "man").glob("*.[158]")} \
        if (REPO_ROOT / "man").is_dir() else set()
    comp = set()
    if (REPO_ROOT / "contrib/completions/vramctl.bash").exists():
        comp.add("usr/local/share/bash-completion/completions/vramctl")
    if (REPO_ROOT / "contrib/completions/_vramctl").exists():
        comp.add("usr/local/share/zsh/site-functions/_vramctl")
    expected = {
        "usr/local/bin/vramd", "usr/local/bin/vramctl",
        "usr/local/lib/vramd/simgpu", "usr/local/lib/vramd/simworker", "usr/local/lib/vramd/simcuda-checkpoint",
        "usr/local/lib/vramd/libnvidia-ml-sim.so", "usr/local/lib/vramd/libcuda-sim.so",
        "usr/local/lib/vramd/libvramd-cuda.so",
        "usr/local/lib/systemd/system/vramd.service",
        "usr/local/share/doc/vramd/README.md",
        "usr/local/share/doc/vramd/examples/vramd.yaml", "usr/local/share/doc/vramd/examples/vramd-minimal.yaml",
    } | docs | mans | comp
    got = _files(dest)
    assert got == expected, f"missing: {sorted(expected - got)}\nunexpected: {sorted(got - expected)}"
    assert os.access(dest / "usr/local/bin/vramd", os.X_OK)
    unit = (dest / "usr/local/lib/systemd/system/vramd.service").read_text()
    assert "ExecStart=/usr/local/bin/vramd --config /etc/vramd/vramd.yaml" in unit
    # the installed binaries run from where they were put
    v = subprocess.run([str(dest / "usr/local/bin/vramd"), "--check-config",
                        str(dest / "usr/local/share/doc/vramd/examples/vramd-minimal.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert v.returncode == 0, v.stdout + v.stderr

    p = subprocess.run(args + ["uninstall"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _files(dest) == set(), f"uninstall left: {sorted(_files(dest))}"
    vramd_dirs = [d for d, _, _ in os.walk(dest) if "vramd" in os.path.basename(d)]
    assert vramd_dirs == [], f"uninstall left directories: {vramd_dirs}"
