/*
 * nvml_limits: the driver's per-cgroup memory limits (gpu.h: gpu_limit_set), NVML
 * nvmlDeviceSetMemoryLimits_v1 of driver r615+. Each set runs on a driver thread of its own
 * (driver_thread.h), at most GPU_LIMIT_CALLS_MAX at once. Not under nvml_lock: that lock
 * serialises the reads, which share the process buffer; NVML itself is thread-safe (NVIDIA's
 * reference), and a set that hangs in the driver must not make the GPU figures stale.
 *
 * Whether the driver has them is decided at open (nvml.c: both symbols resolve and a read of
 * the limits of the cgroup root, nvmlDeviceGetMemoryLimits_v1, is not answered NOT_SUPPORTED
 * or FUNCTION_NOT_FOUND). A set answered NOT_SUPPORTED or NO_PERMISSION later makes them
 * unavailable from then on (the reason kept for status). The calls' owner is made at the
 * first set and closed by gpu_close (nvml.c), which abandons calls still in the driver.
 *
 * Invariants: a call holds a reference on the probe (gpu_ref) from its start until it is
 * done or orphaned; its request (path, bytes, callback) is its own allocation, freed then;
 * limits_unavailable is written on the loop thread only (the call's thread leaves its result
 * in the request).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/nvml_int.h"

typedef struct limit_call {
    drv_call_t call; /* first: the call is the request */
    gpu_t *g;
    nvmlDevice_t handle;
    char dir[GPU_LIMIT_PATH_MAX];
    uint64_t hard;
    nvmlReturn_t rc;
    gpu_limit_cb cb;
    void *ctx;
} limit_call_t;

/* Their owner, made at the first set (the loop is known once polling started). */
static int limits_setup(gpu_t *g)
{
    if (!g->limit_calls && g->loop)
        g->limit_calls = drv_calls_open(g->loop, GPU_LIMIT_CALLS_MAX);
    return g->limit_calls ? 0 : -1;
}

const char *gpu_limits_unavailable(const gpu_t *g)
{
    if (!g)
        return "no NVML";
    return g->limits_unavailable[0] ? g->limits_unavailable : NULL;
}

static void on_limit_work(drv_call_t *call)
{
    limit_call_t *c = (limit_call_t *)call;
    nvmlSetMemoryLimits_v1_t l = {.nameSpace = c->dir, .softLimit = 0, .hardLimit = c->hard};
    if (c->hard == GPU_LIMIT_NONE)
        l.hardLimit = NVML_DEVICE_MEMORY_LIMIT_MAX;
    c->rc = c->g->nvml.device_set_memory_limits_v1(c->handle, &l); /* beside the reads: below */
}

static void on_limit_done(drv_call_t *call)
{
    limit_call_t *c = (limit_call_t *)call;
    gpu_t *g = c->g;
    char err[200] = "";
    if (c->rc != NVML_SUCCESS) {
        snprintf(err, sizeof err, "nvmlDeviceSetMemoryLimits_v1 %s: %s (NVML error %d)", c->dir, nvml_text(g, c->rc),
                 c->rc);
        if ((c->rc == NVML_ERROR_NOT_SUPPORTED || c->rc == NVML_ERROR_NO_PERMISSION) && !g->limits_unavailable[0])
            snprintf(g->limits_unavailable, sizeof g->limits_unavailable, "the driver refused a limit: %s",
                     nvml_text(g, c->rc));
    }
    if (c->cb && !g->closing)
        c->cb(c->ctx, c->rc == NVML_SUCCESS ? 0 : -1, err);
    free(c);
    gpu_unref(g);
}

static void on_limit_orphaned(drv_call_t *call)
{
    limit_call_t *c = (limit_call_t *)call;
    gpu_t *g = c->g;
    free(c);
    gpu_unref(g);
}

int gpu_limit_set(gpu_t *g, int index, const char *cgroup_dir, uint64_t hard, gpu_limit_cb cb, void *ctx)
{
    if (!g || g->closing || g->limits_unavailable[0] || !cgroup_dir || strlen(cgroup_dir) >= GPU_LIMIT_PATH_MAX ||
        limits_setup(g) != 0)
        return -1;
    nvmlDevice_t handle = NULL;
    for (size_t i = 0; i < g->n_devices; i++)
        if (g->devices[i].index == index)
            handle = g->devices[i].handle;
    if (!handle)
        return -1;
    limit_call_t *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->call.work = on_limit_work;
    c->call.done = on_limit_done;
    c->call.orphaned = on_limit_orphaned;
    c->g = g;
    c->handle = handle;
    snprintf(c->dir, sizeof c->dir, "%s", cgroup_dir);
    c->hard = hard;
    c->cb = cb;
    c->ctx = ctx;
    gpu_ref(g);
    if (drv_calls_start(g->limit_calls, &c->call) != 0) {
        free(c);
        gpu_unref(g); /* never the last: the owner's reference is held */
        return -1;
    }
    return 0;
}
