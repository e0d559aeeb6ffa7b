/*
 * cuda: the CUDA driver's process checkpoint calls, the mechanism of the `checkpoint`
 * eviction tier (SPEC 4.1): park a process's GPU memory in host memory and bring it back.
 *
 * The driver is loaded at run time with dlopen (the caller gives the path: gpu.cuda_library
 * in the config; NULL = $VRAMD_CUDA_LIBRARY, else libcuda.so.1). On a GPU host that is the
 * driver's libcuda.so.1 (cuCheckpointProcess* need driver 570+, CUDA 12.8); elsewhere
 * build/lib/libcuda-sim.so answers from a simulated GPU. There is one code path for both.
 *
 * cuda_open never fails for want of a driver: without the library, without one of the
 * symbols, or when cuInit fails, the handle is "unavailable" (cuda_available() false,
 * cuda_unavailable_reason() says why) and every operation on it ends with CUDA_UNAVAILABLE
 * and that reason: the tier is skipped, nothing crashes.
 *
 * Operations (each reads the state back with cuCheckpointProcessGetState and fails with
 * CUDA_BAD_STATE when it is not what the operation must leave):
 *   park    RUNNING -> lock (timeout) -> LOCKED -> checkpoint -> CHECKPOINTED. From LOCKED it
 *           only checkpoints; from CHECKPOINTED it does nothing (already parked). When the
 *           checkpoint fails and the process is still LOCKED, park unlocks it again (best
 *           effort), so a failed park leaves a running process where the driver allows.
 *           With custom storage on (cuda_use_custom_storage), the checkpoint maps the memory
 *           into this process and cuda_storage.c copies it through a pinned pool (and back).
 *   unpark  CHECKPOINTED -> restore -> LOCKED -> unlock -> RUNNING. From LOCKED it only
 *           unlocks; from RUNNING it does nothing. A restore that does not fit on the GPU
 *           ends with CUDA_NO_MEMORY and leaves the process CHECKPOINTED (try again later,
 *           or stop it).
 *   state, lock, checkpoint, restore, unlock: the single driver calls (for tools, tests and
 *           cleanup after a restart); lock takes the timeout, the others ignore it.
 * cuda_start() runs one off the loop (a checkpoint of tens of GB takes seconds) and calls
 * cb on the loop thread with the result; cuda_run() runs it on the caller's thread
 * (blocking: for tools and tests, never on the event loop). Several may be in flight, for
 * different pids; two at once on one pid get the driver's ILLEGAL_STATE.
 *
 * cuda_start runs each operation on a thread of its own (driver_thread.h), not on libuv's
 * pool: an operation that hangs in the driver never holds up the loop's end or vramd's exit.
 * At most CUDA_MAX_IN_FLIGHT (cuda.c) run at once per handle; cuda_start refuses more. All
 * cuda_start calls of a handle use one loop.
 *
 * Lifetime: cuda_close() may be called with operations in flight: their callbacks are not
 * called, nothing waits for them, and the library is closed when the last one has returned
 * from the driver (on that operation's thread; never, for one that hangs until the process
 * ends). The loop must run once after cuda_close (a handle's close). A process parked when
 * vramd stops stays parked: the next start finds it with `state` (CHECKPOINTED processes
 * hold host memory until restored or killed).
 *
 * Return convention: cuda_start/cuda_run return 0 when the operation ran (its outcome is in
 * the result's status), -1 on bad arguments or a closed handle (no callback then).
 */
#ifndef VRAMD_GPU_CUDA_H
#define VRAMD_GPU_CUDA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define CUDA_DEFAULT_LIBRARY "libcuda.so.1"
#define CUDA_ERROR_MAX 320

/* CUprocessState's values; CUDA_STATE_UNKNOWN when it could not be read. */
typedef enum cuda_state {
    CUDA_STATE_UNKNOWN = -1,
    CUDA_STATE_RUNNING = 0,
    CUDA_STATE_LOCKED = 1,
    CUDA_STATE_CHECKPOINTED = 2,
    CUDA_STATE_FAILED = 3
} cuda_state_t;

typedef enum cuda_op {
    CUDA_OP_PARK = 0,
    CUDA_OP_UNPARK,
    CUDA_OP_STATE,
    CUDA_OP_LOCK,
    CUDA_OP_CHECKPOINT,
    CUDA_OP_RESTORE,
    CUDA_OP_UNLOCK
} cuda_op_t;

typedef enum cuda_status {
    CUDA_OK = 0,
    CUDA_UNAVAILABLE, /* no driver library / symbols / cuInit failed: checkpoint unavailable */
    CUDA_TIMEOUT,     /* the lock timed out: the process is still RUNNING */
    CUDA_NO_MEMORY,   /* restore: does not fit on the GPU: still CHECKPOINTED */
    CUDA_NOT_FOUND,   /* the driver knows no CUDA process with this pid */
    CUDA_BAD_STATE,   /* not in a state the operation starts from, or read back wrong */
    CUDA_FAILED       /* any other driver error (driver_error says which) */
} cuda_status_t;

typedef struct cuda_result {
    cuda_op_t op;
    pid_t pid;
    cuda_status_t status;
    int driver_error;          /* the CUresult of the call that failed; 0 */
    cuda_state_t state_before; /* park/unpark: as read before acting (UNKNOWN otherwise) */
    cuda_state_t state;        /* read back after the operation */
    bool nothing_to_do;        /* park of a CHECKPOINTED / unpark of a RUNNING process */
    uint64_t lock_us;          /* park, lock: time in cuCheckpointProcessLock */
    uint64_t copy_us;          /* park: in ...Checkpoint; unpark: in ...Restore */
    uint64_t unlock_us;        /* unpark, unlock: in ...Unlock */
    uint64_t total_us;         /* the whole operation, on the thread that ran it */
    uint64_t custom_bytes;     /* park/unpark through custom storage: the bytes vramd copied; 0 */
    char error[CUDA_ERROR_MAX]; /* what failed and why; "" when status is CUDA_OK */
} cuda_result_t;

typedef struct cuda cuda_t;
typedef void (*cuda_done_cb)(void *ctx, const cuda_result_t *res);

/* dlopen + dlsym + cuInit(0); NULL only when out of memory. Blocks for as long as cuInit
 * takes (up to a second or so on a real driver): call it at start-up, not per request. */
cuda_t *cuda_open(const char *library);
void cuda_close(cuda_t *c);
/* Handles opened and not yet destroyed in this process (an abandoned operation keeps its
 * handle until the driver returns). */
unsigned cuda_live_count(void);
bool cuda_available(const cuda_t *c);
const char *cuda_unavailable_reason(const cuda_t *c); /* "" when available */
const char *cuda_library(const cuda_t *c);            /* the path loaded (or asked for) */
int cuda_driver_version(const cuda_t *c);             /* cuDriverGetVersion: 12080 = 12.8; 0 unknown */
/* Custom storage (gpu/cuda_storage.h, CUDA 13.4): off until the owner turns it on (the bytes
 * live in this process, so only a long-lived owner may: vramd, not a one-shot tool). With it
 * on and the driver having it, park and unpark copy through vramd's pinned pool. */
void cuda_use_custom_storage(cuda_t *c, bool on);
bool cuda_custom_storage(const cuda_t *c);
const char *cuda_custom_storage_reason(const cuda_t *c); /* "" when in use */
uint64_t cuda_custom_storage_held(const cuda_t *c);      /* host bytes kept for parked processes */

/* lock_timeout_ms: how long the lock may wait for the process's CUDA calls to stop; 0 is the
 * driver's "no limit", which can hold a pool thread for ever: always give one. */
int cuda_start(cuda_t *c, uv_loop_t *loop, cuda_op_t op, pid_t pid, uint64_t lock_timeout_ms,
               cuda_done_cb cb, void *ctx);
int cuda_run(cuda_t *c, cuda_op_t op, pid_t pid, uint64_t lock_timeout_ms, cuda_result_t *out);

/* The two the eviction tier uses, as cuda_start. */
int cuda_park(cuda_t *c, uv_loop_t *loop, pid_t pid, uint64_t lock_timeout_ms, cuda_done_cb cb,
              void *ctx);
int cuda_unpark(cuda_t *c, uv_loop_t *loop, pid_t pid, cuda_done_cb cb, void *ctx);

const char *cuda_state_name(cuda_state_t s);   /* "running", "locked", "checkpointed", ... */
const char *cuda_op_name(cuda_op_t op);        /* "park", "unpark", "state", "lock", ... */
const char *cuda_status_name(cuda_status_t s); /* "ok", "unavailable", "timeout", ... */

#endif
