/*
 * park_shim: the shim tier (park_tier.h's ops; model shim_park: true with cuda_shim): the
 * CUDA shim inside each of the instance's processes copies the device memory it allocated at
 * fixed addresses to pinned host memory, releases it, and on the way back maps it again at
 * the same addresses (shim/shim_park.h; docs/shim.md "Parking through the shim"). The same
 * states, host booking and verified reclaim as the other tiers (park.c):
 *   READY --PARK on the control connection of every process NVML shows holding GPU memory for
 *     the instance (each must have one), all at once--> PARKING
 *     --all PARK_DONE--> reported OUT_DONE (park.c: PARKED once NVML shows the memory gone)
 *     --one PARK_FAILED (memory the shim cannot move, no host memory, calls that do not stop)
 *        or a lost connection--> the parked ones restored again (all or nothing), then
 *        reported OUT_FAILED: park.c takes the next tier (checkpoint), else evicts
 *   RESUMING (GPU booked back by park.c) --RESTORE to each parked process--> reported
 *     BACK_DONE (park.c: READY once NVML shows it back)
 *     --a restore failed or its connection was lost--> stopped: the process cannot run on
 *        (counted as a failed park: RESTART_PARK_FAILED)
 *
 * Invariants: one round of commands at a time (inst->shim_park_ops); answers for an instance
 * that left PARKING/RESUMING meanwhile are dropped; shim_control.c calls nothing once the
 * instance's shim state is dropped, so a freed instance is never called back. Shares the
 * checkpoint tier's per-process fields (park_pids, park_pid_done, cuda_failed, cuda_error,
 * cuda_copy_us): one tier parks an instance at a time. Calls shim_control.c, the scheduler's
 * process list, instance.c, model_state.c; reports to park.c only through inst->park_report.
 */
#include <stdio.h>
#include <uv.h>

#include "common/log.h"
#include "common/units.h"
#include "core/core.h"
#include "gate/shim_control.h"
#include "gate/shim_grants.h"
#include "sched/scheduler.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

#define PARK_SHIM_GUESS_BPMS 20000000ULL /* the way back before one was measured: 20 GB/s (pinned, PCIe 4 x16) */

static const char *const refusal_names[] = {
    [0] = "", [SHIM_PARK_UNMOVABLE] = "unmovable_memory", [SHIM_PARK_HOST_MEMORY] = "no_host_memory",
    [SHIM_PARK_DRIVER] = "driver_error", [SHIM_PARK_STATE] = "wrong_state", [SHIM_PARK_GPU_MEMORY] = "no_gpu_memory",
    [SHIM_PARK_BUSY] = "calls_did_not_stop"};
_Static_assert(sizeof refusal_names / sizeof refusal_names[0] == SHIM_PARK_REFUSAL_MAX + 1, "a name for every refusal");

static const char *refusal_name(uint64_t why)
{
    return why <= SHIM_PARK_REFUSAL_MAX ? refusal_names[why] : "unknown";
}

static bool shim_can(const instance_t *inst)
{
    const model_t *m = inst->model;
    pid_t pid;
    return m->cfg->shim_park && m->cfg->park_keep_alive_ms != 0 && inst->state == INST_READY && inst->in_flight == 0 &&
           !inst->stop_requested && !inst->hook_call && inst->cuda_ops == 0 && inst->shim_park_ops == 0 &&
           inst->gpu_pos >= 0 && shim_control_pids(inst, &pid, 1) == 1;
}

/* Every process NVML shows holding GPU memory for the instance must have a control
 * connection: -1 (logged park_refused) when one has none. */
static int shim_prepare(instance_t *inst, enum unload_reason reason)
{
    (void)reason;
    model_t *m = inst->model;
    pid_t gpu[INSTANCE_PARK_PIDS_MAX], ctl[SHIM_PAGE_PROCS];
    size_t n = sched_instance_gpu_pids(inst, gpu, INSTANCE_PARK_PIDS_MAX);
    size_t nc = shim_control_pids(inst, ctl, SHIM_PAGE_PROCS);
    const char *why = n == 0 ? "no_gpu_process" : n > INSTANCE_PARK_PIDS_MAX ? "too_many_processes" : NULL;
    for (size_t i = 0; i < n && !why && i < INSTANCE_PARK_PIDS_MAX; i++) {
        bool has = false;
        for (size_t k = 0; k < nc; k++)
            has = has || ctl[k] == gpu[i];
        if (!has)
            why = "process_without_shim";
    }
    if (why) {
        log_event(LOG_INFO, "park_refused", "model=%s instance=%u tier=shim reason=%s processes=%zu", m->name,
                  inst->id, why, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        inst->park_pids[i] = gpu[i];
        inst->park_pid_done[i] = false;
    }
    inst->n_park_pids = (unsigned)n;
    return 0;
}

static void on_answer(instance_t *inst, pid_t pid, const shim_msg_t *a);

/* One command to each process (only_done: those the failed park had parked). */
static void shim_round(instance_t *inst, enum shim_msg_type cmd, bool only_done)
{
    if (!only_done) {
        inst->cuda_failed = false;
        inst->cuda_error[0] = '\0';
        inst->cuda_copy_us = 0;
    }
    inst->shim_round_ns = uv_hrtime();
    inst->shim_round_bytes = 0;
    for (unsigned i = 0; i < inst->n_park_pids; i++) {
        if (only_done && !inst->park_pid_done[i])
            continue;
        if (shim_control_command(inst, inst->park_pids[i], cmd, on_answer) == 0) {
            inst->shim_park_ops++;
        } else if (!inst->cuda_failed) {
            inst->cuda_failed = true;
            snprintf(inst->cuda_error, sizeof inst->cuda_error, "pid %d: no control connection",
                     (int)inst->park_pids[i]);
        }
    }
}

static void shim_failed(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    m->checkpoint_failures++;
    log_event(LOG_WARN, "shim_restore_failed", "model=%s instance=%u reason=%s error=%s", m->name, inst->id,
              why, inst->cuda_error);
    core_note_event(m->core, "%s instance %u: %s (%s)", m->name, inst->id, why, inst->cuda_error);
    model_record_failure(m, RESTART_PARK_FAILED, why);
    instance_stop(inst, why);
}

/* Every answer of a round is in: carry on in the state it was made for. */
static void round_done(instance_t *inst)
{
    log_event(inst->cuda_failed ? LOG_WARN : LOG_INFO, "shim_round", "model=%s instance=%u op=%s ok=%s bytes=%llu "
              "copy_ms=%f total_ms=%f", inst->model->name, inst->id,
              inst->state == INST_PARKING && !inst->cuda_undoing ? "park" : "restore",
              inst->cuda_failed ? "false" : "true", (unsigned long long)inst->shim_round_bytes,
              (double)inst->cuda_copy_us / 1000.0, (double)(uv_hrtime() - inst->shim_round_ns) / 1e6);
    if (inst->state == INST_PARKING && inst->cuda_undoing) {
        inst->cuda_undoing = false;
        inst->park_report(inst, PARK_TIER_OUT_FAILED, "shim park failed: the next tier");
        return;
    }
    if (inst->state == INST_PARKING && inst->cuda_failed) {
        bool any = false;
        for (unsigned i = 0; i < inst->n_park_pids; i++)
            any = any || inst->park_pid_done[i];
        if (any) { /* all or nothing: the parked ones come back first */
            inst->cuda_undoing = true;
            shim_round(inst, SHIM_MSG_RESTORE, true);
            if (inst->shim_park_ops)
                return;
            inst->cuda_undoing = false;
        }
        inst->park_report(inst, PARK_TIER_OUT_FAILED, "shim park failed: the next tier");
        return;
    }
    if (inst->state == INST_PARKING) {
        inst->park_report(inst, PARK_TIER_OUT_DONE, "every process parked by its shim");
        return;
    }
    if (inst->state == INST_RESUMING && inst->park_tier == PARK_SHIM) {
        if (inst->cuda_failed)
            shim_failed(inst, "shim restore failed");
        else
            inst->park_report(inst, PARK_TIER_BACK_DONE, "every process restored by its shim");
    }
}

static void on_answer(instance_t *inst, pid_t pid, const shim_msg_t *a)
{
    model_t *m = inst->model;
    if (inst->shim_park_ops)
        inst->shim_park_ops--;
    bool ok = a && (a->type == SHIM_MSG_PARK_DONE || a->type == SHIM_MSG_RESTORE_DONE);
    for (unsigned i = 0; i < inst->n_park_pids; i++)
        if (inst->park_pids[i] == pid && a)
            inst->park_pid_done[i] = a->type == SHIM_MSG_PARK_DONE ? true
                                     : a->type == SHIM_MSG_RESTORE_DONE ? false : inst->park_pid_done[i];
    uint64_t bytes = ok ? a->bytes : 0, copy_us = ok ? a->aux : 0;
    if (copy_us > inst->cuda_copy_us)
        inst->cuda_copy_us = copy_us;
    inst->shim_round_bytes = units_sat_add(inst->shim_round_bytes, bytes); /* the shim's figure */
    const char *what = !a ? "connection_lost" : ok ? "ok" : refusal_name(a->aux);
    const char *answer = !a ? "none"
                         : a->type == SHIM_MSG_PARK_DONE || a->type == SHIM_MSG_PARK_FAILED ? "park" : "restore";
    log_event(ok ? LOG_INFO : LOG_WARN, "shim_park_answer",
              "model=%s instance=%u pid=%d answer=%s result=%s bytes=%llu copy_ms=%f", m->name, inst->id, (int)pid,
              answer, what, (unsigned long long)bytes, (double)copy_us / 1000.0);
    if (!ok && !inst->cuda_failed) {
        inst->cuda_failed = true;
        snprintf(inst->cuda_error, sizeof inst->cuda_error, "pid %d: %s", (int)pid, what);
    }
    if (inst->shim_park_ops == 0)
        round_done(inst);
}

static int shim_park(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    inst->park_measured = inst->measured;
    inst->cuda_undoing = false;
    instance_set_state(inst, INST_PARKING, why);
    log_event(LOG_INFO, "shim_park_started", "model=%s instance=%u pids=%u first_pid=%d bytes=%llu", m->name,
              inst->id, inst->n_park_pids, (int)inst->park_pids[0], (unsigned long long)inst->park_before);
    shim_round(inst, SHIM_MSG_PARK, false);
    if (inst->shim_park_ops == 0) { /* not one command went out: this tier cannot */
        instance_set_state(inst, INST_READY, "shim park could not start");
        return -1;
    }
    return 0;
}

static void shim_resume(instance_t *inst)
{
    shim_round(inst, SHIM_MSG_RESTORE, false);
    if (inst->shim_park_ops == 0)
        shim_failed(inst, "shim restore could not start");
}

/* The CUDA context (NVML's bytes beyond the shim's, learned idle) stays on the GPU. */
static uint64_t shim_leaves(const instance_t *inst)
{
    return shim_grants_context(inst);
}

static uint64_t shim_back_guess_ms(uint64_t bytes)
{
    return bytes / PARK_SHIM_GUESS_BPMS + 1;
}

const park_tier_ops_t park_tier_shim = {
    .tier = PARK_SHIM,
    .name = "shim",
    .back_name = "shim_restore",
    .parked_as = "shim_parked",
    .parked_why = "parked by the shim: memory left the GPU",
    .resumed_why = "restored by the shim: memory back on the GPU",
    .reclaim_failed = "shim park: too little memory left the GPU within stop_timeout",
    .can = shim_can,
    .prepare = shim_prepare,
    .park = shim_park,
    .resume = shim_resume,
    .found = NULL,
    .lost = NULL,
    .back_guess_ms = shim_back_guess_ms,
    .leaves = shim_leaves,
};
