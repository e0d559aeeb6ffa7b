/*
 * park_checkpoint: the checkpoint tier (park_tier.h's ops; model checkpoint: true, core->cuda
 * opened by the composition root): the CUDA driver parks the instance's processes, the same
 * states, host booking and verified reclaim as the sleep tier (park.c), with the driver in
 * place of the hooks:
 *   READY --cuda_park (lock with stop_timeout, checkpoint) of every process NVML shows holding
 *     GPU memory for the instance, all at once on the thread pool--> PARKING
 *     --all parked--> reported OUT_DONE (park.c: PARKED once NVML shows the memory gone)
 *     --one failed (lock timeout, driver error)--> the parked ones unparked again (all or
 *        nothing), then stopped (supervised) / READY and the model marked failed (external)
 *   RESUMING (GPU booked back by park.c) --cuda_unpark (restore + unlock) of each--> reported
 *     BACK_DONE (park.c: READY once NVML shows it back; restore time learned)
 *     --a restore failed (CUDA_NO_MEMORY: the memory was taken)--> stopped / marked failed
 *   An external server found at start with checkpoint and no wake hook: its listener's state
 *   is asked; one left CHECKPOINTED or LOCKED is restored before its first request.
 *
 * Invariants: one round of driver calls at a time (the state's cuda_ops); the instance is not
 * freed while a driver call is in flight (holds; release_if_gone frees it once the last
 * answers), and its state (checkpoint_state_t, park_tier.h) lives as long as the instance;
 * a failed park or restore is counted (checkpoint_failures, RESTART_PARK_FAILED) and ends
 * here, without a report. Calls the driver (gpu/cuda.h), the scheduler's process list,
 * instance.c, model_state.c; reports to park.c only through inst->park.park_report.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "core/core.h"
#include "gpu/cuda.h"
#include "proc/attrib.h"
#include "sched/scheduler.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

#define PARK_RESTORE_GUESS_BPMS 10000000ULL /* a restore before one was measured: 10 GB/s (PCIe 4 x16 ~ 20) */

/* The tier's private state of an instance (park_tier.h): the processes the driver parks
 * (NVML's list of the instance's GPU processes when the park began), the driver calls in
 * flight (they hold the instance: it is not freed before they answer) and what they said. */
typedef struct checkpoint_state {
    park_tier_state_t head;
    park_procs_t procs;
    unsigned cuda_ops;   /* driver calls in flight */
    bool cuda_no_memory; /* a restore failed for want of GPU memory (CUDA_NO_MEMORY) */
} checkpoint_state_t;

/* inst's state, made on first use; NULL when out of memory. */
static checkpoint_state_t *state_of(instance_t *inst)
{
    return park_tier_state(inst, &park_tier_checkpoint, sizeof(checkpoint_state_t));
}

static unsigned calls_in_flight(const instance_t *inst)
{
    const checkpoint_state_t *ck = park_tier_state_peek(inst, PARK_CHECKPOINT);
    return ck ? ck->cuda_ops : 0;
}

static bool checkpoint_can(const instance_t *inst)
{
    const model_t *m = inst->model;
    return m->cfg->checkpoint && m->cfg->park_keep_alive_ms != 0 && m->core->cuda && cuda_available(m->core->cuda) &&
           inst->life.state == INST_READY &&
           inst->path.in_flight == 0 && !inst->life.stop_requested && !inst->hook.hook_call && calls_in_flight(inst) == 0 &&
           inst->memory.gpu_pos >= 0;
}

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
    const checkpoint_state_t *ck = state_of(inst);
    m->checkpoint_failures++;
    log_event(LOG_WARN, event, "model=%s instance=%u pids=%u reason=%s error=%s", m->name, inst->id, ck->procs.n,
              why, ck->procs.error);
    core_note_event(m->core, "%s instance %u: %s (%s)", m->name, inst->id, why, ck->procs.error);
    if (!inst->external) {
        model_record_failure(m, RESTART_PARK_FAILED, why);
        instance_stop(inst, why); /* its exit's verified reclaim frees the GPU entry */
        return;
    }
    if (inst->life.state == INST_PARKING)
        instance_set_state(inst, INST_READY, why);
    else if (inst->life.state == INST_RESUMING)
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
    if (inst->life.state == INST_STOPPING || (!inst->life.proc && !inst->external))
        instance_maybe_free(inst);
}

/* One round of driver calls, one per parked process (park: all of them; unpark: all, or
 * only_done: those the failed park had parked). Every answer comes later, on the loop
 * (on_cuda_done); a call that cannot start counts as failed at once. */
static void cuda_round(instance_t *inst, bool park, bool only_done)
{
    model_t *m = inst->model;
    checkpoint_state_t *ck = state_of(inst);
    if (!only_done) {
        ck->procs.failed = ck->cuda_no_memory = false;
        ck->procs.error[0] = '\0';
        ck->procs.copy_us = 0;
    }
    for (unsigned i = 0; i < ck->procs.n; i++) {
        if (only_done && !ck->procs.done[i])
            continue;
        pid_t pid = ck->procs.pids[i];
        int rc = park ? cuda_park(m->core->cuda, m->core->loop, pid, lock_timeout_ms(m), on_cuda_done, inst)
                      : cuda_unpark(m->core->cuda, m->core->loop, pid, on_cuda_done, inst);
        if (rc == 0) {
            ck->cuda_ops++;
        } else if (!ck->procs.failed) {
            ck->procs.failed = true;
            ck->procs.done[i] = false;
            snprintf(ck->procs.error, sizeof ck->procs.error, "pid %d: the driver call could not be started",
                     (int)pid);
        }
    }
    if (ck->cuda_ops == 0)
        cuda_round_done(inst);
}

static void on_cuda_done(void *ctx, const cuda_result_t *res)
{
    instance_t *inst = ctx;
    checkpoint_state_t *ck = state_of(inst);
    ck->cuda_ops--;
    for (unsigned i = 0; i < ck->procs.n; i++)
        if (ck->procs.pids[i] == res->pid)
            ck->procs.done[i] = res->status == CUDA_OK;
    if (res->copy_us > ck->procs.copy_us)
        ck->procs.copy_us = res->copy_us;
    log_event(res->status == CUDA_OK ? LOG_INFO : LOG_WARN, "cuda_done",
              "model=%s instance=%u op=%s pid=%d status=%s state=%s lock_ms=%f copy_ms=%f total_ms=%f error=%s",
              inst->model->name, inst->id, cuda_op_name(res->op), (int)res->pid, cuda_status_name(res->status),
              cuda_state_name(res->state), (double)res->lock_us / 1000.0, (double)res->copy_us / 1000.0,
              (double)res->total_us / 1000.0, res->error);
    if (res->status != CUDA_OK && !ck->procs.failed) {
        ck->procs.failed = true;
        snprintf(ck->procs.error, sizeof ck->procs.error, "pid %d: %s", (int)res->pid, res->error);
    }
    if (res->status == CUDA_NO_MEMORY)
        ck->cuda_no_memory = true;
    if (ck->cuda_ops == 0)
        cuda_round_done(inst);
}

/* PARKING: every process parked, or the round failed (undo, then stop). */
static void park_round_done(instance_t *inst)
{
    checkpoint_state_t *ck = state_of(inst);
    if (ck->procs.undoing) { /* the processes the failed park had parked run again (best effort) */
        ck->procs.undoing = false;
        cuda_tier_failed(inst, "checkpoint_failed", "checkpoint failed");
        return;
    }
    if (ck->procs.failed) {
        bool any = false;
        for (unsigned i = 0; i < ck->procs.n; i++)
            any = any || ck->procs.done[i];
        if (any) { /* all or nothing */
            ck->procs.undoing = true;
            cuda_round(inst, false, true);
            return;
        }
        cuda_tier_failed(inst, "checkpoint_failed", "checkpoint failed");
        return;
    }
    inst->park.park_report(inst, PARK_TIER_OUT_DONE, "every process checkpointed");
}

/* RESUMING (checkpoint): every process restored and unlocked, reported (park.c: READY once
 * NVML shows the memory back, as after a wake); a restore that failed (the memory taken meanwhile:
 * CUDA_NO_MEMORY) stops the instance (a fresh start on demand). */
static void restore_round_done(instance_t *inst)
{
    const checkpoint_state_t *ck = state_of(inst);
    if (ck->procs.failed && inst->park.wake_found) {
        inst->park.park_report(inst, PARK_TIER_BACK_FAILED, "restore at start failed"); /* its health checks decide */
        return;
    }
    if (ck->procs.failed) {
        cuda_tier_failed(inst, "restore_failed",
                         ck->cuda_no_memory ? "restore: the GPU memory is no longer free" : "restore failed");
        return;
    }
    inst->park.park_report(inst, PARK_TIER_BACK_DONE, "every process restored");
}

/* A round ended: carry on in the state it was made for; an instance that left it meanwhile
 * (stopped, its process gone) is freed once nothing refers to it any more. */
static void cuda_round_done(instance_t *inst)
{
    if (inst->life.state == INST_PARKING)
        park_round_done(inst);
    else if (inst->life.state == INST_RESUMING && inst->park.park_tier == PARK_CHECKPOINT)
        restore_round_done(inst);
    else
        release_if_gone(inst);
}

/* Every process of the instance that holds GPU memory (NVML's list) is what a checkpoint
 * parks: -1 (logged park_refused) when there is none, or more than it can follow. */
static int checkpoint_prepare(instance_t *inst, enum unload_reason reason)
{
    (void)reason;
    model_t *m = inst->model;
    checkpoint_state_t *ck = state_of(inst);
    if (!ck) {
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=checkpoint reason=out_of_memory", m->name,
                  inst->id);
        return -2;
    }
    pid_t pids[PARK_PIDS_MAX];
    size_t n = sched_instance_gpu_pids(inst, pids, PARK_PIDS_MAX);
    if (n == 0 || n > PARK_PIDS_MAX) {
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=%s reason=%s processes=%zu", m->name, inst->id,
                  "checkpoint", n ? "too_many_processes" : "no_gpu_process", n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ck->procs.pids[i] = pids[i];
        ck->procs.done[i] = false;
    }
    ck->procs.n = (unsigned)n;
    return 0;
}

/* Park an idle READY instance by checkpointing every process prepare listed (host booked). */
static int checkpoint_park(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    checkpoint_state_t *ck = state_of(inst);
    ck->procs.measured = inst->memory.measured;
    ck->procs.undoing = false;
    instance_set_state(inst, INST_PARKING, why);
    log_event(LOG_INFO, "checkpoint_started", "model=%s instance=%u pids=%u first_pid=%d bytes=%llu lock_timeout_ms=%llu",
              m->name, inst->id, ck->procs.n, (int)ck->procs.pids[0], (unsigned long long)inst->park.park_before,
              (unsigned long long)lock_timeout_ms(m));
    cuda_round(inst, true, false);
    return 0;
}

/* RESUMING: restore + unlock of each parked process. */
static void checkpoint_resume(instance_t *inst)
{
    checkpoint_state_t *ck = state_of(inst); /* made by prepare or at the find */
    if (!inst->model->core->cuda) {
        snprintf(ck->procs.error, sizeof ck->procs.error, "no CUDA driver handle");
        cuda_tier_failed(inst, "restore_failed", "restore failed");
        return;
    }
    cuda_round(inst, false, false);
}

/* The driver's state of an external server's process, asked at start: one a vramd that died
 * left checkpointed (or locked) is restored before it serves (RESUMING, READY once NVML shows
 * its memory back); anything else (running, not a CUDA process, unknown) is left as it is. */
static void on_found_state(void *ctx, const cuda_result_t *res)
{
    instance_t *inst = ctx;
    model_t *m = inst->model;
    checkpoint_state_t *ck = state_of(inst);
    ck->cuda_ops--;
    bool parked = res->status == CUDA_OK && (res->state == CUDA_STATE_CHECKPOINTED || res->state == CUDA_STATE_LOCKED);
    log_event(LOG_INFO, "cuda_found", "model=%s instance=%u pid=%d status=%s state=%s", m->name, inst->id,
              (int)res->pid, cuda_status_name(res->status), cuda_state_name(res->state));
    if (!parked || inst->life.state != INST_READY || inst->hook.hook_call || ck->cuda_ops) {
        release_if_gone(inst);
        return;
    }
    inst->park.park_tier = PARK_CHECKPOINT;
    inst->park.park_before = inst->park.park_left = 0; /* nothing known: READY at the first reading after the restore */
    inst->park.park_since_ms = core_now();
    inst->park.wake_found = true;
    ck->procs.pids[0] = res->pid;
    ck->procs.done[0] = true;
    ck->procs.n = 1;
    instance_set_state(inst, INST_RESUMING, "found at start checkpointed: restored");
    cuda_round(inst, false, false);
}

static void found_checkpointed(instance_t *inst)
{
    model_t *m = inst->model;
    pid_t pid = attrib_listener(&inst->life.ident);
    checkpoint_state_t *ck = state_of(inst);
    if (pid <= 0 || !ck || ck->cuda_ops)
        return;
    if (cuda_start(m->core->cuda, m->core->loop, CUDA_OP_STATE, pid, 0, on_found_state, inst) == 0)
        ck->cuda_ops++;
}

/* An external server found at start with checkpoint (a wake hook, when it has one, is the
 * sleep tier's): its listener's driver state is asked. */
static bool checkpoint_found(instance_t *inst)
{
    model_t *m = inst->model;
    if (!inst->external || !m->cfg->checkpoint || !m->core->cuda || !cuda_available(m->core->cuda) ||
        inst->life.state != INST_READY)
        return false;
    found_checkpointed(inst);
    return true;
}

static uint64_t checkpoint_back_guess_ms(uint64_t bytes)
{
    return bytes / PARK_RESTORE_GUESS_BPMS + 1;
}

static void checkpoint_state_free(park_tier_state_t *s)
{
    free(s);
}

static bool checkpoint_holds(const instance_t *inst)
{
    return calls_in_flight(inst) > 0;
}

static void checkpoint_measured(const instance_t *inst, uint64_t *held, uint64_t *copy_us)
{
    const checkpoint_state_t *ck = park_tier_state_peek(inst, PARK_CHECKPOINT);
    *held = ck ? ck->procs.measured : 0;
    *copy_us = ck ? ck->procs.copy_us : 0;
}

const park_tier_ops_t park_tier_checkpoint = {
    .tier = PARK_CHECKPOINT,
    .name = "checkpoint",
    .back_name = "restore",
    .parked_as = "checkpointed",
    .parked_why = "checkpointed: memory left the GPU",
    .resumed_why = "restored: memory back on the GPU",
    .reclaim_failed = "checkpoint: too little memory left the GPU within stop_timeout",
    .can = checkpoint_can,
    .prepare = checkpoint_prepare,
    .park = checkpoint_park,
    .resume = checkpoint_resume,
    .found = checkpoint_found,
    .lost = NULL,
    .back_guess_ms = checkpoint_back_guess_ms,
    .state_free = checkpoint_state_free,
    .holds = checkpoint_holds,
    .measured = checkpoint_measured,
};
