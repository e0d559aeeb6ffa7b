/*
 * api: vramd's own routes (health, status, model list, admin) and the one match of every
 * request against the route table (own_routes here, then jobs_api_routes). See api.h.
 * Invariant: a request is matched once; what follows is decided by the row: the reserve
 * check, the Host check (403, every route, model routes too), REQ_LOCAL, a cross-origin
 * refusal (403), 405, the token (from access), then the row's handler.
 */
#include "serve/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "http/http_auth.h"
#include "net/conn.h"
#include "obs/metrics.h"
#include "obs/page.h"
#include "obs/status.h"
#include "path/router.h"
#include "sched/scheduler.h"
#include "serve/jobs_api.h"
#include "serve/model_logs.h"
#include "serve/queue_api.h"
#include "serve/route_table.h"
#include "workers/model_state.h"
#include "workers/supervisor.h"

static void respond_json(conn_t *c, int status, char *json)
{
    if (!json) {
        conn_respond_error(c, 500, "internal", NULL, -1, false, "out of memory");
        return;
    }
    conn_respond(c, status, "application/json", json, strlen(json), NULL);
    free(json);
}

static api_admin_ops_t g_admin; /* set once by api_init */

static bool token_ok(const core_t *d, const request_t *r)
{
    return http_bearer_ok(d->cfg->admin_token, r->head, &r->msg);
}

static model_t *model_by_name(core_t *d, const char *name, size_t len)
{
    char tmp[256];
    if (len >= sizeof tmp)
        return NULL;
    memcpy(tmp, name, len);
    tmp[len] = '\0';
    return model_find(d, tmp); /* names and aliases */
}

static bool waiter_satisfied(model_t *m, request_t *r)
{
    if (r->wait == WAIT_LOAD)
        return model_state(m) == MODEL_READY || m->failed;
    if (r->wait == WAIT_UNLOAD)
        return model_unload_done(m) || m->unload_local_failed;
    if (r->wait == WAIT_RESTART)
        return model_restart_done(m, r->wait_last_old);
    return true;
}

/* An admin unload whose hook vramd could not call for want of its own descriptors or
 * memory: 503, not the model's failure. True when it answered. */
static bool answer_local_shortage(conn_t *c, model_t *m)
{
    if (!m->unload_local_failed)
        return false;
    m->unload_local_failed = false;
    conn_respond_error(c, 503, "local_resource_exhausted", m->name, 1, false,
                       "model %s: vramd could not call the unload hook: it is short of descriptors or memory "
                       "itself (see limits.max_connections and RLIMIT_NOFILE); the server was not touched",
                       m->name);
    return true;
}

/* 503 model_failed: why, the worker's last output, what retries it (model_failed_text). */
static void respond_failed(conn_t *c, const model_t *m)
{
    char text[512];
    model_failed_text(m, text, sizeof text);
    conn_respond_error(c, 503, "model_failed", m->name, 30, false, "%s", text);
}

static void answer_waiter(model_t *m, request_t *r)
{
    conn_t *c = r->conn;
    bool unload = r->wait == WAIT_UNLOAD, restart = r->wait == WAIT_RESTART;
    list_remove(&r->wait_link);
    r->wait = WAIT_NONE;
    request_set_ops(r, NULL);
    if (unload && answer_local_shortage(c, m))
        return;
    if (restart)
        log_event(m->failed ? LOG_WARN : LOG_INFO, "admin_restart_done", "model=%s state=%s instances=%u", m->name,
                  m->failed ? "failed" : "ready", m->n_instances);
    if (m->failed) {
        respond_failed(c, m);
        return;
    }
    respond_json(c, 200, status_model_brief(m));
}

static void on_model_changed(void *ctx, enum core_event ev, void *subject)
{
    model_t *m = subject;
    (void)ctx;
    (void)ev;
    list_foreach_safe(it, tmp, &m->waiters) {
        request_t *r = list_entry(it, request_t, wait_link);
        if (waiter_satisfied(m, r))
            answer_waiter(m, r);
    }
}

/* The client of a waiting admin call left (request ops). */
static void waiter_cancel(request_t *r)
{
    if (list_linked(&r->wait_link))
        list_remove(&r->wait_link);
    r->wait = WAIT_NONE;
}

static const request_ops_t waiter_ops = {.cancel = waiter_cancel};

static void model_admin(conn_t *c, request_t *r, model_t *m, bool load)
{
    r->model = m;
    log_event(LOG_INFO, load ? "admin_load" : "admin_unload", "model=%s peer=%s", m->name, c->peer);
    if (!load && m->cfg->url && !m->cfg->unload.set && !m->cfg->sleep.set && !m->cfg->checkpoint) {
        conn_respond_error(c, 409, "no_unload_hook", m->name, -1, false,
                           "model %s is an external server without an unload hook: vramd cannot unload it", m->name);
        return;
    }
    char why[256];
    if (load && sched_never_fits(m, why, sizeof why)) {
        conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
        return;
    }
    r->wait = load ? WAIT_LOAD : WAIT_UNLOAD;
    m->unload_local_failed = false;
    if (load)
        model_load(m);
    else
        model_unload(m, "admin");
    if (waiter_satisfied(m, r)) {
        r->wait = WAIT_NONE;
        if (!load && answer_local_shortage(c, m))
            return;
        if (load && m->failed) {
            respond_failed(c, m);
            return;
        }
        respond_json(c, 200, status_model_brief(m));
        return;
    }
    list_insert_tail(&m->waiters, &r->wait_link);
    request_set_ops(r, &waiter_ops);
}

/* While a model needs the GPU and the last NVML snapshot is stale (a hung or failing NVML:
 * sched_gpu_stale), 503 gpu_stale, and true; else false (nothing sent). */
static bool respond_if_gpu_stale(conn_t *c, bool gpu_needed)
{
    if (!gpu_needed || !sched_gpu_stale())
        return false;
    conn_respond_error(c, 503, "gpu_stale", NULL, 1, false,
                       "no NVML reading for %llu ms (gpu.stale_after %llu ms): GPU figures are stale, "
                       "requests that need new GPU memory wait",
                       (unsigned long long)sched_snapshot_age_ms(), (unsigned long long)sched_stale_after_ms());
    return true;
}

/* ---- the handlers of the table: each answers r once (or parks it) ------------------- */

/* vramd-wide readiness: 503 while starting or draining, when NVML fails and a model needs
 * it (gpu_unavailable) or its last snapshot is stale (gpu_stale), and when every configured
 * model has failed (nothing could be served); else 200. */
static void route_readyz(conn_t *c, request_t *r, const route_args_t *a)
{
    core_t *d = c->core;
    bool gpu_needed = false;
    unsigned n_models = 0, n_failed = 0, n_cannot_fit = 0;
    char why[256] = "";
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            continue;
        n_models++;
        if (m->failed) {
            n_failed++;
        } else if (sched_never_fits(m, why, sizeof why)) {
            n_failed++;
            n_cannot_fit++;
        }
        if (sched_model_uses_gpu(m->cfg))
            gpu_needed = true;
    }
    if (d->ready && !d->draining && gpu_needed && !sched_gpu_ok()) {
        conn_respond_error(c, 503, "gpu_unavailable", NULL, 5, false, "%s", sched_gpu_error());
    } else if (d->ready && !d->draining && respond_if_gpu_stale(c, gpu_needed)) {
        return;
    } else if (d->ready && !d->draining && n_models > 0 && n_cannot_fit == n_models) {
        conn_respond_error(c, 503, "cannot_fit", NULL, -1, false, "no model fits any GPU: %s%s", why,
                           n_models > 1 ? " (and the others likewise)" : "");
    } else if (d->ready && !d->draining && n_models > 0 && n_failed == n_models) {
        conn_respond_error(c, 503, "all_models_failed", NULL, 30, false,
                           "every model (%u) has failed or cannot fit; POST /v1/models/NAME/load to retry a failed one",
                           n_models);
    } else if (d->ready && !d->draining) {
        static const char ok[] = "{\"ready\":true}";
        conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
    } else {
        conn_respond_error(c, 503, d->draining ? "draining" : "not_ready", NULL, 1, false, "%s",
                           d->draining ? "vramd is draining" : "vramd is starting");
    }
}

/* GET /v1/models/NAME/ready: 200 when NAME can admit work now (vramd ready and not
 * draining, the model not failed, NVML answering if it needs a GPU), 503 with the reason's
 * code otherwise, 404 for an unknown name. A stopped model is ready: it loads on demand. */
static void route_model_ready(conn_t *c, request_t *r, const route_args_t *a)
{
    const char *name = a->arg[0];
    size_t len = a->len[0];
    core_t *d = c->core;
    model_t *m = model_by_name(d, name, len);
    char why[256];
    if (!m || m->removed) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.*s\"",
                           (int)(len > 100 ? 100 : len), name);
    } else if (!d->ready || d->draining) {
        conn_respond_error(c, 503, d->draining ? "draining" : "not_ready", m->name, 1, false, "%s",
                           d->draining ? "vramd is draining" : "vramd is starting");
    } else if (m->failed) {
        respond_failed(c, m);
    } else if (sched_never_fits(m, why, sizeof why)) {
        conn_respond_error(c, 503, "cannot_fit", m->name, -1, false, "%s", why);
    } else if (sched_model_uses_gpu(m->cfg) && !sched_gpu_ok()) {
        conn_respond_error(c, 503, "gpu_unavailable", m->name, 5, false, "%s", sched_gpu_error());
    } else {
        char body[384];
        snprintf(body, sizeof body, "{\"ready\":true,\"model\":\"%s\",\"state\":\"%s\"}", m->name,
                 model_state_name(model_state(m)));
        conn_respond(c, 200, "application/json", body, strlen(body), NULL);
    }
}

/* Prometheus text (obs/metrics.h) */
static void route_metrics(conn_t *c, request_t *r, const route_args_t *a)
{
    size_t mlen = 0;
    char *text = metrics_render(c->core, &mlen);
    if (!text) {
        conn_respond_error(c, 500, "internal", NULL, -1, false, "metrics could not be rendered");
        return;
    }
    conn_respond(c, 200, METRICS_CONTENT_TYPE, text, mlen, "Cache-Control: no-store\r\n");
    free(text);
}

/* 400 bad_config naming every error of the file: "message" its first line (and that more
 * follow), "errors" each line (config_load: one per error, at most 50, then "and N more"). */
static void refuse_bad_config(conn_t *c, const char *err)
{
    cJSON *body = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(body, "error");
    size_t first = strcspn(err, "\n");
    char line[1200];
    snprintf(line, sizeof line, "%.*s%s", (int)(first > 1000 ? 1000 : first), err,
             err[first] ? " (and more: see errors)" : "");
    cJSON_AddStringToObject(e, "code", "bad_config");
    cJSON_AddStringToObject(e, "message", line);
    cJSON *lines = cJSON_AddArrayToObject(e, "errors");
    for (const char *p = err; lines && *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len > 1100 ? 1100 : len), p);
        cJSON_AddItemToArray(lines, cJSON_CreateString(line));
        p += len + (p[len] == '\n');
    }
    if (c->req)
        c->req->outcome = "bad_config";
    char *json = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    respond_json(c, 400, json);
}

static void route_reload(conn_t *c, request_t *r, const route_args_t *a)
{
    char err[CONFIG_ERR_MAX];
    if (g_admin.reload(g_admin.ctx, err, sizeof err) != 0) {
        refuse_bad_config(c, err);
        return;
    }
    respond_json(c, 200, status_reload_answer(c->core)); /* with the models still failed */
}

/* The model an admin route names (past the token check), or NULL when it answered: 404
 * unknown_model, 503 draining. */
static model_t *admin_target(conn_t *c, const route_args_t *a)
{
    core_t *d = c->core;
    model_t *m = model_by_name(d, a->arg[0], a->len[0]);
    if (!m) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.*s\"",
                           (int)(a->len[0] > 100 ? 100 : a->len[0]), a->arg[0]);
        return NULL;
    }
    if (d->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, false, "vramd is draining");
        return NULL;
    }
    return m;
}

/* POST /v1/models/NAME/load|unload, past the token check. */
static void admin_model(conn_t *c, request_t *r, const route_args_t *a, bool load)
{
    model_t *m = admin_target(c, a);
    if (m)
        model_admin(c, r, m, load);
}

/* POST /v1/models/NAME/pin: pinned by the admin, then loaded (answered as a load is). */
static void route_pin(conn_t *c, request_t *r, const route_args_t *a)
{
    model_t *m = admin_target(c, a);
    if (!m)
        return;
    log_event(LOG_INFO, "admin_pin", "model=%s peer=%s already=%s", m->name, c->peer,
              model_pinned_by_config(m) ? "config" : m->pinned_admin ? "admin" : "no");
    char why[256];
    if (sched_never_fits(m, why, sizeof why)) {
        conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
        return;
    }
    model_set_pinned(m, true);
    model_admin(c, r, m, true); /* loads it (nothing new when it is loaded); 200 once READY */
}

/* POST /v1/models/NAME/unpin: back to its configured keep_alive; a model pinned by the
 * config itself (keep_alive: forever) cannot be unpinned here: 409 pinned_by_config. */
static void route_unpin(conn_t *c, request_t *r, const route_args_t *a)
{
    model_t *m = admin_target(c, a);
    if (!m)
        return;
    r->model = m;
    log_event(LOG_INFO, "admin_unpin", "model=%s peer=%s", m->name, c->peer);
    if (model_pinned_by_config(m)) {
        conn_respond_error(c, 409, "pinned_by_config", m->name, -1, false,
                           "model %s is pinned by its config (keep_alive: forever): change keep_alive in the "
                           "config and reload to unpin it",
                           m->name);
        return;
    }
    model_set_pinned(m, false);
    respond_json(c, 200, status_model_brief(m));
}

/* POST /v1/models/NAME/restart: graceful (model_restart); 200 once the new instance is
 * READY, 503 model_failed if it fails. An external server is not vramd's to restart. */
static void route_restart(conn_t *c, request_t *r, const route_args_t *a)
{
    model_t *m = admin_target(c, a);
    if (!m)
        return;
    r->model = m;
    log_event(LOG_INFO, "admin_restart", "model=%s peer=%s", m->name, c->peer);
    if (m->cfg->url) {
        conn_respond_error(c, 409, "not_supervised", m->name, -1, false,
                           "model %s is an external server (url:): vramd does not run it and cannot restart it",
                           m->name);
        return;
    }
    char why[256];
    if (sched_never_fits(m, why, sizeof why)) {
        conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
        return;
    }
    r->wait = WAIT_RESTART;
    r->wait_last_old = model_restart(m);
    if (waiter_satisfied(m, r)) { /* a new instance is never READY at once; kept for safety */
        r->wait = WAIT_NONE;
        respond_json(c, 200, status_model_brief(m));
        return;
    }
    list_insert_tail(&m->waiters, &r->wait_link);
    request_set_ops(r, &waiter_ops);
}

static void route_healthz(conn_t *c, request_t *r, const route_args_t *a)
{
    static const char ok[] = "{\"status\":\"ok\"}";
    conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
}

static void route_status(conn_t *c, request_t *r, const route_args_t *a)
{
    respond_json(c, 200, status_render(c->core));
}

static void route_models(conn_t *c, request_t *r, const route_args_t *a)
{
    respond_json(c, 200, status_models_list(c->core));
}

static void route_page(conn_t *c, request_t *r, const route_args_t *a) /* the live status page (obs/page.h) */
{
    size_t page_len;
    const char *page = page_html(&page_len);
    conn_respond(c, 200, "text/html; charset=utf-8", page, page_len, page_headers());
}

static void route_load(conn_t *c, request_t *r, const route_args_t *a)
{
    admin_model(c, r, a, true);
}

static void route_unload(conn_t *c, request_t *r, const route_args_t *a)
{
    admin_model(c, r, a, false);
}

static void route_drain(conn_t *c, request_t *r, const route_args_t *a)
{
    static const char ok[] = "{\"draining\":true}";
    conn_respond(c, 202, "application/json", ok, sizeof ok - 1, NULL);
    g_admin.drain(g_admin.ctx, "admin");
}

/* ---- the table (docs/api.md lists the same rows; test_route_docs compares them) ---- */

#define GET_HEAD (API_GET | API_HEAD)

static const api_route_t own_routes[] = {
    /* methods, path pattern, handler, the token it needs, reachable from the reserve. None
     * of these owns its path: another method goes on to the router (e.g. a model with
     * route: / still gets POST /); the jobs rows own theirs (405). */
    {API_ANY, "/healthz", route_healthz, API_PUBLIC, .reserve = true},
    {API_ANY, "/readyz", route_readyz, API_PUBLIC, .reserve = true},
    {GET_HEAD, "/v1/models/*/ready", route_model_ready, API_PUBLIC, .reserve = false},
    {GET_HEAD, "/v1/status", route_status, API_PUBLIC, .reserve = true},
    {GET_HEAD, "/v1/models", route_models, API_PUBLIC, .reserve = false},
    {GET_HEAD, "/v1/queue", queue_route, API_PUBLIC, .reserve = false},
    {GET_HEAD, "/", route_page, API_PUBLIC, .reserve = false},
    {GET_HEAD, "/metrics", route_metrics, API_PUBLIC, .reserve = true},
    {GET_HEAD, "/v1/models/*/logs", model_logs_route, API_ADMIN, .reserve = true},
    {API_POST, "/v1/models/*/load", route_load, API_ADMIN, .reserve = true},
    {API_POST, "/v1/models/*/unload", route_unload, API_ADMIN, .reserve = true},
    {API_POST, "/v1/models/*/pin", route_pin, API_ADMIN, .reserve = true},
    {API_POST, "/v1/models/*/unpin", route_unpin, API_ADMIN, .reserve = true},
    {API_POST, "/v1/models/*/restart", route_restart, API_ADMIN, .reserve = true},
    {API_POST, "/v1/admin/drain", route_drain, API_ADMIN, .reserve = true},
    {API_POST, "/v1/admin/reload", route_reload, API_ADMIN, .reserve = true},
    {0},
};

static const api_route_t *const route_tables[] = {own_routes, jobs_api_routes, NULL};

const api_route_t *const *api_route_tables(void)
{
    return route_tables;
}

/* ---- one match per request ------------------------------------------------------------ */

/* A reserve connection asked for a row not marked reserve (or none): 503, then close. */
static void refuse_reserve(conn_t *c)
{
    char allowed[400];
    route_reserve_text(route_tables, allowed, sizeof allowed);
    core_count(c->core, CORE_CNT_RESERVE_REFUSED);
    conn_respond_error(c, 503, "overloaded", NULL, 1, true,
                       "connection limit (%u) reached: this connection may only reach %s",
                       c->core->cfg->limits.max_connections, allowed);
}

static void method_not_allowed(conn_t *c, unsigned allowed)
{
    char text[64];
    route_methods_text(allowed, ", ", text, sizeof text);
    conn_respond_error(c, 405, "method_not_allowed", NULL, -1, false, "allowed: %s", text);
}

/* The token the row's access asks for; false when it answered 401. */
static bool authorized(conn_t *c, const request_t *r, const api_route_t *row)
{
    if (row->access != API_ADMIN || token_ok(c->core, r))
        return true;
    log_event(LOG_WARN, "admin_unauthorized", "peer=%s path=%s", c->peer, row->path);
    conn_respond_error(c, 401, "unauthorized", NULL, -1, false, "%s",
                       row->unauthorized ? row->unauthorized : "admin route needs a valid bearer token");
    return false;
}

/* A state-changing request (any method but GET and HEAD) to one of vramd's own routes from
 * a browser page of another origin (http_cross_origin): 403 cross_origin, token or not (a
 * public route such as POST /v1/jobs needs none, and a page on the host's browser reaches a
 * loopback vramd). vramd's status page is same-origin; curl and vramctl send no Origin. */
static bool cross_origin_refused(conn_t *c, const request_t *r)
{
    if (route_method(r->head, r->msg.method) & GET_HEAD || !http_cross_origin(r->head, &r->msg))
        return false;
    const http1_header_t *o = http1_find_header(r->head, &r->msg, "Origin");
    log_event(LOG_WARN, "cross_origin_refused", "peer=%s origin=%.*s", c->peer, o ? (int)o->value.len : 1,
              o ? r->head + o->value.off : "-");
    conn_respond_error(c, 403, "cross_origin", NULL, -1, false, "%s",
                       "a state-changing request to vramd's own routes from a page of another origin is refused");
    return true;
}

/* DNS rebinding: a page whose name an attacker points at 127.0.0.1 is same-origin to the
 * browser, so the cross-origin check lets it through. Where the check is on (allowed_hosts
 * listed, or no admin token: a loopback vramd anyone on the host reaches), a request whose
 * Host names neither an IP literal, localhost nor a listed name is refused 403
 * host_not_allowed, on every route: vramd's own and the models' (a model's answers and the
 * GPU time it books are what such a page would read and spend). */
static bool host_refused(conn_t *c, const request_t *r)
{
    const config_t *cfg = c->core->cfg;
    if ((cfg->admin_token && !cfg->allowed_hosts.listed) || c->job_attempt)
        return false; /* a job's attempt is vramd's own (Host vramd-jobs): its POST /v1/jobs was checked */
    if (http_host_allowed(r->head, &r->msg, cfg->allowed_hosts.names, cfg->allowed_hosts.n))
        return false;
    const http1_header_t *h = http1_find_header(r->head, &r->msg, "Host"); /* set: allowed without */
    char host[200];
    snprintf(host, sizeof host, "%.*s", (int)(h->value.len < sizeof host ? h->value.len : sizeof host - 1),
             r->head + h->value.off);
    log_event(LOG_WARN, "host_not_allowed", "peer=%s host=%s", c->peer, host);
    conn_respond_error(c, 403, "host_not_allowed", NULL, -1, r->msg.upgrade,
                       "Host %s is not one of vramd's names (DNS-rebinding protection): connect to 127.0.0.1 "
                       "or localhost, or list the name in allowed_hosts in the config",
                       host);
    return true;
}

void api_on_request(conn_t *c, request_t *r)
{
    const char *path = r->head + r->msg.target.off;
    size_t len = 0;
    while (len < r->msg.target.len && path[len] != '?')
        len++;
    route_match_t m;
    route_find(route_tables, route_method(r->head, r->msg.method), path, len, &m);
    if (c->reserve && !(m.row && m.row->reserve)) {
        refuse_reserve(c); /* nothing on the reserve reaches a model, nor POST /v1/status */
        return;
    }
    if (host_refused(c, r))
        return;
    if (!m.row && !(m.first && m.first->own_path)) {
        router_route(c, r);
        return;
    }
    request_set_state(r, REQ_LOCAL);
    if (r->msg.upgrade)
        conn_respond_error(c, 400, "upgrade_not_allowed", NULL, -1, true, "vramd's own routes take no protocol upgrades");
    else if (cross_origin_refused(c, r))
        return;
    else if (!m.row)
        method_not_allowed(c, m.allowed);
    else if (authorized(c, r, m.row))
        m.row->handler(c, r, &m.args);
}

/* The head handler (Expect: 100-continue, body not read yet): the same table match as
 * api_on_request. A reserve connection that no reserve row admits is refused on its head;
 * vramd's own routes (a row, or a path a row owns: 405) decide on the whole request; the
 * rest is the router's head check. */
bool api_on_head(conn_t *c, request_t *r)
{
    const char *path = r->head + r->msg.target.off;
    size_t len = 0;
    while (len < r->msg.target.len && path[len] != '?')
        len++;
    route_match_t m;
    route_find(route_tables, route_method(r->head, r->msg.method), path, len, &m);
    if (c->reserve && !(m.row && m.row->reserve)) {
        refuse_reserve(c);
        return true;
    }
    if (host_refused(c, r))
        return true;
    if (m.row || (m.first && m.first->own_path))
        return false;
    return router_head_refused(c, r);
}

void api_init(core_t *core, const api_admin_ops_t *admin)
{
    g_admin = *admin;
    core_listen(core, CORE_EV_MODEL_CHANGED, on_model_changed, NULL);
}
