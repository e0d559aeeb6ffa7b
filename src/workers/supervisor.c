/*
 * supervisor: model runtimes: create, update on config reload, remove; the supervisor's
 * part of each pump (supervisor_prepare, supervisor_tend: start or reload instances on
 * demand, arm idle timers, free a removed model); admin load and unload. The states, the
 * restart policy and the invariants are written in supervisor.h; the instance lifecycle is
 * in instance.c, eviction through hooks in hooks.c, state changes and failure counting in
 * model_state.c (supervisor_int.h gives the order of calls between them).
 *
 * It calls nothing above itself: requests reach it only as counted slots
 * (instance_request_done), and the queue is the dispatcher's (path/dispatch.c).
 * One start at a time per model, never before next_start_ms (the failure backoff).
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/core.h"
#include "sched/scheduler.h"
#include "workers/model_state.h"
#include "workers/supervisor.h"
#include "workers/supervisor_int.h"

#define QUEUE_AGE_STEP_MS 30000

static void unload_external_when_idle(model_t *m);

static void on_backoff_timer(uv_timer_t *t)
{
    model_schedule_pump(t->data);
}

model_t *model_create(core_t *d, const model_config_t *cfg, config_t *owner, void (*pump)(core_defer_t *))
{
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->core = d;
    m->name = strdup(cfg->name);
    m->cfg = cfg;
    m->cfg_owner = config_ref(owner);
    queue_init(&m->queue, cfg->queue_max, QUEUE_AGE_STEP_MS);
    list_init(&m->instances);
    list_init(&m->waiters);
    core_defer_init(&m->pump, pump);
    list_init(&m->link);
    uv_timer_init(d->loop, &m->backoff_timer);
    m->backoff_timer.data = m;
    histogram_init(&m->duration_hist, HISTOGRAM_DURATION_BOUNDS, HISTOGRAM_DURATION_N);
    histogram_init(&m->queue_wait_hist, HISTOGRAM_WAIT_BOUNDS, HISTOGRAM_WAIT_N);
    line_ring_init(&m->logs, owner->limits.worker_log_lines, (size_t)owner->limits.worker_log_bytes);
    list_insert_tail(&d->models, &m->link);
    return m;
}

void model_update_config(model_t *m, const model_config_t *cfg, config_t *owner)
{
    /* a failed model whose entry (or defaults:) changed is tried again at its next request:
     * the reload is the operator's fix; one whose entry is the same stays failed, said in
     * the log (and in the reload's answer, serve/api.c) */
    if (m->failed && m->cfg->source_hash != cfg->source_hash) {
        log_event(LOG_INFO, "model_failed_cleared", "model=%s reason=%s", m->name, "its config changed (reload)");
        model_clear_failed(m, "its config changed (reload)");
    } else if (m->failed) {
        log_event(LOG_WARN, "model_still_failed", "model=%s reason=%s hint=%s", m->name, m->failed_reason,
                  "its config did not change: vramctl load MODEL retries it");
    }
    config_t *old = m->cfg_owner;
    m->cfg = cfg;
    m->cfg_owner = config_ref(owner);
    config_unref(old);
    m->queue.max = cfg->queue_max;
    line_ring_set_limits(&m->logs, owner->limits.worker_log_lines, (size_t)owner->limits.worker_log_bytes);
    m->removed = false;
    model_schedule_pump(m);
}

void model_load(model_t *m)
{
    model_clear_failed(m, "admin load");
    m->unload_requested = false;
    m->load_requested = true; /* the pump starts (or reloads) an instance even with an empty queue */
    if (m->cfg->url) {
        /* external: check its health right away */
        list_foreach(it, &m->instances) {
            instance_t *in = list_entry(it, instance_t, link);
            uv_timer_start(&in->life.timer, instance_health_tick, 0, 0);
        }
    }
    model_schedule_pump(m); /* loads_total counts when an instance becomes ready, not here */
}

void model_bring_back(model_t *m)
{
    if (m->failed || m->removed || m->core->stopping)
        return;
    m->unload_requested = false;
    m->load_requested = true;
    model_schedule_pump(m);
}

/* A model with a url: one instance for the external server, READY until its health checks
 * say otherwise, booked on its allowed GPU with the most room. */
static void model_ensure_external(model_t *m)
{
    /* a removed model, or one stopping with vramd, gets no new instance: its old one may
     * be off the list and still closing, and a new one would be stopped again at once */
    if (!list_empty(&m->instances) || m->removed || m->core->stopping)
        return;
    instance_t *inst = instance_new(m);
    if (!inst)
        return;
    inst->external = true;
    snprintf(inst->life.host, sizeof inst->life.host, "%s", m->cfg->url_host);
    inst->life.port = m->cfg->url_port;
    attrib_set_external(&inst->life.ident, inst->life.port); /* its listener: found by instance_refresh_identity */
    inst->life.started_ms = inst->life.ready_ms = core_now();
    instance_set_state(inst, INST_READY, "external server (until health checks say otherwise)");
    if (sched_model_uses_gpu(m->cfg) && sched_gpu_ok()) {
        /* an external server is already loaded somewhere: book it on its allowed GPU with
         * the most room (its measured usage replaces the guess at the next snapshot) */
        size_t pos = 0;
        uint64_t best = 0;
        const ledger_t *l = sched_ledger();
        for (size_t g = 0; g < l->n_gpus; g++) {
            bool ok = !m->cfg->gpus;
            for (size_t k = 0; k < m->cfg->n_gpus; k++)
                ok = ok || m->cfg->gpus[k] == l->gpus[g].index;
            if (ok && ledger_free(l, g) >= best) {
                best = ledger_free(l, g);
                pos = g;
            }
        }
        sched_place_instance(inst, pos);
    }
    uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0);
}


void supervisor_prepare(model_t *m)
{
    if (!m->cfg->url)
        return;
    bool found = list_empty(&m->instances);
    model_ensure_external(m);
    if (found && !list_empty(&m->instances))
        park_wake_found(list_entry(list_first(&m->instances), instance_t, link));
}

/* Start (or reload) an instance when the queue, a pin or an admin load wants one. */
static int start_on_demand(model_t *m, uint64_t now)
{
    unsigned starting = 0;
    instance_t *to_reload = NULL;
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_STARTING || in->life.state == INST_RELOADING || in->life.state == INST_UNLOADING ||
            in->life.state == INST_PARKING || in->life.state == INST_RESUMING)
            starting++;
        if (in->life.state == INST_UNLOADED || in->life.state == INST_PARKED)
            to_reload = in;
    }
    if (starting == 0 && to_reload && to_reload->life.state == INST_PARKED) {
        park_wake(to_reload);
    } else if (starting == 0 && to_reload) {
        instance_reload(to_reload);
    } else if (starting == 0 && m->n_instances < m->cfg->instances && !m->cfg->url) {
        /* one start at a time; scale out only while the queue waits for a slot */
        if (now >= m->next_start_ms) {
            size_t pos = 0;
            enum placer_result pr = sched_place(m, &pos);
            if (pr == PLACER_FITS)
                instance_start(m, pos);
            else if (pr == PLACER_NEVER)
                return PLACER_NEVER;
            else if (pr == PLACER_WAIT || pr == PLACER_EVICT)
                log_event(LOG_DEBUG, "placement_waiting", "model=%s result=%s", m->name, placer_result_name(pr));
        } else if (!uv_is_active((uv_handle_t *)&m->backoff_timer)) {
            uv_timer_start(&m->backoff_timer, on_backoff_timer, m->next_start_ms - now, 0);
        }
    }
    return PLACER_FITS;
}

int supervisor_tend(model_t *m)
{
    core_t *d = m->core;
    bool pinned = model_pinned(m) && !d->stopping && !m->removed;
    bool ready_now = false;
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_READY && !in->life.stop_requested)
            ready_now = true;
    }
    if (ready_now)
        m->load_requested = false;
    if (m->cfg->url && m->unload_requested)
        unload_external_when_idle(m);
    bool want = (m->queue.depth > 0 || (pinned && m->n_instances == 0) || (m->load_requested && !ready_now)) &&
                !d->stopping && !m->unload_requested;
    int rc = want ? start_on_demand(m, core_now()) : PLACER_FITS;
    model_arm_idle_timers(m);
    model_maybe_free(m);
    return rc;
}

void model_start_pinned(model_t *m)
{
    model_schedule_pump(m);
}

/* An admin unload of an external server: its unload hook, once nothing runs on it. An
 * instance that is not READY (down, already unloaded) has nothing to unload. */
static void unload_external_when_idle(model_t *m)
{
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_READY && in->path.in_flight > 0)
            return; /* again at the pump after its requests end */
        m->unload_requested = false;
        if (in->life.state == INST_READY) /* cache first, parked, else its unload hook, else failed */
            (void)park_or_free(in, UNLOAD_ADMIN, "admin unload");
        /* -2: vramd's own shortage: the admin call is answered 503 (unload_local_failed) */
    }
    m->unload_requested = false;
}

bool model_unload_pending(const model_t *m)
{
    if (m->unload_requested)
        return true;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state == INST_UNLOADING || in->life.state == INST_PARKING || in->park.park_clearing)
            return true; /* park_clearing: its cache is cleared first, then it is parked */
    }
    return false;
}

bool model_unload_done(const model_t *m)
{
    if (m->n_instances == 0)
        return true;
    if (m->cfg->url)
        return m->failed || !model_unload_pending(m);
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->life.state != INST_PARKED)
            return false; /* still loaded, parking or stopping */
    }
    return true;
}

void model_unload(model_t *m, const char *reason)
{
    if (m->cfg->url) {
        /* external: never stopped; its unload hook (callers refuse a model without one) */
        m->unload_requested = m->cfg->unload.set || m->cfg->sleep.set || m->cfg->checkpoint;
        if (m->unload_requested)
            unload_external_when_idle(m);
        return;
    }
    bool stopping = false;
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        /* an idle loaded instance is parked (its cache cleared first) when its model has a
         * park tier the host can afford; a parked one asked again is stopped (the next tier) */
        if (in->life.state == INST_PARKING || in->life.state == INST_PARKED) {
            if (in->life.state == INST_PARKED) {
                in->life.unload_reason = UNLOAD_ADMIN;
                instance_stop(in, reason);
                stopping = true;
            }
            continue;
        }
        /* 0: parking (or clearing first); -2: answered 503 local_resource_exhausted, nothing
         * touched; 1: stopped (after its requests when busy) */
        if (park_or_free(in, UNLOAD_ADMIN, reason) == 1)
            stopping = true;
    }
    m->unload_requested = stopping && model_has_live_instances(m);
}

void model_set_pinned(model_t *m, bool on)
{
    bool admin = on && !model_pinned_by_config(m); /* a config pin needs no record of its own */
    if (m->pinned_admin != admin) {
        log_event(LOG_INFO, admin ? "model_pinned" : "model_unpinned", "model=%s by=%s keep_alive_ms=%llu", m->name,
                  "admin", (unsigned long long)m->cfg->keep_alive_ms);
        core_note_event(m->core, "%s %s by admin", m->name, admin ? "pinned" : "unpinned");
    }
    m->pinned_admin = admin;
    if (!on) {
        model_schedule_pump(m); /* the pump arms the keep_alive timers of its idle instances */
        return;
    }
    list_foreach(it, &m->instances) /* a countdown already running stops now */
        uv_timer_stop(&list_entry(it, instance_t, link)->life.idle_timer);
    model_load(m);
}

unsigned model_restart(model_t *m)
{
    unsigned last_old = m->next_instance_id;
    unsigned stopping = 0;
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->external || in->life.state == INST_STOPPING || in->life.stop_requested)
            continue; /* already on its way out */
        in->life.unload_reason = UNLOAD_ADMIN;
        instance_stop(in, "admin restart"); /* drains first: no new request, in-flight ones finish */
        stopping++;
    }
    log_event(LOG_INFO, "admin_restart_begin", "model=%s instances_stopping=%u queued=%zu in_flight=%u", m->name,
              stopping, m->queue.depth, m->in_flight);
    core_note_event(m->core, "restarting %s (%u instances stopping)", m->name, stopping);
    model_load(m); /* a new instance starts once there is room, even with nothing queued */
    return last_old;
}

bool model_restart_done(const model_t *m, unsigned last_old)
{
    if (m->failed)
        return true;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->id > last_old && in->life.state == INST_READY && !in->life.stop_requested)
            return true;
    }
    return false;
}

void model_remove(model_t *m)
{
    m->removed = true;
    log_event(LOG_INFO, "model_removed", "model=%s queued=%zu in_flight=%u", m->name, m->queue.depth, m->in_flight);
    model_schedule_pump(m);
}
