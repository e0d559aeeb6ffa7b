"""sim: libcuda-sim.so's device-memory calls (sim/cuda/cuda_mem.c), which the preset stand-ins
(tests/standins/) take their GPU memory through.

Covers, and expects: a child process (ctypes) sees the devices CUDA_VISIBLE_DEVICES names
(an index, a UUID; ordinal 0 is the first entry), cuDeviceTotalMem/cuMemGetInfo give the
GPU's figures, cuMemAlloc books the bytes to the child's pid on the named GPU (simgpu show
lists them), an allocation that does not fit is CUDA_ERROR_OUT_OF_MEMORY (2) and books
nothing, cuMemFree gives them back; calls before cuInit are CUDA_ERROR_NOT_INITIALIZED (3),
an allocation without a current context CUDA_ERROR_INVALID_CONTEXT (201).
"""
import json
import subprocess
import sys

from vramdkit.paths import cuda_lib

CHILD = r'''
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
out = {}
n = ctypes.c_int()
out["count_before_init"] = lib.cuDeviceGetCount(ctypes.byref(n))
assert lib.cuInit(0) == 0
ptr = ctypes.c_uint64()
out["alloc_no_ctx"] = lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
assert lib.cuDeviceGetCount(ctypes.byref(n)) == 0
out["count"] = n.value
dev = ctypes.c_int()
assert lib.cuDeviceGet(ctypes.byref(dev), 0) == 0
total = ctypes.c_size_t()
assert lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev) == 0
out["total"] = total.value
ctx = ctypes.c_void_p()
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
big = ctypes.c_uint64()
out["alloc"] = lib.cuMemAlloc_v2(ctypes.byref(big), ctypes.c_size_t(int(sys.argv[2])))
out["too_big"] = lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[3])))
free, tot = ctypes.c_size_t(), ctypes.c_size_t()
assert lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(tot)) == 0
out["free"] = free.value
print(json.dumps(out), flush=True)
sys.stdin.readline()  # hold the memory until told
out2 = {"free_rc": lib.cuMemFree_v2(big), "double_free_rc": lib.cuMemFree_v2(big)}
print(json.dumps(out2), flush=True)
sys.stdin.readline()
'''

GiB = 1 << 30


def child_env(base):
    """A sanitized build's library (make SAN=1) needs the ASan runtime first in the child."""
    env = dict(base)
    if b"libasan.so" in cuda_lib().read_bytes():
        runtime = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        env.update(LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0")
    return env


def test_alloc_free_on_the_visible_gpu(sim):
    name = sim.create(gpus=2, memory="8GiB")
    uuid1 = sim.show(name)["gpus"][1]["uuid"]
    for visible, gpu in (("1", 1), (uuid1, 1), ("0,1", 0)):
        env = child_env(dict(sim.env, SIMGPU=name, CUDA_VISIBLE_DEVICES=visible))
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(cuda_lib()), str(3 * GiB), str(6 * GiB)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            out = json.loads(p.stdout.readline())
            assert out["count_before_init"] == 3 and out["alloc_no_ctx"] == 201, out
            assert out["count"] == len(visible.split(",")), out
            assert out["total"] == 8 * GiB and out["alloc"] == 0 and out["too_big"] == 2, out
            assert out["free"] == 5 * GiB, out
            shown = sim.show(name)["gpus"]
            assert [pr["used"] for pr in shown[gpu]["processes"] if pr["pid"] == p.pid] == [3 * GiB], shown
            assert not [pr for pr in shown[1 - gpu]["processes"] if pr["pid"] == p.pid], shown
            p.stdin.write("\n")
            p.stdin.flush()
            out2 = json.loads(p.stdout.readline())
            assert out2 == {"free_rc": 0, "double_free_rc": 1}, out2
            shown = sim.show(name)["gpus"]
            assert not [pr for pr in shown[gpu]["processes"] if pr["pid"] == p.pid and pr["used"]], shown
            p.stdin.write("\n")
            p.stdin.flush()
        finally:
            p.wait(timeout=10)
