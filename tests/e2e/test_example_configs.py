"""e2e: every configuration the project ships (examples/**/*.yaml, contrib/vramd.yaml)
passes `vramd --check-config`, so a user who copies one starts from a config that loads."""
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
