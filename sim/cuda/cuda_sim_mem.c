/*
 * cuda_sim_mem.c: libcuda-sim.so's memory calls, so a stand-in server (a Python script
 * through ctypes, tests/standins/) holds simulated GPU memory the way a real server's CUDA
 * allocations do: NVML (sim) shows it against the calling process.
 *
 * ABI: as cuda.h declares the _v2 entry points (NVIDIA's CUDA Driver API reference, "Memory
 * Management"): CUdeviceptr is an unsigned 64-bit integer, sizes are size_t.
 *   cuMemAlloc_v2(&dptr, bytes)  bytes > 0 on the process's device 0 (the first entry of
 *                                $CUDA_VISIBLE_DEVICES, an index or a GPU UUID; unset = 0);
 *                                CUDA_ERROR_OUT_OF_MEMORY when it does not fit (nothing taken)
 *   cuMemFree_v2(dptr)           gives an allocation back; an unknown pointer ->
 *                                CUDA_ERROR_INVALID_VALUE
 *   cuMemGetInfo_v2(&free, &total)  the device's free and total bytes
 * The simulated set is $SIMGPU, mapped on first use (no context is simulated: the calls need
 * no cuCtxCreate); CUDA_ERROR_NO_DEVICE when it is unset, names no set, or
 * CUDA_VISIBLE_DEVICES names no device of it.
 *
 * Invariants: at most SIM_MEM_SLOTS live allocations per process (more: out of memory, as
 * a driver out of handles would say); pointers are never reused within a process; every
 * call is serialized by one mutex (alloc and free are short: a shared-memory table update).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simgpu.h"

typedef int CUresult_mem; /* CUresult: the values below are cuda.h's */
#define MEM_SUCCESS 0
#define MEM_ERROR_INVALID_VALUE 1
#define MEM_ERROR_OUT_OF_MEMORY 2
#define MEM_ERROR_NO_DEVICE 100

#define SIM_MEM_SLOTS 4096
#define SIM_MEM_BASE 0x7f0000000000ULL

typedef uint64_t CUdeviceptr_sim;

CUresult_mem cuMemAlloc_v2(CUdeviceptr_sim *dptr, size_t bytes);
CUresult_mem cuMemFree_v2(CUdeviceptr_sim dptr);
CUresult_mem cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static simgpu_t *mem_set;
static int mem_gpu = -1;
static uint64_t next_ptr = SIM_MEM_BASE;
static struct {
    CUdeviceptr_sim ptr;
    uint64_t bytes;
} slots[SIM_MEM_SLOTS];

/* The process's device 0, as CUDA_VISIBLE_DEVICES names it; -1 when none. */
static int visible_device(simgpu_t *s)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd)
        return 0;
    char first[128];
    size_t n = strcspn(cvd, ",");
    if (n == 0 || n >= sizeof first)
        return -1;
    memcpy(first, cvd, n);
    first[n] = 0;
    if (strncmp(first, "GPU-", 4) == 0)
        return simgpu_find_uuid(s, first);
    char *end = NULL;
    long v = strtol(first, &end, 10);
    return *end || end == first || v < 0 || v >= simgpu_count(s) ? -1 : (int)v;
}

/* Map the set once (mem_lock held); false when there is no device. */
static int open_locked(void)
{
    if (!mem_set) {
        mem_set = simgpu_open(NULL, NULL, 0);
        if (!mem_set)
            return 0;
        mem_gpu = visible_device(mem_set);
    }
    return mem_gpu >= 0;
}

CUresult_mem cuMemAlloc_v2(CUdeviceptr_sim *dptr, size_t bytes)
{
    if (!dptr || bytes == 0)
        return MEM_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    CUresult_mem rc = MEM_ERROR_OUT_OF_MEMORY;
    size_t k = 0;
    while (k < SIM_MEM_SLOTS && slots[k].ptr)
        k++;
    if (!open_locked())
        rc = MEM_ERROR_NO_DEVICE;
    else if (k < SIM_MEM_SLOTS && simgpu_alloc(mem_set, mem_gpu, bytes) == 0) {
        slots[k].ptr = next_ptr;
        slots[k].bytes = bytes;
        next_ptr += (bytes + 0xfffff) & ~(uint64_t)0xfffff; /* 1 MiB aligned, never reused */
        *dptr = slots[k].ptr;
        rc = MEM_SUCCESS;
    }
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

CUresult_mem cuMemFree_v2(CUdeviceptr_sim dptr)
{
    pthread_mutex_lock(&mem_lock);
    CUresult_mem rc = MEM_ERROR_INVALID_VALUE;
    for (size_t k = 0; dptr && mem_set && k < SIM_MEM_SLOTS; k++) {
        if (slots[k].ptr == dptr) {
            simgpu_free(mem_set, mem_gpu, slots[k].bytes);
            slots[k].ptr = 0;
            slots[k].bytes = 0;
            rc = MEM_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

CUresult_mem cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return MEM_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    CUresult_mem rc = MEM_ERROR_NO_DEVICE;
    simgpu_info_t info;
    if (open_locked() && simgpu_info(mem_set, mem_gpu, &info) == 0) {
        *total_bytes = (size_t)info.total;
        *free_bytes = (size_t)(info.total > info.used ? info.total - info.used : 0);
        rc = MEM_SUCCESS;
    }
    pthread_mutex_unlock(&mem_lock);
    return rc;
}
