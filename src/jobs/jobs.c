/*
 * jobs: the durable job runner (see jobs.h for the window, the states and the invariants,
 * docs/jobs.md for the retry rules).
 *
 * One job_run_t per attempt in flight, in jobs->runs. Its life:
 *   start_attempt (journal: still queued) -> loopback request sent
 *   -> CORE_EV_REQUEST_DISPATCHED (journal: running, attempts + 1)
 *   -> on_head / on_body: a 2xx body streams into a result writer, anything else into a
 *      bounded excerpt
 *   -> on_end: 2xx complete -> commit on the thread pool -> after_commit: succeeded;
 *      otherwise decide (retry without an attempt, attempt used, failed)
 *   -> run_finish: out of the table, freed; pump; drain check.
 * A cancel (DELETE) closes the loopback connection (vramd then drops the request from its
 * queue or closes the upstream) and finishes the run at once, except while its result is
 * being committed: then after_commit sees the cancel (journal conflict) and removes the file.
 */
#include "jobs/jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "jobs/job_client.h"
#include "jobs/job_id.h"
#include "jobs/journal.h"
#include "jobs/result_store.h"
#include "net/conn.h"
#include "workers/supervisor.h"

#define JOBS_EXCERPT_MAX 2048
#define JOBS_MESSAGE_MAX 400
#define JOBS_TICK_MS 1000
#define JOBS_HOUSEKEEP_MS 60000
#define JOBS_BACKOFF_MIN_MS 1000
#define JOBS_BACKOFF_MAX_MS 30000
#define JOBS_BACKOFF_MODELS 256
#define JOBS_PURGE_BATCH 1000
#define JOBS_PURGE_ROUNDS 20
#define JOBS_OVERDUE_BATCH 64  /* queued jobs past their deadline failed per tick */
#define JOBS_JOURNAL_PAUSE_MS 5000

typedef struct model_backoff {
    char model[128];
    uint64_t until_ms; /* monotonic; no attempt for this model before */
    uint64_t step_ms;  /* last delay; 0 = not backing off */
} model_backoff_t;

struct jobs {
    core_t *core;
    journal_t *journal;
    result_store_t *results;
    struct sockaddr_storage addr; /* vramd's own listen address, as a client reaches it */
    uv_timer_t tick;
    uv_timer_t housekeep;
    list_t runs;
    unsigned n_runs;
    unsigned n_committing;
    model_backoff_t backoff[JOBS_BACKOFF_MODELS];
    size_t n_backoff;
    uint64_t paused_until_ms; /* monotonic: no attempt starts before (journal could not write) */
    bool pumping;
    bool closing;
};

typedef struct job_run {
    list_t link; /* jobs->runs */
    jobs_t *J;
    char id[JOB_ID_SIZE];
    char request_id[64];
    char model[128];
    int64_t deadline_wall_ms;
    int max_attempts;
    int attempts;      /* attempts started before this one */
    bool dispatched;   /* reached a worker: the journal says running, attempts + 1 */
    bool cancelled;
    bool committing;
    bool from_worker;  /* the answer came from a worker (X-Vramd-Attempts), not from vramd */
    job_client_t *client;
    result_writer_t *writer;
    int status;
    char content_type[200];
    int degrade_level;
    int gpu;
    buf_t excerpt;     /* start of a non-2xx answer */
    char sink_code[32]; /* why the result could not be written */
    char sink_msg[JOBS_MESSAGE_MAX];
    int commit_rc;
    uv_work_t work;
} job_run_t;

static const job_client_ops_t client_ops;

int64_t jobs_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static jobs_t *g_jobs; /* the one runner, set by jobs_init (NULL: jobs unavailable) */

jobs_t *jobs_get(const core_t *d)
{
    (void)d;
    return g_jobs;
}
struct journal *jobs_journal(jobs_t *J) { return J->journal; }
struct result_store *jobs_results(jobs_t *J) { return J->results; }

bool jobs_busy(const core_t *d)
{
    const jobs_t *J = g_jobs;
    (void)d;
    return J && (J->n_runs > 0 || J->n_committing > 0);
}

int jobs_count_by_state(core_t *d, uint64_t out[JOB_STATE_COUNT])
{
    jobs_t *J = d ? g_jobs : NULL;
    if (!J || !J->journal)
        return -1;
    return journal_counts(J->journal, out) == JOURNAL_OK ? 0 : -1;
}

/* ---- window and backoff ------------------------------------------------------------- */

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

static job_run_t *run_find(jobs_t *J, const char *id)
{
    list_foreach(it, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        if (strcmp(run->id, id) == 0)
            return run;
    }
    return NULL;
}

static model_backoff_t *backoff_slot(jobs_t *J, const char *model, bool create)
{
    for (size_t i = 0; i < J->n_backoff; i++)
        if (strcmp(J->backoff[i].model, model) == 0)
            return &J->backoff[i];
    if (!create)
        return NULL;
    if (J->n_backoff == JOBS_BACKOFF_MODELS)
        J->n_backoff = 0; /* bounded: forget the oldest slots */
    model_backoff_t *b = &J->backoff[J->n_backoff++];
    memset(b, 0, sizeof *b);
    snprintf(b->model, sizeof b->model, "%s", model);
    return b;
}

static void backoff_model(jobs_t *J, const char *model)
{
    model_backoff_t *b = backoff_slot(J, model, true);
    b->step_ms = b->step_ms ? b->step_ms * 2 : JOBS_BACKOFF_MIN_MS;
    if (b->step_ms > JOBS_BACKOFF_MAX_MS)
        b->step_ms = JOBS_BACKOFF_MAX_MS;
    b->until_ms = core_now() + b->step_ms;
}

static void backoff_reset(jobs_t *J, const char *model)
{
    model_backoff_t *b = backoff_slot(J, model, false);
    if (b)
        b->step_ms = b->until_ms = 0;
}

static bool backing_off(jobs_t *J, const char *model)
{
    const model_backoff_t *b = backoff_slot(J, model, false);
    return b && b->until_ms > core_now();
}

/* A journal write failed (disk full, I/O error): start nothing for a while, so a job whose
 * state cannot be recorded is not run again and again meanwhile. */
static void journal_trouble(jobs_t *J, const char *id, const char *op)
{
    J->paused_until_ms = core_now() + JOBS_JOURNAL_PAUSE_MS;
    log_event(LOG_ERROR, "job_journal_error", "job_id=%s op=%s error=%s pause_ms=%d", id, op,
              journal_errmsg(J->journal), JOBS_JOURNAL_PAUSE_MS);
}

/* ---- ending an attempt ---------------------------------------------------------------- */

static void run_free(job_run_t *run)
{
    buf_free(&run->excerpt);
    free(run);
}

/* The attempt is over: drop it from the table, then look for more work. */
static void run_finish(job_run_t *run)
{
    jobs_t *J = run->J;
    list_remove(&run->link);
    J->n_runs--;
    run_free(run);
    if (J->closing)
        return;
    jobs_pump(J->core);
    core_emit(J->core, CORE_EV_REQUEST_ENDED, NULL); /* drain may be waiting for it */
}

static void on_result_removed(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    if (journal_mark_result_removed(J->journal, id) != JOURNAL_OK)
        log_event(LOG_WARN, "job_journal_error", "job_id=%s op=%s error=%s", id, "mark_result_removed",
                  journal_errmsg(J->journal));
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
        journal_trouble(J, run->id, "mark_failed");
    log_event(LOG_WARN, "job_failed", "job_id=%s model=%s status=%d code=%s message=%s attempts=%d", run->id,
              run->model, status, code, message, run->attempts + (run->dispatched ? 1 : 0));
}

/* Back to queued without using an attempt (vramd was busy, draining, or not reachable). */
static void job_retry_later(job_run_t *run, const char *code, const char *message)
{
    jobs_t *J = run->J;
    if (run->dispatched && journal_requeue(J->journal, run->id, true, code, message) != JOURNAL_OK)
        journal_trouble(J, run->id, "requeue");
    backoff_model(J, run->model);
    log_event(LOG_INFO, "job_retry_later", "job_id=%s model=%s code=%s message=%s", run->id, run->model, code,
              message);
}

/* The attempt reached a worker and failed: queued again, or failed when none is left. */
static void job_attempt_failed(job_run_t *run, int status, const char *code, const char *message)
{
    jobs_t *J = run->J;
    if (!run->dispatched) {
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
        journal_trouble(J, run->id, "requeue");
    backoff_model(J, run->model);
    log_event(LOG_INFO, "job_attempt_failed", "job_id=%s model=%s status=%d code=%s attempt=%d max_attempts=%d",
              run->id, run->model, status, code, used, run->max_attempts);
}

static void after_commit(uv_work_t *w, int status)
{
    job_run_t *run = w->data;
    jobs_t *J = run->J;
    J->n_committing--;
    run->committing = false;
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
        result_store_make_room(J->results, 0, J->core->cfg->jobs.results_max_bytes, on_result_removed, J);
        job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = run->status, .result_type = run->content_type,
                           .result_bytes = bytes, .result_stored = true, .degrade_level = run->degrade_level,
                           .gpu = run->gpu};
        int rc = journal_mark_finished(J->journal, run->id, &o, jobs_wall_ms());
        if (rc == JOURNAL_CONFLICT) {
            /* cancelled while the result was being committed: keep no result */
            result_store_remove(J->results, run->id);
            log_event(LOG_INFO, "job_result_dropped", "job_id=%s reason=%s", run->id, "cancelled");
        } else if (rc != JOURNAL_OK) {
            journal_trouble(J, run->id, "mark_succeeded");
        } else {
            backoff_reset(J, run->model);
            log_event(LOG_INFO, "job_succeeded", "job_id=%s model=%s status=%d bytes=%llu attempts=%d gpu=%d level=%d",
                      run->id, run->model, run->status, (unsigned long long)bytes, run->attempts + 1, run->gpu,
                      run->degrade_level);
        }
    }
    run_finish(run);
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
        if (run->dispatched)
            job_attempt_failed(run, st, code, msg);
        else
            job_retry_later(run, code, msg);
        return;
    }
    if (code_is(code, "deadline_unmeetable") || code_is(code, "deadline_exceeded")) {
        if (run->deadline_wall_ms)
            job_fail(run, st, code, msg); /* the job's own deadline cannot be met */
        else if (run->dispatched)
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

static void on_client_end(void *ctx, enum job_client_end how, const char *error)
{
    job_run_t *run = ctx;
    jobs_t *J = run->J;
    run->client = NULL;
    bool ok2xx = run->status >= 200 && run->status < 300;
    if (how == JOB_CLIENT_COMPLETE && ok2xx && !run->writer) {
        /* a 2xx without a body (HEAD, 204): an empty result */
        char err[RESULT_STORE_ERR_MAX];
        run->writer = result_writer_open(J->results, run->id, J->core->cfg->jobs.results_max_bytes, err, sizeof err);
        if (!run->writer) {
            job_fail(run, run->status, errno == ENOSPC ? "disk_full" : "result_write_failed", err);
            run_finish(run);
            return;
        }
    }
    if (how == JOB_CLIENT_COMPLETE && ok2xx) {
        run->committing = true;
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
    case JOB_CLIENT_COMPLETE:
        judge_answer(run);
        break;
    case JOB_CLIENT_CONNECT_FAILED:
        job_retry_later(run, "vramd_unreachable", error);
        break;
    case JOB_CLIENT_SINK_FAILED:
        job_fail(run, run->status, run->sink_code[0] ? run->sink_code : "result_write_failed",
                 run->sink_msg[0] ? run->sink_msg : error);
        break;
    case JOB_CLIENT_DROPPED:
    default: {
        char msg[JOBS_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "the answer broke off: %s", error ? error : "connection closed");
        if (J->core->draining && !run->dispatched)
            job_retry_later(run, "draining", msg);
        else
            job_attempt_failed(run, 502, "connection_dropped", msg);
        break;
    }
    }
    run_finish(run);
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
        result_store_make_room(J->results, msg->content_length, cap, on_result_removed, J);
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

static const job_client_ops_t client_ops = {
    .on_head = on_client_head,
    .on_body = on_client_body,
    .on_end = on_client_end,
};

/* ---- starting an attempt ------------------------------------------------------------------ */

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
        run_free(run);
        goto out;
    }
    char nonce[JOB_ID_SIZE];
    if (job_id_generate(nonce) != 0) {
        run_free(run);
        goto out;
    }
    snprintf(run->request_id, sizeof run->request_id, "job-%s-%.16s", rec.id, nonce);
    char *req = NULL;
    size_t req_len = 0;
    uint64_t left = rec.deadline_wall_ms ? (uint64_t)(rec.deadline_wall_ms - now) : 0;
    if (job_client_build_request(rec.method, rec.path, rec.headers_json, rec.body, rec.body_len, run->request_id,
                                 rec.priority, left, &req, &req_len) != 0) {
        job_fail(run, 0, "bad_job", "the stored request could not be rebuilt");
        run_free(run);
        goto out;
    }
    char err[256];
    if (job_client_start(J->core->loop, (const struct sockaddr *)&J->addr, req, req_len, &client_ops, run, &run->client,
                         err, sizeof err) != 0) {
        log_event(LOG_WARN, "job_start_failed", "job_id=%s error=%s", rec.id, err);
        backoff_model(J, run->model);
        run_free(run);
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
    int64_t created_ms;
} candidate_t;

static int candidate_order(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->priority != y->priority)
        return y->priority - x->priority; /* higher first */
    if (x->created_ms != y->created_ms)
        return x->created_ms < y->created_ms ? -1 : 1; /* older first */
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
        if (run_find(J, ids[i]))
            continue;
        memcpy(c[*n].id, ids[i], JOB_ID_SIZE);
        c[*n].model = m;
        c[*n].priority = 0;
        c[*n].created_ms = 0;
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
        if (m->removed || backing_off(J, m->name))
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
                c[i].created_ms = rec.created_ms;
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

/* ---- hooks ------------------------------------------------------------------------------ */

/* CORE_EV_REQUEST_DISPATCHED: a job's request was handed to a worker instance. */
static void on_request_dispatched(void *ctx, enum core_event ev, void *subject)
{
    jobs_t *J = ctx;
    request_t *r = subject;
    (void)ev;
    if (J != g_jobs || strncmp(r->id, "job-", 4) != 0)
        return;
    job_run_t *run = NULL;
    list_foreach(it, &J->runs) {
        job_run_t *x = list_entry(it, job_run_t, link);
        if (strcmp(x->request_id, r->id) == 0)
            run = x;
    }
    if (!run || run->cancelled)
        return;
    int gpu = r->instance ? r->instance->gpu : -1;
    run->gpu = gpu;
    if (run->dispatched) {
        /* vramd retried it (degradation ladder, invalid output): the same attempt */
        journal_set_gpu(J->journal, run->id, gpu);
        return;
    }
    int rc = journal_mark_running(J->journal, run->id, jobs_wall_ms(), gpu);
    if (rc == JOURNAL_OK) {
        run->dispatched = true;
        log_event(LOG_INFO, "job_running", "job_id=%s model=%s attempt=%d gpu=%d", run->id, run->model,
                  run->attempts + 1, gpu);
    } else {
        journal_trouble(J, run->id, "mark_running");
    }
}

void jobs_cancel_attempt(jobs_t *J, const char *id)
{
    job_run_t *run = run_find(J, id);
    if (!run || run->cancelled)
        return;
    run->cancelled = true;
    log_event(LOG_INFO, "job_attempt_cancelled", "job_id=%s model=%s committing=%s", run->id, run->model,
              run->committing ? "true" : "false");
    if (run->committing)
        return; /* after_commit finds the job cancelled and removes the result */
    job_client_cancel(run->client);
    run->client = NULL;
    if (run->writer) {
        result_writer_close(J->results, run->writer);
        run->writer = NULL;
    }
    run_finish(run);
}

/* ---- timers --------------------------------------------------------------------------- */

static void on_purged(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    result_store_remove(J->results, id);
}

static void housekeep(jobs_t *J)
{
    const config_t *cfg = J->core->cfg;
    int64_t now = jobs_wall_ms();
    size_t expired = result_store_expire(J->results, now, cfg->jobs.results_ttl_ms, on_result_removed, J);
    size_t evicted = result_store_make_room(J->results, 0, cfg->jobs.results_max_bytes, on_result_removed, J);
    size_t purged_total = 0;
    for (int round = 0; round < JOBS_PURGE_ROUNDS; round++) {
        size_t purged = 0;
        int64_t cutoff = now - (int64_t)cfg->jobs.records_ttl_ms;
        if (journal_purge(J->journal, cutoff, JOBS_PURGE_BATCH, on_purged, J, &purged) != JOURNAL_OK) {
            log_event(LOG_WARN, "job_journal_error", "op=%s error=%s", "purge", journal_errmsg(J->journal));
            break;
        }
        purged_total += purged;
        if (purged < JOBS_PURGE_BATCH)
            break;
    }
    if (expired || evicted || purged_total)
        log_event(LOG_INFO, "jobs_housekeeping", "results_expired=%zu results_evicted=%zu records_purged=%zu",
                  expired, evicted, purged_total);
}

static void on_housekeep(uv_timer_t *t)
{
    housekeep(t->data);
}

/* Queued jobs whose start deadline passed while they waited in the journal (not handed to
 * vramd's queues: those get vramd's own 504) fail now, not only when their turn comes. */
static void fail_overdue(jobs_t *J)
{
    char ids[JOBS_OVERDUE_BATCH][JOB_ID_SIZE];
    size_t n = 0;
    int64_t now = jobs_wall_ms();
    if (journal_overdue(J->journal, now, JOBS_OVERDUE_BATCH, ids, &n) != JOURNAL_OK) {
        log_event(LOG_WARN, "job_journal_error", "op=%s error=%s", "overdue", journal_errmsg(J->journal));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (run_find(J, ids[i]))
            continue;
        job_outcome_t o = {.state = JOB_FAILED, .http_status = 504, .error_code = "deadline_exceeded",
                           .error_message = "the job's deadline passed while it waited to start", .gpu = -1};
        int rc = journal_mark_finished(J->journal, ids[i], &o, now);
        if (rc == JOURNAL_OK)
            log_event(LOG_WARN, "job_failed", "job_id=%s status=%d code=%s message=%s", ids[i], 504,
                      "deadline_exceeded", "deadline passed while queued in the journal");
        else if (rc != JOURNAL_CONFLICT)
            journal_trouble(J, ids[i], "mark_failed");
    }
}

static void on_tick(uv_timer_t *t)
{
    jobs_t *J = t->data;
    fail_overdue(J);
    jobs_pump(J->core);
}

/* ---- life ------------------------------------------------------------------------------ */

static int loopback_address(const config_t *cfg, struct sockaddr_storage *addr)
{
    const char *host = cfg->listen_host;
    if (strcmp(host, "localhost") == 0 || strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    if (strchr(host, ':'))
        return uv_ip6_addr(host, cfg->listen_port, (struct sockaddr_in6 *)addr);
    return uv_ip4_addr(host, cfg->listen_port, (struct sockaddr_in *)addr);
}

/* A stored result is kept only while its job record says so (start-up sweep). */
static bool result_has_record(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    enum job_result_state rs = JOB_RESULT_NONE;
    int rc = journal_peek(J->journal, id, NULL, &rs);
    if (rc == JOURNAL_NOT_FOUND)
        return false;
    return rc != JOURNAL_OK || rs == JOB_RESULT_STORED; /* a read error: keep it, unsure */
}

int jobs_init(core_t *d, char *err, size_t errlen)
{
    const config_t *cfg = d->cfg;
    jobs_t *J = calloc(1, sizeof *J);
    if (!J) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    J->core = d;
    list_init(&J->runs);
    if (loopback_address(cfg, &J->addr) != 0) {
        snprintf(err, errlen, "cannot reach the listen address %s:%d", cfg->listen_host, cfg->listen_port);
        free(J);
        return -1;
    }
    char path[4096], why[JOURNAL_ERR_MAX];
    snprintf(path, sizeof path, "%s/jobs.db", cfg->state_dir);
    J->journal = journal_open(path, why, sizeof why);
    if (!J->journal) {
        snprintf(err, errlen, "%s", why); /* journal_open names the file */
        free(J);
        return -1;
    }
    snprintf(path, sizeof path, "%s/results", cfg->state_dir);
    J->results = result_store_open(path, why, sizeof why);
    if (!J->results) {
        snprintf(err, errlen, "%s", why); /* result_store_open names the folder */
        journal_close(J->journal);
        free(J);
        return -1;
    }
    size_t requeued = 0, failed = 0;
    if (journal_recover(J->journal, jobs_wall_ms(), &requeued, &failed) != JOURNAL_OK)
        log_event(LOG_ERROR, "job_journal_error", "op=%s error=%s", "recover", journal_errmsg(J->journal));
    size_t orphans = result_store_retain(J->results, result_has_record, J);
    if (orphans)
        log_event(LOG_INFO, "job_results_orphaned", "removed=%zu", orphans);
    uint64_t counts[JOB_STATE_COUNT] = {0};
    journal_counts(J->journal, counts);
    log_event(LOG_INFO, "jobs_started", "queued=%llu requeued=%zu failed_on_recovery=%zu results=%zu results_bytes=%llu",
              (unsigned long long)counts[JOB_QUEUED], requeued, failed, result_store_count(J->results),
              (unsigned long long)result_store_total_bytes(J->results));
    g_jobs = J;
    core_listen(d, CORE_EV_REQUEST_DISPATCHED, on_request_dispatched, J);
    housekeep(J);
    uv_timer_init(d->loop, &J->tick);
    J->tick.data = J;
    uv_timer_start(&J->tick, on_tick, 0, JOBS_TICK_MS);
    uv_unref((uv_handle_t *)&J->tick);
    uv_timer_init(d->loop, &J->housekeep);
    J->housekeep.data = J;
    uv_timer_start(&J->housekeep, on_housekeep, JOBS_HOUSEKEEP_MS, JOBS_HOUSEKEEP_MS);
    uv_unref((uv_handle_t *)&J->housekeep);
    return 0;
}

void jobs_shutdown(core_t *d)
{
    jobs_t *J = g_jobs;
    (void)d;
    if (!J || J->closing)
        return;
    J->closing = true;
    uv_timer_stop(&J->tick);
    uv_timer_stop(&J->housekeep);
    list_foreach_safe(it, tmp, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        if (run->committing)
            continue; /* its after_commit still runs while the loop closes its handles */
        if (run->client || run->writer)
            log_event(LOG_WARN, "job_attempt_abandoned", "job_id=%s reason=%s", run->id, "vramd stopping");
        job_client_cancel(run->client);
        run->client = NULL;
        if (run->writer)
            result_writer_close(J->results, run->writer);
        list_remove(&run->link);
        J->n_runs--;
        run_free(run);
    }
}

void jobs_close(core_t *d)
{
    jobs_t *J = g_jobs;
    (void)d;
    if (!J)
        return;
    jobs_shutdown(d);
    list_foreach_safe(it, tmp, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        list_remove(&run->link);
        run_free(run);
    }
    result_store_close(J->results);
    journal_close(J->journal);
    g_jobs = NULL;
    free(J);
}
