/*
 * queue: one model's queue of waiting requests, ordered by priority then arrival, with aging.
 *
 * Ten FIFO lists, one per priority 0..9. The next entry is the head of the list with the
 * highest *effective* priority = priority + (now - enqueued) / age_step_ms, capped at 9 +
 * the number of steps; ties go to the higher base priority, then the earlier arrival.
 * So a request of any priority reaches the front within a bounded time (aging: nothing
 * waits forever), and picking the next entry costs O(10) whatever the depth: no work per
 * event grows with the queue.
 *
 * Invariants: depth == number of linked entries; depth <= max; an entry is on at most one
 * queue (entry->node linked <=> entry is queued). The queue never owns or frees entries.
 * Return convention: queue_push returns 0, or -1 when the queue is full (entry untouched).
 */
#ifndef VRAMD_SCHED_QUEUE_H
#define VRAMD_SCHED_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

#define QUEUE_PRIORITIES 10

typedef struct queue_entry {
    list_t node;
    int priority;         /* 0..9 */
    uint64_t enqueued_ms; /* monotonic ms */
} queue_entry_t;

typedef struct queue {
    list_t by_priority[QUEUE_PRIORITIES];
    size_t depth;
    size_t max;
    uint64_t age_step_ms; /* 0 = no aging */
} queue_t;

void queue_init(queue_t *q, size_t max, uint64_t age_step_ms);
void queue_entry_init(queue_entry_t *e);
int queue_push(queue_t *q, queue_entry_t *e, int priority, uint64_t now_ms);
/* Push a request that was already admitted once (a retry): ignores max, keeps its original
 * enqueue time so that aging still counts its whole wait. */
void queue_push_again(queue_t *q, queue_entry_t *e, int priority, uint64_t enqueued_ms);
/* The entry that should run next, or NULL when empty (not removed). */
queue_entry_t *queue_peek(const queue_t *q, uint64_t now_ms);
queue_entry_t *queue_pop(queue_t *q, uint64_t now_ms);
void queue_remove(queue_t *q, queue_entry_t *e);
bool queue_contains(const queue_entry_t *e);
/* Enqueue time of the oldest entry (any priority); 0 when empty. */
uint64_t queue_oldest_ms(const queue_t *q);
/* Number of entries per priority (O(depth): for status pages, not hot paths). */
void queue_depths(const queue_t *q, size_t out[QUEUE_PRIORITIES]);

#endif
