/* api: vramd's own routes (health, status, model list, admin). See api.h. */
#include "net/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "jobs/jobs_api.h"
#include "net/conn.h"
#include "net/http_auth.h"
#include "net/router.h"
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
        return m->n_instances == 0 || m->cfg->url != NULL;
    return true;
}

static void answer_waiter(model_t *m, request_t *r)
{
    conn_t *c = r->conn;
    list_remove(&r->wait_link);
    r->wait = WAIT_NONE;
    request_set_ops(r, NULL);
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
    r->wait = load ? WAIT_LOAD : WAIT_UNLOAD;
    if (load)
        model_load(m);
    else
        model_unload(m, "admin");
    if (waiter_satisfied(m, r)) {
        r->wait = WAIT_NONE;
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

static bool api_handle(conn_t *c, request_t *r, const char *path, size_t len)
{
    core_t *d = c->core;
    bool get = http1_span_eq(r->head, r->msg.method, "GET") || http1_span_eq(r->head, r->msg.method, "HEAD");
    bool post = http1_span_eq(r->head, r->msg.method, "POST");

    if (path_is(path, len, "/healthz")) {
        request_set_state(r, REQ_LOCAL);
        static const char ok[] = "{\"status\":\"ok\"}";
        conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
        return true;
    }
    if (path_is(path, len, "/readyz")) {
        request_set_state(r, REQ_LOCAL);
        bool gpu_needed = false;
        list_foreach(it, &d->models) if (sched_model_uses_gpu(list_entry(it, model_t, link)->cfg)) gpu_needed = true;
        if (d->ready && !d->draining && gpu_needed && !sched_gpu_ok()) {
            conn_respond_error(c, 503, "gpu_unavailable", NULL, 5, false, "%s", sched_gpu_error());
        } else if (d->ready && !d->draining) {
            static const char ok[] = "{\"ready\":true}";
            conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
        } else {
            conn_respond_error(c, 503, d->draining ? "draining" : "not_ready", NULL, 1, false, "%s",
                               d->draining ? "vramd is draining" : "vramd is starting");
        }
        return true;
    }
    if (path_is(path, len, "/v1/status") && get) {
        request_set_state(r, REQ_LOCAL);
        respond_json(c, 200, status_render(d));
        return true;
    }
    if (path_is(path, len, "/v1/models") && get) {
        request_set_state(r, REQ_LOCAL);
        respond_json(c, 200, status_models_list(d));
        return true;
    }
    if (path_is(path, len, "/") && get) { /* the live status page (obs/page.h) */
        request_set_state(r, REQ_LOCAL);
        size_t page_len;
        const char *page = page_html(&page_len);
        conn_respond(c, 200, "text/html; charset=utf-8", page, page_len, page_headers());
        return true;
    }
    if (path_is(path, len, "/metrics") && get) { /* Prometheus text format (obs/metrics.h); no token, like /v1/status */
        request_set_state(r, REQ_LOCAL);
        size_t mlen = 0;
        char *text = metrics_render(d, &mlen);
        if (!text) {
            conn_respond_error(c, 500, "internal", NULL, -1, false, "metrics could not be rendered");
            return true;
        }
        conn_respond(c, 200, METRICS_CONTENT_TYPE, text, mlen, "Cache-Control: no-store\r\n");
        free(text);
        return true;
    }
    if (jobs_api_handle(c, r, path, len)) /* /v1/jobs... (jobs/jobs_api.h) */
        return true;
    bool admin = false;
    const char *name = NULL;
    size_t name_len = 0;
    bool load = false;
    if (len > 11 && memcmp(path, "/v1/models/", 11) == 0) {
        const char *rest = path + 11;
        size_t rl = len - 11;
        const char *slash = memchr(rest, '/', rl);
        if (slash && post) {
            size_t action_len = rl - (size_t)(slash - rest) - 1;
            if ((action_len == 4 && memcmp(slash + 1, "load", 4) == 0) ||
                (action_len == 6 && memcmp(slash + 1, "unload", 6) == 0)) {
                admin = true;
                name = rest;
                name_len = (size_t)(slash - rest);
                load = action_len == 4;
            }
        }
    }
    bool drain = post && path_is(path, len, "/v1/admin/drain");
    bool reload = post && path_is(path, len, "/v1/admin/reload");
    if (!admin && !drain && !reload)
        return false;
    request_set_state(r, REQ_LOCAL);
    if (!token_ok(d, r)) {
        log_event(LOG_WARN, "admin_unauthorized", "peer=%s path=%s", c->peer, "admin");
        conn_respond_error(c, 401, "unauthorized", NULL, -1, false, "admin route needs a valid bearer token");
        return true;
    }
    if (drain) {
        static const char ok[] = "{\"draining\":true}";
        conn_respond(c, 202, "application/json", ok, sizeof ok - 1, NULL);
        g_admin.drain(g_admin.ctx, "admin");
        return true;
    }
    if (reload) {
        char err[CONFIG_ERR_MAX];
        if (g_admin.reload(g_admin.ctx, err, sizeof err) != 0) {
            conn_respond_error(c, 400, "bad_config", NULL, -1, false, "%s", err);
        } else {
            static const char ok[] = "{\"reloaded\":true}";
            conn_respond(c, 200, "application/json", ok, sizeof ok - 1, NULL);
        }
        return true;
    }
    model_t *m = model_by_name(d, name, name_len);
    if (!m) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.*s\"",
                           (int)(name_len > 100 ? 100 : name_len), name);
        return true;
    }
    if (d->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, false, "vramd is draining");
        return true;
    }
    model_admin(c, r, m, load);
    return true;
}

void api_on_request(conn_t *c, request_t *r)
{
    const char *path = r->head + r->msg.target.off;
    size_t plen = r->msg.target.len;
    size_t qpos = 0;
    while (qpos < plen && path[qpos] != '?')
        qpos++;
    if (api_handle(c, r, path, qpos))
        return;
    router_route(c, r);
}

void api_init(core_t *core, const api_admin_ops_t *admin)
{
    g_admin = *admin;
    core_listen(core, CORE_EV_MODEL_CHANGED, on_model_changed, NULL);
}
