/*
 * park_tier: the park tiers (SPEC 4.1) as a table. A tier is one way of taking an idle
 * instance's GPU memory to host memory and back while its process lives: sleep/wake by the
 * worker's own hooks (park_sleep.c), pinned copies by the CUDA shim in the worker
 * (park_shim.c), a checkpoint by the CUDA driver (park_checkpoint.c).
 * park_tiers.c holds the ONE ordered array of them (cheapest first, indexed by enum
 * park_tier); every walk of the tiers goes through it: park.c's park_instance (which tier
 * parks now), its fallback after a failed tier and park_wake_found, park_cost.c's
 * park_tier_now (what an eviction would cost), status (obs/status.c: the learned costs).
 * park.c keeps what every tier shares: the host booking before a park, PARKED once NVML
 * shows the memory gone, the escalation, and the way back's GPU booking, tick and failure.
 *
 * Calling convention (park.c calls, the tier answers):
 *   - can(inst): may the tier park inst now (configured, idle, ready, what it needs is
 *     there)? No side effects: park_cost.c asks it for every eviction candidate.
 *   - prepare(inst, reason): called once can() held and before anything is booked: 0 go
 *     on; -1 not this tier now (logged by the tier; the walk takes the next tier); -2 not
 *     now for vramd's own shortage (no other tier; an admin unload is answered 503).
 *     It may fill the tier's private state (the checkpoint's process list).
 *   - park(inst, why): called with the host booked (park.c's park_book: park_tier, the
 *     park fields set). The tier moves inst to PARKING and starts its way out: 0 started;
 *     -1 / -2 it could not (inst is READY again, its host entry released): as prepare.
 *   - resume(inst): called with inst RESUMING and its GPU memory booked back: starts the
 *     way back; returns nothing.
 *   - found(inst): an external server just found at start: true when this tier looks after
 *     it (it may have started its way back: RESUMING), false to ask the next tier. NULL:
 *     the tier never does.
 *   - lost(inst): NULL when the way back is still there for a PARKED inst; else why not (a
 *     config reload took the wake hook away): park.c stops it instead. NULL: never lost.
 *   - back_guess_ms(bytes): the way back of `bytes` before one was measured (park_cost.c).
 *   - leaves(inst): what its park keeps on the GPU (park_cost.c's instance_evict_leaves, for
 *     the scheduler's plan of how much an eviction frees); NULL: nothing.
 *   - After park() returned 0 (and after resume() or a found() that went RESUMING), the
 *     tier reports EXACTLY ONCE through inst->park.park_report (set by park.c before the call),
 *     later, from the loop: PARK_TIER_OUT_DONE / OUT_FAILED for a way out, BACK_DONE /
 *     BACK_FAILED for a way back, with a reason (never NULL, valid during the call); OR it
 *     ends the park itself, without a report, by moving inst out of PARKING/RESUMING with
 *     the lower layers (READY again when vramd's own shortage kept a hook from being made;
 *     stopped, or READY/PARKED with the model failed, when the driver failed). It reports
 *     nothing while inst has left that state meanwhile (stopped, died).
 *   - A tier's private state for an instance (what it must remember between the calls:
 *     the processes it parks, its calls in flight, what they said) is its own struct, which
 *     begins with a park_tier_state_t and sits in inst->park.tier_state[its tier]: the tier
 *     makes it on first use (park_tier_state; NULL when out of memory: the tier cannot
 *     park now, -2), and it is freed through state_free when the instance is freed
 *     (instance.c's last close, park_tier_release), never before: it lives as long as the
 *     instance, so an answer of a call in flight finds it. Nothing else reads it: what
 *     others must know comes through holds and measured.
 *   - state_free(s): frees the tier's state s (and what it owns). NULL: the tier keeps none.
 *   - holds(inst): calls of the tier in flight that will call back with inst (the driver's):
 *     inst is not freed (instance_maybe_free), parked by another tier, woken or stopped for
 *     its park_keep_alive meanwhile. NULL: never. Only a tier with state can hold.
 *   - measured(inst, held, copy_us): what its current way measured, for park.c's log and
 *     learning: the bytes the processes held when the way out began (0: not known; park.c
 *     takes what was booked), the longest copy (microseconds). NULL: nothing (both 0).
 *   - A tier calls only files below it (hooks.c, instance.c, model_state.c, the scheduler,
 *     the driver), never park*.c: what park.c must do next comes through the report.
 *
 * Adding a tier: a value in core/model.h's enum park_tier (before PARK_TIER_COUNT; no field:
 * the tier's state is its own struct, in its own file), its file (park_<name>.c, defining
 * its park_tier_ops_t and its state) declared below, and its row in park_tiers.c's array;
 * status shows learned_<back>_ms and learned_<name>_out_ms for it.
 * Included by src/workers files and by obs/status.c (the names).
 */
#ifndef VRAMD_WORKERS_PARK_TIER_H
#define VRAMD_WORKERS_PARK_TIER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "core/model.h"

#define PARK_PIDS_MAX 8 /* GPU processes of one instance a per-process tier (shim, checkpoint) parks at most */

/* How a tier's way out or back ended (inst->park.park_report's outcome). */
enum park_tier_outcome {
    PARK_TIER_OUT_DONE,    /* the way out answered: the memory is leaving the GPU (still PARKING) */
    PARK_TIER_OUT_FAILED,  /* it did not park (still PARKING): the memory is still needed, take the next tier */
    PARK_TIER_BACK_DONE,   /* the way back answered (RESUMING): READY once NVML shows the memory back */
    PARK_TIER_BACK_FAILED, /* the way back failed (RESUMING) */
};

typedef struct park_tier_ops {
    enum park_tier tier;      /* its index in the table and in model_t.park_stats */
    const char *name;         /* "sleep": logs (tier=), status learned_<name>_out_ms */
    const char *back_name;    /* its way back, "wake": status learned_<back_name>_ms */
    const char *parked_as;    /* an instance's tier in status while parked by it: "sleeping" */
    const char *parked_why;   /* the state change's reason once PARKED: "asleep: memory left the GPU" */
    const char *resumed_why;  /* once READY again: "awake: memory back on the GPU" */
    const char *reclaim_failed; /* PARKING ran out of stop_timeout with too little gone */
    bool (*can)(const instance_t *inst);
    int (*prepare)(instance_t *inst, enum unload_reason reason);
    int (*park)(instance_t *inst, const char *why);
    void (*resume)(instance_t *inst);
    bool (*found)(instance_t *inst);
    const char *(*lost)(const instance_t *inst);
    uint64_t (*back_guess_ms)(uint64_t bytes);
    /* What a park by this tier leaves of inst on the GPU (the shim's: the CUDA context);
     * NULL: nothing (the scheduler counts the whole entry as freed). */
    uint64_t (*leaves)(const instance_t *inst);
    void (*state_free)(park_tier_state_t *s);
    bool (*holds)(const instance_t *inst);
    void (*measured)(const instance_t *inst, uint64_t *held, uint64_t *copy_us);
} park_tier_ops_t;

/* The head of a tier's private state for one instance (see "A tier's private state" above). */
struct park_tier_state {
    const park_tier_ops_t *ops; /* the tier that made it: its state_free and holds */
};

/* The processes a per-process tier (shim, checkpoint) parks and how its current round went:
 * a part of that tier's private state (one tier parks an instance at a time). */
typedef struct park_procs {
    pid_t pids[PARK_PIDS_MAX];
    bool done[PARK_PIDS_MAX]; /* parked (PARKING) / restored (RESUMING) */
    unsigned n;
    bool failed, undoing;     /* a call of the round failed; the round undoes a failed park */
    char error[160];          /* the first failure's words */
    uint64_t measured;        /* what NVML showed its processes holding when the park began */
    uint64_t copy_us;         /* the longest copy of the current park or restore */
} park_procs_t;

/* inst's state of the tier `ops`, made (`size` bytes, zeroed, the head set) when the tier
 * first needs it; NULL when out of memory. */
static inline void *park_tier_state(instance_t *inst, const park_tier_ops_t *ops, size_t size)
{
    park_tier_state_t **slot = &inst->park.tier_state[ops->tier];
    if (!*slot && (*slot = calloc(1, size)) != NULL)
        (*slot)->ops = ops;
    return *slot;
}

/* inst's state of tier t as it is (NULL: the tier has not needed one yet). */
static inline const void *park_tier_state_peek(const instance_t *inst, enum park_tier t)
{
    return inst->park.tier_state[t];
}

/* Whether a tier's calls in flight hold inst (its ops' holds). */
static inline bool park_tier_holds(const instance_t *inst)
{
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        const park_tier_state_t *s = inst->park.tier_state[t];
        if (s && s->ops->holds && s->ops->holds(inst))
            return true;
    }
    return false;
}

/* Free every tier's state of inst (when inst itself is freed: nothing holds it any more). */
static inline void park_tier_release(instance_t *inst)
{
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        park_tier_state_t *s = inst->park.tier_state[t];
        inst->park.tier_state[t] = NULL;
        if (s)
            s->ops->state_free(s);
    }
}

/* The tiers (each in its own file). */
extern const park_tier_ops_t park_tier_sleep;      /* park_sleep.c */
extern const park_tier_ops_t park_tier_shim;       /* park_shim.c */
extern const park_tier_ops_t park_tier_checkpoint; /* park_checkpoint.c */

/* ---- park_tiers.c: the table ---- */
/* The tier of index t (0 <= t < PARK_TIER_COUNT), in walk order; NULL otherwise. */
const park_tier_ops_t *park_tier_ops(enum park_tier t);
/* The first tier at or after `from` in walk order whose can(inst) holds; PARK_NONE when none. */
enum park_tier park_tier_first(const instance_t *inst, enum park_tier from);
/* A tier's name ("sleep", "checkpoint"); "none" for PARK_NONE. */
const char *park_tier_name(enum park_tier t);

/* Its eviction tier now: "resident", "sleeping", "checkpointed" or "unloaded" (/v1/status). */
const char *instance_tier_name(const instance_t *in);

#endif
