/*
 * cudadrv: simworker's allocations through the CUDA driver API (cudadrv.h).
 */
#include "cudadrv.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_ctx_retain_t)(void **, int);
typedef int (*cu_ctx_set_t)(void *);
typedef int (*cu_alloc_t)(uint64_t *, size_t);
typedef int (*cu_free_t)(uint64_t);
typedef int (*cu_info_t)(size_t *, size_t *);
typedef int (*cu_proc_t)(const char *, void **, int, uint64_t, int *);
typedef int (*cu_htod_t)(uint64_t, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, uint64_t, size_t);

#define CUDA_OOM 2
#define STACK_MAX 65536
#define DATA_BYTES 65536 /* written at the start of each allocation with --data-chunk */

typedef struct alloc_rec {
    uint64_t ptr, bytes;
} alloc_rec_t;

struct sw_cuda {
    void *lib;
    char path[PATH_MAX];
    cu_alloc_t alloc;
    cu_free_t release;
    cu_info_t info;
    cu_htod_t htod;
    cu_dtoh_t dtoh;
    uint64_t chunk;     /* --data-chunk: allocations at most this large, each with data */
    uint64_t seed;
    alloc_rec_t *stack;
    size_t n;
    uint64_t held;
};

static bool file_ok(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void *resolve(void *lib, cu_proc_t proc, const char *base, const char *full)
{
    if (!proc)
        return dlsym(lib, full);
    void *f = NULL;
    int status = 0;
    return proc(base, &f, 12000, 0, &status) == 0 ? f : NULL;
}

sw_cuda_t *sw_cuda_open(bool via_proc_address, char *why, size_t whylen)
{
    char path[PATH_MAX] = "";
    const char *env = getenv("VRAMD_CUDA_LIBRARY");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof path, "%.*s/../lib/libcuda-sim.so", (int)(sizeof path - 32), exe);
        }
        if (!path[0] || !file_ok(path)) {
            snprintf(why, whylen, "no CUDA driver library (VRAMD_CUDA_LIBRARY unset, no libcuda-sim.so beside simworker)");
            return NULL;
        }
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, whylen, "%s", dlerror());
        return NULL;
    }
    cu_proc_t proc = via_proc_address ? (cu_proc_t)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    cu_init_t init = (cu_init_t)resolve(lib, proc, "cuInit", "cuInit");
    cu_device_get_t dev_get = (cu_device_get_t)resolve(lib, proc, "cuDeviceGet", "cuDeviceGet");
    cu_ctx_retain_t retain = (cu_ctx_retain_t)resolve(lib, proc, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    cu_ctx_set_t set = (cu_ctx_set_t)resolve(lib, proc, "cuCtxSetCurrent", "cuCtxSetCurrent");
    sw_cuda_t *d = calloc(1, sizeof *d);
    alloc_rec_t *stack = calloc(STACK_MAX, sizeof *stack);
    int dev = 0;
    void *ctx = NULL;
    if (d && stack) {
        d->alloc = (cu_alloc_t)resolve(lib, proc, "cuMemAlloc", "cuMemAlloc_v2");
        d->release = (cu_free_t)resolve(lib, proc, "cuMemFree", "cuMemFree_v2");
        d->info = (cu_info_t)resolve(lib, proc, "cuMemGetInfo", "cuMemGetInfo_v2");
        d->htod = (cu_htod_t)resolve(lib, proc, "cuMemcpyHtoD", "cuMemcpyHtoD_v2");
        d->dtoh = (cu_dtoh_t)resolve(lib, proc, "cuMemcpyDtoH", "cuMemcpyDtoH_v2");
        d->seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)d;
    }
    if (!d || !stack || (via_proc_address && !proc) || !init || !dev_get || !retain || !set || !d->alloc ||
        !d->release || !d->info || init(0) != 0 || dev_get(&dev, 0) != 0 || retain(&ctx, dev) != 0 ||
        set(ctx) != 0) {
        snprintf(why, whylen, "%s: the driver did not start (entry points or cuInit/context)", path);
        free(d);
        free(stack);
        dlclose(lib);
        return NULL;
    }
    d->lib = lib;
    d->stack = stack;
    snprintf(d->path, sizeof d->path, "%s", path);
    return d;
}

/* The bytes written at the start of the allocation at ptr (a function of the seed and ptr). */
static void fill(const sw_cuda_t *d, uint64_t ptr, unsigned char *buf, size_t n)
{
    uint64_t x = d->seed ^ ptr;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

static int alloc_one(sw_cuda_t *d, uint64_t bytes)
{
    if (d->n >= STACK_MAX) {
        errno = EIO;
        return -1;
    }
    uint64_t ptr = 0;
    int rc = d->alloc(&ptr, (size_t)bytes);
    if (rc != 0) {
        errno = rc == CUDA_OOM ? ENOMEM : EIO;
        return -1;
    }
    if (d->chunk && d->htod) {
        static unsigned char buf[DATA_BYTES];
        size_t n = bytes < DATA_BYTES ? (size_t)bytes : DATA_BYTES;
        fill(d, ptr, buf, n);
        if (d->htod(ptr, buf, n) != 0) {
            d->release(ptr);
            errno = EIO;
            return -1;
        }
    }
    d->stack[d->n++] = (alloc_rec_t){ptr, bytes};
    d->held += bytes;
    return 0;
}

int sw_cuda_alloc(sw_cuda_t *d, uint64_t bytes)
{
    while (bytes > 0) {
        uint64_t n = d->chunk && bytes > d->chunk ? d->chunk : bytes;
        if (alloc_one(d, n) != 0)
            return -1; /* what was allocated stays held: the caller frees by bytes */
        bytes -= n;
    }
    return 0;
}

void sw_cuda_set_data_chunk(sw_cuda_t *d, uint64_t chunk) { d->chunk = chunk; }

int sw_cuda_data_check(sw_cuda_t *d, uint64_t *checksum, unsigned *bad)
{
    static unsigned char got[DATA_BYTES], want[DATA_BYTES];
    uint64_t h = 1469598103934665603ull; /* FNV-1a over every allocation's data, in order */
    *bad = 0;
    if (!d->chunk || !d->dtoh)
        return -1;
    for (size_t i = 0; i < d->n; i++) {
        size_t n = d->stack[i].bytes < DATA_BYTES ? (size_t)d->stack[i].bytes : DATA_BYTES;
        if (d->dtoh(got, d->stack[i].ptr, n) != 0)
            return -1;
        fill(d, d->stack[i].ptr, want, n);
        if (memcmp(got, want, n) != 0)
            (*bad)++;
        for (size_t k = 0; k < n; k++)
            h = (h ^ got[k]) * 1099511628211ull;
    }
    *checksum = h;
    return 0;
}

void sw_cuda_free(sw_cuda_t *d, uint64_t bytes)
{
    while (bytes > 0 && d->n > 0) {
        alloc_rec_t top = d->stack[--d->n];
        d->release(top.ptr);
        d->held -= top.bytes;
        if (top.bytes > bytes) { /* keep the rest: allocated again, smaller */
            uint64_t rest = top.bytes - bytes;
            if (alloc_one(d, rest) != 0)
                fprintf(stderr, "simworker: re-allocating %llu bytes after a partial free failed\n",
                        (unsigned long long)rest);
            return;
        }
        bytes -= top.bytes;
    }
}

uint64_t sw_cuda_held(const sw_cuda_t *d) { return d->held; }

int sw_cuda_mem_info(sw_cuda_t *d, uint64_t *free_bytes, uint64_t *total)
{
    size_t f = 0, t = 0;
    if (d->info(&f, &t) != 0)
        return -1;
    *free_bytes = f;
    *total = t;
    return 0;
}

const char *sw_cuda_library(const sw_cuda_t *d) { return d->path; }
