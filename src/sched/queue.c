/* queue: per-model priority queue with aging. See queue.h for ordering and invariants. */
#include "sched/queue.h"

void queue_init(queue_t *q, size_t max, uint64_t age_step_ms)
{
    for (int i = 0; i < QUEUE_PRIORITIES; i++)
        list_init(&q->by_priority[i]);
    q->depth = 0;
    q->max = max;
    q->age_step_ms = age_step_ms;
}

void queue_entry_init(queue_entry_t *e)
{
    list_init(&e->node);
    e->priority = 0;
    e->enqueued_ms = 0;
}

int queue_push(queue_t *q, queue_entry_t *e, int priority, uint64_t now_ms)
{
    if (q->depth >= q->max || list_linked(&e->node))
        return -1;
    if (priority < 0)
        priority = 0;
    if (priority >= QUEUE_PRIORITIES)
        priority = QUEUE_PRIORITIES - 1;
    e->priority = priority;
    e->enqueued_ms = now_ms;
    list_insert_tail(&q->by_priority[priority], &e->node);
    q->depth++;
    return 0;
}

void queue_push_again(queue_t *q, queue_entry_t *e, int priority, uint64_t enqueued_ms)
{
    if (list_linked(&e->node))
        return;
    if (priority < 0)
        priority = 0;
    if (priority >= QUEUE_PRIORITIES)
        priority = QUEUE_PRIORITIES - 1;
    e->priority = priority;
    e->enqueued_ms = enqueued_ms;
    /* keep FIFO order by arrival within the list: walk back past younger entries */
    list_t *head = &q->by_priority[priority];
    list_t *pos = head->prev;
    while (pos != head && list_entry(pos, queue_entry_t, node)->enqueued_ms > enqueued_ms)
        pos = pos->prev;
    list_insert_head(pos, &e->node);
    q->depth++;
}

static uint64_t effective(const queue_t *q, const queue_entry_t *e, uint64_t now_ms)
{
    uint64_t p = (uint64_t)e->priority;
    if (q->age_step_ms && now_ms > e->enqueued_ms)
        p += (now_ms - e->enqueued_ms) / q->age_step_ms;
    return p;
}

queue_entry_t *queue_peek(const queue_t *q, uint64_t now_ms)
{
    queue_entry_t *best = NULL;
    uint64_t best_eff = 0;
    for (int i = QUEUE_PRIORITIES - 1; i >= 0; i--) {
        list_t *first = list_first(&q->by_priority[i]);
        if (!first)
            continue;
        queue_entry_t *e = list_entry(first, queue_entry_t, node);
        uint64_t eff = effective(q, e, now_ms);
        /* Strictly greater: at equal effective priority the higher base priority (seen
         * first) wins; within one list FIFO order holds by construction. */
        if (!best || eff > best_eff) {
            best = e;
            best_eff = eff;
        }
    }
    return best;
}

queue_entry_t *queue_pop(queue_t *q, uint64_t now_ms)
{
    queue_entry_t *e = queue_peek(q, now_ms);
    if (e)
        queue_remove(q, e);
    return e;
}

void queue_remove(queue_t *q, queue_entry_t *e)
{
    if (!list_linked(&e->node))
        return;
    list_remove(&e->node);
    q->depth--;
}

bool queue_contains(const queue_entry_t *e) { return list_linked(&e->node); }

uint64_t queue_oldest_ms(const queue_t *q)
{
    uint64_t oldest = 0;
    for (int i = 0; i < QUEUE_PRIORITIES; i++) {
        list_t *first = list_first(&q->by_priority[i]);
        if (!first)
            continue;
        uint64_t t = list_entry(first, queue_entry_t, node)->enqueued_ms;
        if (!oldest || t < oldest)
            oldest = t;
    }
    return oldest;
}

void queue_depths(const queue_t *q, size_t out[QUEUE_PRIORITIES])
{
    for (int i = 0; i < QUEUE_PRIORITIES; i++) {
        size_t n = 0;
        list_foreach(it, &q->by_priority[i]) n++;
        out[i] = n;
    }
}
