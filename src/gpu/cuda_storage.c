/*
 * cuda_storage: the checkpoint's custom storage, copied into pinned host memory (cuda_storage.h).
 */
#include "gpu/cuda_storage.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUcontext;
typedef int CUdevice;
typedef struct CUcheckpointOperation_st *CUcheckpointOperationHandle;

#define CUDA_SUCCESS 0
#define CU_MEMHOSTALLOC_PORTABLE 0x01 /* usable from every context */
#define STORAGE_DEVICES_MAX 64

typedef struct { /* CUcheckpointCustomStoragePerDeviceData */
    CUdeviceptr devPtr;
    size_t size;
    CUstream stream;
} per_device_t;

typedef struct { /* CUcheckpointCustomStorageInfo */
    CUcheckpointOperationHandle handle;
    per_device_t *perDeviceData;
    unsigned int deviceCount;
} storage_info_t;

typedef CUresult (*proc_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*complete_fn)(CUcheckpointOperationHandle);
typedef CUresult (*dev_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);
typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned);
typedef CUresult (*host_free_fn)(void *);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*sync_fn)(CUstream);

typedef struct kept {
    struct kept *next;
    host_free_fn free_fn; /* the driver's cuMemFreeHost */
    pid_t pid;
    unsigned n;
    uint64_t size[STORAGE_DEVICES_MAX];
    unsigned char *data[STORAGE_DEVICES_MAX];
} kept_t;

struct cuda_storage {
    complete_fn complete;
    dev_get_fn dev_get;
    retain_fn retain;
    set_fn set;
    host_alloc_fn host_alloc;
    host_free_fn host_free;
    dtoh_fn dtoh;
    htod_fn htod;
    sync_fn sync;
    pthread_mutex_t ctx_lock; /* the contexts, retained once */
    CUcontext ctx[STORAGE_DEVICES_MAX];
    pthread_mutex_t kept_lock;
    kept_t *kept;
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

cuda_storage_t *cuda_storage_open(void *lib, char *why, size_t whylen)
{
    proc_fn proc = lib ? (proc_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!proc) {
        snprintf(why, whylen, "the driver has no cuGetProcAddress_v2");
        return NULL;
    }
    cuda_storage_t *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    const struct {
        const char *name;
        void **slot;
    } table[] = {
        {"cuCheckpointOperationComplete", (void **)&st->complete},
        {"cuDeviceGet", (void **)&st->dev_get},
        {"cuDevicePrimaryCtxRetain", (void **)&st->retain},
        {"cuCtxSetCurrent", (void **)&st->set},
        {"cuMemHostAlloc", (void **)&st->host_alloc},
        {"cuMemFreeHost", (void **)&st->host_free},
        {"cuMemcpyDtoHAsync", (void **)&st->dtoh},
        {"cuMemcpyHtoDAsync", (void **)&st->htod},
        {"cuStreamSynchronize", (void **)&st->sync},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        void *f = NULL;
        int status = 0;
        if (proc(table[i].name, &f, 13040, 0, &status) != CUDA_SUCCESS || !f) {
            snprintf(why, whylen, i == 0 ? "the driver has no custom storage (no %s)" : "the driver has no %s",
                     table[i].name);
            free(st);
            return NULL;
        }
        *table[i].slot = f;
    }
    pthread_mutex_init(&st->ctx_lock, NULL);
    pthread_mutex_init(&st->kept_lock, NULL);
    return st;
}

void cuda_storage_close(cuda_storage_t *st)
{
    if (!st)
        return;
    for (kept_t *k = st->kept, *next; k; k = next) {
        next = k->next;
        for (unsigned d = 0; d < k->n; d++)
            if (k->data[d])
                st->host_free(k->data[d]);
        free(k);
    }
    pthread_mutex_destroy(&st->ctx_lock);
    pthread_mutex_destroy(&st->kept_lock);
    free(st);
}

/* Device d's primary context current on this thread (retained once). */
static int use_device(cuda_storage_t *st, unsigned d, char *err, size_t errlen)
{
    pthread_mutex_lock(&st->ctx_lock);
    if (!st->ctx[d]) {
        CUdevice dev = 0;
        if (st->dev_get(&dev, (int)d) != CUDA_SUCCESS || st->retain(&st->ctx[d], dev) != CUDA_SUCCESS)
            st->ctx[d] = NULL;
    }
    CUcontext ctx = st->ctx[d];
    pthread_mutex_unlock(&st->ctx_lock);
    if (!ctx) {
        snprintf(err, errlen, "custom storage: no context on device %u", d);
        return -1;
    }
    if (st->set(ctx) != CUDA_SUCCESS) {
        snprintf(err, errlen, "custom storage: cuCtxSetCurrent on device %u failed", d);
        return -1;
    }
    return 0;
}

/* Copy one device's mapping to (save) or from (load) its pinned host bytes: the copies
 * queued back to back in pieces of CUDA_STORAGE_PIECE_BYTES on the driver's stream, then one
 * synchronize. */
static int copy_device(cuda_storage_t *st, const per_device_t *pd, unsigned char *host, bool save, char *err,
                       size_t errlen)
{
    for (uint64_t off = 0; off < pd->size;) {
        uint64_t len = pd->size - off < CUDA_STORAGE_PIECE_BYTES ? pd->size - off : CUDA_STORAGE_PIECE_BYTES;
        CUresult rc = save ? st->dtoh(host + off, pd->devPtr + off, len, pd->stream)
                           : st->htod(pd->devPtr + off, host + off, len, pd->stream);
        if (rc != CUDA_SUCCESS) {
            snprintf(err, errlen, "custom storage: a copy %s the device failed (CUresult %d)", save ? "from" : "to", rc);
            return -1;
        }
        off += len;
    }
    if (st->sync(pd->stream) != CUDA_SUCCESS) {
        snprintf(err, errlen, "custom storage: cuStreamSynchronize failed");
        return -1;
    }
    return 0;
}

static kept_t *take_kept(cuda_storage_t *st, pid_t pid)
{
    pthread_mutex_lock(&st->kept_lock);
    kept_t **pp = &st->kept;
    while (*pp && (*pp)->pid != pid)
        pp = &(*pp)->next;
    kept_t *k = *pp;
    if (k)
        *pp = k->next;
    pthread_mutex_unlock(&st->kept_lock);
    return k;
}

static void free_kept(kept_t *k)
{
    if (!k)
        return;
    for (unsigned d = 0; d < k->n; d++)
        if (k->data[d])
            k->free_fn(k->data[d]);
    free(k);
}

/* Drop what is kept for processes that died while parked (nothing will restore them). */
static void drop_dead(cuda_storage_t *st)
{
    kept_t *dead = NULL;
    pthread_mutex_lock(&st->kept_lock);
    for (kept_t **pp = &st->kept; *pp;) {
        kept_t *k = *pp;
        if (kill(k->pid, 0) != 0 && errno == ESRCH) {
            *pp = k->next;
            k->next = dead;
            dead = k;
        } else {
            pp = &k->next;
        }
    }
    pthread_mutex_unlock(&st->kept_lock);
    while (dead) {
        kept_t *next = dead->next;
        free_kept(dead);
        dead = next;
    }
}

/* Copy every device of info, then complete the operation whatever happened. */
static int move_all(cuda_storage_t *st, storage_info_t *info, kept_t *k, bool save, uint64_t *bytes, char *err,
                    size_t errlen)
{
    int rc = 0;
    *bytes = 0;
    for (unsigned d = 0; d < info->deviceCount && rc == 0; d++) {
        const per_device_t *pd = &info->perDeviceData[d];
        if (!pd->size)
            continue;
        if (use_device(st, d, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (save) {
            k->size[d] = pd->size;
            if (st->host_alloc((void **)&k->data[d], pd->size, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
                k->data[d] = NULL;
        }
        if (!k->data[d] || k->size[d] != pd->size) {
            snprintf(err, errlen, save ? "custom storage: no pinned host memory for %llu bytes"
                                       : "custom storage: %llu bytes asked back, not what was kept",
                     (unsigned long long)pd->size);
            rc = -1;
        } else if (copy_device(st, pd, k->data[d], save, err, errlen) == 0) {
            *bytes += pd->size;
        } else {
            rc = -1;
        }
    }
    CUresult done = st->complete(info->handle);
    if (done != CUDA_SUCCESS && rc == 0) {
        snprintf(err, errlen, "cuCheckpointOperationComplete failed (CUresult %d)", done);
        rc = -1;
    }
    return rc;
}

int cuda_storage_save(cuda_storage_t *st, pid_t pid, void *info_p, uint64_t *bytes, uint64_t *copy_us, char *err,
                      size_t errlen)
{
    storage_info_t *info = info_p;
    uint64_t t0 = now_us();
    kept_t *k = calloc(1, sizeof *k);
    if (!k || !info || info->deviceCount > STORAGE_DEVICES_MAX) {
        snprintf(err, errlen, !k ? "custom storage: out of memory" : "custom storage: %u devices (at most %d)",
                 info ? info->deviceCount : 0, STORAGE_DEVICES_MAX);
        if (info)
            st->complete(info->handle);
        free(k);
        return -1;
    }
    k->pid = pid;
    k->free_fn = st->host_free;
    k->n = info->deviceCount;
    int rc = move_all(st, info, k, true, bytes, err, errlen);
    *copy_us = now_us() - t0;
    if (rc != 0) {
        free_kept(k);
        return -1;
    }
    free_kept(take_kept(st, pid)); /* a stale entry of the same pid (it was never restored) */
    drop_dead(st);
    pthread_mutex_lock(&st->kept_lock);
    k->next = st->kept;
    st->kept = k;
    pthread_mutex_unlock(&st->kept_lock);
    return 0;
}

int cuda_storage_load(cuda_storage_t *st, pid_t pid, void *info_p, uint64_t *bytes, uint64_t *copy_us, char *err,
                      size_t errlen)
{
    storage_info_t *info = info_p;
    uint64_t t0 = now_us();
    kept_t *k = take_kept(st, pid);
    int rc = -1;
    if (!info) {
        snprintf(err, errlen, "custom storage: the driver returned no mapping");
    } else if (!k || info->deviceCount > k->n) {
        snprintf(err, errlen, "custom storage: nothing kept for pid %d", (int)pid);
        st->complete(info->handle);
    } else {
        rc = move_all(st, info, k, false, bytes, err, errlen);
    }
    *copy_us = now_us() - t0;
    free_kept(k);
    return rc;
}

void cuda_storage_forget(cuda_storage_t *st, pid_t pid)
{
    if (st)
        free_kept(take_kept(st, pid));
}

uint64_t cuda_storage_held(cuda_storage_t *st)
{
    uint64_t sum = 0;
    if (!st)
        return 0;
    pthread_mutex_lock(&st->kept_lock);
    for (const kept_t *k = st->kept; k; k = k->next)
        for (unsigned d = 0; d < k->n; d++)
            sum += k->size[d];
    pthread_mutex_unlock(&st->kept_lock);
    return sum;
}
