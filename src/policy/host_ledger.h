/*
 * host_ledger: the book of host memory that parked instances hold (SPEC 4.1: a model
 * slept by its server's sleep hook, or checkpointed by the CUDA driver, keeps its weights
 * in host RAM). Pure bookkeeping like ledger.c: no I/O, no clock; the caller reads the
 * host (gpu/host_mem.h) and passes what it found.
 *
 *   usable  = budget - reserve                    (host_memory.budget / reserve)
 *   parked  = sum of the held entries              (one per parked or parking instance)
 *   pending = sum of the held entries not settled  (booked before the park, not yet measured:
 *                                                   the kernel's MemAvailable does not show them yet)
 *   a park of N bytes fits when  parked + N <= usable
 *                          and   N + pending + reserve <= host_room  (host_room: min(MemAvailable,
 *                                cgroup room) read now; 0 = unknown, then only the budget counts)
 *
 * Entries are owned by their holders (embedded in an instance), so booking and releasing
 * never allocate; releasing an entry that is not held is harmless, so every way a parked
 * instance ends (restored, stopped, died, removed) may release it.
 *
 * Invariants (host_ledger_check): parked == sum of held entries' bytes, pending == sum of the
 * unsettled ones, n_entries == entries on the list, every listed entry is held; an entry
 * only shrinks after it was booked (host_ledger_settle clamps to the booked size), so
 * parked <= usable holds whenever it held at booking — unless the limits were lowered by a
 * reload (over_limit says so until parked falls back under).
 * Return convention: host_ledger_book 0 = booked, -1 = refused (entry untouched, counted).
 */
#ifndef VRAMD_POLICY_HOST_LEDGER_H
#define VRAMD_POLICY_HOST_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

typedef struct host_entry {
    list_t link;
    bool held;
    bool settled;       /* measured after the park: the host shows it */
    uint64_t bytes;
    const char *owner;  /* model name, for status and metrics */
    const void *holder; /* the instance */
} host_entry_t;

enum host_verdict {
    HOST_FITS = 0,
    HOST_OVER_BUDGET, /* parked + N > budget - reserve */
    HOST_SHORT,       /* the host itself has not got N + reserve free now */
};

typedef struct host_ledger {
    uint64_t budget, reserve;
    uint64_t parked, pending, peak;
    uint64_t refused_budget, refused_host; /* parks refused, by reason */
    bool over_limit;                       /* limits lowered below what is parked (reload) */
    size_t n_entries;
    list_t entries;
} host_ledger_t;

void host_ledger_init(host_ledger_t *h, uint64_t budget, uint64_t reserve);
/* New limits (a reload); what is parked stays parked. */
void host_ledger_set_limits(host_ledger_t *h, uint64_t budget, uint64_t reserve);
void host_entry_init(host_entry_t *e);

/* budget - reserve - parked, 0 when negative. */
uint64_t host_ledger_free(const host_ledger_t *h);
/* Could a park of `bytes` be booked now, with host_room (0 = unknown) read from the host? */
enum host_verdict host_ledger_verdict(const host_ledger_t *h, uint64_t bytes, uint64_t host_room);
const char *host_verdict_name(enum host_verdict v);
/* Book `bytes` for a park about to start (unsettled). HOST_FITS = booked; anything else =
 * refused, the entry untouched and the refusal counted. An entry already held is refused. */
enum host_verdict host_ledger_book(host_ledger_t *h, host_entry_t *e, uint64_t bytes, uint64_t host_room,
                                   const char *owner, const void *holder);
/* The park finished: the entry becomes what was measured (never more than booked). */
void host_ledger_settle(host_ledger_t *h, host_entry_t *e, uint64_t bytes);
/* The parked instance is back, stopped, died or gone: the entry is released (no-op if not held). */
void host_ledger_release(host_ledger_t *h, host_entry_t *e);
/* Sum of held entries whose owner is `owner` (string compare). */
uint64_t host_ledger_parked_by(const host_ledger_t *h, const char *owner);
/* 0 when every invariant holds, else -1 with a description in why. */
int host_ledger_check(const host_ledger_t *h, char *why, size_t whylen);

#endif
