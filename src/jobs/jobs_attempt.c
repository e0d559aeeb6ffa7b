/*
 * jobs_attempt: the pump and one attempt of a job, from start to end (see jobs.c for its
 * life, docs/jobs.md for the retry rules): picking queued jobs where a model's window has
 * room (priority, then age), starting the loopback request, the client callbacks (a 2xx body
 * streams into a result writer, anything else into a bounded excerpt), committing the result
 * on the thread pool, and judging the end: succeeded, failed, queued again with an attempt
 * used, or queued again without one (vramd busy, draining, unreachable).
 *
 * Invariants: at most jobs.max_active attempts in flight and at most a model's window per
 * model; a job is never started twice at once (gather skips jobs in J->runs); every run ends
 * in jobs_run_finish exactly once, which frees it and pumps again. Calls jobs_runs.c, never
 * jobs.c (jobs_int.h gives the order).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "jobs/job_client.h"
#include "jobs/job_id.h"
#include "jobs/jobs.h"
#include "core/model.h"
#include "jobs/jobs_int.h"
#include "jobs/journal.h"
#include "jobs/result_store.h"
#include "sched/client_limit.h"

#define JOBS_EXCERPT_MAX 2048

static unsigned model_window(const model_t *m)
{
    const model_config_t *mc = m->cfg;
    unsigned long w = (unsigned long)mc->concurrency * mc->instances * 2;
    unsigned long half = mc->queue_max / 2;
    if (w > half)
        w = half;
    return w < 1 ? 1 : (unsigned)w;
}

static unsigned runs_for_model(const jobs_t *J, const char *model)
{
    unsigned n = 0;
    list_foreach(it, &J->runs) if (strcmp(list_entry(it, job_run_t, link)->model, model) == 0) n++;
    return n;
}

/* The attempt is over: drop it from the table, then look for more work. */
void jobs_run_finish(job_run_t *run)
{
    jobs_t *J = run->J;
    list_remove(&run->link);
    J->n_runs--;
    jobs_run_free(run);
    if (J->closing)
        return;
    jobs_pump(J->core);
    core_emit(J->core, CORE_EV_REQUEST_ENDED, NULL); /* drain may be waiting for it */
}

static void job_fail(job_run_t *run, int status, const char *code, const char *message)
{
    jobs_t *J = run->J;
    job_outcome_t o = {.state = JOB_FAILED, .http_status = status, .error_code = code,
                       .error_message = message, .degrade_level = run->degrade_level, .gpu = run->gpu};
    int rc = journal_mark_finished(J->journal, run->id, &o, jobs_wall_ms());
    if (rc == JOURNAL_CONFLICT) {
        log_event(LOG_INFO, "job_outcome_ignored", "job_id=%s reason=%s code=%s", run->id, "already final", code);
        return;
    }
    if (rc != JOURNAL_OK)
        jobs_journal_trouble(J, run->id, "mark_failed");
    log_event(LOG_WARN, "job_failed", "job_id=%s model=%s status=%d code=%s message=%s attempts=%d", run->id,
              run->model, status, code, message, run->attempts + (run->state != RUN_SENT ? 1 : 0));
}

/* Back to queued without using an attempt (vramd was busy, draining, or not reachable). */
static void job_retry_later(job_run_t *run, const char *code, const char *message)
{
    jobs_t *J = run->J;
    if (run->state != RUN_SENT && journal_requeue(J->journal, run->id, true, code, message) != JOURNAL_OK)
        jobs_journal_trouble(J, run->id, "requeue");
    jobs_backoff_model(J, run->model);
    log_event(LOG_INFO, "job_retry_later", "job_id=%s model=%s code=%s message=%s", run->id, run->model, code,
              message);
}

/* The attempt reached a worker and failed: queued again, or failed when none is left. */
static void job_attempt_failed(job_run_t *run, int status, const char *code, const char *message)
{
    jobs_t *J = run->J;
    if (run->state == RUN_SENT) {
        job_retry_later(run, code, message);
        return;
    }
    int used = run->attempts + 1;
    if (used >= run->max_attempts) {
        char msg[JOBS_MESSAGE_MAX + 64];
        snprintf(msg, sizeof msg, "%d of %d attempts used; last: %s", used, run->max_attempts, message);
        job_fail(run, status, code, msg);
        return;
    }
    if (journal_requeue(J->journal, run->id, false, code, message) != JOURNAL_OK)
        jobs_journal_trouble(J, run->id, "requeue");
    jobs_backoff_model(J, run->model);
    log_event(LOG_INFO, "job_attempt_failed", "job_id=%s model=%s status=%d code=%s attempt=%d max_attempts=%d",
              run->id, run->model, status, code, used, run->max_attempts);
}

static void after_commit(uv_work_t *w, int status)
{
    job_run_t *run = w->data;
    jobs_t *J = run->J;
    J->n_committing--;
    bool ok = status == 0 && run->commit_rc == 0;
    char err[JOBS_MESSAGE_MAX];
    snprintf(err, sizeof err, "%s", ok ? "" : result_writer_error(run->writer));
    bool disk_full = !ok && result_writer_disk_full(run->writer);
    uint64_t bytes = result_writer_bytes(run->writer);
    result_writer_close(J->results, run->writer); /* indexes a committed result; else removes the temp file */
    run->writer = NULL;
    if (!ok) {
        job_fail(run, run->status, disk_full ? "disk_full" : "result_write_failed", err);
    } else {
        result_store_make_room(J->results, 0, J->core->cfg->jobs.results_max_bytes, jobs_on_result_removed, J);
        job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = run->status, .result_type = run->content_type,
                           .result_bytes = bytes, .result_stored = true, .degrade_level = run->degrade_level,
                           .gpu = run->gpu};
        int rc = journal_mark_finished(J->journal, run->id, &o, jobs_wall_ms());
        if (rc == JOURNAL_CONFLICT) {
            /* cancelled while the result was being committed: keep no result */
            result_store_remove(J->results, run->id);
            log_event(LOG_INFO, "job_result_dropped", "job_id=%s reason=%s", run->id, "cancelled");
        } else if (rc != JOURNAL_OK) {
            jobs_journal_trouble(J, run->id, "mark_succeeded");
        } else {
            jobs_backoff_reset(J, run->model);
            log_event(LOG_INFO, "job_succeeded", "job_id=%s model=%s status=%d bytes=%llu attempts=%d gpu=%d level=%d",
                      run->id, run->model, run->status, (unsigned long long)bytes, run->attempts + 1, run->gpu,
                      run->degrade_level);
        }
    }
    jobs_run_finish(run);
}

static void do_commit(uv_work_t *w)
{
    job_run_t *run = w->data;
    run->commit_rc = result_writer_commit(run->writer);
}

/* vramd's error JSON ({"error":{"code","message"}}) in the excerpt, if it is one. */
static void excerpt_error(const job_run_t *run, char *code, size_t codecap, char *msg, size_t msgcap)
{
    code[0] = msg[0] = '\0';
    cJSON *doc = run->excerpt.len ? cJSON_ParseWithLength(run->excerpt.data, run->excerpt.len) : NULL;
    const cJSON *e = doc ? cJSON_GetObjectItemCaseSensitive(doc, "error") : NULL;
    const cJSON *c = e ? cJSON_GetObjectItemCaseSensitive(e, "code") : NULL;
    const cJSON *m = e ? cJSON_GetObjectItemCaseSensitive(e, "message") : NULL;
    if (cJSON_IsString(c) && c->valuestring)
        snprintf(code, codecap, "%s", c->valuestring);
    if (cJSON_IsString(m) && m->valuestring)
        snprintf(msg, msgcap, "%s", m->valuestring);
    cJSON_Delete(doc);
    if (!msg[0]) {
        /* a short, printable excerpt of whatever came back */
        size_t n = run->excerpt.len < msgcap - 1 ? run->excerpt.len : msgcap - 1;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)run->excerpt.data[i];
            msg[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : ' ';
        }
        msg[n] = '\0';
    }
}

static bool code_is(const char *code, const char *a) { return strcmp(code, a) == 0; }

/* A complete answer that is not a 2xx. */
static void judge_answer(job_run_t *run)
{
    char code[64], emsg[JOBS_MESSAGE_MAX - 64], msg[JOBS_MESSAGE_MAX];
    excerpt_error(run, code, sizeof code, emsg, sizeof emsg);
    int st = run->status;
    if (run->from_worker) {
        snprintf(msg, sizeof msg, "the worker answered %d: %s", st, emsg);
        if (st >= 500)
            job_attempt_failed(run, st, "worker_error", msg);
        else
            job_fail(run, st, "worker_rejected", msg);
        return;
    }
    snprintf(msg, sizeof msg, "%s", emsg[0] ? emsg : http1_reason(st));
    if (!code[0])
        snprintf(code, sizeof code, "http_%d", st);
    if (code_is(code, "queue_full") || code_is(code, "draining") || code_is(code, "gpu_unavailable") ||
        code_is(code, "model_failed") || code_is(code, "client_limit") || code_is(code, "not_ready")) {
        if (run->state != RUN_SENT)
            job_attempt_failed(run, st, code, msg);
        else
            job_retry_later(run, code, msg);
        return;
    }
    if (code_is(code, "deadline_unmeetable") || code_is(code, "deadline_exceeded")) {
        if (run->deadline_wall_ms)
            job_fail(run, st, code, msg); /* the job's own deadline cannot be met */
        else if (run->state != RUN_SENT)
            job_attempt_failed(run, st, code, msg);
        else
            job_retry_later(run, code, msg);
        return;
    }
    if (st >= 500) {
        job_attempt_failed(run, st, code, msg);
        return;
    }
    job_fail(run, st, code, msg);
}

static void on_client_end(void *ctx, const http_client_result_t *r)
{
    job_run_t *run = ctx;
    http_client_end_t how = r->how;
    const char *error = r->error;
    jobs_t *J = run->J;
    run->client = NULL;
    bool ok2xx = run->status >= 200 && run->status < 300;
    if (how == HTTP_CLIENT_COMPLETE && ok2xx && !run->writer) {
        /* a 2xx without a body (HEAD, 204): an empty result */
        char err[RESULT_STORE_ERR_MAX];
        run->writer = result_writer_open(J->results, run->id, J->core->cfg->jobs.results_max_bytes, err, sizeof err);
        if (!run->writer) {
            job_fail(run, run->status, errno == ENOSPC ? "disk_full" : "result_write_failed", err);
            jobs_run_finish(run);
            return;
        }
    }
    if (how == HTTP_CLIENT_COMPLETE && ok2xx) {
        job_run_set_state(run, RUN_COMMITTING);
        J->n_committing++;
        run->work.data = run;
        if (uv_queue_work(J->core->loop, &run->work, do_commit, after_commit) != 0) {
            do_commit(&run->work); /* no thread pool: commit here */
            after_commit(&run->work, 0);
        }
        return;
    }
    if (run->writer) {
        result_writer_close(J->results, run->writer); /* removes the partial file */
        run->writer = NULL;
    }
    switch (how) {
    case HTTP_CLIENT_COMPLETE:
        judge_answer(run);
        break;
    case HTTP_CLIENT_CONNECT_FAILED:
        job_retry_later(run, "vramd_unreachable", error);
        break;
    case HTTP_CLIENT_SINK_FAILED:
        job_fail(run, run->status, run->sink_code[0] ? run->sink_code : "result_write_failed",
                 run->sink_msg[0] ? run->sink_msg : error);
        break;
    case HTTP_CLIENT_DROPPED:
    default: {
        char msg[JOBS_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "the answer broke off: %s", error ? error : "connection closed");
        if (J->core->draining && run->state == RUN_SENT)
            job_retry_later(run, "draining", msg);
        else
            job_attempt_failed(run, 502, "connection_dropped", msg);
        break;
    }
    }
    jobs_run_finish(run);
}

static int header_int(const char *head, const http1_msg_t *msg, const char *name, int dflt)
{
    const http1_header_t *h = http1_find_header(head, msg, name);
    if (!h || h->value.len == 0 || h->value.len > 9)
        return dflt;
    int v = 0;
    for (uint32_t i = 0; i < h->value.len; i++) {
        char ch = head[h->value.off + i];
        if (ch < '0' || ch > '9')
            return dflt;
        v = v * 10 + (ch - '0');
    }
    return v;
}

static void sink_error(job_run_t *run, const char *code, const char *msg)
{
    snprintf(run->sink_code, sizeof run->sink_code, "%s", code);
    snprintf(run->sink_msg, sizeof run->sink_msg, "%s", msg);
}

static int on_client_head(void *ctx, const char *head, const http1_msg_t *msg)
{
    job_run_t *run = ctx;
    jobs_t *J = run->J;
    uint64_t cap = J->core->cfg->jobs.results_max_bytes;
    run->status = msg->status;
    run->from_worker = http1_find_header(head, msg, "X-Vramd-Attempts") != NULL;
    run->degrade_level = header_int(head, msg, "X-Vramd-Degrade-Level", 0);
    run->gpu = header_int(head, msg, "X-Vramd-Gpu", run->gpu);
    const http1_header_t *ct = http1_find_header(head, msg, "Content-Type");
    if (ct && ct->value.len > 0 && ct->value.len < sizeof run->content_type)
        snprintf(run->content_type, sizeof run->content_type, "%.*s", (int)ct->value.len, head + ct->value.off);
    else
        snprintf(run->content_type, sizeof run->content_type, "application/octet-stream");
    if (msg->status < 200 || msg->status >= 300)
        return 0; /* the excerpt collects the start of the body */
    if (msg->body == HTTP1_BODY_LENGTH) {
        if (msg->content_length > cap) {
            char m[JOBS_MESSAGE_MAX];
            snprintf(m, sizeof m, "the result of %llu bytes is over jobs.results_max_bytes (%llu)",
                     (unsigned long long)msg->content_length, (unsigned long long)cap);
            sink_error(run, "result_too_large", m);
            return -1;
        }
        result_store_make_room(J->results, msg->content_length, cap, jobs_on_result_removed, J);
    }
    char err[RESULT_STORE_ERR_MAX];
    run->writer = result_writer_open(J->results, run->id, cap, err, sizeof err);
    if (!run->writer) {
        sink_error(run, errno == ENOSPC || errno == EDQUOT ? "disk_full" : "result_write_failed", err);
        return -1;
    }
    return 0;
}

static int on_client_body(void *ctx, const char *data, size_t len)
{
    job_run_t *run = ctx;
    if (!run->writer) {
        size_t room = JOBS_EXCERPT_MAX - run->excerpt.len;
        if (room > 0)
            buf_append(&run->excerpt, data, len < room ? len : room);
        return 0;
    }
    if (result_writer_write(run->writer, data, len) == 0)
        return 0;
    int e = result_writer_errno(run->writer);
    if (e == EFBIG) {
        char m[JOBS_MESSAGE_MAX];
        snprintf(m, sizeof m, "the result is over jobs.results_max_bytes (%llu)",
                 (unsigned long long)run->J->core->cfg->jobs.results_max_bytes);
        sink_error(run, "result_too_large", m);
    } else {
        sink_error(run, result_writer_disk_full(run->writer) ? "disk_full" : "result_write_failed",
                   result_writer_error(run->writer));
    }
    return -1;
}

/* 1 when an attempt was started; 0 when the job was not started (not queued any more,
 * deadline passed: failed now, vramd unreachable). */
static int start_attempt(jobs_t *J, const char *id)
{
    job_record_t rec;
    job_record_init(&rec);
    if (journal_get(J->journal, id, true, &rec) != JOURNAL_OK || rec.state != JOB_QUEUED) {
        job_record_clear(&rec);
        return 0;
    }
    int started = 0;
    int64_t now = jobs_wall_ms();
    job_run_t *run = calloc(1, sizeof *run);
    if (!run)
        goto out;
    run->J = J;
    list_init(&run->link);
    buf_init(&run->excerpt, JOBS_EXCERPT_MAX);
    memcpy(run->id, rec.id, sizeof run->id);
    snprintf(run->model, sizeof run->model, "%s", rec.model);
    run->deadline_wall_ms = rec.deadline_wall_ms;
    run->max_attempts = rec.max_attempts;
    run->attempts = rec.attempts;
    run->gpu = -1;
    if (rec.deadline_wall_ms && now >= rec.deadline_wall_ms) {
        job_fail(run, 504, "deadline_exceeded", "the job's deadline passed before it could start");
        jobs_run_free(run);
        goto out;
    }
    char nonce[JOB_ID_SIZE];
    if (job_id_generate(nonce) != 0) {
        jobs_run_free(run);
        goto out;
    }
    snprintf(run->request_id, sizeof run->request_id, "job-%s-%.16s", rec.id, nonce);
    char *req = NULL;
    size_t req_len = 0;
    uint64_t left = rec.deadline_wall_ms ? (uint64_t)(rec.deadline_wall_ms - now) : 0;
    /* the submitter's request, for limits.per_client (an unreadable record: 127.0.0.1's) */
    job_submitter_t sub;
    (void)job_submitter_from_json(rec.client_json, &sub);
    const config_t *cfg = J->core->cfg;
    job_client_origin_t origin = {.secret = J->core->job_secret,
                                  .submitter = &sub,
                                  .key_header = cfg->per_client.key == CLIENT_KEY_HEADER ? cfg->per_client.header
                                                                                         : NULL};
    if (job_client_build_request(rec.method, rec.path, rec.headers_json, rec.body, rec.body_len, run->request_id,
                                 rec.priority, left, &origin, &req, &req_len) != 0) {
        job_fail(run, 0, "bad_job", "the stored request could not be rebuilt");
        jobs_run_free(run);
        goto out;
    }
    char err[256];
    http_client_opts_t opts = {.on_head = on_client_head, .on_body = on_client_body, .on_end = on_client_end, .ctx = run};
    if (http_client_start(J->core->loop, (const struct sockaddr *)&J->addr, req, req_len, &opts, &run->client, err,
                          sizeof err) != 0) {
        log_event(LOG_WARN, "job_start_failed", "job_id=%s error=%s", rec.id, err);
        jobs_backoff_model(J, run->model);
        jobs_run_free(run);
        goto out;
    }
    list_insert_tail(&J->runs, &run->link);
    J->n_runs++;
    started = 1;
    log_event(LOG_INFO, "job_attempt_started", "job_id=%s model=%s request_id=%s attempt=%d priority=%d", rec.id,
              rec.model, run->request_id, rec.attempts + 1, rec.priority);
out:
    job_record_clear(&rec);
    return started;
}

/* A job that may start now: its model has room in its window. */
typedef struct candidate {
    char id[JOB_ID_SIZE];
    model_t *model;
    int priority;
    int64_t seq; /* the journal's insertion order: two jobs of one millisecond still have an order */
} candidate_t;

static int candidate_order(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->priority != y->priority)
        return y->priority - x->priority; /* higher first */
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1; /* older first */
    return strcmp(x->id, y->id);
}

/* Up to `want` queued jobs of m that are not in flight, appended to c[*n]. */
static void gather(jobs_t *J, model_t *m, size_t busy, size_t want, candidate_t *c, size_t *n)
{
    size_t limit = busy + want;
    if (limit > JOURNAL_LIST_MAX)
        limit = JOURNAL_LIST_MAX;
    char(*ids)[JOB_ID_SIZE] = calloc(limit, sizeof *ids);
    size_t got = 0;
    if (!ids || journal_next_queued(J->journal, m->name, limit, ids, &got) != JOURNAL_OK)
        got = 0;
    for (size_t i = 0; i < got && want > 0; i++) {
        if (jobs_run_find(J, ids[i]))
            continue;
        memcpy(c[*n].id, ids[i], JOB_ID_SIZE);
        c[*n].model = m;
        c[*n].priority = 0;
        c[*n].seq = 0;
        (*n)++;
        want--;
    }
    free(ids);
}

void jobs_pump(core_t *d)
{
    jobs_t *J = d ? g_jobs : NULL;
    if (!J || J->closing || J->pumping || d->draining || !d->listening || J->paused_until_ms > core_now())
        return;
    unsigned max_active = d->cfg->jobs.max_active;
    if (J->n_runs >= max_active)
        return;
    size_t room = max_active - J->n_runs;
    /* candidates: per model, at most its window's room (and never more than room in all) */
    size_t cap = 0;
    list_foreach(it, &d->models) cap += room;
    if (cap == 0)
        return;
    candidate_t *c = calloc(cap, sizeof *c);
    if (!c)
        return;
    J->pumping = true;
    size_t n = 0;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed || jobs_backing_off(J, m->name))
            continue;
        unsigned window = model_window(m);
        unsigned busy = runs_for_model(J, m->name);
        if (busy >= window)
            continue;
        size_t want = window - busy < room ? window - busy : room;
        gather(J, m, busy, want, c, &n);
    }
    if (n > room) {
        /* more candidates than room: the whole set in run order, priority then age */
        for (size_t i = 0; i < n; i++) {
            job_record_t rec;
            job_record_init(&rec);
            if (journal_get(J->journal, c[i].id, false, &rec) == JOURNAL_OK) {
                c[i].priority = rec.priority;
                c[i].seq = rec.seq;
            }
            job_record_clear(&rec);
        }
        qsort(c, n, sizeof *c, candidate_order);
    }
    for (size_t i = 0; i < n && J->n_runs < max_active; i++)
        start_attempt(J, c[i].id);
    free(c);
    J->pumping = false;
}
