/*
 * park: what every park tier shares (the tiers themselves, as a table, are park_tier.h:
 * sleep/wake hooks in park_sleep.c, the CUDA shim's copies in park_shim.c, the CUDA
 * driver's checkpoint in park_checkpoint.c), the
 * entry points that walk that table, and the one the scheduler calls to report memory back
 * (instance_reclaimed); the scheduler's eviction entry (instance_evict) is in park_evict.c.
 *
 *   READY --the tier's way out (host memory booked first, here)--> PARKING
 *     --the tier reports it done; NVML shows at least half gone, settled (verified
 *       reclaim)--> PARKED (what NVML still shows stays booked on the GPU; what left it is
 *       booked on the host)
 *     --the tier reports it failed--> READY, the next tier of the table, else hooks_evict
 *     --too little back within stop_timeout--> the next tier: unload hook (external with
 *        one) or stop (supervised); an external server without one is marked failed
 *   PARKED --needed (a queued request, an admin load)--> RESUMING: GPU memory booked back,
 *     the tier's way back --reported done, NVML shows it back--> READY (only now is a
 *     request dispatched; its time learned per tier: park_stats[].back_ms_ewma)
 *     --reported failed, or the memory not back within wake.timeout--> stopped (supervised,
 *        a failure counted) or marked failed (external); one found at start: its health
 *        checks decide
 *   PARKED --evicted again (what it still holds is needed)--> the next tier, as above.
 *   An external server found at start: the first tier whose found() takes it (a wake hook
 *   in case it was left asleep, its listener's driver state) brings it back before its
 *   first request.
 *
 * A park (park_instance, called by park_evict.c's park_or_free for an eviction, an admin
 * unload or keep_alive's expiry, once any cache was cleared) takes the first tier of the
 * table the model has, that pays (an eviction's: park_cost.c) and the host affords; else the
 * caller's next tier. A park over the host budget may stop older parked instances when that
 * is cheaper (park_host.c); one the host still cannot afford (host_book_park: host_memory
 * budget, MemAvailable, cgroup room) is skipped, no later tier tried (it would book the same
 * bytes), counted in park_refusals and logged as park_refused. A model with park_keep_alive
 * 0 has no park tier. Once PARKED, its host keep-alive runs (park_host.c: park_keep_alive,
 * then stopped).
 *
 * Invariants: the host entry is booked before the tier's way out starts and released by
 * instance_set_state as soon as the instance leaves PARKING/PARKED/RESUMING (however it
 * leaves); nothing is booked twice (one entry per instance, host_ledger refuses a held
 * one); while RESUMING the GPU ledger already holds the full size, so no other load can
 * take the memory that is coming back. A tier answers through park_report (set on the
 * instance before each tier call), once per way out or back.
 * Calls the table (park_tiers.c) and through it the tiers, park_host.c, park_cost.c,
 * hooks.c, instance.c, model_state.c, host_book.c; never supervisor.c or park_evict.c.
 */
#include "common/log.h"
#include "core/core.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/park.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

/* The tier inst is parked by (PARKING, PARKED, RESUMING). */
static const park_tier_ops_t *tier_ops(const instance_t *inst)
{
    return park_tier_ops(inst->park.park_tier);
}

/* What its tier measured of the current way (park_tier.h's measured): held 0 = not known. */
static void tier_measured(const instance_t *inst, uint64_t *held, uint64_t *copy_us)
{
    const park_tier_ops_t *t = tier_ops(inst);
    *held = *copy_us = 0;
    if (t && t->measured)
        t->measured(inst, held, copy_us);
}

/* Book the park of an idle instance on the host (what it holds on the GPU now) and set the
 * park fields; false (refused: counted, logged park_refused) when the host cannot afford it. */
static bool park_book(instance_t *inst, enum park_tier tier, enum unload_reason reason)
{
    model_t *m = inst->model;
    uint64_t bytes = inst->memory.mem.gpu >= 0 ? inst->memory.mem.bytes : (inst->memory.measured ? inst->memory.measured : m->cfg->memory.resident);
    enum host_verdict v = host_book_park(inst, bytes);
    if (v == HOST_OVER_BUDGET && park_host_make_room(inst, tier, bytes))
        v = host_book_park(inst, bytes); /* older parked instances stopped: their entries are free */
    if (v != HOST_FITS) {
        m->park_refusals++;
        const host_ledger_t *h = host_book(m->core->cfg);
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=%s bytes=%llu reason=%s host_free=%llu "
                  "parked=%llu", m->name, inst->id, park_tier_name(tier),
                  (unsigned long long)bytes, host_verdict_name(v), (unsigned long long)host_ledger_free(h),
                  (unsigned long long)h->parked);
        return false;
    }
    uv_timer_stop(&inst->life.idle_timer);
    inst->life.unload_reason = reason;
    inst->park.park_tier = tier;
    inst->park.park_before = bytes;
    inst->park.park_left = 0;
    inst->park.park_since_ms = core_now();
    return true;
}


/* PARKING and NVML shows the memory gone (settled): PARKED, the rest booked on the host. */
static void parked(instance_t *inst)
{
    model_t *m = inst->model;
    uint64_t left = inst->memory.mem.gpu >= 0 ? inst->memory.mem.bytes : 0;
    uint64_t before = inst->park.park_before, held, copy_us;
    tier_measured(inst, &held, &copy_us);
    if (held && held < before)
        before = held; /* the driver copies what the processes hold, not what was booked */
    inst->park.park_before = before; /* what comes back: the way back waits for half of it (wake_target) */
    uint64_t freed = before > left ? before - left : 0;
    inst->park.park_left = left;
    host_book_settle(inst, freed);
    park_learn_way_out(inst, core_now() - inst->park.park_since_ms);
    m->parks_total++;
    m->park_stats[inst->park.park_tier].parks++;
    log_event(LOG_INFO, "parked", "model=%s instance=%u tier=%s freed=%llu left_on_gpu=%llu host=%llu wait_ms=%llu "
              "copy_ms=%llu", m->name, inst->id, tier_ops(inst)->name, (unsigned long long)freed, (unsigned long long)left,
              (unsigned long long)inst->park.parked_host.bytes, (unsigned long long)(core_now() - inst->park.park_since_ms),
              (unsigned long long)(copy_us / 1000));
    core_note_event(m->core, "parked %s instance %u (%s): %llu MiB to host memory, %llu MiB left on GPU %d",
                    m->name, inst->id, tier_ops(inst)->name, (unsigned long long)(freed >> 20),
                    (unsigned long long)(left >> 20), inst->memory.gpu);
    instance_set_state(inst, INST_PARKED, tier_ops(inst)->parked_why);
    park_host_arm(inst); /* park_keep_alive: stopped when it stays parked that long */
}

void park_escalate(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    log_event(LOG_WARN, "park_escalated", "model=%s instance=%u tier=%s held=%llu reason=%s", m->name, inst->id,
              tier_ops(inst)->name,
              (unsigned long long)(inst->memory.mem.gpu >= 0 ? inst->memory.mem.bytes : 0), why);
    if (!inst->external) {
        instance_stop(inst, why); /* its exit's verified reclaim frees the ledger entry */
        return;
    }
    if (instance_unload(inst, UNLOAD_EVICTED, why) == 0)
        return;
    if (inst->life.state == INST_PARKING)
        parked(inst); /* keep what it gave back booked where it is */
    model_set_failed(m, "external server did not give its memory back after a park");
}

static void park_report(instance_t *inst, int outcome, const char *why);

/* An eviction's park tier that costs more than the reload it saves is skipped (park_cost.c). */
static bool tier_pays(instance_t *inst, enum park_tier tier, enum unload_reason reason)
{
    if (reason != UNLOAD_EVICTED || park_tier_pays(inst, tier))
        return true;
    model_t *m = inst->model;
    const park_tier_stats_t *st = &m->park_stats[tier];
    log_event(LOG_INFO, "park_skipped", "model=%s instance=%u tier=%s reason=%s way_out_ms=%llu way_back_ms=%llu "
              "load_ms=%llu", m->name, inst->id, park_tier_name(tier), "slower_than_reload",
              (unsigned long long)st->out_ms_ewma, (unsigned long long)st->back_ms_ewma,
              (unsigned long long)m->load_ms_ewma);
    return false;
}

/* Park inst by the tiers of the table from `from` on, in order: the first that can, pays
 * (judged: an eviction's) and the host affords. Returns as park_instance. */
static int park_walk(instance_t *inst, enum park_tier from, enum unload_reason reason, const char *why, bool judged)
{
    for (enum park_tier t = park_tier_first(inst, from); t != PARK_NONE; t = park_tier_first(inst, t + 1)) {
        const park_tier_ops_t *ops = park_tier_ops(t);
        if (judged && !tier_pays(inst, t, reason))
            continue;
        int rc = ops->prepare(inst, reason);
        if (rc == -1)
            continue;
        if (rc != 0)
            return rc;
        if (!park_book(inst, t, reason))
            return -1; /* the host cannot afford it: a later tier of the same bytes neither */
        inst->park.park_report = park_report;
        rc = ops->park(inst, why);
        if (rc != -1)
            return rc;
    }
    return -1;
}

int park_instance(instance_t *inst, enum unload_reason reason, const char *why)
{
    return park_walk(inst, 0, reason, why, true);
}

/* The tier's way out answered: PARKED once NVML shows the memory gone; or it failed (the
 * memory is still needed): READY, the next tier, else evicted without parking. */
static void out_reported(instance_t *inst, bool done, const char *why)
{
    model_t *m = inst->model;
    if (!done) {
        enum unload_reason reason = inst->life.unload_reason;
        enum park_tier next = inst->park.park_tier + 1;
        instance_set_state(inst, INST_READY, why); /* host entry released */
        if (park_walk(inst, next, reason, why, false) != 0)
            hooks_evict(inst, why);
        return;
    }
    m->unloads_total++;
    m->unloads_by_reason[inst->life.unload_reason]++;
    if (!sched_instance_holds_memory(inst)) {
        parked(inst); /* no GPU memory booked: the tier's answer is the answer */
        return;
    }
    sched_instance_unloading(inst); /* instance_reclaimed follows once NVML shows the memory gone */
}

void instance_reclaimed(instance_t *inst, bool ok)
{
    if (inst->life.state != INST_PARKING || (!inst->life.proc && !inst->external)) {
        hooks_reclaimed(inst, ok);
        return;
    }
    if (ok)
        parked(inst);
    else
        park_escalate(inst, tier_ops(inst)->reclaim_failed);
    sched_pump_all(inst->model->core);
}
/* ---- the way back ------------------------------------------------------------------- */

static void wake_failed(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    log_event(LOG_WARN, "wake_failed", "model=%s instance=%u reason=%s measured=%llu", m->name, inst->id, why,
              (unsigned long long)inst->memory.measured);
    if (inst->park.wake_found) {
        /* it may never have been asleep (or is not up yet): its health checks decide */
        inst->park.wake_found = false;
        instance_set_state(inst, INST_READY, "wake at start failed: health checks decide");
        uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0);
        return;
    }
    if (inst->external) {
        instance_set_state(inst, INST_PARKED, why);
        model_set_failed(m, why);
        return;
    }
    model_record_failure(m, RESTART_RELOAD_FAILED, why);
    instance_stop(inst, why);
}

/* The memory a woken instance must show before it counts as resident: what it still held
 * when parked plus at least half of what went to host memory (the reclaim's rule, mirrored). */
static uint64_t wake_target(const instance_t *inst)
{
    uint64_t gone = inst->park.park_before > inst->park.park_left ? inst->park.park_before - inst->park.park_left : 0;
    return inst->park.park_left + gone / 2;
}

static void resumed(instance_t *inst)
{
    model_t *m = inst->model;
    uint64_t now = core_now();
    uint64_t took = now - inst->park.park_since_ms, held, copy_us;
    tier_measured(inst, &held, &copy_us);
    park_tier_stats_t *st = &m->park_stats[inst->park.park_tier];
    st->back_ms_ewma = st->back_ms_ewma ? (st->back_ms_ewma * 7 + took * 3) / 10 : took;
    m->wakes_total++;
    st->returns++;
    log_event(LOG_INFO, "resumed", "model=%s instance=%u tier=%s measured=%llu wake_ms=%llu copy_ms=%llu", m->name,
              inst->id, tier_ops(inst)->name, (unsigned long long)inst->memory.measured, (unsigned long long)took,
              (unsigned long long)(copy_us / 1000));
    inst->life.ready_ms = now;
    inst->life.health_failures = 0;
    inst->park.wake_found = false;
    sched_instance_ready(inst); /* a fresh baseline before its first request */
    instance_set_state(inst, INST_READY, tier_ops(inst)->resumed_why);
    uv_timer_start(&inst->life.timer, instance_health_tick, m->cfg->health.interval_ms, 0);
    model_schedule_pump(m);
}

/* RESUMING after the tier's way back answered (wake hook's 2xx, every process restored): READY once an NVML snapshot read after the answer
 * (not one that was already on its way while the weights arrived) shows at least
 * wake_target (what the allocator had cached before the sleep need not come back). */
static void resume_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->life.state != INST_RESUMING)
        return;
    bool fresh = sched_snapshot_seq() >= inst->park.wake_seq;
    if (inst->memory.gpu_pos < 0 || !sched_gpu_ok() || (fresh && inst->memory.measured >= wake_target(inst))) {
        resumed(inst);
        return;
    }
    uint64_t limit = hooks_timeout_ms(m, HOOK_WAKE);
    if (core_now() - inst->park.park_since_ms > limit) {
        wake_failed(inst, "memory not back on the GPU within wake.timeout");
        return;
    }
    if (fresh) /* not back yet: look again at the next reading */
        inst->park.wake_seq = sched_snapshot_seq() + 1;
    if (fresh || sched_snapshot_seq() + 1 == inst->park.wake_seq)
        sched_poll_now(); /* the reading that is due: now rather than at the next poll interval */
    uint64_t poll = m->core->cfg->gpu.poll_ms ? m->core->cfg->gpu.poll_ms : 100;
    uv_timer_start(&inst->life.timer, resume_tick, poll < PARK_RESUME_TICK_MS ? poll : PARK_RESUME_TICK_MS, 0);
}


/* How a tier's call ended (park_tier.h's convention: once per way out or back). */
static void park_report(instance_t *inst, int outcome, const char *why)
{
    switch (outcome) {
    case PARK_TIER_OUT_DONE:
    case PARK_TIER_OUT_FAILED:
        if (inst->life.state == INST_PARKING)
            out_reported(inst, outcome == PARK_TIER_OUT_DONE, why);
        return;
    case PARK_TIER_BACK_DONE:
        if (inst->life.state != INST_RESUMING)
            return;
        inst->park.wake_seq = sched_snapshot_seq() + 2; /* the reading in flight now may predate the answer */
        sched_poll_now();
        resume_tick(&inst->life.timer);
        return;
    default:
        if (inst->life.state == INST_RESUMING)
            wake_failed(inst, why);
        return;
    }
}

void park_wake_found(instance_t *inst)
{
    inst->park.park_report = park_report;
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        const park_tier_ops_t *ops = park_tier_ops((enum park_tier)t);
        if (ops->found && ops->found(inst))
            return;
    }
}

void park_wake(instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->life.state != INST_PARKED || inst->hook.hook_call || park_tier_holds(inst) || m->failed ||
        core_now() < inst->hook.local_retry_ms)
        return;
    const park_tier_ops_t *t = tier_ops(inst);
    const char *lost = t->lost ? t->lost(inst) : NULL;
    if (lost) { /* a reload took its way back away while it was parked: no way back but a restart */
        if (inst->external)
            wake_failed(inst, lost);
        else
            instance_stop(inst, lost);
        return;
    }
    uint64_t back = m->cfg->memory.resident > inst->park.park_before ? m->cfg->memory.resident : inst->park.park_before;
    if (inst->memory.gpu_pos >= 0 && sched_model_uses_gpu(m->cfg)) {
        const ledger_t *l = sched_ledger();
        /* room for its memory and one request at the cheapest level it may run at, as a
         * load (sched_place): a request that fits only degraded must not keep it parked */
        uint64_t want = back + sched_smallest_estimate(m);
        uint64_t held = inst->memory.mem.gpu >= 0 ? inst->memory.mem.bytes : 0;
        uint64_t extra = want > held ? want - held : 0;
        if (!ledger_fits(l, (size_t)inst->memory.gpu_pos, extra, m)) {
            /* on its own GPU (the memory returns where it was); evictions started or a
             * wait: woken at a later pump */
            (void)sched_make_room_on(m, (size_t)inst->memory.gpu_pos, extra, SCHED_ROOM_WAKE);
            return;
        }
        if (inst->memory.mem.gpu < 0)
            sched_place_instance(inst, (size_t)inst->memory.gpu_pos);
        sched_book_resize(inst, back);
        sched_unblocked(m);
    }
    inst->park.park_since_ms = core_now();
    uv_timer_stop(&inst->life.idle_timer); /* its park_keep_alive */
    instance_set_state(inst, INST_RESUMING, "needed again");
    inst->park.park_report = park_report;
    t->resume(inst);
}
