/*
 * journal: the durable book of async jobs, one SQLite database (WAL mode, synchronous=FULL).
 * Pure storage: no libuv, no HTTP, no clock (callers pass wall-clock milliseconds).
 *
 * Durability: every function that changes something runs one transaction and returns only
 * after SQLite committed it; with journal_mode=WAL and synchronous=FULL a commit fsyncs the
 * write-ahead log, so a change for which a function returned JOURNAL_OK survives kill -9 of
 * the process and a power cut. In particular the 202 for a new job must be sent only after
 * journal_insert returned JOURNAL_OK.
 *
 * States and transitions: see jobstore/job_state.h. The journal enforces them: a transition from
 * a state that does not allow it changes nothing and returns JOURNAL_CONFLICT. The request
 * body is dropped when a job becomes final (succeeded, failed, cancelled): it can never run
 * again, and its record is kept for records_ttl.
 *
 * Attempts: `attempts` counts attempts STARTED. journal_mark_running adds 1; nothing else
 * does. A job that was running when vramd died has therefore already counted the attempt
 * it lost; journal_recover puts it back to queued (its next start makes it attempts + 1),
 * or fails it when attempts >= max_attempts ("vramd stopped while it ran, 3 attempts used").
 * journal_requeue can give an attempt back (refund) when it never reached a worker.
 *
 * Order: every job gets a sequence number when it is inserted (job_record_t.seq: unique, and
 * larger than the number of every job in the journal at that moment). "Age" is that number,
 * never created_ms: a burst of submits shares one millisecond, and a wall clock can step
 * back. Listing is newest first (seq desc) and running is priority desc, then seq asc (FIFO
 * within a priority).
 *
 * Threads: a journal_t is used by one thread at a time (it keeps prepared statements and a
 * last-error buffer). Calls are blocking (a commit costs an fsync, typically 1-10 ms); the
 * caller decides whether that happens on the loop thread or a worker thread.
 *
 * Return convention (all int-returning functions): enum journal_rc; JOURNAL_OK == 0 and every
 * failure is negative. On any failure journal_errmsg() tells why (SQLite's message, or the
 * journal's own: "job not found", "job is succeeded, not queued"...). JOURNAL_FULL means the
 * disk (or quota) is full: the change was not made; answer 507 disk_full.
 *
 * Strings given to the journal are copied (bound with SQLITE_TRANSIENT); strings and bytes in
 * a job_record_t filled by the journal are heap copies owned by the record: free them with
 * job_record_clear. Records passed to a callback are borrowed and valid only during the call.
 * No SQL is ever built from data: every value is bound to a cached prepared statement.
 */
#ifndef VRAMD_JOBSTORE_JOURNAL_H
#define VRAMD_JOBSTORE_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobstore/job_id.h"
#include "jobstore/job_state.h"

#define JOURNAL_SCHEMA_VERSION 3
#define JOURNAL_ERR_MAX 512
#define JOURNAL_LIST_MAX 10000 /* upper bound for a list/next-queued limit; larger is clamped */

enum journal_rc {
    JOURNAL_OK = 0,
    JOURNAL_ERROR = -1,     /* SQLite or I/O error (see journal_errmsg) */
    JOURNAL_FULL = -2,      /* SQLITE_FULL, or a write failed with ENOSPC/EDQUOT: disk full */
    JOURNAL_NOT_FOUND = -3, /* no job with that id */
    JOURNAL_CONFLICT = -4,  /* the job exists but its state does not allow the change, or
                               (insert) the id is already taken */
    JOURNAL_INVALID = -5,   /* bad argument (id not valid, NULL model, priority out of 0..9...) */
    JOURNAL_UNAVAILABLE = -6 /* (job stores, jobstore/jstore.h) the store cannot be reached now, e.g.
                                PostgreSQL is down: the operation was not sent, nothing changed */
};

typedef struct journal journal_t;

/* One job. Fields marked (in) are read by journal_insert; the journal sets the others. */
typedef struct job_record {
    char id[JOB_ID_SIZE];        /* (in) 32 lowercase hex, from job_id_generate */
    char *model;                 /* (in) configured model name (not an alias) */
    char *method;                /* (in) "POST"... */
    char *path;                  /* (in) upstream path, e.g. "/generate" */
    char *headers_json;          /* (in) JSON object text of the headers to send; NULL = "{}" */
    char *client_json;           /* (in) who submitted it, for limits.per_client (jobstore/job_submitter.h):
                                    NULL = unknown; read back only with the body */
    unsigned char *body;         /* (in) request body bytes (already decoded from body_base64) */
    size_t body_len;             /* (in) */
    char *request_id;            /* (in) X-Request-Id used for every attempt; NULL = none */
    int priority;                /* (in) 0..9 */
    int64_t deadline_wall_ms;    /* (in) absolute unix ms; 0 = none */
    int max_attempts;            /* (in) 1..100 (jobs.max_attempts) */
    int64_t created_ms;          /* (in) unix ms when accepted (shown; not used for order) */
    int64_t seq;                 /* journal sequence number (order of insertion, > 0) */
    enum job_state state;        /* insert always stores JOB_QUEUED */
    int attempts;                /* attempts started so far */
    int64_t started_ms;          /* last mark_running; 0 = never / requeued */
    int64_t finished_ms;         /* when it reached a final state; 0 = not final */
    int degrade_level;           /* ladder level of the answer; 0 = none */
    int gpu;                     /* GPU index of the last attempt; -1 = none */
    int http_status;             /* worker's (or vramd's) HTTP status of the answer; 0 = none */
    char *error_code;            /* e.g. "worker_failed", "disk_full"; NULL = no error */
    char *error_message;         /* human text; NULL = none. A requeued job keeps its last note */
    char *result_type;           /* Content-Type of the stored result; NULL = none */
    uint64_t result_bytes;       /* size of the stored result */
    enum job_result_state result_state;
    uint64_t est_bytes;          /* (in) GPU memory a request of its model was estimated to need
                                    at submit (claims by fit; the SQLite journal ignores it) */
    char token[40];              /* lease token of a claim (jobstore/jstore.h); "" = none */
    int64_t queue_ahead;         /* a queued job read by get (journal_get without its body,
                                    jstore_get): the queued jobs of its model before it in run
                                    order; -1 = not read (any other read, another state) */
} job_record_t;

/* What ended an attempt: the argument of journal_mark_finished. */
typedef struct job_outcome {
    enum job_state state;        /* JOB_SUCCEEDED or JOB_FAILED (cancel: journal_cancel) */
    int http_status;             /* 0 = none */
    const char *error_code;      /* NULL on success */
    const char *error_message;   /* NULL on success */
    const char *result_type;     /* Content-Type, NULL = none */
    uint64_t result_bytes;
    bool result_stored;          /* a result file was committed to the result store */
    int degrade_level;
    int gpu;                     /* -1 = keep what mark_running recorded */
} job_outcome_t;

typedef struct journal_filter {
    int state;                   /* an enum job_state, or -1 = any */
    const char *model;           /* NULL = any */
} journal_filter_t;

/* Paging position for journal_list (newest first: seq desc): the seq of the last job given.
 * Text form (for an HTTP "cursor" parameter): that number in decimal, without sign or
 * leading zeros, 1..INT64_MAX. */
typedef struct journal_cursor {
    bool valid;                  /* false = start at the newest */
    int64_t seq;                 /* list the jobs with a smaller seq */
} journal_cursor_t;
#define JOURNAL_CURSOR_TEXT_MAX 64

/* Open (creating when missing) the database at path, set WAL + synchronous=FULL +
 * busy_timeout, create or check the schema (PRAGMA user_version; a newer version than
 * JOURNAL_SCHEMA_VERSION is refused with a clear error). The parent directory must exist.
 * Returns NULL with the reason in err on failure. */
journal_t *journal_open(const char *path, char *err, size_t errlen);
/* Finalize statements, checkpoint, close. NULL is a no-op. */
void journal_close(journal_t *j);
/* Why the last failing call failed ("" when none). Valid until the next call. */
const char *journal_errmsg(const journal_t *j);

/* A failed write, settled. When a commit fails on an I/O error (a sync that returned EIO)
 * or a full disk, SQLite has already written the transaction's frames to the WAL, commit
 * frame included; they are not visible to this process, but if vramd stopped now, the WAL
 * recovery of the next start would find them and the refused change would come back (a
 * submit answered with an error would run). The next successful commit overwrites them
 * (SQLite writes it at the same place in the WAL), so after such a failure the journal is
 * "in doubt" until one: journal_settle makes that commit at once (a synced rewrite of the
 * schema version, one page), and the caller retries it while the disk fails (jobs: every
 * tick). journal_insert settles by itself before it returns a failure.
 * journal_settle: JOURNAL_OK when nothing is in doubt (any more), else the write's error. */
int journal_settle(journal_t *j);
bool journal_in_doubt(const journal_t *j);

/* Store a new queued job (attempts 0, result none). rec->id must be valid and unused.
 * JOURNAL_OK = durable: now answer 202. JOURNAL_FULL = disk full (answer 507 disk_full),
 * JOURNAL_CONFLICT = id taken, JOURNAL_INVALID = bad field. */
int journal_insert(journal_t *j, const job_record_t *rec);

/* Load one job into *out (cleared first; job_record_clear it afterwards). The body is
 * loaded only when with_body (a GET of the job does not need megabytes of body).
 * JOURNAL_NOT_FOUND when no such id (also for an id that is not valid). */
int journal_get(journal_t *j, const char *id, bool with_body, job_record_t *out);
/* Cheap existence check: state and result state only (either pointer may be NULL). */
int journal_peek(journal_t *j, const char *id, enum job_state *state, enum job_result_state *rs);

/* queued -> running: attempts + 1, started_ms = now_ms, gpu (-1 when not known yet; set it
 * later with journal_set_gpu). JOURNAL_CONFLICT when the job is not queued (e.g. cancelled
 * meanwhile: do not run it). */
int journal_mark_running(journal_t *j, const char *id, int64_t now_ms, int gpu);
/* Record the GPU an attempt was placed on (running jobs only; JOURNAL_CONFLICT otherwise). */
int journal_set_gpu(journal_t *j, const char *id, int gpu);

/* running (or queued: e.g. deadline passed while queued, model removed) -> succeeded|failed,
 * finished_ms = now_ms, with the answer's facts. JOURNAL_CONFLICT when the job is already
 * final (typically cancelled while it ran): nothing changes, and the caller must remove the
 * result file it stored for it. JOURNAL_INVALID when o->state is not succeeded/failed. */
int journal_mark_finished(journal_t *j, const char *id, const job_outcome_t *o, int64_t now_ms);

/* queued|running -> cancelled (finished_ms = now_ms). *was (may be NULL) receives the state
 * the job was in, also on JOURNAL_CONFLICT (already final: nothing changed). A job that was
 * running must have its upstream request closed by the caller. */
int journal_cancel(journal_t *j, const char *id, int64_t now_ms, enum job_state *was);

/* running -> queued (started_ms 0, gpu -1). refund_attempt: attempts - 1, for an attempt that
 * never reached a worker (vramd draining, queue full). note_code/note_message (may be NULL)
 * are kept as the job's error note so GET shows why it went back. Does NOT check
 * max_attempts: a runner whose job used its last attempt calls journal_mark_finished(failed). */
int journal_requeue(journal_t *j, const char *id, bool refund_attempt, const char *note_code,
                    const char *note_message);

/* At start, before anything runs: every running job goes back to queued with the note
 * "interrupted: vramd stopped while it ran (attempt N of M)", or, when attempts >= max_attempts,
 * becomes failed (finished_ms = now_ms, error "attempts_exhausted": "vramd stopped while it
 * ran, M attempts used"). One transaction. Counts go to *requeued / *failed (may be NULL). */
int journal_recover(journal_t *j, int64_t now_ms, size_t *requeued, size_t *failed);

/* Callback for listing: rec is borrowed (no body) and valid only during the call.
 * Return 0 to go on, non-zero to stop early. */
typedef int (*journal_record_cb)(const job_record_t *rec, void *ctx);

/* Jobs matching filter, newest first, starting after *cursor (NULL or !valid = newest),
 * at most limit (clamped to 1..JOURNAL_LIST_MAX). *next (may be NULL) receives the cursor
 * after the last job given (next->valid false when no more jobs follow). *n (may be NULL)
 * receives the number of records given to cb. */
int journal_list(journal_t *j, const journal_filter_t *filter, const journal_cursor_t *cursor,
                 size_t limit, journal_record_cb cb, void *ctx, journal_cursor_t *next, size_t *n);
/* "<seq>" into out (JOURNAL_CURSOR_TEXT_MAX; "" for an invalid cursor). Parse: 0 ok, -1 when
 * text is not exactly what format writes for a valid cursor (so parse and format round-trip). */
void journal_cursor_format(const journal_cursor_t *c, char *out, size_t outlen);
int journal_cursor_parse(const char *text, journal_cursor_t *out);

/* Up to limit queued jobs of model (NULL = all models) in run order: priority desc, then
 * seq asc (first come, first served). Their ids go to ids[0..*n). Used by the runner, which skips the
 * ones it already has in flight (ask for in_flight + wanted). */
int journal_next_queued(journal_t *j, const char *model, size_t limit, char (*ids)[JOB_ID_SIZE],
                        size_t *n);

/* Up to limit queued jobs whose deadline (start deadline, wall ms) is at or before now_ms,
 * earliest first, then by seq (a partial index keeps this cheap). */
int journal_overdue(journal_t *j, int64_t now_ms, size_t limit, char (*ids)[JOB_ID_SIZE], size_t *n);

/* Number of jobs in each state (one GROUP BY over the state index). */
int journal_counts(journal_t *j, uint64_t counts[JOB_STATE_COUNT]);
/* For each model that has jobs in `state`: cb(model, count, ctx) (e.g. to find queued jobs of
 * a model no longer configured). cb returns non-zero to stop. */
typedef int (*journal_model_count_cb)(const char *model, uint64_t count, void *ctx);
int journal_count_by_model(journal_t *j, enum job_state state, journal_model_count_cb cb, void *ctx);

/* The result file of a job was removed (TTL, size cap, purge): stored -> removed.
 * JOURNAL_OK also when it was not stored (nothing to do); JOURNAL_NOT_FOUND when no job. */
int journal_mark_result_removed(journal_t *j, const char *id);

/* Delete final jobs whose finished_ms < older_than_ms, at most max_batch (clamped to
 * 1..JOURNAL_LIST_MAX) per call, the earliest finished first. For each one, cb(id, ctx) is
 * called first (may be NULL), so the caller can remove its result file. *purged (may be NULL) receives
 * the count; call again while it equals max_batch. */
typedef void (*journal_id_cb)(const char *id, void *ctx);
int journal_purge(journal_t *j, int64_t older_than_ms, size_t max_batch, journal_id_cb cb, void *ctx,
                  size_t *purged);

/* Free the heap parts of a record and zero it (id "", gpu -1). NULL is a no-op. */
void job_record_clear(job_record_t *r);
/* A zeroed record with gpu = -1 (use before filling one for journal_insert). */
void job_record_init(job_record_t *r);

#endif
