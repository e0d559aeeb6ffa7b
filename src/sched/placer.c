/* placer: best-fit placement and eviction plans. See placer.h for the rules. */
#include "sched/placer.h"

#include <string.h>

const char *placer_result_name(enum placer_result r)
{
    static const char *n[] = {"fits", "evict", "wait", "never"};
    return n[r];
}

/* a before b in eviction order? */
static bool evict_before(const placer_candidate_t *a, const placer_candidate_t *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    if (a->last_used_ms != b->last_used_ms)
        return a->last_used_ms < b->last_used_ms;
    return a->reload_cost_ms < b->reload_cost_ms;
}

typedef struct score {
    int max_priority;
    size_t count;
    uint64_t reload_ms;
} score_t;

static bool score_better(const score_t *a, const score_t *b)
{
    if (a->max_priority != b->max_priority)
        return a->max_priority < b->max_priority;
    if (a->count != b->count)
        return a->count < b->count;
    return a->reload_ms < b->reload_ms;
}

enum placer_result placer_choose(const ledger_t *l, const bool allowed[LEDGER_MAX_GPUS], uint64_t need,
                                 const void *holder, const placer_candidate_t *cands, size_t n_cands,
                                 placer_plan_t *out)
{
    memset(out, 0, sizeof *out);
    /* 1. best fit now */
    bool found = false;
    uint64_t best_free = 0;
    bool ever = false;
    for (size_t g = 0; g < l->n_gpus; g++) {
        if (!allowed[g])
            continue;
        if (need <= ledger_capacity(l, g))
            ever = true;
        uint64_t f = ledger_free_for(l, g, holder);
        if (need <= f && (!found || f < best_free)) {
            found = true;
            best_free = f;
            out->gpu_pos = g;
        }
    }
    if (found)
        return PLACER_FITS;
    if (!ever)
        return PLACER_NEVER;
    /* 2. eviction plans, one per GPU */
    bool have_plan = false;
    score_t best;
    memset(&best, 0, sizeof best);
    for (size_t g = 0; g < l->n_gpus; g++) {
        if (!allowed[g])
            continue;
        /* this GPU's candidates in eviction order (insertion sort of indexes) */
        size_t order[PLACER_MAX_EVICT];
        size_t n = 0;
        for (size_t i = 0; i < n_cands && n < PLACER_MAX_EVICT; i++) {
            if (cands[i].gpu_pos != g)
                continue;
            size_t j = n++;
            while (j > 0 && evict_before(&cands[i], &cands[order[j - 1]])) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        uint64_t freed = 0;
        uint64_t f = ledger_free_for(l, g, holder);
        score_t s = {.max_priority = -1};
        size_t k = 0;
        while (k < n && f + freed < need) {
            const placer_candidate_t *c = &cands[order[k]];
            freed += c->bytes;
            if (c->priority > s.max_priority)
                s.max_priority = c->priority;
            s.reload_ms += c->reload_cost_ms;
            k++;
        }
        if (f + freed < need)
            continue; /* not enough even after evicting all idle instances here */
        s.count = k;
        if (!have_plan || score_better(&s, &best)) {
            have_plan = true;
            best = s;
            out->gpu_pos = g;
            out->n_evict = k;
            memcpy(out->evict, order, k * sizeof order[0]);
        }
    }
    return have_plan ? PLACER_EVICT : PLACER_WAIT;
}
