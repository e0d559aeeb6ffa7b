/* api: vramd's own routes (health, status, model list, admin). See api.h. */
#include "serve/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "serve/jobs_api.h"
#include "net/conn.h"
#include "http/http_auth.h"
#include "path/router.h"
#include "obs/metrics.h"
#include "obs/page.h"
#include "obs/status.h"
#include "sched/scheduler.h"
#include "workers/supervisor.h"

static bool path_is(const char *path, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    return len == n && memcmp(path, lit, n) == 0;
}

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

static void answer_waiter(model_t *m, request_t *r)
{
    conn_t *c = r->conn;
    bool unload = r->wait == WAIT_UNLOAD;
    list_remove(&r->wait_link);
    r->wait = WAIT_NONE;
    request_set_ops(r, NULL);
    if (unload && answer_local_shortage(c, m))
        return;
    if (m->failed) {
        conn_respond_error(c, 503, "model_failed", m->name, 30, false, "model %s has failed: %s",
                           m->name, m->failed_reason);
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
    request_set_state(r, REQ_LOCAL);
    log_event(LOG_INFO, load ? "admin_load" : "admin_unload", "model=%s peer=%s", m->name, c->peer);
    if (!load && m->cfg->url && !m->cfg->unload.set && !m->cfg->sleep.set && !m->cfg->checkpoint) {
        conn_respond_error(c, 409, "no_unload_hook", m->name, -1, false,
                           "model %s is an external server without an unload hook: vramd cannot unload it", m->name);
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
            conn_respond_error(c, 503, "model_failed", m->name, 30, false, "model %s has failed: %s",
                               m->name, m->failed_reason);
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

/* vramd-wide readiness: 503 while starting or draining, when NVML fails and a model needs
 * it (gpu_unavailable) or its last snapshot is stale (gpu_stale), and when every configured
 * model has failed (nothing could be served); else 200. */
static void respond_readyz(conn_t *c)
{
    core_t *d = c->core;
    bool gpu_needed = false;
    unsigned n_models = 0, n_failed = 0;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            continue;
        n_models++;
        n_failed += m->failed ? 1 : 0;
        if (sched_model_uses_gpu(m->cfg))
            gpu_needed = true;
    }
    if (d->ready && !d->draining && gpu_needed && !sched_gpu_ok()) {
        conn_respond_error(c, 503, "gpu_unavailable", NULL, 5, false, "%s", sched_gpu_error());
    } else if (d->ready && !d->draining && respond_if_gpu_stale(c, gpu_needed)) {
        return;
    } else if (d->ready && !d->draining && n_models > 0 && n_failed == n_models) {
        conn_respond_error(c, 503, "all_models_failed", NULL, 30, false,
                           "every model (%u) has failed; POST /v1/models/NAME/load to retry one", n_models);
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
static void respond_model_ready(conn_t *c, const char *name, size_t len)
{
    core_t *d = c->core;
    model_t *m = model_by_name(d, name, len);
    if (!m || m->removed) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.*s\"",
                           (int)(len > 100 ? 100 : len), name);
    } else if (!d->ready || d->draining) {
        conn_respond_error(c, 503, d->draining ? "draining" : "not_ready", m->name, 1, false, "%s",
                           d->draining ? "vramd is draining" : "vramd is starting");
    } else if (m->failed) {
        conn_respond_error(c, 503, "model_failed", m->name, 30, false, "model %s has failed: %s", m->name,
                           m->failed_reason);
    } else if (sched_model_uses_gpu(m->cfg) && !sched_gpu_ok()) {
        conn_respond_error(c, 503, "gpu_unavailable", m->name, 5, false, "%s", sched_gpu_error());
    } else {
        char body[384];
        snprintf(body, sizeof body, "{\"ready\":true,\"model\":\"%s\",\"state\":\"%s\"}", m->name,
                 model_state_name(model_state(m)));
        conn_respond(c, 200, "application/json", body, strlen(body), NULL);
    }
}

/* "/v1/models/NAME/ready": NAME's span, or false. */
static bool model_ready_path(const char *path, size_t len, const char **name, size_t *name_len)
{
    static const char pre[] = "/v1/models/", suf[] = "/ready";
    size_t pl = sizeof pre - 1, sl = sizeof suf - 1;
    if (len <= pl + sl || memcmp(path, pre, pl) != 0 || memcmp(path + len - sl, suf, sl) != 0)
        return false;
    *name = path + pl;
    *name_len = len - pl - sl;
    return memchr(*name, '/', *name_len) == NULL;
}

static void respond_metrics(conn_t *c)
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

/* The read-only routes anyone may call; false when the path is none of them. */
static bool public_route(conn_t *c, request_t *r, const char *path, size_t len)
{
    bool get = http1_span_eq(r->head, r->msg.method, "GET") || http1_span_eq(r->head, r->msg.method, "HEAD");
    static const char ok[] = "{\"status\":\"ok\"}";
    size_t page_len, name_len;
    const char *page, *name;
    if (path_is(path, len, "/healthz")) {
        request_set_state(r, REQ_LOCAL);
        conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
    } else if (path_is(path, len, "/readyz")) {
        request_set_state(r, REQ_LOCAL);
        respond_readyz(c);
    } else if (get && model_ready_path(path, len, &name, &name_len)) {
        request_set_state(r, REQ_LOCAL);
        respond_model_ready(c, name, name_len);
    } else if (path_is(path, len, "/v1/status") && get) {
        request_set_state(r, REQ_LOCAL);
        respond_json(c, 200, status_render(c->core));
    } else if (path_is(path, len, "/v1/models") && get) {
        request_set_state(r, REQ_LOCAL);
        respond_json(c, 200, status_models_list(c->core));
    } else if (path_is(path, len, "/") && get) { /* the live status page (obs/page.h) */
        request_set_state(r, REQ_LOCAL);
        page = page_html(&page_len);
        conn_respond(c, 200, "text/html; charset=utf-8", page, page_len, page_headers());
    } else if (path_is(path, len, "/metrics") && get) { /* Prometheus text (obs/metrics.h); no token */
        request_set_state(r, REQ_LOCAL);
        respond_metrics(c);
    } else {
        return false;
    }
    return true;
}

typedef struct admin_route {
    enum { ADMIN_NONE = 0, ADMIN_MODEL, ADMIN_DRAIN, ADMIN_RELOAD } kind;
    bool load;        /* ADMIN_MODEL: load (else unload) */
    const char *name; /* ADMIN_MODEL: the model's name in the path */
    size_t name_len;
} admin_route_t;

static admin_route_t parse_admin_route(const request_t *r, const char *path, size_t len)
{
    admin_route_t a = {0};
    if (!http1_span_eq(r->head, r->msg.method, "POST"))
        return a;
    if (path_is(path, len, "/v1/admin/drain")) {
        a.kind = ADMIN_DRAIN;
    } else if (path_is(path, len, "/v1/admin/reload")) {
        a.kind = ADMIN_RELOAD;
    } else if (len > 11 && memcmp(path, "/v1/models/", 11) == 0) {
        const char *rest = path + 11;
        size_t rl = len - 11;
        const char *slash = memchr(rest, '/', rl);
        size_t action_len = slash ? rl - (size_t)(slash - rest) - 1 : 0;
        if (slash && ((action_len == 4 && memcmp(slash + 1, "load", 4) == 0) ||
                      (action_len == 6 && memcmp(slash + 1, "unload", 6) == 0))) {
            a.kind = ADMIN_MODEL;
            a.name = rest;
            a.name_len = (size_t)(slash - rest);
            a.load = action_len == 4;
        }
    }
    return a;
}

static void admin_reload(conn_t *c)
{
    char err[CONFIG_ERR_MAX];
    if (g_admin.reload(g_admin.ctx, err, sizeof err) != 0) {
        conn_respond_error(c, 400, "bad_config", NULL, -1, false, "%s", err);
        return;
    }
    static const char ok[] = "{\"reloaded\":true}";
    conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
}

static void admin_route(conn_t *c, request_t *r, const admin_route_t *a)
{
    core_t *d = c->core;
    request_set_state(r, REQ_LOCAL);
    if (!token_ok(d, r)) {
        log_event(LOG_WARN, "admin_unauthorized", "peer=%s path=%s", c->peer, "admin");
        conn_respond_error(c, 401, "unauthorized", NULL, -1, false, "admin route needs a valid bearer token");
        return;
    }
    if (a->kind == ADMIN_DRAIN) {
        static const char ok[] = "{\"draining\":true}";
        conn_respond(c, 202, "application/json", ok, sizeof ok - 1, NULL);
        g_admin.drain(g_admin.ctx, "admin");
        return;
    }
    if (a->kind == ADMIN_RELOAD) {
        admin_reload(c);
        return;
    }
    model_t *m = model_by_name(d, a->name, a->name_len);
    if (!m) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.*s\"",
                           (int)(a->name_len > 100 ? 100 : a->name_len), a->name);
        return;
    }
    if (d->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, false, "vramd is draining");
        return;
    }
    model_admin(c, r, m, a->load);
}

/* vramd's own routes: true when r was one (answered or parked), false for the router. */
static bool api_handle(conn_t *c, request_t *r, const char *path, size_t len)
{
    if (public_route(c, r, path, len))
        return true;
    if (jobs_api_handle(c, r, path, len)) /* /v1/jobs... (serve/jobs_api.h) */
        return true;
    admin_route_t a = parse_admin_route(r, path, len);
    if (a.kind == ADMIN_NONE)
        return false;
    admin_route(c, r, &a);
    return true;
}

/* A connection accepted into the reserve (past limits.max_connections) is for operators:
 * health, readiness, status, metrics and the admin routes; nothing there reaches a model. */
static bool reserve_route(const request_t *r, const char *path, size_t len)
{
    return path_is(path, len, "/healthz") || path_is(path, len, "/readyz") || path_is(path, len, "/v1/status") ||
           path_is(path, len, "/metrics") || parse_admin_route(r, path, len).kind != ADMIN_NONE;
}

static void refuse_reserve(conn_t *c)
{
    core_count(c->core, CORE_CNT_RESERVE_REFUSED);
    conn_respond_error(c, 503, "overloaded", NULL, 1, true,
                       "connection limit (%u) reached: this connection may only reach /healthz, /readyz, "
                       "/v1/status, /metrics and the admin routes",
                       c->core->cfg->limits.max_connections);
}

void api_on_request(conn_t *c, request_t *r)
{
    const char *path = r->head + r->msg.target.off;
    size_t plen = r->msg.target.len;
    size_t qpos = 0;
    while (qpos < plen && path[qpos] != '?')
        qpos++;
    if (c->reserve && !reserve_route(r, path, qpos)) {
        refuse_reserve(c);
        return;
    }
    if (api_handle(c, r, path, qpos))
        return;
    if (c->reserve) {
        refuse_reserve(c); /* e.g. POST /v1/status: never the router */
        return;
    }
    router_route(c, r);
}

void api_init(core_t *core, const api_admin_ops_t *admin)
{
    g_admin = *admin;
    core_listen(core, CORE_EV_MODEL_CHANGED, on_model_changed, NULL);
}
