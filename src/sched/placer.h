/*
 * placer: where a model instance should be loaded, and what to evict to make room.
 * A pure decision over the ledger and a list of eviction candidates: no I/O, no state.
 *
 * need: the resident reservation of the new instance plus its first request's reservation.
 * 1. If some allowed GPU has room now, choose the best fit: the GPU whose free memory is
 *    the smallest that still holds `need` (keeps large holes for large models).
 * 2. Otherwise, on each allowed GPU, take that GPU's candidates (idle instances: nothing
 *    running or queued, not pinned) in eviction order — lowest priority first, then least
 *    recently used, then cheapest to reload — until `need` fits. Choose the GPU whose plan
 *    evicts the lowest highest-priority, then the fewest instances, then the least reload
 *    time.
 * 3. If even evicting every candidate on every GPU would not make room, the answer is
 *    PLACER_WAIT (memory is held by running requests or pinned models: try again when
 *    something is released), or PLACER_NEVER when `need` exceeds every allowed GPU's
 *    capacity outright.
 * Evicting only ever frees what the ledger says the candidate holds (its resident entry).
 */
#ifndef VRAMD_SCHED_PLACER_H
#define VRAMD_SCHED_PLACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/ledger.h"

#define PLACER_MAX_EVICT 256

enum placer_result { PLACER_FITS = 0, PLACER_EVICT = 1, PLACER_WAIT = 2, PLACER_NEVER = 3 };

typedef struct placer_candidate {
    const void *instance;
    size_t gpu_pos;
    uint64_t bytes;          /* what evicting it returns (its ledger entry) */
    int priority;            /* its model's priority */
    uint64_t last_used_ms;
    uint64_t reload_cost_ms; /* learned load time */
} placer_candidate_t;

typedef struct placer_plan {
    size_t gpu_pos;
    size_t n_evict;
    size_t evict[PLACER_MAX_EVICT]; /* indexes into the candidates array, in eviction order */
} placer_plan_t;

enum placer_result placer_choose(const ledger_t *l, const bool allowed[LEDGER_MAX_GPUS], uint64_t need,
                                 const void *holder, const placer_candidate_t *cands, size_t n_cands,
                                 placer_plan_t *out);
const char *placer_result_name(enum placer_result r);

#endif
