/* queue: per-model priority queue with aging and a fair order between flows (clients).
 * See queue.h for the ordering, the costs and the invariants. */
#include "policy/queue.h"

void queue_init(queue_t *q, size_t max, uint64_t age_step_ms)
{
    for (int i = 0; i < QUEUE_PRIORITIES; i++) {
        list_init(&q->by_priority[i]);
        list_init(&q->turns[i]);
    }
    q->depth = 0;
    q->max = max;
    q->age_step_ms = age_step_ms;
}

void queue_entry_init(queue_entry_t *e)
{
    list_init(&e->node);
    list_init(&e->turn);
    list_init(&e->flow_q);
    list_init(&e->flow_link);
    e->priority = 0;
    e->enqueued_ms = 0;
    e->flow = NULL;
    e->q = NULL;
    e->is_head = false;
}

void queue_flow_init(queue_flow_t *f) { list_init(&f->heads); }

bool queue_flow_idle(const queue_flow_t *f) { return list_empty(&f->heads); }

queue_entry_t *queue_flow_head_of(list_t *link) { return list_entry(link, queue_entry_t, flow_link); }

static int clamp_priority(int priority)
{
    if (priority < 0)
        return 0;
    return priority >= QUEUE_PRIORITIES ? QUEUE_PRIORITIES - 1 : priority;
}

/* The head of flow f at (q, priority), or NULL: O(heads of f). */
static queue_entry_t *flow_head(const queue_t *q, const queue_flow_t *f, int priority)
{
    list_foreach(it, &f->heads) {
        queue_entry_t *h = list_entry(it, queue_entry_t, flow_link);
        if (h->q == q && h->priority == priority)
            return h;
    }
    return NULL;
}

/* e becomes the head of its flow at its priority, in the turn list right after `after`.
 * Its flow_q is (or becomes) its followers' list: left as it is. */
static void become_head(queue_entry_t *e, list_t *after)
{
    e->is_head = true;
    list_insert_head(after, &e->turn);
    if (e->flow)
        list_insert_tail(&e->flow->heads, &e->flow_link);
}

/* Put e (already in its arrival list) behind its flow's head, or make it a head placed
 * after `after` in the turns. */
static void join(queue_t *q, queue_entry_t *e, list_t *after)
{
    queue_entry_t *h = e->flow ? flow_head(q, e->flow, e->priority) : NULL;
    if (h)
        list_insert_tail(&h->flow_q, &e->flow_q);
    else
        become_head(e, after);
}

int queue_push(queue_t *q, queue_entry_t *e, int priority, uint64_t now_ms)
{
    if (q->depth >= q->max || list_linked(&e->node))
        return -1;
    e->priority = clamp_priority(priority);
    e->enqueued_ms = now_ms;
    e->q = q;
    list_insert_tail(&q->by_priority[e->priority], &e->node);
    q->depth++;
    join(q, e, q->turns[e->priority].prev);
    return 0;
}

/* A retry joins its flow by arrival: before the head when older (taking its place), else
 * among the followers; a retry with no flow head is placed among the heads by arrival. */
static void join_again(queue_t *q, queue_entry_t *e)
{
    uint64_t t = e->enqueued_ms;
    queue_entry_t *h = e->flow ? flow_head(q, e->flow, e->priority) : NULL;
    if (h && t < h->enqueued_ms) {
        list_t *pos = h->turn.prev;
        list_remove(&h->turn);
        list_remove(&h->flow_link);
        h->is_head = false;
        list_insert_tail(&h->flow_q, &e->flow_q); /* e's list now holds h, then h's followers */
        become_head(e, pos);
        return;
    }
    if (h) {
        list_t *pos = h->flow_q.prev;
        while (pos != &h->flow_q && list_entry(pos, queue_entry_t, flow_q)->enqueued_ms > t)
            pos = pos->prev;
        list_insert_head(pos, &e->flow_q);
        return;
    }
    list_t *head = &q->turns[e->priority];
    list_t *pos = head->prev;
    while (pos != head && list_entry(pos, queue_entry_t, turn)->enqueued_ms > t)
        pos = pos->prev;
    become_head(e, pos);
}

void queue_push_again(queue_t *q, queue_entry_t *e, int priority, uint64_t enqueued_ms)
{
    if (list_linked(&e->node))
        return;
    e->priority = clamp_priority(priority);
    e->enqueued_ms = enqueued_ms;
    e->q = q;
    /* keep FIFO order by arrival within the list: walk back past younger entries */
    list_t *head = &q->by_priority[e->priority];
    list_t *pos = head->prev;
    while (pos != head && list_entry(pos, queue_entry_t, node)->enqueued_ms > enqueued_ms)
        pos = pos->prev;
    list_insert_head(pos, &e->node);
    q->depth++;
    join_again(q, e);
}

static uint64_t effective(const queue_t *q, const queue_entry_t *e, uint64_t now_ms)
{
    uint64_t p = (uint64_t)e->priority;
    if (q->age_step_ms && now_ms > e->enqueued_ms)
        p += (now_ms - e->enqueued_ms) / q->age_step_ms;
    return p;
}

/* The first head of priority i that ok accepts (all when ok is NULL), or NULL. */
static queue_entry_t *first_head(const queue_t *q, int i, queue_ok_fn ok, void *ctx)
{
    list_foreach(it, &q->turns[i]) {
        queue_entry_t *h = list_entry(it, queue_entry_t, turn);
        if (!ok || ok(h, ctx))
            return h;
    }
    return NULL;
}

queue_entry_t *queue_peek_if(const queue_t *q, uint64_t now_ms, queue_ok_fn ok, void *ctx)
{
    queue_entry_t *best = NULL;
    uint64_t best_eff = 0;
    for (int i = QUEUE_PRIORITIES - 1; i >= 0; i--) {
        list_t *oldest = list_first(&q->by_priority[i]);
        if (!oldest)
            continue;
        /* a priority competes with its oldest entry's age; its heads take turns within it.
         * Strictly greater: at equal effective priority the higher base priority (seen
         * first) wins. */
        uint64_t eff = effective(q, list_entry(oldest, queue_entry_t, node), now_ms);
        if (best && eff <= best_eff)
            continue;
        queue_entry_t *h = first_head(q, i, ok, ctx);
        if (h) {
            best = h;
            best_eff = eff;
        }
    }
    return best;
}

queue_entry_t *queue_peek(const queue_t *q, uint64_t now_ms) { return queue_peek_if(q, now_ms, NULL, NULL); }

/* Unlink e. A head's first follower becomes the head: at the back of the turns when e was
 * served (its flow had its turn), else in e's place. */
static void unlink_entry(queue_t *q, queue_entry_t *e, bool served)
{
    if (!list_linked(&e->node))
        return;
    list_remove(&e->node);
    q->depth--;
    if (!e->is_head) {
        list_remove(&e->flow_q);
        return;
    }
    list_t *pos = e->turn.prev;
    list_remove(&e->turn);
    list_remove(&e->flow_link);
    e->is_head = false;
    if (list_empty(&e->flow_q))
        return;
    queue_entry_t *next = list_entry(e->flow_q.next, queue_entry_t, flow_q);
    list_remove(&e->flow_q); /* next's link now heads the rest of the followers */
    become_head(next, served ? q->turns[next->priority].prev : pos);
}

void queue_take(queue_t *q, queue_entry_t *e) { unlink_entry(q, e, true); }

void queue_remove(queue_t *q, queue_entry_t *e) { unlink_entry(q, e, false); }

queue_entry_t *queue_pop(queue_t *q, uint64_t now_ms)
{
    queue_entry_t *e = queue_peek(q, now_ms);
    if (e)
        queue_take(q, e);
    return e;
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
