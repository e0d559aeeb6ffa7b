/*
 * park_evict: who parks an idle instance, and the allocator cache given back first. Three
 * callers ask for the same thing, "free this instance's GPU memory, parked when it can be":
 *   - the scheduler's eviction (instance_evict, actions.evict; a PARKED instance evicted
 *     again goes to its next tier, park_escalate);
 *   - an admin unload (supervisor.c's model_unload and the external server's unload);
 *   - keep_alive running out (model_arm_idle_timers, on_idle_timeout: moved here from
 *     instance.c, because the expiry now parks).
 * All three go through park_or_free: cache first, then park.c's park_instance (sleep,
 * checkpoint; host memory permitting), else the caller's own next tier (park_fallback):
 * eviction -> hooks_evict (unload hook, else stop); admin -> stop (supervised) or the unload
 * hook (external; neither -> marked failed); keep_alive -> stop, as before parking existed.
 *
 * Cache first: an idle instance with a clear_cache hook that holds >= 64 MiB beyond its
 * floor (sched_instance_floor; measured or left by a request) is asked to give it back
 * before it is parked: clear_cache hook (its timeout) --2xx--> an NVML reading taken after
 * the answer (at most ten poll intervals) --> parked, booked for what it holds now (logged
 * park_cleared_cache); a failed hook parks it as it is. Meanwhile (park_clearing, cleared by
 * any state change) it is not evicted again and its memory counts as on its way; park.c's
 * instance_return_cost_ms judges the park by its floor. One that took a request meanwhile is
 * left loaded (eviction, keep_alive: the pump looks again) or stopped after its requests
 * (admin unload, as a busy instance always was).
 *
 * Calls park.c, hooks.c, instance.c and the scheduler; nothing calls back into it but the
 * hook's answer and its own timers (inst->life.idle_timer: keep_alive, then the clear's wait).
 */
#include <stdio.h>

#include "common/log.h"
#include "core/core.h"
#include "sched/scheduler.h"
#include "workers/model_state.h"
#include "workers/park_evict.h"
#include "workers/supervisor_int.h"

/* ---- the next tier when no park is made, by who asked ---------------------------------- */

static void park_fallback(instance_t *inst, enum unload_reason reason, const char *why)
{
    model_t *m = inst->model;
    if (reason == UNLOAD_EVICTED) {
        hooks_evict(inst, why);
        return;
    }
    if (inst->external) { /* admin unload of an external server: its unload hook */
        if (inst->life.state == INST_READY && instance_unload(inst, UNLOAD_ADMIN, why) == -1)
            model_set_failed(m, "external server: neither sleep nor unload hook could be called");
        return; /* -2: vramd's own shortage: the admin call is answered 503 (unload_local_failed) */
    }
    if (inst->life.state != INST_STOPPING)
        inst->life.unload_reason = reason;
    instance_stop(inst, why); /* admin, keep_alive: stopped (after its requests when busy) */
}

/* 0 parking, -2 not now (vramd's own shortage), 1 the next tier taken. */
static int park_now(instance_t *inst, enum unload_reason reason, const char *why)
{
    int rc = park_instance(inst, reason, why);
    if (rc == 0 || rc == -2)
        return rc; /* -2: eviction tries again after the hold; admin is answered 503 */
    park_fallback(inst, reason, why);
    return 1;
}

/* ---- cache cleared before the park ------------------------------------------------------ */

/* The clear is over (cleared and measured, or the hook failed): park what is left now, the
 * host booked for what NVML shows it holding. One that took a request meanwhile is left. */
static void clear_done(instance_t *inst, bool cleared)
{
    model_t *m = inst->model;
    inst->park.park_clearing = false;
    log_event(LOG_INFO, "park_cleared_cache", "model=%s instance=%u cleared=%s before=%llu after=%llu wait_ms=%llu",
              m->name, inst->id, cleared ? "true" : "false", (unsigned long long)inst->park.park_clear_before,
              (unsigned long long)inst->memory.mem.bytes, (unsigned long long)(core_now() - inst->park.park_clear_since_ms));
    if (inst->life.state == INST_READY && inst->path.in_flight > 0 && !inst->life.stop_requested &&
        inst->park.park_clear_reason == UNLOAD_ADMIN) {
        /* as model_unload does with a busy instance: supervised, stopped after its requests,
         * no new start until it is gone; external, unloaded again once it is idle */
        m->unload_requested = true;
        if (inst->external)
            model_schedule_pump(m);
        else
            park_fallback(inst, UNLOAD_ADMIN, inst->park.park_clear_why);
        return;
    }
    if (inst->life.state != INST_READY || inst->path.in_flight > 0 || inst->life.stop_requested) {
        model_schedule_pump(m); /* busy again: the waiting load looks for room anew */
        return;
    }
    park_now(inst, inst->park.park_clear_reason, inst->park.park_clear_why);
    sched_pump_all(m->core);
}

/* On inst->life.idle_timer (an instance being cleared for a park is not idle in keep_alive's
 * sense; a park stops that timer anyway): waits for an NVML reading taken after the hook
 * answered, at most ten poll intervals. */
static void clear_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    if (!inst->park.park_clearing || inst->life.state != INST_READY) /* a state change clears the flag */
        return;
    uint64_t poll = inst->model->core->cfg->gpu.poll_ms ? inst->model->core->cfg->gpu.poll_ms : 100;
    uint64_t limit = poll * 10 > 1000 ? poll * 10 : 1000;
    if (sched_snapshot_seq() >= inst->park.park_clear_seq || core_now() - inst->park.park_clear_since_ms > limit ||
        !sched_gpu_ok()) {
        clear_done(inst, true);
        return;
    }
    uv_timer_start(&inst->life.idle_timer, clear_tick, poll < PARK_RESUME_TICK_MS ? poll : PARK_RESUME_TICK_MS, 0);
}

static void on_clear_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    (void)error;
    bool ok = hook_outcome_of(status, false) == HOOK_OK; /* counted and logged (instance_call_hook) */
    if (!inst->park.park_clearing || inst->life.state != INST_READY)
        return;
    if (!ok) {
        clear_done(inst, false); /* parked (or evicted) as it is */
        return;
    }
    inst->park.park_clear_since_ms = core_now();
    inst->park.park_clear_seq = sched_snapshot_seq() + 2; /* the reading in flight now may predate the answer */
    sched_poll_now();
    clear_tick(&inst->life.idle_timer);
}

/* An idle instance about to be parked first gives back its allocator cache (clear_cache
 * hook, bounded by its timeout), so that only what remains is parked and booked on the host:
 * 0 when the hook was called (the park follows its answer), -1 when there is nothing to clear
 * or the hook cannot be called (park as it is). */
static int clear_before_park(instance_t *inst, enum unload_reason reason, const char *why)
{
    model_t *m = inst->model;
    uint64_t floor = sched_instance_floor(inst);
    if (!m->cfg->clear_cache.set || !park_would_park(inst, reason) || inst->memory.mem.gpu < 0 ||
        inst->memory.mem.bytes < floor + PARK_CLEAR_MIN_BYTES || core_now() < inst->hook.local_retry_ms)
        return -1; /* what a request left behind and no reading measured yet counts too */
    inst->park.park_clear_before = inst->memory.mem.bytes;
    inst->park.park_clear_since_ms = core_now();
    inst->park.park_clear_seq = UINT64_MAX;
    snprintf(inst->park.park_clear_why, sizeof inst->park.park_clear_why, "%s", why);
    inst->park.park_clear_reason = reason;
    log_event(LOG_INFO, "park_clear_cache", "model=%s instance=%u cached=%llu for=%s", m->name, inst->id,
              (unsigned long long)(inst->memory.mem.bytes - floor), unload_reason_name(reason));
    if (hooks_clear_cache(inst, on_clear_answer) != 0)
        return -1;
    inst->park.park_clearing = true;
    uv_timer_stop(&inst->life.idle_timer);
    return 0;
}

int park_or_free(instance_t *inst, enum unload_reason reason, const char *why)
{
    if (inst->park.park_clearing)
        return 0; /* already on its way: parked once its cache is cleared */
    if (clear_before_park(inst, reason, why) == 0)
        return 0;
    return park_now(inst, reason, why);
}

void instance_evict(instance_t *inst, const char *why)
{
    if (inst->life.state == INST_PARKED) {
        park_escalate(inst, why); /* what it still holds is needed: the next tier */
        return;
    }
    (void)park_or_free(inst, UNLOAD_EVICTED, why);
}

/* ---- keep_alive: an idle instance parked (or stopped) when it runs out ------------------ */

static void on_idle_timeout(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->path.in_flight == 0 && m->queue.depth == 0 && inst->life.state == INST_READY && !inst->life.stop_requested &&
        !model_pinned(m) && !sched_is_idle_model(inst))
        (void)park_or_free(inst, UNLOAD_IDLE, "idle");
}

void instance_keep_alive_stop(instance_t *inst)
{
    uv_timer_stop(&inst->life.idle_timer);
}

void model_arm_idle_timers(model_t *m)
{
    const model_config_t *mc = m->cfg;
    if (m->queue.depth > 0 || mc->url)
        return;
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state != INST_READY || in->path.in_flight > 0 || in->life.stop_requested || in->park.park_clearing)
            continue;
        if (model_pinned(m) || sched_is_idle_model(in))
            continue; /* an idle model stays while it is its card's (sched_idle_model.c) */
        if (mc->keep_alive_ms == 0) {
            (void)park_or_free(in, UNLOAD_IDLE, "keep_alive 0");
            continue;
        }
        if (!uv_is_active((uv_handle_t *)&in->life.idle_timer))
            uv_timer_start(&in->life.idle_timer, on_idle_timeout, mc->keep_alive_ms, 0);
    }
}
