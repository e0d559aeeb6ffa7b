/*
 * jobs_int: what the job runner's files share; nothing outside src/jobs/jobs*.c may include
 * it. Calls between them go one way only (mk/lint_layers.py rejects a cycle):
 *   jobs.c (life, timers, dispatch hook, cancel, counts)
 *     -> jobs_attempt.c (the pump and one attempt: start, answer, commit, retry rules)
 *     -> jobs_runs.c (the one runner, the runs table, backoff, journal pause, wall clock)
 */
#ifndef VRAMD_JOBS_JOBS_INT_H
#define VRAMD_JOBS_JOBS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/buf.h"
#include "common/list.h"
#include "jobs/job_id.h"
#include "jobs/jobs.h"
#include "jobs/journal.h"
#include "jobs/result_store.h"
#include "net/http_client.h"

#define JOBS_MESSAGE_MAX 400
#define JOBS_BACKOFF_MODELS 256

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
    unsigned settle_failures; /* ticks a failed journal write could not be settled (jobs.c) */
    bool orphans_maybe;       /* a journal write failed: a job may be `running` in the journal
                                 with no attempt in flight (jobs.c, requeue_orphans) */
    bool pumping;
    bool closing;
};

/* One attempt of a job (the journal keeps the job's own state, job_state.h):
 *   SENT       the loopback request is on its way (queued in vramd, or refused there)
 *   RUNNING    it reached a worker: the journal says running, attempts + 1
 *   COMMITTING a 2xx answer is complete and its result file is being committed
 * SENT -> RUNNING -> COMMITTING; SENT -> COMMITTING only for a 2xx that no worker gave
 * (vramd never gives one for a model's route). An attempt ends in any state (the run is
 * freed by jobs_run_finish); cancelled is a flag beside the state. */
enum job_run_state { RUN_SENT = 0, RUN_RUNNING, RUN_COMMITTING };

#define job_run_set_state(run, s) job_run_set_state_at((run), (s), __LINE__)
struct job_run;
void job_run_set_state_at(struct job_run *run, enum job_run_state s, int line);
const char *job_run_state_name(enum job_run_state s);

typedef struct job_run {
    list_t link; /* jobs->runs */
    jobs_t *J;
    char id[JOB_ID_SIZE];
    char request_id[64];
    char model[128];
    int64_t deadline_wall_ms;
    int max_attempts;
    int attempts;      /* attempts started before this one */
    enum job_run_state state; /* job_run_set_state: SENT -> RUNNING -> COMMITTING */
    bool cancelled;    /* DELETE /v1/jobs/{id} while this attempt ran (any state) */
    bool from_worker;  /* the answer came from a worker (X-Vramd-Attempts), not from vramd */
    http_client_t *client;
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

/* ---- jobs_runs.c ---- */
extern jobs_t *g_jobs; /* the one runner, set by jobs_init (NULL: jobs unavailable) */
/* The attempt in flight for job id, or NULL. */
job_run_t *jobs_run_find(jobs_t *J, const char *id);
/* Free a run that is out of J->runs (or never was in it). */
void jobs_run_free(job_run_t *run);
/* An attempt of `model` failed: no attempt for it for the next (doubled) backoff step. */
void jobs_backoff_model(jobs_t *J, const char *model);
/* An attempt of `model` succeeded: no backoff. */
void jobs_backoff_reset(jobs_t *J, const char *model);
/* true while `model` is backing off. */
bool jobs_backing_off(jobs_t *J, const char *model);
/* A journal write failed (disk full, I/O error): start nothing for a while, so a job whose
 * state cannot be recorded is not run again and again meanwhile. */
void jobs_journal_trouble(jobs_t *J, const char *id, const char *op);
/* result_store callback (ctx: J): a stored result was removed; the journal notes it. */
void jobs_on_result_removed(const char *id, void *ctx);

/* ---- jobs_attempt.c (and jobs_pump in jobs.h) ---- */
/* The attempt is over: drop it from the table, then look for more work. */
void jobs_run_finish(job_run_t *run);

#endif
