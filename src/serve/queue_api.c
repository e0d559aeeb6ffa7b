/*
 * queue_api: GET /v1/queue and a queued job's place (see queue_api.h; the figures' model is
 * sched/sched_queue.c's, written in docs/api.md "The queue").
 *
 * The answer: {"limit", "gpus": [{"gpu": NVML index or null, "models": [{"model", "depth",
 * "max_wait_ms", "eta_new_ms", "requests": [{"id", "job", "model", "priority", "position",
 * "waited_ms", "eta_start_ms", "eta_done_ms", "waiting_for"}]}]}]}. Every GPU of the ledger
 * is listed (in ledger order, its models in config order), then, when some waiting model has
 * no GPU yet (or needs none), a group with "gpu": null. With model=NAME only that model's
 * group. A model's GPU: where its requests will run (sched_queue_model's), or for a model
 * with nothing queued, its instance's; null when not known.
 * Invariants: reads only; at most `limit` entries per model are computed (one calloc of
 * limit entries, freed before answering); the models walked are the config's.
 */
#include "serve/queue_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "http/http_auth.h"
#include "http/http_path.h"
#include "jobs/jobs.h"
#include "net/conn.h"
#include "sched/scheduler.h"

#define QUEUE_NAME_MAX 256

/* One model's part of the answer. */
typedef struct model_view {
    const model_t *m;
    int gpu; /* NVML index, -1: none known */
    cJSON *json;
} model_view_t;

/* The GPU of a model with nothing queued: its serving instance's, else any instance's. */
static int idle_model_gpu(const model_t *m)
{
    int any = -1;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->memory.gpu >= 0 && in->life.state == INST_READY)
            return in->memory.gpu;
        if (in->memory.gpu >= 0 && any < 0)
            any = in->memory.gpu;
    }
    return any;
}

static void add_ms(cJSON *o, const char *key, uint64_t ms)
{
    cJSON_AddNumberToObject(o, key, (double)ms);
}

static cJSON *entry_json(const sched_queue_entry_t *e, bool show_job_ids)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool job = strncmp(e->r->id, "job-", 4) == 0;
    if (job && !show_job_ids)
        cJSON_AddNullToObject(o, "id");
    else
        cJSON_AddStringToObject(o, "id", e->r->id);
    cJSON_AddBoolToObject(o, "job", job);
    cJSON_AddStringToObject(o, "model", e->m->name);
    cJSON_AddNumberToObject(o, "priority", e->r->priority);
    cJSON_AddNumberToObject(o, "position", e->position);
    add_ms(o, "waited_ms", e->waited_ms);
    add_ms(o, "eta_start_ms", e->eta_start_ms);
    add_ms(o, "eta_done_ms", e->eta_done_ms);
    cJSON_AddStringToObject(o, "waiting_for", sched_wait_for_name(e->waiting_for));
    return o;
}

/* m's part: its figures and at most limit requests (entries: room for limit). NULL when
 * out of memory. */
static cJSON *model_json(const model_t *m, sched_queue_entry_t *entries, size_t limit, bool show_job_ids, int *gpu)
{
    size_t n = sched_queue_model(m, entries, limit);
    *gpu = n ? entries[0].gpu : idle_model_gpu(m);
    cJSON *o = cJSON_CreateObject(), *reqs = cJSON_CreateArray();
    if (!o || !reqs) {
        cJSON_Delete(o);
        cJSON_Delete(reqs);
        return NULL;
    }
    cJSON_AddStringToObject(o, "model", m->name);
    cJSON_AddNumberToObject(o, "depth", (double)m->queue.depth);
    add_ms(o, "max_wait_ms", sched_max_wait_ms(m));
    add_ms(o, "eta_new_ms", sched_queue_eta_ms(m));
    cJSON_AddItemToObject(o, "requests", reqs);
    for (size_t i = 0; i < n; i++) {
        cJSON *e = entry_json(&entries[i], show_job_ids);
        if (!e) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(reqs, e);
    }
    return o;
}

/* A GPU group with the views whose gpu is `gpu` (taken: their json moves into it). */
static cJSON *gpu_group(model_view_t *v, size_t n, int gpu)
{
    cJSON *g = cJSON_CreateObject(), *models = cJSON_CreateArray();
    if (!g || !models) {
        cJSON_Delete(g);
        cJSON_Delete(models);
        return NULL;
    }
    if (gpu >= 0)
        cJSON_AddNumberToObject(g, "gpu", gpu);
    else
        cJSON_AddNullToObject(g, "gpu");
    cJSON_AddItemToObject(g, "models", models);
    for (size_t i = 0; i < n; i++)
        if (v[i].json && v[i].gpu == gpu) {
            cJSON_AddItemToArray(models, v[i].json);
            v[i].json = NULL;
        }
    return g;
}

/* The whole answer for the models in v (their json made); NULL when out of memory. GPUs in
 * ledger order (all of them unless only one model was asked for), then the rest as null. */
static cJSON *group_by_gpu(model_view_t *v, size_t n, size_t limit, bool one_model)
{
    cJSON *doc = cJSON_CreateObject(), *gpus = cJSON_CreateArray();
    if (!doc || !gpus) {
        cJSON_Delete(doc);
        cJSON_Delete(gpus);
        return NULL;
    }
    cJSON_AddNumberToObject(doc, "limit", (double)limit);
    cJSON_AddItemToObject(doc, "gpus", gpus);
    const ledger_t *l = sched_ledger();
    size_t n_gpus = sched_gpu_count();
    for (size_t pos = 0; l && pos < n_gpus; pos++) {
        int idx = l->gpus[pos].index;
        bool has = false;
        for (size_t i = 0; i < n; i++)
            has = has || (v[i].json && v[i].gpu == idx);
        if (one_model && !has)
            continue;
        cJSON *g = gpu_group(v, n, idx);
        if (!g) {
            cJSON_Delete(doc);
            return NULL;
        }
        cJSON_AddItemToArray(gpus, g);
    }
    bool rest = false;
    for (size_t i = 0; i < n; i++)
        if (v[i].json) {
            v[i].gpu = -1; /* no GPU, or one the ledger does not hold */
            rest = true;
        }
    if (rest) {
        cJSON *g = gpu_group(v, n, -1);
        if (!g) {
            cJSON_Delete(doc);
            return NULL;
        }
        cJSON_AddItemToArray(gpus, g);
    }
    return doc;
}


/* The query: model=NAME and limit=N (1..QUEUE_LIST_MAX). False when answered 400. */
static bool read_query(conn_t *c, const request_t *r, char model[QUEUE_NAME_MAX], size_t *limit)
{
    const char *target = r->head + r->msg.target.off;
    size_t tlen = r->msg.target.len;
    const char *q = memchr(target, '?', tlen);
    model[0] = '\0';
    *limit = QUEUE_LIST_DEFAULT;
    for (const char *p = q ? q + 1 : target + tlen, *end = target + tlen; p < end;) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        char key[16], val[QUEUE_NAME_MAX];
        if (stop == p) {
            p = stop + 1;
            continue;
        }
        if (!eq || http_query_decode(p, (size_t)(eq - p), key, sizeof key) != 0 ||
            http_query_decode(eq + 1, (size_t)(stop - eq - 1), val, sizeof val) != 0) {
            conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                               "query: expected key=value pairs (model, limit; a value under %d bytes)", QUEUE_NAME_MAX);
            return false;
        }
        if (strcmp(key, "model") == 0) {
            memcpy(model, val, strlen(val) + 1);
        } else if (strcmp(key, "limit") == 0) {
            char *e = NULL;
            long v = strtol(val, &e, 10);
            if (!val[0] || *e || v < 1 || v > QUEUE_LIST_MAX) {
                conn_respond_error(c, 400, "bad_request", NULL, -1, false, "limit: expected an integer 1..%d",
                                   QUEUE_LIST_MAX);
                return false;
            }
            *limit = (size_t)v;
        } else {
            conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                               "query: unknown parameter \"%.15s\" (known: model, limit)", key);
            return false;
        }
        p = stop + 1;
    }
    return true;
}

/* The views of the models to show (only, else every model with requests queued) into v
 * (room for max); their count, or (size_t)-1 when out of memory. */
static size_t make_views(core_t *d, const model_t *only, size_t limit, bool show_job_ids, model_view_t *v, size_t max)
{
    sched_queue_entry_t *entries = calloc(limit, sizeof *entries);
    if (!entries)
        return (size_t)-1;
    size_t n = 0;
    bool oom = false;
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        if (n >= max || m->removed || (only ? m != only : m->queue.depth == 0))
            continue;
        v[n].m = m;
        v[n].json = model_json(m, entries, limit, show_job_ids, &v[n].gpu);
        oom = oom || !v[n].json;
        n++;
    }
    free(entries);
    if (!oom)
        return n;
    for (size_t i = 0; i < n; i++)
        cJSON_Delete(v[i].json);
    return (size_t)-1;
}

void queue_route(conn_t *c, request_t *r, const route_args_t *a)
{
    core_t *d = c->core;
    char name[QUEUE_NAME_MAX];
    size_t limit;
    (void)a;
    if (!read_query(c, r, name, &limit))
        return;
    const model_t *only = NULL;
    if (name[0] && !(only = model_find(d, name))) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.100s\"", name);
        return;
    }
    size_t max = 0;
    list_foreach(it, &d->models) max++;
    model_view_t *v = calloc(max ? max : 1, sizeof *v);
    size_t n = v ? make_views(d, only, limit, http_bearer_ok(d->cfg->admin_token, r->head, &r->msg), v, max)
                 : (size_t)-1;
    cJSON *doc = n == (size_t)-1 ? NULL : group_by_gpu(v, n, limit, only != NULL);
    for (size_t i = 0; v && n != (size_t)-1 && i < n; i++)
        cJSON_Delete(v[i].json); /* those no group took (none unless out of memory) */
    free(v);
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        conn_respond_error(c, 500, "internal", NULL, -1, false, "out of memory");
        return;
    }
    conn_respond(c, 200, "application/json", text, strlen(text), "Cache-Control: no-store\r\n");
    free(text);
}

/* ---- a queued job's place -------------------------------------------------------------- */

static void null_fields(cJSON *o)
{
    static const char *const keys[] = {"queued_in", "position", "eta_start_ms", "eta_done_ms", "waiting_for"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cJSON_AddNullToObject(o, keys[i]);
}

/* Its attempt's request in its model's queue: true when found (fields added). */
static bool in_model_queue(cJSON *o, const model_t *m, const char *request_id)
{
    size_t depth = m->queue.depth;
    sched_queue_entry_t *entries = depth ? calloc(depth, sizeof *entries) : NULL;
    size_t n = entries ? sched_queue_model(m, entries, depth) : 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(entries[i].r->id, request_id) != 0)
            continue;
        cJSON_AddStringToObject(o, "queued_in", "model");
        cJSON_AddNumberToObject(o, "position", entries[i].position);
        add_ms(o, "eta_start_ms", entries[i].eta_start_ms);
        add_ms(o, "eta_done_ms", entries[i].eta_done_ms);
        cJSON_AddStringToObject(o, "waiting_for", sched_wait_for_name(entries[i].waiting_for));
        free(entries);
        return true;
    }
    free(entries);
    return false;
}

void queue_job_fields(cJSON *o, core_t *d, const job_record_t *rec)
{
    const model_t *m = rec->state == JOB_QUEUED && rec->model ? model_find(d, rec->model) : NULL;
    jobs_t *J = jobs_get(d);
    char rid[96];
    if (!m) {
        null_fields(o);
        return;
    }
    if (jobs_attempt_sent(J, rec->id, rid, sizeof rid)) {
        if (!in_model_queue(o, m, rid))
            null_fields(o); /* on its way: sent, not queued yet (or just dispatched) */
        return;
    }
    if (rec->queue_ahead < 0) {
        null_fields(o);
        return;
    }
    /* In the job queue: the jobs ahead of it that are not in the model's queue yet wait
     * behind that queue, served slots at a time, one learned run each (docs/jobs.md). */
    size_t sent = jobs_attempts_sent(J, m->name), ahead = (size_t)rec->queue_ahead;
    ahead = ahead > sent ? ahead - sent : 0;
    unsigned ready = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        ready += in->life.state == INST_READY && !in->life.stop_requested;
    }
    unsigned conc = m->cfg->concurrency ? m->cfg->concurrency : 1;
    uint64_t slots = (uint64_t)conc * (ready ? ready : 1);
    uint64_t start = sched_queue_eta_ms(m) + (uint64_t)(ahead / slots) * m->run_ms_ewma;
    cJSON_AddStringToObject(o, "queued_in", "jobs");
    cJSON_AddNumberToObject(o, "position", (double)rec->queue_ahead + 1);
    add_ms(o, "eta_start_ms", start);
    add_ms(o, "eta_done_ms", start + m->run_ms_ewma);
    cJSON_AddNullToObject(o, "waiting_for");
}
