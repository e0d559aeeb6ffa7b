#!/usr/bin/python3
"""Runs every test of vramd and ends with one closing line CI reads: "N passed, N failed".

Stages, for each build directory given (plain, then ASan+UBSan):
  unit    every cmocka binary build*/tests/test_* (TAP output, one line per test)
  fuzz    every corpus replayer build*/tests/replay_* over tests/fuzz/corpus/<name>/
  e2e     pytest over every tests/<dir>/ with test_*.py files, VRAMD_BUILD pointing at the build
          (tests/gpu is included too; it skips itself where there is no NVIDIA GPU), in
          VRAMD_TEST_JOBS (default 3) parallel processes with pytest-xdist

Each test counts once per build. A stage that cannot run (binary crashed before printing
anything) counts as one failure. Exit status: 0 when nothing failed.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_unit(build, env):
    passed = failed = 0
    for binary in sorted(glob.glob(os.path.join(ROOT, build, "tests", "test_*"))):
        name = os.path.basename(binary)
        e = dict(env, CMOCKA_MESSAGE_OUTPUT="TAP")
        try:
            p = subprocess.run([binary], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)
            out = p.stdout + p.stderr
        except subprocess.TimeoutExpired as ex:
            out = (ex.stdout or b"").decode(errors="replace") if isinstance(ex.stdout, bytes) else (ex.stdout or "")
            out += "\nTIMEOUT after 300 s"
            p = None
        ok = len(re.findall(r"^ok \d+", out, re.M))
        bad = len(re.findall(r"^not ok \d+", out, re.M))
        if p is None or (p.returncode != 0 and bad == 0):
            bad += 1  # crashed or timed out outside a test
        passed += ok
        failed += bad
        status = "ok" if bad == 0 else "FAILED"
        print(f"  unit {build}/{name}: {ok} passed, {bad} failed [{status}]", flush=True)
        if bad:
            print("\n".join("    " + line for line in out.splitlines()[-60:]), flush=True)
    return passed, failed


def run_fuzz_replay(build, env):
    passed = failed = 0
    for binary in sorted(glob.glob(os.path.join(ROOT, build, "tests", "replay_*"))):
        name = os.path.basename(binary)[len("replay_"):]
        corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
        if not os.path.isdir(corpus):
            print(f"  fuzz {build}/{name}: no corpus at {corpus} [FAILED]")
            failed += 1
            continue
        p = subprocess.run([binary, corpus], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode == 0:
            passed += 1
            print(f"  fuzz {build}/{name}: corpus replayed clean ({p.stdout.strip().splitlines()[-1] if p.stdout.strip() else 'ok'})")
        else:
            failed += 1
            print(f"  fuzz {build}/{name}: FAILED\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return passed, failed


def parallel_args():
    """pytest-xdist options: the suites spend most of their time waiting (simulated GPU
    work, timeouts, polls), so N test processes (VRAMD_TEST_JOBS, default 3; 1 = serial)
    take a fraction of the time on 2 cores. Files stay whole (--dist loadfile): a file's
    tests run in order in one process, as they were written. Each process picks its
    listening ports from its own slice (vramdkit.net.free_port)."""
    try:
        jobs = int(os.environ.get("VRAMD_TEST_JOBS", "3"))
    except ValueError:
        jobs = 3
    if jobs <= 1:
        return []
    try:
        import xdist  # noqa: F401  (python3-pytest-xdist, installed by make deps)
    except ImportError:
        print("  pytest: python3-pytest-xdist missing, running serially", flush=True)
        return []
    return ["-n", str(jobs), "--dist", "loadfile"]


def run_pytest(build, env, label):
    # every tests/<dir>/ holding test_*.py files (unit and fuzz are C, run above)
    dirs = sorted(os.path.relpath(os.path.dirname(f), ROOT) for f in glob.glob(os.path.join(ROOT, "tests", "*", "test_*.py")))
    dirs = sorted(set(dirs), key=lambda d: (d == "tests/gpu", d))
    if not dirs:
        return 0, 0
    junit = os.path.join(ROOT, build, f"pytest-{label}.xml")
    e = dict(env, VRAMD_BUILD=build, PYTHONDONTWRITEBYTECODE="1")
    cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", junit]
    cmd += parallel_args()
    cmd += dirs
    print(f"  pytest ({build}): {' '.join(cmd[3:])}", flush=True)
    p = subprocess.run(cmd, cwd=ROOT, env=e, timeout=1800)
    passed = failed = 0
    try:
        root = ET.parse(junit).getroot()
        suites = [root] if root.tag == "testsuite" else list(root)
        for s in suites:
            tests = int(s.get("tests", 0))
            bad = int(s.get("failures", 0)) + int(s.get("errors", 0))
            skipped = int(s.get("skipped", 0))
            passed += tests - bad - skipped
            failed += bad
    except (OSError, ET.ParseError):
        failed += 1
    if p.returncode not in (0, 1, 5) and failed == 0:
        failed += 1  # pytest itself broke (usage error, internal error, interrupted)
    return passed, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--san-build", default=None)
    ap.add_argument("--only", choices=["unit", "fuzz", "e2e"], default=None)
    args = ap.parse_args()
    env = dict(os.environ)
    builds = [(args.build, env)]
    if args.san_build:
        # verify_asan_link_order=0: a worker started with the CUDA shim (libvramd-cuda.so, built
        # without sanitizers) in LD_PRELOAD has it ahead of the ASan runtime
        san_env = dict(env,
                       ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:verify_asan_link_order=0",
                       UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
        builds.append((args.san_build, san_env))
    total_p = total_f = 0
    t0 = time.time()
    for build, e in builds:
        print(f"== tests with {build}/", flush=True)
        stages = []
        if args.only in (None, "unit"):
            stages.append(("unit", run_unit(build, e)))
        if args.only in (None, "fuzz"):
            stages.append(("fuzz", run_fuzz_replay(build, e)))
        if args.only in (None, "e2e"):
            stages.append(("e2e", run_pytest(build, e, "san" if build == args.san_build else "plain")))
        for name, (p, f) in stages:
            print(f"  -> {build} {name}: {p} passed, {f} failed", flush=True)
            total_p += p
            total_f += f
    print(f"== all tests done in {time.time() - t0:.0f} s")
    print(f"{total_p} passed, {total_f} failed")
    return 0 if total_f == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
