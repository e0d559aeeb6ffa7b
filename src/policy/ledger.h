/*
 * ledger: the book of GPU memory, one page per GPU. Pure bookkeeping: no I/O, no clock.
 *
 * For each GPU:
 *   capacity  = total - headroom - foreign          (foreign: measured usage of processes
 *                                                    vramd does not manage; never negative)
 *   reserved  = sum of the entries on the GPU      (residents of loaded or loading instances,
 *                                                    per-request reservations of running requests)
 *   claimed   = memory promised to one waiting large request or load (anti-starvation):
 *               other reservations may not eat into it
 *   asked     = bytes that worker allocations past their grants wait for (the CUDA shim's
 *               asks, gate/shim_grants.c): no new reservation may take them either
 *   free_to_admit = capacity - reserved - claimed - asked  (0 when negative)
 *
 * Entries are owned by their holders (embedded in an instance or a request), so reserving
 * and releasing never allocate and are O(1). An entry is either on exactly one GPU's list
 * (linked, gpu >= 0) or on none (gpu == -1); releasing an unlinked entry is harmless, so
 * "release however the request ends" can be called from every exit path.
 *
 * Invariants (ledger_check verifies them; debug builds assert after every change):
 *   reserved == sum of the bytes of the linked entries of that GPU;
 *   an entry's gpu field names the list it is on;
 *   a reservation made by ledger_reserve fitted when it was made (later capacity changes,
 *   measured growth through ledger_resize, or ledger_force may push reserved over capacity:
 *   that is reality, and admission simply waits).
 * Return convention: ledger_reserve 0 = reserved, -1 = does not fit (entry untouched).
 */
#ifndef VRAMD_POLICY_LEDGER_H
#define VRAMD_POLICY_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

#define LEDGER_MAX_GPUS 16

enum ledger_kind { LEDGER_RESIDENT = 0, LEDGER_REQUEST = 1 };

typedef struct ledger_entry {
    list_t link;
    int gpu;               /* -1 when not reserved */
    enum ledger_kind kind;
    uint64_t bytes;
    const char *owner;     /* model name, for status and logs */
    const void *holder;    /* the instance or request holding it */
} ledger_entry_t;

typedef struct ledger_gpu {
    int index;             /* NVML index */
    uint64_t total;
    uint64_t headroom;
    uint64_t foreign;
    uint64_t reserved;
    uint64_t claimed;
    const void *claim_holder;
    uint64_t asked;
    size_t n_entries;
    list_t entries;
} ledger_gpu_t;

typedef struct ledger {
    size_t n_gpus;
    ledger_gpu_t gpus[LEDGER_MAX_GPUS];
} ledger_t;

void ledger_init(ledger_t *l);
/* Add or update a GPU (by position 0..n-1); totals come from NVML. */
void ledger_set_gpu(ledger_t *l, size_t pos, int nvml_index, uint64_t total, uint64_t headroom);
void ledger_set_foreign(ledger_t *l, size_t pos, uint64_t foreign);
void ledger_entry_init(ledger_entry_t *e);

uint64_t ledger_capacity(const ledger_t *l, size_t pos);
/* What a new reservation may take now (claims by others respected; holder's own claim not). */
uint64_t ledger_free_for(const ledger_t *l, size_t pos, const void *holder);
uint64_t ledger_free(const ledger_t *l, size_t pos);
bool ledger_fits(const ledger_t *l, size_t pos, uint64_t bytes, const void *holder);

int ledger_reserve(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind, uint64_t bytes,
                   const char *owner, const void *holder);
/* The same, but the GPU's claim is not respected: for a request that was queued before
 * the claimant's oldest request (FIFO: the claim only holds back younger work). */
int ledger_reserve_ahead_of_claim(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind,
                                  uint64_t bytes, const char *owner, const void *holder);
/* Reserve even when it does not fit (measured memory that is already in use). */
void ledger_force(ledger_t *l, size_t pos, ledger_entry_t *e, enum ledger_kind kind, uint64_t bytes,
                  const char *owner, const void *holder);
void ledger_release(ledger_t *l, ledger_entry_t *e);
/* Change a linked entry's size (measured resident grew or shrank). */
void ledger_resize(ledger_t *l, ledger_entry_t *e, uint64_t bytes);

/* Hold `bytes` of free memory for holder on a GPU: others' reservations may not use it.
 * One claim per GPU; a new claim replaces an older one only when made by the same holder
 * or when clear (returns -1 when another holder already claims this GPU). */
int ledger_claim(ledger_t *l, size_t pos, uint64_t bytes, const void *holder);
void ledger_unclaim(ledger_t *l, const void *holder);

/* The bytes allocations past their grants wait for on a GPU now (replaces the figure). */
void ledger_set_asked(ledger_t *l, size_t pos, uint64_t bytes);
/* What a waiting allocation ask may take: capacity - reserved - claimed (the asks' own hold
 * not counted against them). */
uint64_t ledger_free_for_asks(const ledger_t *l, size_t pos);

/* Sum of entries of one kind on a GPU. */
uint64_t ledger_sum_kind(const ledger_t *l, size_t pos, enum ledger_kind kind);
/* 0 when every invariant holds, else -1 with a description in why. */
int ledger_check(const ledger_t *l, char *why, size_t whylen);

#endif
