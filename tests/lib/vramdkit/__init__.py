"""vramdkit: the test kit shared by vramd's pytest suites (tests/*) and benchmarks (bench/).

A suite's conftest.py puts tests/lib on sys.path and imports from here:
  paths    REPO_ROOT, PYTHON, build_dir(), binary(), vramd_binary(), nvml_lib(), check_binaries()
  net      free_port(), Reply, PeerClosed, RawConn (raw HTTP/1.1), build_request(),
           http_request(), open_stream(), request() (http.client), readable()
  waits    wait_for(), run_threads(), Background
  proc     /proc readers: pid_alive(), children_of(), pids_with_cmdline(), wait_for_gone(), ...;
           cgroup_usable("v2"|"v1"): can a cgroup be made in that hierarchy here
  descriptors  fill_descriptors(), release_descriptors(): vramd's descriptor table filled
  sim      sim_env(), Holder (`simgpu alloc`), sim_s(), size(), TIMESCALE
  daemon   Vramd (one daemon, GPU simulation optional), ExternalWorker, yaml_dump(),
           ledger checks, sanitizer/OOM markers
  factory  the `vramd` fixture (VramdFactory: testworker models, no simulated GPU)
  harness  the `sched` fixture (Harness: simulated GPUs, simworker models)
  report   the failure-report hook (pytest_runtest_makereport) and track()
  containers  Podman (an isolated podman setup, a simworker image, a vramd image),
           podman_usable(), and the `podman` fixture

Names are looked up lazily (`from vramdkit import free_port` imports net.py only), so the
benchmarks can use net.py and proc.py without pytest.

Invariants: every wait is a poll with a deadline; every process a test starts is killed at
teardown; every simulated GPU set made is removed.
"""
import importlib

_EXPORTS = {
    "containers": ["Podman", "PodmanError", "podman_usable"],
    "daemon": ["OOM_MARKERS", "SANITIZER_MARKERS", "ExternalWorker", "Vramd", "config_port",
               "has_oom", "ledger_is_resident_only", "ledger_problems", "sanitizer_reports",
               "yaml_dump"],
    "descriptors": ["fill_descriptors", "release_descriptors"],
    "harness": ["GiB", "HEADROOM", "MiB"],
    "net": ["PeerClosed", "RawConn", "Reply", "build_request", "free_port", "http_request",
            "open_stream", "readable", "request"],
    "paths": ["PYTHON", "REPO_ROOT", "binary", "build_dir", "check_binaries", "nvml_lib",
              "probe_bin", "vramd_binary"],
    "proc": ["cgroup_usable", "children_of", "descends_from", "fd_count", "pid_alive", "pids_with_cmdline",
             "proc_cmdline", "proc_stat", "proc_state", "wait_for_gone", "zombie_children"],
    "sim": ["TIMESCALE", "Holder", "sim_env", "sim_s", "size"],
    "waits": ["Background", "run_threads", "wait_for"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)


def __dir__():
    return __all__
