/*
 * jstore: where the job runner and the job routes keep jobs. One interface, two
 * implementations chosen by jobs.backend:
 *   sqlite    (jstore_sqlite.c) the local journal (jobstore/journal.h) in state_dir/jobs.db;
 *             results are files in the local result store (jobstore/result_store.h). One host.
 *   postgres  (jstore_pg*.c) a PostgreSQL database shared by every host of a fleet, spoken
 *             to with libpq's asynchronous API on the event loop; results are kept in the
 *             database (bytea, at most jobs.postgres.max_result_bytes each), so any host
 *             can serve them. Jobs are claimed with a lease (jobs.postgres.lease) that the
 *             host renews while the job runs; every change a host makes to a claimed job
 *             is conditioned on the claim's token, so a host whose lease was taken over
 *             cannot finish or overwrite the job any more (fencing).
 *
 * Calling convention (every operation that takes a callback):
 *   - the call returns nothing; `cb` is called EXACTLY ONCE with the outcome: an enum
 *     journal_rc (JOURNAL_OK == 0, failures negative) and, on failure, a message (never
 *     NULL; "" on success) that is valid only during the call;
 *   - the SQLite store calls cb before the operation returns (its journal is synchronous);
 *     the PostgreSQL store calls it later, from the event loop, when the server answered
 *     (or at once with JOURNAL_UNAVAILABLE while it is not connected: nothing was sent;
 *     JOURNAL_ERROR when the connection broke with the query on the wire: its outcome is
 *     unknown). A caller must be correct in both cases: it must not rely on cb having run
 *     when the call returns, and must keep nothing on its stack that cb needs;
 *   - pointers given to cb (records, ids, data) are borrowed and valid only during the call;
 *   - arguments given to an operation (ids, records, strings) are copied by it: the caller
 *     may free them as soon as the call returns. The one exception is the result data of
 *     jstore_finish, whose ownership passes to the store (it frees it);
 *   - cb may be NULL for the writes that take a jstore_done_cb (insert, mark_running,
 *     set_gpu, finish, requeue, renew, result_removed) and for housekeeping, when the
 *     caller does not need the outcome; every other operation needs one;
 *   - jstore_stop (before the loop's handles are closed) ends every operation still
 *     waiting with JOURNAL_ERROR ("the job store is closing") and closes the store's
 *     handles; operations after it fail at once. jstore_close (after the loop) frees.
 *
 * Tokens: a claim hands each job a lease token (job_record_t.token; "" for the SQLite
 * store, which has no leases). The writes that belong to an attempt (mark_running, set_gpu,
 * finish, requeue, renew) pass it back; the PostgreSQL store applies them only while the
 * job still holds that token (JOURNAL_CONFLICT otherwise: the lease was lost, or the job was
 * cancelled). Writes not tied to an attempt (cancel, overdue, housekeeping) pass none.
 *
 * Threads: the loop thread only.
 */
#ifndef VRAMD_JOBSTORE_JSTORE_H
#define VRAMD_JOBSTORE_JSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobstore/journal.h"

typedef struct jstore jstore_t;

typedef void (*jstore_done_cb)(void *ctx, int rc, const char *err);
/* One record (NULL unless rc == JOURNAL_OK). */
typedef void (*jstore_rec_cb)(void *ctx, int rc, const char *err, const job_record_t *rec);
/* n records (list, claim); next: the list cursor after the last one (invalid = no more). */
typedef void (*jstore_recs_cb)(void *ctx, int rc, const char *err, const job_record_t *recs, size_t n,
                               const journal_cursor_t *next);
typedef void (*jstore_cancel_cb)(void *ctx, int rc, const char *err, enum job_state was);
/* A job's record and its stored result (data NULL and len 0 when none is stored). */
typedef void (*jstore_result_cb)(void *ctx, int rc, const char *err, const job_record_t *rec, const void *data,
                                 size_t len);
/* How many jobs an operation changed (overdue, housekeeping). */
typedef void (*jstore_count_cb)(void *ctx, int rc, const char *err, size_t n);
/* Is this job's attempt already in flight on this host? (claim and overdue skip it) */
typedef bool (*jstore_busy_fn)(const char *id, void *ctx);

/* What this host may take now, for one model (jstore_claim). */
typedef struct jstore_want {
    const char *model;   /* configured model name */
    size_t n;            /* at most this many jobs of it (its window's room) */
    size_t in_flight;    /* its attempts in flight here (the SQLite store reads past them) */
    uint64_t room_bytes; /* jobs whose estimate (job_record_t.est_bytes) is above this do not
                            fit this host now (UINT64_MAX: no GPU memory involved) */
    uint64_t capacity_bytes; /* the most this host could ever give one job (its largest GPU,
                                less headroom): a job above it never holds this host back */
} jstore_want_t;

/* A store's own events, set at open. */
typedef struct jstore_events {
    /* There may be queued jobs to claim (a NOTIFY from another host, the connection came
     * back). The runner pumps. */
    void (*wake)(void *ctx);
    void *ctx;
} jstore_events_t;

/* The operations; use the jstore_* wrappers below. */
typedef struct jstore_ops {
    const char *name; /* "sqlite" or "postgres" */
    void (*insert)(jstore_t *s, const job_record_t *rec, jstore_done_cb cb, void *ctx);
    void (*get)(jstore_t *s, const char *id, jstore_rec_cb cb, void *ctx);
    void (*get_result)(jstore_t *s, const char *id, jstore_result_cb cb, void *ctx);
    void (*list)(jstore_t *s, const journal_filter_t *f, const journal_cursor_t *cursor, size_t limit,
                 jstore_recs_cb cb, void *ctx);
    void (*cancel)(jstore_t *s, const char *id, int64_t now_ms, jstore_cancel_cb cb, void *ctx);
    void (*claim)(jstore_t *s, const jstore_want_t *w, size_t n_w, size_t limit, jstore_busy_fn busy,
                  void *busy_ctx, jstore_recs_cb cb, void *ctx);
    void (*mark_running)(jstore_t *s, const char *id, const char *token, int64_t now_ms, int gpu,
                         jstore_done_cb cb, void *ctx);
    void (*set_gpu)(jstore_t *s, const char *id, const char *token, int gpu, jstore_done_cb cb, void *ctx);
    void (*finish)(jstore_t *s, const char *id, const char *token, const job_outcome_t *o, int64_t now_ms,
                   void *data, size_t len, jstore_done_cb cb, void *ctx);
    void (*requeue)(jstore_t *s, const char *id, const char *token, bool refund, const char *code,
                    const char *message, jstore_done_cb cb, void *ctx);
    void (*renew)(jstore_t *s, const char *id, const char *token, jstore_done_cb cb, void *ctx);
    void (*fail_overdue)(jstore_t *s, int64_t now_ms, size_t limit, jstore_busy_fn busy, void *busy_ctx,
                         jstore_count_cb cb, void *ctx);
    void (*result_removed)(jstore_t *s, const char *id, jstore_done_cb cb, void *ctx);
    void (*housekeep)(jstore_t *s, int64_t now_ms, uint64_t results_ttl_ms, uint64_t records_ttl_ms,
                      journal_id_cb purged, void *purged_ctx, jstore_count_cb cb, void *ctx);
    int (*counts)(jstore_t *s, uint64_t counts[JOB_STATE_COUNT]);
    void (*stop)(jstore_t *s);
    void (*close)(jstore_t *s);
} jstore_ops_t;

struct jstore {
    const jstore_ops_t *ops;
    bool inline_results; /* results live in the store (get_result), not in the local files */
    uint64_t lease_ms;   /* claims expire after this unless renewed; 0 = no leases */
    uint64_t max_result; /* inline results: the largest the store keeps (bytes) */
};

/* Store a new queued job (est_bytes read too). JOURNAL_OK: durable (committed); answer 202.
 * JOURNAL_FULL: no room (507). JOURNAL_ERROR: the store is unreachable or failed (503). */
static inline void jstore_insert(jstore_t *s, const job_record_t *rec, jstore_done_cb cb, void *ctx)
{
    s->ops->insert(s, rec, cb, ctx);
}
/* One job without its body. JOURNAL_NOT_FOUND when there is none. */
static inline void jstore_get(jstore_t *s, const char *id, jstore_rec_cb cb, void *ctx)
{
    s->ops->get(s, id, cb, ctx);
}
/* One job and its result bytes (inline_results stores only; the SQLite store answers its
 * record with no data: the result is a local file). */
static inline void jstore_get_result(jstore_t *s, const char *id, jstore_result_cb cb, void *ctx)
{
    s->ops->get_result(s, id, cb, ctx);
}
/* Newest first, as journal_list (limit clamped to 1..JOURNAL_LIST_MAX). */
static inline void jstore_list(jstore_t *s, const journal_filter_t *f, const journal_cursor_t *cursor, size_t limit,
                               jstore_recs_cb cb, void *ctx)
{
    s->ops->list(s, f, cursor, limit, cb, ctx);
}
/* queued|running -> cancelled; `was` as journal_cancel (also on JOURNAL_CONFLICT). */
static inline void jstore_cancel(jstore_t *s, const char *id, int64_t now_ms, jstore_cancel_cb cb, void *ctx)
{
    s->ops->cancel(s, id, now_ms, cb, ctx);
}
/* Take up to `limit` queued jobs (at most w[i].n of model w[i].model, each fitting
 * w[i].room_bytes) in run order (priority, aged, then age), with their bodies and tokens.
 * `busy` skips jobs whose attempt is already in flight here. The PostgreSQL store leases
 * them to this host (no other host gets them until the lease expires); the SQLite store only
 * reads them. Records given to cb are borrowed. */
static inline void jstore_claim(jstore_t *s, const jstore_want_t *w, size_t n_w, size_t limit, jstore_busy_fn busy,
                                void *busy_ctx, jstore_recs_cb cb, void *ctx)
{
    s->ops->claim(s, w, n_w, limit, busy, busy_ctx, cb, ctx);
}
/* queued -> running (attempts + 1), as journal_mark_running; fenced by token. */
static inline void jstore_mark_running(jstore_t *s, const char *id, const char *token, int64_t now_ms, int gpu,
                                       jstore_done_cb cb, void *ctx)
{
    s->ops->mark_running(s, id, token, now_ms, gpu, cb, ctx);
}
static inline void jstore_set_gpu(jstore_t *s, const char *id, const char *token, int gpu, jstore_done_cb cb,
                                  void *ctx)
{
    s->ops->set_gpu(s, id, token, gpu, cb, ctx);
}
/* -> succeeded|failed, as journal_mark_finished; fenced by token ("" = not claimed: the
 * overdue path of the SQLite store). data/len: the result bytes for an inline_results
 * store (malloc'd; the store owns and frees them whatever happens; NULL for the SQLite
 * store, whose result is the committed local file). JOURNAL_CONFLICT: the job is final
 * already or the lease was lost: nothing changed. */
static inline void jstore_finish(jstore_t *s, const char *id, const char *token, const job_outcome_t *o,
                                 int64_t now_ms, void *data, size_t len, jstore_done_cb cb, void *ctx)
{
    s->ops->finish(s, id, token, o, now_ms, data, len, cb, ctx);
}
/* running|queued(claimed) -> queued, released to every host, as journal_requeue. */
static inline void jstore_requeue(jstore_t *s, const char *id, const char *token, bool refund, const char *code,
                                  const char *message, jstore_done_cb cb, void *ctx)
{
    s->ops->requeue(s, id, token, refund, code, message, cb, ctx);
}
/* Extend the lease of a claimed job (JOURNAL_CONFLICT: lost, or the job was cancelled or
 * finished elsewhere: stop the attempt). The SQLite store answers JOURNAL_OK. */
static inline void jstore_renew(jstore_t *s, const char *id, const char *token, jstore_done_cb cb, void *ctx)
{
    s->ops->renew(s, id, token, cb, ctx);
}
/* Fail (deadline_exceeded) up to limit queued, unclaimed jobs whose start deadline passed. */
static inline void jstore_fail_overdue(jstore_t *s, int64_t now_ms, size_t limit, jstore_busy_fn busy,
                                       void *busy_ctx, jstore_count_cb cb, void *ctx)
{
    s->ops->fail_overdue(s, now_ms, limit, busy, busy_ctx, cb, ctx);
}
/* A result was removed from the local result store: stored -> removed. */
static inline void jstore_result_removed(jstore_t *s, const char *id, jstore_done_cb cb, void *ctx)
{
    s->ops->result_removed(s, id, cb, ctx);
}
/* Results older than results_ttl (inline stores) and final records older than records_ttl
 * go; `purged` (may be NULL) is called with each purged id before cb. */
static inline void jstore_housekeep(jstore_t *s, int64_t now_ms, uint64_t results_ttl_ms, uint64_t records_ttl_ms,
                                    journal_id_cb purged, void *purged_ctx, jstore_count_cb cb, void *ctx)
{
    s->ops->housekeep(s, now_ms, results_ttl_ms, records_ttl_ms, purged, purged_ctx, cb, ctx);
}
/* Jobs per state, synchronously: exact for SQLite, as of the last refresh (about a second)
 * for PostgreSQL (the whole fleet's). 0, or -1 when not known (PostgreSQL not connected). */
static inline int jstore_counts(jstore_t *s, uint64_t counts[JOB_STATE_COUNT])
{
    return s->ops->counts(s, counts);
}
/* Before the loop's handles are closed: end what waits (JOURNAL_ERROR), close the
 * connection and the store's handles. NULL is a no-op. */
static inline void jstore_stop(jstore_t *s)
{
    if (s)
        s->ops->stop(s);
}
/* After the loop: free (stops first if jstore_stop was not called). NULL is a no-op. */
static inline void jstore_close(jstore_t *s)
{
    if (s)
        s->ops->close(s);
}

/* ---- the two implementations ---- */

/* SQLite: take over an open journal (closed by jstore_close). Never fails but for memory. */
jstore_t *jstore_sqlite_new(journal_t *j);
/* SQLite only: the journal, for the start-up sweep of result files (NULL for another store). */
journal_t *jstore_sqlite_journal(jstore_t *s);

typedef struct jstore_pg_config {
    const char *url;           /* libpq connection string or URI (may hold a password: never logged) */
    const char *host_id;       /* this host's name in claims (owner column) */
    uint64_t lease_ms;         /* claims last this long unless renewed */
    uint64_t aging_ms;         /* a queued job's priority rises by one per aging_ms waited (max 9) */
    uint64_t max_result_bytes; /* results kept in the database up to this size */
    uint64_t timeout_ms;       /* silence while an answer is awaited (or while connecting) before
                                  the connection is closed and made again (0: 10 s) */
} jstore_pg_config_t;

struct uv_loop_s;
/* PostgreSQL: start connecting (asynchronously; the schema is created or migrated once
 * connected, then ev->wake is called). Returns NULL only for a bad argument or memory, with
 * err; a server that cannot be reached is retried with backoff, and until then operations
 * fail with JOURNAL_ERROR. */
jstore_t *jstore_pg_open(struct uv_loop_s *loop, const jstore_pg_config_t *cfg, const jstore_events_t *ev,
                         char *err, size_t errlen);

#endif
