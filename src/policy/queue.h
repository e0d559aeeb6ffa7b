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
 * Fair order between clients (flows). An entry may belong to a flow (queue_flow_t, one per
 * client, owned by the caller: policy/client_limit.c). Within one priority, a flow's entries
 * wait behind its *head*, and the heads take turns (round-robin): the entry served next at
 * a priority is the first head of that priority's turn list; once served, its flow's next
 * entry becomes the head and goes to the back of the turns. So a client with 40 requests
 * queued and one with 5 alternate, in arrival order within each. Entries without a flow are
 * each their own head: with no flows the order is exactly priority then arrival. Aging
 * compares priorities by their oldest entry (the arrival lists), as before.
 * Costs: peek O(10) (plus the heads a filter skips, queue_peek_if), pop/take/remove O(1),
 * push O(heads of the entry's flow: the (queue, priority) pairs where that client has
 * entries), never O(depth). queue_push_again walks back by arrival, as before.
 *
 * Invariants: depth == number of linked entries; depth <= max; an entry is on at most one
 * queue (entry->node linked <=> entry is queued); every priority with entries has at least
 * one head, a flow has at most one head per (queue, priority), and a flow's followers are
 * in arrival order behind it. The queue never owns or frees entries or flows.
 * Return convention: queue_push returns 0, or -1 when the queue is full (entry untouched).
 */
#ifndef VRAMD_POLICY_QUEUE_H
#define VRAMD_POLICY_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

#define QUEUE_PRIORITIES 10

/* One client's share of the queues: the heads of its entries (queue_entry_t.flow_link). */
typedef struct queue_flow {
    list_t heads;
} queue_flow_t;

struct queue;

typedef struct queue_entry {
    list_t node;          /* in its priority's arrival list */
    int priority;         /* 0..9 */
    uint64_t enqueued_ms; /* monotonic ms */
    /* fair order */
    queue_flow_t *flow;   /* its client's flow, or NULL (set before the push) */
    const struct queue *q; /* the queue it is on (while queued) */
    bool is_head;         /* first of its flow at its (queue, priority) */
    list_t turn;          /* a head: in its priority's turn list */
    list_t flow_q;        /* a head: its followers' list; a follower: its link in that list */
    list_t flow_link;     /* a head with a flow: in flow->heads */
} queue_entry_t;

typedef struct queue {
    list_t by_priority[QUEUE_PRIORITIES]; /* every entry, by arrival */
    list_t turns[QUEUE_PRIORITIES];       /* heads, in turn order */
    size_t depth;
    size_t max;
    uint64_t age_step_ms; /* 0 = no aging */
} queue_t;

void queue_init(queue_t *q, size_t max, uint64_t age_step_ms);
void queue_entry_init(queue_entry_t *e);
void queue_flow_init(queue_flow_t *f);
/* Has the flow no entry queued anywhere? */
bool queue_flow_idle(const queue_flow_t *f);
/* The entry of a flow head (for walking a flow's heads: list_foreach over f->heads). */
queue_entry_t *queue_flow_head_of(list_t *link);
/* A filter for queue_peek_if: may this entry be served now? */
typedef bool (*queue_ok_fn)(const queue_entry_t *e, void *ctx);
int queue_push(queue_t *q, queue_entry_t *e, int priority, uint64_t now_ms);
/* Push a request that was already admitted once (a retry): ignores max, keeps its original
 * enqueue time so that aging still counts its whole wait. */
void queue_push_again(queue_t *q, queue_entry_t *e, int priority, uint64_t enqueued_ms);
/* The entry that should run next, or NULL when empty (not removed). */
queue_entry_t *queue_peek(const queue_t *q, uint64_t now_ms);
/* The same among the heads that ok accepts (a head refused stays in place: the next head of
 * its priority is tried); NULL when none is. */
queue_entry_t *queue_peek_if(const queue_t *q, uint64_t now_ms, queue_ok_fn ok, void *ctx);
queue_entry_t *queue_pop(queue_t *q, uint64_t now_ms);
/* Remove an entry because it is served: its flow's next entry goes to the back of the turns. */
void queue_take(queue_t *q, queue_entry_t *e);
/* Remove an entry for any other reason (cancelled, deadline): its flow keeps its turn. */
void queue_remove(queue_t *q, queue_entry_t *e);
bool queue_contains(const queue_entry_t *e);
/* Enqueue time of the oldest entry (any priority); 0 when empty. */
uint64_t queue_oldest_ms(const queue_t *q);
/* Number of entries per priority (O(depth): for status pages, not hot paths). */
void queue_depths(const queue_t *q, size_t out[QUEUE_PRIORITIES]);

#endif
