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
#include "jobstore/job_id.h"
#include "jobs/jobs.h"
#include "jobstore/journal.h"
#include "jobstore/jstore.h"
#include "jobstore/result_store.h"
#include "net/http_client.h"

#define JOBS_MESSAGE_MAX 400
#define JOBS_BACKOFF_MODELS 256

typedef struct model_backoff {
    char model[128];
    uint64_t until_ms; /* monotonic; no attempt for this model before */
    uint64_t step_ms;  /* last delay; 0 = not backing off */
    uint64_t since_ms; /* monotonic: when the last step was taken */
} model_backoff_t;

struct jobs {
    core_t *core;
    jstore_t *store;              /* the jobs (jobstore/jstore.h): SQLite or PostgreSQL */
    result_store_t *results;      /* local result files (and the temp files of inline results) */
    struct sockaddr_storage addr; /* vramd's own listen address, as a client reaches it */
    uv_timer_t tick;
    uv_timer_t housekeep;
    uv_timer_t renew;             /* lease renewals of the runs in flight (stores with leases) */
    uv_timer_t repump;            /* a pump asked for while a claim was out: run it next turn */
    unsigned n_writes;            /* store writes sent and not answered yet (jobs_busy) */
    uint64_t next_serial;         /* numbers runs, so a late answer finds only its own run */
    bool claiming;                /* a claim is out: one at a time */
    bool pump_again;              /* a pump was asked for meanwhile */
    list_t runs;
    unsigned n_runs;
    unsigned n_committing;
    model_backoff_t backoff[JOBS_BACKOFF_MODELS];
    size_t n_backoff;
    uint64_t paused_until_ms; /* monotonic: no attempt starts before (journal could not write) */
    unsigned settle_failures; /* ticks a failed journal write could not be settled (jobs.c) */
    bool orphans_maybe;       /* a journal write failed: a job may be `running` in the journal
                                 with no attempt in flight (jobs.c, requeue_orphans; SQLite) */
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
    char token[40];    /* the claim's lease token ("" without leases) */
    uint64_t serial;   /* J->next_serial when it started */
    uint64_t started_ms; /* monotonic: when this attempt was sent */
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
    void *inline_data; /* inline-result stores: the committed result read back (commit thread) */
    size_t inline_len;
    uv_work_t work;
} job_run_t;

/* ---- jobs_runs.c ---- */
extern jobs_t *g_jobs; /* the one runner, set by jobs_init (NULL: jobs unavailable) */
/* This host's name in the claims of a shared store: "<hostname>:<listen port>". */
void jobs_default_host_id(const config_t *cfg, char *out, size_t outlen);
/* The attempt in flight for job id, or NULL. */
job_run_t *jobs_run_find(jobs_t *J, const char *id);
/* Free a run that is out of J->runs (or never was in it). */
void jobs_run_free(job_run_t *run);
/* An attempt of `model`, sent at started_ms (monotonic), failed: no attempt for it for the
 * next (doubled) backoff step. One cause fails every attempt in flight at once (a worker
 * restarted, vramd busy): an attempt sent before the last step was taken is part of that
 * burst and takes no step of its own. Returns the step in effect, in ms. */
uint64_t jobs_backoff_model(jobs_t *J, const char *model, uint64_t started_ms);
/* An attempt of `model` succeeded: no backoff. */
void jobs_backoff_reset(jobs_t *J, const char *model);
/* true while `model` is backing off. */
bool jobs_backing_off(jobs_t *J, const char *model);
/* A store write failed (disk full, I/O error, PostgreSQL gone): start nothing for a while,
 * so a job whose state cannot be recorded is not run again and again meanwhile. */
void jobs_journal_trouble(jobs_t *J, const char *id, const char *op, const char *err);

/* One store write of the runner, in flight (jobstore/jstore.h calls jobs_write_done once).
 * It names its run by id and serial, never by pointer: the run may have ended when the
 * answer comes. J->n_writes counts them (the drain waits for them). */
typedef struct jobs_write jobs_write_t;
typedef void (*jobs_write_then)(jobs_t *J, const jobs_write_t *w, int rc, const char *err);
struct jobs_write {
    jobs_t *J;
    char id[JOB_ID_SIZE];
    uint64_t serial;   /* the run's serial; 0 = not tied to a run */
    char model[128];   /* the run's model ("" without a run) */
    const char *op;    /* a literal, for the log */
    jobs_write_then then; /* NULL: a failure other than a conflict pauses the runner */
};
/* A new write for job id (run may be NULL); NULL when out of memory (then pass NULL as the
 * callback context and jobs_write_done as nothing: see jobs_write_cb). */
jobs_write_t *jobs_write_new(jobs_t *J, const char *id, const job_run_t *run, const char *op, jobs_write_then then);
/* The jstore_done_cb for writes made with jobs_write_new (ctx: the write, or NULL). */
void jobs_write_done(void *ctx, int rc, const char *err);
/* The run of a write, if it is still in flight. */
job_run_t *jobs_write_run(const jobs_write_t *w);
/* result_store callback (ctx: J): a stored result was removed; the journal notes it. */
void jobs_on_result_removed(const char *id, void *ctx);

/* ---- jobs_attempt.c (and jobs_pump in jobs.h) ---- */
/* The attempt is over: drop it from the table, then look for more work. */
void jobs_run_finish(job_run_t *run);

#endif
