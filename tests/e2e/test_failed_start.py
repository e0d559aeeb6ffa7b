"""e2e: a failed start (a bad key, a busy port) prints one line and exits non-zero."""
import json
import socket
import subprocess

import pytest

from vramdkit import REPO_ROOT, free_port, vramd_binary


# --- one line for a failed start ------------------------------------------------------------

@pytest.mark.parametrize("case", ["bad_key", "port_busy"])
def test_failed_start_prints_one_line(tmp_path, case):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        if case == "bad_key":
            text = f"listen: 127.0.0.1:{free_port()}\nstate_dir: {tmp_path}/var\nbogus: 1\n"
        else:
            text = (f"listen: 127.0.0.1:{busy.getsockname()[1]}\nstate_dir: {tmp_path}/var\n"
                    f"models:\n  a:\n    url: http://127.0.0.1:{free_port()}\n")
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        p = subprocess.run([str(vramd_binary()), "--config", str(path)], capture_output=True,
                           text=True, timeout=15, cwd=REPO_ROOT)
    finally:
        busy.close()
    assert p.returncode == 1
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    if case == "bad_key":  # nothing else happened: one line
        assert len(lines) == 1, p.stderr
    # port busy: the start's own log lines come first (guard_started, fd_limit_low, ...);
    # the failure is still said once, as the last line
    errors = [line for line in lines if not line.startswith("{") or '"level":"error"' in line]
    assert errors == [lines[-1]], p.stderr
    e = json.loads(lines[-1])
    assert e["event"] == "vramd_start_failed", e
    if case == "bad_key":
        assert f"{path}:3:1: bogus" in e["error"], e
    else:
        assert "address already in use" in e["error"], e
