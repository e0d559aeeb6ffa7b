/*
 * jobs_runs: what the job runner's files share at the bottom: the one runner (g_jobs), the
 * wall clock, the table of attempts in flight (lookup, free), and the two reasons not to
 * start an attempt yet: a model's backoff after failed attempts (doubling from
 * JOBS_BACKOFF_MIN_MS to JOBS_BACKOFF_MAX_MS, reset by a success; the attempts that were in
 * flight when a step was taken fail together and take no step of their own) and the pause
 * after a journal write failed.
 *
 * Invariants: the backoff table is bounded (JOBS_BACKOFF_MODELS slots, the oldest forgotten
 * when full); a run is freed only once it is out of J->runs. Calls no other file of the
 * runner (jobs_int.h gives the order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/check.h"
#include "common/log.h"
#include "core/core.h"
#include "jobs/jobs.h"
#include "jobs/jobs_int.h"
#include "jobstore/journal.h"

#define JOBS_BACKOFF_MIN_MS 1000
#define JOBS_BACKOFF_MAX_MS 30000
#define JOBS_JOURNAL_PAUSE_MS 5000

jobs_t *g_jobs; /* the one runner, set by jobs_init (NULL: jobs unavailable) */

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The jobs' clock (see jobs.h): anchored to the wall clock once, advanced by the monotonic
 * clock. Loop thread only (jobs_clock_start is called by jobs_init before any other use;
 * the lazy start serves the unit tests that use the runner's pieces alone). */
static int64_t g_anchor_wall_ms, g_anchor_mono_ms;
static bool g_anchored;

void jobs_clock_start(void)
{
    g_anchor_wall_ms = clock_ms(CLOCK_REALTIME);
    g_anchor_mono_ms = clock_ms(CLOCK_MONOTONIC);
    g_anchored = true;
}

int64_t jobs_wall_ms(void)
{
    if (!g_anchored)
        jobs_clock_start();
    return g_anchor_wall_ms + (clock_ms(CLOCK_MONOTONIC) - g_anchor_mono_ms);
}

void jobs_default_host_id(const config_t *cfg, char *out, size_t outlen)
{
    char host[200] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    snprintf(out, outlen, "%s:%d", host, cfg->listen_port);
}

job_run_t *jobs_run_find(jobs_t *J, const char *id)
{
    list_foreach(it, &J->runs) {
        job_run_t *run = list_entry(it, job_run_t, link);
        if (strcmp(run->id, id) == 0)
            return run;
    }
    return NULL;
}

bool jobs_attempt_sent(jobs_t *J, const char *id, char *request_id, size_t len)
{
    const job_run_t *run = J ? jobs_run_find(J, id) : NULL;
    if (!run || run->cancelled || run->state != RUN_SENT)
        return false;
    snprintf(request_id, len, "%s", run->request_id);
    return true;
}

size_t jobs_attempts_sent(const jobs_t *J, const char *model)
{
    size_t n = 0;
    if (!J)
        return 0;
    list_foreach(it, &J->runs) {
        const job_run_t *run = list_entry(it, job_run_t, link);
        if (run->state == RUN_SENT && !run->cancelled && strcmp(run->model, model) == 0)
            n++;
    }
    return n;
}

void jobs_run_free(job_run_t *run)
{
    buf_free(&run->excerpt);
    free(run->inline_data);
    free(run);
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

uint64_t jobs_backoff_model(jobs_t *J, const char *model, uint64_t started_ms)
{
    model_backoff_t *b = backoff_slot(J, model, true);
    if (b->step_ms && started_ms <= b->since_ms)
        return b->step_ms; /* in flight when the last step was taken: the same burst */
    b->since_ms = core_now();
    b->step_ms = b->step_ms ? b->step_ms * 2 : JOBS_BACKOFF_MIN_MS;
    if (b->step_ms > JOBS_BACKOFF_MAX_MS)
        b->step_ms = JOBS_BACKOFF_MAX_MS;
    b->until_ms = core_now() + b->step_ms;
    return b->step_ms;
}

void jobs_backoff_reset(jobs_t *J, const char *model)
{
    model_backoff_t *b = backoff_slot(J, model, false);
    if (b)
        b->step_ms = b->until_ms = 0;
}

bool jobs_backing_off(jobs_t *J, const char *model)
{
    const model_backoff_t *b = backoff_slot(J, model, false);
    return b && b->until_ms > core_now();
}

/* A journal write failed (disk full, I/O error): start nothing for a while, so a job whose
 * state cannot be recorded is not run again and again meanwhile. */
void jobs_journal_trouble(jobs_t *J, const char *id, const char *op, const char *err)
{
    J->paused_until_ms = core_now() + JOBS_JOURNAL_PAUSE_MS;
    J->orphans_maybe = true;
    log_event(LOG_ERROR, "job_journal_error", "job_id=%s op=%s error=%s pause_ms=%d", id, op, err,
              JOBS_JOURNAL_PAUSE_MS);
}

jobs_write_t *jobs_write_new(jobs_t *J, const char *id, const job_run_t *run, const char *op, jobs_write_then then)
{
    jobs_write_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->J = J;
    snprintf(w->id, sizeof w->id, "%s", id);
    w->serial = run ? run->serial : 0;
    if (run)
        snprintf(w->model, sizeof w->model, "%s", run->model);
    w->op = op;
    w->then = then;
    J->n_writes++;
    return w;
}

job_run_t *jobs_write_run(const jobs_write_t *w)
{
    if (!w->serial)
        return NULL;
    job_run_t *run = jobs_run_find(w->J, w->id);
    return run && run->serial == w->serial ? run : NULL;
}

void jobs_write_done(void *ctx, int rc, const char *err)
{
    jobs_write_t *w = ctx;
    if (!w)
        return; /* out of memory when it was sent: nobody waits for it */
    jobs_t *J = w->J;
    J->n_writes--;
    if (w->then)
        w->then(J, w, rc, err);
    else if (rc != JOURNAL_OK && rc != JOURNAL_CONFLICT)
        jobs_journal_trouble(J, w->id, w->op, err);
    else if (rc == JOURNAL_CONFLICT)
        log_event(LOG_INFO, "job_outcome_ignored", "job_id=%s op=%s reason=%s", w->id, w->op,
                  "the job is final already, or its lease was taken over");
    free(w);
    if (!J->closing && J->n_writes == 0)
        core_emit(J->core, CORE_EV_REQUEST_ENDED, NULL); /* drain may be waiting for it */
}

void jobs_on_result_removed(const char *id, void *ctx)
{
    jobs_t *J = ctx;
    jstore_result_removed(J->store, id, jobs_write_done, jobs_write_new(J, id, NULL, "mark_result_removed", NULL));
}

const char *job_run_state_name(enum job_run_state s)
{
    static const char *const n[] = {"sent", "running", "committing"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

void job_run_set_state_at(job_run_t *run, enum job_run_state s, int line)
{
    if (run->state == s)
        return;
    CHECK_IF(s < run->state); /* attempts only move forward */
    log_event(LOG_DEBUG, "job_attempt_state", "job_id=%s model=%s from=%s to=%s line=%d", run->id, run->model,
              job_run_state_name(run->state), job_run_state_name(s), line);
    run->state = s;
}
