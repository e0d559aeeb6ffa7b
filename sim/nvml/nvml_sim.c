/*
 * nvml_sim.c: libnvidia-ml-sim.so, the subset of NVML's C ABI that vramd uses, answered
 * from the simulated GPU set named by the SIMGPU environment variable (see sim/lib/simgpu.h).
 *
 * ABI: the types and entry points below mirror NVML's nvml.h (documented by NVIDIA as the
 * "NVML API Reference"): nvmlReturn_t is an int-sized enum, nvmlDevice_t an opaque pointer,
 * nvmlMemory_t {unsigned long long total, free, used}, nvmlUtilization_t {unsigned gpu,
 * memory}, nvmlProcessInfo_t (v2/v3) {unsigned pid; unsigned long long usedGpuMemory;
 * unsigned gpuInstanceId, computeInstanceId} and the v1 process record {pid, usedGpuMemory}.
 * Only nvml* symbols are exported (sim/nvml/exports.map).
 *
 * Behaviour kept from the real library:
 *   - nvmlInit* refcounts; every nvmlShutdown undoes one; calls made while not initialised
 *     return NVML_ERROR_UNINITIALIZED.
 *   - Init fails with NVML_ERROR_DRIVER_NOT_LOADED when SIMGPU is unset or names no set
 *     (the simulated "no driver").
 *   - Process lists follow the NVML_ERROR_INSUFFICIENT_SIZE protocol: when *infoCount is
 *     smaller than the number of processes (including a NULL infos with *infoCount 0),
 *     *infoCount is set to the number needed and INSUFFICIENT_SIZE is returned.
 *     gpuInstanceId/computeInstanceId are 0xFFFFFFFF (no MIG), as on a non-MIG GPU.
 *   - Name/UUID/driver-version buffers that are too small give INSUFFICIENT_SIZE.
 *   - CUDA_VISIBLE_DEVICES is ignored (NVML ignores it too): all GPUs of the set are listed.
 *   - Process pids are host pids, also for processes in a container's pid namespace: loaded
 *     on the host (the set creator's namespace), every query first finds the host pid of any
 *     such process that has none yet (simgpu_processes, simgpu.h "Pid namespaces"); one
 *     whose host pid is not known is listed as pid 0.
 *
 * Thread safety: a process-wide rwlock; every query holds it shared, init/shutdown hold it
 * exclusive, so a shutdown cannot unmap the set under a running query. Device handles point
 * into a static table and stay valid for the life of the process.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <string.h>

#include "simgpu.h"

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

struct nvmlDevice_st {
    int index;
};
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

typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* nvmlDeviceSetMemoryLimits_v1 / GetMemoryLimits_v1 (driver r615, NVML API reference) */
typedef struct nvmlSetMemoryLimits_v1_st {
    const char *nameSpace; /* full path of the cgroup v2 directory */
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
#define NVML_NO_INSTANCE_ID 0xFFFFFFFFu
#define SIM_DRIVER_VERSION "0.1.0-simgpu"
#define SIM_NVML_VERSION "12.0.0-simgpu"

/* Exported entry points: prototypes here keep -Wmissing-prototypes quiet and the ABI in
 * one place. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits);
nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos);

static pthread_rwlock_t state_lock = PTHREAD_RWLOCK_INITIALIZER;
static unsigned init_refcount;         /* guarded by state_lock (exclusive) */
static simgpu_t *current_set;          /* non-NULL iff init_refcount > 0 */
static int device_count;               /* of current_set */
static struct nvmlDevice_st device_table[SIMGPU_MAX_GPUS] = {
    {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

_Static_assert(SIMGPU_MAX_GPUS == 16, "device_table must list SIMGPU_MAX_GPUS entries");

/* ---- init / shutdown ---- */

nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_rwlock_wrlock(&state_lock);
    if (init_refcount > 0) {
        init_refcount++;
        goto out;
    }
    simgpu_t *s = simgpu_open(NULL, NULL, 0);
    if (!s) {
        ret = NVML_ERROR_DRIVER_NOT_LOADED;
        goto out;
    }
    int n = simgpu_count(s);
    if (n < 1 || n > SIMGPU_MAX_GPUS) {
        simgpu_close(s);
        ret = NVML_ERROR_UNKNOWN;
        goto out;
    }
    current_set = s;
    device_count = n;
    init_refcount = 1;
out:
    pthread_rwlock_unlock(&state_lock);
    return ret;
}

nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_rwlock_wrlock(&state_lock);
    if (init_refcount == 0) {
        ret = NVML_ERROR_UNINITIALIZED;
    } else if (--init_refcount == 0) {
        simgpu_close(current_set);
        current_set = NULL;
        device_count = 0;
    }
    pthread_rwlock_unlock(&state_lock);
    return ret;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    default: return "Unknown Error";
    }
}

/* ---- helpers: every query runs between query_begin and query_end ---- */

static nvmlReturn_t query_begin(void)
{
    pthread_rwlock_rdlock(&state_lock);
    if (init_refcount == 0) {
        pthread_rwlock_unlock(&state_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t query_end(nvmlReturn_t ret)
{
    pthread_rwlock_unlock(&state_lock);
    return ret;
}

/* The GPU index behind a handle, or -1 when the handle is not one of ours. */
static int device_index(nvmlDevice_t device)
{
    if (!device || device < &device_table[0] || device >= &device_table[device_count])
        return -1;
    return device->index;
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t need = strlen(text) + 1;
    if (length < need)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, need);
    return NVML_SUCCESS;
}

/* ---- system ---- */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    return query_end(copy_text(SIM_DRIVER_VERSION, version, length));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    return query_end(copy_text(SIM_NVML_VERSION, version, length));
}

/* ---- devices ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!deviceCount)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = (unsigned)device_count;
    return query_end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!device || index >= (unsigned)device_count)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    *device = &device_table[index];
    return query_end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!uuid || !device)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    int g = simgpu_find_uuid(current_set, uuid);
    if (g < 0 || g >= device_count)
        return query_end(NVML_ERROR_NOT_FOUND);
    *device = &device_table[g];
    return query_end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    int g = device_index(device);
    if (g < 0 || !index)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned)g;
    return query_end(NVML_SUCCESS);
}

/* Fill *info for a handle; NVML_SUCCESS or an error code. Caller is inside a query. */
static nvmlReturn_t device_info(nvmlDevice_t device, simgpu_info_t *info)
{
    int g = device_index(device);
    if (g < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (simgpu_info(current_set, g, info) < 0)
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_info_t info;
    if (!name)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    ret = device_info(device, &info);
    if (ret == NVML_SUCCESS)
        ret = copy_text(info.name, name, length);
    return query_end(ret);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_info_t info;
    if (!uuid)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    ret = device_info(device, &info);
    if (ret == NVML_SUCCESS)
        ret = copy_text(info.uuid, uuid, length);
    return query_end(ret);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_info_t info;
    if (!memory)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    ret = device_info(device, &info);
    if (ret == NVML_SUCCESS) {
        memory->total = info.total;
        memory->free = info.free;
        memory->used = info.used;
    }
    return query_end(ret);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_info_t info;
    if (!utilization)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    ret = device_info(device, &info);
    if (ret == NVML_SUCCESS) {
        utilization->gpu = info.utilization_gpu;
        utilization->memory = info.utilization_memory;
    }
    return query_end(ret);
}

/* The process list of a handle into procs (capacity SIMGPU_MAX_PROCS); count in *n. */
static nvmlReturn_t device_processes(nvmlDevice_t device, unsigned int *infoCount,
                                     const void *infos, simgpu_proc_t *procs, size_t *n)
{
    int g = device_index(device);
    if (g < 0 || !infoCount || (!infos && *infoCount != 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (simgpu_processes(current_set, g, procs, SIMGPU_MAX_PROCS, n) < 0)
        return NVML_ERROR_UNKNOWN;
    if (*n > SIMGPU_MAX_PROCS)
        *n = SIMGPU_MAX_PROCS;
    if (*infoCount < *n) {
        *infoCount = (unsigned)*n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *infoCount = (unsigned)*n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    size_t n = 0;
    ret = device_processes(device, infoCount, infos, procs, &n);
    if (ret == NVML_SUCCESS) {
        for (size_t i = 0; i < n; i++) {
            infos[i].pid = (unsigned)procs[i].pid;
            infos[i].usedGpuMemory = procs[i].used;
            infos[i].gpuInstanceId = NVML_NO_INSTANCE_ID;
            infos[i].computeInstanceId = NVML_NO_INSTANCE_ID;
        }
    }
    return query_end(ret);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    simgpu_proc_t procs[SIMGPU_MAX_PROCS];
    size_t n = 0;
    ret = device_processes(device, infoCount, infos, procs, &n);
    if (ret == NVML_SUCCESS) {
        for (size_t i = 0; i < n; i++) {
            infos[i].pid = (unsigned)procs[i].pid;
            infos[i].usedGpuMemory = procs[i].used;
        }
    }
    return query_end(ret);
}

/* ---- per-cgroup limits (driver r615) ----
 * The drivers lent to this project (580) lack these calls; the simulated driver stands for
 * one of them unless SIMGPU_DRIVER_LIMITS=1 is set in the calling process: then both work
 * over simgpu's limit table (simgpu.h), else they answer NOT_SUPPORTED, as a driver without
 * the feature would. SIMGPU_NVML_LIMIT_DELAY_MS=N makes each set take N ms first (a driver
 * slow to answer, for the tests of what vramd does meanwhile), or only the first
 * SIMGPU_NVML_LIMIT_DELAY_CALLS of them. */

static bool limits_enabled(void)
{
    const char *v = getenv("SIMGPU_DRIVER_LIMITS");
    return v && strcmp(v, "1") == 0;
}

static nvmlReturn_t errno_to_nvml(int e)
{
    switch (e) {
    case ENOENT: return NVML_ERROR_NOT_FOUND;
    case EINVAL:
    case ENAMETOOLONG: return NVML_ERROR_INVALID_ARGUMENT;
    case ENOSPC: return NVML_ERROR_INSUFFICIENT_SIZE;
    default: return NVML_ERROR_UNKNOWN;
    }
}

nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits)
{
    static atomic_int delayed; /* SIMGPU_NVML_LIMIT_DELAY_CALLS: how many calls are slow (unset: all) */
    const char *delay = getenv("SIMGPU_NVML_LIMIT_DELAY_MS"); /* a driver slow to answer (tests) */
    const char *calls = getenv("SIMGPU_NVML_LIMIT_DELAY_CALLS");
    if (delay && atoi(delay) > 0 && (!calls || atomic_fetch_add(&delayed, 1) < atoi(calls))) {
        struct timespec ts = {atoi(delay) / 1000, (long)(atoi(delay) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!limits_enabled())
        return query_end(NVML_ERROR_NOT_SUPPORTED);
    int g = device_index(device);
    if (g < 0 || !limits || !limits->nameSpace)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    if (simgpu_limit_set(current_set, g, limits->nameSpace, limits->softLimit, limits->hardLimit) != 0)
        return query_end(errno_to_nvml(errno));
    return query_end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits)
{
    nvmlReturn_t ret = query_begin();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!limits_enabled())
        return query_end(NVML_ERROR_NOT_SUPPORTED);
    int g = device_index(device);
    if (g < 0 || !limits || !limits->nameSpace)
        return query_end(NVML_ERROR_INVALID_ARGUMENT);
    simgpu_limit_t l;
    if (simgpu_limit_get(current_set, g, limits->nameSpace, &l) != 0) {
        if (errno != ENOENT)
            return query_end(errno_to_nvml(errno));
        limits->softLimit = 0; /* no limit set there */
        limits->hardLimit = NVML_DEVICE_MEMORY_LIMIT_MAX;
        limits->currentUsed = 0;
        return query_end(NVML_SUCCESS);
    }
    limits->softLimit = l.soft;
    limits->hardLimit = l.hard;
    limits->currentUsed = l.used;
    return query_end(NVML_SUCCESS);
}
