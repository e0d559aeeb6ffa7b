"""--help of vramctl's commands and of vramd.

Expected: `vramctl COMMAND --help` (and `vramctl help COMMAND`) exits 0 for every command
that `vramctl --help` lists, prints its usage line and an "Example:" block whose lines run
that very command; `vramctl --help` lists the environment it reads; `vramd --help` exits 0
and names every environment variable vramd reads (each getenv("...") in src/ outside
src/cli, plus the systemd watchdog's) and the files it reads, with an example.
"""
import re
import subprocess

from vramdkit import REPO_ROOT, vramd_binary

from .conftest import clean_env, vramctl


def help_commands():
    p = vramctl("--help")
    assert p.returncode == 0, p
    block = p.stdout.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    return [ln.split()[0] for ln in block.splitlines() if ln.startswith("  ")]


def examples(text):
    assert "\nExample:\n" in text, text
    block = text.split("\nExample:\n", 1)[1].split("\n\n", 1)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip()]


def test_every_command_has_help_with_example():
    cmds = help_commands()
    assert len(cmds) >= 10, cmds
    for cmd in cmds:
        for argv in ((cmd, "--help"), (cmd, "-h"), ("help", cmd)):
            p = vramctl(*argv)
            assert p.returncode == 0, (argv, p)
            assert p.stdout.startswith(f"usage: vramctl {cmd}"), (argv, p.stdout)
            ex = examples(p.stdout)
            assert any(f"vramctl {cmd}" in line for line in ex), (cmd, ex)


def test_vramctl_help_lists_its_environment():
    p = vramctl("--help")
    names = set(re.findall(r'getenv\("([A-Z_]+)"\)', "".join(
        f.read_text() for f in sorted((REPO_ROOT / "src" / "cli").glob("*.c")))))
    assert {"VRAMD_URL", "VRAMD_TOKEN", "VRAMD_TOKEN_FILE", "NO_COLOR"} <= names, names
    env = p.stdout.split("\nEnvironment:\n", 1)[1].split("\n\n", 1)[0]
    for name in names:
        assert name in env, name
    assert examples(p.stdout)


def vramd_env_names():
    names = set()
    for f in (REPO_ROOT / "src").rglob("*.c"):
        if f.parts[-2] == "cli":
            continue
        names |= set(re.findall(r'getenv\("([A-Z_]+)"\)', f.read_text()))
    return names | {"WATCHDOG_USEC"}  # read by sd_watchdog_enabled() in daemon/notify.c


def test_vramd_help_lists_environment_and_files():
    p = subprocess.run([str(vramd_binary()), "--help"], capture_output=True, text=True, timeout=30,
                       env=clean_env())
    assert p.returncode == 0, p
    names = vramd_env_names()
    assert {"VRAMD_NVML_LIBRARY", "VRAMD_CUDA_LIBRARY", "NOTIFY_SOCKET", "PATH"} <= names, names
    env = p.stdout.split("\nEnvironment:\n", 1)[1].split("\n\n", 1)[0]
    for name in names:
        assert re.search(rf"\b{name}\b", env), name
    files = p.stdout.split("\nFiles:\n", 1)[1].split("\n\n", 1)[0]
    for f in ("vramd.yaml", "admin_token_file", "state_dir", "jobs.db", "/proc/meminfo",
              "libnvidia-ml.so.1"):
        assert f in files, f
    assert "\nSignals:\n" in p.stdout and "SIGHUP" in p.stdout
    assert any("vramd --config" in line for line in examples(p.stdout))
