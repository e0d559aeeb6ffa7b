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
 * Invariants: one round of commands at a time (the state's shim_park_ops); answers for an
 * instance that left PARKING/RESUMING meanwhile are dropped; shim_control.c calls nothing
 * once the instance's shim state is dropped, so a freed instance is never called back (the
 * commands do not hold it). Its private state (shim_tier_state_t, park_tier.h) lives as long
 * as the instance. Calls shim_control.c, the scheduler's
 * process list, instance.c, model_state.c; reports to park.c only through inst->park.park_report.
 */
#include <stdio.h>
#include <stdlib.h>
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

/* The tier's private state of an instance (park_tier.h): the processes it parks (each with
 * a control connection), the commands in flight and what they said. */
typedef struct shim_tier_state {
    park_tier_state_t head;
    park_procs_t procs;
    unsigned shim_park_ops; /* commands on control connections in flight */
    uint64_t shim_round_ns, shim_round_bytes; /* its current round: began (uv_hrtime), bytes moved */
} shim_tier_state_t;

/* inst's state, made on first use; NULL when out of memory. */
static shim_tier_state_t *state_of(instance_t *inst)
{
    return park_tier_state(inst, &park_tier_shim, sizeof(shim_tier_state_t));
}

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
    const shim_tier_state_t *sh = park_tier_state_peek(inst, PARK_SHIM);
    pid_t pid;
    return m->cfg->shim_park && m->cfg->park_keep_alive_ms != 0 && inst->life.state == INST_READY && inst->path.in_flight == 0 &&
           !inst->life.stop_requested && !inst->hook.hook_call && !park_tier_holds(inst) && (!sh || sh->shim_park_ops == 0) &&
           inst->memory.gpu_pos >= 0 && shim_control_pids(inst, &pid, 1) == 1;
}

/* Every process NVML shows holding GPU memory for the instance must have a control
 * connection: -1 (logged park_refused) when one has none. */
static int shim_prepare(instance_t *inst, enum unload_reason reason)
{
    (void)reason;
    model_t *m = inst->model;
    shim_tier_state_t *sh = state_of(inst);
    if (!sh) {
        log_event(LOG_WARN, "park_refused", "model=%s instance=%u tier=shim reason=out_of_memory", m->name, inst->id);
        return -2;
    }
    pid_t gpu[PARK_PIDS_MAX], ctl[SHIM_PAGE_PROCS];
    size_t n = sched_instance_gpu_pids(inst, gpu, PARK_PIDS_MAX);
    size_t nc = shim_control_pids(inst, ctl, SHIM_PAGE_PROCS);
    const char *why = n == 0 ? "no_gpu_process" : n > PARK_PIDS_MAX ? "too_many_processes" : NULL;
    for (size_t i = 0; i < n && !why && i < PARK_PIDS_MAX; i++) {
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
        sh->procs.pids[i] = gpu[i];
        sh->procs.done[i] = false;
    }
    sh->procs.n = (unsigned)n;
    return 0;
}

static void on_answer(instance_t *inst, pid_t pid, const shim_msg_t *a);

/* One command to each process (only_done: those the failed park had parked). */
static void shim_round(instance_t *inst, enum shim_msg_type cmd, bool only_done)
{
    shim_tier_state_t *sh = state_of(inst); /* made by prepare */
    if (!only_done) {
        sh->procs.failed = false;
        sh->procs.error[0] = '\0';
        sh->procs.copy_us = 0;
    }
    sh->shim_round_ns = uv_hrtime();
    sh->shim_round_bytes = 0;
    for (unsigned i = 0; i < sh->procs.n; i++) {
        if (only_done && !sh->procs.done[i])
            continue;
        if (shim_control_command(inst, sh->procs.pids[i], cmd, on_answer) == 0) {
            sh->shim_park_ops++;
        } else if (!sh->procs.failed) {
            sh->procs.failed = true;
            snprintf(sh->procs.error, sizeof sh->procs.error, "pid %d: no control connection",
                     (int)sh->procs.pids[i]);
        }
    }
}

static void shim_failed(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    const shim_tier_state_t *sh = state_of(inst);
    m->checkpoint_failures++;
    log_event(LOG_WARN, "shim_restore_failed", "model=%s instance=%u reason=%s error=%s", m->name, inst->id,
              why, sh->procs.error);
    core_note_event(m->core, "%s instance %u: %s (%s)", m->name, inst->id, why, sh->procs.error);
    model_record_failure(m, RESTART_PARK_FAILED, why);
    instance_stop(inst, why);
}

/* Every answer of a round is in: carry on in the state it was made for. */
static void round_done(instance_t *inst)
{
    shim_tier_state_t *sh = state_of(inst);
    log_event(sh->procs.failed ? LOG_WARN : LOG_INFO, "shim_round", "model=%s instance=%u op=%s ok=%s bytes=%llu "
              "copy_ms=%f total_ms=%f", inst->model->name, inst->id,
              inst->life.state == INST_PARKING && !sh->procs.undoing ? "park" : "restore",
              sh->procs.failed ? "false" : "true", (unsigned long long)sh->shim_round_bytes,
              (double)sh->procs.copy_us / 1000.0, (double)(uv_hrtime() - sh->shim_round_ns) / 1e6);
    if (inst->life.state == INST_PARKING && sh->procs.undoing) {
        sh->procs.undoing = false;
        inst->park.park_report(inst, PARK_TIER_OUT_FAILED, "shim park failed: the next tier");
        return;
    }
    if (inst->life.state == INST_PARKING && sh->procs.failed) {
        bool any = false;
        for (unsigned i = 0; i < sh->procs.n; i++)
            any = any || sh->procs.done[i];
        if (any) { /* all or nothing: the parked ones come back first */
            sh->procs.undoing = true;
            shim_round(inst, SHIM_MSG_RESTORE, true);
            if (sh->shim_park_ops)
                return;
            sh->procs.undoing = false;
        }
        inst->park.park_report(inst, PARK_TIER_OUT_FAILED, "shim park failed: the next tier");
        return;
    }
    if (inst->life.state == INST_PARKING) {
        inst->park.park_report(inst, PARK_TIER_OUT_DONE, "every process parked by its shim");
        return;
    }
    if (inst->life.state == INST_RESUMING && inst->park.park_tier == PARK_SHIM) {
        if (sh->procs.failed)
            shim_failed(inst, "shim restore failed");
        else
            inst->park.park_report(inst, PARK_TIER_BACK_DONE, "every process restored by its shim");
    }
}

static void on_answer(instance_t *inst, pid_t pid, const shim_msg_t *a)
{
    model_t *m = inst->model;
    shim_tier_state_t *sh = state_of(inst); /* a command went out: made by prepare */
    if (sh->shim_park_ops)
        sh->shim_park_ops--;
    bool ok = a && (a->type == SHIM_MSG_PARK_DONE || a->type == SHIM_MSG_RESTORE_DONE);
    for (unsigned i = 0; i < sh->procs.n; i++)
        if (sh->procs.pids[i] == pid && a)
            sh->procs.done[i] = a->type == SHIM_MSG_PARK_DONE ? true
                                     : a->type == SHIM_MSG_RESTORE_DONE ? false : sh->procs.done[i];
    uint64_t bytes = ok ? a->bytes : 0, copy_us = ok ? a->aux : 0;
    if (copy_us > sh->procs.copy_us)
        sh->procs.copy_us = copy_us;
    sh->shim_round_bytes = units_sat_add(sh->shim_round_bytes, bytes); /* the shim's figure */
    const char *what = !a ? "connection_lost" : ok ? "ok" : refusal_name(a->aux);
    const char *answer = !a ? "none"
                         : a->type == SHIM_MSG_PARK_DONE || a->type == SHIM_MSG_PARK_FAILED ? "park" : "restore";
    log_event(ok ? LOG_INFO : LOG_WARN, "shim_park_answer",
              "model=%s instance=%u pid=%d answer=%s result=%s bytes=%llu copy_ms=%f", m->name, inst->id, (int)pid,
              answer, what, (unsigned long long)bytes, (double)copy_us / 1000.0);
    if (!ok && !sh->procs.failed) {
        sh->procs.failed = true;
        snprintf(sh->procs.error, sizeof sh->procs.error, "pid %d: %s", (int)pid, what);
    }
    if (sh->shim_park_ops == 0)
        round_done(inst);
}

static int shim_park(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    shim_tier_state_t *sh = state_of(inst);
    sh->procs.measured = inst->memory.measured;
    sh->procs.undoing = false;
    instance_set_state(inst, INST_PARKING, why);
    log_event(LOG_INFO, "shim_park_started", "model=%s instance=%u pids=%u first_pid=%d bytes=%llu", m->name,
              inst->id, sh->procs.n, (int)sh->procs.pids[0], (unsigned long long)inst->park.park_before);
    shim_round(inst, SHIM_MSG_PARK, false);
    if (sh->shim_park_ops == 0) { /* not one command went out: this tier cannot */
        instance_set_state(inst, INST_READY, "shim park could not start");
        return -1;
    }
    return 0;
}

static void shim_resume(instance_t *inst)
{
    const shim_tier_state_t *sh = state_of(inst);
    shim_round(inst, SHIM_MSG_RESTORE, false);
    if (sh->shim_park_ops == 0)
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

static void shim_state_free(park_tier_state_t *s)
{
    free(s);
}

static void shim_measured(const instance_t *inst, uint64_t *held, uint64_t *copy_us)
{
    const shim_tier_state_t *sh = park_tier_state_peek(inst, PARK_SHIM);
    *held = sh ? sh->procs.measured : 0;
    *copy_us = sh ? sh->procs.copy_us : 0;
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
    .state_free = shim_state_free,
    .holds = NULL, /* shim_control.c drops its commands' answers with the shim state */
    .measured = shim_measured,
};
