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
 *   -> jobs_run_finish: out of the table, freed; pump; drain check.
 * A cancel (DELETE) closes the loopback connection (vramd then drops the request from its
 * queue or closes the upstream) and finishes the run at once, except while its result is
 * being committed: then after_commit sees the cancel (journal conflict) and removes the file.
 *
 * This file keeps the runner's life (init with recovery, shutdown, close), its timers (the
 * tick: overdue jobs, pump; housekeeping: results expired and evicted, records purged), the
 * dispatch hook, cancels and counts. The pump and the attempt itself are in jobs_attempt.c,
 * the shared table, backoff and journal pause in jobs_runs.c (jobs_int.h gives the order).
 */
#include "jobs/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "jobs/jobs_int.h"
#include "jobstore/journal.h"
#include "jobstore/result_store.h"
#include "net/conn.h"

#define JOBS_TICK_MS 1000
#define JOBS_ORPHANS_BATCH 256 /* orphaned `running` jobs handled per tick */
#define JOBS_HOUSEKEEP_MS 60000
#define JOBS_PURGE_BATCH 1000
#define JOBS_PURGE_ROUNDS 20
#define JOBS_OVERDUE_BATCH 64  /* queued jobs past their deadline failed per tick */

jobs_t *jobs_get(const core_t *d)
{
    (void)d;
    return g_jobs;
}

jstore_t *jobs_store(jobs_t *J) { return J->store; }

struct result_store *jobs_results(jobs_t *J) { return J->results; }

bool jobs_busy(const core_t *d)
{
    const jobs_t *J = g_jobs;
    (void)d;
    return J && (J->n_runs > 0 || J->n_committing > 0 || J->n_writes > 0);
}

int jobs_count_by_state(core_t *d, uint64_t out[JOB_STATE_COUNT])
{
    jobs_t *J = d ? g_jobs : NULL;
    if (!J || !J->store)
        return -1;
    return jstore_counts(J->store, out);
}

/* The attempt may not go on: its job was cancelled elsewhere or its lease was taken over. */
static void lose_attempt(jobs_t *J, const jobs_write_t *w, const char *why)
{
    job_run_t *run = jobs_write_run(w);
    if (!run || run->cancelled)
        return;
    log_event(LOG_WARN, "job_lease_lost", "job_id=%s model=%s op=%s reason=%s", run->id, run->model, w->op, why);
    jobs_cancel_attempt(J, run->id);
}

static void after_attempt_write(jobs_t *J, const jobs_write_t *w, int rc, const char *err)
{
    if (rc == JOURNAL_CONFLICT)
        lose_attempt(J, w, "the job was cancelled or its lease was taken over");
    else if (rc != JOURNAL_OK)
        jobs_journal_trouble(J, w->id, w->op, err);
}

/* CORE_EV_REQUEST_DISPATCHED: a job's request was handed to a worker instance (the one
 * runner's, if jobs_init made it). */
static void on_request_dispatched(void *ctx, enum core_event ev, void *subject)
{
    jobs_t *J = g_jobs;
    request_t *r = subject;
    (void)ctx;
    (void)ev;
    if (!J || strncmp(r->id, "job-", 4) != 0)
        return;
    job_run_t *run = NULL;
    list_foreach(it, &J->runs) {
        job_run_t *x = list_entry(it, job_run_t, link);
        if (strcmp(x->request_id, r->id) == 0)
            run = x;
    }
    if (!run || run->cancelled)
        return;
    int gpu = r->instance ? r->instance->memory.gpu : -1;
    run->gpu = gpu;
    if (run->state != RUN_SENT) {
        /* vramd retried it (degradation ladder, invalid output): the same attempt */
        jstore_set_gpu(J->store, run->id, run->token, gpu, jobs_write_done,
                       jobs_write_new(J, run->id, run, "set_gpu", after_attempt_write));
        return;
    }
    /* the request reached a worker: the attempt counts from now on, whatever the store says
     * later (a conflict there means the job was cancelled or taken over: the attempt stops) */
    job_run_set_state(run, RUN_RUNNING);
    log_event(LOG_INFO, "job_running", "job_id=%s model=%s attempt=%d gpu=%d", run->id, run->model,
              run->attempts + 1, gpu);
    jstore_mark_running(J->store, run->id, run->token, jobs_wall_ms(), gpu, jobs_write_done,
                        jobs_write_new(J, run->id, run, "mark_running", after_attempt_write));
}

/* Lease renewals: every run in flight, a third of the lease apart. */
static void on_renew(uv_timer_t *t)
{
    jobs_t *J = t->data;
    list_foreach(it, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        if (!run->cancelled)
            jstore_renew(J->store, run->id, run->token, jobs_write_done,
                         jobs_write_new(J, run->id, run, "renew", after_attempt_write));
    }
}

void jobs_cancel_attempt(jobs_t *J, const char *id)
{
    job_run_t *run = jobs_run_find(J, id);
    if (!run || run->cancelled)
        return;
    run->cancelled = true;
    log_event(LOG_INFO, "job_attempt_cancelled", "job_id=%s model=%s committing=%s", run->id, run->model,
              run->state == RUN_COMMITTING ? "true" : "false");
    if (run->state == RUN_COMMITTING)
        return; /* after_commit finds the job cancelled and removes the result */
    http_client_cancel(run->client);
    run->client = NULL;
    if (run->writer) {
        result_writer_close(J->results, run->writer);
        run->writer = NULL;
    }
    jobs_run_finish(run);
}

static void on_purged(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    result_store_remove(J->results, id);
}

static void after_housekeep(void *ctx, int rc, const char *err, size_t purged)
{
    if (rc != JOURNAL_OK)
        log_event(rc == JOURNAL_UNAVAILABLE ? LOG_DEBUG : LOG_WARN, "job_journal_error", "op=%s error=%s", "purge",
                  err);
    else if (purged)
        log_event(LOG_INFO, "jobs_housekeeping", "records_purged=%zu", purged);
    (void)ctx;
}

static void housekeep(jobs_t *J)
{
    const config_t *cfg = J->core->cfg;
    int64_t now = jobs_wall_ms();
    size_t expired = result_store_expire(J->results, now, cfg->jobs.results_ttl_ms, jobs_on_result_removed, J);
    size_t evicted = result_store_make_room(J->results, 0, cfg->jobs.results_max_bytes, jobs_on_result_removed, J);
    if (expired || evicted)
        log_event(LOG_INFO, "jobs_housekeeping", "results_expired=%zu results_evicted=%zu", expired, evicted);
    jstore_housekeep(J->store, now, cfg->jobs.results_ttl_ms, cfg->jobs.records_ttl_ms, on_purged, J, after_housekeep,
                     J);
}

static void on_housekeep(uv_timer_t *t)
{
    housekeep(t->data);
}

static bool run_in_flight(const char *id, void *ctx)
{
    return jobs_run_find(ctx, id) != NULL;
}

static void after_overdue(void *ctx, int rc, const char *err, size_t n)
{
    jobs_t *J = ctx;
    (void)J;
    if (rc != JOURNAL_OK)
        log_event(rc == JOURNAL_UNAVAILABLE ? LOG_DEBUG : LOG_WARN, "job_journal_error", "op=%s error=%s",
                  "fail_overdue", err);
    if (n)
        log_event(LOG_WARN, "job_failed", "count=%zu status=%d code=%s message=%s", n, 504, "deadline_exceeded",
                  "deadline passed while queued in the journal");
}

/* Queued jobs whose start deadline passed while they waited in the journal (not handed to
 * vramd's queues: those get vramd's own 504) fail now, not only when their turn comes. */
static void fail_overdue(jobs_t *J)
{
    jstore_fail_overdue(J->store, jobs_wall_ms(), JOBS_OVERDUE_BATCH, run_in_flight, J, after_overdue, J);
}

/* A journal write failed on the disk: settle it (journal.h, journal_settle) once the disk
 * works again, so that no refused change comes back at the next start. Logged when it
 * starts failing and when it is settled, not every tick. */
static void settle_journal(jobs_t *J)
{
    journal_t *jn = jstore_sqlite_journal(J->store); /* SQLite only (PostgreSQL commits or not) */
    if (!jn || !journal_in_doubt(jn))
        return;
    if (journal_settle(jn) == JOURNAL_OK) {
        log_event(LOG_INFO, "job_journal_settled", "failed_ticks=%u", J->settle_failures);
        J->settle_failures = 0;
        return;
    }
    if (J->settle_failures++ == 0)
        log_event(LOG_ERROR, "job_journal_error", "op=%s error=%s", "settle", journal_errmsg(jn));
}

/* Jobs `running` in the journal with no attempt in flight: those whose attempt's end (or
 * requeue) could not be recorded while the disk failed. Collected by requeue_orphans. */
typedef struct orphans {
    jobs_t *J;
    char (*ids)[JOB_ID_SIZE];
    bool *exhausted;
    size_t n;
} orphans_t;

static int collect_orphan(const job_record_t *rec, void *ctx)
{
    orphans_t *o = ctx;
    if (!jobs_run_find(o->J, rec->id) && o->n < JOBS_ORPHANS_BATCH) {
        memcpy(o->ids[o->n], rec->id, JOB_ID_SIZE);
        o->exhausted[o->n++] = rec->attempts >= rec->max_attempts;
    }
    return 0;
}

/* After a journal write failed, once the journal writes again: what recovery at start does
 * for a crash, for the jobs left `running` with nothing running them (queued again, or failed
 * when their attempts are used up), so a passing disk error never leaves a job stuck until
 * the next restart. Clears J->orphans_maybe when every such job was handled. */
static void requeue_orphans(jobs_t *J)
{
    journal_t *jn = jstore_sqlite_journal(J->store); /* SQLite only: PostgreSQL's leases expire */
    if (!jn || !J->orphans_maybe || journal_in_doubt(jn))
        return;
    orphans_t o = {.J = J, .ids = calloc(JOBS_ORPHANS_BATCH, JOB_ID_SIZE),
                   .exhausted = calloc(JOBS_ORPHANS_BATCH, sizeof(bool))};
    journal_filter_t f = {.state = JOB_RUNNING, .model = NULL};
    journal_cursor_t next = {.valid = false};
    size_t done = 0;
    int rc = !o.ids || !o.exhausted ? JOURNAL_ERROR
             : journal_list(jn, &f, NULL, JOURNAL_LIST_MAX, collect_orphan, &o, &next, NULL);
    for (size_t i = 0; rc == JOURNAL_OK && i < o.n; i++) {
        if (o.exhausted[i]) {
            job_outcome_t out = {.state = JOB_FAILED, .error_code = "attempts_exhausted",
                                 .error_message = "its last attempt's end could not be recorded (journal write"
                                                  " failed) and no attempt is left", .gpu = -1};
            rc = journal_mark_finished(jn, o.ids[i], &out, jobs_wall_ms());
        } else {
            rc = journal_requeue(jn, o.ids[i], false, "interrupted",
                                 "the end of its attempt could not be recorded (journal write failed)");
        }
        if (rc == JOURNAL_CONFLICT || rc == JOURNAL_NOT_FOUND)
            rc = JOURNAL_OK; /* it moved on meanwhile */
        done += rc == JOURNAL_OK;
    }
    if (rc == JOURNAL_OK && !next.valid && o.n < JOBS_ORPHANS_BATCH)
        J->orphans_maybe = false;
    if (done)
        log_event(LOG_WARN, "job_orphans_requeued", "count=%zu", done);
    free(o.ids);
    free(o.exhausted);
    if (done)
        jobs_pump(J->core);
}

static void on_tick(uv_timer_t *t)
{
    jobs_t *J = t->data;
    settle_journal(J);
    requeue_orphans(J);
    fail_overdue(J);
    jobs_pump(J->core);
}

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

/* A stored result is kept only while its job record says so (start-up sweep). With an
 * inline-results store the local files are only the temp files of results on their way to
 * the store: none is kept. */
static bool result_has_record(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    journal_t *jn = jstore_sqlite_journal(J->store);
    if (!jn)
        return false;
    enum job_result_state rs = JOB_RESULT_NONE;
    int rc = journal_peek(jn, id, NULL, &rs);
    if (rc == JOURNAL_NOT_FOUND)
        return false;
    return rc != JOURNAL_OK || rs == JOB_RESULT_STORED; /* a read error: keep it, unsure */
}

static void on_store_wake(void *ctx)
{
    jobs_t *J = ctx;
    if (J != g_jobs)
        return;
    J->paused_until_ms = 0; /* the store answers again: what paused the runner is over */
    jobs_pump(J->core);
}

/* The store of jobs.backend: the local journal (recovered: jobs that were running when
 * vramd stopped are queued again) or PostgreSQL (connecting in the background). */
static jstore_t *open_store(jobs_t *J, const config_t *cfg, char *err, size_t errlen)
{
    char why[JOURNAL_ERR_MAX];
    if (cfg->jobs.backend == JOBS_BACKEND_POSTGRES) {
        char host_id[256];
        if (cfg->jobs.pg.host_id)
            snprintf(host_id, sizeof host_id, "%s", cfg->jobs.pg.host_id);
        else
            jobs_default_host_id(cfg, host_id, sizeof host_id);
        jstore_pg_config_t pc = {.url = cfg->jobs.pg.url, .host_id = host_id, .lease_ms = cfg->jobs.pg.lease_ms,
                                 .aging_ms = cfg->jobs.pg.aging_ms, .max_result_bytes = cfg->jobs.pg.max_result_bytes,
                                 .timeout_ms = cfg->jobs.pg.timeout_ms};
        jstore_events_t ev = {.wake = on_store_wake, .ctx = J};
        return jstore_pg_open(J->core->loop, &pc, &ev, err, errlen);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/jobs.db", cfg->state_dir);
    journal_t *jn = journal_open(path, why, sizeof why);
    if (!jn) {
        snprintf(err, errlen, "%s", why); /* journal_open names the file */
        return NULL;
    }
    size_t requeued = 0, failed = 0;
    if (journal_recover(jn, jobs_wall_ms(), &requeued, &failed) != JOURNAL_OK)
        log_event(LOG_ERROR, "job_journal_error", "op=%s error=%s", "recover", journal_errmsg(jn));
    uint64_t counts[JOB_STATE_COUNT] = {0};
    journal_counts(jn, counts);
    log_event(LOG_INFO, "jobs_journal_opened", "queued=%llu requeued=%zu failed_on_recovery=%zu",
              (unsigned long long)counts[JOB_QUEUED], requeued, failed);
    jstore_t *s = jstore_sqlite_new(jn);
    if (!s) {
        journal_close(jn);
        snprintf(err, errlen, "out of memory");
    }
    return s;
}

static void start_timer(jobs_t *J, uv_timer_t *t, uv_timer_cb fn, uint64_t first, uint64_t every)
{
    uv_timer_init(J->core->loop, t);
    t->data = J;
    if (fn)
        uv_timer_start(t, fn, first, every);
    uv_unref((uv_handle_t *)t);
}

void jobs_listen(core_t *d) { core_listen(d, CORE_EV_REQUEST_DISPATCHED, on_request_dispatched, NULL); }

int jobs_init(core_t *d, char *err, size_t errlen)
{
    const config_t *cfg = d->cfg;
    jobs_t *J = calloc(1, sizeof *J);
    if (!J) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    J->core = d;
    jobs_clock_start();
    list_init(&J->runs);
    if (loopback_address(cfg, &J->addr) != 0) {
        snprintf(err, errlen, "cannot reach the listen address %s:%d", cfg->listen_host, cfg->listen_port);
        free(J);
        return -1;
    }
    char path[4096], why[JOURNAL_ERR_MAX];
    snprintf(path, sizeof path, "%s/results", cfg->state_dir);
    J->results = result_store_open(path, why, sizeof why);
    if (!J->results) {
        snprintf(err, errlen, "%s", why); /* result_store_open names the folder */
        free(J);
        return -1;
    }
    result_store_set_clock(J->results, jobs_wall_ms);
    J->store = open_store(J, cfg, err, errlen);
    if (!J->store) {
        result_store_close(J->results);
        free(J);
        return -1;
    }
    size_t orphans = result_store_retain(J->results, result_has_record, J);
    if (orphans)
        log_event(LOG_INFO, "job_results_orphaned", "removed=%zu", orphans);
    log_event(LOG_INFO, "jobs_started", "backend=%s results=%zu results_bytes=%llu", J->store->ops->name,
              result_store_count(J->results), (unsigned long long)result_store_total_bytes(J->results));
    g_jobs = J;
    housekeep(J);
    start_timer(J, &J->tick, on_tick, 0, JOBS_TICK_MS);
    start_timer(J, &J->housekeep, on_housekeep, JOBS_HOUSEKEEP_MS, JOBS_HOUSEKEEP_MS);
    uint64_t every = J->store->lease_ms / 3 ? J->store->lease_ms / 3 : 1;
    start_timer(J, &J->renew, J->store->lease_ms ? on_renew : NULL, every, every);
    start_timer(J, &J->repump, NULL, 0, 0);
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
    uv_timer_stop(&J->renew);
    uv_timer_stop(&J->repump);
    jstore_stop(J->store); /* PostgreSQL: what still waits ends now, the connection closes */
    list_foreach_safe(it, tmp, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        if (run->state == RUN_COMMITTING)
            continue; /* its after_commit still runs while the loop closes its handles */
        if (run->client || run->writer)
            log_event(LOG_WARN, "job_attempt_abandoned", "job_id=%s reason=%s", run->id, "vramd stopping");
        http_client_cancel(run->client);
        run->client = NULL;
        if (run->writer)
            result_writer_close(J->results, run->writer);
        list_remove(&run->link);
        J->n_runs--;
        jobs_run_free(run);
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
        jobs_run_free(run);
    }
    jstore_close(J->store);
    result_store_close(J->results);
    g_jobs = NULL;
    free(J);
}
