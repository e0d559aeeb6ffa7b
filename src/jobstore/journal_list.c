/*
 * journal_list: reading many jobs from the journal (see journal.h for the contract): the list
 * with its filters and paging cursor, the run order of queued jobs, queued jobs past their
 * deadline, counts by state and by model. The cursor's text form is in journal_cursor.c.
 *
 * Invariants:
 *   - every order is by the job's sequence number (rowid_, the order of insertion), never by
 *     created_ms: list newest first (rowid_ DESC), run order priority DESC then rowid_;
 *   - a cursor is the seq of the last job given; the next page is the jobs with a smaller
 *     seq, so a page never repeats or skips a job that was present when paging began;
 *   - limits are clamped to 1..JOURNAL_LIST_MAX; read-only, no transaction is held.
 */
#include "jobstore/journal_internal.h"

#include <string.h>

int journal_list(journal_t *j, const journal_filter_t *filter, const journal_cursor_t *cursor, size_t limit,
                 journal_record_cb cb, void *ctx, journal_cursor_t *next, size_t *n)
{
    int state = filter != NULL ? filter->state : -1;
    const char *model = filter != NULL ? filter->model : NULL;
    enum stmt_id which;
    size_t given = 0;
    int out_rc = JOURNAL_OK;
    bool more = false;
    job_record_t rec;

    if (next != NULL)
        memset(next, 0, sizeof *next);
    if (n != NULL)
        *n = 0;
    if (state >= JOB_STATE_COUNT)
        return jnl_error(j, JOURNAL_INVALID, "unknown state filter %d", state);
    limit = jnl_clamp_limit(limit);
    if (state >= 0)
        which = model != NULL ? ST_LIST_STATE_MODEL : ST_LIST_STATE;
    else
        which = model != NULL ? ST_LIST_MODEL : ST_LIST_ALL;

    sqlite3_stmt *s = jnl_stmt(j, which);
    /* every seq is below INT64_MAX (SQLite stops counting up there long before) */
    sqlite3_bind_int64(s, 1, cursor != NULL && cursor->valid ? cursor->seq : INT64_MAX);
    sqlite3_bind_int64(s, 2, (int64_t)limit + 1); /* one more: do more jobs follow? */
    if (state >= 0)
        sqlite3_bind_text(s, 3, job_state_name((enum job_state)state), -1, SQLITE_STATIC);
    if (model != NULL)
        sqlite3_bind_text(s, 4, model, -1, SQLITE_TRANSIENT);

    for (;;) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            out_rc = jnl_fail_sqlite(j, "list jobs");
            break;
        }
        if (given == limit) {
            more = true;
            break;
        }
        out_rc = jnl_read_record(j, s, &rec);
        if (out_rc != JOURNAL_OK)
            break;
        given++;
        if (next != NULL) {
            next->valid = true;
            next->seq = rec.seq;
        }
        int stop = cb != NULL ? cb(&rec, ctx) : 0;
        job_record_clear(&rec);
        if (stop != 0) {
            more = true; /* the caller stopped: the cursor points after what it saw */
            break;
        }
    }
    jnl_done(s);
    if (next != NULL && (!more || out_rc != JOURNAL_OK))
        memset(next, 0, sizeof *next);
    if (n != NULL)
        *n = given;
    return out_rc;
}

int journal_next_queued(journal_t *j, const char *model, size_t limit, char (*ids)[JOB_ID_SIZE], size_t *n)
{
    size_t got = 0;
    int out_rc = JOURNAL_OK;

    *n = 0;
    limit = jnl_clamp_limit(limit);
    sqlite3_stmt *s = jnl_stmt(j, model != NULL ? ST_NEXT_MODEL : ST_NEXT_ALL);
    sqlite3_bind_int64(s, 1, (int64_t)limit);
    if (model != NULL)
        sqlite3_bind_text(s, 2, model, -1, SQLITE_TRANSIENT);
    for (;;) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            out_rc = jnl_fail_sqlite(j, "next queued jobs");
            break;
        }
        const unsigned char *id = sqlite3_column_text(s, 0);
        if (id == NULL || !job_id_valid((const char *)id))
            continue; /* cannot happen through this API; never hand out a bad id */
        memcpy(ids[got], id, JOB_ID_SIZE);
        got++;
        if (got == limit)
            break;
    }
    jnl_done(s);
    *n = got;
    return out_rc;
}

int journal_overdue(journal_t *j, int64_t now_ms, size_t limit, char (*ids)[JOB_ID_SIZE], size_t *n)
{
    size_t got = 0;
    int out_rc = JOURNAL_OK;

    *n = 0;
    limit = jnl_clamp_limit(limit);
    sqlite3_stmt *s = jnl_stmt(j, ST_OVERDUE);
    sqlite3_bind_int64(s, 1, (int64_t)limit);
    sqlite3_bind_int64(s, 2, now_ms);
    for (;;) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            out_rc = jnl_fail_sqlite(j, "overdue jobs");
            break;
        }
        const unsigned char *id = sqlite3_column_text(s, 0);
        if (id == NULL || !job_id_valid((const char *)id))
            continue;
        memcpy(ids[got], id, JOB_ID_SIZE);
        if (++got == limit)
            break;
    }
    jnl_done(s);
    *n = got;
    return out_rc;
}

int journal_counts(journal_t *j, uint64_t counts[JOB_STATE_COUNT])
{
    int out_rc = JOURNAL_OK;

    memset(counts, 0, sizeof(uint64_t) * JOB_STATE_COUNT);
    sqlite3_stmt *s = jnl_stmt(j, ST_COUNTS);
    for (;;) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            out_rc = jnl_fail_sqlite(j, "count jobs");
            break;
        }
        int st = job_state_parse((const char *)sqlite3_column_text(s, 0));
        int64_t c = sqlite3_column_int64(s, 1);
        if (st >= 0 && c > 0)
            counts[st] = (uint64_t)c;
    }
    jnl_done(s);
    return out_rc;
}

int journal_count_by_model(journal_t *j, enum job_state state, journal_model_count_cb cb, void *ctx)
{
    int out_rc = JOURNAL_OK;

    if ((int)state < 0 || state >= JOB_STATE_COUNT)
        return jnl_error(j, JOURNAL_INVALID, "unknown state %d", (int)state);
    sqlite3_stmt *s = jnl_stmt(j, ST_COUNT_BY_MODEL);
    sqlite3_bind_text(s, 1, job_state_name(state), -1, SQLITE_STATIC);
    for (;;) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            out_rc = jnl_fail_sqlite(j, "count jobs by model");
            break;
        }
        const unsigned char *model = sqlite3_column_text(s, 0);
        int64_t c = sqlite3_column_int64(s, 1);
        if (model != NULL && cb != NULL && cb((const char *)model, c < 0 ? 0 : (uint64_t)c, ctx) != 0)
            break;
    }
    jnl_done(s);
    return out_rc;
}

