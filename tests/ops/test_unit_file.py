"""ops: contrib/vramd.service passes `systemd-analyze verify` (warnings count as failures),
says what vramd needs (Type=notify, a watchdog, KillMode=mixed so that vramd drains its own
workers, a stop timeout above the drain, descriptors for max_connections, hardening that
leaves /dev/nvidia* visible and rootless Podman workers working: UMask=0077,
ProtectKernelModules, ProtectKernelLogs, SystemCallArchitectures=native; no ProtectClock
nor RestrictNamespaces nor an empty CapabilityBoundingSet, each with its reason), and agrees with contrib/vramd.yaml, which vramd accepts."""
import re
import shutil
import subprocess

import pytest
import yaml

from vramdkit import REPO_ROOT, vramd_binary

UNIT = REPO_ROOT / "contrib" / "vramd.service"
CONFIG = REPO_ROOT / "contrib" / "vramd.yaml"


def unit_settings(text):
    """{(section, key): [values]} of a unit file (continuation lines are not used here)."""
    out = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        out.setdefault((section, key.strip()), []).append(value.strip())
    return out


def seconds(text):
    """A systemd or vramd duration ("90s", "1min 30s", "60s", "250ms", "2m") in seconds."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", str(text)):
        total += float(number) * units[unit or "s"]
    return total


@pytest.fixture(scope="module")
def unit():
    return unit_settings(UNIT.read_text())


def one(unit, key, section="Service"):
    values = unit.get((section, key))
    assert values, f"{section}.{key} missing from {UNIT}"
    return values[-1]


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    binary = vramd_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not found: build vramd first")
    # verify checks that ExecStart's program exists: point it at the built binary
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/vramd " in text
    unit_path = tmp_path / "vramd.service"
    unit_path.write_text(text.replace("ExecStart=/usr/local/bin/vramd ", f"ExecStart={binary} "))
    p = subprocess.run([analyze, "verify", str(unit_path)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    out = p.stdout + p.stderr
    ours = [line for line in out.splitlines() if "vramd" in line]
    assert p.returncode == 0 and not ours, f"systemd-analyze verify (rc {p.returncode}):\n{out}"


def test_the_unit_says_what_vramd_needs(unit):
    assert one(unit, "Type") == "notify"
    assert one(unit, "NotifyAccess") == "main"
    assert seconds(one(unit, "WatchdogSec")) >= 10
    assert one(unit, "ExecStart") == "/usr/local/bin/vramd --config /etc/vramd/vramd.yaml"
    assert one(unit, "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one(unit, "KillMode") == "mixed"
    assert one(unit, "Restart") == "on-failure"
    assert seconds(one(unit, "RestartSec")) > 0
    assert one(unit, "User") == "vramd" and one(unit, "Group") == "vramd"
    assert one(unit, "StateDirectory") == "vramd"
    assert one(unit, "NoNewPrivileges") == "yes"
    assert one(unit, "ProtectSystem") == "strict"
    assert one(unit, "ProtectHome") in ("yes", "read-only", "tmpfs")
    assert one(unit, "PrivateTmp") == "yes"
    # a private /dev would hide /dev/nvidia*: NVML and CUDA would find no GPU
    assert unit.get(("Service", "PrivateDevices"), ["no"])[-1] in ("no", "false", "0")
    assert unit.get(("Service", "DevicePolicy"), ["auto"])[-1] == "auto"
    assert ("Install", "WantedBy") in unit


def test_the_unit_is_hardened_where_gpus_and_containers_allow(unit):
    """Hardening that leaves /dev/nvidia* and rootless Podman workers working (issue 36)."""
    assert one(unit, "UMask") == "0077"  # a token file written by the service is its own
    assert one(unit, "ProtectKernelModules") == "yes"
    assert one(unit, "ProtectKernelLogs") == "yes"
    assert one(unit, "SystemCallArchitectures") == "native"
    assert one(unit, "ProtectKernelTunables") == "yes"
    # systemd < 253 implies DeviceAllow=char-rtc r with ProtectClock=yes: every other device,
    # /dev/nvidia* included, would be refused (DevicePolicy=auto with a DeviceAllow= list)
    if unit.get(("Service", "ProtectClock"), ["no"])[-1] in ("yes", "true", "1"):
        allowed = " ".join(unit.get(("Service", "DeviceAllow"), []))
        assert "nvidia" in allowed, "ProtectClock=yes without DeviceAllow= for the GPU devices"
    # rootless Podman workers need user (and other) namespaces and capabilities inside them:
    # the unit leaves both to a drop-in, and says so
    text = UNIT.read_text()
    assert ("Service", "RestrictNamespaces") not in unit and "#RestrictNamespaces=yes" in text
    assert ("Service", "CapabilityBoundingSet") not in unit and "#CapabilityBoundingSet=" in text
    assert one(unit, "NoNewPrivileges") == "yes" and one(unit, "RestrictSUIDSGID") == "yes"


def test_the_unit_and_the_example_config_agree(unit):
    cfg = yaml.safe_load(CONFIG.read_text())
    limits = cfg.get("limits", {})
    # state_dir is the unit's StateDirectory
    assert cfg["state_dir"] == "/var/lib/" + one(unit, "StateDirectory")
    # stopping: the drain, then the slowest worker's stop, must fit before systemd SIGKILLs
    drain = seconds(limits.get("drain_timeout", "60s"))
    stops = [seconds(m.get("stop_timeout", cfg.get("defaults", {}).get("stop_timeout", "10s")))
             for m in cfg["models"].values()]
    needed = drain + max(stops) + 2  # vramd's own final grace after the stops
    assert seconds(one(unit, "TimeoutStopSec")) > needed, \
        f"TimeoutStopSec {one(unit, 'TimeoutStopSec')} <= drain + stop_timeout + 2s ({needed}s)"
    # each client connection can hold an upstream connection too
    nofile = int(one(unit, "LimitNOFILE"))
    assert nofile >= 2 * int(limits.get("max_connections", 20000)) + 1024, nofile
    # loopback without a token, as shipped
    assert str(cfg["listen"]).startswith("127.0.0.1:")
    assert cfg["log"]["format"] == "json"


def test_vramd_accepts_the_example_config():
    binary = vramd_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not found: build vramd first")
    p = subprocess.run([str(binary), "--check-config", str(CONFIG)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "ok (1 models)" in p.stdout
