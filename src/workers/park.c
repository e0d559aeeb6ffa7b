/*
 * park: the two park tiers (SPEC 4.1), sleep/wake hooks and the CUDA driver's checkpoint,
 * and the entry point the scheduler calls to report memory back (instance_reclaimed); the
 * scheduler's eviction entry (instance_evict) is in park_evict.c.
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
 * Checkpoint (model checkpoint: true, core->cuda opened by the composition root): the same
 * states, the same host booking and verified reclaim, with the driver in place of the hooks:
 *   READY --cuda_park (lock with stop_timeout, checkpoint) of every process NVML shows holding
 *     GPU memory for the instance, all at once on the thread pool--> PARKING
 *     --all parked, NVML shows the memory gone--> PARKED
 *     --one failed (lock timeout, driver error)--> the parked ones unparked again (all or
 *        nothing), then stopped (supervised) / READY and the model marked failed (external)
 *   PARKED --needed--> RESUMING: GPU booked back first, cuda_unpark (restore + unlock) of
 *     each --NVML shows it back--> READY (restore time learned: restore_ms_ewma)
 *     --a restore failed (CUDA_NO_MEMORY: the memory was taken)--> stopped / marked failed
 *   An external server found at start with checkpoint and no wake hook: its listener's state
 *   is asked; one left CHECKPOINTED or LOCKED is restored before its first request.
 *   The instance is not freed while a driver call is in flight (inst->cuda_ops).
 *
 * A park (park_instance, called by park_evict.c's park_or_free for an eviction, an admin
 * unload or keep_alive's expiry, once any cache was cleared) takes the cheapest tier the
 * model has and the host affords: sleep, else checkpoint; else the caller's next tier. A
 * park over the host budget may stop older parked instances when that is cheaper
 * (park_host.c); one the host still cannot afford (host_book_park: host_memory budget,
 * MemAvailable, cgroup room) is skipped, counted in park_refusals and logged as
 * park_refused. A model with park_keep_alive 0 has no park tier. Once PARKED, its host
 * keep-alive runs (park_host.c: park_keep_alive, then stopped).
 *
 * Invariants: the host entry is booked before the sleep hook is called and released by
 * instance_set_state as soon as the instance leaves PARKING/PARKED/RESUMING (however it
 * leaves); nothing is booked twice (one entry per instance, host_ledger refuses a held
 * one); while RESUMING the GPU ledger already holds the full size, so no other load can
 * take the memory that is coming back. One hook call at a time (inst->hook_call), one
 * round of driver calls at a time (inst->cuda_ops).
 * Calls hooks.c, instance.c, model_state.c, host_book.c, park_cost.c (what a tier costs, may
 * it be taken), never supervisor.c.
 */
#include <stdio.h>

#include "common/log.h"
#include "core/core.h"
#include "gpu/cuda.h"
#include "gpu/host_mem.h"
#include "proc/attrib.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "proc/process.h"
#include "workers/supervisor.h"
#include "workers/supervisor_int.h"

#define PARK_SLEEP_TIMEOUT_MS 30000
#define PARK_WAKE_TIMEOUT_MS 60000

static const char *tier_name(const instance_t *inst)
{
    return inst->park_tier == PARK_CHECKPOINT ? "checkpoint" : "sleep";
}

/* Book the park of an idle instance on the host (what it holds on the GPU now) and set the
 * park fields; false (refused: counted, logged park_refused) when the host cannot afford it. */
static bool park_book(instance_t *inst, enum park_tier tier, enum unload_reason reason)
{
    model_t *m = inst->model;
    uint64_t bytes = inst->mem.gpu >= 0 ? inst->mem.bytes : (inst->measured ? inst->measured : m->cfg->memory.resident);
    enum host_verdict v = host_book_park(inst, bytes);
    if (v == HOST_OVER_BUDGET && park_host_make_room(inst, bytes))
        v = host_book_park(inst, bytes); /* older parked instances stopped: their entries are free */
    if (v != HOST_FITS) {
        m->park_refusals++;
        const host_ledger_t *h = host_book(m->core->cfg);
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=%s bytes=%llu reason=%s host_free=%llu "
                  "parked=%llu", m->name, inst->id, tier == PARK_CHECKPOINT ? "checkpoint" : "sleep",
                  (unsigned long long)bytes, host_verdict_name(v), (unsigned long long)host_ledger_free(h),
                  (unsigned long long)h->parked);
        return false;
    }
    uv_timer_stop(&inst->idle_timer);
    inst->unload_reason = reason;
    inst->park_tier = tier;
    inst->park_before = bytes;
    inst->park_left = 0;
    inst->park_since_ms = core_now();
    inst->cuda_copy_us = 0;
    return true;
}

static void on_sleep_answer(void *ctx, int status, const char *body, size_t len, const char *error);

int park_sleep(instance_t *inst, enum unload_reason reason, const char *why)
{
    if (!park_can_sleep(inst))
        return -1;
    model_t *m = inst->model;
    if (core_now() < inst->local_retry_ms) { /* a hook just failed for vramd's own shortage */
        if (reason == UNLOAD_ADMIN) {
            m->unload_local_failed = true;
            core_emit(m->core, CORE_EV_MODEL_CHANGED, m); /* answers a waiting admin call */
        }
        return -2;
    }
    if (!park_book(inst, PARK_SLEEP, reason))
        return -1;
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
    uint64_t before = inst->park_before;
    if (inst->park_tier == PARK_CHECKPOINT && inst->park_measured && inst->park_measured < before)
        before = inst->park_measured; /* the driver copies what the processes hold, not what was booked */
    inst->park_before = before; /* what comes back: the way back waits for half of it (wake_target) */
    uint64_t freed = before > left ? before - left : 0;
    inst->park_left = left;
    host_book_settle(inst, freed);
    park_learn_way_out(inst, core_now() - inst->park_since_ms);
    m->parks_total++;
    bool ckpt = inst->park_tier == PARK_CHECKPOINT;
    if (ckpt)
        m->checkpoints_total++;
    log_event(LOG_INFO, "parked", "model=%s instance=%u tier=%s freed=%llu left_on_gpu=%llu host=%llu wait_ms=%llu "
              "copy_ms=%llu", m->name, inst->id, tier_name(inst), (unsigned long long)freed, (unsigned long long)left,
              (unsigned long long)inst->parked_host.bytes, (unsigned long long)(core_now() - inst->park_since_ms),
              (unsigned long long)(inst->cuda_copy_us / 1000));
    core_note_event(m->core, "parked %s instance %u (%s): %llu MiB to host memory, %llu MiB left on GPU %d",
                    m->name, inst->id, tier_name(inst), (unsigned long long)(freed >> 20),
                    (unsigned long long)(left >> 20), inst->gpu);
    instance_set_state(inst, INST_PARKED, ckpt ? "checkpointed: memory left the GPU" : "asleep: memory left the GPU");
    park_host_arm(inst); /* park_keep_alive: stopped when it stays parked that long */
}

void park_escalate(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    log_event(LOG_WARN, "park_escalated", "model=%s instance=%u tier=%s held=%llu reason=%s", m->name, inst->id,
              tier_name(inst),
              (unsigned long long)(inst->mem.gpu >= 0 ? inst->mem.bytes : 0), why);
    if (!inst->external) {
        instance_stop(inst, why); /* its exit's verified reclaim frees the ledger entry */
        return;
    }
    if (instance_unload(inst, UNLOAD_EVICTED, why) == 0)
        return;
    if (inst->state == INST_PARKING)
        parked(inst); /* keep what it gave back booked where it is */
    model_set_failed(m, "external server did not give its memory back after a park");
}

static int park_checkpoint(instance_t *inst, enum unload_reason reason, const char *why);

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
        enum unload_reason reason = inst->unload_reason;
        instance_set_state(inst, INST_READY, "sleep hook failed");
        if (park_checkpoint(inst, reason, "sleep hook failed") != 0)
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

/* ---- the checkpoint tier: the CUDA driver parks the instance's processes ------------- */

/* How long the driver's lock may wait for the processes' CUDA calls to stop. */
static uint64_t lock_timeout_ms(const model_t *m)
{
    return m->cfg->stop_timeout_ms ? m->cfg->stop_timeout_ms : 10000;
}

/* A checkpoint park or restore did not work out (undone where it had to be): a worker
 * failure, counted as a crash is (RESTART_PARK_FAILED: the backoff before the next start,
 * the failed state after too many, the restart metrics), and the instance is stopped
 * (supervised: a fresh start on demand) or its server marked failed (external). Whatever
 * the state change, its host entry is released by instance_set_state. */
static void cuda_tier_failed(instance_t *inst, const char *event, const char *why)
{
    model_t *m = inst->model;
    m->checkpoint_failures++;
    log_event(LOG_WARN, event, "model=%s instance=%u pids=%u reason=%s error=%s", m->name, inst->id, inst->n_park_pids,
              why, inst->cuda_error);
    core_note_event(m->core, "%s instance %u: %s (%s)", m->name, inst->id, why, inst->cuda_error);
    if (!inst->external) {
        model_record_failure(m, RESTART_PARK_FAILED, why);
        instance_stop(inst, why); /* its exit's verified reclaim frees the GPU entry */
        return;
    }
    if (inst->state == INST_PARKING)
        instance_set_state(inst, INST_READY, why);
    else if (inst->state == INST_RESUMING)
        instance_set_state(inst, INST_PARKED, why);
    model_set_failed(m, why);
}

static void on_cuda_done(void *ctx, const cuda_result_t *res);
static void cuda_round_done(instance_t *inst);

/* A driver call answered for an instance that is being stopped or whose process is gone:
 * free it now if nothing else refers to it (the call held it). A live external server's
 * instance has no process either: it is freed only once stopped. */
static void release_if_gone(instance_t *inst)
{
    if (inst->state == INST_STOPPING || (!inst->proc && !inst->external))
        instance_maybe_free(inst);
}

/* One round of driver calls, one per parked process (park: all of them; unpark: all, or
 * only_done: those the failed park had parked). Every answer comes later, on the loop
 * (on_cuda_done); a call that cannot start counts as failed at once. */
static void cuda_round(instance_t *inst, bool park, bool only_done)
{
    model_t *m = inst->model;
    if (!only_done) {
        inst->cuda_failed = inst->cuda_no_memory = false;
        inst->cuda_error[0] = '\0';
        inst->cuda_copy_us = 0;
    }
    for (unsigned i = 0; i < inst->n_park_pids; i++) {
        if (only_done && !inst->park_pid_done[i])
            continue;
        pid_t pid = inst->park_pids[i];
        int rc = park ? cuda_park(m->core->cuda, m->core->loop, pid, lock_timeout_ms(m), on_cuda_done, inst)
                      : cuda_unpark(m->core->cuda, m->core->loop, pid, on_cuda_done, inst);
        if (rc == 0) {
            inst->cuda_ops++;
        } else if (!inst->cuda_failed) {
            inst->cuda_failed = true;
            inst->park_pid_done[i] = false;
            snprintf(inst->cuda_error, sizeof inst->cuda_error, "pid %d: the driver call could not be started",
                     (int)pid);
        }
    }
    if (inst->cuda_ops == 0)
        cuda_round_done(inst);
}

static void on_cuda_done(void *ctx, const cuda_result_t *res)
{
    instance_t *inst = ctx;
    inst->cuda_ops--;
    for (unsigned i = 0; i < inst->n_park_pids; i++)
        if (inst->park_pids[i] == res->pid)
            inst->park_pid_done[i] = res->status == CUDA_OK;
    if (res->copy_us > inst->cuda_copy_us)
        inst->cuda_copy_us = res->copy_us;
    log_event(res->status == CUDA_OK ? LOG_INFO : LOG_WARN, "cuda_done",
              "model=%s instance=%u op=%s pid=%d status=%s state=%s lock_ms=%f copy_ms=%f total_ms=%f error=%s",
              inst->model->name, inst->id, cuda_op_name(res->op), (int)res->pid, cuda_status_name(res->status),
              cuda_state_name(res->state), (double)res->lock_us / 1000.0, (double)res->copy_us / 1000.0,
              (double)res->total_us / 1000.0, res->error);
    if (res->status != CUDA_OK && !inst->cuda_failed) {
        inst->cuda_failed = true;
        snprintf(inst->cuda_error, sizeof inst->cuda_error, "pid %d: %s", (int)res->pid, res->error);
    }
    if (res->status == CUDA_NO_MEMORY)
        inst->cuda_no_memory = true;
    if (inst->cuda_ops == 0)
        cuda_round_done(inst);
}

/* PARKING: every process parked, or the round failed (undo, then stop). */
static void park_round_done(instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->cuda_undoing) { /* the processes the failed park had parked run again (best effort) */
        inst->cuda_undoing = false;
        cuda_tier_failed(inst, "checkpoint_failed", "checkpoint failed");
        return;
    }
    if (inst->cuda_failed) {
        bool any = false;
        for (unsigned i = 0; i < inst->n_park_pids; i++)
            any = any || inst->park_pid_done[i];
        if (any) { /* all or nothing */
            inst->cuda_undoing = true;
            cuda_round(inst, false, true);
            return;
        }
        cuda_tier_failed(inst, "checkpoint_failed", "checkpoint failed");
        return;
    }
    m->unloads_total++;
    m->unloads_by_reason[inst->unload_reason]++;
    if (!sched_instance_holds_memory(inst)) {
        parked(inst);
        return;
    }
    sched_instance_unloading(inst); /* instance_reclaimed follows once NVML shows the memory gone */
}

static void restore_round_done(instance_t *inst);

/* A round ended: carry on in the state it was made for; an instance that left it meanwhile
 * (stopped, its process gone) is freed once nothing refers to it any more. */
static void cuda_round_done(instance_t *inst)
{
    if (inst->state == INST_PARKING)
        park_round_done(inst);
    else if (inst->state == INST_RESUMING && inst->park_tier == PARK_CHECKPOINT)
        restore_round_done(inst);
    else
        release_if_gone(inst);
}

/* Park an idle READY instance by checkpointing every process of it that holds GPU memory;
 * 0 started, -1 when it cannot (the caller takes the next tier). */
static int park_checkpoint(instance_t *inst, enum unload_reason reason, const char *why)
{
    if (!park_can_checkpoint(inst))
        return -1;
    model_t *m = inst->model;
    pid_t pids[INSTANCE_PARK_PIDS_MAX];
    size_t n = sched_instance_gpu_pids(inst, pids, INSTANCE_PARK_PIDS_MAX);
    if (n == 0 || n > INSTANCE_PARK_PIDS_MAX) {
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=%s reason=%s processes=%zu", m->name, inst->id,
                  "checkpoint", n ? "too_many_processes" : "no_gpu_process", n);
        return -1;
    }
    if (!park_book(inst, PARK_CHECKPOINT, reason))
        return -1;
    for (size_t i = 0; i < n; i++) {
        inst->park_pids[i] = pids[i];
        inst->park_pid_done[i] = false;
    }
    inst->n_park_pids = (unsigned)n;
    inst->park_measured = inst->measured;
    inst->cuda_undoing = false;
    instance_set_state(inst, INST_PARKING, why);
    log_event(LOG_INFO, "checkpoint_started", "model=%s instance=%u pids=%zu first_pid=%d bytes=%llu lock_timeout_ms=%llu",
              m->name, inst->id, n, (int)pids[0], (unsigned long long)inst->park_before,
              (unsigned long long)lock_timeout_ms(m));
    cuda_round(inst, true, false);
    return 0;
}

/* An eviction's park tier that costs more than the reload it saves is skipped (park_cost.c). */
static bool tier_pays(instance_t *inst, enum park_tier tier, enum unload_reason reason)
{
    if (reason != UNLOAD_EVICTED || park_tier_pays(inst, tier))
        return true;
    model_t *m = inst->model;
    bool ckpt = tier == PARK_CHECKPOINT;
    log_event(LOG_INFO, "park_skipped", "model=%s instance=%u tier=%s reason=%s way_out_ms=%llu way_back_ms=%llu "
              "load_ms=%llu", m->name, inst->id, ckpt ? "checkpoint" : "sleep", "slower_than_reload",
              (unsigned long long)(ckpt ? m->checkpoint_out_ms_ewma : m->sleep_out_ms_ewma),
              (unsigned long long)(ckpt ? m->restore_ms_ewma : m->wake_ms_ewma), (unsigned long long)m->load_ms_ewma);
    return false;
}

int park_instance(instance_t *inst, enum unload_reason reason, const char *why)
{
    uint64_t refused = inst->model->park_refusals;
    int rc = park_can_sleep(inst) && tier_pays(inst, PARK_SLEEP, reason) ? park_sleep(inst, reason, why) : -1;
    if (rc != -1 || inst->model->park_refusals != refused)
        return rc; /* the host could not afford the sleep: a checkpoint of the same bytes neither */
    if (park_can_checkpoint(inst) && !tier_pays(inst, PARK_CHECKPOINT, reason))
        return -1;
    return park_checkpoint(inst, reason, why);
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
        park_escalate(inst, inst->park_tier == PARK_CHECKPOINT
                                ? "checkpoint: too little memory left the GPU within stop_timeout"
                                : "sleep gave too little memory back within stop_timeout");
    sched_pump_all(inst->model->core);
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
    bool ckpt = inst->park_tier == PARK_CHECKPOINT;
    uint64_t *learned = ckpt ? &m->restore_ms_ewma : &m->wake_ms_ewma;
    *learned = *learned ? (*learned * 7 + took * 3) / 10 : took;
    m->wakes_total++;
    if (ckpt)
        m->restores_total++;
    log_event(LOG_INFO, "resumed", "model=%s instance=%u tier=%s measured=%llu wake_ms=%llu copy_ms=%llu", m->name,
              inst->id, tier_name(inst), (unsigned long long)inst->measured, (unsigned long long)took,
              (unsigned long long)(inst->cuda_copy_us / 1000));
    inst->ready_ms = now;
    inst->health_failures = 0;
    inst->wake_found = false;
    sched_instance_ready(inst); /* a fresh baseline before its first request */
    instance_set_state(inst, INST_READY, ckpt ? "restored: memory back on the GPU" : "awake: memory back on the GPU");
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

/* RESUMING (checkpoint): every process restored and unlocked, READY once NVML shows the
 * memory back (as after a wake); a restore that failed (the memory taken meanwhile:
 * CUDA_NO_MEMORY) stops the instance (a fresh start on demand). */
static void restore_round_done(instance_t *inst)
{
    if (inst->cuda_failed && inst->wake_found) {
        wake_failed(inst, "restore at start failed"); /* its health checks decide */
        return;
    }
    if (inst->cuda_failed) {
        cuda_tier_failed(inst, "restore_failed",
                         inst->cuda_no_memory ? "restore: the GPU memory is no longer free" : "restore failed");
        return;
    }
    inst->wake_seq = sched_snapshot_seq() + 2; /* the reading in flight now may predate the restore */
    sched_poll_now();
    resume_tick(&inst->timer);
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

/* The driver's state of an external server's process, asked at start: one a vramd that died
 * left checkpointed (or locked) is restored before it serves (RESUMING, READY once NVML shows
 * its memory back); anything else (running, not a CUDA process, unknown) is left as it is. */
static void on_found_state(void *ctx, const cuda_result_t *res)
{
    instance_t *inst = ctx;
    model_t *m = inst->model;
    inst->cuda_ops--;
    bool parked = res->status == CUDA_OK && (res->state == CUDA_STATE_CHECKPOINTED || res->state == CUDA_STATE_LOCKED);
    log_event(LOG_INFO, "cuda_found", "model=%s instance=%u pid=%d status=%s state=%s", m->name, inst->id,
              (int)res->pid, cuda_status_name(res->status), cuda_state_name(res->state));
    if (!parked || inst->state != INST_READY || inst->hook_call || inst->cuda_ops) {
        release_if_gone(inst);
        return;
    }
    inst->park_tier = PARK_CHECKPOINT;
    inst->park_before = inst->park_left = 0; /* nothing known: READY at the first reading after the restore */
    inst->park_since_ms = core_now();
    inst->wake_found = true;
    inst->park_pids[0] = res->pid;
    inst->park_pid_done[0] = true;
    inst->n_park_pids = 1;
    instance_set_state(inst, INST_RESUMING, "found at start checkpointed: restored");
    cuda_round(inst, false, false);
}

static void found_checkpointed(instance_t *inst)
{
    model_t *m = inst->model;
    pid_t pid = attrib_listener(&inst->ident);
    if (pid <= 0 || inst->cuda_ops)
        return;
    if (cuda_start(m->core->cuda, m->core->loop, CUDA_OP_STATE, pid, 0, on_found_state, inst) == 0)
        inst->cuda_ops++;
}

void park_wake_found(instance_t *inst)
{
    model_t *m = inst->model;
    if (inst->external && !m->cfg->wake.set && m->cfg->checkpoint && m->core->cuda && cuda_available(m->core->cuda) &&
        inst->state == INST_READY) {
        found_checkpointed(inst);
        return;
    }
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
    if (inst->state != INST_PARKED || inst->hook_call || inst->cuda_ops || m->failed ||
        core_now() < inst->local_retry_ms)
        return;
    bool ckpt = inst->park_tier == PARK_CHECKPOINT;
    if (!ckpt && !m->cfg->wake.set) { /* a reload took the hook away while it slept: no way back but a restart */
        if (inst->external)
            wake_failed(inst, "no wake hook any more (config reloaded)");
        else
            instance_stop(inst, "no wake hook any more (config reloaded)");
        return;
    }
    uint64_t back = m->cfg->memory.resident > inst->park_before ? m->cfg->memory.resident : inst->park_before;
    if (inst->gpu_pos >= 0 && sched_model_uses_gpu(m->cfg)) {
        ledger_t *l = sched_ledger();
        /* room for its memory and one request at the cheapest level it may run at, as a
         * load (sched_place): a request that fits only degraded must not keep it parked */
        uint64_t want = back + sched_smallest_estimate(m);
        uint64_t held = inst->mem.gpu >= 0 ? inst->mem.bytes : 0;
        uint64_t extra = want > held ? want - held : 0;
        if (!ledger_fits(l, (size_t)inst->gpu_pos, extra, m)) {
            /* on its own GPU (the memory returns where it was); evictions started or a
             * wait: woken at a later pump */
            (void)sched_make_room_on(m, (size_t)inst->gpu_pos, extra);
            return;
        }
        if (inst->mem.gpu < 0)
            sched_place_instance(inst, (size_t)inst->gpu_pos);
        ledger_resize(l, &inst->mem, back);
        sched_unblocked(m);
    }
    inst->park_since_ms = core_now();
    uv_timer_stop(&inst->idle_timer); /* its park_keep_alive */
    instance_set_state(inst, INST_RESUMING, "needed again");
    if (ckpt) {
        if (!m->core->cuda) {
            snprintf(inst->cuda_error, sizeof inst->cuda_error, "no CUDA driver handle");
            cuda_tier_failed(inst, "restore_failed", "restore failed");
            return;
        }
        cuda_round(inst, false, false);
        return;
    }
    int rc = instance_call_hook(inst, &m->cfg->wake, PARK_WAKE_TIMEOUT_MS, on_wake_answer);
    if (rc == -2)
        wake_not_made(inst);
    else if (rc != 0)
        wake_failed(inst, "wake hook could not be called");
}
