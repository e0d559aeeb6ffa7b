/*
 * scheduler: the scheduler's shared state and the questions answered from it alone.
 * Holds sched_state (scheduler_int.h; set up by sched_init in sched_snapshot.c), the
 * per-request and per-level estimates, whether a model can ever or now fit, predicted
 * start times, the cached-memory figures of an instance, pumping, the GPU status and
 * whether the last snapshot is stale (scheduler.h, sched_gpu_stale).
 * Invariants: this is the lowest of the scheduler's files: it calls nothing defined in
 * sched_admit.c, sched_evict.c or sched_snapshot.c, and it never changes the ledger. The
 * rules themselves (ledger entries, foreign usage, learning, claims) are in scheduler.h.
 * All of it runs on the loop thread only.
 */
#include "sched/scheduler.h"

#include <stdio.h>
#include <string.h>

#include "common/units.h"
#include "core/core.h"
#include "core/request.h"
#include "policy/request_size.h"
#include "sched/scheduler_int.h"

sched_state_t sched_state;

const ledger_t *sched_ledger(void) { return &sched_state.ledger; }
bool sched_gpu_ok(void) { return sched_state.ok; }
const char *sched_gpu_error(void) { return sched_state.error; }

uint64_t sched_stale_after_ms(void)
{
    const config_t *c = sched_state.core ? sched_state.core->cfg : NULL;
    if (!c)
        return 0;
    if (c->gpu.stale_after_ms)
        return c->gpu.stale_after_ms;
    uint64_t five = c->gpu.poll_ms * 5; /* a config not through the checks: their auto */
    return five > 1000 ? five : 1000;
}

uint64_t sched_snapshot_age_ms(void)
{
    if (!sched_state.gpu || !sched_state.fresh_ms)
        return 0;
    uint64_t now = core_now();
    return now > sched_state.fresh_ms ? now - sched_state.fresh_ms : 0;
}

bool sched_gpu_stale(void)
{
    return sched_state.gpu && sched_state.fresh_ms && sched_snapshot_age_ms() > sched_stale_after_ms();
}

bool sched_model_uses_gpu(const model_config_t *mc)
{
    return mc->memory.resident > 0 || mc->memory.per_request > 0 || mc->memory.learn;
}

bool sched_uses_gpu(const model_t *m) { return sched_model_uses_gpu(m->cfg); }

uint64_t sched_request_estimate(const model_t *m)
{
    return m->est_per_request ? m->est_per_request : m->cfg->memory.per_request;
}

uint64_t sched_level_estimate(const model_t *m, unsigned level)
{
    const model_config_t *mc = m->cfg;
    if (level > 0 && level <= mc->degrade.n_ladder && mc->degrade.ladder[level - 1].has_per_request)
        return mc->degrade.ladder[level - 1].per_request;
    return sched_request_estimate(m);
}

void sched_read_size(const model_t *m, request_t *r)
{
    if (r->size_level == r->level + 1)
        return;
    const config_memory_t *mem = &m->cfg->memory;
    uint64_t size = mem->n_size_fields
                        ? request_size_of(r->body.data, r->body.len, mem->size_fields, mem->n_size_fields)
                        : 0;
    r->size_class = est_size_class(size);
    r->size_level = r->level + 1;
}

uint64_t sched_request_need(const model_t *m, const request_t *r)
{
    unsigned cls = r->size_level == r->level + 1 ? r->size_class : 0;
    return est_get(&m->est, r->level, cls, sched_level_estimate(m, r->level), m->cfg->memory.learn);
}

uint64_t sched_request_estimate_max(const model_t *m)
{
    return est_level_max(&m->est, 0, sched_request_estimate(m), m->cfg->memory.learn);
}

uint64_t sched_smallest_estimate(const model_t *m)
{
    uint64_t per = sched_request_estimate(m);
    for (unsigned level = 1; level <= m->cfg->degrade.n_ladder; level++)
        if (sched_level_estimate(m, level) < per)
            per = sched_level_estimate(m, level);
    return per;
}

void sched_allowed_mask(const model_t *m, bool out[LEDGER_MAX_GPUS])
{
    for (size_t i = 0; i < LEDGER_MAX_GPUS; i++) {
        out[i] = false;
        if (i >= sched_state.ledger.n_gpus)
            continue;
        if (!m->cfg->gpus) {
            out[i] = true;
            continue;
        }
        for (size_t k = 0; k < m->cfg->n_gpus; k++)
            if (m->cfg->gpus[k] == sched_state.ledger.gpus[i].index)
                out[i] = true;
    }
}

uint64_t sched_largest_room(const model_t *m)
{
    bool allowed[LEDGER_MAX_GPUS];
    sched_allowed_mask(m, allowed);
    uint64_t biggest = 0;
    for (size_t i = 0; i < sched_state.ledger.n_gpus; i++) {
        const ledger_gpu_t *g = &sched_state.ledger.gpus[i];
        uint64_t room = g->total > g->headroom ? g->total - g->headroom : 0;
        if (allowed[i] && room > biggest)
            biggest = room;
    }
    return biggest;
}

bool sched_level_possible(const model_t *m, unsigned level)
{
    if (!sched_uses_gpu(m) || !sched_state.ok || sched_state.ledger.n_gpus == 0)
        return true;
    return m->cfg->memory.resident + sched_level_estimate(m, level) <= sched_largest_room(m);
}

int sched_first_possible_level(const model_t *m)
{
    if (!sched_uses_gpu(m) || !sched_state.ok || sched_state.ledger.n_gpus == 0)
        return 0;
    uint64_t room = sched_largest_room(m);
    for (unsigned level = 0; level <= m->cfg->degrade.n_ladder; level++)
        if (m->cfg->memory.resident + sched_level_estimate(m, level) <= room)
            return (int)level;
    return -1;
}

bool sched_never_fits(const model_t *m, char *why, size_t whylen)
{
    if (!sched_uses_gpu(m) || !sched_state.ok || sched_state.ledger.n_gpus == 0)
        return false;
    const model_config_t *mc = m->cfg;
    uint64_t per = sched_request_estimate(m);
    for (size_t i = 0; i < mc->degrade.n_ladder; i++)
        if (mc->degrade.ladder[i].has_per_request && mc->degrade.ladder[i].per_request < per)
            per = mc->degrade.ladder[i].per_request;
    uint64_t need = mc->memory.resident + per;
    bool allowed[LEDGER_MAX_GPUS];
    sched_allowed_mask(m, allowed);
    uint64_t biggest = 0;
    for (size_t i = 0; i < sched_state.ledger.n_gpus; i++) {
        if (!allowed[i])
            continue;
        const ledger_gpu_t *g = &sched_state.ledger.gpus[i];
        uint64_t room = g->total > g->headroom ? g->total - g->headroom : 0;
        if (room > biggest)
            biggest = room;
        if (need <= room)
            return false;
    }
    char a[32], b[32];
    units_format_size(need, a, sizeof a);
    units_format_size(biggest, b, sizeof b);
    snprintf(why, whylen, "model %s needs %s (resident + per request) but the largest allowed GPU offers %s",
             m->name, a, b);
    return true;
}

unsigned sched_level_fitting_now(const model_t *m)
{
    if (sched_gpu_stale())
        return 0; /* nothing fits on figures that may be wrong */
    for (unsigned level = 1; level <= m->cfg->degrade.n_ladder; level++) {
        uint64_t est = sched_level_estimate(m, level);
        list_foreach(it, &m->instances) {
            const instance_t *in = list_entry(it, instance_t, link);
            if (in->life.state != INST_READY || in->life.stop_requested || in->path.in_flight >= m->cfg->concurrency)
                continue;
            if (in->memory.gpu_pos < 0 || ledger_fits(&sched_state.ledger, (size_t)in->memory.gpu_pos, est, m))
                return level;
        }
    }
    return 0;
}

uint64_t sched_predicted_start_ms(const model_t *m)
{
    uint64_t run = m->run_ms_ewma;
    unsigned ready = 0;
    bool parked = false; /* coming back is its tier's way back (wake, restore: workers/park.c), not a load */
    uint64_t back = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_READY && !in->life.stop_requested)
            ready++;
        if ((in->life.state == INST_PARKED || in->life.state == INST_RESUMING) && in->park.park_tier < PARK_TIER_COUNT) {
            parked = true;
            back = m->park_stats[in->park.park_tier].back_ms_ewma;
        }
    }
    unsigned slots = m->cfg->concurrency * (ready ? ready : 1);
    uint64_t ahead = m->queue.depth + m->in_flight;
    uint64_t wait = 0;
    if (run && ahead >= slots)
        wait = ((ahead - slots) / slots + 1) * run;
    if (!ready)
        wait += parked ? back : m->load_ms_ewma; /* a first wake: not known yet, not refused for it */
    return wait;
}

/* ---- cached memory (figures; sched_admit.c asks for it back) -------------------------- */

uint64_t sched_instance_floor(const instance_t *inst)
{
    uint64_t floor = inst->model->cfg->memory.resident;
    return inst->memory.baseline > floor ? inst->memory.baseline : floor;
}

uint64_t sched_cancelled_hold_ms(const model_t *m)
{
    const config_memory_t *mc = &m->cfg->memory;
    if (!mc->cancelled_hold_auto)
        return mc->cancelled_hold_ms;
    if (!m->run_ms_ewma)
        return CANCELLED_HOLD_UNLEARNED_MS;
    uint64_t twice = 2 * m->run_ms_ewma;
    return twice < CANCELLED_HOLD_MAX_MS ? twice : CANCELLED_HOLD_MAX_MS;
}

uint64_t sched_instance_cancelled(const instance_t *inst, uint64_t now)
{
    return now < inst->memory.cancelled_until ? inst->memory.cancelled_held : 0;
}

/* Cached memory the instance really holds (measured), excluding what is only assumed
 * cached since the last snapshot and what requests let go of while it ran them may still
 * use (memory.cancelled_hold): only verified, idle cache can be lent to its next requests. */
uint64_t sched_instance_cache(const instance_t *inst)
{
    uint64_t floor = sched_instance_floor(inst) + sched_instance_cancelled(inst, core_now());
    uint64_t verified = inst->memory.mem.bytes > inst->memory.unverified ? inst->memory.mem.bytes - inst->memory.unverified : 0;
    return verified > floor ? verified - floor : 0;
}

void sched_pump_all(core_t *d)
{
    list_foreach(mi, &d->models) {
        model_t *m = list_entry(mi, model_t, link);
        /* an admin load waits for memory like a queued request does */
        if (m->queue.depth > 0 || m->load_requested)
            model_schedule_pump(m);
    }
}

/* ---- status figures (the /v1/status object is sched_status.c's) ----------------------- */

size_t sched_gpu_count(void) { return sched_state.ledger.n_gpus; }

uint64_t sched_instance_booked(const instance_t *in)
{
    if (in->memory.gpu_pos < 0)
        return 0;
    uint64_t b = in->memory.running_reserved;
    if (in->memory.mem.gpu >= 0)
        b += in->memory.mem.bytes;
    if (in->memory.grant_extra.gpu >= 0)
        b += in->memory.grant_extra.bytes;
    return b;
}

struct gpu *sched_gpu_handle(void) { return sched_state.gpu; }

double sched_model_reserved_ratio(const model_t *m)
{
    unsigned slots = m->cfg->instances * m->cfg->concurrency;
    if (!sched_uses_gpu(m))
        return slots ? (double)m->in_flight / slots : 0.0;
    uint64_t used = 0, room = 0;
    bool seen[LEDGER_MAX_GPUS] = {false};
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->memory.gpu_pos < 0 || (size_t)in->memory.gpu_pos >= sched_state.ledger.n_gpus)
            continue;
        used += in->memory.running_reserved + (in->memory.grant_extra.gpu >= 0 ? in->memory.grant_extra.bytes : 0);
        if (!seen[in->memory.gpu_pos]) {
            seen[in->memory.gpu_pos] = true;
            room += ledger_free_for(&sched_state.ledger, (size_t)in->memory.gpu_pos, m);
        }
    }
    if (used + room == 0)
        return 0.0;
    double r = (double)used / (double)(used + room);
    return r > 1.0 ? 1.0 : r;
}

bool sched_gpu_figures(size_t pos, sched_gpu_figures_t *out)
{
    memset(out, 0, sizeof *out);
    if (pos >= sched_state.ledger.n_gpus)
        return false;
    const ledger_gpu_t *g = &sched_state.ledger.gpus[pos];
    out->index = g->index;
    if (sched_state.snap) {
        for (size_t k = 0; k < sched_state.snap->n_devices; k++) {
            const gpu_device_t *dev = &sched_state.snap->devices[k];
            if (dev->index != g->index)
                continue;
            out->seen = true;
            snprintf(out->uuid, sizeof out->uuid, "%s", dev->uuid);
            snprintf(out->name, sizeof out->name, "%s", dev->name);
            out->used = dev->used;
        }
    }
    out->total = g->total;
    out->foreign = g->foreign;
    out->headroom = g->headroom;
    out->capacity = ledger_capacity(&sched_state.ledger, pos);
    out->reserved = g->reserved;
    out->free_to_admit = ledger_free(&sched_state.ledger, pos);
    out->age_ms = sched_snapshot_age_ms();
    out->stale = sched_gpu_stale();
    return true;
}

