/*
 * nvml.c: the GPU probe (gpu.h) over NVML, loaded at run time with dlopen. It and
 * nvml_limits.c (the driver's per-cgroup limits) are the only places in vramd that talk to
 * NVML; a real driver and build/lib/libnvidia-ml-sim.so go through the same code.
 *
 * Life of a gpu_t:
 *   gpu_open     dlopen (RTLD_NOW|RTLD_LOCAL) -> dlsym every entry point -> nvmlInit_v2 ->
 *                resolve the selected devices (handle, NVML index, name, UUID, cached: they
 *                do not change while the driver is loaded). Any failure undoes what was
 *                done and returns NULL with the reason in err.
 *   reads        read_snapshot() fills a gpu_snapshot_t: memory info, the per-process list
 *                (two-call INSUFFICIENT_SIZE protocol), utilization, for each device.
 *   polling      one read at a time on a thread of its own (driver_thread.h: never libuv's
 *                pool, whose threads are joined at exit), one uv_timer_t on the loop.
 *   gpu_close    stops polling; the object is destroyed at the first safe point (below).
 *
 * Invariants:
 *   - Reads are serialised: every read after gpu_open happens with nvml_lock held (the read
 *     thread during a poll read, the caller of gpu_probe_once). proc_buf belongs to whoever
 *     holds nvml_lock. Limit calls (nvml_limits.c) run beside them, without it: NVML is
 *     thread-safe, and they touch nothing of the probe's but its handles.
 *   - At most one read is in flight (read_in_flight). The next read is queued only from
 *     the loop thread and only at a safe point: never while a read is in flight and never
 *     while the snapshot callback runs (it reads poll_snap, which the next read would
 *     overwrite); a request made at such a time sets read_requested and is honoured when
 *     the read or the callback ends.
 *   - The timer is armed only while polling and no read is in flight: the next read starts
 *     interval_ms after the previous one ended (or at once after gpu_poll_now).
 *   - The snapshot callback never runs after gpu_poll_stop or gpu_close.
 *   - gpu_close never waits for NVML: a call still in the driver (a hung driver) is
 *     abandoned. The gpu_t is reference-counted (nvml_int.h): the owner holds one reference,
 *     each poll read or limit call in flight one more; the last to drop its reference
 *     destroys it, on its own thread when an abandoned call returns (if ever), never while a
 *     thread may use it. gpu_close inside the snapshot callback is safe: the read's reference
 *     is dropped after the callback. The timer and the calls' async handles are separate
 *     allocations freed by their close callbacks, so the loop must run after gpu_close (it
 *     never waits on a call).
 *   - Every buffer is bounded: GPU_MAX_DEVICES devices, GPU_MAX_PROCS processes per device
 *     in a snapshot, PROCS_READ_MAX entries in the NVML process buffer.
 *
 * Return convention (as gpu.h): 0 ok, -1 error with a message in err (gpu_probe_once: in
 * out->error).
 */
#include "gpu/gpu.h"

#include "gpu/driver_thread.h"
#include "gpu/nvml_int.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the probe ---- */

#define DEFAULT_NVML_LIBRARY "libnvidia-ml.so.1"
#define PROCS_FIRST_GUESS 8  /* initial room in the process buffer; it grows as needed */
#define PROCS_READ_MAX 4096  /* hard cap of the process buffer (entries) */
#define STABLE_READ_TRIES 3 /* memory/process-list pairs read until `used` holds still */
#define PROCS_READ_TRIES 5   /* INSUFFICIENT_SIZE retries: the count can change between calls */

_Static_assert(GPU_MAX_PROCS <= PROCS_READ_MAX, "the NVML buffer must hold a full snapshot list");

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *nvml_text(const gpu_t *g, nvmlReturn_t rc)
{
    const char *text = g->nvml.error_string ? g->nvml.error_string(rc) : NULL;
    return text ? text : "unknown NVML error";
}

/* ---- opening ---- */

static int resolve_symbols(gpu_t *g, char *err, size_t errlen)
{
    struct {
        const char *name;
        void **slot;
        bool required;
    } table[] = {
        {"nvmlInit_v2", (void **)&g->nvml.init_v2, true},
        {"nvmlShutdown", (void **)&g->nvml.shutdown, true},
        {"nvmlErrorString", (void **)&g->nvml.error_string, true},
        {"nvmlDeviceGetCount_v2", (void **)&g->nvml.device_get_count_v2, true},
        {"nvmlDeviceGetHandleByIndex_v2", (void **)&g->nvml.device_get_handle_by_index_v2, true},
        {"nvmlDeviceGetHandleByUUID", (void **)&g->nvml.device_get_handle_by_uuid, true},
        {"nvmlDeviceGetName", (void **)&g->nvml.device_get_name, true},
        {"nvmlDeviceGetUUID", (void **)&g->nvml.device_get_uuid, true},
        {"nvmlDeviceGetMemoryInfo", (void **)&g->nvml.device_get_memory_info, true},
        {"nvmlDeviceGetComputeRunningProcesses_v3",
         (void **)&g->nvml.device_get_compute_running_processes_v3, true},
        {"nvmlDeviceGetUtilizationRates", (void **)&g->nvml.device_get_utilization_rates, false},
        {"nvmlDeviceSetMemoryLimits_v1", (void **)&g->nvml.device_set_memory_limits_v1, false},
        {"nvmlDeviceGetMemoryLimits_v1", (void **)&g->nvml.device_get_memory_limits_v1, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        dlerror();
        *table[i].slot = dlsym(g->lib, table[i].name);
        if (!*table[i].slot && table[i].required) {
            const char *why = dlerror();
            set_err(err, errlen, "NVML library %s lacks the symbol %s (%s)", g->library,
                    table[i].name, why ? why : "not found");
            /* Nothing resolved may be used: a library without the ABI is not NVML. */
            memset(&g->nvml, 0, sizeof g->nvml);
            return -1;
        }
    }
    return 0;
}

/* Record the path the dynamic linker actually loaded (the name as given when it cannot
 * say). */
static void record_library_path(gpu_t *g, const char *requested)
{
    struct link_map *map = NULL;
    const char *path = requested;
    if (dlinfo(g->lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        path = map->l_name;
    snprintf(g->library, sizeof g->library, "%s", path);
}

static int read_identity(gpu_t *g, managed_device_t *d, char *err, size_t errlen)
{
    nvmlReturn_t rc = g->nvml.device_get_name(d->handle, d->name, sizeof d->name);
    if (rc != NVML_SUCCESS) {
        set_err(err, errlen, "GPU %d: nvmlDeviceGetName: %s", d->index, nvml_text(g, rc));
        return -1;
    }
    rc = g->nvml.device_get_uuid(d->handle, d->uuid, sizeof d->uuid);
    if (rc != NVML_SUCCESS) {
        set_err(err, errlen, "GPU %d: nvmlDeviceGetUUID: %s", d->index, nvml_text(g, rc));
        return -1;
    }
    d->name[sizeof d->name - 1] = '\0';
    d->uuid[sizeof d->uuid - 1] = '\0';
    return 0;
}

/* The NVML index of the device named by uuid among the first n_visible; -1 with err. */
static int index_of_uuid(gpu_t *g, const char *uuid, unsigned n_visible, char *err, size_t errlen)
{
    nvmlDevice_t wanted = NULL;
    nvmlReturn_t rc = g->nvml.device_get_handle_by_uuid(uuid, &wanted);
    if (rc != NVML_SUCCESS) {
        set_err(err, errlen, "gpu.devices: no GPU with UUID %s (nvmlDeviceGetHandleByUUID: %s)",
                uuid, nvml_text(g, rc));
        return -1;
    }
    for (unsigned i = 0; i < n_visible; i++) {
        nvmlDevice_t h = NULL;
        if (g->nvml.device_get_handle_by_index_v2(i, &h) == NVML_SUCCESS && h == wanted)
            return (int)i;
    }
    set_err(err, errlen, "gpu.devices: GPU %s is not among the first %u devices vramd can manage",
            uuid, n_visible);
    return -1;
}

static int select_devices(gpu_t *g, const gpu_options_t *opt, char *err, size_t errlen)
{
    unsigned count = 0;
    nvmlReturn_t rc = g->nvml.device_get_count_v2(&count);
    if (rc != NVML_SUCCESS) {
        set_err(err, errlen, "nvmlDeviceGetCount_v2 (%s): %s", g->library, nvml_text(g, rc));
        return -1;
    }
    if (count == 0) {
        set_err(err, errlen, "no GPU: NVML (%s) reports 0 devices", g->library);
        return -1;
    }
    /* More than GPU_MAX_DEVICES: vramd manages the first GPU_MAX_DEVICES. */
    unsigned n_visible = count < GPU_MAX_DEVICES ? count : GPU_MAX_DEVICES;
    bool selected[GPU_MAX_DEVICES] = {false};
    size_t n_indexes = opt ? opt->n_indexes : 0, n_uuids = opt ? opt->n_uuids : 0;
    if (n_indexes == 0 && n_uuids == 0) {
        for (unsigned i = 0; i < n_visible; i++)
            selected[i] = true;
    }
    for (size_t k = 0; k < n_indexes; k++) {
        int index = opt->indexes[k];
        if (index < 0 || (unsigned)index >= count) {
            set_err(err, errlen, "gpu.devices: no GPU with index %d (NVML reports %u device%s)",
                    index, count, count == 1 ? "" : "s");
            return -1;
        }
        if ((unsigned)index >= n_visible) {
            set_err(err, errlen, "gpu.devices: GPU %d is beyond the %d devices vramd can manage",
                    index, GPU_MAX_DEVICES);
            return -1;
        }
        selected[index] = true;
    }
    for (size_t k = 0; k < n_uuids; k++) {
        int index = index_of_uuid(g, opt->uuids[k] ? opt->uuids[k] : "", n_visible, err, errlen);
        if (index < 0)
            return -1;
        selected[index] = true;
    }
    g->n_devices = 0;
    for (unsigned i = 0; i < n_visible; i++) {
        if (!selected[i])
            continue;
        managed_device_t *d = &g->devices[g->n_devices];
        d->index = (int)i;
        rc = g->nvml.device_get_handle_by_index_v2(i, &d->handle);
        if (rc != NVML_SUCCESS) {
            set_err(err, errlen, "GPU %u: nvmlDeviceGetHandleByIndex_v2: %s", i, nvml_text(g, rc));
            return -1;
        }
        if (read_identity(g, d, err, errlen) < 0)
            return -1;
        g->n_devices++;
    }
    return 0;
}

static atomic_uint g_live; /* gpu_t objects not yet destroyed (gpu_live_count) */

unsigned gpu_live_count(void)
{
    return atomic_load(&g_live);
}

/* Undo everything; only at a safe point (no read in flight or the read's own thread after
 * it returned; timer and read owner closed or never made). */
static void gpu_destroy(gpu_t *g)
{
    if (g->nvml_initialised)
        g->nvml.shutdown();
    if (g->lib)
        dlclose(g->lib);
    free(g->proc_buf);
    free(g->poll_snap);
    pthread_mutex_destroy(&g->nvml_lock);
    free(g);
    atomic_fetch_sub(&g_live, 1);
}

/* Per-cgroup limits (nvml_limits.c): the driver has them when both calls resolve and a read
 * of the cgroup root's limits is not answered NOT_SUPPORTED or FUNCTION_NOT_FOUND. */
static void probe_limits(gpu_t *g)
{
    if (!g->nvml.device_set_memory_limits_v1 || !g->nvml.device_get_memory_limits_v1) {
        snprintf(g->limits_unavailable, sizeof g->limits_unavailable,
                 "the driver has no per-cgroup limits (nvmlDeviceSetMemoryLimits_v1: driver r615+)");
        return;
    }
    if (g->n_devices == 0)
        return;
    nvmlGetMemoryLimits_v1_t q = {.nameSpace = "/sys/fs/cgroup"};
    nvmlReturn_t rc = g->nvml.device_get_memory_limits_v1(g->devices[0].handle, &q);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND)
        snprintf(g->limits_unavailable, sizeof g->limits_unavailable, "the driver does not support per-cgroup limits (%s)",
                 nvml_text(g, rc));
}

gpu_t *gpu_open(const gpu_options_t *opt, char *err, size_t errlen)
{
    set_err(err, errlen, "%s", "");
    const char *requested = opt && opt->library && opt->library[0] ? opt->library : NULL;
    if (!requested) {
        const char *env = getenv("VRAMD_NVML_LIBRARY");
        requested = env && env[0] ? env : DEFAULT_NVML_LIBRARY;
    }
    gpu_t *g = calloc(1, sizeof *g);
    if (!g) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    atomic_fetch_add(&g_live, 1);
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->nvml_lock, NULL);
    snprintf(g->library, sizeof g->library, "%s", requested);

    dlerror();
    g->lib = dlopen(requested, RTLD_NOW | RTLD_LOCAL);
    if (!g->lib) {
        const char *why = dlerror();
        set_err(err, errlen, "cannot load NVML library %s: %s", requested, why ? why : "unknown");
        goto fail;
    }
    record_library_path(g, requested);
    if (resolve_symbols(g, err, errlen) < 0)
        goto fail;

    nvmlReturn_t rc = g->nvml.init_v2();
    if (rc != NVML_SUCCESS) {
        set_err(err, errlen, "nvmlInit_v2 failed (%s): %s (NVML error %d)", g->library,
                nvml_text(g, rc), rc);
        goto fail;
    }
    g->nvml_initialised = true;

    if (select_devices(g, opt, err, errlen) < 0)
        goto fail;
    probe_limits(g);
    g->proc_cap = PROCS_FIRST_GUESS;
    g->proc_buf = calloc(g->proc_cap, sizeof *g->proc_buf);
    if (!g->proc_buf) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    return g;
fail:
    gpu_destroy(g);
    return NULL;
}

const char *gpu_library(const gpu_t *g)
{
    return g ? g->library : "";
}

/* ---- reading (caller holds nvml_lock) ---- */

static void snapshot_fail(gpu_snapshot_t *snap, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void snapshot_fail(gpu_snapshot_t *snap, const char *fmt, ...)
{
    if (!snap->ok)
        return; /* keep the first error */
    snap->ok = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(snap->error, sizeof snap->error, fmt, ap);
    va_end(ap);
}

static uint64_t reported_bytes(unsigned long long used)
{
    return used == NVML_VALUE_NOT_AVAILABLE ? 0 : (uint64_t)used;
}

static int compare_used_desc(const void *a, const void *b)
{
    uint64_t ua = reported_bytes(((const nvmlProcessInfo_t *)a)->usedGpuMemory);
    uint64_t ub = reported_bytes(((const nvmlProcessInfo_t *)b)->usedGpuMemory);
    return ua < ub ? 1 : ua > ub ? -1 : 0;
}

/* Copy n NVML records into dev. Beyond GPU_MAX_PROCS the largest holders are kept (so the
 * listed processes account for as much memory as possible) and procs_truncated is set.
 * NVML_VALUE_NOT_AVAILABLE counts as 0 bytes. Reorders buf when truncating. */
static void procs_from_nvml(gpu_device_t *dev, nvmlProcessInfo_t *buf, size_t n)
{
    if (n > GPU_MAX_PROCS) {
        qsort(buf, n, sizeof *buf, compare_used_desc);
        n = GPU_MAX_PROCS;
        dev->procs_truncated = true;
    }
    for (size_t i = 0; i < n; i++) {
        dev->procs[i].pid = (pid_t)buf[i].pid;
        dev->procs[i].used = reported_bytes(buf[i].usedGpuMemory);
    }
    dev->n_procs = n;
}

/* Grow the process buffer to hold want entries (capped at PROCS_READ_MAX); -1 when out of
 * memory (the old buffer is kept). */
static int proc_buf_grow(gpu_t *g, unsigned want)
{
    if (want > PROCS_READ_MAX)
        want = PROCS_READ_MAX;
    if (want <= g->proc_cap)
        return 0;
    nvmlProcessInfo_t *bigger = realloc(g->proc_buf, (size_t)want * sizeof *bigger);
    if (!bigger)
        return -1;
    g->proc_buf = bigger;
    g->proc_cap = want;
    return 0;
}

/* The per-process list of one device through NVML's two-call protocol: call with the room
 * we have; on INSUFFICIENT_SIZE *infoCount says how many exist, so grow (with slack for
 * processes starting meanwhile) and call again. */
static void read_processes(gpu_t *g, const managed_device_t *d, gpu_device_t *dev,
                           gpu_snapshot_t *snap)
{
    for (int attempt = 0; attempt < PROCS_READ_TRIES; attempt++) {
        unsigned count = g->proc_cap;
        nvmlReturn_t rc = g->nvml.device_get_compute_running_processes_v3(d->handle, &count,
                                                                          g->proc_buf);
        if (rc == NVML_SUCCESS) {
            procs_from_nvml(dev, g->proc_buf, count < g->proc_cap ? count : g->proc_cap);
            return;
        }
        if (rc == NVML_ERROR_NOT_SUPPORTED) {
            /* This device cannot list processes: say the list is incomplete. */
            dev->n_procs = 0;
            dev->procs_truncated = true;
            return;
        }
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
            snapshot_fail(snap, "GPU %d: nvmlDeviceGetComputeRunningProcesses_v3: %s", d->index,
                          nvml_text(g, rc));
            return;
        }
        if (g->proc_cap >= PROCS_READ_MAX) {
            /* More processes than the hard cap: none can be listed reliably. */
            dev->n_procs = 0;
            dev->procs_truncated = true;
            return;
        }
        unsigned want = count > g->proc_cap ? count : g->proc_cap * 2;
        want += want / 4 + 4;
        if (proc_buf_grow(g, want) < 0) {
            snapshot_fail(snap, "GPU %d: out of memory for %u process records", d->index, want);
            return;
        }
    }
    snapshot_fail(snap, "GPU %d: the process list kept growing across %d reads", d->index,
                  PROCS_READ_TRIES);
}

static void read_device(gpu_t *g, const managed_device_t *d, gpu_device_t *dev,
                        gpu_snapshot_t *snap)
{
    dev->index = d->index;
    memcpy(dev->name, d->name, sizeof dev->name);
    memcpy(dev->uuid, d->uuid, sizeof dev->uuid);
    dev->total = dev->used = dev->free = 0;
    dev->util_gpu = 0;
    dev->n_procs = 0;
    dev->procs_truncated = false;

    /* Processes first, device memory second: anything allocated between the two reads
     * then shows in `used` but not in the per-process list, so the caller's foreign usage
     * (used minus its own processes) errs high, never low. To keep that error rare, device
     * memory is also read before the list: when `used` changed while the list was read,
     * the pair is inconsistent and is read again (a few times; the last pair is kept). */
    nvmlMemory_t mem = {0, 0, 0};
    for (int attempt = 0; attempt < STABLE_READ_TRIES; attempt++) {
        nvmlMemory_t before = {0, 0, 0};
        nvmlReturn_t rc = g->nvml.device_get_memory_info(d->handle, &before);
        if (rc == NVML_SUCCESS) {
            read_processes(g, d, dev, snap);
            if (!snap->ok)
                return;
            rc = g->nvml.device_get_memory_info(d->handle, &mem);
        }
        if (rc != NVML_SUCCESS) {
            snapshot_fail(snap, "GPU %d: nvmlDeviceGetMemoryInfo: %s", d->index, nvml_text(g, rc));
            return;
        }
        if (before.used == mem.used)
            break;
    }
    dev->total = mem.total;
    dev->used = mem.used;
    dev->free = mem.free;

    if (g->nvml.device_get_utilization_rates) {
        nvmlUtilization_t util = {0, 0};
        if (g->nvml.device_get_utilization_rates(d->handle, &util) == NVML_SUCCESS)
            dev->util_gpu = util.gpu <= 100 ? util.gpu : 100;
    }
}

static void read_snapshot(gpu_t *g, gpu_snapshot_t *snap)
{
    uint64_t started_ns = uv_hrtime();
    snap->ok = true;
    snap->error[0] = '\0';
    snap->n_devices = g->n_devices;
    for (size_t i = 0; i < g->n_devices; i++)
        read_device(g, &g->devices[i], &snap->devices[i], snap);
    uint64_t ended_ns = uv_hrtime();
    snap->taken_ms = ended_ns / 1000000u;
    snap->read_us = (ended_ns - started_ns) / 1000u;
}

int gpu_probe_once(gpu_t *g, gpu_snapshot_t *out)
{
    if (!g || !out || g->closing) {
        if (out) {
            memset(out, 0, sizeof *out);
            snprintf(out->error, sizeof out->error, "%s", "GPU probe is closed");
        }
        return -1;
    }
    pthread_mutex_lock(&g->nvml_lock);
    read_snapshot(g, out);
    pthread_mutex_unlock(&g->nvml_lock);
    return out->ok ? 0 : -1;
}

/* ---- polling (loop thread, except on_read_work and an abandoned read's end) ---- */

void gpu_ref(gpu_t *g)
{
    atomic_fetch_add(&g->refs, 1);
}

void gpu_unref(gpu_t *g)
{
    if (atomic_fetch_sub(&g->refs, 1) == 1)
        gpu_destroy(g);
}

static gpu_t *of_read(drv_call_t *call)
{
    return (gpu_t *)((char *)call - offsetof(gpu_t, read_call));
}

static void on_read_work(drv_call_t *call)
{
    gpu_t *g = of_read(call);
    pthread_mutex_lock(&g->nvml_lock);
    read_snapshot(g, g->poll_snap);
    pthread_mutex_unlock(&g->nvml_lock);
}

/* gpu_close gave the read up: its reference is dropped here (its thread, or the loop thread
 * when it had finished undelivered); the last reference destroys the probe. */
static void on_read_orphaned(drv_call_t *call)
{
    gpu_unref(of_read(call));
}

static void on_poll_timer(uv_timer_t *timer);

/* Start a read now if that is safe, else remember that one is wanted. */
static void request_read(gpu_t *g)
{
    if (!g->polling || g->closing)
        return;
    if (g->read_in_flight || g->in_callback) {
        g->read_requested = true;
        return;
    }
    uv_timer_stop(g->timer);
    g->read_requested = false;
    gpu_ref(g); /* the read's */
    if (drv_calls_start(g->calls, &g->read_call) == 0) {
        g->read_in_flight = true;
        return;
    }
    atomic_fetch_sub(&g->refs, 1); /* not started; the owner's reference is still held */
    /* No thread could be made: try again after an interval. */
    uv_timer_start(g->timer, on_poll_timer, g->interval_ms ? g->interval_ms : 1, 0);
}

static void on_poll_timer(uv_timer_t *timer)
{
    request_read(timer->data);
}

static void on_read_done(drv_call_t *call)
{
    gpu_t *g = of_read(call);
    g->read_in_flight = false;
    if (g->polling && !g->closing && g->cb) {
        g->in_callback = true;
        g->cb(g->cb_ctx, g->poll_snap);
        g->in_callback = false;
    }
    if (!g->closing && g->polling) {
        if (g->read_requested)
            request_read(g);
        else
            uv_timer_start(g->timer, on_poll_timer, g->interval_ms, 0);
    }
    gpu_unref(g); /* the read's: the last one (gpu_close ran) destroys g */
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* The timer and the read thread's owner, made at the first gpu_poll_start. */
static int poll_setup(gpu_t *g, uv_loop_t *loop)
{
    if (!g->poll_snap) {
        g->poll_snap = calloc(1, sizeof *g->poll_snap);
        if (!g->poll_snap)
            return -1;
    }
    if (!g->timer) {
        uv_timer_t *t = calloc(1, sizeof *t);
        if (!t || uv_timer_init(loop, t) != 0) {
            free(t);
            return -1;
        }
        t->data = g;
        g->timer = t;
        g->loop = loop;
    }
    if (!g->calls) {
        g->calls = drv_calls_open(loop, 1);
        if (!g->calls)
            return -1;
        g->read_call.work = on_read_work;
        g->read_call.done = on_read_done;
        g->read_call.orphaned = on_read_orphaned;
    }
    return 0;
}

int gpu_poll_start(gpu_t *g, uv_loop_t *loop, uint64_t interval_ms, gpu_snapshot_cb cb, void *ctx)
{
    if (!g || !loop || !cb || g->closing)
        return -1;
    if (g->loop && g->loop != loop)
        return -1; /* the timer lives on the first loop */
    if (poll_setup(g, loop) != 0)
        return -1;
    g->interval_ms = interval_ms;
    g->cb = cb;
    g->cb_ctx = ctx;
    g->polling = true;
    request_read(g); /* the first snapshot as soon as possible */
    return 0;
}

void gpu_poll_now(gpu_t *g)
{
    if (g)
        request_read(g);
}

void gpu_poll_stop(gpu_t *g)
{
    if (!g)
        return;
    g->polling = false;
    g->read_requested = false;
    if (g->timer && !g->closing)
        uv_timer_stop(g->timer);
}

bool gpu_read_in_flight(const gpu_t *g)
{
    return g && g->read_in_flight;
}

void gpu_close(gpu_t *g)
{
    if (!g || g->closing)
        return;
    gpu_poll_stop(g);
    g->closing = true;
    if (g->timer) {
        uv_close((uv_handle_t *)g->timer, free_handle);
        g->timer = NULL;
    }
    /* Calls still in the driver are abandoned: each drops its reference when (if) it
     * returns, maybe inside drv_calls_close. The owner's reference goes last: g must not be
     * touched after. */
    drv_calls_t *calls = g->calls;
    g->calls = NULL;
    if (calls)
        drv_calls_close(calls);
    calls = g->limit_calls; /* nvml_limits.c's, made at its first set */
    g->limit_calls = NULL;
    if (calls)
        drv_calls_close(calls);
    gpu_unref(g);
}

uint64_t gpu_proc_used(const gpu_device_t *dev, pid_t pid)
{
    if (!dev)
        return 0;
    uint64_t used = 0; /* summed: under MIG one process may appear once per instance */
    size_t n = dev->n_procs < GPU_MAX_PROCS ? dev->n_procs : GPU_MAX_PROCS;
    for (size_t i = 0; i < n; i++)
        if (dev->procs[i].pid == pid)
            used += dev->procs[i].used;
    return used;
}
