/*
 * scheduler_int.h: what the scheduler's files share, and nothing the rest of vramd may use
 * (its API is scheduler.h). The rules it keeps (ledger entries, foreign usage, learning,
 * claims) are written in scheduler.h.
 *
 * The files, lowest first; calls go one way only (down), which `make lint` checks:
 *   scheduler.c       the shared state, estimates and fit queries, cached-memory figures,
 *                     pumping, status
 *   sched_book.c      the booking verbs: the other modules' only writes to the ledger
 *                                                                  -> scheduler.c
 *   sched_turn.c      whose turn a card is: swaps due (deadline, priority, max_wait), the
 *                     waiting model worth most, claims' cutoffs, swap counters -> scheduler.c
 *   sched_admit.c     asking idle instances to clear caches, admission, claims released,
 *                     learning from finished requests      -> sched_turn.c, scheduler.c
 *   sched_evict.c     placement, eviction, claims for starving work and due swaps
 *                                                     -> sched_turn.c, sched_admit.c, scheduler.c
 *   sched_snapshot.c  NVML: start and stop, foreign usage, reclaim, learning from
 *                     measurements, recycle on growth              -> sched_admit.c, scheduler.c
 *   sched_idle_model.c  gpu.idle_model: a card idle long enough brings its model back
 *                                                                  -> scheduler.c
 *   sched_status.c    /v1/status's GPUs: figures, ledger, claim, swaps, idle model
 *                                      -> sched_turn.c, sched_idle_model.c, scheduler.c
 *   sched_queue.c     the visible queue: positions and expected times (reads only)
 *                                                                  -> sched_turn.c, scheduler.c
 *
 * All of it runs on the loop thread only; NVML is read on the thread pool by gpu/nvml.c
 * and arrives through the snapshot callback in sched_snapshot.c.
 */
#ifndef VRAMD_SCHED_SCHEDULER_INT_H
#define VRAMD_SCHED_SCHEDULER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gpu/gpu.h"
#include "policy/ledger.h"
#include "policy/placer.h"
#include "sched/scheduler.h"

/* an idle instance is asked to clear its cache at most this often */
#define SCHED_CLEAR_CACHE_MIN_INTERVAL_MS 2000
/* cached memory worth clearing: less is not asked back (sched_clear_caches) nor waited for */
#define SCHED_YIELD_MIN_BYTES (64ULL * 1024 * 1024)
/* memory.cancelled_hold auto: before the model's run time is learned, and the most */
#define CANCELLED_HOLD_UNLEARNED_MS (60ULL * 1000)
#define CANCELLED_HOLD_MAX_MS (10ULL * 60 * 1000)

/* The scheduler's state (one, defined in scheduler.c, set up by sched_init). */
typedef struct sched_state {
    core_t *core;
    gpu_t *gpu;
    bool ok;               /* the last NVML read succeeded */
    char error[400];       /* why not, when !ok */
    ledger_t ledger;
    gpu_snapshot_t *snap;  /* last good snapshot (heap: it is large) */
    uint64_t fresh_ms;     /* loop clock when the last good snapshot's read began; 0: none */
    bool stale_noted;      /* the stale state was logged (gpu_stale), not yet its end */
    bool stale_timer_on;   /* stale_timer initialised (closed by sched_shutdown) */
    uv_timer_t stale_timer; /* fires when the last good snapshot turns stale (for the log) */
    placer_candidate_t cands[PLACER_MAX_EVICT]; /* eviction candidates (scratch) */
    uint64_t foreign_raw[LEDGER_MAX_GPUS]; /* last raw reading: a drop needs two in a row */
    uint64_t last_identity_refresh_ms; /* instances asked to refresh their identity (sched_snapshot.c) */
    sched_actions_t actions; /* what the scheduler has the supervisor do */
    /* swaps (sched_turn.c): evictions for another model's load, per GPU position and reason;
     * the ms from a swap's first eviction to the newcomer READY; the swap under way (its
     * model is compared, never followed: it may be gone) */
    uint64_t swaps[LEDGER_MAX_GPUS][SCHED_SWAP_REASON_COUNT];
    uint64_t swap_ms[LEDGER_MAX_GPUS];
    uint64_t swap_since_ms[LEDGER_MAX_GPUS];
    const void *swap_for[LEDGER_MAX_GPUS];
    uint64_t idle_since_ms[LEDGER_MAX_GPUS]; /* sched_idle_model.c: the card idle since (0 = busy) */
} sched_state_t;

extern sched_state_t sched_state;

/* scheduler.c */
/* Does m need GPU memory (sched_model_uses_gpu of its config)? */
bool sched_uses_gpu(const model_t *m);
/* out[pos]: may m run on the GPU at ledger position pos (its gpus list, or all)? */
void sched_allowed_mask(const model_t *m, bool out[LEDGER_MAX_GPUS]);
/* The largest total - headroom of the GPUs m may use (0 before NVML answered). */
uint64_t sched_largest_room(const model_t *m);
/* Cached memory the instance really holds (measured, beyond its floor): what it can lend
 * to its next requests. */
uint64_t sched_instance_cache(const instance_t *inst);

/* sched_turn.c (the swap-aware order; its rules are written at its top) */
/* m's learned way in: its park tier's way back when parked, else its load time (0 = not known). */
uint64_t sched_way_in_ms(const model_t *m);
/* The cutoff of claimant's claim (model_t.claim_cutoff_ms, else its oldest queued request):
 * the models in its way go ahead with what they queued no later than this. */
uint64_t sched_claim_cutoff_ms(const model_t *claimant);
/* Would room for need on pos take memory a model with work (running or queued) holds? */
bool sched_busy_in_way(const model_t *m, size_t pos, uint64_t need);
/* Is m's swap due on pos (deadline, priority, bound), and why; SCHED_SWAP_NONE when not. */
enum sched_swap_reason sched_swap_due(const model_t *m, size_t pos, uint64_t now);
/* The cutoff a claim made for why at now gets (0: the claimant's oldest request). */
uint64_t sched_swap_cutoff_ms(enum sched_swap_reason why, uint64_t now);
/* Does a's turn on pos come before b's (worth more, or as much and its name first)? */
bool sched_turn_before(const model_t *a, const model_t *b, size_t pos, uint64_t now);
/* Does m wait on pos for another waiting model worth more (its turn is not yet)? */
bool sched_turn_waits(const model_t *m, size_t pos);
/* The allowed GPU with room for need where the work in the way is least; false: none. */
bool sched_turn_gpu(const model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, size_t *pos);
/* Evictions for for_m's way in started on pos (counted; its time runs until it is READY). */
void sched_turn_swapped(size_t pos, const model_t *for_m, enum sched_swap_reason why);

/* sched_turn.c, sched_idle_model.c: a GPU's turn figures for /v1/status (sched_status.c; cJSON *gpu_obj):
 * its claim (model, reason, bytes; null), swaps by reason and their seconds; its idle
 * model (null) and how long the card has been idle */
void sched_turn_status_json(size_t pos, void *gpu_obj);
void sched_idle_model_status_json(size_t pos, void *gpu_obj);

/* sched_admit.c */
/* Does r, younger than the claim on its instance's GPU, wait so that its instance's cache
 * can be cleared for the claimant? Yes when the cache would fund r but r would leave at
 * least SCHED_YIELD_MIN_BYTES of it unused and locked in a busy instance, the model has a
 * clear_cache hook, and that rest is what the claimant lacks. */
bool sched_yields_to_claim(const request_t *r, const instance_t *inst);
/* Ask idle instances on GPU pos (not of model except) with a clear_cache hook to give
 * their cached memory back. */
void sched_clear_caches(size_t pos, const model_t *except);

#endif
