/* placer: best-fit placement and eviction plans. See placer.h for the rules. */
#include "policy/placer.h"

#include <math.h>
#include <string.h>

const char *placer_result_name(enum placer_result r)
{
    static const char *const n[] = {"fits", "evict", "wait", "never"};
    return n[r];
}

double placer_expected_delay_ms(const placer_candidate_t *c)
{
    double ret = (double)(c->return_cost_ms ? c->return_cost_ms : PLACER_UNKNOWN_RETURN_MS);
    double p = 0.0;
    if (c->gap_ms > 0 && c->keep_alive_left_ms > 0)
        p = 1.0 - exp(-(double)c->keep_alive_left_ms / (double)c->gap_ms);
    return (double)c->way_out_ms + ret * ((double)c->queued + p);
}

/* One GPU's eviction set and its score (rule 2). */
typedef struct plan_score {
    int max_priority;
    double delay_ms;
    uint64_t bytes;
    size_t count;
    uint64_t oldest_sum; /* sum of last_used_ms: lower = older */
} plan_score_t;

/* Expected delays within PLACER_DELAY_TOLERANCE of each other (or half a millisecond) are
 * taken as equal: they come from learned, noisy times, and a 3 ms difference in two
 * models' load times must not outweigh which of them was used longer ago. */
static int cmp_delay(double a, double b)
{
    double hi = a > b ? a : b;
    double tol = hi * PLACER_DELAY_TOLERANCE;
    if (tol < 0.5)
        tol = 0.5;
    if (a < b - tol)
        return -1;
    return a > b + tol ? 1 : 0;
}

static bool score_better(const plan_score_t *a, const plan_score_t *b)
{
    if (a->max_priority != b->max_priority)
        return a->max_priority < b->max_priority;
    int d = cmp_delay(a->delay_ms, b->delay_ms);
    if (d != 0)
        return d < 0;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes;
    if (a->count != b->count)
        return a->count < b->count;
    return a->oldest_sum < b->oldest_sum;
}

/* One GPU's candidates under the priority cap, with each one's expected delay computed once. */
typedef struct pool {
    size_t idx[PLACER_MAX_EVICT];
    double delay[PLACER_MAX_EVICT];
    size_t n;
} pool_t;

static void score_of(const placer_candidate_t *cands, const pool_t *pl, const size_t *set, size_t n, plan_score_t *s)
{
    memset(s, 0, sizeof *s);
    s->max_priority = -1;
    for (size_t i = 0; i < n; i++) {
        const placer_candidate_t *c = &cands[pl->idx[set[i]]];
        if (c->priority > s->max_priority)
            s->max_priority = c->priority;
        s->delay_ms += pl->delay[set[i]];
        s->bytes += c->bytes;
        s->oldest_sum += c->last_used_ms;
    }
    s->count = n;
}

/* Every subset of the pool (n <= PLACER_EXACT_MAX) that frees at least deficit: the best.
 * out[] gets positions in the pool. */
static bool best_exact(const placer_candidate_t *cands, const pool_t *pl, uint64_t deficit, size_t *out,
                       size_t *n_out, plan_score_t *best)
{
    bool have = false;
    size_t set[PLACER_EXACT_MAX];
    for (uint32_t mask = 1; mask < (1u << pl->n); mask++) {
        size_t k = 0;
        uint64_t freed = 0;
        double delay = 0;
        for (size_t i = 0; i < pl->n; i++)
            if (mask & (1u << i)) {
                set[k++] = i;
                freed += cands[pl->idx[i]].bytes;
                delay += pl->delay[i];
            }
        if (freed < deficit || (have && cmp_delay(delay, best->delay_ms) > 0))
            continue;
        plan_score_t sc;
        score_of(cands, pl, set, k, &sc);
        if (!have || score_better(&sc, best)) {
            have = true;
            *best = sc;
            memcpy(out, set, k * sizeof set[0]);
            *n_out = k;
        }
    }
    return have;
}

/* Many candidates: cheapest delay per byte first until enough, then drop every member the
 * others can do without, dearest first. out[] gets positions in the pool. */
static bool best_greedy(const placer_candidate_t *cands, const pool_t *pl, uint64_t deficit, size_t *out,
                        size_t *n_out, plan_score_t *best)
{
    size_t ord[PLACER_MAX_EVICT];
    double ratio[PLACER_MAX_EVICT];
    for (size_t i = 0; i < pl->n; i++) {
        uint64_t b = cands[pl->idx[i]].bytes;
        ratio[i] = pl->delay[i] / (double)(b ? b : 1);
        size_t j = i; /* insertion sort by delay per byte, then older first */
        while (j > 0) {
            size_t u = ord[j - 1];
            if (ratio[u] < ratio[i] ||
                (ratio[u] == ratio[i] && cands[pl->idx[u]].last_used_ms <= cands[pl->idx[i]].last_used_ms))
                break;
            ord[j] = u;
            j--;
        }
        ord[j] = i;
    }
    size_t k = 0;
    uint64_t freed = 0;
    while (k < pl->n && freed < deficit)
        freed += cands[pl->idx[ord[k++]]].bytes;
    if (freed < deficit)
        return false;
    for (;;) { /* the dearest member the rest can do without goes back */
        size_t drop = k;
        for (size_t i = 0; i < k; i++)
            if (freed - cands[pl->idx[ord[i]]].bytes >= deficit && (drop == k || pl->delay[ord[i]] > pl->delay[ord[drop]]))
                drop = i;
        if (drop == k)
            break;
        freed -= cands[pl->idx[ord[drop]]].bytes;
        memmove(&ord[drop], &ord[drop + 1], (k - drop - 1) * sizeof ord[0]);
        k--;
    }
    memcpy(out, ord, k * sizeof ord[0]);
    *n_out = k;
    score_of(cands, pl, out, k, best);
    return true;
}

/* Rule 2 on one GPU: the candidates there of the lowest priorities that can free deficit
 * together, and the best set among them. out[] gets indexes into cands. */
static bool plan_for_gpu(const placer_candidate_t *cands, size_t n_cands, size_t g, uint64_t deficit, size_t *out,
                         size_t *n_out, plan_score_t *score)
{
    pool_t pl;
    pl.n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n_cands && pl.n < PLACER_MAX_EVICT; i++)
        if (cands[i].gpu_pos == g) {
            pl.idx[pl.n++] = i;
            total += cands[i].bytes;
        }
    if (total < deficit)
        return false;
    /* the lowest priority cap whose candidates can free enough */
    int cap = -1;
    for (;;) {
        int next = -1;
        uint64_t under = 0;
        for (size_t i = 0; i < pl.n; i++) {
            int pr = cands[pl.idx[i]].priority;
            if (pr > cap && (next < 0 || pr < next))
                next = pr;
        }
        cap = next;
        for (size_t i = 0; i < pl.n; i++)
            if (cands[pl.idx[i]].priority <= cap)
                under += cands[pl.idx[i]].bytes;
        if (under >= deficit)
            break;
    }
    size_t m = 0;
    for (size_t i = 0; i < pl.n; i++)
        if (cands[pl.idx[i]].priority <= cap) {
            pl.idx[m] = pl.idx[i];
            pl.delay[m] = placer_expected_delay_ms(&cands[pl.idx[i]]);
            m++;
        }
    pl.n = m;
    size_t pos[PLACER_MAX_EVICT];
    bool ok = pl.n <= PLACER_EXACT_MAX ? best_exact(cands, &pl, deficit, pos, n_out, score)
                                       : best_greedy(cands, &pl, deficit, pos, n_out, score);
    for (size_t i = 0; ok && i < *n_out; i++)
        out[i] = pl.idx[pos[i]];
    return ok;
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
    plan_score_t best;
    memset(&best, 0, sizeof best);
    for (size_t g = 0; g < l->n_gpus; g++) {
        if (!allowed[g])
            continue;
        uint64_t f = ledger_free_for(l, g, holder);
        size_t set[PLACER_MAX_EVICT];
        size_t k = 0;
        plan_score_t s;
        if (!plan_for_gpu(cands, n_cands, g, need - f, set, &k, &s))
            continue; /* not enough even after evicting all idle instances here */
        if (!have_plan || score_better(&s, &best)) {
            have_plan = true;
            best = s;
            out->gpu_pos = g;
            out->n_evict = k;
            memcpy(out->evict, set, k * sizeof set[0]);
        }
    }
    return have_plan ? PLACER_EVICT : PLACER_WAIT;
}
