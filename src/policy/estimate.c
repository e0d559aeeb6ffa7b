/* estimate: per-request memory learned per class of request. See estimate.h for the rule. */
#include "policy/estimate.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define OOM_STEP_MIN (256ULL * 1024 * 1024)

unsigned est_size_class(uint64_t size)
{
    if (size == 0)
        return 0;
    unsigned k = 63u - (unsigned)__builtin_clzll(size);
    unsigned quarter = k >= 2 ? (unsigned)((size >> (k - 2)) & 3u) : k == 1 ? (unsigned)((size & 1u) << 1) : 0u;
    return 1u + 4u * k + quarter;
}

static est_cell_t *find(const est_table_t *t, unsigned level, unsigned size_class)
{
    for (size_t i = 0; i < EST_CELLS; i++) {
        const est_cell_t *c = &t->cells[i];
        if (c->used && c->level == level && c->size_class == size_class)
            return (est_cell_t *)c;
    }
    return NULL;
}

const est_cell_t *est_find(const est_table_t *t, unsigned level, unsigned size_class)
{
    return find(t, level, size_class);
}

/* The class's cell, made (forgetting the least recently used one when the table is full). */
static est_cell_t *touch(est_table_t *t, unsigned level, unsigned size_class)
{
    est_cell_t *c = find(t, level, size_class);
    if (c == NULL) {
        c = &t->cells[0];
        for (size_t i = 0; i < EST_CELLS; i++) {
            est_cell_t *x = &t->cells[i];
            if (!x->used) {
                c = x;
                break;
            }
            if (x->used_tick < c->used_tick)
                c = x;
        }
        memset(c, 0, sizeof *c);
        c->used = true;
        c->level = level;
        c->size_class = size_class;
    }
    c->used_tick = ++t->tick;
    return c;
}

/* What a class's own measurements (or, without them, a larger class's) say; 0 = nothing. */
static uint64_t measured(const est_table_t *t, unsigned level, unsigned size_class)
{
    const est_cell_t *own = find(t, level, size_class);
    if (own && own->learned)
        return own->learned;
    if (size_class == 0)
        return 0;
    const est_cell_t *best = NULL;
    for (size_t i = 0; i < EST_CELLS; i++) {
        const est_cell_t *c = &t->cells[i];
        if (c->used && c->level == level && c->learned && c->size_class > size_class &&
            (best == NULL || c->size_class < best->size_class))
            best = c;
    }
    return best ? best->learned : 0;
}

/* The class's figure without its OOM floor. */
static uint64_t plain(const est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned)
{
    uint64_t m = use_learned ? measured(t, level, size_class) : 0;
    return m ? m : base;
}

uint64_t est_get(const est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned)
{
    uint64_t v = plain(t, level, size_class, base, use_learned);
    const est_cell_t *c = find(t, level, size_class);
    if (c && c->oom_floor > v)
        v = c->oom_floor;
    return v;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t est_from_peaks(const uint64_t *peaks, unsigned n)
{
    uint64_t sorted[EST_PEAKS_MAX];
    if (n == 0)
        return 0;
    if (n > EST_PEAKS_MAX)
        n = EST_PEAKS_MAX;
    memcpy(sorted, peaks, n * sizeof sorted[0]);
    qsort(sorted, n, sizeof sorted[0], cmp_u64);
    size_t idx = ((size_t)n * 95 + 99) / 100;
    uint64_t q = sorted[idx > 0 ? idx - 1 : 0];
    return q + q / 10;
}

void est_learn(est_table_t *t, unsigned level, unsigned size_class, uint64_t peak)
{
    est_cell_t *c = touch(t, level, size_class);
    c->samples[c->next_sample] = peak;
    c->next_sample = (c->next_sample + 1) % EST_SAMPLES;
    if (c->n_samples < EST_SAMPLES)
        c->n_samples++;
    if (c->n_samples < EST_MIN_SAMPLES)
        return;
    c->learned = est_from_peaks(c->samples, c->n_samples);
}

bool est_success(est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned)
{
    est_cell_t *c = touch(t, level, size_class);
    /* only a class of one size is evidence for itself: in the "no size" class, small
     * requests that succeed say nothing of the large ones that ran out of memory */
    if (c->oom_floor == 0 || size_class == 0 || c->learned == 0 || ++c->ok_runs < EST_DECAY_RUNS)
        return false;
    c->ok_runs = 0;
    uint64_t plain_v = plain(t, level, size_class, base, use_learned);
    uint64_t under = c->learned > plain_v ? c->learned : plain_v;
    if (c->oom_floor <= under || c->oom_floor - under < 2 * EST_FLOOR_MIN) {
        /* a measured figure above the plain one (not learning: the declared value) stays
         * as the floor: the class's requests really need it */
        uint64_t keep = under > plain_v ? under : 0;
        bool changed = c->oom_floor != keep;
        c->oom_floor = keep;
        return changed;
    }
    c->oom_floor = under + (c->oom_floor - under) / 2;
    return true;
}

uint64_t est_oom(est_table_t *t, unsigned level, unsigned size_class, uint64_t base, bool use_learned,
                 uint64_t need, uint64_t cap)
{
    uint64_t cur = est_get(t, level, size_class, base, use_learned);
    est_cell_t *c = touch(t, level, size_class);
    c->ooms++;
    c->ok_runs = 0;
    uint64_t raised = cur + cur / 4;
    if (raised < cur + OOM_STEP_MIN)
        raised = cur + OOM_STEP_MIN;
    if (need > raised)
        raised = need;
    if (cap && raised > cap)
        raised = cap > cur ? cap : cur;
    c->oom_floor = raised;
    return raised;
}

uint64_t est_level_max(const est_table_t *t, unsigned level, uint64_t base, bool use_learned)
{
    uint64_t v = base;
    for (size_t i = 0; i < EST_CELLS; i++) {
        const est_cell_t *c = &t->cells[i];
        if (!c->used || c->level != level)
            continue;
        uint64_t e = est_get(t, level, c->size_class, base, use_learned);
        if (e > v)
            v = e;
    }
    return v;
}
