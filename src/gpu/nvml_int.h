/*
 * nvml_int.h: what nvml.c (the probe: opening, reads, polling) and nvml_limits.c (the
 * driver's per-cgroup limits) share: the NVML ABI vramd uses, as NVIDIA's NVML API Reference
 * documents it, and the probe's struct. Internal to src/gpu: nothing else includes it.
 */
#ifndef VRAMD_GPU_NVML_INT_H
#define VRAMD_GPU_NVML_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "gpu/driver_thread.h"
#include "gpu/gpu.h"

/* ---- NVML ABI: only what vramd uses, as documented in NVIDIA's NVML API Reference ---- */

typedef int nvmlReturn_t; /* enum nvmlReturn_enum, int-sized */
#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* The record of nvmlDeviceGetComputeRunningProcesses_v3 (nvmlProcessInfo_v2_t layout). */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef nvmlReturn_t (*nvml_init_v2_fn)(void);
typedef nvmlReturn_t (*nvml_shutdown_fn)(void);
typedef const char *(*nvml_error_string_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvml_device_get_count_v2_fn)(unsigned int *count);
typedef nvmlReturn_t (*nvml_device_get_handle_by_index_v2_fn)(unsigned int index,
                                                               nvmlDevice_t *device);
typedef nvmlReturn_t (*nvml_device_get_handle_by_uuid_fn)(const char *uuid, nvmlDevice_t *device);
typedef nvmlReturn_t (*nvml_device_get_name_fn)(nvmlDevice_t device, char *name,
                                                 unsigned int length);
typedef nvmlReturn_t (*nvml_device_get_uuid_fn)(nvmlDevice_t device, char *uuid,
                                                 unsigned int length);
typedef nvmlReturn_t (*nvml_device_get_memory_info_fn)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*nvml_device_get_compute_running_processes_v3_fn)(nvmlDevice_t device,
                                                                         unsigned int *infoCount,
                                                                         nvmlProcessInfo_t *infos);
typedef nvmlReturn_t (*nvml_device_get_utilization_rates_fn)(nvmlDevice_t device,
                                                              nvmlUtilization_t *utilization);

/* nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1 (driver r615+): a hard
 * limit on what the processes of a cgroup v2 directory may hold on the device. */
typedef struct nvmlSetMemoryLimits_v1_st {
    const char *nameSpace; /* the cgroup directory's full path */
    unsigned long long softLimit;
    unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;
typedef struct nvmlGetMemoryLimits_v1_st {
    const char *nameSpace;
    unsigned long long softLimit;
    unsigned long long hardLimit;
    unsigned long long currentUsed;
} nvmlGetMemoryLimits_v1_t;
#define NVML_DEVICE_MEMORY_LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
typedef nvmlReturn_t (*nvml_device_set_memory_limits_v1_fn)(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *l);
typedef nvmlReturn_t (*nvml_device_get_memory_limits_v1_fn)(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *l);

struct nvml_api {
    nvml_init_v2_fn init_v2;
    nvml_shutdown_fn shutdown;
    nvml_error_string_fn error_string;
    nvml_device_get_count_v2_fn device_get_count_v2;
    nvml_device_get_handle_by_index_v2_fn device_get_handle_by_index_v2;
    nvml_device_get_handle_by_uuid_fn device_get_handle_by_uuid;
    nvml_device_get_name_fn device_get_name;
    nvml_device_get_uuid_fn device_get_uuid;
    nvml_device_get_memory_info_fn device_get_memory_info;
    nvml_device_get_compute_running_processes_v3_fn device_get_compute_running_processes_v3;
    nvml_device_get_utilization_rates_fn device_get_utilization_rates; /* optional: NULL */
    nvml_device_set_memory_limits_v1_fn device_set_memory_limits_v1;  /* optional: NULL */
    nvml_device_get_memory_limits_v1_fn device_get_memory_limits_v1;  /* optional: NULL */
};

#define LIBRARY_PATH_MAX 4096

typedef struct managed_device {
    int index; /* NVML's */
    nvmlDevice_t handle;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
} managed_device_t;

struct gpu {
    void *lib;
    char library[LIBRARY_PATH_MAX];
    struct nvml_api nvml;
    bool nvml_initialised;

    pthread_mutex_t nvml_lock; /* held around every NVML call after gpu_open */
    size_t n_devices;
    managed_device_t devices[GPU_MAX_DEVICES]; /* ascending NVML index, no duplicates */
    nvmlProcessInfo_t *proc_buf;               /* under nvml_lock */
    unsigned proc_cap;                         /* entries in proc_buf, <= PROCS_READ_MAX */

    /* Polling: touched on the loop thread only (the read thread touches poll_snap while
     * read_in_flight, and nothing else). */
    uv_loop_t *loop;
    uv_timer_t *timer;     /* heap: freed by its close callback; NULL before polling, after close */
    drv_calls_t *calls;    /* the read thread's owner; NULL before polling, after close */
    drv_call_t read_call;  /* the one read (at most one in flight) */
    gpu_snapshot_t *poll_snap;
    gpu_snapshot_cb cb;
    void *cb_ctx;
    uint64_t interval_ms;
    bool polling;
    bool read_in_flight;
    bool read_requested; /* a read was asked for while one could not start */
    bool in_callback;
    bool closing;

    /* Lifetime: one reference for the owner (dropped by gpu_close) and one per driver call
     * in flight (a poll read, a limit call: dropped when it is done or orphaned); the last
     * one destroys the probe, on whichever thread drops it. */
    atomic_uint refs;

    /* Per-cgroup limits (nvml_limits.c): "" when the driver has them, else why not. */
    char limits_unavailable[160];
    drv_calls_t *limit_calls; /* their owner: made at the first set, closed by gpu_close */
};

/* NVML's text for a return code, safe when the library could not give one. */
const char *nvml_text(const gpu_t *g, nvmlReturn_t rc);
/* A reference for a driver call about to start (loop thread); gpu_unref drops one (any
 * thread) and destroys the probe with the last. */
void gpu_ref(gpu_t *g);
void gpu_unref(gpu_t *g);

#endif
