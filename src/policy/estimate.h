/*
 * estimate: a model's per-request GPU memory, learned per class of request. Pure: no loop,
 * no daemon state; the scheduler (sched/sched_admit.c) feeds it and asks it.
 *
 * A class is (ladder level, size class). The size class comes from the model's declared
 * input size (memory.size_field: resolution, image count, max tokens ...; est_size_class),
 * 0 when the model declares none or the request carries none. Each class keeps:
 *   - its own measured peaks (the last EST_SAMPLES of requests that ran alone); from
 *     EST_MIN_SAMPLES on, its learned estimate is their 95th percentile + 10 %;
 *   - an OOM floor: an out-of-memory answer in that class raises the class (and only it)
 *     to max(estimate x 1.25, estimate + 256 MiB, the need the answer showed), capped at
 *     what the largest allowed GPU can give a request;
 *   - the floor falls again, in a size class (not in the "no size" class 0) whose own peaks
 *     were measured (EST_MIN_SAMPLES): after every EST_DECAY_RUNS successes it halves its
 *     excess over the larger of the measured figure and the class's plain estimate, and is
 *     dropped once that excess is under 2 x EST_FLOOR_MIN. In class 0 the raise stays: its
 *     successes may all be small inputs while the large ones keep running out of memory
 *     (a model that wants its estimates to fall declares memory.size_field).
 * A class never seen takes the learned estimate of the nearest larger size class of its
 * level (an input no larger needs no more memory), else the base the caller gives (the
 * declared per_request, the ladder level's, or the model-wide learned figure).
 *
 * Invariants: the table holds at most EST_CELLS classes; when full, the least recently used
 * class is forgotten (its next request starts from the base again). Every function is
 * bounded by EST_CELLS x EST_SAMPLES steps; no allocation.
 */
#ifndef VRAMD_POLICY_ESTIMATE_H
#define VRAMD_POLICY_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

#define EST_CELLS 16
#define EST_SAMPLES 8
#define EST_MIN_SAMPLES 3
#define EST_DECAY_RUNS 4
#define EST_FLOOR_MIN (64ULL * 1024 * 1024)
#define EST_SIZE_CLASSES 257 /* est_size_class answers 0 .. EST_SIZE_CLASSES - 1 */

typedef struct est_cell {
    bool used;
    unsigned level;
    unsigned size_class;
    uint64_t samples[EST_SAMPLES];
    unsigned n_samples, next_sample;
    uint64_t learned;   /* 0 until EST_MIN_SAMPLES peaks were measured */
    uint64_t oom_floor; /* 0 = none */
    unsigned ok_runs;   /* successes since the floor was last raised or lowered */
    uint64_t ooms;      /* out-of-memory answers in this class */
    uint64_t used_tick; /* for forgetting the least recently used class */
} est_cell_t;

typedef struct est_table {
    est_cell_t cells[EST_CELLS];
    uint64_t tick;
} est_table_t;

/* The learned figure of measured peaks: their 95th percentile + 10 % (0 for none). The
 * scheduler's model-wide figure and each class's use the same rule. At most EST_PEAKS_MAX
 * peaks are read. */
#define EST_PEAKS_MAX 64
uint64_t est_from_peaks(const uint64_t *peaks, unsigned n);

/* The size class of an input size: 0 for 0 (none known), else four classes per power of two
 * (boundaries at 2^k, 1.25, 1.5 and 1.75 x 2^k), so 512, 720 and 1024 fall in three classes. */
unsigned est_size_class(uint64_t size);

/* What a request of (level, size_class) should book. base: the declared figure for its level
 * (or the model-wide learned one); use_learned: the model learns (memory.per_request: learn),
 * else measured peaks are kept but only the OOM floor moves the answer above base. */
uint64_t est_get(const est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned);

/* A peak measured for a successful request of the class that ran alone. */
void est_learn(est_table_t *t, unsigned level, unsigned size_class, uint64_t peak);

/* A request of the class succeeded (measured or not): the OOM floor may fall. base as for
 * est_get. Returns true when the floor changed. */
bool est_success(est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned);

/* A request of the class ran out of memory. need: the bytes the answer says one request
 * wanted beyond the model's resident memory (0 = not said); cap: the most a request can be
 * given next to the model (0 = no cap). Returns the class's new estimate. */
uint64_t est_oom(est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned,
                 uint64_t need, uint64_t cap);

/* The largest estimate any known class of the level books (at least base). */
uint64_t est_level_max(const est_table_t *t, unsigned level, uint64_t base, bool use_learned);

/* The cell of a class, or NULL when it is not known. */
const est_cell_t *est_find(const est_table_t *t, unsigned level, unsigned size_class);

#endif
