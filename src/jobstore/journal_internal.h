/*
 * journal_internal: what the journal's rooms share (journal.c: open, schema, migration, the
 * statements and their helpers, reading a record; journal_jobs.c: one job's insert, reads and
 * guarded state changes, purge; journal_list.c: listing with its cursor, run order, overdue,
 * counts). Not for use outside src/jobstore/journal*.c (and the journal's unit tests).
 *
 * Invariants (every room keeps them):
 *   - a statement is taken with jnl_stmt() (reset, bindings cleared) and given back with
 *     jnl_done() or jnl_exec() before the function returns: no read transaction stays open;
 *   - a failing function returns a negative journal_rc and has set j->err (jnl_error,
 *     jnl_fail_sqlite); a transaction begun with jnl_tx_begin ends in jnl_tx_commit or
 *     jnl_tx_rollback in the same function;
 *   - every value reaches SQL as a binding of a statement of jnl_stmt_sql, never as text.
 */
#ifndef VRAMD_JOBSTORE_JOURNAL_INTERNAL_H
#define VRAMD_JOBSTORE_JOURNAL_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>

#include "jobstore/journal.h"

/* The prepared statements, by the index of their SQL in jnl_stmt_sql (journal.c). */
enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_INSERT,
    ST_GET,
    ST_GET_BODY,
    ST_PEEK,
    ST_MARK_RUNNING,
    ST_SET_GPU,
    ST_MARK_FINISHED,
    ST_CANCEL,
    ST_REQUEUE,
    ST_RECOVER_FAIL,
    ST_RECOVER_QUEUE,
    ST_LIST_ALL,
    ST_LIST_STATE,
    ST_LIST_MODEL,
    ST_LIST_STATE_MODEL,
    ST_NEXT_ALL,
    ST_NEXT_MODEL,
    ST_OVERDUE,
    ST_COUNTS,
    ST_COUNT_BY_MODEL,
    ST_QUEUED_AHEAD,
    ST_RESULT_REMOVED,
    ST_PURGE_SELECT,
    ST_PURGE_DELETE,
    ST_COUNT
};

struct journal {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    char err[JOURNAL_ERR_MAX];
    bool in_doubt; /* a write failed with an I/O error or a full disk and no write has
                      succeeded since: its frames may still be in the WAL (journal_settle) */
};

extern const char *const jnl_stmt_sql[ST_COUNT];

/* Record why the call fails (printf-style) in j->err; returns rc. */
int jnl_error(journal_t *j, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Map the connection's last SQLite error to a journal_rc and record its message. */
int jnl_fail_sqlite(journal_t *j, const char *what);

/* The prepared statement `id`, reset and with its bindings cleared. */
sqlite3_stmt *jnl_stmt(journal_t *j, enum stmt_id id);
/* Reset a statement taken with jnl_stmt and clear its bindings. */
void jnl_done(sqlite3_stmt *s);
/* Bind text (copied) or NULL. */
int jnl_bind_text_or_null(sqlite3_stmt *s, int idx, const char *text);
/* Step a statement that returns no rows; reset it. 0 or a journal_rc. */
int jnl_exec(journal_t *j, sqlite3_stmt *s, const char *what);

/* BEGIN IMMEDIATE / COMMIT (rolled back when it fails) / ROLLBACK when a transaction is open. */
int jnl_tx_begin(journal_t *j);
int jnl_tx_commit(journal_t *j);
void jnl_tx_rollback(journal_t *j);

/* Fill *r from the record columns of the current row of s (a list or get statement), the body
 * when the statement selects it. 0 or JOURNAL_ERROR (out of memory; *r cleared). */
int jnl_read_record(journal_t *j, sqlite3_stmt *s, job_record_t *r);

/* A list or batch limit clamped to 1..JOURNAL_LIST_MAX. */
static inline size_t jnl_clamp_limit(size_t limit)
{
    if (limit < 1)
        return 1;
    return limit > JOURNAL_LIST_MAX ? JOURNAL_LIST_MAX : limit;
}

#endif
