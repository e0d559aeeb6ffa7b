/*
 * sched_evict: placement and eviction. Finds a GPU for a new instance (sched_place) or
 * room for a blocked queue head on its instance's GPU (sched_blocked): it fits, idle
 * instances of other models are evicted for it, it waits (running work, memory on its way
 * back) and claims the GPU once it starves, or it can never fit. Also books an instance's
 * RESIDENT entry when it is placed and starts the verified reclaim when it unloads.
 * Which idle instances go is placer.c's choice (least expected delay); this file gives it
 * each candidate's return cost (actions.return_cost_ms: the tier evict would take, e.g. a
 * learned wake instead of a reload), its model's gap between requests and keep-alive.
 * Invariants: only idle instances are evicted (evictable), never more while memory
 * already on its way back (caches being cleared included) would cover the need, and none
 * when the idle instances' caches alone would (they are asked back instead); an eviction is always made under the
 * claimant's claim on that GPU; a queued model is evicted only for a claimant whose oldest
 * request is strictly older (the complement of sched_admit's rule, so neither waits for
 * the other); while the snapshot is stale (sched_gpu_stale) nothing is placed, woken or
 * evicted: every answer is WAIT until a fresh snapshot pumps. Calls down only, into
 * sched_admit.c and scheduler.c. Loop thread only.
 */
#include "sched/scheduler.h"

#include <stdio.h>

#include "common/log.h"
#include "core/core.h"
#include "core/request.h"
#include "sched/scheduler_int.h"

#define STARVE_MIN_MS 1000

/* ---- making room ------------------------------------------------------------------- */

/* May `in` be evicted to make room for model `for_m`? Idle (nothing in flight), not
 * pinned, not busy with a hook. A model with queued requests is normally kept (its queue
 * is about to use it), with one exception that breaks a mutual wait: `for_m` claims memory
 * (it starves, or its swap is due: sched_turn.c) and this model's oldest request was queued
 * after the claim's cutoff (sched_claim_cutoff_ms: the claimant's oldest request, or the
 * moment a bound was reached). Then this model's queued requests are blocked by that claim
 * and the claimant by this model's queue; what came first goes first, and this model
 * reloads after. */
static bool evictable(const instance_t *in, const model_t *for_m)
{
    const model_t *m = in->model;
    /* a supervised worker left unloaded with memory still held (residue): stop it */
    if (in->life.state == INST_UNLOADED && !in->external && in->life.proc && in->memory.mem.gpu >= 0 && in->memory.mem.bytes > 0 &&
        !in->hook.hook_call)
        return m->queue.depth == 0;
    /* parked (asleep) with memory still on the GPU: the next tier frees it (workers/park.c) */
    if (in->life.state == INST_PARKED && in->memory.mem.gpu >= 0 && in->memory.mem.bytes > 0 && !in->hook.hook_call &&
        (!in->external || m->cfg->unload.set))
        return m->queue.depth == 0;
    if (in->life.state != INST_READY || in->path.in_flight > 0 || in->life.stop_requested || in->memory.gpu_pos < 0 || in->hook.hook_call ||
        in->park.park_clearing)
        return false;
    if (model_pinned(m))
        return false;
    if (in->external && !m->cfg->unload.set && !m->cfg->sleep.set && !m->cfg->checkpoint)
        return false;
    if (m->queue.depth > 0) {
        uint64_t own_oldest = queue_oldest_ms(&m->queue);
        uint64_t cutoff = for_m->claiming ? sched_claim_cutoff_ms(for_m) : 0;
        if (!cutoff || !own_oldest || cutoff >= own_oldest)
            return false; /* sched_admit lets this model's work go ahead of the claim instead */
    }
    return true;
}

/* What evicting in (or its park under way) frees on its GPU: its entry less what its tier
 * leaves there. */
static uint64_t evict_frees(const instance_t *in)
{
    uint64_t leaves = sched_state.actions.evict_leaves ? sched_state.actions.evict_leaves(in) : 0;
    return in->memory.mem.bytes > leaves ? in->memory.mem.bytes - leaves : 0;
}

uint64_t sched_room_with_evictions(size_t pos)
{
    ledger_t *l = &sched_state.ledger;
    if (pos >= l->n_gpus || !sched_state.core)
        return 0;
    uint64_t room = ledger_free(l, pos);
    list_foreach(mi, &sched_state.core->models) {
        model_t *om = list_entry(mi, model_t, link);
        if (om->queue.depth > 0)
            continue; /* its queue is about to use it */
        list_foreach(ii, &om->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->memory.gpu_pos == (int)pos && in->memory.mem.gpu >= 0 && evictable(in, om))
                room += evict_frees(in);
        }
    }
    return room;
}

/* How long until in's keep-alive would free it anyway (an eviction now saves that wait). */
static uint64_t keep_alive_left(const instance_t *in, uint64_t now)
{
    uint64_t ka = in->model->cfg->keep_alive_ms;
    if (model_pinned(in->model))
        return UINT64_MAX / 4;
    uint64_t idle = now > in->path.last_used_ms ? now - in->path.last_used_ms : 0;
    return ka > idle ? ka - idle : 0;
}

/* An idle instance asked for its cache back (sched_clear_caches) less than the minimum
 * interval ago, whose cache no reading has yet shown gone: that cache is on its way back.
 * A hook that frees nothing stops counting once the interval has passed. */
static bool clearing(const instance_t *in)
{
    return in->life.state == INST_READY && in->path.in_flight == 0 && in->hook.last_clear_cache_ms &&
           core_now() - in->hook.last_clear_cache_ms < SCHED_CLEAR_CACHE_MIN_INTERVAL_MS &&
           sched_instance_cache(in) >= SCHED_YIELD_MIN_BYTES;
}

/* Memory on GPU pos that is on its way back: evicted or stopping instances whose entries
 * are still held until NVML shows the memory returned, and caches being cleared. */
static uint64_t incoming(size_t pos)
{
    uint64_t sum = 0;
    list_foreach(mi, &sched_state.core->models) {
        model_t *m = list_entry(mi, model_t, link);
        list_foreach(ii, &m->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (in->memory.gpu_pos != (int)pos || in->memory.mem.gpu < 0)
                continue;
            if (in->life.state == INST_PARKING)
                sum += evict_frees(in); /* a shim park leaves the context */
            else if (in->memory.reclaiming || in->park.park_clearing || in->life.state == INST_UNLOADING ||
                     in->life.state == INST_STOPPING || (in->life.stop_requested && in->life.state == INST_READY))
                sum += in->memory.mem.bytes;
            else if (clearing(in))
                sum += sched_instance_cache(in);
        }
    }
    return sum;
}

/* The load waiting for memory (or the request starving) claims the GPU, so that smaller
 * work of other models stops taking what it needs. */
static void claim_if_starving(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, uint64_t threshold,
                              const char *why)
{
    uint64_t now = core_now();
    uint64_t oldest = queue_oldest_ms(&m->queue);
    if (m->claiming || !oldest || now - oldest <= threshold)
        return;
    ledger_t *l = &sched_state.ledger;
    size_t best = 0;
    uint64_t cap = 0;
    bool any = false;
    for (size_t g = 0; g < l->n_gpus; g++)
        if (allowed[g] && ledger_capacity(l, g) >= cap) {
            cap = ledger_capacity(l, g);
            best = g;
            any = true;
        }
    if (any && ledger_claim(l, best, need, m) == 0) {
        m->claiming = true;
        m->claim_cutoff_ms = 0;
        m->claim_reason = SCHED_SWAP_MEMORY;
        log_event(LOG_INFO, "memory_claimed", "model=%s gpu=%d bytes=%llu waited_ms=%llu reason=%s", m->name,
                  l->gpus[best].index, (unsigned long long)need, (unsigned long long)(now - oldest), why);
    }
}

/* A load or wake that only a model with work would make room for: is that so on every
 * allowed GPU it could fit? (Then the swap rule decides, not the starving rule.) */
static bool busy_in_way_everywhere(const model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need)
{
    const ledger_t *l = &sched_state.ledger;
    bool any = false;
    for (size_t g = 0; g < l->n_gpus; g++) {
        if (!allowed[g] || ledger_capacity(l, g) < need)
            continue;
        if (!sched_busy_in_way(m, g, need))
            return false;
        any = true;
    }
    return any;
}

/* The load or wake claims the GPU where the work in its way is least once its swap is due
 * (sched_turn.c: deadline, priority, max_wait), with the cutoff its reason gives. */
static void claim_if_swap_due(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, const char *why)
{
    size_t pos;
    if (m->claiming || !sched_turn_gpu(m, allowed, need, &pos))
        return;
    uint64_t now = core_now();
    enum sched_swap_reason due = sched_swap_due(m, pos, now);
    if (due == SCHED_SWAP_NONE || ledger_claim(&sched_state.ledger, pos, need, m) != 0)
        return;
    uint64_t oldest = queue_oldest_ms(&m->queue);
    m->claiming = true;
    m->claim_cutoff_ms = sched_swap_cutoff_ms(due, now);
    m->claim_reason = (uint8_t)due;
    log_event(LOG_INFO, "memory_claimed", "model=%s gpu=%d bytes=%llu waited_ms=%llu reason=%s swap=%s", m->name,
              sched_state.ledger.gpus[pos].index, (unsigned long long)need,
              (unsigned long long)(oldest && now > oldest ? now - oldest : 0), why, sched_swap_reason_name(due));
}

/* Find room for `need` bytes for model m on one of the allowed GPUs: it fits now (FITS,
 * *gpu_pos set), or idle instances of other models are being evicted for it (EVICT), or
 * it has to wait for running work or for memory already on its way back (WAIT), or it
 * can never fit (NEVER). */
/* The idle instances that may be evicted for m, into sched_state.cands; their count. */
static size_t gather_candidates(const model_t *m)
{
    uint64_t now = core_now();
    placer_candidate_t *cands = sched_state.cands;
    size_t n = 0;
    list_foreach(mi, &sched_state.core->models) {
        model_t *om = list_entry(mi, model_t, link);
        if (om == m)
            continue;
        list_foreach(ii, &om->instances) {
            instance_t *in = list_entry(ii, instance_t, link);
            if (n >= PLACER_MAX_EVICT || !evictable(in, m))
                continue;
            cands[n++] = (placer_candidate_t){.instance = in,
                                              .gpu_pos = (size_t)in->memory.gpu_pos,
                                              .bytes = evict_frees(in),
                                              .priority = om->cfg->priority,
                                              .last_used_ms = in->path.last_used_ms,
                                              .return_cost_ms = sched_state.actions.return_cost_ms
                                                                    ? sched_state.actions.return_cost_ms(in)
                                                                    : om->load_ms_ewma,
                                              .way_out_ms = sched_state.actions.way_out_ms
                                                                ? sched_state.actions.way_out_ms(in)
                                                                : 0,
                                              .gap_ms = sched_expected_gap_ms(om),
                                              .keep_alive_left_ms = keep_alive_left(in, now),
                                              .queued = om->queue.depth};
        }
    }
    return n;
}

/* Cached memory on GPU pos that idle instances (not of m) would give back to their
 * clear_cache hook now (sched_clear_caches' choice, less those asked too recently). */
static uint64_t clearable(size_t pos, const model_t *m)
{
    uint64_t now = core_now(), sum = 0;
    list_foreach(mi, &sched_state.core->models) {
        const model_t *om = list_entry(mi, model_t, link);
        if (om == m || !om->cfg->clear_cache.set)
            continue;
        list_foreach(ii, &om->instances) {
            const instance_t *in = list_entry(ii, instance_t, link);
            uint64_t cache = sched_instance_cache(in);
            if (in->memory.gpu_pos == (int)pos && in->life.state == INST_READY && in->path.in_flight == 0 && !in->hook.hook_call &&
                !in->park.park_clearing && cache >= SCHED_YIELD_MIN_BYTES &&
                now - in->hook.last_clear_cache_ms >= SCHED_CLEAR_CACHE_MIN_INTERVAL_MS)
                sum += cache;
        }
    }
    return sum;
}

/* The cheapest tier first: when the idle instances' caches alone would make room on the
 * planned GPU, they are asked back (under m's claim, so that the memory they return is
 * m's) instead of evicting anyone. True when it did. */
static bool clear_instead_of_evicting(model_t *m, size_t pos, uint64_t need)
{
    ledger_t *l = &sched_state.ledger;
    uint64_t give = clearable(pos, m);
    if (give == 0 || ledger_free_for(l, pos, m) + give < need || ledger_claim(l, pos, need, m) != 0)
        return false;
    m->claiming = true;
    log_event(LOG_INFO, "clear_instead_of_evicting", "model=%s gpu=%d need=%llu clearable=%llu", m->name,
              l->gpus[pos].index, (unsigned long long)need, (unsigned long long)give);
    sched_clear_caches(pos, m);
    return true;
}

/* why: what asked for the room ("load waiting", "request waiting", sched_room_reason_name),
 * logged with each eviction it starts. */
/* turn: a load or a wake, which takes the card only in its turn (sched_turn_waits). */
static enum placer_result make_room(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need, size_t *gpu_pos,
                                    const char *why, bool turn)
{
    ledger_t *l = &sched_state.ledger;
    placer_candidate_t *cands = sched_state.cands;
    size_t n = gather_candidates(m);
    placer_plan_t plan;
    enum placer_result res = placer_choose(l, allowed, need, m, cands, n, &plan);
    if (res == PLACER_FITS) {
        *gpu_pos = plan.gpu_pos;
        return res;
    }
    if (res == PLACER_NEVER)
        return res;
    /* memory already on its way back may be enough: do not evict more while it comes */
    for (size_t g = 0; g < l->n_gpus; g++)
        if (allowed[g] && incoming(g) > 0 && ledger_free_for(l, g, m) + incoming(g) >= need)
            return PLACER_WAIT;
    /* not its turn: a waiting model worth more takes the card first (sched_turn.c) */
    if (res == PLACER_EVICT && turn && sched_turn_waits(m, plan.gpu_pos))
        return PLACER_WAIT;
    if (res == PLACER_EVICT && clear_instead_of_evicting(m, plan.gpu_pos, need))
        return PLACER_WAIT;
    if (res == PLACER_EVICT) {
        enum sched_swap_reason swap = m->claiming && m->claim_reason ? (enum sched_swap_reason)m->claim_reason
                                      : turn                         ? SCHED_SWAP_IDLE
                                                                     : SCHED_SWAP_MEMORY;
        if (ledger_claim(l, plan.gpu_pos, need, m) != 0)
            return PLACER_WAIT; /* another waiter holds this GPU's claim */
        if (!m->claiming) {
            m->claim_cutoff_ms = 0;
            m->claim_reason = (uint8_t)swap;
        }
        m->claiming = true;
        if (plan.n_evict > 0)
            sched_turn_swapped(plan.gpu_pos, m, swap);
        for (size_t i = 0; i < plan.n_evict; i++) {
            instance_t *victim = (instance_t *)cands[plan.evict[i]].instance;
            char evict_why[160];
            snprintf(evict_why, sizeof evict_why, "evicted for %s", m->name);
            log_event(LOG_INFO, "eviction", "model=%s instance=%u gpu=%d bytes=%llu for=%s reason=%s",
                      victim->model->name, victim->id, victim->memory.gpu, (unsigned long long)victim->memory.mem.bytes, m->name,
                      why);
            core_note_event(sched_state.core, "evicting %s from GPU %d for %s", victim->model->name, victim->memory.gpu,
                            m->name);
            sched_state.actions.evict(victim, evict_why);
        }
        return res;
    }
    for (size_t g = 0; g < l->n_gpus; g++)
        if (allowed[g])
            sched_clear_caches(g, m);
    return res;
}

/* make_room, and when it must wait, claim the memory once the model has waited longer than
 * its learned load time (a claimant may evict what it could not before: evictable). */
static enum placer_result make_room_or_claim(model_t *m, const bool allowed[LEDGER_MAX_GPUS], uint64_t need,
                                             size_t *gpu_pos, const char *why, bool turn)
{
    enum placer_result res = make_room(m, allowed, need, gpu_pos, why, turn);
    if (res != PLACER_WAIT || m->cfg->evicts == CFG_EVICTS_IDLE_ONLY)
        return res; /* idle_only: it never claims, so it never holds back or evicts work */
    bool was_claiming = m->claiming;
    if (turn && busy_in_way_everywhere(m, allowed, need)) {
        claim_if_swap_due(m, allowed, need, why); /* models take turns on the card */
    } else {
        uint64_t threshold = m->load_ms_ewma > STARVE_MIN_MS ? m->load_ms_ewma : STARVE_MIN_MS;
        claim_if_starving(m, allowed, need, threshold, why);
    }
    if (!was_claiming && m->claiming)
        res = make_room(m, allowed, need, gpu_pos, why, turn);
    return res;
}

/* Room for a new instance of m and one request at the cheapest level it can serve. */
static uint64_t place_need(const model_t *m)
{
    return m->cfg->memory.resident + sched_smallest_estimate(m);
}

enum placer_result sched_place(model_t *m, size_t *gpu_pos)
{
    *gpu_pos = 0;
    if (!sched_uses_gpu(m))
        return PLACER_FITS;
    if (!sched_state.ok || sched_state.ledger.n_gpus == 0 || sched_gpu_stale())
        return PLACER_WAIT;
    bool allowed[LEDGER_MAX_GPUS];
    sched_allowed_mask(m, allowed);
    return make_room_or_claim(m, allowed, place_need(m), gpu_pos, "load waiting", true);
}

const char *sched_room_reason_name(enum sched_room_reason why)
{
    static const char *const names[SCHED_ROOM_REASON_COUNT] = {
        [SCHED_ROOM_WAKE] = "wake waiting",
        [SCHED_ROOM_SHIM_GRANT] = "shim grant",
    };
    return (unsigned)why < SCHED_ROOM_REASON_COUNT && names[why] ? names[why] : "?";
}

enum placer_result sched_make_room_on(model_t *m, size_t gpu_pos, uint64_t extra, enum sched_room_reason why)
{
    if (!sched_state.ok || gpu_pos >= sched_state.ledger.n_gpus || sched_gpu_stale())
        return PLACER_WAIT;
    bool only[LEDGER_MAX_GPUS] = {false};
    only[gpu_pos] = true;
    size_t pos;
    return make_room_or_claim(m, only, extra, &pos, sched_room_reason_name(why), why == SCHED_ROOM_WAKE);
}

enum placer_result sched_place_dry(const model_t *m, sched_room_t *out)
{
    *out = (sched_room_t){0};
    if (!sched_uses_gpu(m))
        return PLACER_FITS;
    if (!sched_state.ok || sched_state.ledger.n_gpus == 0 || sched_gpu_stale())
        return PLACER_WAIT;
    const ledger_t *l = &sched_state.ledger;
    bool allowed[LEDGER_MAX_GPUS];
    sched_allowed_mask(m, allowed);
    out->need = place_need(m);
    for (size_t g = 0; g < l->n_gpus; g++) {
        uint64_t free = allowed[g] ? ledger_free_for(l, g, m) : 0;
        if (allowed[g] && ledger_capacity(l, g) > out->largest_capacity)
            out->largest_capacity = ledger_capacity(l, g);
        if (allowed[g] && (free > out->free || out->capacity == 0)) {
            out->free = free;
            out->capacity = ledger_capacity(l, g);
        }
    }
    size_t n = gather_candidates(m);
    placer_plan_t plan;
    return placer_choose(l, allowed, out->need, m, sched_state.cands, n, &plan);
}

bool sched_request_fits_now(const instance_t *inst)
{
    const model_t *m = inst->model;
    if (inst->memory.gpu_pos < 0 || !sched_uses_gpu(m))
        return true;
    if (!sched_state.ok)
        return false;
    uint64_t est = sched_request_estimate(m);
    uint64_t cache = sched_instance_cache(inst);
    uint64_t avail = cache > inst->memory.credit_used ? cache - inst->memory.credit_used : 0;
    uint64_t need = est - (est < avail ? est : avail);
    if (sched_gpu_stale())
        return need == 0; /* as sched_admit: only what is booked already */
    return ledger_fits(&sched_state.ledger, (size_t)inst->memory.gpu_pos, need, m);
}

void sched_blocked(model_t *m, request_t *r, instance_t *inst)
{
    if (inst->memory.gpu_pos < 0 || !sched_state.ok || sched_gpu_stale())
        return; /* stale: no eviction or claim on figures that may be wrong */
    /* it waits for the claimant, whose own blocked path clears this instance's cache once
     * it is idle; the claimant's admission or the next snapshot pumps it again */
    if (sched_yields_to_claim(r, inst))
        return;
    uint64_t est = sched_request_need(m, r);
    uint64_t cache = sched_instance_cache(inst);
    uint64_t avail = cache > inst->memory.credit_used ? cache - inst->memory.credit_used : 0;
    uint64_t need = est - (est < avail ? est : avail);
    /* Memory the last request left cached is lent only once a snapshot has measured it.
     * When that unverified part would cover this request, evicting another model for it
     * would be a waste (a reload later): measure now, the snapshot pumps again. */
    if (inst->memory.unverified > 0 && sched_state.gpu &&
        need <= inst->memory.unverified + ledger_free_for(&sched_state.ledger, (size_t)inst->memory.gpu_pos, m)) {
        gpu_poll_now(sched_state.gpu);
        return;
    }
    bool only[LEDGER_MAX_GPUS] = {false};
    only[inst->memory.gpu_pos] = true;
    size_t pos;
    enum placer_result res = make_room(m, only, need, &pos, "request waiting", false);
    if (res == PLACER_FITS) {
        model_schedule_pump(m); /* e.g. the claim it needed is now its own */
        return;
    }
    if (res == PLACER_WAIT && m->cfg->evicts != CFG_EVICTS_IDLE_ONLY) {
        uint64_t threshold = m->run_ms_ewma > STARVE_MIN_MS ? m->run_ms_ewma : STARVE_MIN_MS;
        bool was_claiming = m->claiming;
        claim_if_starving(m, only, need, threshold, "request waiting");
        if (!was_claiming && m->claiming && make_room(m, only, need, &pos, "request waiting", false) == PLACER_FITS)
            model_schedule_pump(m);
    }
}

/* ---- an instance's resident entry ---------------------------------------------------- */

void sched_place_instance(instance_t *inst, size_t gpu_pos)
{
    model_t *m = inst->model;
    if (!sched_uses_gpu(m) || gpu_pos >= sched_state.ledger.n_gpus) {
        inst->memory.gpu_pos = -1;
        return;
    }
    sched_unblocked(m);
    inst->memory.gpu_pos = (int)gpu_pos;
    inst->memory.gpu = sched_state.ledger.gpus[gpu_pos].index;
    ledger_force(&sched_state.ledger, gpu_pos, &inst->memory.mem, LEDGER_RESIDENT, m->cfg->memory.resident, m->name,
                 inst);
}

void sched_instance_ready(instance_t *inst)
{
    sched_turn_ready(inst);
    inst->memory.baseline = 0;
    if (inst->memory.gpu_pos < 0 || !sched_state.ok || !sched_state.gpu)
        return;
    inst->memory.baseline_pending = true;
    gpu_poll_now(sched_state.gpu);
}

void sched_instance_unloading(instance_t *inst)
{
    if (inst->memory.mem.gpu < 0)
        return;
    inst->memory.reclaim_last = UINT64_MAX;
    inst->memory.reclaim_stable = 0;
    inst->memory.reclaiming = true;
    inst->memory.reclaim_since_ms = core_now();
    if (sched_state.gpu)
        gpu_poll_now(sched_state.gpu);
}

bool sched_instance_holds_memory(const instance_t *inst) { return inst->memory.mem.gpu >= 0; }
