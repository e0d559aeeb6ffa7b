/*
 * jobs_api: HTTP routes of durable jobs (see jobs_api.h; rules in docs/jobs.md).
 *
 * Every handler answers exactly once (conn_respond / conn_respond_error, or a result send
 * that ends with conn_request_done). Store calls (jobstore/jstore.h) answer through a callback:
 * at once for SQLite (one fsync'd commit on the loop thread before a 202), later for
 * PostgreSQL. Meanwhile the request is owned by an api_wait_t (its ops): a client that
 * leaves only marks it gone, and the answer that comes later is dropped.
 */
#include "serve/jobs_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "core/core.h"
#include "http/http_path.h"
#include "jobs/jobs.h"
#include "jobstore/job_id.h"
#include "jobstore/job_request.h"
#include "jobstore/job_submitter.h"
#include "jobstore/journal.h"
#include "jobstore/jstore.h"
#include "jobstore/result_store.h"
#include "net/conn.h"
#include "path/router.h"
#include "policy/client_limit.h"
#include "sched/scheduler.h"
#include "serve/queue_api.h"
#include "serve/result_send.h"

#define JOBS_LIST_DEFAULT 100
#define JOBS_LIST_MAX 1000
#define JOBS_QUERY_VALUE_MAX 256

/* ---- small helpers ------------------------------------------------------------------ */

/* A request waiting for the store's answer. */
typedef struct api_wait {
    conn_t *c;
    request_t *r;
    bool gone; /* the client left: answer nobody */
    jobs_t *J;
    char id[JOB_ID_SIZE];
    char model[128];
} api_wait_t;

static void wait_cancel(request_t *r)
{
    api_wait_t *w = r->owner;
    if (w)
        w->gone = true;
    r->owner = NULL;
    request_set_ops(r, NULL);
}

static const request_ops_t wait_ops = {.cancel = wait_cancel};

/* Own r until the store answers. NULL when out of memory (answered with 500 then). */
static api_wait_t *wait_new(conn_t *c, request_t *r, jobs_t *J, const char *id)
{
    api_wait_t *w = calloc(1, sizeof *w);
    if (!w) {
        conn_respond_error(c, 500, "internal", NULL, -1, false, "out of memory");
        return NULL;
    }
    w->c = c;
    w->r = r;
    w->J = J;
    if (id)
        snprintf(w->id, sizeof w->id, "%s", id);
    r->owner = w;
    request_set_ops(r, &wait_ops);
    return w;
}

/* The store answered: true when the client is still there (the request is the conn's again;
 * answer it now). Frees nothing: the caller frees w with free() when done. */
static bool wait_take(api_wait_t *w)
{
    if (w->gone)
        return false;
    w->r->owner = NULL;
    request_set_ops(w->r, NULL);
    return true;
}

static void respond_json(conn_t *c, int status, cJSON *doc, const char *extra)
{
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        conn_respond_error(c, 500, "internal", NULL, -1, false, "out of memory");
        return;
    }
    conn_respond(c, status, "application/json", text, strlen(text), extra); /* any size */
    free(text);
}

static void add_time(cJSON *o, const char *key, int64_t ms)
{
    if (ms <= 0) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char s[40];
    snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    cJSON_AddStringToObject(o, key, s);
}

static cJSON *render_job(const job_record_t *rec)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", rec->id);
    cJSON_AddStringToObject(o, "model", rec->model ? rec->model : "");
    cJSON_AddStringToObject(o, "state", job_state_name(rec->state));
    cJSON_AddStringToObject(o, "method", rec->method ? rec->method : "");
    cJSON_AddStringToObject(o, "path", rec->path ? rec->path : "");
    cJSON_AddNumberToObject(o, "priority", rec->priority);
    cJSON_AddNumberToObject(o, "attempts", rec->attempts);
    cJSON_AddNumberToObject(o, "max_attempts", rec->max_attempts);
    add_time(o, "created_at", rec->created_ms);
    add_time(o, "started_at", rec->started_ms);
    add_time(o, "finished_at", rec->finished_ms);
    add_time(o, "deadline_at", rec->deadline_wall_ms);
    cJSON_AddNumberToObject(o, "degrade_level", rec->degrade_level);
    if (rec->gpu >= 0)
        cJSON_AddNumberToObject(o, "gpu", rec->gpu);
    else
        cJSON_AddNullToObject(o, "gpu");
    if (rec->http_status > 0)
        cJSON_AddNumberToObject(o, "http_status", rec->http_status);
    else
        cJSON_AddNullToObject(o, "http_status");
    if (rec->error_code) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        if (e) {
            cJSON_AddStringToObject(e, "code", rec->error_code);
            cJSON_AddStringToObject(e, "message", rec->error_message ? rec->error_message : "");
        }
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    cJSON_AddStringToObject(o, "result_state", job_result_state_name(rec->result_state));
    if (rec->state == JOB_SUCCEEDED && rec->result_state == JOB_RESULT_STORED) {
        cJSON *res = cJSON_AddObjectToObject(o, "result");
        if (res) {
            char url[64];
            snprintf(url, sizeof url, "/v1/jobs/%s/result", rec->id);
            cJSON_AddStringToObject(res, "content_type", rec->result_type ? rec->result_type : "application/octet-stream");
            cJSON_AddNumberToObject(res, "bytes", (double)rec->result_bytes);
            cJSON_AddStringToObject(res, "url", url);
        }
    } else {
        cJSON_AddNullToObject(o, "result");
    }
    return o;
}

static bool own_route(const char *path)
{
    size_t n = strcspn(path, "?");
    static const char *const exact[] = {"/", "/healthz", "/readyz", "/metrics", "/v1/status"};
    static const char *const prefixes[] = {"/v1/jobs", "/v1/models", "/v1/admin"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strlen(exact[i]) == n && memcmp(path, exact[i], n) == 0)
            return true;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t pl = strlen(prefixes[i]);
        if (n >= pl && memcmp(path, prefixes[i], pl) == 0 && (n == pl || path[pl] == '/'))
            return true;
    }
    return false;
}

static model_t *runtime_model(core_t *d, const char *name)
{
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (!m->removed && strcmp(m->name, name) == 0)
            return m;
    }
    return NULL;
}

/* The path the loopback request uses so that it lands on model m (see docs/jobs.md,
 * "Which model runs a job"). NULL with err filled when it cannot. Caller frees. */
static char *job_path(core_t *d, model_t *m, const job_request_t *jr, char *err, size_t errlen)
{
    const char *route = m->cfg->route;
    char *path;
    if (route) {
        size_t rl = strlen(route); /* ends with '/' */
        bool under = strncmp(jr->path, route, rl) == 0 ||
                     (strncmp(jr->path, route, rl - 1) == 0 && (jr->path[rl - 1] == '\0' || jr->path[rl - 1] == '?'));
        if (under) {
            path = strdup(jr->path);
        } else {
            size_t n = rl - 1 + strlen(jr->path) + 1;
            path = malloc(n);
            if (path)
                snprintf(path, n, "%.*s%s", (int)(rl - 1), route, jr->path);
        }
        if (!path) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        if (strlen(path) > JOB_REQUEST_MAX_PATH + 256 || own_route(path) ||
            router_find_model_by_path(d, path, strlen(path), NULL) != m) {
            snprintf(err, errlen, "path: \"%.200s\" does not reach model %s", path, m->name);
            free(path);
            return NULL;
        }
        return path;
    }
    /* no route: OpenAI-style routing by the body's "model", for POST /v1/... */
    if (strcmp(jr->method, "POST") != 0 || strncmp(jr->path, "/v1/", 4) != 0 || own_route(jr->path) ||
        router_find_model_by_path(d, jr->path, strlen(jr->path), NULL) != NULL) {
        snprintf(err, errlen, "path: model %s has no route, so its jobs must be POST /v1/... requests whose JSON"
                              " body names the model (and the path must not be one of vramd's own routes)",
                 m->name);
        return NULL;
    }
    cJSON *doc = jr->body ? cJSON_ParseWithLength(jr->body, jr->body_len) : NULL;
    const cJSON *mv = doc ? cJSON_GetObjectItemCaseSensitive(doc, "model") : NULL;
    const model_config_t *named = cJSON_IsString(mv) && mv->valuestring ? config_find_model(d->cfg, mv->valuestring)
                                                                         : NULL;
    bool same = named && strcmp(named->name, m->name) == 0;
    cJSON_Delete(doc);
    if (!same) {
        snprintf(err, errlen, "body: model %s has no route, so the body must be a JSON object whose \"model\""
                              " names it", m->name);
        return NULL;
    }
    path = strdup(jr->path);
    if (!path)
        snprintf(err, errlen, "out of memory");
    return path;
}

static char *headers_json(const job_request_t *jr)
{
    cJSON *h = cJSON_CreateObject();
    if (!h)
        return NULL;
    for (size_t i = 0; i < jr->n_headers; i++)
        cJSON_AddStringToObject(h, jr->headers[i].name, jr->headers[i].value);
    if (jr->content_type && !job_request_header(jr, "Content-Type"))
        cJSON_AddStringToObject(h, "Content-Type", jr->content_type);
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    return text;
}

/* ---- POST /v1/jobs ------------------------------------------------------------------- */

static void after_insert(void *ctx, int rc, const char *err)
{
    api_wait_t *w = ctx;
    if (rc != JOURNAL_OK)
        log_event(LOG_ERROR, "job_journal_error", "job_id=%s op=%s error=%s", w->id, "insert", err);
    if (!wait_take(w)) {
        free(w);
        return;
    }
    conn_t *c = w->c;
    if (rc == JOURNAL_FULL) {
        conn_respond_error(c, 507, "disk_full", w->model, 60, false, "the job journal cannot grow: %s", err);
    } else if (rc == JOURNAL_UNAVAILABLE || (rc == JOURNAL_ERROR && jobs_store(w->J)->lease_ms)) {
        conn_respond_error(c, 503, "jobs_unavailable", w->model, 5, false, "the job could not be stored: %s", err);
    } else if (rc != JOURNAL_OK) {
        /* not stored (journal_insert settles a failed write, see journal.h): never a 202 */
        conn_respond_error(c, 503, "journal_error", w->model, 5, false, "the job could not be stored: %s", err);
    } else {
        cJSON *o = cJSON_CreateObject();
        char url[64], extra[96];
        snprintf(url, sizeof url, "/v1/jobs/%s", w->id);
        snprintf(extra, sizeof extra, "Location: %s\r\n", url);
        if (o) {
            cJSON_AddStringToObject(o, "id", w->id);
            cJSON_AddStringToObject(o, "state", "queued");
            cJSON_AddStringToObject(o, "url", url);
        }
        core_t *d = c->core;
        respond_json(c, 202, o, extra);
        jobs_pump(d);
    }
    free(w);
}

/* Who submits the job, as limits.per_client will count its attempts (jobstore/job_submitter.h):
 * the JSON to store (malloc'd), or NULL when out of memory. */
static char *submitter_json(const conn_t *c, const request_t *r)
{
    const config_t *cfg = c->core->cfg;
    job_submitter_t sub;
    job_submitter_capture(&sub, c->peer, cfg->per_client.key == CLIENT_KEY_HEADER ? cfg->per_client.header : NULL,
                          r->head, &r->msg);
    if (cfg->per_client.key == CLIENT_KEY_TOKEN) {
        char key[CLIENT_KEY_MAX];
        client_key(CLIENT_KEY_TOKEN, NULL, r->head, &r->msg, c->peer, key);
        if (strncmp(key, "token#", 6) == 0)
            job_submitter_set_key(&sub, key); /* a digest, never the token */
    }
    return job_submitter_to_json(&sub);
}

/* What refuses a parsed job for its model now: it can never fit (422), or the disk under
 * state_dir is below jobs.min_free_disk (507). True when it answered. */
static bool submit_refused(conn_t *c, model_t *m)
{
    const config_t *cfg = c->core->cfg;
    if (sched_model_uses_gpu(m->cfg) && sched_gpu_ok()) {
        char why[300];
        if (sched_never_fits(m, why, sizeof why)) {
            conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
            return true;
        }
    }
    uint64_t free_bytes = 0;
    int frc = result_store_free_disk(cfg->state_dir, &free_bytes);
    if (frc == 0 && free_bytes < cfg->jobs.min_free_disk) {
        log_event(LOG_WARN, "job_refused_disk_full", "free_bytes=%llu min_free_disk=%llu",
                  (unsigned long long)free_bytes, (unsigned long long)cfg->jobs.min_free_disk);
        conn_respond_error(c, 507, "disk_full", m->name, 60, false,
                           "%llu bytes free under state_dir, below jobs.min_free_disk (%llu)",
                           (unsigned long long)free_bytes, (unsigned long long)cfg->jobs.min_free_disk);
        return true;
    }
    return false;
}

static void submit(conn_t *c, request_t *r, jobs_t *J)
{
    core_t *d = c->core;
    const config_t *cfg = d->cfg;
    if (d->draining) {
        conn_respond_error(c, 503, "draining", NULL, 5, false, "vramd is draining: no new jobs");
        return;
    }
    job_request_limits_t lim = {.max_body = cfg->limits.max_body,
                                .max_header_bytes = cfg->limits.max_header > 2048 ? cfg->limits.max_header - 1024
                                                                                  : cfg->limits.max_header / 2};
    job_request_t jr;
    char err[600];
    if (job_request_parse(r->body.data, r->body.len, &lim, &jr, err, sizeof err) != 0) {
        conn_respond_error(c, 400, "bad_request", NULL, -1, false, "%s", err);
        return;
    }
    char *path = NULL, *hjson = NULL, *cjson = NULL;
    const model_config_t *mc = config_find_model(cfg, jr.model);
    model_t *m = mc ? runtime_model(d, mc->name) : NULL;
    if (!m) {
        conn_respond_error(c, 404, "unknown_model", jr.model, -1, false, "no model named \"%s\"", jr.model);
        goto out;
    }
    path = job_path(d, m, &jr, err, sizeof err);
    if (!path) {
        conn_respond_error(c, 400, "bad_request", m->name, -1, false, "%s", err);
        goto out;
    }
    if (submit_refused(c, m))
        goto out;
    hjson = headers_json(&jr);
    if (!hjson) {
        conn_respond_error(c, 500, "internal", m->name, -1, false, "out of memory");
        goto out;
    }
    job_record_t rec;
    job_record_init(&rec);
    if (job_id_generate(rec.id) != 0) {
        conn_respond_error(c, 500, "internal", m->name, -1, false, "no randomness for a job id");
        goto out;
    }
    int64_t now = jobs_wall_ms();
    rec.model = m->name;
    rec.method = jr.method;
    rec.path = path;
    rec.headers_json = hjson;
    rec.body = (unsigned char *)jr.body;
    rec.body_len = jr.body_len;
    rec.priority = jr.priority >= 0 ? jr.priority : mc->priority;
    rec.deadline_wall_ms = jr.deadline_ms ? now + (int64_t)jr.deadline_ms : 0;
    rec.max_attempts = (int)cfg->jobs.max_attempts;
    rec.created_ms = now;
    rec.est_bytes = sched_model_uses_gpu(mc) ? sched_request_estimate(m) : 0;
    rec.client_json = cjson = submitter_json(c, r);
    if (!cjson) {
        conn_respond_error(c, 500, "internal", m->name, -1, false, "out of memory");
        goto out;
    }
    api_wait_t *w = wait_new(c, r, J, rec.id);
    if (!w)
        goto out;
    snprintf(w->model, sizeof w->model, "%s", m->name);
    log_event(LOG_INFO, "job_submitted", "job_id=%s model=%s method=%s path=%s priority=%d body_bytes=%zu peer=%s",
              rec.id, m->name, rec.method, rec.path, rec.priority, rec.body_len, c->peer);
    jstore_insert(jobs_store(J), &rec, after_insert, w); /* copies what it keeps */
out:
    free(path);
    free(hjson);
    free(cjson);
    job_request_free(&jr);
}

/* ---- GET /v1/jobs (list) ------------------------------------------------------------- */


static void after_list(void *ctx, int rc, const char *err, const job_record_t *recs, size_t n,
                       const journal_cursor_t *next)
{
    api_wait_t *w = ctx;
    if (!wait_take(w)) {
        free(w);
        return;
    }
    conn_t *c = w->c;
    free(w);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    bool oom = !o || !arr;
    for (size_t i = 0; !oom && rc == JOURNAL_OK && i < n; i++) {
        cJSON *one = render_job(&recs[i]);
        if (!one || !cJSON_AddItemToArray(arr, one)) {
            cJSON_Delete(one);
            oom = true;
        }
    }
    if (rc != JOURNAL_OK || oom) {
        cJSON_Delete(o);
        cJSON_Delete(arr);
        conn_respond_error(c, rc == JOURNAL_OK ? 500 : 503, rc == JOURNAL_OK ? "internal" : "jobs_unavailable", NULL,
                           rc == JOURNAL_OK ? -1 : 5, false, "listing jobs failed: %s", oom ? "out of memory" : err);
        return;
    }
    cJSON_AddItemToObject(o, "jobs", arr);
    if (next && next->valid) {
        char text[JOURNAL_CURSOR_TEXT_MAX];
        journal_cursor_format(next, text, sizeof text);
        cJSON_AddStringToObject(o, "next_cursor", text);
    } else {
        cJSON_AddNullToObject(o, "next_cursor");
    }
    respond_json(c, 200, o, NULL);
}

static void list_jobs(conn_t *c, request_t *r, jobs_t *J)
{
    core_t *d = c->core;
    const char *target = r->head + r->msg.target.off;
    size_t tlen = r->msg.target.len;
    const char *q = memchr(target, '?', tlen);
    journal_filter_t filter = {.state = -1, .model = NULL};
    journal_cursor_t cursor = {.valid = false};
    size_t limit = JOBS_LIST_DEFAULT;
    char model[JOBS_QUERY_VALUE_MAX] = "";
    if (q) {
        const char *p = q + 1, *end = target + tlen;
        while (p < end) {
            const char *amp = memchr(p, '&', (size_t)(end - p));
            const char *stop = amp ? amp : end;
            const char *eq = memchr(p, '=', (size_t)(stop - p));
            if (stop == p) {
                p = stop + 1;
                continue;
            }
            char key[32], val[JOBS_QUERY_VALUE_MAX];
            if (!eq || http_query_decode(p, (size_t)(eq - p), key, sizeof key) != 0 ||
                http_query_decode(eq + 1, (size_t)(stop - eq - 1), val, sizeof val) != 0) {
                conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                                   "query: expected key=value pairs (state, model, limit, cursor)");
                return;
            }
            if (strcmp(key, "state") == 0) {
                filter.state = job_state_parse(val);
                if (filter.state < 0) {
                    conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                                       "state: expected queued, running, succeeded, failed or cancelled");
                    return;
                }
            } else if (strcmp(key, "model") == 0) {
                const model_config_t *mc = config_find_model(d->cfg, val);
                snprintf(model, sizeof model, "%s", mc ? mc->name : val);
                filter.model = model;
            } else if (strcmp(key, "limit") == 0) {
                char *e = NULL;
                long v = strtol(val, &e, 10);
                if (!val[0] || *e || v < 1 || v > JOBS_LIST_MAX) {
                    conn_respond_error(c, 400, "bad_request", NULL, -1, false, "limit: expected an integer 1..%d",
                                       JOBS_LIST_MAX);
                    return;
                }
                limit = (size_t)v;
            } else if (strcmp(key, "cursor") == 0) {
                if (journal_cursor_parse(val, &cursor) != 0) {
                    conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                                       "cursor: not a cursor given by a previous list");
                    return;
                }
            } else {
                conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                                   "query: unknown parameter \"%.32s\" (known: state, model, limit, cursor)", key);
                return;
            }
            p = stop + 1;
        }
    }
    api_wait_t *w = wait_new(c, r, J, NULL);
    if (w)
        jstore_list(jobs_store(J), &filter, &cursor, limit, after_list, w);
}

/* ---- one job ------------------------------------------------------------------------ */

static void store_failed(conn_t *c, const char *err)
{
    conn_respond_error(c, 503, "jobs_unavailable", NULL, 5, false, "the job store failed: %s", err);
}

/* The job and, while it is queued, its place (serve/queue_api.h). */
static cJSON *job_with_place(conn_t *c, const job_record_t *rec)
{
    cJSON *o = render_job(rec);
    if (o)
        queue_job_fields(o, c->core, rec);
    return o;
}

static void after_get(void *ctx, int rc, const char *err, const job_record_t *rec)
{
    api_wait_t *w = ctx;
    if (wait_take(w)) {
        if (rc == JOURNAL_NOT_FOUND)
            conn_respond_error(w->c, 404, "not_found", NULL, -1, false, "no job %s", w->id);
        else if (rc != JOURNAL_OK)
            store_failed(w->c, err);
        else
            respond_json(w->c, 200, job_with_place(w->c, rec), NULL);
    }
    free(w);
}

static void show_job(conn_t *c, request_t *r, jobs_t *J, const char *id)
{
    api_wait_t *w = wait_new(c, r, J, id);
    if (w)
        jstore_get(jobs_store(J), id, after_get, w);
}

static void after_cancel(void *ctx, int rc, const char *err, enum job_state was)
{
    api_wait_t *w = ctx;
    const char *id = w->id;
    if (rc == JOURNAL_OK) {
        log_event(LOG_INFO, "job_cancelled", "job_id=%s was=%s", id, job_state_name(was));
        jobs_cancel_attempt(w->J, id); /* closes its loopback request, if one is in flight here */
    }
    if (!wait_take(w)) {
        free(w);
        return;
    }
    conn_t *c = w->c;
    if (rc == JOURNAL_NOT_FOUND) {
        conn_respond_error(c, 404, "not_found", NULL, -1, false, "no job %s", id);
    } else if (rc == JOURNAL_CONFLICT) {
        conn_respond_error(c, 409, "already_finished", NULL, -1, false, "job %s is already %s", id,
                           job_state_name(was));
    } else if (rc == JOURNAL_FULL) {
        conn_respond_error(c, 507, "disk_full", NULL, 60, false, "the cancel could not be recorded: %s", err);
    } else if (rc != JOURNAL_OK) {
        store_failed(c, err);
    } else {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddStringToObject(o, "id", id);
            cJSON_AddStringToObject(o, "state", "cancelled");
            cJSON_AddStringToObject(o, "was", job_state_name(was));
        }
        respond_json(c, 200, o, NULL);
    }
    free(w);
}

static void cancel_job(conn_t *c, request_t *r, jobs_t *J, const char *id)
{
    api_wait_t *w = wait_new(c, r, J, id);
    if (w)
        jstore_cancel(jobs_store(J), id, jobs_wall_ms(), after_cancel, w);
}

/* 409/404 for a job that has no result to give; false when it has one (succeeded). */
static bool refuse_result(conn_t *c, const job_record_t *rec)
{
    const char *id = rec->id;
    switch (rec->state) {
    case JOB_QUEUED:
    case JOB_RUNNING:
        conn_respond_error(c, 409, "not_done", rec->model, 2, false, "job %s is %s", id, job_state_name(rec->state));
        return true;
    case JOB_FAILED:
        conn_respond_error(c, 409, "job_failed", rec->model, -1, false, "job %s failed: %s: %s", id,
                           rec->error_code ? rec->error_code : "error", rec->error_message ? rec->error_message : "");
        return true;
    case JOB_CANCELLED:
        conn_respond_error(c, 409, "job_cancelled", rec->model, -1, false, "job %s was cancelled", id);
        return true;
    default:
        return false;
    }
}

static void result_gone(conn_t *c, const job_record_t *rec)
{
    conn_respond_error(c, 410, "result_expired", rec->model, -1, false,
                       "the result of job %s was removed (jobs.results_ttl or jobs.results_max_bytes)", rec->id);
}

static void after_get_result(void *ctx, int rc, const char *err, const job_record_t *rec, const void *data, size_t len)
{
    api_wait_t *w = ctx;
    if (!wait_take(w)) {
        free(w);
        return;
    }
    conn_t *c = w->c;
    request_t *r = w->r;
    jobs_t *J = w->J;
    if (rc == JOURNAL_NOT_FOUND)
        conn_respond_error(c, 404, "not_found", NULL, -1, false, "no job %s", w->id);
    free(w);
    if (rc == JOURNAL_NOT_FOUND)
        return;
    if (rc != JOURNAL_OK) {
        store_failed(c, err);
        return;
    }
    if (refuse_result(c, rec))
        return;
    const char *type = rec->result_type ? rec->result_type : "application/octet-stream";
    if (jobs_store(J)->inline_results) {
        if (rec->result_state != JOB_RESULT_STORED || !data)
            result_gone(c, rec);
        else
            conn_respond(c, 200, type, data, len, NULL);
        return;
    }
    int fd = -1;
    uint64_t size = 0;
    int orc = rec->result_state == JOB_RESULT_STORED ? result_store_open_read(jobs_results(J), rec->id, &fd, &size)
                                                     : -ENOENT;
    if (orc != 0) {
        if (rec->result_state == JOB_RESULT_STORED && orc == -ENOENT)
            jstore_result_removed(jobs_store(J), rec->id, NULL, NULL);
        result_gone(c, rec);
        return;
    }
    if (result_send_start(c, r, fd, size, rec->result_type) != 0)
        conn_abort(c);
}

static void send_result(conn_t *c, request_t *r, jobs_t *J, const char *id)
{
    api_wait_t *w = wait_new(c, r, J, id);
    if (w)
        jstore_get_result(jobs_store(J), id, after_get_result, w);
}

/* ---- the rows of the route table (serve/route_table.h) -------------------------------- */

/* The jobs, or NULL when they are not available (answered 503 then). */
static jobs_t *jobs_or_refuse(conn_t *c)
{
    jobs_t *J = jobs_get(c->core);
    if (!J)
        conn_respond_error(c, 503, "jobs_unavailable", NULL, 30, false, "jobs are not available (see the log)");
    return J;
}

/* The job id of a matched /v1/jobs/{id} path (job_id_valid_n passed: JOB_ID_LEN bytes). */
static void arg_id(const route_args_t *a, char id[JOB_ID_SIZE])
{
    memcpy(id, a->arg[0], JOB_ID_LEN);
    id[JOB_ID_LEN] = '\0';
}

static void route_submit(conn_t *c, request_t *r, const route_args_t *a)
{
    jobs_t *J = jobs_or_refuse(c);
    if (J)
        submit(c, r, J);
}

static void route_list(conn_t *c, request_t *r, const route_args_t *a)
{
    jobs_t *J = jobs_or_refuse(c);
    if (J)
        list_jobs(c, r, J);
}

static void route_show(conn_t *c, request_t *r, const route_args_t *a)
{
    char id[JOB_ID_SIZE];
    jobs_t *J = jobs_or_refuse(c);
    arg_id(a, id);
    if (J)
        show_job(c, r, J, id);
}

static void route_cancel(conn_t *c, request_t *r, const route_args_t *a)
{
    char id[JOB_ID_SIZE];
    jobs_t *J = jobs_or_refuse(c);
    arg_id(a, id);
    if (J)
        cancel_job(c, r, J, id);
}

static void route_result(conn_t *c, request_t *r, const route_args_t *a)
{
    char id[JOB_ID_SIZE];
    jobs_t *J = jobs_or_refuse(c);
    arg_id(a, id);
    if (J)
        send_result(c, r, J, id);
}

/* Anything else under /v1/jobs/ (an id that is not one, an unknown tail): no disk touched. */
static void route_no_such_job(conn_t *c, request_t *r, const route_args_t *a)
{
    conn_respond_error(c, 404, "not_found", NULL, -1, false, "no such job");
}

#define GET_HEAD (API_GET | API_HEAD)

/* The jobs' rows of vramd's route table (serve/api.c matches them after its own). They own
 * their paths: another method is 405. A '*' that is not a well-formed id matches no row
 * but the last one (404). docs/api.md lists the same rows. */
const api_route_t jobs_api_routes[] = {
    {API_POST, "/v1/jobs", route_submit, API_PUBLIC, .own_path = true},
    {GET_HEAD, "/v1/jobs", route_list, API_ADMIN, .own_path = true,
     .unauthorized = "listing jobs reveals their ids: it needs the admin bearer token"},
    {GET_HEAD, "/v1/jobs/*", route_show, API_PUBLIC, .own_path = true, .arg_ok = job_id_valid_n},
    {API_DELETE, "/v1/jobs/*", route_cancel, API_PUBLIC, .own_path = true, .arg_ok = job_id_valid_n},
    {GET_HEAD, "/v1/jobs/*/result", route_result, API_PUBLIC, .own_path = true, .arg_ok = job_id_valid_n},
    {API_ANY, "/v1/jobs/**", route_no_such_job, API_PUBLIC, .own_path = true},
    {0},
};
