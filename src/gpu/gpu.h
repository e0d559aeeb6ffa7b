/*
 * gpu: what vramd knows about the host's GPUs, learned only through NVML.
 *
 * NVML is loaded at run time with dlopen (gpu.nvml_library in the config, overridden by
 * the environment variable VRAMD_NVML_LIBRARY; default libnvidia-ml.so.1). On a GPU host
 * that is the driver's library; elsewhere build/lib/libnvidia-ml-sim.so answers from a
 * simulated GPU. There is one code path for both.
 *
 * Reading NVML can take milliseconds on a real driver, so reads never run on the event
 * loop: gpu_poll_start() reads a full snapshot (every device: identity, memory, per-process
 * usage, utilization) on a thread of its own (driver_thread.h) every poll interval, and
 * hands it to the callback on the loop thread. gpu_probe_once() is the synchronous read
 * used at start (and by tests). A failing or slow NVML is reported (gpu_snapshot.error, the
 * callback's ok flag) and retried at the next interval; it is never fatal. A hung NVML
 * (a call that never returns) delivers nothing: the caller sees it by the age of its last
 * snapshot; gpu_close gives the hung read up and never waits for it.
 *
 * Devices: gpu.devices selects which NVML devices vramd manages (all, or indexes /
 * UUIDs); snapshot entries keep NVML's own index.
 * Return convention: 0 ok, -1 error with a message in err.
 */
#ifndef VRAMD_GPU_GPU_H
#define VRAMD_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define GPU_MAX_DEVICES 16
#define GPU_MAX_PROCS 256

typedef struct gpu_proc {
    pid_t pid;
    uint64_t used; /* bytes, as NVML reports (usedGpuMemory) */
} gpu_proc_t;

typedef struct gpu_device {
    int index;      /* NVML index */
    char name[96];
    char uuid[96];
    uint64_t total;
    uint64_t used;
    uint64_t free;
    unsigned util_gpu; /* percent; 0 when NVML cannot say */
    size_t n_procs;
    gpu_proc_t procs[GPU_MAX_PROCS];
    bool procs_truncated;
} gpu_device_t;

typedef struct gpu_snapshot {
    bool ok;
    char error[256];
    uint64_t taken_ms;  /* monotonic, when the read finished */
    uint64_t read_us;   /* how long the NVML read took */
    size_t n_devices;
    gpu_device_t devices[GPU_MAX_DEVICES];
} gpu_snapshot_t;

typedef struct gpu gpu_t;

typedef void (*gpu_snapshot_cb)(void *ctx, const gpu_snapshot_t *snap);

typedef struct gpu_options {
    const char *library;      /* NULL = env VRAMD_NVML_LIBRARY, else libnvidia-ml.so.1 */
    const int *indexes;       /* NULL with n_indexes 0 and no uuids = all devices */
    size_t n_indexes;
    char *const *uuids;
    size_t n_uuids;
} gpu_options_t;

/* dlopen NVML, nvmlInit_v2, resolve the devices. */
gpu_t *gpu_open(const gpu_options_t *opt, char *err, size_t errlen);
/* Stops polling first; nvmlShutdown, dlclose. Never waits for a read in flight: that read
 * is abandoned and the probe is destroyed on its thread when (if) NVML returns. */
void gpu_close(gpu_t *g);
/* Probes opened and not yet destroyed, in this process (an abandoned read keeps its probe
 * until NVML returns). */
unsigned gpu_live_count(void);
/* Is a poll read in the driver (or finished, not yet delivered) now? */
bool gpu_read_in_flight(const gpu_t *g);
/* The library path actually loaded. */
const char *gpu_library(const gpu_t *g);

/* The driver's per-cgroup memory limits (NVML nvmlDeviceSetMemoryLimits_v1, driver r615+):
 * a hard limit on what the processes of a cgroup v2 directory hold on one device; past it an
 * allocation fails with CUDA_ERROR_OUT_OF_MEMORY and cuMemGetInfo reports the limit as the
 * total. gpu_limits_unavailable: NULL when the driver has them, else why not (the symbols
 * are missing, the driver answered NOT_SUPPORTED, or a set was refused: NO_PERMISSION, say).
 * gpu_limit_set: set the hard limit of cgroup_dir (the directory's full path, at most
 * GPU_LIMIT_PATH_MAX - 1 bytes) on the device with NVML index `index`; GPU_LIMIT_NONE clears
 * it (soft 0, hard NVML_DEVICE_MEMORY_LIMIT_MAX). It runs on a driver thread of its own
 * (never the loop: NVML may hang); cb runs on the loop thread with rc 0, or -1 and NVML's
 * text. A call abandoned by gpu_close never calls cb. -1 (cb never runs): not started (no
 * limits, not polling yet, closing, GPU_LIMIT_CALLS_MAX in flight, out of memory). A call
 * answered NOT_SUPPORTED or NO_PERMISSION makes limits unavailable from then on. */
#define GPU_LIMIT_NONE UINT64_MAX
#define GPU_LIMIT_PATH_MAX 512
#define GPU_LIMIT_CALLS_MAX 16
typedef void (*gpu_limit_cb)(void *ctx, int rc, const char *err);
const char *gpu_limits_unavailable(const gpu_t *g);
int gpu_limit_set(gpu_t *g, int index, const char *cgroup_dir, uint64_t hard, gpu_limit_cb cb, void *ctx);
/* Synchronous read into *out (for start-up and tests; it waits for a poll read in flight,
 * so never call it on the loop while polling). */
int gpu_probe_once(gpu_t *g, gpu_snapshot_t *out);
/* Poll every interval_ms on the thread pool; cb runs on the loop thread with each snapshot.
 * At most one read is in flight; if a read takes longer than the interval, the next
 * starts when it ends. */
int gpu_poll_start(gpu_t *g, uv_loop_t *loop, uint64_t interval_ms, gpu_snapshot_cb cb, void *ctx);
/* Ask for a read as soon as possible (e.g. while waiting for memory to come back). */
void gpu_poll_now(gpu_t *g);
void gpu_poll_stop(gpu_t *g);
/* Bytes a pid holds on a device in a snapshot (0 when absent). */
uint64_t gpu_proc_used(const gpu_device_t *dev, pid_t pid);

#endif
