/*
 * cuda.c: the CUDA driver's checkpoint calls (cuda.h) through dlopen. It is the only place
 * in vramd that talks to libcuda; the driver and build/lib/libcuda-sim.so go through the
 * same code.
 *
 * Life of a cuda_t:
 *   cuda_open   dlopen (RTLD_NOW|RTLD_LOCAL) -> dlsym every entry point -> cuInit(0) ->
 *               cuDriverGetVersion. A failure at any step leaves an unavailable handle with
 *               the reason, the library closed.
 *   operations  run_op() on the calling thread (cuda_run) or on a thread of its own
 *               (cuda_start: driver_thread.h, never libuv's pool, whose threads are joined
 *               at exit; one heap-allocated cuda_req_t per operation; its done callback
 *               runs on the loop thread, calls the caller's callback and frees the request).
 *   cuda_close  marks the handle closing and gives the operations still in the driver up
 *               (nothing waits for them: a hung driver cannot hold up vramd's exit); the
 *               handle is destroyed when its last reference goes (below).
 *
 * Invariants:
 *   - After cuda_open the handle's fields are read-only, so any number of threads may call
 *     the driver through it at once (the driver API is thread-safe; so is libcuda-sim).
 *   - closing and calls are touched on the loop thread only; refs (atomic) counts the
 *     caller's reference and one per operation started and not yet ended, so the library is
 *     never dlclosed while a request is in the driver: an abandoned operation that returns
 *     drops its reference on its own thread, and the last one destroys the handle there.
 *   - A caller's callback never runs after cuda_close.
 *   - At most CUDA_MAX_IN_FLIGHT operations run at once (threads bounded even when every
 *     one hangs); cuda_start refuses more.
 *   - Every state an operation leaves is read back with cuCheckpointProcessGetState; a
 *     result's state is what the driver said last (UNKNOWN when it could not say).
 *
 * Return convention (as cuda.h): 0 ran / queued, -1 bad arguments or closed handle.
 */
#include "gpu/cuda.h"

#include "gpu/cuda_storage.h"
#include "gpu/driver_thread.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver ABI: only what vramd uses, as CUDA 12.8's cuda.h declares it ---- */

typedef int CUresult; /* enum cudaError_enum, int-sized */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_TIMEOUT 909

typedef int CUprocessState; /* enum CUprocessState_enum: RUNNING 0 ... FAILED 3 */

typedef struct CUcheckpointLockArgs_st {
    unsigned int timeoutMs; /* 0: no timeout */
    unsigned int reserved0;
    uint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct CUcheckpointArgs_st { /* Checkpoint, Restore and Unlock args: 64 zero bytes */
    uint64_t reserved[8];
} CUcheckpointArgs;

/* CUDA 13.4's custom storage (gpu/cuda_storage.h): the first field of a checkpoint's args,
 * the fourth of a restore's (after the GPU remapping pairs). */
typedef struct CUcheckpointCheckpointArgs_st {
    void **customStorageInfo_out;
    char reserved[64 - sizeof(void **)];
} CUcheckpointCheckpointArgs;

typedef struct CUcheckpointRestoreArgs_st {
    void *gpuPairs;
    unsigned int gpuPairsCount;
    unsigned int padding0;
    void **customStorageInfo_out;
    char reserved[64 - 2 * sizeof(void *) - 2 * sizeof(unsigned int)];
} CUcheckpointRestoreArgs;

_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "CUcheckpointCheckpointArgs is 64 bytes");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "CUcheckpointRestoreArgs is 64 bytes");

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "CUcheckpointLockArgs is 64 bytes");

typedef CUresult (*cu_init_fn)(unsigned int flags);
typedef CUresult (*cu_driver_get_version_fn)(int *version);
typedef CUresult (*cu_get_error_text_fn)(CUresult error, const char **text);
typedef CUresult (*cu_get_state_fn)(int pid, CUprocessState *state);
typedef CUresult (*cu_lock_fn)(int pid, CUcheckpointLockArgs *args);
typedef CUresult (*cu_step_fn)(int pid, void *args); /* 64 bytes of args, see above */

struct cuda_api {
    cu_init_fn init;
    cu_driver_get_version_fn driver_get_version; /* optional */
    cu_get_error_text_fn get_error_string;
    cu_get_error_text_fn get_error_name; /* optional */
    cu_get_state_fn get_state;
    cu_lock_fn lock;
    cu_step_fn checkpoint;
    cu_step_fn restore;
    cu_step_fn unlock;
};

#define LIBRARY_PATH_MAX 4096
#define REASON_MAX 512
/* Operations at once per handle: one per parked or parking instance is the most vramd asks
 * for; the bound keeps a hung driver from taking a thread per retry without end. */
#define CUDA_MAX_IN_FLIGHT 64

struct cuda {
    void *lib;
    char library[LIBRARY_PATH_MAX];
    struct cuda_api api;
    bool available;
    char reason[REASON_MAX];
    int driver_version;
    cuda_storage_t *storage; /* custom storage: the driver has it (probed at open) */
    bool storage_on;         /* and the owner asked for it (cuda_use_custom_storage) */
    char storage_why[160];   /* why not, when the driver has none */
    atomic_uint refs; /* the caller's + one per operation not yet ended */
    /* loop thread only */
    drv_calls_t *calls; /* made at the first cuda_start, on its loop */
    uv_loop_t *loop;
    bool closing;
};

static atomic_uint g_live; /* cuda_t objects not yet destroyed (cuda_live_count) */

typedef struct cuda_req {
    drv_call_t call;
    cuda_t *c;
    cuda_op_t op;
    pid_t pid;
    uint64_t timeout_ms;
    cuda_done_cb cb;
    void *ctx;
    cuda_result_t res;
} cuda_req_t;

static void set_text(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_text(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
}

/* ---- names ---- */

const char *cuda_state_name(cuda_state_t s)
{
    switch (s) {
    case CUDA_STATE_RUNNING:
        return "running";
    case CUDA_STATE_LOCKED:
        return "locked";
    case CUDA_STATE_CHECKPOINTED:
        return "checkpointed";
    case CUDA_STATE_FAILED:
        return "failed";
    default:
        return "unknown";
    }
}

const char *cuda_op_name(cuda_op_t op)
{
    static const char *const names[] = {"park", "unpark", "state", "lock", "checkpoint", "restore", "unlock"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

const char *cuda_status_name(cuda_status_t s)
{
    static const char *const names[] = {"ok",        "unavailable", "timeout", "no_memory",
                                        "not_found", "bad_state",   "failed"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

/* ---- opening ---- */

static void make_unavailable(cuda_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void make_unavailable(cuda_t *c, const char *fmt, ...)
{
    char why[REASON_MAX - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    set_text(c->reason, sizeof c->reason, "checkpoint unavailable: %s", why);
    c->available = false;
    memset(&c->api, 0, sizeof c->api);
    cuda_storage_close(c->storage);
    c->storage = NULL;
    if (c->lib)
        dlclose(c->lib);
    c->lib = NULL;
}

static int resolve_symbols(cuda_t *c)
{
    struct {
        const char *name;
        void **slot;
        bool required;
    } table[] = {
        {"cuInit", (void **)&c->api.init, true},
        {"cuDriverGetVersion", (void **)&c->api.driver_get_version, false},
        {"cuGetErrorString", (void **)&c->api.get_error_string, true},
        {"cuGetErrorName", (void **)&c->api.get_error_name, false},
        {"cuCheckpointProcessGetState", (void **)&c->api.get_state, true},
        {"cuCheckpointProcessLock", (void **)&c->api.lock, true},
        {"cuCheckpointProcessCheckpoint", (void **)&c->api.checkpoint, true},
        {"cuCheckpointProcessRestore", (void **)&c->api.restore, true},
        {"cuCheckpointProcessUnlock", (void **)&c->api.unlock, true},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        dlerror();
        *table[i].slot = dlsym(c->lib, table[i].name);
        if (!*table[i].slot && table[i].required) {
            make_unavailable(c,
                             "%s has no %s (the CUDA checkpoint driver API needs NVIDIA driver "
                             "570 or later, CUDA 12.8)",
                             c->library, table[i].name);
            return -1;
        }
    }
    return 0;
}

static void record_library_path(cuda_t *c, const char *requested)
{
    struct link_map *map = NULL;
    const char *path = requested;
    if (dlinfo(c->lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        path = map->l_name;
    set_text(c->library, sizeof c->library, "%s", path);
}

/* "CUDA_ERROR_TIMEOUT (909): wait operation timed out", from the driver's own tables. */
static void error_text(const cuda_t *c, CUresult rc, char *out, size_t cap)
{
    const char *name = NULL, *text = NULL;
    if (c->api.get_error_name && c->api.get_error_name(rc, &name) != CUDA_SUCCESS)
        name = NULL;
    if (c->api.get_error_string && c->api.get_error_string(rc, &text) != CUDA_SUCCESS)
        text = NULL;
    set_text(out, cap, "%s (%d): %s", name ? name : "CUDA error", rc,
             text ? text : "unknown CUDA error");
}

cuda_t *cuda_open(const char *library)
{
    const char *requested = library;
    if (!requested || !requested[0]) {
        const char *env = getenv("VRAMD_CUDA_LIBRARY");
        requested = env && env[0] ? env : CUDA_DEFAULT_LIBRARY;
    }
    cuda_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    atomic_init(&c->refs, 1);
    atomic_fetch_add(&g_live, 1);
    set_text(c->library, sizeof c->library, "%s", requested);
    dlerror();
    c->lib = dlopen(requested, RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) {
        const char *why = dlerror();
        make_unavailable(c, "cannot load %s: %s", requested, why ? why : "unknown error");
        return c;
    }
    record_library_path(c, requested);
    if (resolve_symbols(c) < 0)
        return c;
    CUresult rc = c->api.init(0);
    if (rc != CUDA_SUCCESS) {
        char text[256];
        error_text(c, rc, text, sizeof text);
        make_unavailable(c, "cuInit failed (%s): %s", c->library, text);
        return c;
    }
    int version = 0;
    if (c->api.driver_get_version && c->api.driver_get_version(&version) == CUDA_SUCCESS)
        c->driver_version = version;
    c->storage = cuda_storage_open(c->lib, c->storage_why, sizeof c->storage_why);
    c->available = true;
    return c;
}

void cuda_use_custom_storage(cuda_t *c, bool on)
{
    if (c)
        c->storage_on = on;
}

bool cuda_custom_storage(const cuda_t *c)
{
    return c && c->available && c->storage && c->storage_on;
}

const char *cuda_custom_storage_reason(const cuda_t *c)
{
    if (!c || !c->available)
        return "no CUDA driver";
    if (!c->storage)
        return c->storage_why;
    return c->storage_on ? "" : "turned off";
}

uint64_t cuda_custom_storage_held(const cuda_t *c)
{
    return c ? cuda_storage_held(c->storage) : 0;
}

bool cuda_available(const cuda_t *c)
{
    return c && c->available;
}

const char *cuda_unavailable_reason(const cuda_t *c)
{
    return !c ? "checkpoint unavailable: no CUDA handle" : c->available ? "" : c->reason;
}

const char *cuda_library(const cuda_t *c)
{
    return c ? c->library : "";
}

int cuda_driver_version(const cuda_t *c)
{
    return c ? c->driver_version : 0;
}

unsigned cuda_live_count(void)
{
    return atomic_load(&g_live);
}

/* Drop one reference (any thread); the last destroys the handle. */
static void cuda_unref(cuda_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    cuda_storage_close(c->storage); /* the pinned bytes go with the driver that made them */
    if (c->lib)
        dlclose(c->lib);
    free(c);
    atomic_fetch_sub(&g_live, 1);
}

void cuda_close(cuda_t *c)
{
    if (!c || c->closing)
        return;
    c->closing = true;
    if (c->calls) { /* operations still in the driver are given up (on_orphaned) */
        drv_calls_t *calls = c->calls;
        c->calls = NULL;
        drv_calls_close(calls);
    }
    cuda_unref(c);
}

/* ---- one operation (any thread) ---- */

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000u;
}

/* The status of a failed driver call and its message "CALL(pid N): NAME (CODE): text". */
static void driver_failed(const cuda_t *c, cuda_result_t *res, const char *call, CUresult rc)
{
    char text[256];
    error_text(c, rc, text, sizeof text);
    res->driver_error = rc;
    res->status = rc == CUDA_ERROR_TIMEOUT         ? CUDA_TIMEOUT
                  : rc == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_NO_MEMORY
                  : rc == CUDA_ERROR_NOT_FOUND     ? CUDA_NOT_FOUND
                  : rc == CUDA_ERROR_ILLEGAL_STATE ? CUDA_BAD_STATE
                                                   : CUDA_FAILED;
    set_text(res->error, sizeof res->error, "%s(pid %d): %s", call, (int)res->pid, text);
}

/* GetState into res->state. When the operation has not failed yet, a failing read fails it. */
static int read_state(const cuda_t *c, cuda_result_t *res)
{
    CUprocessState st = 0;
    CUresult rc = c->api.get_state((int)res->pid, &st);
    if (rc != CUDA_SUCCESS) {
        res->state = CUDA_STATE_UNKNOWN;
        if (res->status == CUDA_OK)
            driver_failed(c, res, "cuCheckpointProcessGetState", rc);
        return -1;
    }
    res->state = st >= CUDA_STATE_RUNNING && st <= CUDA_STATE_FAILED ? (cuda_state_t)st
                                                                       : CUDA_STATE_UNKNOWN;
    return 0;
}

/* Reads the state back; CUDA_BAD_STATE unless it is want. */
static int expect_state(const cuda_t *c, cuda_result_t *res, cuda_state_t want, const char *after)
{
    if (read_state(c, res) < 0)
        return -1;
    if (res->state == want)
        return 0;
    res->status = CUDA_BAD_STATE;
    set_text(res->error, sizeof res->error, "after %s, pid %d is %s (expected %s)", after,
             (int)res->pid, cuda_state_name(res->state), cuda_state_name(want));
    return -1;
}

static int call_lock(const cuda_t *c, cuda_result_t *res, uint64_t timeout_ms)
{
    CUcheckpointLockArgs args;
    memset(&args, 0, sizeof args);
    args.timeoutMs = timeout_ms > UINT_MAX ? UINT_MAX : (unsigned)timeout_ms;
    uint64_t t0 = now_us();
    CUresult rc = c->api.lock((int)res->pid, &args);
    res->lock_us = now_us() - t0;
    if (rc != CUDA_SUCCESS) {
        driver_failed(c, res, "cuCheckpointProcessLock", rc);
        read_state(c, res);
        return -1;
    }
    return expect_state(c, res, CUDA_STATE_LOCKED, "lock");
}

/* One of checkpoint, restore, unlock; the time spent goes to *spent_us. */
static int call_step(const cuda_t *c, cuda_result_t *res, cu_step_fn fn, const char *call,
                     uint64_t *spent_us, cuda_state_t want, const char *after)
{
    CUcheckpointArgs args;
    memset(&args, 0, sizeof args);
    uint64_t t0 = now_us();
    CUresult rc = fn((int)res->pid, &args);
    *spent_us = now_us() - t0;
    if (rc != CUDA_SUCCESS) {
        driver_failed(c, res, call, rc);
        read_state(c, res);
        return -1;
    }
    return expect_state(c, res, want, after);
}

/* A checkpoint or restore through custom storage: the driver maps the memory, vramd copies
 * it (cuda_storage.c) and completes; copy_us covers both. */
static int call_custom(const cuda_t *c, cuda_result_t *res, bool restore)
{
    void *info = NULL;
    CUcheckpointCheckpointArgs ca;
    CUcheckpointRestoreArgs ra;
    memset(&ca, 0, sizeof ca);
    memset(&ra, 0, sizeof ra);
    ca.customStorageInfo_out = &info;
    ra.customStorageInfo_out = &info;
    const char *call = restore ? "cuCheckpointProcessRestore" : "cuCheckpointProcessCheckpoint";
    uint64_t t0 = now_us(), bytes = 0, copy_us = 0;
    CUresult rc = restore ? c->api.restore((int)res->pid, &ra) : c->api.checkpoint((int)res->pid, &ca);
    if (rc != CUDA_SUCCESS) {
        res->copy_us = now_us() - t0;
        driver_failed(c, res, call, rc);
        read_state(c, res);
        return -1;
    }
    char err[CUDA_ERROR_MAX] = "";
    int st = restore ? cuda_storage_load(c->storage, res->pid, info, &bytes, &copy_us, err, sizeof err)
                     : cuda_storage_save(c->storage, res->pid, info, &bytes, &copy_us, err, sizeof err);
    res->copy_us = now_us() - t0;
    res->custom_bytes = bytes;
    if (st != 0) {
        res->status = CUDA_FAILED;
        set_text(res->error, sizeof res->error, "%s (pid %d): %s", call, (int)res->pid, err);
        read_state(c, res);
        return -1;
    }
    return expect_state(c, res, restore ? CUDA_STATE_LOCKED : CUDA_STATE_CHECKPOINTED, restore ? "restore" : "checkpoint");
}

static int call_checkpoint(const cuda_t *c, cuda_result_t *res)
{
    if (cuda_custom_storage(c))
        return call_custom(c, res, false);
    return call_step(c, res, c->api.checkpoint, "cuCheckpointProcessCheckpoint", &res->copy_us,
                     CUDA_STATE_CHECKPOINTED, "checkpoint");
}

static int call_restore(const cuda_t *c, cuda_result_t *res)
{
    if (cuda_custom_storage(c))
        return call_custom(c, res, true);
    return call_step(c, res, c->api.restore, "cuCheckpointProcessRestore", &res->copy_us,
                     CUDA_STATE_LOCKED, "restore");
}

static int call_unlock(const cuda_t *c, cuda_result_t *res)
{
    return call_step(c, res, c->api.unlock, "cuCheckpointProcessUnlock", &res->unlock_us,
                     CUDA_STATE_RUNNING, "unlock");
}

static void cannot_start(cuda_result_t *res, const char *what)
{
    res->status = CUDA_BAD_STATE;
    set_text(res->error, sizeof res->error, "cannot %s pid %d: it is %s", what, (int)res->pid,
             cuda_state_name(res->state));
}

static void do_park(const cuda_t *c, cuda_result_t *res, uint64_t timeout_ms)
{
    if (read_state(c, res) < 0)
        return;
    res->state_before = res->state;
    if (res->state == CUDA_STATE_CHECKPOINTED) {
        res->nothing_to_do = true;
        return;
    }
    if (res->state != CUDA_STATE_RUNNING && res->state != CUDA_STATE_LOCKED) {
        cannot_start(res, "park");
        return;
    }
    if (res->state == CUDA_STATE_RUNNING && call_lock(c, res, timeout_ms) < 0)
        return;
    if (call_checkpoint(c, res) == 0)
        return;
    /* Give a process that is still merely locked its GPU back: a failed park must not leave
     * a server frozen. The checkpoint's error is the one reported. */
    if (res->state == CUDA_STATE_LOCKED) {
        CUcheckpointArgs args;
        memset(&args, 0, sizeof args);
        if (c->api.unlock((int)res->pid, &args) == CUDA_SUCCESS) {
            CUprocessState st = 0;
            if (c->api.get_state((int)res->pid, &st) == CUDA_SUCCESS &&
                st >= CUDA_STATE_RUNNING && st <= CUDA_STATE_FAILED)
                res->state = (cuda_state_t)st;
        }
    }
}

static void do_unpark(const cuda_t *c, cuda_result_t *res)
{
    if (read_state(c, res) < 0)
        return;
    res->state_before = res->state;
    if (res->state == CUDA_STATE_RUNNING) {
        res->nothing_to_do = true;
        return;
    }
    if (res->state != CUDA_STATE_CHECKPOINTED && res->state != CUDA_STATE_LOCKED) {
        cannot_start(res, "unpark");
        return;
    }
    if (res->state == CUDA_STATE_CHECKPOINTED && call_restore(c, res) < 0)
        return;
    call_unlock(c, res);
}

static void run_op(const cuda_t *c, cuda_op_t op, pid_t pid, uint64_t timeout_ms,
                   cuda_result_t *res)
{
    memset(res, 0, sizeof *res);
    res->op = op;
    res->pid = pid;
    res->state_before = CUDA_STATE_UNKNOWN;
    res->state = CUDA_STATE_UNKNOWN;
    uint64_t t0 = now_us();
    if (!c->available) {
        res->status = CUDA_UNAVAILABLE;
        set_text(res->error, sizeof res->error, "%s", c->reason);
        return;
    }
    switch (op) {
    case CUDA_OP_PARK:
        do_park(c, res, timeout_ms);
        break;
    case CUDA_OP_UNPARK:
        do_unpark(c, res);
        break;
    case CUDA_OP_STATE:
        read_state(c, res);
        break;
    case CUDA_OP_LOCK:
        call_lock(c, res, timeout_ms);
        break;
    case CUDA_OP_CHECKPOINT:
        call_checkpoint(c, res);
        break;
    case CUDA_OP_RESTORE:
        call_restore(c, res);
        break;
    case CUDA_OP_UNLOCK:
        call_unlock(c, res);
        break;
    }
    res->total_us = now_us() - t0;
}

static bool op_valid(cuda_op_t op)
{
    return op >= CUDA_OP_PARK && op <= CUDA_OP_UNLOCK;
}

int cuda_run(cuda_t *c, cuda_op_t op, pid_t pid, uint64_t lock_timeout_ms, cuda_result_t *out)
{
    if (!c || !out || c->closing || pid <= 0 || !op_valid(op))
        return -1;
    run_op(c, op, pid, lock_timeout_ms, out);
    return 0;
}

/* ---- on a thread of its own ---- */

static cuda_req_t *of_call(drv_call_t *call)
{
    return (cuda_req_t *)((char *)call - offsetof(cuda_req_t, call));
}

static void on_work(drv_call_t *call)
{
    cuda_req_t *r = of_call(call);
    run_op(r->c, r->op, r->pid, r->timeout_ms, &r->res);
}

static void on_done(drv_call_t *call)
{
    cuda_req_t *r = of_call(call);
    cuda_t *c = r->c;
    if (!c->closing && r->cb)
        r->cb(r->ctx, &r->res);
    free(r);
    cuda_unref(c);
}

/* cuda_close gave the operation up: no callback (its thread, or the loop thread). */
static void on_orphaned(drv_call_t *call)
{
    cuda_req_t *r = of_call(call);
    cuda_t *c = r->c;
    free(r);
    cuda_unref(c);
}

int cuda_start(cuda_t *c, uv_loop_t *loop, cuda_op_t op, pid_t pid, uint64_t lock_timeout_ms,
               cuda_done_cb cb, void *ctx)
{
    if (!c || !loop || !cb || c->closing || pid <= 0 || !op_valid(op) || (c->loop && c->loop != loop))
        return -1;
    if (!c->calls) {
        c->calls = drv_calls_open(loop, CUDA_MAX_IN_FLIGHT);
        if (!c->calls)
            return -1;
        c->loop = loop;
    }
    cuda_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    r->c = c;
    r->op = op;
    r->pid = pid;
    r->timeout_ms = lock_timeout_ms;
    r->cb = cb;
    r->ctx = ctx;
    r->res.op = op;
    r->res.pid = pid;
    r->res.state_before = r->res.state = CUDA_STATE_UNKNOWN;
    r->call.work = on_work;
    r->call.done = on_done;
    r->call.orphaned = on_orphaned;
    atomic_fetch_add(&c->refs, 1);
    if (drv_calls_start(c->calls, &r->call) != 0) {
        atomic_fetch_sub(&c->refs, 1); /* never the last: the caller holds one */
        free(r);
        return -1;
    }
    return 0;
}

int cuda_park(cuda_t *c, uv_loop_t *loop, pid_t pid, uint64_t lock_timeout_ms, cuda_done_cb cb,
              void *ctx)
{
    return cuda_start(c, loop, CUDA_OP_PARK, pid, lock_timeout_ms, cb, ctx);
}

int cuda_unpark(cuda_t *c, uv_loop_t *loop, pid_t pid, cuda_done_cb cb, void *ctx)
{
    return cuda_start(c, loop, CUDA_OP_UNPARK, pid, 0, cb, ctx);
}
