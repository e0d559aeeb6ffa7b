/*
 * journal_jobs: one job at a time in the journal (see journal.h for the contract): insert,
 * get and peek, the state changes (mark_running, set_gpu, mark_finished, cancel, requeue),
 * recovery at start, result bookkeeping and the purge of old final jobs.
 *
 * Invariants:
 *   - a state transition is one UPDATE guarded in SQL (`WHERE ... AND state IN (...)`), so a
 *     refused transition changes nothing; when no row changed, the job's state explains why
 *     (JOURNAL_NOT_FOUND or JOURNAL_CONFLICT naming the state);
 *   - a change of several statements (cancel, recover, purge) is one BEGIN IMMEDIATE..COMMIT
 *     transaction, rolled back on any failure before returning;
 *   - a job's body is dropped by the statement that makes the job final;
 *   - purge callbacks run only after the commit (orphan result files, never records pointing
 *     at removed results).
 */
#include "jobstore/journal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool id_ok(journal_t *j, const char *id)
{
    if (job_id_valid(id))
        return true;
    jnl_error(j, JOURNAL_INVALID, "job id is not valid");
    return false;
}

int journal_insert(journal_t *j, const job_record_t *rec)
{
    if (rec == NULL || !id_ok(j, rec->id))
        return JOURNAL_INVALID;
    if (rec->model == NULL || rec->model[0] == '\0' || rec->method == NULL || rec->method[0] == '\0' ||
        rec->path == NULL)
        return jnl_error(j, JOURNAL_INVALID, "job needs a model, a method and a path");
    if (rec->priority < 0 || rec->priority > 9)
        return jnl_error(j, JOURNAL_INVALID, "priority %d is not in 0..9", rec->priority);
    if (rec->max_attempts < 1 || rec->max_attempts > 100)
        return jnl_error(j, JOURNAL_INVALID, "max_attempts %d is not in 1..100", rec->max_attempts);
    if (rec->body_len > 0 && rec->body == NULL)
        return jnl_error(j, JOURNAL_INVALID, "body length without body");

    sqlite3_stmt *s = jnl_stmt(j, ST_INSERT);
    sqlite3_bind_text(s, 1, rec->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, rec->model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, rec->method, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, rec->path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, rec->headers_json != NULL ? rec->headers_json : "{}", -1, SQLITE_TRANSIENT);
    jnl_bind_text_or_null(s, 6, rec->request_id);
    sqlite3_bind_int(s, 7, rec->priority);
    sqlite3_bind_int64(s, 8, rec->deadline_wall_ms);
    sqlite3_bind_int(s, 9, rec->max_attempts);
    sqlite3_bind_int64(s, 10, rec->created_ms);
    if (rec->body_len > 0)
        sqlite3_bind_blob64(s, 11, rec->body, (sqlite3_uint64)rec->body_len, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, 11);
    jnl_bind_text_or_null(s, 12, rec->client_json);
    int rc = jnl_exec(j, s, "insert job");
    if (rc == JOURNAL_CONFLICT)
        return jnl_error(j, JOURNAL_CONFLICT, "job id %s is already taken", rec->id);
    if (rc != JOURNAL_OK && j->in_doubt) {
        /* the refused job must not come back after a restart: overwrite its frames now */
        char why[JOURNAL_ERR_MAX], settle[JOURNAL_ERR_MAX];
        snprintf(why, sizeof why, "%s", j->err);
        if (journal_settle(j) == JOURNAL_OK)
            return jnl_error(j, rc, "%s (the job is not stored)", why);
        snprintf(settle, sizeof settle, "%s", j->err); /* j->err is written by jnl_error */
        return jnl_error(j, rc, "%s (not stored, but the disk still fails: %s; a restart before a write"
                                " succeeds may bring the job back)", why, settle);
    }
    return rc;
}

/* A queued job's place: the queued jobs of its model before it in run order (priority,
 * then insertion: the order the runner takes them in), into r->queue_ahead (-1 on a
 * failure: the place is only shown, nothing depends on it). */
static void queued_ahead(journal_t *j, job_record_t *r)
{
    sqlite3_stmt *s = jnl_stmt(j, ST_QUEUED_AHEAD);
    sqlite3_bind_text(s, 1, r->model ? r->model : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, r->priority);
    sqlite3_bind_int64(s, 3, r->seq);
    r->queue_ahead = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    jnl_done(s);
}

int journal_get(journal_t *j, const char *id, bool with_body, job_record_t *out)
{
    job_record_init(out);
    if (!job_id_valid(id))
        return jnl_error(j, JOURNAL_NOT_FOUND, "job not found");
    sqlite3_stmt *s = jnl_stmt(j, with_body ? ST_GET_BODY : ST_GET);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    int out_rc;
    if (rc == SQLITE_ROW)
        out_rc = jnl_read_record(j, s, out);
    else if (rc == SQLITE_DONE)
        out_rc = jnl_error(j, JOURNAL_NOT_FOUND, "job %s not found", id);
    else
        out_rc = jnl_fail_sqlite(j, "get job");
    jnl_done(s);
    if (out_rc == JOURNAL_OK && !with_body && out->state == JOB_QUEUED)
        queued_ahead(j, out);
    return out_rc;
}

int journal_peek(journal_t *j, const char *id, enum job_state *state, enum job_result_state *rs)
{
    if (!job_id_valid(id))
        return jnl_error(j, JOURNAL_NOT_FOUND, "job not found");
    sqlite3_stmt *s = jnl_stmt(j, ST_PEEK);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    int out_rc = JOURNAL_OK;
    if (rc == SQLITE_ROW) {
        int st = job_state_parse((const char *)sqlite3_column_text(s, 0));
        int r = job_result_state_parse((const char *)sqlite3_column_text(s, 1));
        if (state != NULL)
            *state = st < 0 ? JOB_FAILED : (enum job_state)st;
        if (rs != NULL)
            *rs = r < 0 ? JOB_RESULT_NONE : (enum job_result_state)r;
    } else if (rc == SQLITE_DONE) {
        out_rc = jnl_error(j, JOURNAL_NOT_FOUND, "job %s not found", id);
    } else {
        out_rc = jnl_fail_sqlite(j, "peek job");
    }
    jnl_done(s);
    return out_rc;
}

/* After a guarded UPDATE changed no row: NOT_FOUND or CONFLICT (with the state in the text). */
static int explain_no_change(journal_t *j, const char *id, const char *wanted)
{
    enum job_state st;
    int rc = journal_peek(j, id, &st, NULL);
    if (rc != JOURNAL_OK)
        return rc;
    return jnl_error(j, JOURNAL_CONFLICT, "job %s is %s, not %s", id, job_state_name(st), wanted);
}

/* Run a guarded single-row UPDATE; 0 when it changed the row, else why not. */
static int guarded_update(journal_t *j, sqlite3_stmt *s, const char *id, const char *what, const char *wanted)
{
    int rc = jnl_exec(j, s, what);
    if (rc != JOURNAL_OK)
        return rc;
    if (sqlite3_changes(j->db) == 0)
        return explain_no_change(j, id, wanted);
    return JOURNAL_OK;
}

int journal_mark_running(journal_t *j, const char *id, int64_t now_ms, int gpu)
{
    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    sqlite3_stmt *s = jnl_stmt(j, ST_MARK_RUNNING);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, now_ms);
    sqlite3_bind_int(s, 3, gpu < 0 ? -1 : gpu);
    return guarded_update(j, s, id, "mark job running", "queued");
}

int journal_set_gpu(journal_t *j, const char *id, int gpu)
{
    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    sqlite3_stmt *s = jnl_stmt(j, ST_SET_GPU);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, gpu < 0 ? -1 : gpu);
    return guarded_update(j, s, id, "set job gpu", "running");
}

int journal_mark_finished(journal_t *j, const char *id, const job_outcome_t *o, int64_t now_ms)
{
    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    if (o == NULL || (o->state != JOB_SUCCEEDED && o->state != JOB_FAILED))
        return jnl_error(j, JOURNAL_INVALID, "a job finishes as succeeded or failed");
    sqlite3_stmt *s = jnl_stmt(j, ST_MARK_FINISHED);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, job_state_name(o->state), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, now_ms);
    sqlite3_bind_int(s, 4, o->http_status);
    jnl_bind_text_or_null(s, 5, o->error_code);
    jnl_bind_text_or_null(s, 6, o->error_message);
    jnl_bind_text_or_null(s, 7, o->result_type);
    sqlite3_bind_int64(s, 8, o->result_bytes > INT64_MAX ? INT64_MAX : (int64_t)o->result_bytes);
    sqlite3_bind_text(s, 9, job_result_state_name(o->result_stored ? JOB_RESULT_STORED : JOB_RESULT_NONE), -1,
                      SQLITE_STATIC);
    sqlite3_bind_int(s, 10, o->degrade_level);
    sqlite3_bind_int(s, 11, o->gpu);
    return guarded_update(j, s, id, "mark job finished", "queued or running");
}

int journal_cancel(journal_t *j, const char *id, int64_t now_ms, enum job_state *was)
{
    enum job_state st;
    int rc;

    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    /* one transaction: the state we report is the state we changed */
    rc = jnl_tx_begin(j);
    if (rc != JOURNAL_OK)
        return rc;
    rc = journal_peek(j, id, &st, NULL);
    if (rc != JOURNAL_OK)
        goto rollback;
    if (was != NULL)
        *was = st;
    if (job_state_is_final(st)) {
        rc = jnl_error(j, JOURNAL_CONFLICT, "job %s is already %s", id, job_state_name(st));
        goto rollback;
    }
    sqlite3_stmt *s = jnl_stmt(j, ST_CANCEL);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, now_ms);
    rc = jnl_exec(j, s, "cancel job");
    if (rc != JOURNAL_OK)
        goto rollback;
    return jnl_tx_commit(j);

rollback:
    jnl_tx_rollback(j);
    return rc;
}

int journal_requeue(journal_t *j, const char *id, bool refund_attempt, const char *note_code,
                    const char *note_message)
{
    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    sqlite3_stmt *s = jnl_stmt(j, ST_REQUEUE);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, refund_attempt ? 1 : 0);
    jnl_bind_text_or_null(s, 3, note_code);
    jnl_bind_text_or_null(s, 4, note_message);
    return guarded_update(j, s, id, "requeue job", "running");
}

int journal_recover(journal_t *j, int64_t now_ms, size_t *requeued, size_t *failed)
{
    size_t n_failed, n_requeued;
    int rc;

    if (requeued != NULL)
        *requeued = 0;
    if (failed != NULL)
        *failed = 0;
    rc = jnl_tx_begin(j);
    if (rc != JOURNAL_OK)
        return rc;
    sqlite3_stmt *s = jnl_stmt(j, ST_RECOVER_FAIL);
    sqlite3_bind_int64(s, 1, now_ms);
    rc = jnl_exec(j, s, "recover jobs (fail exhausted)");
    if (rc != JOURNAL_OK)
        goto rollback;
    n_failed = (size_t)sqlite3_changes(j->db);
    rc = jnl_exec(j, jnl_stmt(j, ST_RECOVER_QUEUE), "recover jobs (requeue)");
    if (rc != JOURNAL_OK)
        goto rollback;
    n_requeued = (size_t)sqlite3_changes(j->db);
    rc = jnl_tx_commit(j);
    if (rc != JOURNAL_OK)
        return rc;
    if (requeued != NULL)
        *requeued = n_requeued;
    if (failed != NULL)
        *failed = n_failed;
    return JOURNAL_OK;

rollback:
    jnl_tx_rollback(j);
    return rc;
}

int journal_mark_result_removed(journal_t *j, const char *id)
{
    if (!id_ok(j, id))
        return JOURNAL_INVALID;
    sqlite3_stmt *s = jnl_stmt(j, ST_RESULT_REMOVED);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    int rc = jnl_exec(j, s, "mark result removed");
    if (rc != JOURNAL_OK)
        return rc;
    if (sqlite3_changes(j->db) == 0)
        return journal_peek(j, id, NULL, NULL); /* OK when the job exists (nothing stored) */
    return JOURNAL_OK;
}

int journal_purge(journal_t *j, int64_t older_than_ms, size_t max_batch, journal_id_cb cb, void *ctx,
                  size_t *purged)
{
    char (*ids)[JOB_ID_SIZE] = NULL;
    size_t got = 0;
    int rc;

    if (purged != NULL)
        *purged = 0;
    max_batch = jnl_clamp_limit(max_batch);
    ids = calloc(max_batch, sizeof *ids);
    if (ids == NULL)
        return jnl_error(j, JOURNAL_ERROR, "out of memory purging jobs");
    rc = jnl_tx_begin(j);
    if (rc != JOURNAL_OK)
        goto out;

    sqlite3_stmt *s = jnl_stmt(j, ST_PURGE_SELECT);
    sqlite3_bind_int64(s, 1, older_than_ms);
    sqlite3_bind_int64(s, 2, (int64_t)max_batch);
    for (;;) {
        int step = sqlite3_step(s);
        if (step == SQLITE_DONE)
            break;
        if (step != SQLITE_ROW) {
            rc = jnl_fail_sqlite(j, "select jobs to purge");
            break;
        }
        const unsigned char *id = sqlite3_column_text(s, 0);
        if (id != NULL && job_id_valid((const char *)id) && got < max_batch)
            memcpy(ids[got++], id, JOB_ID_SIZE);
    }
    jnl_done(s);
    for (size_t i = 0; rc == JOURNAL_OK && i < got; i++) {
        sqlite3_stmt *d = jnl_stmt(j, ST_PURGE_DELETE);
        sqlite3_bind_text(d, 1, ids[i], -1, SQLITE_TRANSIENT);
        rc = jnl_exec(j, d, "purge job");
    }
    if (rc != JOURNAL_OK) {
        jnl_tx_rollback(j);
        goto out;
    }
    rc = jnl_tx_commit(j);
    if (rc != JOURNAL_OK)
        goto out;
    /* after the commit: a crash before the callbacks leaves orphan result files, never a record
     * pointing to a result that was removed while the record stayed */
    for (size_t i = 0; i < got; i++) {
        if (cb != NULL)
            cb(ids[i], ctx);
    }
    if (purged != NULL)
        *purged = got;
out:
    free(ids);
    return rc;
}
