/*
 * cuda_mem.c: libcuda-sim.so's device-memory calls, so that a stand-in server (Python with
 * ctypes, tests/standins/) takes and gives back simulated GPU memory the way a real server
 * does through the CUDA driver, and NVML (sim) lists it under its pid.
 *
 * ABI: as cuda.h declares it (NVIDIA's CUDA Driver API reference, "Device Management",
 * "Primary Context Management", "Context Management", "Memory Management"): CUdevice is an
 * int, CUcontext a pointer, CUdeviceptr an unsigned 64-bit integer; the _v2 entry points are
 * the ones cuda.h maps cuMemAlloc/cuMemFree/cuMemGetInfo/cuDeviceTotalMem to.
 *
 * Behaviour:
 *   cuDeviceGetCount / cuDeviceGet  the devices CUDA_VISIBLE_DEVICES names (indexes or GPU
 *              UUIDs, comma-separated; unset = every GPU of the set; empty = none), ordinal
 *              i is its i-th entry, as the driver does.
 *   cuDeviceTotalMem_v2  the GPU's total.
 *   cuDevicePrimaryCtxRetain / cuCtxSetCurrent  a context per device (no state of its own);
 *              the current context is per thread, as the driver's is. cuCtxGetCurrent /
 *              cuCtxGetDevice read it back; cuCtxSynchronize has nothing to wait for.
 *   cuMemGetInfo_v2  free and total of the current context's GPU; under a per-cgroup limit
 *              (nvmlDeviceSetMemoryLimits_v1), the limit as total and the room under it.
 *   cuMemAlloc_v2  simgpu_alloc on the current context's GPU (CUDA_ERROR_OUT_OF_MEMORY when
 *              it does not fit); cuMemFree_v2 gives the allocation back.
 * Every call before cuInit: CUDA_ERROR_NOT_INITIALIZED; no current context:
 * CUDA_ERROR_INVALID_CONTEXT (201).
 *
 * Invariants: at most CUDA_MEM_ALLOCS_MAX allocations live per process (then
 * CUDA_ERROR_OUT_OF_MEMORY); the table and what simgpu books for this process change
 * together under alloc_lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "simgpu.h"

CUresult_t cuDeviceGetCount(int *count);
CUresult_t cuDeviceGet(CUdevice_t *device, int ordinal);
CUresult_t cuDeviceTotalMem_v2(size_t *bytes, CUdevice_t dev);
CUresult_t cuDevicePrimaryCtxRetain(void **pctx, CUdevice_t dev);
CUresult_t cuDevicePrimaryCtxRelease_v2(CUdevice_t dev);
CUresult_t cuCtxSetCurrent(void *ctx);
CUresult_t cuCtxGetCurrent(void **pctx);
CUresult_t cuCtxGetDevice(CUdevice_t *device);
CUresult_t cuCtxSynchronize(void);
CUresult_t cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
CUresult_t cuMemAlloc_v2(CUdeviceptr_t *dptr, size_t bytes);
CUresult_t cuMemFree_v2(CUdeviceptr_t dptr);

static __thread int current_gpu = -1; /* the set's GPU index of this thread's context */

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc_entry_t allocs[CUDA_MEM_ALLOCS_MAX];
static CUdeviceptr_t next_ptr = 0x7f0000000000ULL;

/* The set's GPU index of visible ordinal i, or -1. */
static int visible_gpu(simgpu_t *s, int ordinal)
{
    int n = simgpu_count(s);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL)
        return ordinal >= 0 && ordinal < n ? ordinal : -1;
    char list[512];
    strncpy(list, cvd, sizeof list - 1);
    list[sizeof list - 1] = '\0';
    char *save = NULL;
    int i = 0;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
        int gpu;
        if (strncmp(tok, "GPU-", 4) == 0)
            gpu = simgpu_find_uuid(s, tok);
        else {
            char *end;
            long v = strtol(tok, &end, 10);
            gpu = (*end || end == tok || v < 0 || v >= n) ? -1 : (int)v;
        }
        if (gpu < 0)
            return -1; /* the driver stops at the first invalid entry */
        if (i == ordinal)
            return gpu;
    }
    return -1;
}

CUresult_t cuDeviceGetCount(int *count)
{
    simgpu_t *s = sim_cuda_set();
    if (!count)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    int n = 0;
    while (n < SIMGPU_MAX_GPUS && visible_gpu(s, n) >= 0)
        n++;
    *count = n;
    return 0;
}

CUresult_t cuDeviceGet(CUdevice_t *device, int ordinal)
{
    simgpu_t *s = sim_cuda_set();
    if (!device)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (visible_gpu(s, ordinal) < 0)
        return CUDA_ERR_INVALID_DEVICE;
    *device = ordinal;
    return 0;
}

CUresult_t cuDeviceTotalMem_v2(size_t *bytes, CUdevice_t dev)
{
    simgpu_t *s = sim_cuda_set();
    simgpu_info_t info;
    if (!bytes)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    int gpu = visible_gpu(s, dev);
    if (gpu < 0 || simgpu_info(s, gpu, &info) != 0)
        return CUDA_ERR_INVALID_DEVICE;
    *bytes = (size_t)info.total;
    return 0;
}

CUresult_t cuDevicePrimaryCtxRetain(void **pctx, CUdevice_t dev)
{
    simgpu_t *s = sim_cuda_set();
    if (!pctx)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (visible_gpu(s, dev) < 0)
        return CUDA_ERR_INVALID_DEVICE;
    *pctx = (void *)(uintptr_t)(dev + 1); /* a handle naming the device; never dereferenced */
    return 0;
}

CUresult_t cuDevicePrimaryCtxRelease_v2(CUdevice_t dev)
{
    simgpu_t *s = sim_cuda_set();
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    return visible_gpu(s, dev) < 0 ? CUDA_ERR_INVALID_DEVICE : 0;
}

CUresult_t cuCtxSetCurrent(void *ctx)
{
    simgpu_t *s = sim_cuda_set();
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (ctx == NULL) {
        current_gpu = -1;
        return 0;
    }
    int gpu = visible_gpu(s, (int)((uintptr_t)ctx - 1));
    if (gpu < 0)
        return CUDA_ERR_INVALID_CONTEXT;
    current_gpu = gpu;
    return 0;
}

/* The calling thread's context (NULL when none is current), as cuCtxSetCurrent set it. */
CUresult_t cuCtxGetCurrent(void **pctx)
{
    simgpu_t *s = sim_cuda_set();
    if (!pctx)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (current_gpu < 0) {
        *pctx = NULL;
        return 0;
    }
    int n = simgpu_count(s);
    for (int ordinal = 0; ordinal < n; ordinal++) /* the handle names the visible ordinal */
        if (visible_gpu(s, ordinal) == current_gpu) {
            *pctx = (void *)(uintptr_t)(ordinal + 1);
            return 0;
        }
    return CUDA_ERR_INVALID_CONTEXT;
}

CUresult_t cuCtxGetDevice(CUdevice_t *device)
{
    void *ctx = NULL;
    if (!device)
        return CUDA_ERR_INVALID_VALUE;
    CUresult_t rc = cuCtxGetCurrent(&ctx);
    if (rc != 0)
        return rc;
    if (!ctx)
        return CUDA_ERR_INVALID_CONTEXT;
    *device = (CUdevice_t)((uintptr_t)ctx - 1);
    return 0;
}

/* Every copy completes before it returns (cuda_vmm.c): nothing to wait for. */
CUresult_t cuCtxSynchronize(void)
{
    if (!sim_cuda_set())
        return CUDA_ERR_NOT_INITIALIZED;
    return current_gpu < 0 ? CUDA_ERR_INVALID_CONTEXT : 0;
}

CUresult_t cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    simgpu_t *s = sim_cuda_set();
    uint64_t f = 0, t = 0;
    if (!free_bytes || !total)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (current_gpu < 0 || simgpu_mem_view(s, current_gpu, &f, &t) != 0) /* under a cgroup limit: the limit */
        return CUDA_ERR_INVALID_CONTEXT;
    *free_bytes = (size_t)f;
    *total = (size_t)t;
    return 0;
}

CUresult_t cuMemAlloc_v2(CUdeviceptr_t *dptr, size_t bytes)
{
    simgpu_t *s = sim_cuda_set();
    if (!dptr || bytes == 0)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (current_gpu < 0)
        return CUDA_ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&alloc_lock);
    size_t slot = 0;
    while (slot < CUDA_MEM_ALLOCS_MAX && allocs[slot].ptr != 0)
        slot++;
    CUresult_t rc = CUDA_ERR_OUT_OF_MEMORY;
    if (slot < CUDA_MEM_ALLOCS_MAX && simgpu_alloc(s, current_gpu, bytes) == 0) {
        allocs[slot] = (alloc_entry_t){next_ptr, current_gpu, bytes, NULL, 0};
        *dptr = next_ptr;
        next_ptr += (bytes + 0xfffff) & ~(uint64_t)0xfffff; /* 1 MiB aligned, never reused */
        rc = 0;
    }
    pthread_mutex_unlock(&alloc_lock);
    return rc;
}

CUresult_t cuMemFree_v2(CUdeviceptr_t dptr)
{
    simgpu_t *s = sim_cuda_set();
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    pthread_mutex_lock(&alloc_lock);
    CUresult_t rc = CUDA_ERR_INVALID_VALUE;
    for (size_t i = 0; i < CUDA_MEM_ALLOCS_MAX; i++) {
        if (allocs[i].ptr == dptr && dptr != 0) {
            rc = simgpu_free(s, allocs[i].gpu, allocs[i].bytes) == 0 ? 0 : CUDA_ERR_INVALID_VALUE;
            free(allocs[i].data);
            allocs[i].data = NULL;
            allocs[i].data_len = 0;
            allocs[i].ptr = 0;
            break;
        }
    }
    pthread_mutex_unlock(&alloc_lock);
    return rc;
}

void sim_alloc_lock(void) { pthread_mutex_lock(&alloc_lock); }

void sim_alloc_unlock(void) { pthread_mutex_unlock(&alloc_lock); }

alloc_entry_t *sim_alloc_find_locked(CUdeviceptr_t p, uint64_t *off)
{
    for (size_t i = 0; i < CUDA_MEM_ALLOCS_MAX; i++) {
        if (allocs[i].ptr && p >= allocs[i].ptr && p - allocs[i].ptr < allocs[i].bytes) {
            *off = p - allocs[i].ptr;
            return &allocs[i];
        }
    }
    return NULL;
}

/* ---- the rest of the allocation family, answered by the same table (each a plain
 * allocation on the current context's GPU; streams, pools and managed memory are not
 * simulated beyond that: a stream-ordered free takes effect at once) ---- */

typedef void *CUmemoryPool_t;
typedef uint64_t CUmemHandle_t;

CUresult_t cuMemAllocPitch_v2(CUdeviceptr_t *dptr, size_t *pitch, size_t width, size_t height, unsigned elem);
CUresult_t cuMemAllocManaged(CUdeviceptr_t *dptr, size_t bytes, unsigned flags);
CUresult_t cuMemAllocAsync(CUdeviceptr_t *dptr, size_t bytes, CUstream_t stream);
CUresult_t cuMemAllocAsync_ptsz(CUdeviceptr_t *dptr, size_t bytes, CUstream_t stream);
CUresult_t cuDeviceGetDefaultMemPool(CUmemoryPool_t *pool, CUdevice_t dev);
CUresult_t cuMemAllocFromPoolAsync(CUdeviceptr_t *dptr, size_t bytes, CUmemoryPool_t pool, CUstream_t stream);
CUresult_t cuMemAllocFromPoolAsync_ptsz(CUdeviceptr_t *dptr, size_t bytes, CUmemoryPool_t pool, CUstream_t stream);
CUresult_t cuMemFreeAsync(CUdeviceptr_t dptr, CUstream_t stream);
CUresult_t cuMemFreeAsync_ptsz(CUdeviceptr_t dptr, CUstream_t stream);
CUresult_t cuMemCreate(CUmemHandle_t *handle, size_t bytes, const void *prop, unsigned long long flags);
CUresult_t cuMemRelease(CUmemHandle_t handle);
CUresult_t cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags);
CUresult_t cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status);

CUresult_t cuMemAllocPitch_v2(CUdeviceptr_t *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    if (!pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511; /* rows aligned to 512 bytes */
    CUresult_t rc = cuMemAlloc_v2(dptr, p * height);
    if (rc == 0)
        *pitch = p;
    return rc;
}

CUresult_t cuMemAllocManaged(CUdeviceptr_t *dptr, size_t bytes, unsigned flags)
{
    return flags == 1 || flags == 2 ? cuMemAlloc_v2(dptr, bytes) : CUDA_ERR_INVALID_VALUE;
}

CUresult_t cuMemAllocAsync(CUdeviceptr_t *dptr, size_t bytes, CUstream_t stream) { return cuMemAlloc_v2(dptr, bytes); }

CUresult_t cuMemAllocAsync_ptsz(CUdeviceptr_t *dptr, size_t bytes, CUstream_t stream)
{
    return cuMemAlloc_v2(dptr, bytes);
}

CUresult_t cuDeviceGetDefaultMemPool(CUmemoryPool_t *pool, CUdevice_t dev)
{
    simgpu_t *s = sim_cuda_set();
    if (!pool)
        return CUDA_ERR_INVALID_VALUE;
    if (!s)
        return CUDA_ERR_NOT_INITIALIZED;
    if (visible_gpu(s, dev) < 0)
        return CUDA_ERR_INVALID_DEVICE;
    *pool = (void *)(uintptr_t)(dev + 1);
    return 0;
}

CUresult_t cuMemAllocFromPoolAsync(CUdeviceptr_t *dptr, size_t bytes, CUmemoryPool_t pool, CUstream_t stream)
{
    return pool ? cuMemAlloc_v2(dptr, bytes) : CUDA_ERR_INVALID_VALUE;
}

CUresult_t cuMemAllocFromPoolAsync_ptsz(CUdeviceptr_t *dptr, size_t bytes, CUmemoryPool_t pool, CUstream_t stream)
{
    return pool ? cuMemAlloc_v2(dptr, bytes) : CUDA_ERR_INVALID_VALUE;
}

CUresult_t cuMemFreeAsync(CUdeviceptr_t dptr, CUstream_t stream) { return cuMemFree_v2(dptr); }

CUresult_t cuMemFreeAsync_ptsz(CUdeviceptr_t dptr, CUstream_t stream) { return cuMemFree_v2(dptr); }

/* Physical memory of the virtual memory management API: a handle names an allocation of the
 * table (mapping it at an address is not simulated). */
CUresult_t cuMemCreate(CUmemHandle_t *handle, size_t bytes, const void *prop, unsigned long long flags)
{
    if (!handle || !prop || flags != 0)
        return CUDA_ERR_INVALID_VALUE;
    return cuMemAlloc_v2(handle, bytes);
}

CUresult_t cuMemRelease(CUmemHandle_t handle) { return cuMemFree_v2(handle); }

/* cuGetProcAddress: the driver's entry points by base name, as the CUDA runtime asks for
 * them (NVIDIA's Driver API reference, "Driver Entry Point Access"): "cuMemAlloc" at
 * cudaVersion >= 3020 is cuMemAlloc_v2 (before: the 32-bit one, not simulated: not found),
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2) picks a _ptsz variant where one exists.
 * Unknown names: CUDA_ERROR_NOT_FOUND, *status CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1). */

CUresult_t cuInit(unsigned flags);
CUresult_t cuDriverGetVersion(int *version);

static void *proc_lookup(const char *sym, int version, uint64_t flags)
{
    if (strcmp(sym, "cuCheckpointOperationComplete") == 0) /* custom storage: CUDA 13.4 drivers only */
        return sim_custom_storage() ? (void *)cuCheckpointOperationComplete : NULL;
    bool ptsz = (flags & 2) != 0;
    static const struct {
        const char *base;
        int v2_since; /* 0: no _v2 */
        void *fn, *fn_ptsz;
    } table[] = {
        {"cuInit", 0, (void *)cuInit, NULL},
        {"cuDriverGetVersion", 0, (void *)cuDriverGetVersion, NULL},
        {"cuDeviceGetCount", 0, (void *)cuDeviceGetCount, NULL},
        {"cuDeviceGet", 0, (void *)cuDeviceGet, NULL},
        {"cuDeviceTotalMem", 3020, (void *)cuDeviceTotalMem_v2, NULL},
        {"cuDevicePrimaryCtxRetain", 0, (void *)cuDevicePrimaryCtxRetain, NULL},
        {"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease_v2, NULL},
        {"cuCtxSetCurrent", 0, (void *)cuCtxSetCurrent, NULL},
        {"cuCtxGetCurrent", 0, (void *)cuCtxGetCurrent, NULL},
        {"cuCtxGetDevice", 0, (void *)cuCtxGetDevice, NULL},
        {"cuCtxSynchronize", 0, (void *)cuCtxSynchronize, NULL},
        {"cuMemGetInfo", 3020, (void *)cuMemGetInfo_v2, NULL},
        {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, NULL},
        {"cuMemAllocPitch", 3020, (void *)cuMemAllocPitch_v2, NULL},
        {"cuMemFree", 3020, (void *)cuMemFree_v2, NULL},
        {"cuMemAllocManaged", 0, (void *)cuMemAllocManaged, NULL},
        {"cuMemAllocAsync", 0, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
        {"cuDeviceGetDefaultMemPool", 0, (void *)cuDeviceGetDefaultMemPool, NULL},
        {"cuMemAllocFromPoolAsync", 0, (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz},
        {"cuMemFreeAsync", 0, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
        {"cuMemCreate", 0, (void *)cuMemCreate, NULL},
        {"cuMemRelease", 0, (void *)cuMemRelease, NULL},
        {"cuMemGetAllocationGranularity", 0, (void *)cuMemGetAllocationGranularity, NULL},
        {"cuMemAddressReserve", 0, (void *)cuMemAddressReserve, NULL},
        {"cuMemAddressFree", 0, (void *)cuMemAddressFree, NULL},
        {"cuMemMap", 0, (void *)cuMemMap, NULL},
        {"cuMemUnmap", 0, (void *)cuMemUnmap, NULL},
        {"cuMemSetAccess", 0, (void *)cuMemSetAccess, NULL},
        {"cuMemHostAlloc", 0, (void *)cuMemHostAlloc, NULL},
        {"cuMemAllocHost", 3020, (void *)cuMemAllocHost_v2, NULL},
        {"cuMemFreeHost", 0, (void *)cuMemFreeHost, NULL},
        {"cuMemcpyHtoD", 3020, (void *)cuMemcpyHtoD_v2, NULL},
        {"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH_v2, NULL},
        {"cuMemcpyHtoDAsync", 3020, (void *)cuMemcpyHtoDAsync_v2, (void *)cuMemcpyHtoDAsync_v2_ptsz},
        {"cuMemcpyDtoHAsync", 3020, (void *)cuMemcpyDtoHAsync_v2, (void *)cuMemcpyDtoHAsync_v2_ptsz},
        {"cuStreamSynchronize", 0, (void *)cuStreamSynchronize, NULL},
        {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2, NULL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(sym, table[i].base) != 0)
            continue;
        if (table[i].v2_since && version < table[i].v2_since)
            return strcmp(sym, "cuGetProcAddress") == 0 ? (void *)cuGetProcAddress : NULL;
        return ptsz && table[i].fn_ptsz ? table[i].fn_ptsz : table[i].fn;
    }
    return NULL;
}

CUresult_t cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status)
{
    if (!symbol || !pfn || flags > 3)
        return CUDA_ERR_INVALID_VALUE;
    void *f = proc_lookup(symbol, version, flags);
    *pfn = f;
    if (status)
        *status = f ? 0 : 1;
    return f ? 0 : CUDA_ERR_NOT_FOUND;
}

CUresult_t cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
