/*
 * cuda_sim.c: libcuda-sim.so, the CUDA driver's checkpoint calls answered from the
 * simulated GPU set named by SIMGPU (sim/lib/simgpu.h, "CUDA checkpoint state").
 *
 * ABI: as CUDA 12.8+'s cuda.h declares it (NVIDIA's CUDA Driver API reference, "CUDA
 * Checkpointing"): CUresult is an int-sized enum; CUprocessState RUNNING 0, LOCKED 1,
 * CHECKPOINTED 2, FAILED 3; the argument structs are 64 bytes each (CUcheckpointLockArgs
 * {unsigned timeoutMs; unsigned reserved0; cuuint64_t reserved1[7]}, the checkpoint's
 * {customStorageInfo_out; reserved}, the restore's {gpuPairs; gpuPairsCount; padding0;
 * customStorageInfo_out; reserved} as CUDA 13.4 declares them, the unlock's {reserved[8]}),
 * every argument pointer may be NULL, and reserved fields must be zero (else
 * CUDA_ERROR_INVALID_VALUE, as the driver does; restore's GPU remapping is not simulated and
 * must be zero too).
 * Custom storage (CUDA 13.4), only with $SIMGPU_CUSTOM_STORAGE=1 (else customStorageInfo_out
 * counts as a reserved field and cuGetProcAddress does not know cuCheckpointOperationComplete,
 * as on driver 580): the checkpoint or restore starts the operation and returns one
 * per-device mapping per GPU of the set (this process's address space: a copy through it
 * takes the link's time, cuda_vmm.c); cuCheckpointOperationComplete ends it
 * (simgpu_cuda_*_end) and frees the info.
 * Only cu* symbols are exported (sim/cuda/exports.map).
 *
 * Behaviour:
 *   cuInit(0)  maps $SIMGPU; CUDA_ERROR_NO_DEVICE when it is unset or names no set (no
 *              driver, no GPU); repeated calls are fine. Every checkpoint call before it:
 *              CUDA_ERROR_NOT_INITIALIZED.
 *   cuDriverGetVersion  12080 (CUDA 12.8, the first driver API with these calls).
 *   lock/checkpoint/restore/unlock/get-state  simgpu_cuda_*: a pid that is not a live
 *              process of the set -> CUDA_ERROR_NOT_FOUND; the wrong state or another
 *              operation at work on it -> CUDA_ERROR_ILLEGAL_STATE; a lock that times out
 *              -> CUDA_ERROR_TIMEOUT (the process stays RUNNING); a restore that does not
 *              fit -> CUDA_ERROR_OUT_OF_MEMORY (it stays CHECKPOINTED). Checkpoint and
 *              restore block the calling thread for bytes / the set's checkpoint rates
 *              (2 GB/s out, 5 GB/s back by default: as measured on an H100).
 *              The pid is read in the caller's pid namespace: a host pid on the host (a
 *              worker in a container is named by its host pid), a pid of its own namespace
 *              in a container.
 *   cuCheckpointProcessGetRestoreThreadId  the pid itself (no separate thread is simulated).
 *
 * Thread safety: the set is mapped once (under init_lock) and never unmapped while the
 * process lives (the CUDA API has no shutdown); every call may run on any thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simgpu.h"

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_TIMEOUT = 909,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef uint64_t cuuint64_t;

typedef enum CUprocessState_enum {
    CU_PROCESS_STATE_RUNNING = 0,
    CU_PROCESS_STATE_LOCKED = 1,
    CU_PROCESS_STATE_CHECKPOINTED = 2,
    CU_PROCESS_STATE_FAILED = 3
} CUprocessState;

typedef struct CUcheckpointLockArgs_st {
    unsigned int timeoutMs;
    unsigned int reserved0;
    cuuint64_t reserved1[7];
} CUcheckpointLockArgs;

/* Custom storage (CUDA 13.4's documented structs): the driver maps the process's GPU memory
 * into the caller, who copies it with its own buffers and then completes the operation. */
typedef uint64_t CUdeviceptr;
typedef struct CUcheckpointOperation_st *CUcheckpointOperationHandle;

typedef struct CUcheckpointCustomStoragePerDeviceData_st {
    CUdeviceptr devPtr;
    size_t size;
    void *stream;
} CUcheckpointCustomStoragePerDeviceData;

typedef struct CUcheckpointCustomStorageInfo_st {
    CUcheckpointOperationHandle handle;
    CUcheckpointCustomStoragePerDeviceData *perDeviceData;
    unsigned int deviceCount;
} CUcheckpointCustomStorageInfo;

typedef struct CUcheckpointCheckpointArgs_st {
    CUcheckpointCustomStorageInfo **customStorageInfo_out;
    char reserved[64 - sizeof(CUcheckpointCustomStorageInfo **)];
} CUcheckpointCheckpointArgs;

typedef struct CUcheckpointRestoreArgs_st {
    void *gpuPairs;
    unsigned int gpuPairsCount;
    unsigned int padding0;
    CUcheckpointCustomStorageInfo **customStorageInfo_out;
    char reserved[64 - sizeof(void *) - 2 * sizeof(unsigned int) - sizeof(CUcheckpointCustomStorageInfo **)];
} CUcheckpointRestoreArgs;

/* One custom-storage operation in flight: what cuCheckpointOperationComplete finishes. Its
 * mappings are address ranges of this process that only copies use (no bytes are kept:
 * the simulated process's data never leaves it); the operations in flight are a list. */
struct CUcheckpointOperation_st {
    struct CUcheckpointOperation_st *next;
    int pid;
    bool restore;
    CUcheckpointCustomStorageInfo info;
    CUcheckpointCustomStoragePerDeviceData dev[SIMGPU_MAX_GPUS];
};

typedef struct CUcheckpointUnlockArgs_st {
    cuuint64_t reserved[8];
} CUcheckpointUnlockArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "CUcheckpointLockArgs is 64 bytes");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "CUcheckpointRestoreArgs is 64 bytes");
_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "CUcheckpointCheckpointArgs is 64 bytes");

#define SIM_DRIVER_VERSION 12080

/* Exported entry points (prototypes keep -Wmissing-prototypes quiet, the ABI in one place). */
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state);
CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid);
CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args);
CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args);
CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args);
CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args);
CUresult cuCheckpointOperationComplete(CUcheckpointOperationHandle handle);

/* For cuda_mem.c's cuGetProcAddress (not exported). */
bool sim_custom_storage(void);
bool sim_custom_mapping(CUdeviceptr p, uint64_t n); /* for cuda_vmm.c's copies */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static simgpu_t *current_set; /* set once under init_lock, then only read */

static simgpu_t *the_set(void)
{
    return __atomic_load_n(&current_set, __ATOMIC_ACQUIRE);
}

/* For cuda_mem.c (not exported: exports.map keeps only cu*). */
simgpu_t *sim_cuda_set(void);
simgpu_t *sim_cuda_set(void)
{
    return the_set();
}

/* A dlclose of the library unmaps the set (nothing else refers to it). */
__attribute__((destructor)) static void sim_unload(void)
{
    simgpu_t *s = the_set();
    if (s) {
        current_set = NULL;
        simgpu_close(s);
    }
}

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&init_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!the_set()) {
        simgpu_t *s = simgpu_open(NULL, NULL, 0);
        if (s)
            __atomic_store_n(&current_set, s, __ATOMIC_RELEASE);
        else
            rc = CUDA_ERROR_NO_DEVICE;
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult error, const char **pStr, bool name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++) {
        if (error_table[i].code == error) {
            *pStr = name ? error_table[i].name : error_table[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, false);
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, true);
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

/* errno of a simgpu_cuda_* call -> the driver's code. */
static CUresult from_errno(int e)
{
    switch (e) {
    case ESRCH:
        return CUDA_ERROR_NOT_FOUND;
    case EBUSY:
        return CUDA_ERROR_ILLEGAL_STATE;
    case ETIMEDOUT:
        return CUDA_ERROR_TIMEOUT;
    case ENOMEM:
    case ENOSPC:
        return CUDA_ERROR_OUT_OF_MEMORY;
    case EINVAL:
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
}

static CUresult result_of(int rc)
{
    return rc == 0 ? CUDA_SUCCESS : from_errno(errno);
}

CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!state || pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int st = 0;
    if (simgpu_cuda_state(s, pid, &st) < 0)
        return from_errno(errno);
    *state = (CUprocessState)st;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tid || pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int st = 0;
    if (simgpu_cuda_state(s, pid, &st) < 0)
        return from_errno(errno);
    *tid = pid;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && (args->reserved0 || !all_zero(args->reserved1, sizeof args->reserved1))))
        return CUDA_ERROR_INVALID_VALUE;
    return result_of(simgpu_cuda_lock(s, pid, args ? args->timeoutMs : 0));
}

/* $SIMGPU_CUSTOM_STORAGE=1: the driver has custom storage (CUDA 13.4); else it has not (580). */
bool sim_custom_storage(void)
{
    const char *v = getenv("SIMGPU_CUSTOM_STORAGE");
    return v && strcmp(v, "1") == 0;
}

static pthread_mutex_t ops_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUcheckpointOperation_st *ops;
static CUdeviceptr next_mapping = 0x7d0000000000ULL;

bool sim_custom_mapping(CUdeviceptr p, uint64_t n)
{
    bool in = false;
    pthread_mutex_lock(&ops_lock);
    for (const struct CUcheckpointOperation_st *op = ops; op && !in; op = op->next)
        for (unsigned k = 0; k < op->info.deviceCount && !in; k++)
            in = op->dev[k].size && p >= op->dev[k].devPtr && n <= op->dev[k].size - (p - op->dev[k].devPtr);
    pthread_mutex_unlock(&ops_lock);
    return in;
}

/* The caller's mapping of what moves (bytes[g] on GPU g): a custom-storage operation whose
 * handle is in *out. */
static CUresult custom_begin(int pid, bool restore, const uint64_t bytes[SIMGPU_MAX_GPUS],
                             CUcheckpointCustomStorageInfo **out)
{
    struct CUcheckpointOperation_st *op = calloc(1, sizeof *op);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->pid = pid;
    op->restore = restore;
    op->info.handle = op;
    op->info.perDeviceData = op->dev;
    int n = simgpu_count(the_set());
    pthread_mutex_lock(&ops_lock);
    for (int g = 0; g < n && g < SIMGPU_MAX_GPUS; g++) { /* one per device, in order; size 0: none there */
        CUcheckpointCustomStoragePerDeviceData *d = &op->dev[op->info.deviceCount];
        op->info.deviceCount++;
        if (!bytes[g])
            continue;
        d->devPtr = next_mapping;
        d->size = (size_t)bytes[g];
        d->stream = NULL; /* the caller's copies complete before they return */
        next_mapping += (bytes[g] + 0xfffff) & ~(uint64_t)0xfffff; /* never reused */
    }
    op->next = ops;
    ops = op;
    pthread_mutex_unlock(&ops_lock);
    *out = &op->info;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && !all_zero(args->reserved, sizeof args->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!args || !args->customStorageInfo_out)
        return result_of(simgpu_cuda_checkpoint(s, pid));
    if (!sim_custom_storage())
        return CUDA_ERROR_INVALID_VALUE; /* a driver without custom storage: a reserved field */
    uint64_t bytes[SIMGPU_MAX_GPUS];
    if (simgpu_cuda_checkpoint_begin(s, pid, bytes) < 0)
        return from_errno(errno);
    CUresult rc = custom_begin(pid, false, bytes, args->customStorageInfo_out);
    if (rc != CUDA_SUCCESS)
        (void)simgpu_cuda_checkpoint_end(s, pid); /* cannot happen but out of memory; nothing copied */
    return rc;
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && (args->gpuPairs || args->gpuPairsCount || args->padding0 ||
                              !all_zero(args->reserved, sizeof args->reserved))))
        return CUDA_ERROR_INVALID_VALUE;
    if (!args || !args->customStorageInfo_out)
        return result_of(simgpu_cuda_restore(s, pid));
    if (!sim_custom_storage())
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes[SIMGPU_MAX_GPUS];
    if (simgpu_cuda_restore_begin(s, pid, bytes) < 0)
        return from_errno(errno);
    CUresult rc = custom_begin(pid, true, bytes, args->customStorageInfo_out);
    if (rc != CUDA_SUCCESS)
        (void)simgpu_cuda_restore_end(s, pid);
    return rc;
}

/* The caller copied (or queued its copies of) every device's bytes: the operation completes,
 * the mappings go, and the handle and its info are freed. */
CUresult cuCheckpointOperationComplete(CUcheckpointOperationHandle handle)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_custom_storage())
        return CUDA_ERROR_NOT_SUPPORTED;
    bool known = false;
    pthread_mutex_lock(&ops_lock);
    for (struct CUcheckpointOperation_st **pp = &ops; *pp; pp = &(*pp)->next)
        if (*pp == handle) {
            *pp = handle->next; /* its mappings go with it */
            known = true;
            break;
        }
    pthread_mutex_unlock(&ops_lock);
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    int rc = handle->restore ? simgpu_cuda_restore_end(s, handle->pid) : simgpu_cuda_checkpoint_end(s, handle->pid);
    int e = errno;
    handle->info.handle = NULL;
    free(handle);
    errno = e;
    return result_of(rc);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && !all_zero(args, sizeof *args)))
        return CUDA_ERROR_INVALID_VALUE;
    return result_of(simgpu_cuda_unlock(s, pid));
}
