/*
 * sched_queue: the visible queue. Every waiting request's place and expected times, from
 * the learned run, load and wake times and the turn order of sched_turn.c (GET /v1/queue,
 * vramctl queue, the status page, a 503's Retry-After, vramd_queue_eta_seconds).
 *
 * The model of the future it computes, per GPU (written in docs/api.md "The queue"):
 *   - a model served now (an instance READY and not leaving) serves its queue in order
 *     (priority, then arrival) on its slots (concurrency x ready instances): the request at
 *     position k starts when the (k - free slots)-th slot frees, one learned run after
 *     another; the running ones end one run after their dispatch;
 *   - the models waiting for the card (no instance serving) take turns in sched_turn.c's
 *     order (worth most first): a turn starts when the models in the way have served what
 *     they queued (at the waiting model's bound at the latest while their arrivals alone
 *     would keep the card: arrivals faster than they are served), plus the newcomer's way
 *     in (its learned load, or its park tier's way back); it lasts its queue;
 *   - a waiting model that fits beside what is there starts after its way in.
 * Unknown times count as 0 (a model never run or loaded), so an estimate is a lower bound
 * until vramd has learned them. waiting_for says what each request waits for: "slot" (its
 * model's running requests), "memory" (a free slot, but its reservation does not fit),
 * "load" (its model is not on a GPU and will load or wake without displacing work),
 * "swap" (a model with work holds the card and the swap is not due), "bound" (its swap is
 * due: max_wait, a deadline or a priority; the card changes hands after the batch ahead).
 * Invariants: reads only (no field written, no ledger touched); positions are 1..depth per
 * model in service order; expected starts do not decrease with position; every walk is
 * bounded by the models and their queues (queue_max each). Loop thread only; calls down into
 * sched_turn.c and scheduler.c.
 */
#include "sched/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "core/core.h"
#include "core/request.h"
#include "sched/scheduler_int.h"

const char *sched_wait_for_name(enum sched_wait_for w)
{
    static const char *const names[SCHED_WAIT_FOR_COUNT] = {
        [SCHED_WAIT_SLOT] = "slot", [SCHED_WAIT_MEMORY] = "memory", [SCHED_WAIT_LOAD] = "load",
        [SCHED_WAIT_SWAP] = "swap", [SCHED_WAIT_BOUND] = "bound",
    };
    return (unsigned)w < SCHED_WAIT_FOR_COUNT && names[w] ? names[w] : "?";
}

/* Is m served now: an instance READY, not stopping, on a GPU (or using none)? */
static const instance_t *serving_instance(const model_t *m, unsigned *ready)
{
    const instance_t *first = NULL;
    *ready = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_READY && !in->life.stop_requested) {
            (*ready)++;
            if (!first)
                first = in;
        }
    }
    return first;
}

static unsigned slots_of(const model_t *m, unsigned ready)
{
    unsigned c = m->cfg->concurrency ? m->cfg->concurrency : 1;
    return c * (ready ? ready : 1);
}

/* How long until the first busy slot of a served model frees (0 when one is free). */
static uint64_t first_slot_free_ms(const model_t *m, unsigned slots, uint64_t now)
{
    if (m->in_flight < slots || !m->run_ms_ewma)
        return 0;
    uint64_t newest = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_READY && in->path.in_flight > 0 && (!newest || in->path.last_used_ms < newest))
            newest = in->path.last_used_ms; /* the longest-running slot frees first */
    }
    uint64_t ran = newest && now > newest ? now - newest : 0;
    return ran < m->run_ms_ewma ? m->run_ms_ewma - ran : 0;
}

/* The k-th (from 0) queued request's start and end, from a turn starting at t0 on a model
 * with `slots` slots, `busy` of them running requests that free their slot from first_free.
 * The requests that take the free slots at t0 free theirs one run later; a request behind
 * them takes the slot that frees first: in each round of `slots` requests, the busy slots'
 * (first_free) before those taken at t0 (run), one run later per round. */
static void eta_at(const model_t *m, size_t k, unsigned slots, unsigned busy, uint64_t t0, uint64_t first_free,
                   uint64_t *start, uint64_t *done)
{
    uint64_t run = m->run_ms_ewma;
    unsigned free_now = busy < slots ? slots - busy : 0;
    if (k < free_now) {
        *start = t0;
    } else {
        size_t behind = k - free_now; /* requests that wait for a slot to free */
        uint64_t first = behind % slots < busy ? first_free : run;
        *start = t0 + first + (uint64_t)(behind / slots) * run;
    }
    *done = *start + run;
}

/* m's queued requests in service order (priority, then arrival) into rs; their count. */
static int by_service_order(const void *a, const void *b)
{
    const request_t *x = *(request_t *const *)a, *y = *(request_t *const *)b;
    if (x->qe.priority != y->qe.priority)
        return x->qe.priority > y->qe.priority ? -1 : 1;
    if (x->qe.enqueued_ms != y->qe.enqueued_ms)
        return x->qe.enqueued_ms < y->qe.enqueued_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

static size_t queued_in_order(const model_t *m, const request_t **rs, size_t max)
{
    size_t n = 0;
    for (int p = QUEUE_PRIORITIES - 1; p >= 0; p--)
        list_foreach(it, &m->queue.by_priority[p]) {
            if (n < max)
                rs[n++] = list_entry(it, request_t, qe.node);
        }
    qsort(rs, n, sizeof *rs, by_service_order);
    return n;
}

/* How long until a served model om has served what it queued (ms from now). */
static uint64_t drain_ms(const model_t *om, uint64_t now)
{
    unsigned ready;
    (void)serving_instance(om, &ready);
    unsigned slots = slots_of(om, ready);
    uint64_t first_free = first_slot_free_ms(om, slots, now);
    if (om->queue.depth == 0)
        return om->in_flight ? first_free : 0;
    uint64_t start, done;
    eta_at(om, om->queue.depth - 1, slots, om->in_flight, 0, first_free, &start, &done);
    return done;
}

/* One waiting model's turn on a GPU: when its first request starts, when its queue is
 * served (ms from now), and what its requests wait for. */
typedef struct turn_plan {
    const model_t *m;
    uint64_t start, end;
    enum sched_wait_for why;
} turn_plan_t;

/* The GPU position a waiting model m would take its turn on (its claim's GPU, where its
 * parked or unloaded instance is, else the cheapest by sched_turn_gpu, else the first
 * allowed); false: none known. */
static bool planned_gpu(const model_t *m, size_t *pos)
{
    const ledger_t *l = &sched_state.ledger;
    for (size_t g = 0; g < l->n_gpus; g++)
        if (l->gpus[g].claimed && l->gpus[g].claim_holder == m) {
            *pos = g;
            return true;
        }
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->memory.gpu_pos >= 0 && (size_t)in->memory.gpu_pos < l->n_gpus) {
            *pos = (size_t)in->memory.gpu_pos;
            return true;
        }
    }
    bool allowed[LEDGER_MAX_GPUS];
    sched_allowed_mask(m, allowed);
    if (sched_turn_gpu(m, allowed, m->cfg->memory.resident + sched_smallest_estimate(m), pos))
        return true;
    for (size_t g = 0; g < l->n_gpus; g++)
        if (allowed[g]) {
            *pos = g;
            return true;
        }
    return false;
}

/* How long until card pos is free for the waiting model w: the served models there with
 * work have drained, at w's bound at the latest... unless their arrivals alone keep them
 * busy (arrivals faster than their slots serve them: their learned gap, or the time since
 * the last one when longer, sched_expected_gap_ms): then at w's bound. */
static uint64_t card_free_ms(const model_t *w, size_t pos, uint64_t now)
{
    uint64_t free_at = 0;
    list_foreach(mi, &sched_state.core->models) {
        const model_t *om = list_entry(mi, model_t, link);
        unsigned ready;
        const instance_t *in = serving_instance(om, &ready);
        if (om == w || !in || in->memory.gpu_pos != (int)pos || (om->queue.depth == 0 && om->in_flight == 0))
            continue;
        uint64_t d = drain_ms(om, now);
        uint64_t gap = sched_expected_gap_ms(om), run = om->run_ms_ewma; /* a rate that stopped fades */
        if (gap && run && gap * slots_of(om, ready) < run) {
            uint64_t oldest = queue_oldest_ms(&w->queue);
            uint64_t bound_at = (oldest ? oldest : now) + sched_max_wait_ms(w);
            d = bound_at > now ? bound_at - now : 0;
        }
        if (d > free_at)
            free_at = d;
    }
    return free_at;
}

/* The waiting models on pos in turn order (sched_turn_before), with their turns, into
 * plan; their count (at most max). */
static size_t plan_turns(size_t pos, uint64_t now, turn_plan_t *plan, size_t max)
{
    size_t n = 0;
    list_foreach(mi, &sched_state.core->models) {
        const model_t *om = list_entry(mi, model_t, link);
        unsigned ready;
        size_t g;
        if (n >= max || om->queue.depth == 0 || serving_instance(om, &ready) || !sched_uses_gpu(om) ||
            !planned_gpu(om, &g) || g != pos)
            continue;
        plan[n++] = (turn_plan_t){.m = om};
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: n is small (the models waiting) */
        for (size_t j = i; j > 0 && sched_turn_before(plan[j].m, plan[j - 1].m, pos, now); j--) {
            turn_plan_t t = plan[j];
            plan[j] = plan[j - 1];
            plan[j - 1] = t;
        }
    const ledger_gpu_t *lg = &sched_state.ledger.gpus[pos];
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        const model_t *w = plan[i].m;
        uint64_t need = w->cfg->memory.resident + sched_smallest_estimate(w);
        bool busy = sched_busy_in_way(w, pos, need);
        if (i == 0)
            t = busy ? card_free_ms(w, pos, now) : 0;
        bool due = (lg->claimed && lg->claim_holder == w) || sched_swap_due(w, pos, now) != SCHED_SWAP_NONE;
        plan[i].why = due ? SCHED_WAIT_BOUND : (busy || i > 0) ? SCHED_WAIT_SWAP : SCHED_WAIT_LOAD;
        plan[i].start = t + sched_way_in_ms(w);
        uint64_t start, done;
        eta_at(w, w->queue.depth - 1, slots_of(w, 1), 0, plan[i].start, 0, &start, &done);
        plan[i].end = done;
        t = done; /* the next model's turn starts once this one has served its queue */
    }
    return n;
}

/* Where a waiting model m's turn starts and what it waits for; for a model with nothing
 * queued (a new request's first), after every turn planned on its GPU. */
static void turn_of(const model_t *m, uint64_t now, uint64_t *start, enum sched_wait_for *why)
{
    size_t pos;
    *start = sched_way_in_ms(m);
    *why = SCHED_WAIT_LOAD;
    if (!sched_uses_gpu(m) || !planned_gpu(m, &pos))
        return;
    turn_plan_t plan[SCHED_QUEUE_TURNS_MAX];
    size_t n = plan_turns(pos, now, plan, SCHED_QUEUE_TURNS_MAX);
    for (size_t i = 0; i < n; i++)
        if (plan[i].m == m) {
            *start = plan[i].start;
            *why = plan[i].why;
            return;
        }
    uint64_t need = m->cfg->memory.resident + sched_smallest_estimate(m);
    bool busy = sched_busy_in_way(m, pos, need);
    uint64_t after = n ? plan[n - 1].end : busy ? card_free_ms(m, pos, now) : 0;
    *start = after + sched_way_in_ms(m);
    *why = busy || n ? SCHED_WAIT_SWAP : SCHED_WAIT_LOAD;
}

/* A served model's requests queued after another model's claim on its GPU (its cutoff)
 * wait for that model's turn; from when (ms from now), or 0 when none is held back. */
static uint64_t held_back_until(const model_t *m, const instance_t *in, uint64_t now, uint64_t *cutoff)
{
    *cutoff = 0;
    if (in->memory.gpu_pos < 0 || (size_t)in->memory.gpu_pos >= sched_state.ledger.n_gpus)
        return 0;
    const ledger_gpu_t *lg = &sched_state.ledger.gpus[in->memory.gpu_pos];
    const model_t *c = lg->claimed ? lg->claim_holder : NULL;
    if (!c || c == m)
        return 0;
    *cutoff = sched_claim_cutoff_ms(c);
    uint64_t start;
    enum sched_wait_for why;
    turn_of(c, now, &start, &why);
    uint64_t s, done;
    eta_at(c, c->queue.depth ? c->queue.depth - 1 : 0, slots_of(c, 1), 0, start, 0, &s, &done);
    return done + sched_way_in_ms(m);
}

size_t sched_queue_model(const model_t *m, sched_queue_entry_t *out, size_t max)
{
    if (!sched_state.core || m->queue.depth == 0 || max == 0)
        return 0;
    uint64_t now = core_now();
    const request_t **rs = calloc(m->queue.depth, sizeof *rs);
    if (!rs)
        return 0;
    size_t n = queued_in_order(m, rs, m->queue.depth);
    unsigned ready;
    const instance_t *in = serving_instance(m, &ready);
    unsigned slots = slots_of(m, ready), busy = in ? m->in_flight : 0;
    uint64_t t0 = 0, first_free = in ? first_slot_free_ms(m, slots, now) : 0, cutoff = 0, held = 0;
    enum sched_wait_for why = SCHED_WAIT_LOAD;
    int gpu = in ? in->memory.gpu : -1;
    size_t pos;
    if (in)
        held = held_back_until(m, in, now, &cutoff);
    else
        turn_of(m, now, &t0, &why);
    if (!in && sched_uses_gpu(m) && planned_gpu(m, &pos))
        gpu = sched_state.ledger.gpus[pos].index;
    size_t k = 0, ahead = 0; /* ahead: served before a claim holds the rest back */
    for (; k < n && k < max; k++) {
        const request_t *r = rs[k];
        sched_queue_entry_t *e = &out[k];
        *e = (sched_queue_entry_t){.r = r, .m = m, .gpu = gpu, .position = (unsigned)(k + 1)};
        e->waited_ms = now > r->t_queued ? now - r->t_queued : 0;
        if (held && cutoff && r->t_queued > cutoff) { /* after the claimant's turn */
            eta_at(m, k - ahead, slots, 0, held, 0, &e->eta_start_ms, &e->eta_done_ms);
            e->waiting_for = SCHED_WAIT_SWAP;
            continue;
        }
        ahead = k + 1;
        eta_at(m, k, slots, busy, t0, first_free, &e->eta_start_ms, &e->eta_done_ms);
        e->waiting_for = !in ? why : k < (busy < slots ? slots - busy : 0) ? SCHED_WAIT_MEMORY : SCHED_WAIT_SLOT;
    }
    free(rs);
    for (size_t i = 1; i < k; i++) /* a later position never starts earlier */
        if (out[i].eta_start_ms < out[i - 1].eta_start_ms) {
            uint64_t shift = out[i - 1].eta_start_ms - out[i].eta_start_ms;
            out[i].eta_start_ms += shift;
            out[i].eta_done_ms += shift;
        }
    return k;
}

uint64_t sched_queue_eta_ms(const model_t *m)
{
    if (!sched_state.core)
        return 0;
    uint64_t now = core_now();
    unsigned ready;
    const instance_t *in = serving_instance(m, &ready);
    unsigned slots = slots_of(m, ready);
    uint64_t start, done, t0 = 0, cutoff, held = in ? held_back_until(m, in, now, &cutoff) : 0;
    enum sched_wait_for why;
    if (held) { /* a claim holds it back: after the claimant's turn (the whole queue ahead of it, at most) */
        eta_at(m, m->queue.depth, slots, 0, held, 0, &start, &done);
        return start;
    }
    if (!in)
        turn_of(m, now, &t0, &why);
    eta_at(m, m->queue.depth, slots, in ? m->in_flight : 0, t0, in ? first_slot_free_ms(m, slots, now) : 0, &start,
           &done);
    return start;
}
