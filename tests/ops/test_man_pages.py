"""The man pages in man/ (vramd.8, vramctl.1, vramd.yaml.5) are in step with their sources
and render cleanly.

Expected:
  - every key of docs/config.md's key tables (| key | type | default | meaning |) appears in
    vramd.yaml.5 as a bold tag (\\fBkey\\fR), and every table's heading as a section;
  - every command `vramctl --help` lists has its own subsection (.SS) in vramctl.1, and the
    environment variables vramctl reads (getenv in src/cli) appear in it;
  - every environment variable vramd reads (getenv in src/ outside src/cli, and the
    watchdog's) appears in vramd.8;
  - regenerating the pages (mk/gen_man.py, `make man`) from the current docs and binaries
    gives the committed files byte for byte;
  - `groff -man -ww -z` (groff-base) and `man --warnings -l` (man-db) print no warning for
    any page; each is skipped where the tool is missing.
"""
import os
import re
import shutil
import subprocess

import pytest

from vramdkit import REPO_ROOT, binary, build_dir, vramd_binary

MAN = REPO_ROOT / "man"
PAGES = ["vramd.8", "vramctl.1", "vramd.yaml.5"]


def config_keys():
    """{heading: [keys]} of docs/config.md's key tables, read here independently of the
    generator (a table row is `| key | ...`, its first cell in backticks)."""
    out, heading, in_keys = {}, None, False
    for line in (REPO_ROOT / "docs" / "config.md").read_text().splitlines():
        m = re.match(r"#{2,4} (.*)", line)
        if m:
            heading, in_keys = m.group(1).strip(), False
            continue
        if line.startswith("| key |"):
            in_keys = True
            continue
        if not line.startswith("|"):
            if line.strip():
                in_keys = False
            continue
        m = re.match(r"\| `([^`]+)` \|", line)
        if in_keys and m:
            out.setdefault(heading, []).append(m.group(1))
    return out


def page(name):
    return (MAN / name).read_text()


def test_config_page_has_every_key():
    keys = config_keys()
    assert sum(len(v) for v in keys.values()) >= 120, keys  # the doc has 129 keys in 17 tables
    text = page("vramd.yaml.5")
    sections = re.findall(r"^\.S[SH] (.*)$", text, re.M)
    missing = []
    for heading, names in keys.items():
        plain = heading.replace("`", "")
        assert any(plain.upper() == s or s.replace("\\fB", "").replace("\\fR", "") == plain
                   for s in sections), (heading, sections)
        for k in names:
            if f"\\fB{k}\\fR" not in text:
                missing.append(f"{heading}: {k}")
    assert not missing, missing


def vramctl_commands():
    p = subprocess.run([str(binary("vramctl")), "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p
    block = p.stdout.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    return [ln.split()[0] for ln in block.splitlines() if ln.startswith("  ")]


def getenv_names(cli):
    names = set()
    for f in (REPO_ROOT / "src").rglob("*.c"):
        if (f.parts[-2] == "cli") == cli:
            names |= set(re.findall(r'getenv\("([A-Z_]+)"\)', f.read_text()))
    return names


def test_vramctl_page_has_every_command_and_variable():
    cmds = vramctl_commands()
    assert len(cmds) >= 10, cmds
    text = page("vramctl.1")
    subsections = re.findall(r"^\.SS (.*)$", text, re.M)
    for c in cmds:
        assert c in subsections, (c, subsections)
        assert f"vramctl {c}" in text, c  # its usage line
    names = getenv_names(cli=True)
    assert "VRAMD_URL" in names, names
    for n in names:
        assert n in text, n


def test_vramd_page_has_every_variable():
    names = getenv_names(cli=False) | {"WATCHDOG_USEC"}
    assert {"VRAMD_NVML_LIBRARY", "VRAMD_CUDA_LIBRARY", "NOTIFY_SOCKET"} <= names, names
    text = page("vramd.8")
    env = text.split(".SH ENVIRONMENT", 1)[1].split(".SH ", 1)[0]
    for n in names:
        assert n in env, n
    for section in ("SYNOPSIS", "OPTIONS", "SIGNALS", "ENVIRONMENT", "FILES", "EXIT STATUS", "SEE ALSO"):
        assert f".SH {section}\n" in text, section


def test_pages_are_generated_from_current_sources(tmp_path):
    for b in (vramd_binary(), binary("vramctl")):
        if not b.exists():
            pytest.fail(f"{b} not found: build first")
    p = subprocess.run(["/usr/bin/python3", str(REPO_ROOT / "mk" / "gen_man.py"), "--build", str(build_dir()),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p
    stale = [n for n in PAGES if (tmp_path / n).read_text() != page(n)]
    assert not stale, f"man/{stale} out of step with their sources: run `make man` and commit"


@pytest.mark.parametrize("name", PAGES)
def test_groff_renders_without_warnings(name):
    if not shutil.which("groff"):
        pytest.skip("groff is not installed (Debian: groff-base)")
    p = subprocess.run(["groff", "-man", "-ww", "-z", str(MAN / name)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr


@pytest.mark.parametrize("name", PAGES)
def test_man_renders_without_warnings(name):
    if not shutil.which("man"):
        pytest.skip("man is not installed (Debian: man-db)")
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    p = subprocess.run(["man", "--warnings", "-l", "-Tutf8", str(MAN / name)], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert len(p.stdout) > 1000, p.stdout
