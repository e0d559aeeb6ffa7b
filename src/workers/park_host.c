/*
 * park_host: how long a parked instance may keep its host memory, and who gives it up when
 * a new park does not fit the host budget (issue 13: the host side of the park tiers).
 *
 * Host keep-alive (model key park_keep_alive, default 30m): a PARKED supervised instance is
 * stopped once it has stayed parked that long (logged park_expired, unload reason idle); its
 * host entry is released as it leaves PARKED (instance_set_state), so the host book returns
 * to what the others hold. `forever` keeps it parked until it is needed, evicted again or
 * unloaded; 0 means the model is never parked at all (no tier's can() holds). The timer
 * is inst->life.idle_timer, free while PARKED (keep_alive runs only while READY); park_wake stops
 * it. An external server is never stopped by vramd: it stays parked.
 *
 * Room on the host: a park of N bytes over the budget (HOST_OVER_BUDGET) may stop older parked
 * instances instead of being refused, when that costs less. The cost of dropping a parked
 * instance c (stopped: its next return is a load, not a wake or restore) is the delay it is
 * expected to cause, as the eviction rule (docs/design.md) has it:
 *   (load(c) - return(c)) x p(c),  p(c) = 1 - exp(-host_keep_alive_left(c) / gap(c))
 * (gap: its learned gap between requests, at least the time since its last; never asked: 0).
 * Refusing the new park costs the same for it (by the tier it is booked for), with its whole
 * park_keep_alive ahead. Only
 * instances of no higher priority, idle (no queue: one with requests waiting is about to be
 * woken), with no hook or driver call in flight, are candidates; cheapest first (then the
 * longest parked), until the park fits. They are stopped when every one of them has a lower
 * priority, or when their summed cost is below the refusal's. Over the host's own room
 * (HOST_SHORT: MemAvailable, cgroup) nothing is stopped: a stopped process frees its host
 * memory only once it has exited, which the decision cannot wait for.
 *
 * Invariant: never more than the budget is booked: the park is booked again after the
 * stops, by host_book_park, which refuses as before when it still does not fit. The new park
 * does not wait for the stopped processes to exit: for that moment (a process's exit, bounded
 * by stop_timeout) the host's RAM holds both, within the reserve and MemAvailable checks.
 * Calls park_cost.c (a return's cost), the tier table (names), instance.c, host_book.c and the scheduler's learned
 * gap; called by park.c.
 */
#include <math.h>
#include <stdlib.h>

#include "common/log.h"
#include "core/core.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

#define HOST_ROOM_CANDIDATES 32
#define HOST_LOAD_GUESS_MS 30000      /* a load before one was timed (FIELD.md: 20-90 s) */

/* ---- host keep-alive ------------------------------------------------------------------ */

static void on_host_keep_alive(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    uint64_t ka = m->cfg->park_keep_alive_ms;
    if (inst->life.state != INST_PARKED || inst->external || ka == CONFIG_FOREVER)
        return;
    uint64_t parked_for = core_now() - inst->park.park_since_ms;
    if (ka && parked_for < ka) { /* a reload lengthened it */
        uv_timer_start(&inst->life.idle_timer, on_host_keep_alive, ka - parked_for, 0);
        return;
    }
    if (inst->hook.hook_call || park_tier_holds(inst)) { /* a call still in flight: look again shortly */
        uv_timer_start(&inst->life.idle_timer, on_host_keep_alive, 100, 0);
        return;
    }
    log_event(LOG_INFO, "park_expired", "model=%s instance=%u tier=%s parked_ms=%llu host=%llu park_keep_alive_ms=%llu",
              m->name, inst->id, park_tier_name(inst->park.park_tier),
              (unsigned long long)parked_for, (unsigned long long)inst->park.parked_host.bytes, (unsigned long long)ka);
    core_note_event(m->core, "%s instance %u parked for %llu s (park_keep_alive): stopped, host memory freed", m->name,
                    inst->id, (unsigned long long)(parked_for / 1000));
    inst->life.unload_reason = UNLOAD_IDLE;
    instance_stop(inst, "park_keep_alive"); /* leaving PARKED releases its host entry */
}

void park_host_arm(instance_t *inst)
{
    uint64_t ka = inst->model->cfg->park_keep_alive_ms;
    if (inst->external || ka == CONFIG_FOREVER || inst->life.state != INST_PARKED)
        return;
    uv_timer_start(&inst->life.idle_timer, on_host_keep_alive, ka, 0);
}

/* ---- room on the host book for a new park ------------------------------------------- */

/* The expected delay (ms) of losing c's park: (load - its return from the park) x the chance
 * it is asked for within keep_left ms. */
static double drop_cost(const instance_t *c, enum park_tier tier, uint64_t bytes, uint64_t keep_left)
{
    const model_t *m = c->model;
    uint64_t load = m->load_ms_ewma ? m->load_ms_ewma : HOST_LOAD_GUESS_MS;
    uint64_t back = park_way_back_ms(m, tier, bytes);
    uint64_t gap = sched_expected_gap_ms(m);
    double p = 0.0;
    if (gap > 0)
        p = keep_left == CONFIG_FOREVER ? 1.0 : 1.0 - exp(-(double)keep_left / (double)gap);
    return (double)(load > back ? load - back : 0) * p;
}

typedef struct host_cand {
    instance_t *inst;
    double cost;
} host_cand_t;

static int cand_cmp(const void *a, const void *b)
{
    const host_cand_t *x = a, *y = b;
    int px = x->inst->model->cfg->priority, py = y->inst->model->cfg->priority;
    if (px != py)
        return px < py ? -1 : 1;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    if (x->inst->park.park_since_ms != y->inst->park.park_since_ms)
        return x->inst->park.park_since_ms < y->inst->park.park_since_ms ? -1 : 1;
    return 0;
}

/* The parked instances that may give way to a park of `inst`, with their costs. */
static size_t candidates(instance_t *inst, host_cand_t *out, uint64_t now)
{
    size_t n = 0;
    int prio = inst->model->cfg->priority;
    list_foreach(mi, &inst->model->core->models) {
        model_t *m = list_entry(mi, model_t, link);
        if (m->cfg->priority > prio || m->queue.depth > 0)
            continue;
        list_foreach(ii, &m->instances) {
            instance_t *c = list_entry(ii, instance_t, link);
            if (c == inst || c->life.state != INST_PARKED || c->external || c->hook.hook_call || park_tier_holds(c) ||
                c->path.in_flight || !c->park.parked_host.held || n >= HOST_ROOM_CANDIDATES)
                continue;
            uint64_t ka = m->cfg->park_keep_alive_ms, left = CONFIG_FOREVER;
            if (ka != CONFIG_FOREVER) {
                uint64_t parked_for = now - c->park.park_since_ms;
                left = ka > parked_for ? ka - parked_for : 0;
            }
            out[n].inst = c;
            out[n].cost = drop_cost(c, c->park.park_tier, c->park.parked_host.bytes, left);
            n++;
        }
    }
    return n;
}

bool park_host_make_room(instance_t *inst, enum park_tier tier, uint64_t bytes)
{
    model_t *m = inst->model;
    const host_ledger_t *h = host_book(m->core->cfg);
    uint64_t free_now = host_ledger_free(h);
    uint64_t usable = h->budget > h->reserve ? h->budget - h->reserve : 0;
    if (bytes <= free_now || bytes > usable)
        return false; /* not over the budget, or never within it */
    uint64_t need = bytes - free_now, now = core_now();
    host_cand_t c[HOST_ROOM_CANDIDATES];
    size_t n = candidates(inst, c, now);
    qsort(c, n, sizeof c[0], cand_cmp);
    uint64_t freed = 0;
    double cost = 0.0;
    bool all_lower = true;
    size_t take = 0;
    while (take < n && freed < need) {
        freed += c[take].inst->park.parked_host.bytes;
        cost += c[take].cost;
        all_lower = all_lower && c[take].inst->model->cfg->priority < m->cfg->priority;
        take++;
    }
    double refusal = drop_cost(inst, tier, bytes, m->cfg->park_keep_alive_ms);
    if (freed < need || (!all_lower && cost >= refusal)) {
        log_event(LOG_INFO, "park_displace_declined", "model=%s instance=%u bytes=%llu need=%llu could_free=%llu "
                  "cost_ms=%llu refusal_cost_ms=%llu", m->name, inst->id, (unsigned long long)bytes,
                  (unsigned long long)need, (unsigned long long)freed, (unsigned long long)cost,
                  (unsigned long long)refusal);
        return false;
    }
    for (size_t i = 0; i < take; i++) {
        instance_t *v = c[i].inst;
        log_event(LOG_INFO, "park_displaced", "model=%s instance=%u for=%s host=%llu parked_ms=%llu cost_ms=%llu "
                  "refusal_cost_ms=%llu", v->model->name, v->id, m->name, (unsigned long long)v->park.parked_host.bytes,
                  (unsigned long long)(now - v->park.park_since_ms), (unsigned long long)c[i].cost,
                  (unsigned long long)refusal);
        core_note_event(m->core, "%s instance %u stopped to make host memory for parking %s", v->model->name, v->id,
                        m->name);
        v->life.unload_reason = UNLOAD_EVICTED;
        instance_stop(v, "host memory for another park"); /* leaving PARKED releases its entry */
    }
    return true;
}
