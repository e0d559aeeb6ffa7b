/* host_ledger: the book of parked host memory. The definitions and invariants are in host_ledger.h. */
#include "policy/host_ledger.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#ifdef VRAMD_DEBUG
#define HOST_ASSERT_OK(h)                                                                           \
    do {                                                                                            \
        char why_[256];                                                                             \
        if (host_ledger_check((h), why_, sizeof why_) != 0) {                                       \
            fprintf(stderr, "host ledger invariant broken: %s\n", why_);                            \
            assert(0);                                                                              \
        }                                                                                           \
    } while (0)
#else
#define HOST_ASSERT_OK(h) ((void)(h))
#endif

static uint64_t usable(const host_ledger_t *h)
{
    return h->budget > h->reserve ? h->budget - h->reserve : 0;
}

static void note_limit(host_ledger_t *h)
{
    h->over_limit = h->parked > usable(h);
}

void host_ledger_init(host_ledger_t *h, uint64_t budget, uint64_t reserve)
{
    memset(h, 0, sizeof *h);
    list_init(&h->entries);
    h->budget = budget;
    h->reserve = reserve;
}

void host_ledger_set_limits(host_ledger_t *h, uint64_t budget, uint64_t reserve)
{
    h->budget = budget;
    h->reserve = reserve;
    note_limit(h);
    HOST_ASSERT_OK(h);
}

void host_entry_init(host_entry_t *e)
{
    memset(e, 0, sizeof *e);
    list_init(&e->link);
}

uint64_t host_ledger_free(const host_ledger_t *h)
{
    uint64_t u = usable(h);
    return u > h->parked ? u - h->parked : 0;
}

enum host_verdict host_ledger_verdict(const host_ledger_t *h, uint64_t bytes, uint64_t host_room)
{
    if (bytes > host_ledger_free(h))
        return HOST_OVER_BUDGET;
    /* the host must still have the bytes, what is on its way there, and the reserve */
    if (host_room && (bytes > host_room || h->pending > host_room - bytes ||
                      h->reserve > host_room - bytes - h->pending))
        return HOST_SHORT;
    return HOST_FITS;
}

const char *host_verdict_name(enum host_verdict v)
{
    static const char *const n[] = {"fits", "over_budget", "host_short"};
    return (unsigned)v < 3 ? n[v] : "unknown";
}

enum host_verdict host_ledger_book(host_ledger_t *h, host_entry_t *e, uint64_t bytes, uint64_t host_room,
                                   const char *owner, const void *holder)
{
    if (e->held)
        return HOST_OVER_BUDGET; /* a park of a parked instance: a caller's bug, not a refusal */
    enum host_verdict v = host_ledger_verdict(h, bytes, host_room);
    if (v != HOST_FITS) {
        if (v == HOST_SHORT)
            h->refused_host++;
        else
            h->refused_budget++;
        return v;
    }
    e->held = true;
    e->settled = false;
    e->bytes = bytes;
    e->owner = owner;
    e->holder = holder;
    list_insert_tail(&h->entries, &e->link);
    h->n_entries++;
    h->parked += bytes;
    h->pending += bytes;
    if (h->parked > h->peak)
        h->peak = h->parked;
    HOST_ASSERT_OK(h);
    return HOST_FITS;
}

void host_ledger_settle(host_ledger_t *h, host_entry_t *e, uint64_t bytes)
{
    if (!e->held)
        return;
    if (bytes > e->bytes)
        bytes = e->bytes; /* growth would bypass the check made at booking */
    if (!e->settled)
        h->pending -= e->bytes;
    h->parked = h->parked - e->bytes + bytes;
    e->bytes = bytes;
    e->settled = true;
    note_limit(h);
    HOST_ASSERT_OK(h);
}

void host_ledger_release(host_ledger_t *h, host_entry_t *e)
{
    if (!e->held)
        return;
    list_remove(&e->link);
    h->n_entries--;
    h->parked -= e->bytes;
    if (!e->settled)
        h->pending -= e->bytes;
    e->held = false;
    e->settled = false;
    e->bytes = 0;
    note_limit(h);
    HOST_ASSERT_OK(h);
}

uint64_t host_ledger_parked_by(const host_ledger_t *h, const char *owner)
{
    uint64_t sum = 0;
    list_foreach(it, &h->entries) {
        const host_entry_t *e = list_entry(it, host_entry_t, link);
        if (e->owner && owner && strcmp(e->owner, owner) == 0)
            sum += e->bytes;
    }
    return sum;
}

int host_ledger_check(const host_ledger_t *h, char *why, size_t whylen)
{
    uint64_t sum = 0, pending = 0;
    size_t n = 0;
    list_foreach(it, &h->entries) {
        const host_entry_t *e = list_entry(it, host_entry_t, link);
        if (!e->held) {
            snprintf(why, whylen, "entry of %s on the list but not held", e->owner ? e->owner : "?");
            return -1;
        }
        sum += e->bytes;
        if (!e->settled)
            pending += e->bytes;
        n++;
    }
    if (sum != h->parked) {
        snprintf(why, whylen, "parked %llu != sum of entries %llu", (unsigned long long)h->parked,
                 (unsigned long long)sum);
        return -1;
    }
    if (pending != h->pending) {
        snprintf(why, whylen, "pending %llu != sum of unsettled entries %llu", (unsigned long long)h->pending,
                 (unsigned long long)pending);
        return -1;
    }
    if (n != h->n_entries) {
        snprintf(why, whylen, "n_entries %zu != %zu listed", h->n_entries, n);
        return -1;
    }
    if (h->parked > usable(h) && !h->over_limit) {
        snprintf(why, whylen, "parked %llu over budget - reserve %llu without a limit change",
                 (unsigned long long)h->parked, (unsigned long long)usable(h));
        return -1;
    }
    if (h->parked > h->peak) {
        snprintf(why, whylen, "parked %llu above peak %llu", (unsigned long long)h->parked,
                 (unsigned long long)h->peak);
        return -1;
    }
    return 0;
}
