/*
 * journal: durable job records in SQLite (WAL, synchronous=FULL). See journal.h for the
 * contract (durability, order, state rules, attempts, return convention).
 *
 * This room opens and closes the journal, creates or migrates its schema, holds the SQL of
 * every statement (prepared once at open) and the helpers the other rooms share through
 * journal_internal.h: errors, statements, transactions, reading a record. One job's changes
 * are in journal_jobs.c; listing, run order and counts in journal_list.c.
 *
 * Schema (user_version 3): one table `jobs`, one row per job, the request body as the LAST
 * column so that reading the other columns never walks a large body's overflow pages
 * (`client`, the submitter for limits.per_client, comes after the body in a journal migrated
 * from version 2: it is read only together with the body, by the job runner). States
 * are stored by name (readable with the sqlite3 shell) under a CHECK constraint. The job's
 * sequence number is `rowid_`, an INTEGER PRIMARY KEY: SQLite gives a new row max(rowid) + 1,
 * so among the rows present it is the order of insertion (created_ms is not: one millisecond
 * holds a burst of submits). Indexes:
 *   jobs_queue (state, model, priority DESC, rowid_)   next queued of a model, per-model counts
 *   jobs_run   (state, priority DESC, rowid_)          next queued of all models
 *   jobs_state (state, rowid_), jobs_model (model, rowid_)
 *                                                      listing newest first, filtered; counts
 *   jobs_finished (finished_ms) WHERE finished_ms > 0  purge
 *   jobs_overdue (deadline_ms) WHERE queued with one   journal_overdue
 * Version 1 had the same table with created_ms in place of rowid_ in its indexes; version 2
 * had no `client` column. Opening either migrates it in place, in one transaction: the
 * indexes replaced (both), `ALTER TABLE jobs ADD COLUMN client TEXT` (its jobs keep NULL:
 * submitter unknown), version 3.
 *
 * Invariants:
 *   - every statement is prepared once at open and reset (bindings cleared) after each use,
 *     so no read transaction stays open between calls (checkpoints are never blocked);
 *   - a change is one SQL statement (autocommit) or one BEGIN IMMEDIATE..COMMIT transaction;
 *     on failure the transaction is rolled back before returning;
 *   - state transitions are guarded in SQL (`WHERE state IN (...)`), so a refused transition
 *     changes nothing;
 *   - the body of a job is dropped when the job becomes final (it is not needed any more and
 *     records are kept for records_ttl).
 */
#include "jobstore/journal_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 5000

/* Columns of a record without the body, in the order jnl_read_record expects. */
#define RECORD_COLUMNS                                                                             \
    "id, model, method, path, headers, request_id, priority, deadline_ms, state, attempts, "     \
    "max_attempts, created_ms, started_ms, finished_ms, degrade_level, gpu, http_status, "        \
    "error_code, error_message, result_type, result_bytes, result_state, rowid_"
#define RECORD_NCOLUMNS 23

#define FINAL_STATES "('succeeded','failed','cancelled')"
#define LIVE_STATES "('queued','running')"

static const char *const schema_sql =
    "CREATE TABLE jobs ("
    " rowid_ INTEGER PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE,"
    " model TEXT NOT NULL,"
    " method TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " headers TEXT NOT NULL DEFAULT '{}',"
    " request_id TEXT,"
    " priority INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 9),"
    " deadline_ms INTEGER NOT NULL DEFAULT 0,"
    " state TEXT NOT NULL CHECK (state IN ('queued','running','succeeded','failed','cancelled')),"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " max_attempts INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " finished_ms INTEGER NOT NULL DEFAULT 0,"
    " degrade_level INTEGER NOT NULL DEFAULT 0,"
    " gpu INTEGER NOT NULL DEFAULT -1,"
    " http_status INTEGER NOT NULL DEFAULT 0,"
    " error_code TEXT,"
    " error_message TEXT,"
    " result_type TEXT,"
    " result_bytes INTEGER NOT NULL DEFAULT 0,"
    " result_state TEXT NOT NULL DEFAULT 'none' CHECK (result_state IN ('none','stored','removed')),"
    " client TEXT,"
    " body BLOB"
    ");"
    "CREATE INDEX jobs_finished ON jobs (finished_ms) WHERE finished_ms > 0;";

/* The indexes that order jobs (version 2), after dropping those of version 1 and of version 2
 * itself: run on a new journal and to migrate a version 1 one (and harmless on a version 2). */
static const char *const order_indexes_sql =
    "DROP INDEX IF EXISTS jobs_queue;"
    "DROP INDEX IF EXISTS jobs_run;"
    "DROP INDEX IF EXISTS jobs_created;"
    "DROP INDEX IF EXISTS jobs_state_created;"
    "DROP INDEX IF EXISTS jobs_model_created;"
    "DROP INDEX IF EXISTS jobs_state;"
    "DROP INDEX IF EXISTS jobs_model;"
    "CREATE INDEX jobs_queue ON jobs (state, model, priority DESC, rowid_);"
    "CREATE INDEX jobs_run ON jobs (state, priority DESC, rowid_);"
    "CREATE INDEX jobs_state ON jobs (state, rowid_);"
    "CREATE INDEX jobs_model ON jobs (model, rowid_);";

/* ?1 = the cursor's seq (INT64_MAX = from the newest), ?2 = limit, ?3 = state, ?4 = model */
#define LIST_CURSOR_WHERE " rowid_ < ?1 "
#define LIST_TAIL " ORDER BY rowid_ DESC LIMIT ?2"

const char *const jnl_stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = "INSERT INTO jobs (id, model, method, path, headers, request_id, priority,"
                  " deadline_ms, state, attempts, max_attempts, created_ms, body, client)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'queued', 0, ?9, ?10, ?11, ?12)",
    [ST_GET] = "SELECT " RECORD_COLUMNS " FROM jobs WHERE id = ?1",
    [ST_GET_BODY] = "SELECT " RECORD_COLUMNS ", body, client FROM jobs WHERE id = ?1",
    [ST_PEEK] = "SELECT state, result_state FROM jobs WHERE id = ?1",
    [ST_MARK_RUNNING] = "UPDATE jobs SET state = 'running', attempts = attempts + 1, started_ms = ?2,"
                        " gpu = ?3 WHERE id = ?1 AND state = 'queued'",
    [ST_SET_GPU] = "UPDATE jobs SET gpu = ?2 WHERE id = ?1 AND state = 'running'",
    [ST_MARK_FINISHED] = "UPDATE jobs SET state = ?2, finished_ms = ?3, http_status = ?4,"
                         " error_code = ?5, error_message = ?6, result_type = ?7, result_bytes = ?8,"
                         " result_state = ?9, degrade_level = ?10,"
                         " gpu = CASE WHEN ?11 >= 0 THEN ?11 ELSE gpu END, body = NULL"
                         " WHERE id = ?1 AND state IN " LIVE_STATES,
    [ST_CANCEL] = "UPDATE jobs SET state = 'cancelled', finished_ms = ?2, body = NULL"
                  " WHERE id = ?1 AND state IN " LIVE_STATES,
    [ST_REQUEUE] = "UPDATE jobs SET state = 'queued', started_ms = 0, gpu = -1,"
                   " attempts = CASE WHEN ?2 AND attempts > 0 THEN attempts - 1 ELSE attempts END,"
                   " error_code = CASE WHEN ?3 IS NULL AND ?4 IS NULL THEN error_code ELSE ?3 END,"
                   " error_message = CASE WHEN ?3 IS NULL AND ?4 IS NULL THEN error_message ELSE ?4 END"
                   " WHERE id = ?1 AND state = 'running'",
    [ST_RECOVER_FAIL] = "UPDATE jobs SET state = 'failed', finished_ms = ?1, http_status = 0,"
                        " error_code = 'attempts_exhausted',"
                        " error_message = 'vramd stopped while it ran, ' || attempts ||"
                        " CASE WHEN attempts = 1 THEN ' attempt used' ELSE ' attempts used' END,"
                        " body = NULL"
                        " WHERE state = 'running' AND attempts >= max_attempts",
    [ST_RECOVER_QUEUE] = "UPDATE jobs SET state = 'queued', started_ms = 0, gpu = -1,"
                         " error_code = 'interrupted',"
                         " error_message = 'vramd stopped while it ran (attempt ' || attempts ||"
                         " ' of ' || max_attempts || ')'"
                         " WHERE state = 'running'",
    [ST_LIST_ALL] = "SELECT " RECORD_COLUMNS " FROM jobs WHERE" LIST_CURSOR_WHERE LIST_TAIL,
    [ST_LIST_STATE] = "SELECT " RECORD_COLUMNS " FROM jobs WHERE state = ?3 AND" LIST_CURSOR_WHERE LIST_TAIL,
    [ST_LIST_MODEL] = "SELECT " RECORD_COLUMNS " FROM jobs WHERE model = ?4 AND" LIST_CURSOR_WHERE LIST_TAIL,
    [ST_LIST_STATE_MODEL] = "SELECT " RECORD_COLUMNS " FROM jobs WHERE state = ?3 AND model = ?4 AND"
                            LIST_CURSOR_WHERE LIST_TAIL,
    [ST_NEXT_ALL] = "SELECT id FROM jobs WHERE state = 'queued'"
                    " ORDER BY priority DESC, rowid_ LIMIT ?1",
    [ST_NEXT_MODEL] = "SELECT id FROM jobs WHERE state = 'queued' AND model = ?2"
                      " ORDER BY priority DESC, rowid_ LIMIT ?1",
    [ST_OVERDUE] = "SELECT id FROM jobs WHERE state = 'queued' AND deadline_ms > 0 AND deadline_ms <= ?2"
                   " ORDER BY deadline_ms, rowid_ LIMIT ?1",
    [ST_COUNTS] = "SELECT state, count(*) FROM jobs GROUP BY state",
    [ST_COUNT_BY_MODEL] = "SELECT model, count(*) FROM jobs WHERE state = ?1 GROUP BY model ORDER BY model",
    [ST_QUEUED_AHEAD] = "SELECT count(*) FROM jobs WHERE state = 'queued' AND model = ?1"
                        " AND (priority > ?2 OR (priority = ?2 AND rowid_ < ?3))",
    [ST_RESULT_REMOVED] = "UPDATE jobs SET result_state = 'removed' WHERE id = ?1 AND result_state = 'stored'",
    [ST_PURGE_SELECT] = "SELECT id FROM jobs WHERE finished_ms > 0 AND finished_ms < ?1"
                        " AND state IN " FINAL_STATES " ORDER BY finished_ms, rowid_ LIMIT ?2",
    [ST_PURGE_DELETE] = "DELETE FROM jobs WHERE id = ?1 AND state IN " FINAL_STATES,
};

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                    */
/* ---------------------------------------------------------------------------------------- */

int jnl_error(journal_t *j, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* Map the connection's last SQLite error to a journal_rc and record its message. */
int jnl_fail_sqlite(journal_t *j, const char *what)
{
    int ext = sqlite3_extended_errcode(j->db);
    int sys = sqlite3_system_errno(j->db);
    int rc = JOURNAL_ERROR;

    if ((ext & 0xff) == SQLITE_FULL || (ext & 0xff) == SQLITE_IOERR)
        j->in_doubt = true; /* a write may have left frames in the WAL: journal_settle */
    if ((ext & 0xff) == SQLITE_FULL || ((ext & 0xff) == SQLITE_IOERR && (sys == ENOSPC || sys == EDQUOT)))
        rc = JOURNAL_FULL;
    else if (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY)
        rc = JOURNAL_CONFLICT;
    if (rc == JOURNAL_FULL)
        return jnl_error(j, rc, "%s: disk full: %s", what, sqlite3_errmsg(j->db));
    if (sys != 0 && (ext & 0xff) == SQLITE_IOERR)
        return jnl_error(j, rc, "%s: %s (%s)", what, sqlite3_errmsg(j->db), strerror(sys));
    return jnl_error(j, rc, "%s: %s", what, sqlite3_errmsg(j->db));
}

const char *journal_errmsg(const journal_t *j)
{
    return j == NULL ? "no journal" : j->err;
}

bool journal_in_doubt(const journal_t *j)
{
    return j != NULL && j->in_doubt;
}

int journal_settle(journal_t *j)
{
    char sql[48];
    if (!j->in_doubt)
        return JOURNAL_OK;
    if (!sqlite3_get_autocommit(j->db))
        return jnl_error(j, JOURNAL_ERROR, "settling a failed write inside a transaction");
    /* rewriting the version dirties page 1: one frame, written where the failed commit's
     * first frame is, and synced (synchronous=FULL); the frames after it no longer chain */
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", JOURNAL_SCHEMA_VERSION);
    if (sqlite3_exec(j->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return jnl_fail_sqlite(j, "settling a failed write");
    j->in_doubt = false;
    return JOURNAL_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Statement helpers                                                                         */
/* ---------------------------------------------------------------------------------------- */

sqlite3_stmt *jnl_stmt(journal_t *j, enum stmt_id id)
{
    sqlite3_stmt *s = j->st[id];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

void jnl_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

int jnl_bind_text_or_null(sqlite3_stmt *s, int idx, const char *text)
{
    if (text == NULL)
        return sqlite3_bind_null(s, idx);
    return sqlite3_bind_text(s, idx, text, -1, SQLITE_TRANSIENT);
}

/* Step a statement that returns no rows; reset it. 0 or a journal_rc. */
int jnl_exec(journal_t *j, sqlite3_stmt *s, const char *what)
{
    int rc = sqlite3_step(s);
    int out = JOURNAL_OK;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        out = jnl_fail_sqlite(j, what);
    jnl_done(s);
    return out;
}

int jnl_tx_begin(journal_t *j)
{
    return jnl_exec(j, jnl_stmt(j, ST_BEGIN), "begin transaction");
}

int jnl_tx_commit(journal_t *j)
{
    int rc = jnl_exec(j, jnl_stmt(j, ST_COMMIT), "commit");
    if (rc != JOURNAL_OK && !sqlite3_get_autocommit(j->db))
        sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

void jnl_tx_rollback(journal_t *j)
{
    if (!sqlite3_get_autocommit(j->db)) {
        sqlite3_stmt *s = jnl_stmt(j, ST_ROLLBACK);
        sqlite3_step(s);
        jnl_done(s);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Records                                                                                   */
/* ---------------------------------------------------------------------------------------- */

void job_record_init(job_record_t *r)
{
    memset(r, 0, sizeof *r);
    r->gpu = -1;
    r->queue_ahead = -1;
}

void job_record_clear(job_record_t *r)
{
    if (r == NULL)
        return;
    free(r->model);
    free(r->method);
    free(r->path);
    free(r->headers_json);
    free(r->client_json);
    free(r->body);
    free(r->request_id);
    free(r->error_code);
    free(r->error_message);
    free(r->result_type);
    job_record_init(r);
}

/* Heap copy of a text column; NULL column -> NULL. *oom set when a copy fails. */
static char *column_strdup(sqlite3_stmt *s, int col, bool *oom)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    if (t == NULL)
        return NULL;
    char *copy = strdup((const char *)t);
    if (copy == NULL)
        *oom = true;
    return copy;
}

static int clamp_int(int64_t v, int lo, int hi)
{
    if (v < lo)
        return lo;
    if (v > hi)
        return hi;
    return (int)v;
}

/* Fill *r (initialised) from the RECORD_COLUMNS of the current row; the body when the
 * statement has one more column. 0 or JOURNAL_ERROR (out of memory; *r cleared). */
int jnl_read_record(journal_t *j, sqlite3_stmt *s, job_record_t *r)
{
    bool oom = false;
    int state, rstate;

    job_record_init(r);
    const unsigned char *id = sqlite3_column_text(s, 0);
    snprintf(r->id, sizeof r->id, "%s", id != NULL ? (const char *)id : "");
    r->model = column_strdup(s, 1, &oom);
    r->method = column_strdup(s, 2, &oom);
    r->path = column_strdup(s, 3, &oom);
    r->headers_json = column_strdup(s, 4, &oom);
    r->request_id = column_strdup(s, 5, &oom);
    r->priority = clamp_int(sqlite3_column_int64(s, 6), 0, 9);
    r->deadline_wall_ms = sqlite3_column_int64(s, 7);
    state = job_state_parse((const char *)sqlite3_column_text(s, 8));
    r->state = state < 0 ? JOB_FAILED : (enum job_state)state;
    r->attempts = clamp_int(sqlite3_column_int64(s, 9), 0, INT_MAX);
    r->max_attempts = clamp_int(sqlite3_column_int64(s, 10), 0, INT_MAX);
    r->created_ms = sqlite3_column_int64(s, 11);
    r->started_ms = sqlite3_column_int64(s, 12);
    r->finished_ms = sqlite3_column_int64(s, 13);
    r->degrade_level = clamp_int(sqlite3_column_int64(s, 14), 0, INT_MAX);
    r->gpu = clamp_int(sqlite3_column_int64(s, 15), -1, INT_MAX);
    r->http_status = clamp_int(sqlite3_column_int64(s, 16), 0, 999);
    r->error_code = column_strdup(s, 17, &oom);
    r->error_message = column_strdup(s, 18, &oom);
    r->result_type = column_strdup(s, 19, &oom);
    int64_t rb = sqlite3_column_int64(s, 20);
    r->result_bytes = rb < 0 ? 0 : (uint64_t)rb;
    rstate = job_result_state_parse((const char *)sqlite3_column_text(s, 21));
    r->result_state = rstate < 0 ? JOB_RESULT_NONE : (enum job_result_state)rstate;
    r->seq = sqlite3_column_int64(s, 22);

    if (sqlite3_column_count(s) > RECORD_NCOLUMNS) {
        const void *blob = sqlite3_column_blob(s, RECORD_NCOLUMNS);
        int n = sqlite3_column_bytes(s, RECORD_NCOLUMNS);
        if (blob != NULL && n > 0) {
            r->body = malloc((size_t)n);
            if (r->body == NULL) {
                oom = true;
            } else {
                memcpy(r->body, blob, (size_t)n);
                r->body_len = (size_t)n;
            }
        }
        if (sqlite3_column_count(s) > RECORD_NCOLUMNS + 1)
            r->client_json = column_strdup(s, RECORD_NCOLUMNS + 1, &oom);
    }
    if (r->model == NULL || r->method == NULL || r->path == NULL || r->headers_json == NULL)
        oom = true; /* NOT NULL columns: only a failed copy leaves them NULL */
    if (oom) {
        job_record_clear(r);
        return jnl_error(j, JOURNAL_ERROR, "out of memory reading job");
    }
    return JOURNAL_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Open / close / schema                                                                     */
/* ---------------------------------------------------------------------------------------- */

static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t outlen)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        snprintf(out, outlen, "%s", t != NULL ? (const char *)t : "");
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        snprintf(out, outlen, "%s", "");
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

static int count_tables(sqlite3 *db, int64_t *n)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *n = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

#define ADD_CLIENT_SQL "ALTER TABLE jobs ADD COLUMN client TEXT"

/* In one transaction: the table (create_table: a new journal) or the client column
 * (add_client: a version 1 or 2 journal), the order indexes and the version. A crash leaves
 * the database as it was, never half a schema. 0, or -1 with the reason in err. */
static int schema_write(sqlite3 *db, bool create_table, bool add_client, const char *what, const char *path,
                        char *err, size_t errlen)
{
    char version_sql[48];
    char *msg = NULL;

    snprintf(version_sql, sizeof version_sql, "PRAGMA user_version = %d", JOURNAL_SCHEMA_VERSION);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK ||
        (create_table && sqlite3_exec(db, schema_sql, NULL, NULL, &msg) != SQLITE_OK) ||
        (add_client && sqlite3_exec(db, ADD_CLIENT_SQL, NULL, NULL, &msg) != SQLITE_OK) ||
        sqlite3_exec(db, order_indexes_sql, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(db, version_sql, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: %s: %s", path, what, msg != NULL ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        if (!sqlite3_get_autocommit(db))
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}

/* A version 1 journal has the table of version 2 (rowid_ included); only its indexes order
 * by created_ms. A version 2 one lacks the client column. Check rowid_ is there, then
 * replace the indexes and add the column. */
static int schema_migrate(sqlite3 *db, long version, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT rowid_ FROM jobs LIMIT 0", -1, &s, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: schema version %ld without a rowid_ column in jobs: %s", path,
                 version, sqlite3_errmsg(db));
        sqlite3_finalize(s);
        return -1;
    }
    sqlite3_finalize(s);
    char what[64];
    snprintf(what, sizeof what, "migrating schema version %ld to %d", version, JOURNAL_SCHEMA_VERSION);
    return schema_write(db, false, true, what, path, err, errlen);
}

/* Create the schema in an empty database, migrate an older version, or check the version. */
static int schema_ensure(sqlite3 *db, const char *path, char *err, size_t errlen)
{
    char text[64];
    int64_t tables = 0;

    if (pragma_text(db, "PRAGMA user_version", text, sizeof text) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: reading schema version: %s", path, sqlite3_errmsg(db));
        return -1;
    }
    long version = strtol(text, NULL, 10);
    if (version > JOURNAL_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "journal %s: schema version %ld is newer than this vramd understands (%d); "
                 "use a newer vramd or another state_dir",
                 path, version, JOURNAL_SCHEMA_VERSION);
        return -1;
    }
    if (version == JOURNAL_SCHEMA_VERSION)
        return 0;
    if (version == 1 || version == 2)
        return schema_migrate(db, version, path, err, errlen);
    if (count_tables(db, &tables) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: %s", path, sqlite3_errmsg(db));
        return -1;
    }
    if (version != 0 || tables != 0) {
        snprintf(err, errlen, "journal %s: not a vramd job journal (tables without a schema version)", path);
        return -1;
    }
    return schema_write(db, true, false, "creating schema", path, err, errlen);
}

journal_t *journal_open(const char *path, char *err, size_t errlen)
{
    char mode[32];
    journal_t *j;
    int rc;

    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "journal: no path");
        return NULL;
    }
    j = calloc(1, sizeof *j);
    if (j == NULL) {
        snprintf(err, errlen, "journal %s: out of memory", path);
        return NULL;
    }
    /* create the file 0600 first: job bodies may be private, and SQLite gives the -wal and
     * -shm files the database file's permissions */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    rc = sqlite3_open_v2(path, &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: %s", path, j->db != NULL ? sqlite3_errmsg(j->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_extended_result_codes(j->db, 1);
    sqlite3_busy_timeout(j->db, BUSY_TIMEOUT_MS);

    /* WAL + FULL: a commit returns only after the log is fsynced (durable across power loss) */
    if (pragma_text(j->db, "PRAGMA journal_mode = WAL", mode, sizeof mode) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: %s", path, sqlite3_errmsg(j->db));
        goto fail;
    }
    if (strcmp(mode, "wal") != 0) {
        snprintf(err, errlen, "journal %s: the filesystem does not support WAL mode (journal_mode is %s)", path,
                 mode);
        goto fail;
    }
    if (sqlite3_exec(j->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: %s", path, sqlite3_errmsg(j->db));
        goto fail;
    }
    if (schema_ensure(j->db, path, err, errlen) != 0)
        goto fail;
    /* Queued jobs with a deadline, by deadline (journal_overdue). Partial, so it costs
     * nothing for jobs without one; IF NOT EXISTS: also added to journals made before it. */
    if (sqlite3_exec(j->db, "CREATE INDEX IF NOT EXISTS jobs_overdue ON jobs (deadline_ms)"
                            " WHERE state = 'queued' AND deadline_ms > 0", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "journal %s: creating an index: %s", path, sqlite3_errmsg(j->db));
        goto fail;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        rc = sqlite3_prepare_v3(j->db, jnl_stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &j->st[i], NULL);
        if (rc != SQLITE_OK) {
            snprintf(err, errlen, "journal %s: preparing statement %d: %s", path, i, sqlite3_errmsg(j->db));
            goto fail;
        }
    }
    return j;

fail:
    journal_close(j);
    return NULL;
}

void journal_close(journal_t *j)
{
    if (j == NULL)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(j->st[i]);
    if (j->db != NULL) {
        /* fold the WAL into the database so the next open starts small; failure is harmless */
        sqlite3_wal_checkpoint_v2(j->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        sqlite3_close_v2(j->db);
    }
    free(j);
}

