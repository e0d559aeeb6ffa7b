/*
 * driver_limit: the driver's per-cgroup hard limit on each supervised worker (the rules are
 * in driver_limit.h). One module state for the loop: every instance's limit state (a list),
 * one timer (DRIVER_LIMIT_TICK_MS, unref'd, running while a state exists). Calls down only:
 * sched (the booking, the NVML probe), gpu (the driver call), proc (the leaf: made before the
 * start, kept from the process layer at the exit until the reset returned, then released).
 */
#include "gate/driver_limit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "gpu/gpu.h"
#include "proc/cgroup.h"
#include "proc/process.h"
#include "sched/scheduler.h"

typedef struct driver_limit {
    list_t link;             /* driver_limit_state.all */
    instance_t *inst;        /* NULL once the instance is freed */
    char model[64];
    unsigned id;
    char dir[GPU_LIMIT_PATH_MAX]; /* the leaf's directory */
    char leaf[200];
    int nvml_index;
    uint64_t applied;        /* the driver's limit now; GPU_LIMIT_NONE: none */
    uint64_t target;         /* what it should be: the booking; GPU_LIMIT_NONE once exited */
    uint64_t calling;        /* the value of the call in flight */
    uint64_t call_since_ms;
    uint64_t lower_since_ms; /* the booking went below the limit then (0: it is not below) */
    bool in_flight;
    bool failed;             /* the last call failed: nothing waits for this limit */
    bool stuck;              /* a call took longer than DRIVER_LIMIT_WAIT_MS */
    bool exited;             /* the worker exited: reset, then the leaf released */
    bool loose, calling_loose; /* the limit (the call's) includes its GPU's free room: set while it started */
    bool leaf_kept;
    void (*ready)(instance_t *inst); /* before the start: the spawn, run once */
    uint64_t sets, failures;
    char error[200];
} dlim_t;

static struct {
    core_t *core;
    void (*on_applied)(instance_t *inst);
    list_t all;
    uv_timer_t timer;
    bool timer_init, timer_on;
    driver_limit_totals_t totals;
} driver_limit_state;

static void on_tick(uv_timer_t *t);
static void issue(dlim_t *d);

void driver_limit_init(core_t *core, void (*on_applied)(instance_t *inst))
{
    memset(&driver_limit_state, 0, sizeof driver_limit_state);
    driver_limit_state.core = core;
    driver_limit_state.on_applied = on_applied;
    list_init(&driver_limit_state.all);
    if (uv_timer_init(core->loop, &driver_limit_state.timer) == 0) {
        driver_limit_state.timer_init = true;
        uv_unref((uv_handle_t *)&driver_limit_state.timer);
    }
}

void driver_limit_shutdown(void)
{
    list_foreach_safe(it, tmp, &driver_limit_state.all) {
        dlim_t *d = list_entry(it, dlim_t, link);
        list_remove(&d->link);
        if (d->inst)
            d->inst->gate.dlimit = NULL;
        free(d);
    }
    if (driver_limit_state.timer_init) {
        uv_close((uv_handle_t *)&driver_limit_state.timer, NULL); /* static memory: no callback */
        driver_limit_state.timer_init = false;
    }
}

static void timer_want(void)
{
    bool want = !list_empty(&driver_limit_state.all);
    if (!driver_limit_state.timer_init || want == driver_limit_state.timer_on)
        return;
    driver_limit_state.timer_on = want;
    if (want)
        uv_timer_start(&driver_limit_state.timer, on_tick, DRIVER_LIMIT_TICK_MS, DRIVER_LIMIT_TICK_MS);
    else
        uv_timer_stop(&driver_limit_state.timer);
}

static void drop(dlim_t *d)
{
    list_remove(&d->link);
    if (d->inst)
        d->inst->gate.dlimit = NULL;
    free(d);
    driver_limit_state.totals.active = driver_limit_state.totals.active ? driver_limit_state.totals.active - 1 : 0;
    timer_want();
}

/* ---- why no limit ---------------------------------------------------------------------- */

static const char *unavailable(void)
{
    const core_t *c = driver_limit_state.core;
    if (!c->cfg->gpu.driver_limits)
        return "gpu.driver_limits: off";
    if (!cgroup_tree_active(c->cgroups) || c->cgroups->mode != CGROUP_V2)
        return "workers have no cgroup v2 leaf (cgroup.mode)";
    const char *why = gpu_limits_unavailable(sched_gpu_handle());
    return why;
}

/* What the limit should be: the booking; while the worker starts (loads), the booking plus
 * the room its GPU has free (what vramd could grant it now): a model's true resident size is
 * learned from NVML once it is loaded, as without a limit, and a framework that sizes itself
 * from cuMemGetInfo sees the same figure the shim would give it. */
static uint64_t target_of(const instance_t *in)
{
    uint64_t b = sched_instance_booked(in);
    if (in->life.state == INST_STARTING && in->memory.gpu_pos >= 0)
        b += ledger_free(sched_ledger(), (size_t)in->memory.gpu_pos);
    return b;
}

/* ---- the calls ------------------------------------------------------------------------- */

/* Hand the instance on (its held requests and grants): after a change applied or failed. */
static void applied(dlim_t *d)
{
    if (d->inst && driver_limit_state.on_applied)
        driver_limit_state.on_applied(d->inst);
}

static void run_ready(dlim_t *d)
{
    void (*ready)(instance_t *) = d->ready;
    d->ready = NULL;
    if (ready && d->inst)
        ready(d->inst);
}

static void release_leaf(dlim_t *d)
{
    if (!d->leaf_kept)
        return;
    d->leaf_kept = false;
    process_leaf_release(driver_limit_state.core->loop, driver_limit_state.core->cgroups, d->leaf);
}

static void on_call_done(void *ctx, int rc, const char *err)
{
    dlim_t *d = ctx;
    d->in_flight = false;
    if (rc == 0) {
        d->applied = d->calling;
        d->loose = d->calling_loose;
        d->failed = false;
        d->stuck = false;
        d->sets++;
        driver_limit_state.totals.sets++;
        if (d->calling == GPU_LIMIT_NONE) {
            driver_limit_state.totals.resets++;
            log_event(LOG_INFO, "driver_limit_reset", "model=%s instance=%u cgroup=%s", d->model, d->id, d->dir);
        } else {
            log_event(d->sets == 1 ? LOG_INFO : LOG_DEBUG, "driver_limit_set", "model=%s instance=%u cgroup=%s bytes=%llu",
                      d->model, d->id, d->dir, (unsigned long long)d->applied);
        }
    } else {
        d->failed = true;
        d->failures++;
        driver_limit_state.totals.failures++;
        snprintf(d->error, sizeof d->error, "%s", err);
        log_event(LOG_WARN, "driver_limit_failed", "model=%s instance=%u cgroup=%s error=%s", d->model, d->id,
                  d->dir, err);
    }
    if (d->exited && d->calling == GPU_LIMIT_NONE) { /* the reset returned (or failed): the leaf goes */
        release_leaf(d);
        if (!d->inst) {
            drop(d);
            return;
        }
    }
    run_ready(d);
    if (!d->failed && d->target != d->applied && (d->exited || d->target > d->applied)) {
        issue(d); /* raised again meanwhile, or exited during a raise */
        if (d->in_flight)
            return;
    }
    applied(d);
    if (!d->inst && !d->in_flight && !d->leaf_kept)
        drop(d);
}

/* Set d->target now (one call at a time). A call that cannot start counts as failed. */
static void issue(dlim_t *d)
{
    if (d->in_flight)
        return;
    d->calling = d->target;
    d->calling_loose = d->inst && d->inst->life.state == INST_STARTING;
    d->call_since_ms = core_now();
    d->lower_since_ms = 0;
    if (gpu_limit_set(sched_gpu_handle(), d->nvml_index, d->dir, d->calling, on_call_done, d) == 0) {
        d->in_flight = true;
        return;
    }
    d->failed = true;
    d->failures++;
    driver_limit_state.totals.failures++;
    snprintf(d->error, sizeof d->error, "the driver call could not start (%s)",
             gpu_limits_unavailable(sched_gpu_handle()) ? gpu_limits_unavailable(sched_gpu_handle())
                                                        : "too many calls in flight");
    if (d->exited)
        release_leaf(d);
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    uint64_t now = core_now();
    list_foreach_safe(it, tmp, &driver_limit_state.all) {
        dlim_t *d = list_entry(it, dlim_t, link);
        if (d->in_flight) {
            if (!d->stuck && now - d->call_since_ms >= DRIVER_LIMIT_WAIT_MS) {
                d->stuck = true;
                log_event(LOG_WARN, "driver_limit_stuck", "model=%s instance=%u cgroup=%s waited_ms=%llu", d->model,
                          d->id, d->dir, (unsigned long long)(now - d->call_since_ms));
                run_ready(d); /* the start goes on without it */
                applied(d);   /* and nothing else waits for it */
            }
            continue;
        }
        if (!d->inst || d->exited || d->failed)
            continue;
        uint64_t b = target_of(d->inst);
        d->target = b;
        if (b >= d->applied || d->applied == GPU_LIMIT_NONE) {
            d->lower_since_ms = 0;
            if (b > d->applied && d->applied != GPU_LIMIT_NONE)
                issue(d);
            continue;
        }
        if (!d->lower_since_ms)
            d->lower_since_ms = now;
        else if (now - d->lower_since_ms >= DRIVER_LIMIT_LOWER_MS)
            issue(d);
    }
}

/* ---- the instance's life ---------------------------------------------------------------- */

int driver_limit_before_start(instance_t *inst, const char *leaf, void (*ready)(instance_t *inst))
{
    const char *no = unavailable();
    if (no || inst->memory.gpu_pos < 0 || inst->external)
        return 0;
    dlim_t *d = calloc(1, sizeof *d);
    if (!d)
        return 0;
    if (cgroup_leaf_dir(driver_limit_state.core->cgroups, leaf, d->dir, sizeof d->dir) != 0) {
        log_event(LOG_WARN, "driver_limit_failed", "model=%s instance=%u leaf=%s error=%s", inst->model->name,
                  inst->id, leaf, strerror(errno));
        free(d);
        return 0;
    }
    snprintf(d->model, sizeof d->model, "%s", inst->model->name);
    snprintf(d->leaf, sizeof d->leaf, "%s", leaf);
    d->id = inst->id;
    d->inst = inst;
    d->nvml_index = sched_ledger()->gpus[inst->memory.gpu_pos].index;
    d->applied = GPU_LIMIT_NONE;
    d->target = target_of(inst);
    d->ready = ready;
    inst->gate.dlimit = d;
    list_insert_tail(&driver_limit_state.all, &d->link);
    driver_limit_state.totals.active++;
    timer_want();
    issue(d);
    if (d->in_flight)
        return 1;
    d->ready = NULL; /* could not start: the worker starts without a limit */
    return 0;
}

bool driver_limit_covers(instance_t *inst)
{
    dlim_t *d = inst->gate.dlimit;
    if (!d || d->failed || d->stuck || d->exited)
        return true;
    uint64_t b = target_of(inst);
    /* covered: unless the limit is still the loose one of its start (then it is brought down
     * to the booking before the first request, so that request is held to its booking), or
     * a lowering is in the driver that would take it below this booking (the request waits
     * for it and the raise after it: on_call_done sets the target next) */
    if (d->applied != GPU_LIMIT_NONE && d->applied >= b && !(d->loose && inst->life.state != INST_STARTING) &&
        !(d->in_flight && d->calling < b))
        return true;
    d->target = b;
    issue(d);
    if (!d->in_flight)
        return true; /* it could not be raised: nothing waits for it */
    driver_limit_state.totals.held_requests++;
    return false;
}

bool driver_limit_starting(const instance_t *inst)
{
    return inst->gate.dlimit && inst->gate.dlimit->ready;
}

void driver_limit_exited(instance_t *inst, struct process *p)
{
    dlim_t *d = inst->gate.dlimit;
    if (!d || d->exited)
        return;
    d->exited = true;
    d->target = GPU_LIMIT_NONE;
    if (d->applied == GPU_LIMIT_NONE && !d->in_flight)
        return; /* nothing was set: the leaf goes as usual */
    process_leaf_keep(p);
    d->leaf_kept = true;
    issue(d); /* after the call in flight, if one is */
}

void driver_limit_free(instance_t *inst)
{
    dlim_t *d = inst->gate.dlimit;
    if (!d)
        return;
    inst->gate.dlimit = NULL;
    d->inst = NULL;
    d->ready = NULL;
    if (!d->in_flight && !d->leaf_kept)
        drop(d);
}

bool driver_limit_figures(const instance_t *inst, driver_limit_figures_t *out)
{
    const dlim_t *d = inst->gate.dlimit;
    if (!d)
        return false;
    memset(out, 0, sizeof *out);
    out->state = d->exited ? "resetting" : d->stuck ? "stuck" : d->failed ? "failed" : d->in_flight ? "pending" : "set";
    out->limit = d->applied == GPU_LIMIT_NONE ? 0 : d->applied;
    out->target = d->target == GPU_LIMIT_NONE ? 0 : d->target;
    out->sets = d->sets;
    out->failures = d->failures;
    out->error = d->error;
    out->cgroup = d->dir;
    return true;
}

void driver_limit_totals(driver_limit_totals_t *out)
{
    *out = driver_limit_state.totals;
    const char *no = driver_limit_state.core ? unavailable() : "not started";
    out->unavailable = no ? no : "";
}
