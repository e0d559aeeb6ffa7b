"""e2e: every configuration the project ships (examples/**/*.yaml, contrib/vramd.yaml)
passes `vramd --check-config`, so a user who copies one starts from a config that loads."""
import os
import shutil
import subprocess

import pytest

from vramdkit.paths import REPO_ROOT, vramd_binary

CONFIGS = sorted(p for p in REPO_ROOT.glob("examples/**/*.yaml") if "node_modules" not in p.parts)
CONFIGS.append(REPO_ROOT / "contrib" / "vramd.yaml")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shipped_config_checks(path):
    p = subprocess.run([str(vramd_binary()), "--check-config", str(path)], capture_output=True, text=True,
                       timeout=30, cwd=REPO_ROOT)
    assert p.returncode == 0, (p.stdout, p.stderr)


EXAMPLES = [p for p in CONFIGS if "examples" in p.parts]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_shipped_example_has_no_warnings(path):
    """`--check-config --strict` passes too: the examples carry none of the warnings
    (docs/config.md, Warnings). Their workers are the simulated ones, so simworker is on PATH
    as when the examples are run, and so are the stand-in servers of the preset examples
    (tests/standins/bin: `vllm`, `ollama`, `llama-server`); contrib/vramd.yaml is left out: it
    names a production program (/srv/models/venv/bin/python) that is not on a test machine."""
    standins = REPO_ROOT / "tests" / "standins" / "bin"
    env = dict(os.environ, PATH=f"{vramd_binary().parent}:{standins}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    if "engine: podman" in path.read_text() and shutil.which("podman") is None:
        pytest.skip("the example runs its worker with podman, which is not installed here")
    p = subprocess.run([str(vramd_binary()), "--check-config", "--strict", str(path)], capture_output=True,
                       text=True, timeout=30, cwd=REPO_ROOT, env=env)
    assert p.returncode == 0 and p.stderr == "", (p.stdout, p.stderr)
