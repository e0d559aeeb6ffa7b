/*
 * simgpu_park.c: the CUDA checkpoint state of simulated processes (see simgpu.h, "CUDA
 * checkpoint state"), kept in the set's park table so that the controller (libcuda-sim.so
 * in vramd or simcuda-checkpoint) and the parked process (simworker) see the same thing.
 *
 * Invariants (all under the set's mutex):
 *   - A process has at most one park slot, keyed by its ident (pid namespace, pid there,
 *     starttime) like the GPU slots. A controller names a process by pid as it sees it: a
 *     host pid on the host side (simcuda-checkpoint --pid HOSTPID, vramd), a pid of its own
 *     namespace elsewhere (sg_ident_is_pid); the host pid is found before (sg_reap_locked).
 *   - CHECKPOINTED: the process holds no live GPU slot; its bytes are in parked[]. Every
 *     other state: parked[] is all zero, except during a restore (op RESTORING), when the
 *     bytes are both on the GPUs (allocated at the start) and in parked[] (freed at the end).
 *   - At most one operation (checkpoint, restore) runs per process (op != NONE); the
 *     mutex is NOT held while its copy time passes, so other processes go on meanwhile.
 *   - A slot that is RUNNING, not registered (gate 0), with nothing parked and no request,
 *     is freed: the table only holds processes with something to say.
 *   - A lock request (lock_request != 0) exists only while its caller waits; the caller
 *     clears it on success (state LOCKED) and on timeout (state stays RUNNING).
 *   - The process side never reaps and never reads /proc (simgpu_gate_poll is called every
 *     few milliseconds by every simworker); the controller side reaps like every other call.
 *
 * Return convention (as simgpu.h): 0 ok, -1 with errno.
 */
#include "simgpu.h"
#include "simgpu_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOCK_POLL_MS 1 /* how often a waiting lock looks for the process's answer */

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *simgpu_cuda_state_name(int state)
{
    static const char *names[] = {"running", "locked", "checkpointed", "failed"};
    return state >= 0 && state < 4 ? names[state] : "unknown";
}

const char *simgpu_park_op_name(int op)
{
    return op == SIMGPU_OP_CHECKPOINTING ? "checkpointing"
           : op == SIMGPU_OP_RESTORING   ? "restoring"
                                         : "";
}

/* ---- bandwidth ---- */

int simgpu_parse_bandwidth(const char *text, uint64_t *out)
{
    if (!text || !*text || !isdigit((unsigned char)text[0]))
        return -1;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !(v > 0))
        return -1;
    double unit = 1.0;
    const char *p = end;
    if (*p == 'K' || *p == 'M' || *p == 'G' || *p == 'T') {
        int power = *p == 'K' ? 1 : *p == 'M' ? 2 : *p == 'G' ? 3 : 4;
        p++;
        double base = 1000.0;
        if (*p == 'i') {
            base = 1024.0;
            p++;
        }
        for (int i = 0; i < power; i++)
            unit *= base;
    }
    if (*p == 'B')
        p++;
    if (strcmp(p, "/s") == 0)
        p += 2;
    if (*p != '\0')
        return -1;
    double bytes = v * unit;
    if (bytes < 1.0 || bytes > 1.8e19)
        return -1;
    *out = (uint64_t)bytes;
    return 0;
}

uint64_t sg_default_bw(const char *env, uint64_t dflt)
{
    uint64_t bw = 0;
    const char *v = getenv(env);
    if (v && simgpu_parse_bandwidth(v, &bw) == 0 && bw > 0)
        return bw;
    return dflt;
}

uint64_t sg_default_pcie_bw(void) { return sg_default_bw("SIMGPU_PCIE_BW", SIMGPU_DEFAULT_PCIE_BW); }

uint64_t simgpu_checkpoint_bandwidth(simgpu_t *s, bool out)
{
    if (!s)
        return 0;
    uint64_t bw = out ? s->hdr->checkpoint_bw : s->hdr->restore_bw; /* immutable after creation */
    return bw ? bw : out ? SIMGPU_DEFAULT_CHECKPOINT_BW : SIMGPU_DEFAULT_RESTORE_BW;
}

uint64_t simgpu_checkpoint_ms(simgpu_t *s, uint64_t bytes, bool out)
{
    double real = (double)bytes / (double)simgpu_checkpoint_bandwidth(s, out) * 1000.0 * simgpu_timescale();
    return real >= 1.8e19 ? UINT64_MAX : (uint64_t)(real + 0.5);
}

uint64_t simgpu_pcie_bandwidth(simgpu_t *s)
{
    if (!s)
        return 0;
    uint64_t bw = s->hdr->pcie_bw; /* immutable after creation */
    return bw ? bw : SIMGPU_DEFAULT_PCIE_BW;
}

uint64_t simgpu_copy_ms(simgpu_t *s, uint64_t bytes)
{
    double sim_ms = (double)bytes / (double)simgpu_pcie_bandwidth(s) * 1000.0;
    double real = sim_ms * simgpu_timescale();
    if (real >= 1.8e19)
        return UINT64_MAX;
    return (uint64_t)(real + 0.5);
}

/* ---- the table (caller holds the lock) ---- */

/* The park slot of process id. */
static struct park_slot *find_park(simgpu_t *s, const struct sg_ident *id)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct park_slot *p = &s->hdr->parks[i];
        if (p->in_use && sg_ident_same(&p->id, id))
            return p;
    }
    return NULL;
}

/* The park slot of the process the caller calls pid. */
static struct park_slot *find_park_pid(simgpu_t *s, pid_t pid)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct park_slot *p = &s->hdr->parks[i];
        if (p->in_use && sg_ident_is_pid(s, &p->id, pid))
            return p;
    }
    return NULL;
}

static struct park_slot *take_park(simgpu_t *s, const struct sg_ident *id)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct park_slot *p = &s->hdr->parks[i];
        if (p->in_use)
            continue;
        memset(p, 0, sizeof *p);
        p->id = *id;
        p->id.xlate_ms = 0;
        p->state = SIMGPU_CUDA_RUNNING;
        __atomic_store_n(&p->in_use, 1, __ATOMIC_RELEASE);
        return p;
    }
    return NULL;
}

static uint64_t parked_total(const struct park_slot *p)
{
    uint64_t total = 0;
    for (int g = 0; g < SIMGPU_MAX_GPUS; g++)
        total += p->parked[g];
    return total;
}

/* Frees a slot that has nothing to say any more (see the invariants). */
static void park_maybe_free(struct park_slot *p)
{
    if (p->state == SIMGPU_CUDA_RUNNING && !p->gate && !p->lock_request && p->op == SIMGPU_OP_NONE &&
        parked_total(p) == 0)
        p->in_use = 0;
}

/* Whether the process the caller calls pid has a live GPU slot on some GPU (a CUDA process
 * of this set); its ident into *out. */
static bool gpu_ident_of(simgpu_t *s, pid_t pid, struct sg_ident *out)
{
    for (int g = 0; g < s->n_gpus; g++) {
        const struct gpu_record *gpu = &s->hdr->gpus[g];
        for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
            const struct proc_slot *slot = &gpu->slots[i];
            if (slot->in_use && !slot->dead && sg_ident_is_pid(s, &slot->id, pid)) {
                *out = slot->id;
                return true;
            }
        }
    }
    return false;
}

/* The park slot of pid, made when pid holds memory here but has none yet (make). NULL with
 * errno ESRCH (no such process here) or ENOSPC. */
static struct park_slot *park_of(simgpu_t *s, pid_t pid, bool make)
{
    struct park_slot *p = find_park_pid(s, pid);
    if (p)
        return p;
    struct sg_ident id;
    if (!gpu_ident_of(s, pid, &id) || !make) {
        errno = ESRCH;
        return NULL;
    }
    p = take_park(s, &id);
    if (!p)
        errno = ENOSPC;
    return p;
}

/* Whether process id holds a live GPU slot: sg_reap_locked has just checked those processes
 * (as far as the caller can judge them), so no second /proc read is needed for them. */
static bool live_on_gpu(simgpu_t *s, const struct sg_ident *id)
{
    for (int g = 0; g < s->n_gpus; g++)
        if (sg_own_slot_locked(&s->hdr->gpus[g], id))
            return true;
    return false;
}

static void park_reap_locked(simgpu_t *s)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct park_slot *p = &s->hdr->parks[i];
        if (!p->in_use)
            continue;
        if (!live_on_gpu(s, &p->id) && sg_ident_check(s, &p->id) == PROC_GONE) {
            p->in_use = 0; /* its host memory goes with it */
            continue;
        }
        if (p->op != SIMGPU_OP_NONE && sg_ident_check(s, &p->op_id) == PROC_GONE) {
            if (p->op == SIMGPU_OP_RESTORING) {
                memset(p->parked, 0, sizeof p->parked); /* already on the GPUs */
                p->state = SIMGPU_CUDA_LOCKED;
            }
            p->op = SIMGPU_OP_NONE;
        }
    }
}

bool sg_park_blocks_locked(simgpu_t *s, const struct sg_ident *id)
{
    const struct park_slot *p = find_park(s, id);
    return p && p->state != SIMGPU_CUDA_RUNNING;
}

/* ---- the parked process's side ---- */

static struct park_slot *own_park(simgpu_t *s)
{
    if (s->park_index < 0 || s->own.ns_pid != (int32_t)getpid())
        return NULL;
    struct park_slot *p = &s->hdr->parks[s->park_index];
    if (!p->in_use || !sg_ident_same(&p->id, &s->own))
        return NULL;
    return p;
}

int simgpu_gate_register(simgpu_t *s)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    struct sg_ident me;
    sg_self_ident(s, &me);
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    sg_ident_learn_locked(s, &me); /* a process of another namespace: its host pid if known */
    struct park_slot *p = find_park(s, &me);
    if (!p)
        p = take_park(s, &me);
    if (!p) {
        sg_unlock(s);
        errno = ENOSPC;
        return -1;
    }
    p->gate = 1;
    s->park_index = (int)(p - s->hdr->parks);
    s->own = me;
    sg_unlock(s);
    return 0;
}

int simgpu_gate_poll(simgpu_t *s, uint32_t *seq)
{
    if (!s || !seq) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    const struct park_slot *p = own_park(s);
    int hold = p && (p->state != SIMGPU_CUDA_RUNNING || p->lock_request != 0);
    *seq = p ? p->lock_request : 0;
    sg_unlock(s);
    return hold;
}

int simgpu_gate_ack(simgpu_t *s, uint32_t seq)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    struct park_slot *p = own_park(s);
    if (p && seq && p->lock_request == seq)
        p->acked = seq;
    sg_unlock(s);
    return 0;
}

/* ---- the controller's side ---- */

int simgpu_cuda_state(simgpu_t *s, pid_t pid, int *state)
{
    if (!s || !state || pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    const struct park_slot *p = park_of(s, pid, false);
    struct sg_ident id;
    bool found = p != NULL || gpu_ident_of(s, pid, &id);
    if (found)
        *state = p ? (int)p->state : SIMGPU_CUDA_RUNNING;
    sg_unlock(s);
    if (!found) {
        errno = ESRCH;
        return -1;
    }
    return 0;
}

/* Waits for the registered process to stop for request seq. 0 when it did (state LOCKED),
 * -1 ETIMEDOUT (request withdrawn, still RUNNING) or ESRCH (it died). */
static int lock_wait(simgpu_t *s, const struct sg_ident *id, uint32_t seq, uint64_t timeout_ms)
{
    uint64_t started = monotonic_us();
    for (;;) {
        if (sg_lock(s) < 0)
            return -1;
        sg_reap_locked(s);
        struct park_slot *p = find_park(s, id);
        if (!p || p->lock_request != seq) {
            sg_unlock(s);
            errno = ESRCH;
            return -1;
        }
        bool timed_out = timeout_ms && monotonic_us() - started >= timeout_ms * 1000u;
        if (p->acked == seq || timed_out) {
            bool ok = p->acked == seq;
            p->lock_request = 0;
            if (ok)
                p->state = SIMGPU_CUDA_LOCKED;
            sg_unlock(s);
            if (!ok)
                errno = ETIMEDOUT;
            return ok ? 0 : -1;
        }
        sg_unlock(s);
        sleep_ms(LOCK_POLL_MS);
    }
}

int simgpu_cuda_lock(simgpu_t *s, pid_t pid, uint64_t timeout_ms)
{
    if (!s || pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    struct park_slot *p = park_of(s, pid, true);
    if (!p) {
        int e = errno;
        sg_unlock(s);
        errno = e;
        return -1;
    }
    if (p->state != SIMGPU_CUDA_RUNNING || p->lock_request || p->op != SIMGPU_OP_NONE) {
        sg_unlock(s);
        errno = EBUSY;
        return -1;
    }
    if (!p->gate) { /* nothing runs in it that could be stopped: locked at once */
        p->state = SIMGPU_CUDA_LOCKED;
        sg_unlock(s);
        return 0;
    }
    uint32_t seq = ++s->hdr->park_seq;
    if (seq == 0)
        seq = ++s->hdr->park_seq;
    p->lock_request = seq;
    struct sg_ident id = p->id;
    sg_unlock(s);
    return lock_wait(s, &id, seq, timeout_ms);
}

/* Starts op on pid, which must be in state `need`; returns its slot's identity. */
static int op_begin(simgpu_t *s, pid_t pid, int need, int op, struct sg_ident *id)
{
    struct park_slot *p = park_of(s, pid, false);
    if (!p) {
        bool found = gpu_ident_of(s, pid, id);
        errno = found ? EBUSY : ESRCH; /* a process of the set that is merely RUNNING */
        return -1;
    }
    if ((int)p->state != need || p->op != SIMGPU_OP_NONE) {
        errno = EBUSY;
        return -1;
    }
    p->op = (uint32_t)op;
    sg_self_ident(s, &p->op_id);
    *id = p->id;
    return 0;
}

/* The slot of process id still running op, after the copy time; NULL with ESRCH when the
 * process died (or the operation was ended for it) meanwhile. */
static struct park_slot *op_resume(simgpu_t *s, const struct sg_ident *id, int op)
{
    sg_reap_locked(s);
    struct park_slot *p = find_park(s, id);
    if (!p || (int)p->op != op || p->op_id.ns_pid != (int32_t)getpid() ||
        p->op_id.ns_ino != s->self_ns_ino) {
        errno = ESRCH;
        return NULL;
    }
    return p;
}

int simgpu_cuda_checkpoint_begin(simgpu_t *s, pid_t pid, uint64_t bytes[SIMGPU_MAX_GPUS])
{
    if (!s || pid <= 0 || !bytes) {
        errno = EINVAL;
        return -1;
    }
    struct sg_ident id;
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    if (op_begin(s, pid, SIMGPU_CUDA_LOCKED, SIMGPU_OP_CHECKPOINTING, &id) < 0) {
        int e = errno;
        sg_unlock(s);
        errno = e;
        return -1;
    }
    for (int g = 0; g < SIMGPU_MAX_GPUS; g++) {
        const struct proc_slot *slot = g < s->n_gpus ? sg_own_slot_locked(&s->hdr->gpus[g], &id) : NULL;
        bytes[g] = slot ? slot->bytes : 0;
    }
    sg_unlock(s);
    return 0;
}

/* The park slot of pid whose operation op this process runs (lock held); NULL, ESRCH. */
static struct park_slot *own_op(simgpu_t *s, pid_t pid, int op)
{
    struct park_slot *p = park_of(s, pid, false);
    if (!p) {
        errno = ESRCH;
        return NULL;
    }
    struct sg_ident id = p->id;
    return op_resume(s, &id, op);
}

int simgpu_cuda_checkpoint_end(simgpu_t *s, pid_t pid)
{
    if (!s || pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    struct park_slot *p = own_op(s, pid, SIMGPU_OP_CHECKPOINTING);
    if (!p) {
        sg_unlock(s);
        errno = ESRCH;
        return -1;
    }
    for (int g = 0; g < s->n_gpus; g++) {
        struct proc_slot *slot = sg_own_slot_locked(&s->hdr->gpus[g], &p->id);
        if (!slot)
            continue;
        p->parked[g] += slot->bytes;
        slot->utilization = 0;
        slot->in_use = 0;
    }
    p->state = SIMGPU_CUDA_CHECKPOINTED;
    p->op = SIMGPU_OP_NONE;
    sg_unlock(s);
    return 0;
}

int simgpu_cuda_checkpoint(simgpu_t *s, pid_t pid)
{
    uint64_t bytes[SIMGPU_MAX_GPUS], total = 0;
    if (simgpu_cuda_checkpoint_begin(s, pid, bytes) < 0)
        return -1;
    for (int g = 0; g < SIMGPU_MAX_GPUS; g++)
        total += bytes[g];
    sleep_ms(simgpu_checkpoint_ms(s, total, true)); /* the memory is on the GPU until the copy is done */
    return simgpu_cuda_checkpoint_end(s, pid);
}

/* Puts the parked bytes of p back on their GPUs, or nothing at all: ENOMEM when one does
 * not fit (or its process table is full). */
static int restore_allocate(simgpu_t *s, struct park_slot *p)
{
    for (int g = 0; g < s->n_gpus; g++) {
        const struct gpu_record *gpu = &s->hdr->gpus[g];
        uint64_t used = sg_used_locked(gpu);
        if (p->parked[g] && (p->parked[g] > gpu->total || used > gpu->total - p->parked[g])) {
            errno = ENOMEM;
            return -1;
        }
    }
    struct proc_slot *taken[SIMGPU_MAX_GPUS] = {NULL};
    for (int g = 0; g < s->n_gpus; g++) {
        if (!p->parked[g])
            continue;
        taken[g] = sg_take_slot_locked(&s->hdr->gpus[g], &p->id, p->parked[g]);
        if (!taken[g]) {
            for (int k = 0; k < g; k++)
                if (taken[k])
                    taken[k]->in_use = 0;
            errno = ENOMEM;
            return -1;
        }
    }
    return 0;
}

int simgpu_cuda_restore_begin(simgpu_t *s, pid_t pid, uint64_t bytes[SIMGPU_MAX_GPUS])
{
    if (!s || pid <= 0 || !bytes) {
        errno = EINVAL;
        return -1;
    }
    struct sg_ident id;
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    if (op_begin(s, pid, SIMGPU_CUDA_CHECKPOINTED, SIMGPU_OP_RESTORING, &id) < 0) {
        int e = errno;
        sg_unlock(s);
        errno = e;
        return -1;
    }
    struct park_slot *p = find_park(s, &id);
    if (restore_allocate(s, p) < 0) {
        p->op = SIMGPU_OP_NONE;
        sg_unlock(s);
        errno = ENOMEM;
        return -1;
    }
    for (int g = 0; g < SIMGPU_MAX_GPUS; g++)
        bytes[g] = g < s->n_gpus ? p->parked[g] : 0;
    sg_unlock(s);
    return 0;
}

int simgpu_cuda_restore_end(simgpu_t *s, pid_t pid)
{
    if (!s || pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    struct park_slot *p = own_op(s, pid, SIMGPU_OP_RESTORING);
    if (!p) {
        sg_unlock(s);
        errno = ESRCH;
        return -1;
    }
    memset(p->parked, 0, sizeof p->parked);
    p->state = SIMGPU_CUDA_LOCKED;
    p->op = SIMGPU_OP_NONE;
    sg_unlock(s);
    return 0;
}

int simgpu_cuda_restore(simgpu_t *s, pid_t pid)
{
    uint64_t bytes[SIMGPU_MAX_GPUS], total = 0;
    if (simgpu_cuda_restore_begin(s, pid, bytes) < 0)
        return -1;
    for (int g = 0; g < SIMGPU_MAX_GPUS; g++)
        total += bytes[g];
    sleep_ms(simgpu_checkpoint_ms(s, total, false)); /* on the GPU already; the host copy is freed at the end */
    return simgpu_cuda_restore_end(s, pid);
}

int simgpu_cuda_unlock(simgpu_t *s, pid_t pid)
{
    if (!s || pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    struct park_slot *p = park_of(s, pid, false);
    if (!p) {
        struct sg_ident id;
        bool found = gpu_ident_of(s, pid, &id);
        sg_unlock(s);
        errno = found ? EBUSY : ESRCH;
        return -1;
    }
    if (p->state != SIMGPU_CUDA_LOCKED || p->op != SIMGPU_OP_NONE) {
        sg_unlock(s);
        errno = EBUSY;
        return -1;
    }
    p->state = SIMGPU_CUDA_RUNNING;
    park_maybe_free(p);
    sg_unlock(s);
    return 0;
}

int simgpu_park_list(simgpu_t *s, simgpu_park_info_t *out, size_t cap, size_t *n)
{
    if (!s || !n || (cap > 0 && !out)) {
        errno = EINVAL;
        return -1;
    }
    if (sg_lock(s) < 0)
        return -1;
    sg_reap_locked(s);
    size_t count = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        const struct park_slot *p = &s->hdr->parks[i];
        if (!p->in_use)
            continue;
        if (count < cap) {
            simgpu_park_info_t *o = &out[count];
            memset(o, 0, sizeof *o);
            o->pid = sg_ident_host_pid(&p->id);
            o->other_ns = p->id.ns_ino != s->hdr->creator_ns_ino;
            o->ns_pid = p->id.ns_pid;
            o->state = (int)p->state;
            o->op = (int)p->op;
            o->gate = p->gate != 0;
            for (int g = 0; g < s->n_gpus; g++)
                o->parked[g] = p->parked[g];
            o->parked_total = parked_total(p);
        }
        count++;
    }
    sg_unlock(s);
    *n = count;
    return 0;
}

void sg_reap_locked(simgpu_t *s)
{
    sg_translate_locked(s); /* host side, only when some process has no host pid yet */
    sg_reap_slots_locked(s);
    park_reap_locked(s);
}
