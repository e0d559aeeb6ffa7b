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
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "jobs/job_client.h"
#include "jobstore/job_id.h"
#include "jobs/jobs.h"
#include "core/model.h"
#include "jobs/jobs_int.h"
#include "jobstore/journal.h"
#include "jobstore/result_store.h"
#include "policy/client_limit.h"
#include "sched/scheduler.h"

#define JOBS_EXCERPT_MAX 2048

/* The most one result may be: jobs.results_max_bytes, and for a store that keeps results
 * itself also its own limit (jobs.postgres.max_result_bytes). */
static uint64_t result_cap(const jobs_t *J)
{
    uint64_t cap = J->core->cfg->jobs.results_max_bytes;
    if (J->store->inline_results && J->store->max_result < cap)
        cap = J->store->max_result;
    return cap;
}

static const char *result_cap_name(const jobs_t *J)
{
    return result_cap(J) < J->core->cfg->jobs.results_max_bytes ? "jobs.postgres.max_result_bytes"
                                                                 : "jobs.results_max_bytes";
}

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

static void after_fail(jobs_t *J, const jobs_write_t *w, int rc, const char *err)
{
    if (rc == JOURNAL_CONFLICT)
        log_event(LOG_INFO, "job_outcome_ignored", "job_id=%s reason=%s", w->id,
                  "already final, or its lease was taken over");
    else if (rc != JOURNAL_OK)
        jobs_journal_trouble(J, w->id, w->op, err);
}

static void job_fail(job_run_t *run, int status, const char *code, const char *message)
{
    jobs_t *J = run->J;
    job_outcome_t o = {.state = JOB_FAILED, .http_status = status, .error_code = code,
                       .error_message = message, .degrade_level = run->degrade_level, .gpu = run->gpu};
    log_event(LOG_WARN, "job_failed", "job_id=%s model=%s status=%d code=%s message=%s attempts=%d", run->id,
              run->model, status, code, message, run->attempts + (run->state != RUN_SENT ? 1 : 0));
    jstore_finish(J->store, run->id, run->token, &o, jobs_wall_ms(), NULL, 0, jobs_write_done,
                  jobs_write_new(J, run->id, run, "mark_failed", after_fail));
}

/* Back to queued without using an attempt (vramd was busy, draining, or not reachable). */
static void job_retry_later(job_run_t *run, const char *code, const char *message)
{
    jobs_t *J = run->J;
    if (run->state != RUN_SENT || J->store->lease_ms)
        jstore_requeue(J->store, run->id, run->token, true, code, message, jobs_write_done,
                       jobs_write_new(J, run->id, run, "requeue", NULL)); /* (a claim is released too) */
    uint64_t step = jobs_backoff_model(J, run->model, run->started_ms);
    log_event(LOG_INFO, "job_retry_later", "job_id=%s model=%s code=%s message=%s backoff_ms=%llu", run->id,
              run->model, code, message, (unsigned long long)step);
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
    jstore_requeue(J->store, run->id, run->token, false, code, message, jobs_write_done,
                   jobs_write_new(J, run->id, run, "requeue", NULL));
    uint64_t step = jobs_backoff_model(J, run->model, run->started_ms);
    log_event(LOG_INFO, "job_attempt_failed",
              "job_id=%s model=%s status=%d code=%s attempt=%d max_attempts=%d backoff_ms=%llu", run->id, run->model,
              status, code, used, run->max_attempts, (unsigned long long)step);
}

static void after_succeeded(jobs_t *J, const jobs_write_t *w, int rc, const char *err)
{
    if (rc == JOURNAL_CONFLICT) {
        /* cancelled while the result was being committed, or the lease was lost: no result */
        if (!J->store->inline_results)
            result_store_remove(J->results, w->id);
        log_event(LOG_INFO, "job_result_dropped", "job_id=%s reason=%s", w->id,
                  "cancelled, or its lease was taken over");
    } else if (rc != JOURNAL_OK) {
        jobs_journal_trouble(J, w->id, w->op, err);
    } else {
        jobs_backoff_reset(J, w->model);
        log_event(LOG_INFO, "job_succeeded", "job_id=%s model=%s", w->id, w->model);
    }
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
    if (ok && J->store->inline_results) {
        result_store_remove(J->results, run->id); /* read back into inline_data: the store keeps it */
        if (!run->inline_data && bytes > 0) {
            ok = false;
            snprintf(err, sizeof err, "the result of %llu bytes could not be read back for the job store (limit %llu)",
                     (unsigned long long)bytes, (unsigned long long)J->store->max_result);
        }
    }
    if (!ok) {
        job_fail(run, run->status, disk_full ? "disk_full" : "result_write_failed", err);
    } else {
        if (!J->store->inline_results)
            result_store_make_room(J->results, 0, J->core->cfg->jobs.results_max_bytes, jobs_on_result_removed, J);
        job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = run->status, .result_type = run->content_type,
                           .result_bytes = bytes, .result_stored = true, .degrade_level = run->degrade_level,
                           .gpu = run->gpu};
        log_event(LOG_INFO, "job_result_committed", "job_id=%s model=%s status=%d bytes=%llu attempts=%d gpu=%d level=%d",
                  run->id, run->model, run->status, (unsigned long long)bytes, run->attempts + 1, run->gpu,
                  run->degrade_level);
        void *data = run->inline_data;
        run->inline_data = NULL; /* the store owns it now */
        jstore_finish(J->store, run->id, run->token, &o, jobs_wall_ms(), data, run->inline_len, jobs_write_done,
                      jobs_write_new(J, run->id, run, "mark_succeeded", after_succeeded));
    }
    jobs_run_finish(run);
}

/* Read a committed result of exactly len bytes into buf (any thread). 0 or -1. */
static int read_result(const result_store_t *rs, const char *id, unsigned char *buf, size_t len)
{
    int fd = -1;
    uint64_t size = 0;
    if (result_store_open_read(rs, id, &fd, &size) != 0)
        return -1;
    size_t got = 0;
    while (size == len && got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return got == len && size == len ? 0 : -1;
}

/* Thread pool: commit the result file; for a store that keeps results itself, read it back
 * (bounded by the store's max_result) so the loop thread never reads a file. */
static void do_commit(uv_work_t *w)
{
    job_run_t *run = w->data;
    run->commit_rc = result_writer_commit(run->writer);
    jobs_t *J = run->J;
    if (run->commit_rc != 0 || !J->store->inline_results)
        return;
    uint64_t bytes = result_writer_bytes(run->writer);
    if (bytes > J->store->max_result)
        return;
    run->inline_len = (size_t)bytes;
    run->inline_data = malloc(bytes ? (size_t)bytes : 1);
    if (run->inline_data && read_result(J->results, run->id, run->inline_data, (size_t)bytes) != 0) {
        free(run->inline_data);
        run->inline_data = NULL;
    }
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
        run->writer = result_writer_open(J->results, run->id, result_cap(J), err, sizeof err);
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
    uint64_t cap = result_cap(J);
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
            snprintf(m, sizeof m, "the result of %llu bytes is over %s (%llu)",
                     (unsigned long long)msg->content_length, result_cap_name(J), (unsigned long long)cap);
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
        snprintf(m, sizeof m, "the result is over %s (%llu)", result_cap_name(run->J),
                 (unsigned long long)result_cap(run->J));
        sink_error(run, "result_too_large", m);
    } else {
        sink_error(run, result_writer_disk_full(run->writer) ? "disk_full" : "result_write_failed",
                   result_writer_error(run->writer));
    }
    return -1;
}

/* A claimed job that will not start now: give it back (stores with leases; the SQLite
 * store's claims are only reads). */
static void release_claim(jobs_t *J, const job_record_t *rec)
{
    if (J->store->lease_ms)
        jstore_requeue(J->store, rec->id, rec->token, false, NULL, NULL, jobs_write_done,
                       jobs_write_new(J, rec->id, NULL, "release", NULL));
}

/* 1 when an attempt was started; 0 when the job was not started (deadline passed: failed
 * now, vramd unreachable: released). rec is a claimed queued job with its body. */
static int start_attempt(jobs_t *J, const job_record_t *rec)
{
    int64_t now = jobs_wall_ms();
    job_run_t *run = calloc(1, sizeof *run);
    if (!run) {
        release_claim(J, rec);
        return 0;
    }
    run->J = J;
    list_init(&run->link);
    buf_init(&run->excerpt, JOBS_EXCERPT_MAX);
    memcpy(run->id, rec->id, sizeof run->id);
    snprintf(run->token, sizeof run->token, "%s", rec->token);
    run->serial = ++J->next_serial;
    run->started_ms = core_now();
    snprintf(run->model, sizeof run->model, "%s", rec->model);
    run->deadline_wall_ms = rec->deadline_wall_ms;
    run->max_attempts = rec->max_attempts;
    run->attempts = rec->attempts;
    run->gpu = -1;
    if (rec->deadline_wall_ms && now >= rec->deadline_wall_ms) {
        job_fail(run, 504, "deadline_exceeded", "the job's deadline passed before it could start");
        jobs_run_free(run);
        return 0;
    }
    char nonce[JOB_ID_SIZE];
    if (job_id_generate(nonce) != 0) {
        release_claim(J, rec);
        jobs_run_free(run);
        return 0;
    }
    snprintf(run->request_id, sizeof run->request_id, "job-%s-%.16s", rec->id, nonce);
    char *req = NULL;
    size_t req_len = 0;
    uint64_t left = rec->deadline_wall_ms ? (uint64_t)(rec->deadline_wall_ms - now) : 0;
    /* the submitter's request, for limits.per_client (an unreadable record: 127.0.0.1's) */
    job_submitter_t sub;
    (void)job_submitter_from_json(rec->client_json, &sub);
    const config_t *cfg = J->core->cfg;
    job_client_origin_t origin = {.secret = J->core->job_secret,
                                  .submitter = &sub,
                                  .key_header = cfg->per_client.key == CLIENT_KEY_HEADER ? cfg->per_client.header
                                                                                         : NULL};
    if (job_client_build_request(rec->method, rec->path, rec->headers_json, rec->body, rec->body_len, run->request_id,
                                 rec->priority, left, &origin, &req, &req_len) != 0) {
        job_fail(run, 0, "bad_job", "the stored request could not be rebuilt");
        jobs_run_free(run);
        return 0;
    }
    char err[256];
    http_client_opts_t opts = {.on_head = on_client_head, .on_body = on_client_body, .on_end = on_client_end, .ctx = run};
    if (http_client_start(J->core->loop, (const struct sockaddr *)&J->addr, req, req_len, &opts, &run->client, err,
                          sizeof err) != 0) {
        log_event(LOG_WARN, "job_start_failed", "job_id=%s error=%s", rec->id, err);
        jobs_backoff_model(J, run->model, core_now());
        release_claim(J, rec);
        jobs_run_free(run);
        return 0;
    }
    list_insert_tail(&J->runs, &run->link);
    J->n_runs++;
    log_event(LOG_INFO, "job_attempt_started", "job_id=%s model=%s request_id=%s attempt=%d priority=%d", rec->id,
              rec->model, run->request_id, rec->attempts + 1, rec->priority);
    return 1;
}

static bool run_in_flight(const char *id, void *ctx)
{
    return jobs_run_find(ctx, id) != NULL;
}

static void on_repump(uv_timer_t *t)
{
    jobs_t *J = t->data;
    jobs_pump(J->core);
}

/* The store's answer to a claim: start what it gave (the claims are ours now). */
static void on_claimed(void *ctx, int rc, const char *err, const job_record_t *recs, size_t n,
                       const journal_cursor_t *next)
{
    jobs_t *J = ctx;
    (void)next;
    if (rc != JOURNAL_OK && !J->closing)
        log_event(rc == JOURNAL_UNAVAILABLE ? LOG_DEBUG : LOG_WARN, "job_journal_error", "op=%s error=%s", "claim",
                  err); /* unavailable: the store logged that it is down */
    core_t *d = J->core;
    for (size_t i = 0; i < n; i++) {
        if (J->closing || d->draining || J->n_runs >= d->cfg->jobs.max_active || jobs_run_find(J, recs[i].id))
            release_claim(J, &recs[i]);
        else
            start_attempt(J, &recs[i]);
    }
    J->claiming = false;
    if (J->pump_again && !J->closing) {
        J->pump_again = false;
        uv_timer_start(&J->repump, on_repump, 0, 0); /* next loop turn: no recursion */
    }
}

/* What this host could give a new request now, in bytes, on its best GPU: free memory plus
 * what evicting its idle instances would free (the scheduler does that for a request that
 * needs it). Jobs whose estimate is above it wait for a host that has it, or for memory
 * to come free here. *capacity: the largest GPU's capacity (what could ever be given). */
static uint64_t gpu_room_now(uint64_t *capacity)
{
    uint64_t best = 0;
    size_t n = sched_gpu_count();
    *capacity = 0;
    for (size_t i = 0; i < n; i++) {
        sched_gpu_figures_t f;
        if (!sched_gpu_figures(i, &f))
            continue;
        uint64_t room = sched_room_with_evictions(i);
        if (room > best)
            best = room;
        if (f.capacity > *capacity)
            *capacity = f.capacity;
    }
    return best;
}

void jobs_pump(core_t *d)
{
    jobs_t *J = d ? g_jobs : NULL;
    if (!J || J->closing || d->draining || !d->listening || J->paused_until_ms > core_now())
        return;
    if (J->claiming) {
        J->pump_again = true;
        return;
    }
    unsigned max_active = d->cfg->jobs.max_active;
    if (J->n_runs >= max_active)
        return;
    size_t room = max_active - J->n_runs, n_models = 0, n = 0;
    list_foreach(it, &d->models) n_models++;
    if (n_models == 0)
        return;
    jstore_want_t *w = calloc(n_models, sizeof *w);
    if (!w)
        return;
    uint64_t gpu_room = UINT64_MAX, capacity = UINT64_MAX;
    bool gpu_known = false;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed || jobs_backing_off(J, m->name))
            continue;
        unsigned window = model_window(m);
        unsigned busy = runs_for_model(J, m->name);
        if (busy >= window)
            continue;
        if (!gpu_known && sched_model_uses_gpu(m->cfg)) {
            gpu_room = sched_gpu_ok() ? gpu_room_now(&capacity) : 0;
            gpu_known = true;
        }
        w[n].model = m->name;
        w[n].n = window - busy < room ? window - busy : room;
        w[n].in_flight = busy;
        w[n].room_bytes = sched_model_uses_gpu(m->cfg) ? gpu_room : UINT64_MAX;
        w[n].capacity_bytes = sched_model_uses_gpu(m->cfg) ? capacity : UINT64_MAX;
        n++;
    }
    if (n > 0) {
        J->claiming = true;
        jstore_claim(J->store, w, n, room, run_in_flight, J, on_claimed, J);
    }
    free(w);
}
