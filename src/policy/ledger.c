/* ledger: per-GPU memory book. The definitions and invariants are in ledger.h. */
#include "policy/ledger.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#ifdef VRAMD_DEBUG
#define LEDGER_ASSERT_OK(l)                                                                         \
    do {                                                                                            \
        char why_[256];                                                                             \
        if (ledger_check((l), why_, sizeof why_) != 0) {                                            \
            fprintf(stderr, "ledger invariant broken: %s\n", why_);                                 \
            assert(0);                                                                              \
        }                                                                                           \
    } while (0)
#else
#define LEDGER_ASSERT_OK(l) ((void)(l))
#endif

void ledger_init(ledger_t *l)
{
    memset(l, 0, sizeof *l);
    for (size_t i = 0; i < LEDGER_MAX_GPUS; i++) {
        list_init(&l->gpus[i].entries);
        l->gpus[i].index = -1;
    }
}

void ledger_set_gpu(ledger_t *l, size_t pos, int nvml_index, uint64_t total, uint64_t headroom)
{
    if (pos >= LEDGER_MAX_GPUS)
        return;
    ledger_gpu_t *g = &l->gpus[pos];
    g->index = nvml_index;
    g->total = total;
    g->headroom = headroom;
    if (pos >= l->n_gpus)
        l->n_gpus = pos + 1;
}

void ledger_set_foreign(ledger_t *l, size_t pos, uint64_t foreign)
{
    if (pos < l->n_gpus)
        l->gpus[pos].foreign = foreign;
}

void ledger_entry_init(ledger_entry_t *e)
{
    list_init(&e->link);
    e->gpu = -1;
    e->kind = LEDGER_RESIDENT;
    e->bytes = 0;
    e->owner = NULL;
    e->holder = NULL;
}

uint64_t ledger_capacity(const ledger_t *l, size_t pos)
{
    if (pos >= l->n_gpus)
        return 0;
    const ledger_gpu_t *g = &l->gpus[pos];
    uint64_t taken = g->headroom + g->foreign;
    return g->total > taken ? g->total - taken : 0;
}

uint64_t ledger_free_for(const ledger_t *l, size_t pos, const void *holder)
{
    if (pos >= l->n_gpus)
        return 0;
    const ledger_gpu_t *g = &l->gpus[pos];
    uint64_t cap = ledger_capacity(l, pos);
    uint64_t taken = g->reserved;
    if (g->claimed && g->claim_holder != holder)
        taken += g->claimed;
    taken += g->asked;
    return cap > taken ? cap - taken : 0;
}

uint64_t ledger_free_for_asks(const ledger_t *l, size_t pos)
{
    if (pos >= l->n_gpus)
        return 0;
    const ledger_gpu_t *g = &l->gpus[pos];
    uint64_t cap = ledger_capacity(l, pos);
    uint64_t taken = g->reserved + g->claimed;
    return cap > taken ? cap - taken : 0;
}

void ledger_set_asked(ledger_t *l, size_t pos, uint64_t bytes)
{
    if (pos < l->n_gpus)
        l->gpus[pos].asked = bytes;
}

uint64_t ledger_free(const ledger_t *l, size_t pos) { return ledger_free_for(l, pos, NULL); }

bool ledger_fits(const ledger_t *l, size_t pos, uint64_t bytes, const void *holder)
{
    return pos < l->n_gpus && bytes <= ledger_free_for(l, pos, holder);
}

static void link_entry(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind, uint64_t bytes,
                       const char *owner, const void *holder)
{
    ledger_gpu_t *g = &l->gpus[pos];
    e->gpu = (int)pos;
    e->kind = kind;
    e->bytes = bytes;
    e->owner = owner;
    e->holder = holder;
    list_insert_tail(&g->entries, &e->link);
    g->reserved += bytes;
    g->n_entries++;
}

int ledger_reserve(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind, uint64_t bytes,
                   const char *owner, const void *holder)
{
    if (pos >= l->n_gpus || e->gpu >= 0 || !ledger_fits(l, pos, bytes, holder))
        return -1;
    link_entry(l, pos, e, kind, bytes, owner, holder);
    LEDGER_ASSERT_OK(l);
    return 0;
}

int ledger_reserve_ahead_of_claim(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind,
                                  uint64_t bytes, const char *owner, const void *holder)
{
    if (pos >= l->n_gpus || e->gpu >= 0)
        return -1;
    uint64_t cap = ledger_capacity(l, pos);
    if (l->gpus[pos].reserved > cap || bytes > cap - l->gpus[pos].reserved)
        return -1;
    link_entry(l, pos, e, kind, bytes, owner, holder);
    LEDGER_ASSERT_OK(l);
    return 0;
}

void ledger_force(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind, uint64_t bytes,
                  const char *owner, const void *holder)
{
    if (pos >= l->n_gpus)
        return;
    if (e->gpu >= 0)
        ledger_release(l, e);
    link_entry(l, pos, e, kind, bytes, owner, holder);
    LEDGER_ASSERT_OK(l);
}

void ledger_release(ledger_t *l, ledger_entry_t *e)
{
    if (e->gpu < 0 || (size_t)e->gpu >= l->n_gpus)
        return;
    ledger_gpu_t *g = &l->gpus[e->gpu];
    list_remove(&e->link);
    g->reserved -= e->bytes;
    g->n_entries--;
    e->gpu = -1;
    e->bytes = 0;
    LEDGER_ASSERT_OK(l);
}

void ledger_resize(ledger_t *l, ledger_entry_t *e, uint64_t bytes)
{
    if (e->gpu < 0)
        return;
    ledger_gpu_t *g = &l->gpus[e->gpu];
    g->reserved = g->reserved - e->bytes + bytes;
    e->bytes = bytes;
    LEDGER_ASSERT_OK(l);
}

int ledger_claim(ledger_t *l, size_t pos, uint64_t bytes, const void *holder)
{
    if (pos >= l->n_gpus)
        return -1;
    ledger_gpu_t *g = &l->gpus[pos];
    if (g->claimed && g->claim_holder != holder)
        return -1;
    g->claimed = bytes;
    g->claim_holder = bytes ? holder : NULL;
    return 0;
}

void ledger_unclaim(ledger_t *l, const void *holder)
{
    for (size_t i = 0; i < l->n_gpus; i++) {
        if (l->gpus[i].claim_holder == holder) {
            l->gpus[i].claimed = 0;
            l->gpus[i].claim_holder = NULL;
        }
    }
}

uint64_t ledger_sum_kind(const ledger_t *l, size_t pos, enum ledger_kind kind)
{
    if (pos >= l->n_gpus)
        return 0;
    uint64_t sum = 0;
    list_foreach(it, &l->gpus[pos].entries) {
        const ledger_entry_t *e = list_entry(it, ledger_entry_t, link);
        if (e->kind == kind)
            sum += e->bytes;
    }
    return sum;
}

int ledger_check(const ledger_t *l, char *why, size_t whylen)
{
    for (size_t i = 0; i < l->n_gpus; i++) {
        const ledger_gpu_t *g = &l->gpus[i];
        uint64_t sum = 0;
        size_t n = 0;
        list_foreach(it, &g->entries) {
            const ledger_entry_t *e = list_entry(it, ledger_entry_t, link);
            if (e->gpu != (int)i) {
                snprintf(why, whylen, "gpu %zu: entry of %s says gpu %d", i, e->owner ? e->owner : "?", e->gpu);
                return -1;
            }
            sum += e->bytes;
            n++;
        }
        if (sum != g->reserved || n != g->n_entries) {
            snprintf(why, whylen, "gpu %zu: reserved %llu but entries sum to %llu (%zu entries, counted %zu)", i,
                     (unsigned long long)g->reserved, (unsigned long long)sum, n, g->n_entries);
            return -1;
        }
    }
    return 0;
}
