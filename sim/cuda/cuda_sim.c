/*
 * cuda_sim.c: libcuda-sim.so, the CUDA driver's checkpoint calls answered from the
 * simulated GPU set named by SIMGPU (sim/lib/simgpu.h, "CUDA checkpoint state").
 *
 * ABI: as CUDA 12.8+'s cuda.h declares it (NVIDIA's CUDA Driver API reference, "CUDA
 * Checkpointing"): CUresult is an int-sized enum; CUprocessState RUNNING 0, LOCKED 1,
 * CHECKPOINTED 2, FAILED 3; the argument structs are 64 bytes each (CUcheckpointLockArgs
 * {unsigned timeoutMs; unsigned reserved0; cuuint64_t reserved1[7]}, the others
 * {cuuint64_t reserved[8]}), every argument pointer may be NULL, and reserved fields must be
 * zero (else CUDA_ERROR_INVALID_VALUE, as the driver does; restore's GPU remapping, the
 * first fields of its struct in 12.9+, is not simulated and must be zero too).
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
 *              restore block the calling thread for bytes / the set's PCIe bandwidth.
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
#include <stddef.h>
#include <stdint.h>
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

typedef struct CUcheckpointCheckpointArgs_st {
    cuuint64_t reserved[8];
} CUcheckpointCheckpointArgs;

typedef struct CUcheckpointRestoreArgs_st {
    cuuint64_t reserved[8];
} CUcheckpointRestoreArgs;

typedef struct CUcheckpointUnlockArgs_st {
    cuuint64_t reserved[8];
} CUcheckpointUnlockArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "CUcheckpointLockArgs is 64 bytes");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "CUcheckpointRestoreArgs is 64 bytes");

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

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && !all_zero(args, sizeof *args)))
        return CUDA_ERROR_INVALID_VALUE;
    return result_of(simgpu_cuda_checkpoint(s, pid));
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    simgpu_t *s = the_set();
    if (!s)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0 || (args && !all_zero(args, sizeof *args)))
        return CUDA_ERROR_INVALID_VALUE;
    return result_of(simgpu_cuda_restore(s, pid));
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
