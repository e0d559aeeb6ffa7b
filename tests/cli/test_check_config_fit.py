"""cli: `vramd --check-config` catches a model too big for the card (issue 36, item 10).

With --gpu-memory SIZE (once per GPU vramd uses), or, without it, the cards NVML reports
(here the simulated NVML of a 24 GiB simgpu set, through VRAMD_NVML_LIBRARY): every model
whose resident + smallest per-request reservation exceeds total - gpu.headroom of each GPU
it may use is an error with its file:line:column and key path, all of them reported, exit 1.
Failed before: `ok (3 models)`, exit 0, even with --strict.
"""
import subprocess
import uuid

from vramdkit import binary, sim_env, vramd_binary

CONFIG = """listen: 127.0.0.1:18800
models:
  small:
    url: http://127.0.0.1:9
    memory: { resident: 2GiB, per_request: 1GiB }
    clear_cache: { path: /free }
  big:
    url: http://127.0.0.1:9
    memory: { resident: 30GiB, per_request: 8GiB }
    clear_cache: { path: /free }
  wide:
    url: http://127.0.0.1:9
    gpus: [1]
    memory: { resident: 20GiB, per_request: 2GiB }
    clear_cache: { path: /free }
"""


def check(path, *args, env=None):
    return subprocess.run([str(vramd_binary()), "--check-config", str(path), *args], capture_output=True,
                          text=True, timeout=30, env=env)


def test_gpu_memory_given(tmp_path):
    path = tmp_path / "fit.yaml"
    path.write_text(CONFIG)
    p = check(path, "--gpu-memory", "24GiB")
    assert p.returncode == 1, p
    lines = p.stderr.splitlines()
    assert f"{path}:9:13: models.big.memory: needs 38GiB (resident 30GiB + per request 8GiB) but the largest GPU " \
           "it may use offers 23.5GiB (24GiB - gpu.headroom 512MiB): every request would be refused 422 " \
           "cannot_fit" in lines, p.stderr
    # all of them, not the first: wide may use GPU 1 only, and one GPU was given
    assert any(line.startswith(f"{path}:14:13: models.wide.gpus:") for line in lines), p.stderr
    assert lines[-1] == f"{path}: 2 models cannot fit the GPUs", p.stderr
    # options before --check-config, two GPUs: big fits the 48 GiB one, wide its GPU 1
    p = subprocess.run([str(vramd_binary()), "--strict", "--gpu-memory", "24GiB", "--gpu-memory", "48GiB",
                        "--check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "ok (3 models)" in p.stdout, p
    p = check(path, "--gpu-memory", "lots")
    assert p.returncode == 2 and "--gpu-memory needs a size like 24GiB" in p.stderr, p


def test_gpu_memory_from_nvml(tmp_path):
    path = tmp_path / "fit.yaml"
    path.write_text(CONFIG)
    name = f"fit.{uuid.uuid4().hex[:8]}"
    env = sim_env(name)
    subprocess.run([str(binary("simgpu")), "create", name, "--gpus", "1", "--memory", "24GiB"], env=env,
                   check=True, timeout=30, capture_output=True)
    try:
        p = check(path, env=env)
    finally:
        subprocess.run([str(binary("simgpu")), "rm", name], env=env, timeout=30, capture_output=True)
    assert p.returncode == 1, p
    assert f"{path}:9:13: models.big.memory: needs 38GiB" in p.stderr, p.stderr
    assert f"{path}: 2 models cannot fit the GPUs" in p.stderr, p.stderr
    # no NVML and no --gpu-memory (a machine without the GPUs): not guessed, not checked, and
    # a config clean otherwise still checks clean (nothing on stderr)
    env.pop("VRAMD_NVML_LIBRARY")
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    p = check(path, env=env)
    assert p.returncode == 0 and p.stdout.strip() == f"{path}: ok (3 models)" and "cannot fit" not in p.stderr, p
