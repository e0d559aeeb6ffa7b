/* status: JSON renderings of the daemon's state. See status.h. */
#include "obs/status.h"

#include <stdio.h>
#include <string.h>

#include <uv.h>

#include <cjson/cJSON.h>

#include "common/units.h"
#include "core/core.h"
#include "core/mem_budget.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "gpu/cuda.h"
#include "path/dispatch_clients.h"
#include "path/proxy_upgrade.h"
#include "path/router.h"
#include "proc/cgroup.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/model_state.h"
#include "workers/park_tier.h"

/* Out of rotation: suspect (its connection broke; a passing health check clears it) and
 * outlier ejection (until a wall-clock time; the count makes the next one longer). */
static void outlier_json(cJSON *j, const instance_t *in, uint64_t now)
{
    const core_t *d = in->model->core;
    bool ejected = in->life.ejected_until_ms > now;
    cJSON_AddBoolToObject(j, "suspect", in->life.suspect);
    cJSON_AddBoolToObject(j, "ejected", ejected);
    if (ejected) {
        cJSON_AddNumberToObject(j, "ejected_for_ms", (double)(in->life.ejected_until_ms - now));
        cJSON_AddNumberToObject(j, "ejected_until", (double)(d->started_wall_ms + (in->life.ejected_until_ms - d->started_ms)));
    } else {
        cJSON_AddNumberToObject(j, "ejected_for_ms", 0);
        cJSON_AddNullToObject(j, "ejected_until");
    }
    cJSON_AddNumberToObject(j, "ejections", in->life.ejections);
}

/* A model's memory: declared, learned, and the estimate of each known request class. */
static void memory_json(cJSON *mem, const model_t *m)
{
    cJSON_AddBoolToObject(mem, "uses_gpu", sched_model_uses_gpu(m->cfg));
    cJSON_AddNumberToObject(mem, "resident_declared", (double)m->cfg->memory.resident);
    cJSON_AddNumberToObject(mem, "per_request_declared", (double)m->cfg->memory.per_request);
    cJSON_AddBoolToObject(mem, "learn", m->cfg->memory.learn);
    cJSON_AddNumberToObject(mem, "per_request_estimate", (double)sched_request_estimate_max(m));
    cJSON_AddNumberToObject(mem, "per_request_base", (double)sched_request_estimate(m));
    cJSON_AddNumberToObject(mem, "samples", m->n_peaks);
    cJSON_AddNumberToObject(mem, "oom_total", (double)m->oom_total);
    cJSON_AddNumberToObject(mem, "cancelled_hold_ms", (double)sched_cancelled_hold_ms(m));
    cJSON_AddNumberToObject(mem, "cancelled_holds_total", (double)m->cancelled_holds);
    cJSON *classes = cJSON_AddArrayToObject(mem, "classes");
    for (size_t i = 0; classes && i < EST_CELLS; i++) {
        const est_cell_t *c = &m->est.cells[i];
        if (!c->used)
            continue;
        cJSON *e = cJSON_CreateObject();
        if (e == NULL || !cJSON_AddItemToArray(classes, e)) {
            cJSON_Delete(e);
            break;
        }
        uint64_t base = sched_level_estimate(m, c->level);
        cJSON_AddNumberToObject(e, "level", c->level);
        cJSON_AddNumberToObject(e, "size_class", c->size_class);
        cJSON_AddNumberToObject(e, "estimate", (double)est_get(&m->est, c->level, c->size_class, base,
                                                               m->cfg->memory.learn));
        cJSON_AddNumberToObject(e, "learned", (double)c->learned);
        cJSON_AddNumberToObject(e, "oom_floor", (double)c->oom_floor);
        cJSON_AddNumberToObject(e, "samples", c->n_samples);
        cJSON_AddNumberToObject(e, "ooms", (double)c->ooms);
    }
}

/* What the model learned of each park tier, in the table's order (workers/park_tier.h): the
 * ways back first (learned_wake_ms, learned_restore_ms), then the ways out
 * (learned_sleep_out_ms, learned_checkpoint_out_ms). */
static void add_park_tiers(cJSON *o, const model_t *m)
{
    char key[64];
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        snprintf(key, sizeof key, "learned_%s_ms", park_tier_ops((enum park_tier)t)->back_name);
        cJSON_AddNumberToObject(o, key, (double)m->park_stats[t].back_ms_ewma);
    }
    for (unsigned t = 0; t < PARK_TIER_COUNT; t++) {
        snprintf(key, sizeof key, "learned_%s_out_ms", park_tier_name((enum park_tier)t));
        cJSON_AddNumberToObject(o, key, (double)m->park_stats[t].out_ms_ewma);
    }
}

/* A model's parking: which tiers it has, and what they did. */
static void parking_json(cJSON *pk, const model_t *m)
{
    cJSON_AddBoolToObject(pk, "sleep", m->cfg->sleep.set);
    cJSON_AddBoolToObject(pk, "checkpoint", m->cfg->checkpoint);
    cJSON_AddStringToObject(pk, "preset", config_preset_name(m->cfg->preset));
    cJSON_AddNumberToObject(pk, "parks_total", (double)m->parks_total);
    cJSON_AddNumberToObject(pk, "wakes_total", (double)m->wakes_total);
    cJSON_AddNumberToObject(pk, "refused_total", (double)m->park_refusals);
    cJSON_AddNumberToObject(pk, "checkpoints_total", (double)m->park_stats[PARK_CHECKPOINT].parks);
    cJSON_AddNumberToObject(pk, "restores_total", (double)m->park_stats[PARK_CHECKPOINT].returns);
    cJSON_AddNumberToObject(pk, "checkpoint_failures", (double)m->checkpoint_failures);
}

/* When an idle instance's keep_alive runs out: ms from now, or -1 when it is not counting
 * down (not READY, busy, queued work, being cleared for a park, pinned, keep_alive 0 or an
 * external server). The timer (workers/park_evict.c) is armed when the instance goes idle. */
static int64_t keep_alive_left_ms(instance_t *in)
{
    const model_t *m = in->model;
    if (in->life.state != INST_READY || in->path.in_flight > 0 || in->life.stop_requested || in->park.park_clearing ||
        m->queue.depth > 0 || model_pinned(m) ||
        !uv_is_active((uv_handle_t *)&in->life.idle_timer))
        return -1;
    return (int64_t)uv_timer_get_due_in(&in->life.idle_timer);
}

/* The CUDA shim of an instance (gate/shim_grants.h): null when its model has none. */
static void shim_json(cJSON *j, const instance_t *in)
{
    shim_figures_t f;
    if (!shim_grants_figures(in, &f)) {
        cJSON_AddNullToObject(j, "shim");
        return;
    }
    cJSON *s = cJSON_AddObjectToObject(j, "shim");
    if (!s)
        return;
    cJSON_AddStringToObject(s, "state", f.state);
    if (f.why[0])
        cJSON_AddStringToObject(s, "reason", f.why);
    cJSON_AddNumberToObject(s, "grant_bytes", (double)f.grant);
    cJSON_AddNumberToObject(s, "live_bytes", (double)f.live);
    cJSON_AddNumberToObject(s, "parked_bytes", (double)f.parked);
    cJSON_AddNumberToObject(s, "context_bytes", (double)f.context);
    cJSON_AddNumberToObject(s, "extra_bytes", (double)f.extra);
    cJSON_AddNumberToObject(s, "processes", f.processes);
    cJSON_AddNumberToObject(s, "asks", (double)f.asks);
    cJSON_AddNumberToObject(s, "granted", (double)f.granted);
    cJSON_AddNumberToObject(s, "waited", (double)f.waited);
    cJSON_AddNumberToObject(s, "refused", (double)f.refused);
    cJSON_AddNumberToObject(s, "mismatches", (double)f.mismatches);
    cJSON_AddNumberToObject(s, "wait_ms_total", (double)f.wait_ms_total);
}

/* The driver's per-cgroup limit of an instance (gate/driver_limit.h): null when none. */
static void driver_limit_json(cJSON *j, const instance_t *in)
{
    driver_limit_figures_t f;
    if (!driver_limit_figures(in, &f)) {
        cJSON_AddNullToObject(j, "driver_limit");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(j, "driver_limit");
    if (!o)
        return;
    cJSON_AddStringToObject(o, "state", f.state);
    cJSON_AddNumberToObject(o, "limit_bytes", (double)f.limit);
    cJSON_AddNumberToObject(o, "target_bytes", (double)f.target);
    cJSON_AddNumberToObject(o, "sets", (double)f.sets);
    cJSON_AddNumberToObject(o, "failures", (double)f.failures);
    cJSON_AddStringToObject(o, "error", f.error);
    cJSON_AddStringToObject(o, "cgroup", f.cgroup);
}

/* One instance: state, tier, process, GPU, memory, requests, outlier state. */
static cJSON *instance_json(instance_t *in, uint64_t now)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "id", in->id);
    cJSON_AddStringToObject(j, "state", instance_state_name(in->life.state));
    cJSON_AddStringToObject(j, "tier", instance_tier_name(in));
    cJSON_AddNumberToObject(j, "parked_bytes", (double)(in->park.parked_host.held ? in->park.parked_host.bytes : 0));
    if (in->life.pid > 0)
        cJSON_AddNumberToObject(j, "pid", in->life.pid);
    else
        cJSON_AddNullToObject(j, "pid");
    if (in->life.ident.cgroup[0])
        cJSON_AddStringToObject(j, "cgroup", in->life.ident.cgroup);
    else
        cJSON_AddNullToObject(j, "cgroup");
    cJSON_AddStringToObject(j, "host", in->life.host);
    cJSON_AddNumberToObject(j, "port", in->life.port);
    if (in->memory.gpu >= 0)
        cJSON_AddNumberToObject(j, "gpu", in->memory.gpu);
    else
        cJSON_AddNullToObject(j, "gpu");
    cJSON_AddNumberToObject(j, "in_flight", in->path.in_flight);
    cJSON_AddNumberToObject(j, "reserved_bytes", (double)in->memory.mem.bytes);
    cJSON_AddNumberToObject(j, "measured_bytes", (double)in->memory.measured);
    if (in->life.server_vram >= 0) { /* the server's own figure (Ollama's /api/ps size_vram) and its age */
        cJSON_AddNumberToObject(j, "server_vram_bytes", (double)in->life.server_vram);
        cJSON_AddNumberToObject(j, "server_vram_age_ms", (double)(now - in->life.server_vram_ms));
    } else {
        cJSON_AddNullToObject(j, "server_vram_bytes");
    }
    cJSON_AddNumberToObject(j, "baseline_bytes", (double)in->memory.baseline);
    cJSON_AddNumberToObject(j, "cancelled_held_bytes", (double)sched_instance_cancelled(in, now));
    shim_json(j, in);
    driver_limit_json(j, in);
    cJSON_AddNumberToObject(j, "requests_total", (double)in->path.requests_total);
    cJSON_AddNumberToObject(j, "failed_in_row", in->life.failed_in_row);
    outlier_json(j, in, now);
    cJSON_AddNumberToObject(j, "idle_connections", in->path.pool_size);
    cJSON_AddNumberToObject(j, "uptime_ms", in->life.started_ms ? (double)(now - in->life.started_ms) : 0);
    int64_t left = keep_alive_left_ms(in);
    if (left >= 0) {
        const core_t *d = in->model->core;
        cJSON_AddNumberToObject(j, "keep_alive_left_ms", (double)left);
        cJSON_AddNumberToObject(j, "keep_alive_expires", (double)(d->started_wall_ms + (now - d->started_ms) + (uint64_t)left));
    } else {
        cJSON_AddNullToObject(j, "keep_alive_left_ms");
        cJSON_AddNullToObject(j, "keep_alive_expires");
    }
    return j;
}

/* The last failure since the model last became ready: "reason", "output" (its worker's
 * last lines, oldest first). */
static cJSON *last_failure_json(const model_t *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "reason", m->last_failure);
    cJSON *lines = cJSON_AddArrayToObject(o, "output");
    for (const char *s = m->last_output; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char line[MODEL_LAST_OUTPUT_LINE + 1];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), s);
        cJSON_AddItemToArray(lines, cJSON_CreateString(line));
        s += len + (nl ? 1 : 0);
    }
    return o;
}

static void add_failed_retry(cJSON *o, const model_t *m)
{
    char retry[160];
    snprintf(retry, sizeof retry, "vramctl load %s (POST /v1/models/%s/load), or a reload that changes its config",
             m->name, m->name);
    cJSON_AddStringToObject(o, "failed_retry", retry);
}

char *status_reload_answer(core_t *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "reloaded", true);
    cJSON *failed = cJSON_AddArrayToObject(o, "failed");
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed || !m->failed)
            continue;
        cJSON *f = last_failure_json(m);
        cJSON_AddStringToObject(f, "model", m->name);
        cJSON_ReplaceItemInObject(f, "reason", cJSON_CreateString(m->failed_reason));
        add_failed_retry(f, m);
        cJSON_AddItemToArray(failed, f);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *model_json(model_t *m, uint64_t now)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    char why[256];
    bool cannot_fit = !m->failed && sched_never_fits(m, why, sizeof why);
    cJSON_AddStringToObject(o, "state", cannot_fit ? "failed" : model_state_name(model_state(m)));
    if (m->failed || cannot_fit) {
        cJSON_AddStringToObject(o, "failed_reason", m->failed ? m->failed_reason : why);
        cJSON_AddStringToObject(o, "failed_code", m->failed ? "model_failed" : "cannot_fit");
    }
    if (m->failed)
        add_failed_retry(o, m);
    if (m->failed || m->consecutive_failures > 0)
        cJSON_AddItemToObject(o, "last_failure", last_failure_json(m));
    if (m->cfg->route)
        cJSON_AddStringToObject(o, "route", m->cfg->route);
    else
        cJSON_AddNullToObject(o, "route");
    cJSON *al = cJSON_AddArrayToObject(o, "aliases");
    for (size_t i = 0; i < m->cfg->n_aliases; i++)
        cJSON_AddItemToArray(al, cJSON_CreateString(m->cfg->aliases[i]));
    cJSON_AddStringToObject(o, "kind", m->cfg->url ? "external" : "supervised");
    cJSON *q = cJSON_AddObjectToObject(o, "queue");
    cJSON_AddNumberToObject(q, "depth", (double)m->queue.depth);
    cJSON_AddNumberToObject(q, "max", (double)m->cfg->queue_max);
    uint64_t oldest = queue_oldest_ms(&m->queue);
    cJSON_AddNumberToObject(q, "oldest_wait_ms", oldest ? (double)(now - oldest) : 0);
    size_t depths[QUEUE_PRIORITIES];
    queue_depths(&m->queue, depths);
    cJSON *bp = cJSON_AddArrayToObject(q, "by_priority");
    for (int i = 0; i < QUEUE_PRIORITIES; i++)
        cJSON_AddItemToArray(bp, cJSON_CreateNumber((double)depths[i]));
    cJSON_AddNumberToObject(o, "in_flight", m->in_flight);
    cJSON_AddNumberToObject(o, "requests_total", (double)m->requests_total);
    cJSON_AddNumberToObject(o, "restarts_total", (double)m->restarts_total);
    cJSON_AddNumberToObject(o, "loads_total", (double)m->loads_total);
    cJSON_AddNumberToObject(o, "unloads_total", (double)m->unloads_total);
    cJSON_AddNumberToObject(o, "consecutive_failures", m->consecutive_failures);
    cJSON_AddNumberToObject(o, "deadline_rejections", (double)m->deadline_rejections);
    cJSON *exp = cJSON_AddObjectToObject(o, "deadline_expiries");
    cJSON_AddNumberToObject(exp, "queued", (double)m->deadline_expiries[0]);
    cJSON_AddNumberToObject(exp, "running", (double)m->deadline_expiries[1]);
    cJSON_AddNumberToObject(o, "priority", m->cfg->priority);
    cJSON_AddNumberToObject(o, "max_wait_ms", (double)sched_max_wait_ms(m)); /* resolved (auto: learned) */
    cJSON_AddBoolToObject(o, "max_wait_auto", m->cfg->max_wait_ms == 0);
    cJSON_AddStringToObject(o, "evicts", m->cfg->evicts == CFG_EVICTS_IDLE_ONLY ? "idle_only" : "any");
    cJSON_AddBoolToObject(o, "pinned", model_pinned(m));
    if (model_pinned_by_config(m))
        cJSON_AddStringToObject(o, "pinned_by", "config");
    else if (m->pinned_admin)
        cJSON_AddStringToObject(o, "pinned_by", "admin");
    else
        cJSON_AddNullToObject(o, "pinned_by");
    if (model_pinned_by_config(m)) /* the configured value; an admin pin keeps it for unpin */
        cJSON_AddNullToObject(o, "keep_alive_ms");
    else
        cJSON_AddNumberToObject(o, "keep_alive_ms", (double)m->cfg->keep_alive_ms);
    memory_json(cJSON_AddObjectToObject(o, "memory"), m);
    cJSON *rs = cJSON_AddObjectToObject(o, "resilience");
    cJSON_AddNumberToObject(rs, "oom_total", (double)m->oom_total);
    cJSON_AddNumberToObject(rs, "degraded_total", (double)m->degraded_total);
    cJSON_AddNumberToObject(rs, "invalid_total", (double)m->invalid_total);
    cJSON_AddNumberToObject(rs, "hangs_total", (double)m->hangs_total);
    cJSON_AddNumberToObject(rs, "recycles_total", (double)m->recycles_total);
    cJSON_AddNumberToObject(rs, "retry_budget_exhausted", (double)m->retry_budget_refusals);
    cJSON_AddNumberToObject(rs, "ejections_total", (double)m->ejections_total);
    cJSON_AddNumberToObject(o, "learned_load_ms", (double)m->load_ms_ewma);
    cJSON_AddNumberToObject(o, "learned_run_ms", (double)m->run_ms_ewma);
    add_park_tiers(o, m);
    cJSON_AddNumberToObject(o, "parked_bytes", (double)host_book_parked_by(m->name));
    parking_json(cJSON_AddObjectToObject(o, "parking"), m);
    cJSON *is = cJSON_AddArrayToObject(o, "instances");
    list_foreach(it, &m->instances) {
        cJSON_AddItemToArray(is, instance_json(list_entry(it, instance_t, link), now));
    }
    return o;
}

char *status_model_brief(model_t *m)
{
    enum model_state ms = model_state(m);
    const char *state = model_state_name(ms);
    const char *tier = NULL;
    if (ms == MODEL_STOPPED) {
        /* nothing serving, but a parked instance's process is up, holding the model in host
         * memory: its state and tier are the model's real state (vramctl shows the same) */
        list_foreach(it, &m->instances) {
            const instance_t *in = list_entry(it, instance_t, link);
            if (in->life.state == INST_PARKED) {
                state = instance_state_name(in->life.state);
                tier = instance_tier_name(in);
                break;
            }
        }
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", m->name);
    cJSON_AddStringToObject(o, "state", state);
    if (tier)
        cJSON_AddStringToObject(o, "tier", tier);
    cJSON_AddNumberToObject(o, "instances", m->n_instances);
    cJSON_AddBoolToObject(o, "pinned", model_pinned(m));
    if (model_pinned(m))
        cJSON_AddStringToObject(o, "pinned_by", model_pinned_by_config(m) ? "config" : "admin");
    else
        cJSON_AddNullToObject(o, "pinned_by");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* limits.per_client's table: on, tracked, busy, max, refused, evicted */
static void clients_json(cJSON *o, const config_t *cfg)
{
    dispatch_clients_stats_t st;
    dispatch_clients_stats(cfg, &st);
    cJSON *c = cJSON_AddObjectToObject(o, "clients");
    cJSON_AddBoolToObject(c, "on", st.on);
    cJSON_AddNumberToObject(c, "tracked", st.tracked);
    cJSON_AddNumberToObject(c, "busy", st.busy);
    cJSON_AddNumberToObject(c, "max", st.max_clients);
    cJSON_AddNumberToObject(c, "refused", (double)st.refused);
    cJSON_AddNumberToObject(c, "evicted", (double)st.evicted);
}

/* limits.memory_budget: limit, used, peak, refused, source */
static void mem_budget_json(cJSON *o)
{
    const buf_budget_t *bb = mem_budget();
    cJSON *m = cJSON_AddObjectToObject(o, "memory_budget");
    cJSON_AddNumberToObject(m, "limit", (double)bb->limit);
    cJSON_AddNumberToObject(m, "used", (double)bb->used);
    cJSON_AddNumberToObject(m, "peak", (double)bb->peak);
    cJSON_AddNumberToObject(m, "refused", (double)bb->refused);
    cJSON_AddStringToObject(m, "source", mem_budget_source());
}

/* host_memory: the budget for parked instances (workers/host_book.c) */
/* The CUDA driver of the checkpoint tier: null when no model asked for one. */
static void cuda_json(cJSON *o, const cuda_t *c)
{
    if (!c) {
        cJSON_AddNullToObject(o, "cuda");
        return;
    }
    cJSON *j = cJSON_AddObjectToObject(o, "cuda");
    if (!j)
        return;
    cJSON_AddBoolToObject(j, "available", cuda_available(c));
    cJSON_AddStringToObject(j, "library", cuda_library(c));
    cJSON_AddBoolToObject(j, "custom_storage", cuda_custom_storage(c));
    const char *why = cuda_available(c) ? cuda_custom_storage_reason(c) : cuda_unavailable_reason(c);
    if (why[0])
        cJSON_AddStringToObject(j, "reason", why);
    else
        cJSON_AddNullToObject(j, "reason");
    cJSON_AddNumberToObject(j, "custom_storage_held_bytes", (double)cuda_custom_storage_held(c));
}

static void host_memory_json(cJSON *o, const config_t *cfg)
{
    const host_ledger_t *h = host_book(cfg);
    cJSON *m = cJSON_AddObjectToObject(o, "host_memory");
    cJSON_AddNumberToObject(m, "budget", (double)h->budget);
    cJSON_AddNumberToObject(m, "reserve", (double)h->reserve);
    cJSON_AddNumberToObject(m, "parked", (double)h->parked);
    cJSON_AddNumberToObject(m, "free", (double)host_ledger_free(h));
    cJSON_AddNumberToObject(m, "peak", (double)h->peak);
    cJSON_AddNumberToObject(m, "refused", (double)(h->refused_budget + h->refused_host));
    cJSON_AddStringToObject(m, "source", host_book_source());
}

/* The alias_of entries: name, route, targets, and the model serving it now. */
static void alias_of_json(cJSON *arr, core_t *d)
{
    for (size_t i = 0; i < d->cfg->n_alias_ofs; i++) {
        const config_alias_of_t *a = &d->cfg->alias_ofs[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "name", a->name);
        if (a->route)
            cJSON_AddStringToObject(j, "route", a->route);
        else
            cJSON_AddNullToObject(j, "route");
        cJSON *t = cJSON_AddArrayToObject(j, "targets");
        for (size_t k = 0; k < a->n_targets; k++)
            cJSON_AddItemToArray(t, cJSON_CreateString(a->targets[k]));
        const model_t *m = router_alias_target(d, a);
        if (m)
            cJSON_AddStringToObject(j, "serving", m->name);
        else
            cJSON_AddNullToObject(j, "serving");
        cJSON_AddItemToArray(arr, j);
    }
}

char *status_render(core_t *d)
{
    uint64_t now = core_now();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", VRAMD_VERSION);
    cJSON_AddStringToObject(o, "host", d->cfg->fleet.host_name);
    cJSON_AddNumberToObject(o, "uptime_ms", (double)(now - d->started_ms));
    cJSON_AddBoolToObject(o, "draining", d->draining);
    cJSON_AddBoolToObject(o, "ready", d->ready);
    cJSON_AddStringToObject(o, "config", d->cfg->path);
    cJSON *c = cJSON_AddObjectToObject(o, "connections");
    cJSON_AddNumberToObject(c, "open", d->n_conns);
    cJSON_AddNumberToObject(c, "upgraded", proxy_upgrade_open()); /* WebSocket tunnels open now */
    cJSON_AddNumberToObject(c, "max", d->cfg->limits.max_connections);
    cJSON_AddNumberToObject(c, "refused_total", (double)d->counts[CORE_CNT_CONN_REFUSED]);
    cJSON *rv = cJSON_AddObjectToObject(c, "reserve");
    cJSON_AddNumberToObject(rv, "open", d->n_reserve_conns);
    cJSON_AddNumberToObject(rv, "max", d->cfg->limits.reserved_connections);
    cJSON_AddNumberToObject(rv, "accepted_total", (double)d->counts[CORE_CNT_RESERVE_ACCEPTED]);
    cJSON_AddNumberToObject(rv, "refused_total", (double)d->counts[CORE_CNT_RESERVE_REFUSED]);
    cJSON *to = cJSON_AddObjectToObject(o, "client_timeouts");
    static const enum core_counter timeouts[] = {CORE_CNT_HEADER_TIMEOUT, CORE_CNT_BODY_TIMEOUT, CORE_CNT_SEND_TIMEOUT};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++)
        cJSON_AddNumberToObject(to, core_counter_name(timeouts[i]), (double)d->counts[timeouts[i]]);
    cJSON *lo = cJSON_AddObjectToObject(o, "local_resource_exhausted");
    static const enum core_counter local[] = {CORE_CNT_LOCAL_PROXY, CORE_CNT_LOCAL_HEALTH, CORE_CNT_LOCAL_HOOK};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        cJSON_AddNumberToObject(lo, core_counter_name(local[i]), (double)d->counts[local[i]]);
    cJSON *q = cJSON_AddObjectToObject(o, "queues");
    cJSON_AddNumberToObject(q, "queued", core_queued_total(d));
    cJSON_AddNumberToObject(q, "max", d->cfg->limits.queue_max);
    cJSON_AddNumberToObject(q, "in_flight", core_in_flight_total(d));
    cJSON_AddNumberToObject(o, "requests_total", (double)d->requests_total);
    cJSON *rt = cJSON_AddObjectToObject(o, "retries");
    cJSON_AddNumberToObject(rt, "in_flight", d->retries_in_flight);
    cJSON_AddNumberToObject(rt, "peak", d->retries_peak);
    cJSON_AddNumberToObject(rt, "total", (double)d->retries_total);
    cJSON_AddNumberToObject(rt, "refused", (double)d->retries_refused);
    clients_json(o, d->cfg);
    mem_budget_json(o);
    host_memory_json(o, d->cfg);
    cJSON *gpu = cJSON_AddObjectToObject(o, "nvml");
    cJSON_AddBoolToObject(gpu, "ok", sched_gpu_ok());
    if (!sched_gpu_ok())
        cJSON_AddStringToObject(gpu, "error", sched_gpu_error());
    cJSON_AddBoolToObject(gpu, "stale", sched_gpu_stale());
    cJSON_AddNumberToObject(gpu, "snapshot_age_ms", (double)sched_snapshot_age_ms());
    cJSON_AddNumberToObject(gpu, "stale_after_ms", (double)sched_stale_after_ms());
    bool by_cgroup = cgroup_tree_active(d->cgroups);
    cJSON_AddStringToObject(gpu, "attribution", by_cgroup ? "cgroup" : "pid");
    cJSON *cg = cJSON_AddObjectToObject(o, "cgroup");
    enum cgroup_mode mode = d->cgroups ? d->cgroups->mode : CGROUP_OFF;
    cJSON_AddStringToObject(cg, "mode", cgroup_mode_name(mode));
    if (cgroup_mode_cannot_catch(mode))
        cJSON_AddStringToObject(cg, "cannot_catch", cgroup_mode_cannot_catch(mode));
    else
        cJSON_AddNullToObject(cg, "cannot_catch");
    if (by_cgroup)
        cJSON_AddStringToObject(cg, "path", d->cgroups->rel);
    else
        cJSON_AddNullToObject(cg, "path");
    driver_limit_totals_t dl;
    driver_limit_totals(&dl);
    cJSON *dlo = cJSON_AddObjectToObject(gpu, "driver_limits");
    cJSON_AddBoolToObject(dlo, "available", dl.unavailable[0] == '\0');
    if (dl.unavailable[0])
        cJSON_AddStringToObject(dlo, "reason", dl.unavailable);
    else
        cJSON_AddNullToObject(dlo, "reason");
    cJSON_AddNumberToObject(dlo, "active", dl.active);
    cJSON_AddNumberToObject(dlo, "sets", (double)dl.sets);
    cJSON_AddNumberToObject(dlo, "resets", (double)dl.resets);
    cJSON_AddNumberToObject(dlo, "failures", (double)dl.failures);
    cJSON_AddNumberToObject(dlo, "held_requests", (double)dl.held_requests);
    cuda_json(o, d->cuda);
    sched_status_json(cJSON_AddArrayToObject(o, "gpus"));
    cJSON *ms = cJSON_AddArrayToObject(o, "models");
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        cJSON_AddItemToArray(ms, model_json(m, now));
    }
    alias_of_json(cJSON_AddArrayToObject(o, "alias_of"), d);
    cJSON *ev = cJSON_AddArrayToObject(o, "events");
    unsigned n = d->notes_count;
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = (d->notes_next + CORE_EVENTS_KEPT - n + i) % CORE_EVENTS_KEPT;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "ts_ms", (double)d->notes[idx].wall_ms);
        cJSON_AddStringToObject(e, "text", d->notes[idx].text);
        cJSON_AddItemToArray(ev, e);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *status_models_list(core_t *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    uint64_t created = d->started_wall_ms / 1000;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            continue;
        for (size_t i = 0; i <= m->cfg->n_aliases; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", i == 0 ? m->name : m->cfg->aliases[i - 1]);
            cJSON_AddStringToObject(e, "object", "model");
            cJSON_AddNumberToObject(e, "created", (double)created);
            cJSON_AddStringToObject(e, "owned_by", "vramd");
            if (i > 0)
                cJSON_AddStringToObject(e, "alias_of", m->name);
            cJSON_AddItemToArray(data, e);
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
