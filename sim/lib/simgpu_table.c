/*
 * simgpu_table.c: the time scale, the set's robust mutex, and the GPU slot table (see
 * simgpu.c's top comment for the slot invariants and simgpu_int.h for the layout). It builds
 * on simgpu_proc.c (the clock, who a process is and whether it is alive); both simgpu.c (the
 * public API) and simgpu_park.c (the checkpoint state) build on it; it calls neither.
 */
#include "simgpu.h"
#include "simgpu_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

double simgpu_timescale(void)
{
    const char *v = getenv("SIMGPU_TIMESCALE");
    if (!v || !*v)
        return 1.0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(d) || d <= 0.0)
        return 1.0;
    return d;
}

uint64_t simgpu_scaled_ms(uint64_t simulated_ms)
{
    double v = (double)simulated_ms * simgpu_timescale();
    if (v >= 1.8e19)
        return UINT64_MAX;
    return (uint64_t)(v + 0.5); /* no llround: the .so links without libm */
}

/* ---- locking ---- */

int sg_lock(simgpu_t *s)
{
    int rc = pthread_mutex_lock(&s->hdr->lock);
    if (rc == EOWNERDEAD) {
        /* The previous holder died; the tables are valid at every step (see top). */
        pthread_mutex_consistent(&s->hdr->lock);
        return 0;
    }
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

void sg_unlock(simgpu_t *s)
{
    pthread_mutex_unlock(&s->hdr->lock);
}

/* ---- reaping (caller holds the lock) ---- */

void sg_reap_slots_locked(simgpu_t *s)
{
    uint64_t now = sg_monotonic_ms();
    uint64_t delay = s->hdr->release_delay_real_ms;
    for (int g = 0; g < s->n_gpus; g++) {
        struct gpu_record *gpu = &s->hdr->gpus[g];
        for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
            struct proc_slot *slot = &gpu->slots[i];
            if (!slot->in_use)
                continue;
            /* only a process that can see the slot's process judges it (simgpu_proc.c) */
            if (!slot->dead && sg_ident_check(s, &slot->id) == PROC_GONE) {
                slot->dead_since_ms = now;
                slot->utilization = 0;
                slot->dead = 1;
            }
            if (slot->dead && now - slot->dead_since_ms >= delay)
                slot->in_use = 0;
        }
    }
}

uint64_t sg_used_locked(const struct gpu_record *gpu)
{
    uint64_t used = 0;
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++)
        if (gpu->slots[i].in_use)
            used += gpu->slots[i].bytes;
    return used;
}

struct proc_slot *sg_own_slot_locked(struct gpu_record *gpu, const struct sg_ident *id)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct proc_slot *slot = &gpu->slots[i];
        if (slot->in_use && !slot->dead && sg_ident_same(&slot->id, id))
            return slot;
    }
    return NULL;
}

/* Take an unused slot for process id holding bytes; NULL when the table is full. */
struct proc_slot *sg_take_slot_locked(struct gpu_record *gpu, const struct sg_ident *id,
                                      uint64_t bytes)
{
    for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
        struct proc_slot *slot = &gpu->slots[i];
        if (slot->in_use)
            continue;
        slot->id = *id;
        slot->id.xlate_ms = 0;
        slot->bytes = bytes;
        slot->dead = 0;
        slot->dead_since_ms = 0;
        slot->utilization = 0;
        slot->cgroup[0] = '\0'; /* the caller fills it (a restore does not know it) */
        __atomic_store_n(&slot->in_use, 1, __ATOMIC_RELEASE); /* visible last */
        return slot;
    }
    return NULL;
}

