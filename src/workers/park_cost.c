/*
 * park_cost: what evicting an idle instance costs, tier by tier, for the scheduler's choice
 * of victims (actions.return_cost_ms, actions.way_out_ms, actions.evict_leaves: what the
 * tier would leave on the GPU) and park.c's choice of tier.
 *
 * A tier costs twice. Its way out: from the eviction's start until NVML shows the memory
 * gone, paid now by the request that waits for the room (a checkpoint copies everything to
 * host memory first: 1.5-2.4 GB/s measured through a real driver on an H100 VM, docs/gpu.md;
 * a sleep hook copies the weights out likewise; a stop frees the memory at once). Its way
 * back: from the next request until the instance serves again (a restore, a wake, a reload,
 * a start), paid only if the model is needed again.
 *
 * Rule (docs/design.md, "Parking"): an eviction parks by a tier only when that tier's round
 * trip, way out + way back, is shorter than the reload it saves (the model's learned load
 * time); otherwise the stop (or unload hook) costs the waiting request less now and the next
 * one no more later. Both halves are learned per model and tier (EWMA 0.7/0.3, as the load
 * time): the way out by park.c when a park settles (park_learn_way_out), the way back when a
 * return settles. Until a model's way out was measured, or while its load time is unknown,
 * the park is taken (optimistic: the first park measures it). Before a way back is measured
 * the tier's own guess is used (park_tier.h's back_guess_ms: a wake 1 s, a restore at 10 GB/s).
 *
 * Also which tier an eviction would take now (park_tier_now: the first of the tier table,
 * park_tiers.c, that can be taken (its can(): configured, idle, ready; never with
 * park_keep_alive 0) and pays; the same walk as park.c's park_instance), and whether a park
 * asked for now would be made (park_would_park: an eviction's is judged by the rule above,
 * an admin unload's or keep_alive's is not, nobody waits for its way out). Reads the
 * instance, its model and the host book; writes only the learned way out
 * (model_t.park_stats). Calls the tier table, never park.c (park.c calls it).
 */
#include "core/core.h"
#include "gpu/host_mem.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/park_cost.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

/* What a park of inst would book on the host: what it holds, or only its floor when its
 * cache is cleared first (park_evict.c's clear_before_park). */
static uint64_t park_bytes_expected(const instance_t *inst)
{
    uint64_t floor = sched_instance_floor(inst);
    if (inst->memory.mem.gpu < 0)
        return inst->model->cfg->memory.resident;
    bool cleared = inst->model->cfg->clear_cache.set && inst->memory.mem.bytes >= floor + PARK_CLEAR_MIN_BYTES;
    return cleared ? floor : inst->memory.mem.bytes;
}

static uint64_t way_out_ms(const model_t *m, enum park_tier tier)
{
    return m->park_stats[tier].out_ms_ewma;
}

uint64_t park_way_back_ms(const model_t *m, enum park_tier tier, uint64_t bytes)
{
    uint64_t learned = m->park_stats[tier].back_ms_ewma;
    return learned ? learned : park_tier_ops(tier)->back_guess_ms(bytes);
}

bool park_tier_pays(const instance_t *inst, enum park_tier tier)
{
    const model_t *m = inst->model;
    uint64_t out = way_out_ms(m, tier);
    if (out == 0 || m->load_ms_ewma == 0)
        return true; /* not measured yet: the park measures it */
    return out + park_way_back_ms(m, tier, park_bytes_expected(inst)) < m->load_ms_ewma;
}

void park_learn_way_out(instance_t *inst, uint64_t took_ms)
{
    model_t *m = inst->model;
    uint64_t *learned = &m->park_stats[inst->park.park_tier].out_ms_ewma;
    *learned = *learned ? (*learned * 7 + took_ms * 3) / 10 : (took_ms ? took_ms : 1);
}

/* The park tier an eviction of inst would take now (PARK_NONE: unload hook or stop); with
 * judged false, whether it pays is not asked (an admin unload, keep_alive's expiry). */
static enum park_tier park_tier_now(const instance_t *inst, bool judged)
{
    if (inst->life.state == INST_PARKED)
        return PARK_NONE; /* evicting it again means the next tier: a stop, then a start */
    uint64_t bytes = park_bytes_expected(inst);
    const host_ledger_t *h = host_book(inst->model->core->cfg);
    bool host_fits = host_ledger_verdict(h, bytes, host_mem_room(NULL, NULL, NULL)) == HOST_FITS;
    if (!host_fits)
        return PARK_NONE;
    for (enum park_tier t = park_tier_first(inst, 0); t != PARK_NONE; t = park_tier_first(inst, t + 1))
        if (!judged || park_tier_pays(inst, t))
            return t;
    return PARK_NONE;
}

bool park_would_park(const instance_t *inst, enum unload_reason reason)
{
    return park_tier_now(inst, reason == UNLOAD_EVICTED) != PARK_NONE;
}

uint64_t instance_return_cost_ms(const instance_t *inst)
{
    const model_t *m = inst->model;
    enum park_tier tier = park_tier_now(inst, true);
    return tier == PARK_NONE ? m->load_ms_ewma : park_way_back_ms(m, tier, park_bytes_expected(inst));
}

uint64_t instance_evict_leaves(const instance_t *inst)
{
    enum park_tier tier = inst->life.state == INST_PARKING ? inst->park.park_tier : park_tier_now(inst, true);
    const park_tier_ops_t *ops = park_tier_ops(tier);
    return ops && ops->leaves ? ops->leaves(inst) : 0;
}

uint64_t instance_way_out_ms(const instance_t *inst)
{
    enum park_tier tier = park_tier_now(inst, true);
    return tier == PARK_NONE ? 0 : way_out_ms(inst->model, tier);
}
