/*
 * park: the sleep/wake eviction tier (SPEC 4.1), and the entry points the scheduler calls
 * to make room (instance_evict) and to report memory back (instance_reclaimed).
 *
 *   READY --sleep hook (host memory booked first)--> PARKING
 *     --NVML shows at least half gone, settled (verified reclaim)--> PARKED
 *        (what NVML still shows stays booked on the GPU; what left it is booked on the host)
 *     --too little back within stop_timeout--> the next tier: unload hook (external with
 *        one) or stop (supervised); an external server without one is marked failed
 *   PARKED --needed (a queued request, an admin load)--> RESUMING: GPU memory booked back,
 *     wake hook called --NVML shows it back--> READY (only now is a request dispatched)
 *     --wake fails or the memory is not back within wake.timeout--> stopped (supervised,
 *        a failure counted) or marked failed (external)
 *   PARKED --evicted again (what it still holds is needed)--> the next tier, as above.
 *   An external server with a wake hook, found at start (a vramd that stopped while it was
 *   parked leaves it asleep): READY --wake hook--> RESUMING --> READY before its first
 *   request (waking an awake vLLM or SGLang is a no-op); a failed wake leaves it to its
 *   health checks.
 *
 * Eviction (instance_evict) takes the cheapest tier the model has and the host affords:
 * sleep, else unload hook, else stop (hooks.c). A park the host cannot afford
 * (host_book_park: host_memory budget, MemAvailable, cgroup room) is skipped, counted in
 * park_refusals and logged as park_refused.
 *
 * Invariants: the host entry is booked before the sleep hook is called and released by
 * instance_set_state as soon as the instance leaves PARKING/PARKED/RESUMING (however it
 * leaves); nothing is booked twice (one entry per instance, host_ledger refuses a held
 * one); while RESUMING the GPU ledger already holds the full size, so no other load can
 * take the memory that is coming back. One hook call at a time (inst->hook_call).
 * Calls hooks.c, instance.c, model_state.c, host_book.c, never supervisor.c.
 */
#include <stdio.h>

#include "common/log.h"
#include "core/core.h"
#include "gpu/host_mem.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/process.h"
#include "workers/supervisor.h"
#include "workers/supervisor_int.h"

#define PARK_SLEEP_TIMEOUT_MS 30000
#define PARK_WAKE_TIMEOUT_MS 60000
#define PARK_RESUME_TICK_MS 5   /* how often a RESUMING instance looks for a fresh reading */
#define PARK_WAKE_GUESS_MS 1000 /* a wake's cost before one was measured (vLLM: 0.1-6 s) */

static bool can_sleep(const instance_t *inst)
{
    const model_config_t *mc = inst->model->cfg;
    return mc->sleep.set && mc->wake.set && inst->state == INST_READY && inst->in_flight == 0 &&
           !inst->stop_requested && !inst->hook_call;
}

static void on_sleep_answer(void *ctx, int status, const char *body, size_t len, const char *error);

int park_sleep(instance_t *inst, enum unload_reason reason, const char *why)
{
    if (!can_sleep(inst))
        return -1;
    model_t *m = inst->model;
    if (core_now() < inst->local_retry_ms) { /* a hook just failed for vramd's own shortage */
        if (reason == UNLOAD_ADMIN) {
            m->unload_local_failed = true;
            core_emit(m->core, CORE_EV_MODEL_CHANGED, m); /* answers a waiting admin call */
        }
        return -2;
    }
    uint64_t bytes = inst->mem.gpu >= 0 ? inst->mem.bytes : (inst->measured ? inst->measured : m->cfg->memory.resident);
    enum host_verdict v = host_book_park(inst, bytes);
    if (v != HOST_FITS) {
        m->park_refusals++;
        const host_ledger_t *h = host_book(m->core->cfg);
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=%s bytes=%llu reason=%s host_free=%llu "
                  "parked=%llu", m->name, inst->id, "sleep", (unsigned long long)bytes, host_verdict_name(v),
                  (unsigned long long)host_ledger_free(h), (unsigned long long)h->parked);
        return -1;
    }
    uv_timer_stop(&inst->idle_timer);
    inst->unload_reason = reason;
    inst->park_tier = PARK_SLEEP;
    inst->park_before = bytes;
    inst->park_left = 0;
    inst->park_since_ms = core_now();
    instance_set_state(inst, INST_PARKING, why);
    int rc = instance_call_hook(inst, &m->cfg->sleep, PARK_SLEEP_TIMEOUT_MS, on_sleep_answer);
    if (rc == 0)
        return 0;
    if (rc == -2 && reason == UNLOAD_ADMIN)
        m->unload_local_failed = true; /* before the state change answers the admin call */
    instance_set_state(inst, INST_READY, rc == -2 ? "sleep hook not made: vramd short of descriptors or memory"
                                                  : "sleep hook could not be called"); /* host entry released */
    return rc;
}

/* PARKING and NVML shows the memory gone (settled): PARKED, the rest booked on the host. */
static void parked(instance_t *inst)
{
    model_t *m = inst->model;
    uint64_t left = inst->mem.gpu >= 0 ? inst->mem.bytes : 0;
    uint64_t freed = inst->park_before > left ? inst->park_before - left : 0;
    inst->park_left = left;
    host_book_settle(inst, freed);
    m->parks_total++;
    log_event(LOG_INFO, "parked", "model=%s instance=%u tier=%s freed=%llu left_on_gpu=%llu host=%llu wait_ms=%llu",
              m->name, inst->id, "sleep", (unsigned long long)freed, (unsigned long long)left,
              (unsigned long long)inst->parked_host.bytes, (unsigned long long)(core_now() - inst->park_since_ms));
    core_note_event(m->core, "parked %s instance %u (sleep): %llu MiB to host memory, %llu MiB left on GPU %d",
                    m->name, inst->id, (unsigned long long)(freed >> 20), (unsigned long long)(left >> 20), inst->gpu);
    instance_set_state(inst, INST_PARKED, "asleep: memory left the GPU");
}

void park_escalate(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    log_event(LOG_WARN, "park_escalated", "model=%s instance=%u tier=%s held=%llu reason=%s", m->name, inst->id, "sleep",
              (unsigned long long)(inst->mem.gpu >= 0 ? inst->mem.bytes : 0), why);
    if (!inst->external) {
        instance_stop(inst, why); /* its exit's verified reclaim frees the ledger entry */
        return;
    }
    if (instance_unload(inst, UNLOAD_EVICTED, why) == 0)
        return;
    if (inst->state == INST_PARKING)
        parked(inst); /* keep what it gave back booked where it is */
    model_set_failed(m, "external server did not give its memory back after sleep");
}

static void on_sleep_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    bool ok = instance_hook_answered(inst, "sleep_hook_done", status, error);
    if (status == HTTP_CALL_LOCAL_SHORTAGE) { /* vramd's own shortage: nothing was asked of the server */
        instance_hook_local_shortage(inst, m->cfg->sleep.path, error);
        if (inst->state != INST_PARKING)
            return;
        if (inst->unload_reason == UNLOAD_ADMIN)
            m->unload_local_failed = true; /* before the state change answers the admin call */
        instance_set_state(inst, INST_READY, "sleep hook not made: vramd short of descriptors or memory");
        return;
    }
    if (inst->state != INST_PARKING)
        return;
    if (!ok) {
        /* it did not sleep (or says so): the memory is still needed, take the next tier */
        instance_set_state(inst, INST_READY, "sleep hook failed");
        hooks_evict(inst, "sleep hook failed");
        return;
    }
    m->unloads_total++;
    m->unloads_by_reason[inst->unload_reason]++;
    if (!sched_instance_holds_memory(inst)) {
        parked(inst); /* no GPU memory booked: the hook's 2xx is the answer */
        return;
    }
    sched_instance_unloading(inst); /* instance_reclaimed follows once NVML shows the memory gone */
}

void instance_reclaimed(instance_t *inst, bool ok)
{
    if (inst->state != INST_PARKING || (!inst->proc && !inst->external)) {
        hooks_reclaimed(inst, ok);
        return;
    }
    if (ok)
        parked(inst);
    else
        park_escalate(inst, "sleep gave too little memory back within stop_timeout");
    sched_pump_all(inst->model->core);
}

uint64_t instance_return_cost_ms(const instance_t *inst)
{
    const model_t *m = inst->model;
    if (inst->state == INST_PARKED)
        return m->load_ms_ewma; /* evicting it again means the next tier: a stop, then a start */
    if (can_sleep(inst)) {
        uint64_t bytes = inst->mem.gpu >= 0 ? inst->mem.bytes : m->cfg->memory.resident;
        const host_ledger_t *h = host_book(m->core->cfg);
        if (host_ledger_verdict(h, bytes, host_mem_room(NULL, NULL, NULL)) == HOST_FITS)
            return m->wake_ms_ewma ? m->wake_ms_ewma : PARK_WAKE_GUESS_MS;
    }
    return m->load_ms_ewma;
}

void instance_evict(instance_t *inst, const char *why)
{
    if (inst->state == INST_PARKED) {
        park_escalate(inst, why); /* what it still holds is needed: the next tier */
        return;
    }
    int rc = park_sleep(inst, UNLOAD_EVICTED, why);
    if (rc == 0 || rc == -2)
        return; /* -2: vramd's own shortage; eviction tries again after the hold */
    hooks_evict(inst, why);
}

/* ---- the way back ------------------------------------------------------------------- */

static void wake_failed(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    log_event(LOG_WARN, "wake_failed", "model=%s instance=%u reason=%s measured=%llu", m->name, inst->id, why,
              (unsigned long long)inst->measured);
    if (inst->wake_found) {
        /* it may never have been asleep (or is not up yet): its health checks decide */
        inst->wake_found = false;
        instance_set_state(inst, INST_READY, "wake at start failed: health checks decide");
        uv_timer_start(&inst->timer, instance_health_tick, 0, 0);
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
    uint64_t gone = inst->park_before > inst->park_left ? inst->park_before - inst->park_left : 0;
    return inst->park_left + gone / 2;
}

static void resumed(instance_t *inst)
{
    model_t *m = inst->model;
    uint64_t now = core_now();
    uint64_t took = now - inst->park_since_ms;
    m->wake_ms_ewma = m->wake_ms_ewma ? (m->wake_ms_ewma * 7 + took * 3) / 10 : took;
    m->wakes_total++;
    log_event(LOG_INFO, "resumed", "model=%s instance=%u tier=%s measured=%llu wake_ms=%llu", m->name, inst->id, "sleep",
              (unsigned long long)inst->measured, (unsigned long long)took);
    inst->ready_ms = now;
    inst->health_failures = 0;
    inst->wake_found = false;
    sched_instance_ready(inst); /* a fresh baseline before its first request */
    instance_set_state(inst, INST_READY, "awake: memory back on the GPU");
    uv_timer_start(&inst->timer, instance_health_tick, m->cfg->health.interval_ms, 0);
    model_schedule_pump(m);
}

/* RESUMING after the wake hook's 2xx: READY once an NVML snapshot read after the answer
 * (not one that was already on its way while the weights arrived) shows at least
 * wake_target (what the allocator had cached before the sleep need not come back). */
static void resume_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->state != INST_RESUMING)
        return;
    bool fresh = sched_snapshot_seq() >= inst->wake_seq;
    if (inst->gpu_pos < 0 || !sched_gpu_ok() || (fresh && inst->measured >= wake_target(inst))) {
        resumed(inst);
        return;
    }
    uint64_t limit = m->cfg->wake.timeout_ms ? m->cfg->wake.timeout_ms : PARK_WAKE_TIMEOUT_MS;
    if (core_now() - inst->park_since_ms > limit) {
        wake_failed(inst, "memory not back on the GPU within wake.timeout");
        return;
    }
    if (fresh) /* not back yet: look again at the next reading */
        inst->wake_seq = sched_snapshot_seq() + 1;
    if (fresh || sched_snapshot_seq() + 1 == inst->wake_seq)
        sched_poll_now(); /* the reading that is due: now rather than at the next poll interval */
    uint64_t poll = m->core->cfg->gpu.poll_ms ? m->core->cfg->gpu.poll_ms : 100;
    uv_timer_start(&inst->timer, resume_tick, poll < PARK_RESUME_TICK_MS ? poll : PARK_RESUME_TICK_MS, 0);
}

/* The wake hook was not made for vramd's own shortage: back to where it was, tried again
 * after the hold (the pump wakes a PARKED instance; a found one is left to its health checks). */
static void wake_not_made(instance_t *inst)
{
    if (inst->wake_found) {
        inst->wake_found = false;
        instance_set_state(inst, INST_READY, "wake at start not made: health checks decide");
        uv_timer_start(&inst->timer, instance_health_tick, 0, 0);
        return;
    }
    instance_set_state(inst, INST_PARKED, "wake hook not made: vramd short of descriptors or memory");
}

static void on_wake_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    bool ok = instance_hook_answered(inst, "wake_hook_done", status, error);
    if (status == HTTP_CALL_LOCAL_SHORTAGE) {
        instance_hook_local_shortage(inst, inst->model->cfg->wake.path, error);
        if (inst->state == INST_RESUMING)
            wake_not_made(inst);
        return;
    }
    if (inst->state != INST_RESUMING)
        return;
    if (!ok) {
        wake_failed(inst, "wake hook failed");
        return;
    }
    inst->wake_seq = sched_snapshot_seq() + 2; /* the reading in flight now may predate the answer */
    sched_poll_now();
    resume_tick(&inst->timer);
}

void park_wake_found(instance_t *inst)
{
    model_t *m = inst->model;
    if (!inst->external || !m->cfg->wake.set || inst->state != INST_READY || inst->hook_call)
        return;
    inst->park_tier = PARK_SLEEP;
    inst->park_before = inst->park_left = 0; /* nothing known: READY once its usage holds still */
    inst->park_since_ms = core_now();
    inst->wake_found = true;
    instance_set_state(inst, INST_RESUMING, "found at start: woken in case it was left asleep");
    int rc = instance_call_hook(inst, &m->cfg->wake, PARK_WAKE_TIMEOUT_MS, on_wake_answer);
    if (rc == -2)
        wake_not_made(inst);
    else if (rc != 0)
        wake_failed(inst, "wake hook could not be called");
}

void park_wake(instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->state != INST_PARKED || inst->hook_call || m->failed || core_now() < inst->local_retry_ms)
        return;
    if (!m->cfg->wake.set) { /* a reload took the hook away while it slept: no way back but a restart */
        if (inst->external)
            wake_failed(inst, "no wake hook any more (config reloaded)");
        else
            instance_stop(inst, "no wake hook any more (config reloaded)");
        return;
    }
    uint64_t back = m->cfg->memory.resident > inst->park_before ? m->cfg->memory.resident : inst->park_before;
    if (inst->gpu_pos >= 0 && sched_model_uses_gpu(m->cfg)) {
        ledger_t *l = sched_ledger();
        uint64_t want = back + sched_request_estimate(m);
        uint64_t held = inst->mem.gpu >= 0 ? inst->mem.bytes : 0;
        uint64_t extra = want > held ? want - held : 0;
        if (!ledger_fits(l, (size_t)inst->gpu_pos, extra, m)) {
            size_t pos;
            (void)sched_place(m, &pos); /* starts evictions when that makes room; woken at a later pump */
            return;
        }
        if (inst->mem.gpu < 0)
            sched_place_instance(inst, (size_t)inst->gpu_pos);
        ledger_resize(l, &inst->mem, back);
        sched_unblocked(m);
    }
    inst->park_since_ms = core_now();
    instance_set_state(inst, INST_RESUMING, "needed again");
    int rc = instance_call_hook(inst, &m->cfg->wake, PARK_WAKE_TIMEOUT_MS, on_wake_answer);
    if (rc == -2)
        wake_not_made(inst);
    else if (rc != 0)
        wake_failed(inst, "wake hook could not be called");
}
