/*
 * placer: where a model instance should be loaded, and what to evict to make room.
 * A pure decision over the ledger and a list of eviction candidates: no I/O, no state, no
 * clock (the caller measures times and passes them in).
 *
 * need: the resident reservation of the new instance plus its first request's reservation.
 * 1. If some allowed GPU has room now, choose the best fit: the GPU whose free memory is
 *    the smallest that still holds `need` (keeps large holes for large models).
 * 2. Otherwise, on each allowed GPU, choose the set of that GPU's candidates (idle
 *    instances: nothing running, not pinned) that frees enough at the least cost:
 *    a. priority first: only candidates of the lowest priorities that can free enough
 *       together are considered (a higher-priority model is never evicted where
 *       lower-priority ones suffice);
 *    b. then the least expected delay: evicting c costs
 *         expected_delay(c) = way_out(c) + return_cost(c) x (queued(c) + p(c)),
 *         p(c) = 1 - exp(-keep_alive_left(c) / gap(c)),
 *       the chance that a request for c arrives before its keep-alive would free it anyway
 *       (arrivals taken as a Poisson process whose mean gap is the model's learned gap
 *       between requests, at least the time since its last one), times what that request
 *       would wait for c to come back (its learned load time today; a parked tier's return
 *       time when one is used), plus way_out(c): how long the waiting request itself waits
 *       for c's memory to leave (a park copies it out first: its learned time; a stop, 0).
 *       A model with no request seen, or whose keep-alive is about to run out, costs nearly
 *       nothing; a busy model that takes 40 s to reload costs a lot;
 *    c. expected delays within 10 % of each other count as equal (learned times are noisy);
 *       then the fewest bytes freed (free only what the waiting work needs), then the
 *       fewest evictions, then the least recently used.
 *    Up to PLACER_EXACT_MAX candidates the set is found exactly (every subset); beyond,
 *    greedily by cost per byte, then any member the rest can do without is dropped.
 *    Choose the GPU whose set has the lowest highest priority, then the least expected
 *    delay, then the fewest bytes, then the fewest evictions.
 * 3. If even evicting every candidate on every GPU would not make room, the answer is
 *    PLACER_WAIT (memory is held by running requests or pinned models: try again when
 *    something is released), or PLACER_NEVER when `need` exceeds every allowed GPU's
 *    capacity outright.
 * Evicting only ever frees what the ledger says the candidate holds (its resident entry).
 */
#ifndef VRAMD_POLICY_PLACER_H
#define VRAMD_POLICY_PLACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/ledger.h"

#define PLACER_MAX_EVICT 256
#define PLACER_EXACT_MAX 8               /* candidates on one GPU searched exactly (2^8 sets) */
#define PLACER_UNKNOWN_RETURN_MS 30000   /* return cost of a model never timed (FIELD: loads 20-90 s) */
#define PLACER_DELAY_TOLERANCE 0.10      /* expected delays this close (relative) count as equal */

enum placer_result { PLACER_FITS = 0, PLACER_EVICT = 1, PLACER_WAIT = 2, PLACER_NEVER = 3 };

typedef struct placer_candidate {
    const void *instance;
    size_t gpu_pos;
    uint64_t bytes;          /* what evicting it returns (its ledger entry) */
    int priority;            /* its model's priority */
    uint64_t last_used_ms;   /* tie-break only: older goes first */
    uint64_t return_cost_ms; /* bringing it back (learned load time today); 0 = unknown */
    uint64_t way_out_ms;     /* until its memory is free once evicted (a park's copy out; 0 = at once) */
    uint64_t gap_ms;         /* expected time between its model's requests; 0 = none seen */
    uint64_t keep_alive_left_ms; /* until its keep-alive would free it anyway */
    uint32_t queued;         /* requests already waiting for it */
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
/* expected_delay (ms) of evicting c, as in rule 2b. */
double placer_expected_delay_ms(const placer_candidate_t *c);

#endif
