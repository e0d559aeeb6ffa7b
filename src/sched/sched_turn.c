/*
 * sched_turn: whose turn a card is when models take turns on it (the swap-aware order).
 *
 * A model that must load (or wake) on a GPU where models with work (requests running or
 * queued) hold the memory it needs does not take the card at once: the resident models
 * keep serving their queues and their new arrivals while the newcomer's swap is not due.
 * Only models that could leave count (not pinned; an external server with an unload hook or
 * a park tier): a load that waits for a pinned model's requests is no swap.
 * A swap is due (sched_swap_due), in this order of reasons:
 *   - deadline: one of its queued requests would miss its deadline if it waited for the
 *     work in the way to finish (its way in + its run + the longest run of the models in
 *     the way + 1 s is at or past what is left);
 *   - priority: its highest queued priority is above every priority of the work in the
 *     way (the models' queued requests, and their config priority while they run one);
 *   - bound: its oldest queued request has waited longer than its max_wait (config; auto =
 *     max(60 s, 6 x its learned way in: load, or its park tier's way back)).
 * A due swap claims the card (sched_evict.c make_room_or_claim) with a cutoff: a bound's is
 * the moment of the claim, so the models in the way first serve what they had queued by
 * then (one batch); a deadline's or priority's is the start of time, so only the requests
 * already running finish. Models that fit beside each other never meet this rule: a load
 * whose room only requests (not a busy model) hold keeps the starving rule of
 * sched_evict.c.
 * When the card holds no work (the models on it idle, nothing queued), idle instances are
 * evicted as before, but for the waiting model worth most (sched_turn_waits): a due swap
 * first (deadline, priority, bound), then evicts: any before idle_only, then the higher
 * top queued priority, then the more waiting work (queued requests x the oldest one's
 * wait), then the older oldest request, then the name. That model serves its whole queue.
 * An evicts: idle_only model never claims and never evicts a model with work.
 * Also the GPU a due swap claims (the one with the least work in the way) and the swap
 * counters (per GPU and reason; the seconds from an eviction to the newcomer ready).
 * Invariants: the cutoffs keep sched_admit's ahead_of_claim and sched_evict's evictable
 * exact complements (sched_claim_cutoff_ms is their one source); every walk is over the
 * models (bounded by the config) and, for deadlines, one model's queue (queue_max).
 * Calls down only, into scheduler.c. Loop thread only.
 */
#include "sched/scheduler.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "common/list.h"
#include "core/core.h"
#include "core/request.h"
#include "sched/scheduler_int.h"

#define MAX_WAIT_AUTO_MIN_MS (60ULL * 1000)
#define MAX_WAIT_AUTO_LOADS 6
#define DEADLINE_MARGIN_MS 1000

const char *sched_swap_reason_name(enum sched_swap_reason r)
{
    static const char *const names[SCHED_SWAP_REASON_COUNT] = {
        [SCHED_SWAP_NONE] = "none",         [SCHED_SWAP_IDLE] = "idle",     [SCHED_SWAP_BOUND] = "bound",
        [SCHED_SWAP_DEADLINE] = "deadline", [SCHED_SWAP_PRIORITY] = "priority", [SCHED_SWAP_MEMORY] = "memory",
    };
    return (unsigned)r < SCHED_SWAP_REASON_COUNT && names[r] ? names[r] : "?";
}

uint64_t sched_way_in_ms(const model_t *m)
{
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if ((in->life.state == INST_PARKED || in->life.state == INST_RESUMING) && in->park.park_tier < PARK_TIER_COUNT &&
            m->park_stats[in->park.park_tier].back_ms_ewma)
            return m->park_stats[in->park.park_tier].back_ms_ewma;
    }
    return m->load_ms_ewma;
}

uint64_t sched_max_wait_ms(const model_t *m)
{
    if (m->cfg->max_wait_ms)
        return m->cfg->max_wait_ms;
    uint64_t way_in = sched_way_in_ms(m) * MAX_WAIT_AUTO_LOADS;
    return way_in > MAX_WAIT_AUTO_MIN_MS ? way_in : MAX_WAIT_AUTO_MIN_MS;
}

uint64_t sched_claim_cutoff_ms(const model_t *claimant)
{
    return claimant->claim_cutoff_ms ? claimant->claim_cutoff_ms : queue_oldest_ms(&claimant->queue);
}

/* Has om work on the card: a request running or queued? */
static bool has_work(const model_t *om) { return om->in_flight > 0 || om->queue.depth > 0; }

/* Does om hold memory on GPU pos (an instance with its entry there)? */
static bool on_gpu(const model_t *om, size_t pos)
{
    list_foreach(it, &om->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->memory.gpu_pos == (int)pos && in->memory.mem.gpu >= 0)
            return true;
    }
    return false;
}

/* The highest priority among q's entries (-1 when empty). O(QUEUE_PRIORITIES). */
static int top_priority(const queue_t *q)
{
    for (int p = QUEUE_PRIORITIES - 1; p >= 0; p--)
        if (!list_empty(&q->by_priority[p]))
            return p;
    return -1;
}

/* Can om's instances on a card be evicted at all (not pinned; an external server only with
 * an unload hook or a park tier)? A model that cannot leave is never a swap's leaver: a load
 * that waits for its requests waits under the starving rule (sched_evict.c). */
static bool can_leave(const model_t *om)
{
    const model_config_t *c = om->cfg;
    if (model_pinned(om))
        return false;
    return !c->url || c->unload.set || c->sleep.set || c->checkpoint;
}

/* The models in the way on pos: other models with work that hold memory there and could
 * leave. Their longest learned run, their highest priority, their work and their resident
 * bytes; `fixed`: the resident bytes of the other models there that cannot leave. */
typedef struct in_the_way {
    uint64_t longest_run_ms, bytes, work_ms, fixed;
    int priority;
    unsigned models;
} in_the_way_t;

static uint64_t resident_on(const model_t *om, size_t pos)
{
    uint64_t b = 0;
    list_foreach(it, &om->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->memory.gpu_pos == (int)pos && in->memory.mem.gpu >= 0)
            b += in->memory.mem.bytes;
    }
    return b;
}

static in_the_way_t work_in_the_way(const model_t *m, size_t pos)
{
    in_the_way_t w = {.priority = -1};
    list_foreach(mi, &sched_state.core->models) {
        const model_t *om = list_entry(mi, model_t, link);
        if (om == m || !on_gpu(om, pos))
            continue;
        if (!can_leave(om)) {
            w.fixed += resident_on(om, pos);
            continue;
        }
        if (!has_work(om))
            continue;
        w.models++;
        if (om->run_ms_ewma > w.longest_run_ms)
            w.longest_run_ms = om->run_ms_ewma;
        int p = top_priority(&om->queue);
        if (om->in_flight > 0 && om->cfg->priority > p)
            p = om->cfg->priority;
        if (p > w.priority)
            w.priority = p;
        uint64_t run = om->run_ms_ewma ? om->run_ms_ewma : 1;
        w.work_ms += (om->queue.depth + om->in_flight) * run / (om->cfg->concurrency ? om->cfg->concurrency : 1);
        w.bytes += resident_on(om, pos);
    }
    return w;
}

bool sched_busy_in_way(const model_t *m, size_t pos, uint64_t need)
{
    if (pos >= sched_state.ledger.n_gpus)
        return false;
    in_the_way_t w = work_in_the_way(m, pos);
    uint64_t cap = ledger_capacity(&sched_state.ledger, pos);
    if (w.models == 0 || w.fixed >= cap || cap - w.fixed < need)
        return false; /* no model with work could leave, or its leaving would not be enough */
    uint64_t left = cap - w.fixed;
    return w.bytes >= left || left - w.bytes < need;
}

/* The earliest deadline among m's queued requests (0 = none). O(depth <= queue_max). */
static uint64_t earliest_deadline(const model_t *m)
{
    uint64_t first = 0;
    for (int p = 0; p < QUEUE_PRIORITIES; p++) {
        list_foreach(it, &m->queue.by_priority[p]) {
            const request_t *r = list_entry(it, request_t, qe.node);
            if (r->deadline_ms && (!first || r->deadline_ms < first))
                first = r->deadline_ms;
        }
    }
    return first;
}

enum sched_swap_reason sched_swap_due(const model_t *m, size_t pos, uint64_t now)
{
    if (m->cfg->evicts == CFG_EVICTS_IDLE_ONLY || m->queue.depth == 0)
        return SCHED_SWAP_NONE;
    in_the_way_t w = work_in_the_way(m, pos);
    uint64_t deadline = earliest_deadline(m);
    if (deadline) {
        uint64_t needs = sched_way_in_ms(m) + m->run_ms_ewma + w.longest_run_ms + DEADLINE_MARGIN_MS;
        if (now + needs >= deadline)
            return SCHED_SWAP_DEADLINE;
    }
    if (w.models > 0 && top_priority(&m->queue) > w.priority)
        return SCHED_SWAP_PRIORITY;
    uint64_t oldest = queue_oldest_ms(&m->queue);
    if (oldest && now > oldest && now - oldest > sched_max_wait_ms(m))
        return SCHED_SWAP_BOUND;
    return SCHED_SWAP_NONE;
}

uint64_t sched_swap_cutoff_ms(enum sched_swap_reason why, uint64_t now)
{
    switch (why) {
    case SCHED_SWAP_BOUND:
        return now; /* the models in the way serve what they had queued by now: one batch */
    case SCHED_SWAP_DEADLINE:
    case SCHED_SWAP_PRIORITY:
        return 1; /* nothing queued goes ahead: only what runs finishes */
    default:
        return 0; /* the claimant's oldest request (FIFO across models) */
    }
}

/* Does om wait for a card on pos: queued work (or an admin load) and no instance that
 * serves or is on its way to serving? */
static bool waits_for_card(const model_t *om, size_t pos, const bool allowed[LEDGER_MAX_GPUS])
{
    if ((om->queue.depth == 0 && !om->load_requested) || om->failed || om->removed || !sched_uses_gpu(om) ||
        !allowed[pos])
        return false;
    list_foreach(it, &om->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.stop_requested)
            continue;
        if (in->life.state == INST_READY || in->life.state == INST_STARTING || in->life.state == INST_RELOADING ||
            in->life.state == INST_RESUMING)
            return false;
    }
    return om->cfg->memory.resident + sched_smallest_estimate(om) <= ledger_capacity(&sched_state.ledger, pos);
}

/* A waiting model's worth on pos, compared field by field (larger first). */
typedef struct worth {
    int due;          /* 3 deadline, 2 priority, 1 bound, 0 not due */
    int evicts_any;   /* 1: evicts any, 0: idle_only */
    int priority;     /* top queued priority */
    uint64_t work;    /* queued requests x the oldest one's wait (ms) */
    uint64_t age;     /* the oldest request's wait */
} worth_t;

static worth_t worth_of(const model_t *om, size_t pos, uint64_t now)
{
    static const int due_rank[SCHED_SWAP_REASON_COUNT] = {
        [SCHED_SWAP_DEADLINE] = 3, [SCHED_SWAP_PRIORITY] = 2, [SCHED_SWAP_BOUND] = 1};
    uint64_t oldest = queue_oldest_ms(&om->queue);
    uint64_t age = oldest && now > oldest ? now - oldest : 0;
    return (worth_t){.due = due_rank[sched_swap_due(om, pos, now)],
                     .evicts_any = om->cfg->evicts != CFG_EVICTS_IDLE_ONLY,
                     .priority = top_priority(&om->queue),
                     .work = (uint64_t)om->queue.depth * age,
                     .age = age};
}

/* -1, 0, 1: a worth less than, as much as, more than b. */
static int worth_cmp(const worth_t *a, const worth_t *b)
{
    if (a->due != b->due)
        return a->due < b->due ? -1 : 1;
    if (a->evicts_any != b->evicts_any)
        return a->evicts_any < b->evicts_any ? -1 : 1;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->work != b->work)
        return a->work < b->work ? -1 : 1;
    if (a->age != b->age)
        return a->age < b->age ? -1 : 1;
    return 0;
}

bool sched_turn_before(const model_t *a, const model_t *b, size_t pos, uint64_t now)
{
    worth_t wa = worth_of(a, pos, now), wb = worth_of(b, pos, now);
    int c = worth_cmp(&wa, &wb);
    return c > 0 || (c == 0 && strcmp(a->name, b->name) < 0);
}

bool sched_turn_waits(const model_t *m, size_t pos)
{
    if (!sched_state.core || pos >= sched_state.ledger.n_gpus)
        return false;
    const ledger_gpu_t *g = &sched_state.ledger.gpus[pos];
    if (g->claimed && g->claim_holder == m)
        return false; /* its claim: its turn */
    uint64_t now = core_now();
    worth_t mine = worth_of(m, pos, now);
    list_foreach(mi, &sched_state.core->models) {
        const model_t *om = list_entry(mi, model_t, link);
        if (om == m)
            continue;
        bool allowed[LEDGER_MAX_GPUS];
        sched_allowed_mask(om, allowed);
        if (!waits_for_card(om, pos, allowed))
            continue;
        worth_t theirs = worth_of(om, pos, now);
        int c = worth_cmp(&theirs, &mine);
        if (c > 0 || (c == 0 && strcmp(om->name, m->name) < 0))
            return true;
    }
    return false;
}

bool sched_turn_gpu(const model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, size_t *pos)
{
    const ledger_t *l = &sched_state.ledger;
    bool any = false;
    uint64_t best_work = 0, best_cap = 0;
    for (size_t g = 0; g < l->n_gpus; g++) {
        uint64_t cap = ledger_capacity(l, g);
        if (!allowed[g] || cap < need)
            continue;
        uint64_t work = work_in_the_way(m, g).work_ms;
        if (!any || work < best_work || (work == best_work && cap > best_cap)) {
            any = true;
            best_work = work;
            best_cap = cap;
            *pos = g;
        }
    }
    return any;
}

/* ---- swaps counted ------------------------------------------------------------------ */

void sched_turn_swapped(size_t pos, const model_t *for_m, enum sched_swap_reason why)
{
    if (pos >= LEDGER_MAX_GPUS || (unsigned)why >= SCHED_SWAP_REASON_COUNT)
        return;
    sched_state.swaps[pos][why]++;
    if (!sched_state.swap_since_ms[pos]) {
        sched_state.swap_since_ms[pos] = core_now();
        sched_state.swap_for[pos] = for_m;
    }
}

void sched_turn_ready(const instance_t *inst)
{
    if (inst->memory.gpu_pos < 0 || inst->memory.gpu_pos >= LEDGER_MAX_GPUS)
        return;
    size_t pos = (size_t)inst->memory.gpu_pos;
    if (!sched_state.swap_since_ms[pos] || sched_state.swap_for[pos] != (const void *)inst->model)
        return;
    sched_state.swap_ms[pos] += core_now() - sched_state.swap_since_ms[pos];
    sched_state.swap_since_ms[pos] = 0;
    sched_state.swap_for[pos] = NULL;
}

bool sched_swap_figures(size_t pos, uint64_t counts[SCHED_SWAP_REASON_COUNT], uint64_t *ms)
{
    if (pos >= sched_state.ledger.n_gpus)
        return false;
    for (unsigned r = 0; r < SCHED_SWAP_REASON_COUNT; r++)
        counts[r] = sched_state.swaps[pos][r];
    *ms = sched_state.swap_ms[pos];
    return true;
}

void sched_turn_status_json(size_t pos, void *gpu_obj)
{
    cJSON *o = gpu_obj;
    const ledger_gpu_t *g = &sched_state.ledger.gpus[pos];
    const model_t *holder = g->claimed ? g->claim_holder : NULL;
    if (holder) {
        cJSON *c = cJSON_AddObjectToObject(o, "claim");
        cJSON_AddStringToObject(c, "model", holder->name);
        cJSON_AddStringToObject(c, "reason", sched_swap_reason_name((enum sched_swap_reason)holder->claim_reason));
        cJSON_AddNumberToObject(c, "bytes", (double)g->claimed);
    } else {
        cJSON_AddNullToObject(o, "claim");
    }
    cJSON *sw = cJSON_AddObjectToObject(o, "swaps");
    for (unsigned r = SCHED_SWAP_IDLE; r < SCHED_SWAP_REASON_COUNT; r++)
        cJSON_AddNumberToObject(sw, sched_swap_reason_name((enum sched_swap_reason)r), (double)sched_state.swaps[pos][r]);
    cJSON_AddNumberToObject(o, "swap_seconds", (double)sched_state.swap_ms[pos] / 1000.0);
}
