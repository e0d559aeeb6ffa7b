/*
 * router: own routes, then model routes, then admission into a model's queue.
 * See router.h for the order and the admission rules.
 */
#include "net/router.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "common/units.h"
#include "daemon/vramd.h"
#include "jobs/jobs.h"
#include "net/api.h"
#include "net/conn.h"
#include "net/proxy.h"
#include "quality/verdict.h"
#include "sched/scheduler.h"
#include "workers/supervisor.h"

model_t *router_find_model_by_path(vramd_t *d, const char *path, size_t len, size_t *prefix_len)
{
    model_t *best = NULL;
    size_t best_len = 0;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        const char *route = m->cfg->route;
        if (!route || m->removed)
            continue;
        size_t rl = strlen(route); /* ends with '/' */
        bool match = (len >= rl && memcmp(path, route, rl) == 0) ||
                     (len == rl - 1 && memcmp(path, route, rl - 1) == 0) ||
                     (len > rl - 1 && memcmp(path, route, rl - 1) == 0 && path[rl - 1] == '?');
        if (match && rl > best_len) {
            best = m;
            best_len = rl;
        }
    }
    if (prefix_len)
        *prefix_len = best_len ? best_len - 1 : 0;
    return best;
}

static model_t *find_model_by_name(vramd_t *d, const char *name)
{
    const model_config_t *mc = config_find_model(d->cfg, name);
    if (!mc)
        return NULL;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (!m->removed && strcmp(m->name, mc->name) == 0)
            return m;
    }
    return NULL;
}

static int retry_after_for(const model_t *m)
{
    /* A rough, honest hint: the queue ahead times a nominal second each, at least 1 s. */
    size_t depth = m->queue.depth;
    unsigned slots = m->cfg->concurrency * (m->n_instances ? m->n_instances : 1);
    int s = (int)(depth / (slots ? slots : 1)) + 1;
    return s > 300 ? 300 : s;
}

void request_dispatch(request_t *r, instance_t *inst)
{
    conn_t *c = r->conn;
    conn_stop_timer(c);
    r->t_dispatched = vramd_now();
    if (r->attempts == 0 && r->t_queued) /* metrics: queued -> first dispatch (conn.c counts the rest) */
        histogram_observe(&inst->model->queue_wait_hist, (double)(r->t_dispatched - r->t_queued) / 1000.0);
    r->attempts++;
    inst->in_flight++;
    inst->model->in_flight++;
    inst->requests_total++;
    inst->last_used_ms = r->t_dispatched;
    uv_timer_stop(&inst->idle_timer);
    r->instance = inst;
    c->d->in_flight_total++;
    jobs_request_dispatched(r); /* a job's attempt is running from here (jobs/jobs.h) */
    proxy_start(r, inst);
}

void request_requeue(request_t *r, const char *why)
{
    conn_t *c = r->conn;
    model_t *m = r->model;
    vramd_t *d = c->d;
    uint64_t now = vramd_now();
    if (r->deadline_ms && now >= r->deadline_ms) {
        conn_respond_error(c, 504, "deadline_exceeded", m->name, -1, false,
                           "model %s: deadline passed before a retry (%s) could start", m->name, why);
        return;
    }
    if (m->failed || d->draining) {
        conn_respond_error(c, 503, m->failed ? "model_failed" : "draining", m->name, 5, false,
                           "model %s: cannot retry (%s)", m->name, m->failed ? m->failed_reason : "draining");
        return;
    }
    log_event(LOG_INFO, "request_retry", "request_id=%s model=%s reason=%s level=%u attempts=%u", r->id, m->name, why,
              r->level, r->attempts);
    r->t_dispatched = 0;
    request_set_state(r, REQ_QUEUED);
    queue_push_again(&m->queue, &r->qe, r->priority, r->t_queued);
    d->queued_total++;
    conn_arm_queue_deadline(c, r->deadline_ms > now ? r->deadline_ms - now : 1);
    model_schedule_pump(m);
}

static void admit(conn_t *c, request_t *r, model_t *m, size_t strip_len)
{
    vramd_t *d = c->d;
    const model_config_t *mc = m->cfg;
    r->model = m;
    r->strip_len = mc->strip ? strip_len : 0;
    if (d->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, false, "vramd is draining");
        return;
    }
    if (m->failed) {
        conn_respond_error(c, 503, "model_failed", m->name, 30, false, "model %s has failed: %s",
                           m->name, m->failed_reason);
        return;
    }
    r->priority = mc->priority;
    const http1_header_t *h = http1_find_header(r->head, &r->msg, "X-Vramd-Priority");
    if (h) {
        const char *v = r->head + h->value.off;
        if (h->value.len != 1 || v[0] < '0' || v[0] > '9') {
            conn_respond_error(c, 400, "bad_request", m->name, -1, false,
                               "X-Vramd-Priority must be a digit 0..9");
            return;
        }
        r->priority = v[0] - '0';
    }
    uint64_t deadline = mc->deadline_ms;
    h = http1_find_header(r->head, &r->msg, "X-Vramd-Deadline");
    if (h) {
        char tmp[64];
        if (h->value.len >= sizeof tmp) {
            conn_respond_error(c, 400, "bad_request", m->name, -1, false, "bad X-Vramd-Deadline");
            return;
        }
        memcpy(tmp, r->head + h->value.off, h->value.len);
        tmp[h->value.len] = '\0';
        if (units_parse_duration_ms(tmp, &deadline) != 0 || deadline == 0) {
            conn_respond_error(c, 400, "bad_request", m->name, -1, false,
                               "bad X-Vramd-Deadline \"%s\": expected a duration like 30s or 500ms", tmp);
            return;
        }
    }
    if (sched_model_uses_gpu(mc)) {
        char why[300];
        if (!sched_gpu_ok()) {
            conn_respond_error(c, 503, "gpu_unavailable", m->name, 5, false, "%s", sched_gpu_error());
            return;
        }
        if (sched_never_fits(m, why, sizeof why)) {
            conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
            return;
        }
        int first = sched_first_possible_level(m);
        if (first > 0) {
            /* the request as sent can never fit this host's GPUs: it would OOM at every
             * level below `first`, so it starts there */
            char lwhy[160];
            if (verdict_prepare_level(r, (unsigned)first, lwhy, sizeof lwhy) == 0) {
                log_event(LOG_INFO, "degrade_never_fits", "request_id=%s model=%s level=%d", r->id, m->name, first);
                model_note_degraded(m, (unsigned)first);
            }
        }
    }
    uint64_t predicted = sched_predicted_start_ms(m);
    if (predicted > deadline && mc->degrade.when == DEGRADE_TO_FIT && mc->degrade.n_ladder > 0) {
        /* degrade.when: to_fit: start now at the first ladder level that fits now */
        unsigned level = sched_level_fitting_now(m);
        char why[160];
        if (level > 0 && verdict_prepare_level(r, level, why, sizeof why) == 0) {
            log_event(LOG_INFO, "degrade_to_fit", "request_id=%s model=%s level=%u predicted_ms=%llu deadline_ms=%llu",
                      r->id, m->name, level, (unsigned long long)predicted, (unsigned long long)deadline);
            model_note_degraded(m, level);
            predicted = 0;
        }
    }
    if (predicted > deadline) {
        uint64_t over = (predicted - deadline + 999) / 1000;
        conn_respond_error(c, 503, "deadline_unmeetable", m->name, (int)(over > 3600 ? 3600 : over), false,
                           "model %s: predicted start in %llu ms is past the deadline of %llu ms", m->name,
                           (unsigned long long)predicted, (unsigned long long)deadline);
        m->deadline_rejections++;
        return;
    }
    if (m->queue.depth >= mc->queue_max) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false,
                           "model %s: %u requests already queued", m->name, mc->queue_max);
        return;
    }
    if (d->queued_total >= d->cfg->limits.queue_max) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false,
                           "%u requests already queued in all", d->cfg->limits.queue_max);
        return;
    }
    uint64_t now = vramd_now();
    r->t_queued = now;
    r->deadline_ms = now + deadline;
    m->queue.max = mc->queue_max;
    if (queue_push(&m->queue, &r->qe, r->priority, now) != 0) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false,
                           "model %s: queue full", m->name);
        return;
    }
    d->queued_total++;
    m->requests_total++;
    request_set_state(r, REQ_QUEUED);
    conn_arm_queue_deadline(c, deadline);
    model_pump(m);
}

/* The model named by a JSON body's "model" member, for POST /v1/... */
static model_t *model_from_body(conn_t *c, request_t *r, bool *bad_json, char *name, size_t cap)
{
    *bad_json = false;
    name[0] = '\0';
    if (r->body.len == 0)
        return NULL;
    cJSON *doc = cJSON_ParseWithLength(r->body.data, r->body.len);
    if (!doc) {
        *bad_json = true;
        return NULL;
    }
    model_t *m = NULL;
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (cJSON_IsString(mv) && mv->valuestring) {
        snprintf(name, cap, "%s", mv->valuestring);
        m = find_model_by_name(c->d, mv->valuestring);
    }
    cJSON_Delete(doc);
    return m;
}

void router_handle(conn_t *c, request_t *r)
{
    vramd_t *d = c->d;
    const char *path = r->head + r->msg.target.off;
    size_t plen = r->msg.target.len;
    size_t qpos = 0;
    while (qpos < plen && path[qpos] != '?')
        qpos++;
    if (api_handle(c, r, path, qpos))
        return;
    size_t prefix = 0;
    model_t *m = router_find_model_by_path(d, path, plen, &prefix);
    if (m) {
        admit(c, r, m, prefix);
        return;
    }
    if (http1_span_eq(r->head, r->msg.method, "POST") && qpos >= 4 && memcmp(path, "/v1/", 4) == 0) {
        bool bad_json;
        char name[128];
        m = model_from_body(c, r, &bad_json, name, sizeof name);
        if (m) {
            admit(c, r, m, 0);
            return;
        }
        if (bad_json) {
            conn_respond_error(c, 400, "bad_request", NULL, -1, false, "request body is not valid JSON");
            return;
        }
        if (name[0]) {
            conn_respond_error(c, 404, "unknown_model", name, -1, false, "no model named \"%s\"", name);
            return;
        }
    }
    conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model serves %.*s",
                       (int)(qpos > 200 ? 200 : qpos), path);
}
