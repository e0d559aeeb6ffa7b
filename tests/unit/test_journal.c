/*
 * test_journal: the SQLite job journal (src/jobstore/journal*.c), on real database files in a
 * mkdtemp directory: what it stores and the order it gives. Durability, disk full and the
 * schema versions are in test_journal_store.c.
 *
 * Covers: insert/get round trip with a binary body (NULs, high bytes), optional fields and
 * argument checks; WAL mode and synchronous=FULL in effect on the journal's own connection,
 * and index-only plans (no sort) for its run-order and list statements; run order of
 * next_queued (priority desc, then order of insertion, whatever created_ms says) per model and
 * for all, also for a burst inserted within one millisecond (and the same for list paging);
 * the state rules (mark_running, set_gpu, mark_finished, cancel from every state, requeue with
 * and without refund); recovery at start (running -> queued, and -> failed when attempts are
 * used up, with the reason); counts and per-model counts; list filters, paging with cursors
 * and the cursor text form; purge in bounded batches; result bookkeeping.
 * Run: make build/tests/test_journal && build/tests/test_journal (and with make SAN=1).
 */
#include "journal_fixture.h"

#include <sys/stat.h>

/* ------------------------------------------------------------------------------------ */

static void test_insert_get_roundtrip(void **state)
{
    fixture_t *f = *state;
    unsigned char body[300];
    job_record_t r, got;

    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (unsigned char)(i * 7); /* includes 0x00 and bytes >= 0x80 */
    make_job(&r, "trellis", 7, 1700000000123);
    r.headers_json = (char *)"{\"content-type\":\"application/json\"}";
    r.body = body;
    r.body_len = sizeof body;
    r.request_id = (char *)"req-42";
    r.deadline_wall_ms = 1700000600000;
    r.max_attempts = 5;
    assert_int_equal(journal_insert(f->j, &r), JOURNAL_OK);

    assert_int_equal(journal_get(f->j, r.id, false, &got), JOURNAL_OK);
    assert_string_equal(got.id, r.id);
    assert_string_equal(got.model, "trellis");
    assert_string_equal(got.method, "POST");
    assert_string_equal(got.path, "/generate");
    assert_string_equal(got.headers_json, "{\"content-type\":\"application/json\"}");
    assert_string_equal(got.request_id, "req-42");
    assert_int_equal(got.priority, 7);
    assert_int_equal(got.deadline_wall_ms, 1700000600000);
    assert_int_equal(got.created_ms, 1700000000123);
    assert_int_equal(got.state, JOB_QUEUED);
    assert_int_equal(got.attempts, 0);
    assert_int_equal(got.max_attempts, 5);
    assert_int_equal(got.gpu, -1);
    assert_int_equal(got.started_ms, 0);
    assert_int_equal(got.finished_ms, 0);
    assert_int_equal(got.result_state, JOB_RESULT_NONE);
    assert_null(got.error_code);
    assert_null(got.result_type);
    assert_null(got.body); /* not asked for */
    assert_int_equal(got.body_len, 0);
    job_record_clear(&got);

    assert_int_equal(journal_get(f->j, r.id, true, &got), JOURNAL_OK);
    assert_int_equal(got.body_len, sizeof body);
    assert_memory_equal(got.body, body, sizeof body);
    job_record_clear(&got);
    assert_null(got.model);
    assert_int_equal(got.gpu, -1);

    /* defaults: no headers -> "{}", no body, no request id */
    job_record_t bare;
    make_job(&bare, "m", 0, 1);
    assert_int_equal(journal_insert(f->j, &bare), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, bare.id, true, &got), JOURNAL_OK);
    assert_string_equal(got.headers_json, "{}");
    assert_null(got.body);
    assert_null(got.request_id);
    job_record_clear(&got);

    /* the same id twice */
    assert_int_equal(journal_insert(f->j, &r), JOURNAL_CONFLICT);
    assert_non_null(strstr(journal_errmsg(f->j), "already taken"));

    /* argument checks */
    job_record_t bad;
    make_job(&bad, "m", 10, 1);
    assert_int_equal(journal_insert(f->j, &bad), JOURNAL_INVALID);
    make_job(&bad, "m", 1, 1);
    bad.max_attempts = 0;
    assert_int_equal(journal_insert(f->j, &bad), JOURNAL_INVALID);
    make_job(&bad, NULL, 1, 1);
    assert_int_equal(journal_insert(f->j, &bad), JOURNAL_INVALID);
    make_job(&bad, "m", 1, 1);
    snprintf(bad.id, sizeof bad.id, "%s", "../../etc/passwd");
    assert_int_equal(journal_insert(f->j, &bad), JOURNAL_INVALID);
    make_job(&bad, "m", 1, 1);
    bad.body_len = 5;
    assert_int_equal(journal_insert(f->j, &bad), JOURNAL_INVALID);

    /* unknown and malformed ids */
    char other[JOB_ID_SIZE];
    assert_int_equal(job_id_generate(other), 0);
    assert_int_equal(journal_get(f->j, other, false, &got), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_get(f->j, "../x", false, &got), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_get(f->j, NULL, false, &got), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_peek(f->j, other, NULL, NULL), JOURNAL_NOT_FOUND);
}


static void test_pragmas_in_effect(void **state)
{
    fixture_t *f = *state;
    char text[32];
    assert_int_equal(pragma_text(f->j->db, "PRAGMA journal_mode", text, sizeof text), SQLITE_OK);
    assert_string_equal(text, "wal");
    assert_int_equal(pragma_text(f->j->db, "PRAGMA synchronous", text, sizeof text), SQLITE_OK);
    assert_string_equal(text, "2"); /* FULL */
    assert_int_equal(pragma_text(f->j->db, "PRAGMA user_version", text, sizeof text), SQLITE_OK);
    assert_int_equal(atoi(text), JOURNAL_SCHEMA_VERSION);
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* job bodies may be private */
    /* the run-order and list queries use an index (or the table's rowid order), never a
     * scan plus sort of the whole table */
    assert_plan(f->j->db, ST_NEXT_MODEL, "jobs_queue");
    assert_plan(f->j->db, ST_NEXT_ALL, "jobs_run");
    assert_plan(f->j->db, ST_LIST_ALL, "INTEGER PRIMARY KEY");
    assert_plan(f->j->db, ST_LIST_STATE, "jobs_state");
    assert_plan(f->j->db, ST_LIST_MODEL, "jobs_model");
}

static void test_next_queued_order(void **state)
{
    fixture_t *f = *state;
    char a_low_old[JOB_ID_SIZE], a_high_new[JOB_ID_SIZE], a_high_old[JOB_ID_SIZE], a_mid[JOB_ID_SIZE];
    char b_top[JOB_ID_SIZE], a_running[JOB_ID_SIZE];
    char ids[10][JOB_ID_SIZE];
    size_t n = 99;

    /* age is the order of insertion; created_ms goes down on purpose (a wall clock that
     * stepped back must not let a later job overtake) */
    insert_job(f->j, b_top, "b", 9, 600);
    insert_job(f->j, a_low_old, "a", 1, 500);
    insert_job(f->j, a_high_old, "a", 9, 400);
    insert_job(f->j, a_mid, "a", 5, 300);
    insert_job(f->j, a_high_new, "a", 9, 200);
    insert_job(f->j, a_running, "a", 9, 100);
    assert_int_equal(journal_mark_running(f->j, a_running, 1000, 0), JOURNAL_OK);

    assert_int_equal(journal_next_queued(f->j, "a", 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 4);
    assert_string_equal(ids[0], a_high_old);
    assert_string_equal(ids[1], a_high_new);
    assert_string_equal(ids[2], a_mid);
    assert_string_equal(ids[3], a_low_old);

    assert_int_equal(journal_next_queued(f->j, "a", 2, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[1], a_high_new);

    assert_int_equal(journal_next_queued(f->j, NULL, 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 5);
    assert_string_equal(ids[0], b_top);
    assert_string_equal(ids[1], a_high_old);
    assert_string_equal(ids[4], a_low_old);

    assert_int_equal(journal_next_queued(f->j, "nobody", 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 0);
}

static void insert_with_deadline(journal_t *j, char id_out[JOB_ID_SIZE], int64_t deadline)
{
    job_record_t r;
    make_job(&r, "a", 5, 10);
    r.deadline_wall_ms = deadline;
    int rc = journal_insert(j, &r);
    if (rc != JOURNAL_OK)
        fail_msg("insert: %d %s", rc, journal_errmsg(j));
    memcpy(id_out, r.id, JOB_ID_SIZE);
}

/* Overdue: queued jobs whose deadline is at or before now, earliest first; never running
 * or final ones, never jobs without a deadline. */
static void test_overdue(void **state)
{
    fixture_t *f = *state;
    char late2[JOB_ID_SIZE], late1[JOB_ID_SIZE], future[JOB_ID_SIZE], none[JOB_ID_SIZE], running[JOB_ID_SIZE];
    char ids[10][JOB_ID_SIZE];
    size_t n = 99;
    insert_with_deadline(f->j, late2, 500);
    insert_with_deadline(f->j, late1, 400);
    insert_with_deadline(f->j, future, 5000);
    insert_with_deadline(f->j, none, 0);
    insert_with_deadline(f->j, running, 100);
    assert_int_equal(journal_mark_running(f->j, running, 50, 0), JOURNAL_OK);
    assert_int_equal(journal_overdue(f->j, 1000, 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0], late1);
    assert_string_equal(ids[1], late2);
    assert_int_equal(journal_overdue(f->j, 1000, 1, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 1);
    assert_int_equal(journal_overdue(f->j, 399, 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 0);
    finish(f->j, late1, JOB_FAILED, 1000);
    assert_int_equal(journal_overdue(f->j, 1000, 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], late2);
}

static void test_lifecycle(void **state)
{
    fixture_t *f = *state;
    char id[JOB_ID_SIZE];
    job_record_t r;
    unsigned char body[4] = {1, 2, 3, 4};

    make_job(&r, "a", 5, 10);
    r.body = body;
    r.body_len = sizeof body;
    assert_int_equal(journal_insert(f->j, &r), JOURNAL_OK);
    memcpy(id, r.id, JOB_ID_SIZE);

    assert_int_equal(journal_set_gpu(f->j, id, 1), JOURNAL_CONFLICT); /* not running */
    assert_int_equal(journal_mark_running(f->j, id, 500, -1), JOURNAL_OK);
    assert_int_equal(journal_mark_running(f->j, id, 501, -1), JOURNAL_CONFLICT);
    assert_non_null(strstr(journal_errmsg(f->j), "is running, not queued"));
    assert_int_equal(journal_set_gpu(f->j, id, 1), JOURNAL_OK);

    job_record_t got;
    assert_int_equal(journal_get(f->j, id, true, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_RUNNING);
    assert_int_equal(got.attempts, 1);
    assert_int_equal(got.started_ms, 500);
    assert_int_equal(got.gpu, 1);
    assert_int_equal(got.body_len, 4); /* still needed while it can run again */
    job_record_clear(&got);

    job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = 200, .result_type = "model/gltf-binary",
                       .result_bytes = 12345, .result_stored = true, .degrade_level = 2, .gpu = -1};
    assert_int_equal(journal_mark_finished(f->j, id, &o, 900), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, id, true, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_SUCCEEDED);
    assert_int_equal(got.finished_ms, 900);
    assert_int_equal(got.http_status, 200);
    assert_string_equal(got.result_type, "model/gltf-binary");
    assert_int_equal(got.result_bytes, 12345);
    assert_int_equal(got.result_state, JOB_RESULT_STORED);
    assert_int_equal(got.degrade_level, 2);
    assert_int_equal(got.gpu, 1); /* kept: outcome gpu -1 */
    assert_null(got.error_code);
    assert_null(got.body); /* dropped when final */
    job_record_clear(&got);

    /* final: no more transitions */
    assert_int_equal(journal_mark_finished(f->j, id, &o, 901), JOURNAL_CONFLICT);
    assert_int_equal(journal_mark_running(f->j, id, 902, 0), JOURNAL_CONFLICT);
    assert_int_equal(journal_requeue(f->j, id, false, NULL, NULL), JOURNAL_CONFLICT);
    o.state = JOB_CANCELLED;
    assert_int_equal(journal_mark_finished(f->j, id, &o, 903), JOURNAL_INVALID);

    /* result bookkeeping */
    assert_int_equal(journal_mark_result_removed(f->j, id), JOURNAL_OK);
    enum job_result_state rs;
    assert_int_equal(journal_peek(f->j, id, NULL, &rs), JOURNAL_OK);
    assert_int_equal(rs, JOB_RESULT_REMOVED);
    assert_int_equal(journal_mark_result_removed(f->j, id), JOURNAL_OK); /* idempotent */

    /* a queued job can fail directly (deadline passed while queued) with its error */
    char q[JOB_ID_SIZE];
    insert_job(f->j, q, "a", 5, 20);
    job_outcome_t late = {.state = JOB_FAILED, .http_status = 504, .error_code = "deadline_exceeded",
                          .error_message = "deadline passed while queued", .gpu = 3};
    assert_int_equal(journal_mark_finished(f->j, q, &late, 950), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, q, false, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_FAILED);
    assert_string_equal(got.error_code, "deadline_exceeded");
    assert_string_equal(got.error_message, "deadline passed while queued");
    assert_int_equal(got.gpu, 3);
    assert_int_equal(got.result_state, JOB_RESULT_NONE);
    job_record_clear(&got);
    assert_int_equal(journal_mark_result_removed(f->j, q), JOURNAL_OK); /* nothing stored: fine */

    char missing[JOB_ID_SIZE];
    assert_int_equal(job_id_generate(missing), 0);
    assert_int_equal(journal_mark_running(f->j, missing, 1, 0), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_mark_finished(f->j, missing, &late, 1), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_mark_result_removed(f->j, missing), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_mark_running(f->j, "nope", 1, 0), JOURNAL_INVALID);
}

static void test_cancel_each_state(void **state)
{
    fixture_t *f = *state;
    char queued[JOB_ID_SIZE], running[JOB_ID_SIZE], ok[JOB_ID_SIZE], failed[JOB_ID_SIZE], missing[JOB_ID_SIZE];
    enum job_state was = JOB_STATE_COUNT;

    insert_job(f->j, queued, "a", 1, 1);
    insert_job(f->j, running, "a", 1, 2);
    insert_job(f->j, ok, "a", 1, 3);
    insert_job(f->j, failed, "a", 1, 4);
    assert_int_equal(journal_mark_running(f->j, running, 10, 0), JOURNAL_OK);
    assert_int_equal(journal_mark_running(f->j, ok, 10, 0), JOURNAL_OK);
    finish(f->j, ok, JOB_SUCCEEDED, 20);
    finish(f->j, failed, JOB_FAILED, 20);

    assert_int_equal(journal_cancel(f->j, queued, 30, &was), JOURNAL_OK);
    assert_int_equal(was, JOB_QUEUED);
    assert_int_equal(state_of(f->j, queued), JOB_CANCELLED);
    assert_int_equal(journal_cancel(f->j, running, 31, &was), JOURNAL_OK);
    assert_int_equal(was, JOB_RUNNING);
    assert_int_equal(state_of(f->j, running), JOB_CANCELLED);

    assert_int_equal(journal_cancel(f->j, ok, 32, &was), JOURNAL_CONFLICT);
    assert_int_equal(was, JOB_SUCCEEDED);
    assert_int_equal(journal_cancel(f->j, failed, 33, &was), JOURNAL_CONFLICT);
    assert_int_equal(was, JOB_FAILED);
    assert_int_equal(journal_cancel(f->j, queued, 34, &was), JOURNAL_CONFLICT);
    assert_int_equal(was, JOB_CANCELLED);
    assert_non_null(strstr(journal_errmsg(f->j), "already cancelled"));

    assert_int_equal(job_id_generate(missing), 0);
    assert_int_equal(journal_cancel(f->j, missing, 35, &was), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_cancel(f->j, "ZZ", 35, NULL), JOURNAL_INVALID);

    /* the worker's answer for a job cancelled while it ran is refused */
    job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = 200, .gpu = -1};
    assert_int_equal(journal_mark_finished(f->j, running, &o, 40), JOURNAL_CONFLICT);
    job_record_t got;
    assert_int_equal(journal_get(f->j, running, false, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_CANCELLED);
    assert_int_equal(got.finished_ms, 31);
    job_record_clear(&got);
    /* no transaction is left open after any of this */
    assert_true(sqlite3_get_autocommit(f->j->db));
}

static void test_requeue(void **state)
{
    fixture_t *f = *state;
    char id[JOB_ID_SIZE];
    job_record_t got;

    insert_job(f->j, id, "a", 1, 1);
    assert_int_equal(journal_requeue(f->j, id, false, NULL, NULL), JOURNAL_CONFLICT); /* queued */
    assert_int_equal(journal_mark_running(f->j, id, 10, 2), JOURNAL_OK);
    assert_int_equal(journal_requeue(f->j, id, false, "worker_failed", "worker crashed"), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, id, false, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_QUEUED);
    assert_int_equal(got.attempts, 1); /* the attempt happened */
    assert_int_equal(got.gpu, -1);
    assert_int_equal(got.started_ms, 0);
    assert_string_equal(got.error_code, "worker_failed");
    assert_string_equal(got.error_message, "worker crashed");
    job_record_clear(&got);

    /* refund: an attempt that never reached a worker; no note keeps the previous one */
    assert_int_equal(journal_mark_running(f->j, id, 20, 0), JOURNAL_OK);
    assert_int_equal(journal_requeue(f->j, id, true, NULL, NULL), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, id, false, &got), JOURNAL_OK);
    assert_int_equal(got.attempts, 1);
    assert_string_equal(got.error_code, "worker_failed");
    job_record_clear(&got);
}

static void test_recover(void **state)
{
    fixture_t *f = *state;
    char fresh[JOB_ID_SIZE], last[JOB_ID_SIZE], queued[JOB_ID_SIZE], done_id[JOB_ID_SIZE];
    size_t requeued = 99, failed = 99;
    job_record_t got;

    insert_job(f->j, fresh, "a", 1, 1);
    insert_job(f->j, last, "a", 1, 2);
    insert_job(f->j, queued, "a", 1, 3);
    insert_job(f->j, done_id, "a", 1, 4);
    assert_int_equal(journal_mark_running(f->j, fresh, 10, 0), JOURNAL_OK); /* attempt 1 of 3 */
    for (int i = 0; i < 3; i++) {                                          /* attempt 3 of 3 */
        assert_int_equal(journal_mark_running(f->j, last, 10 + i, 0), JOURNAL_OK);
        if (i < 2)
            assert_int_equal(journal_requeue(f->j, last, false, NULL, NULL), JOURNAL_OK);
    }
    assert_int_equal(journal_mark_running(f->j, done_id, 10, 0), JOURNAL_OK);
    finish(f->j, done_id, JOB_SUCCEEDED, 20);

    /* vramd died here; the new one recovers */
    assert_int_equal(journal_recover(f->j, 5000, &requeued, &failed), JOURNAL_OK);
    assert_int_equal(requeued, 1);
    assert_int_equal(failed, 1);

    assert_int_equal(journal_get(f->j, fresh, true, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_QUEUED);
    assert_int_equal(got.attempts, 1);
    assert_int_equal(got.gpu, -1);
    assert_string_equal(got.error_code, "interrupted");
    assert_string_equal(got.error_message, "vramd stopped while it ran (attempt 1 of 3)");
    job_record_clear(&got);
    /* its next start is attempt 2 */
    assert_int_equal(journal_mark_running(f->j, fresh, 6000, 0), JOURNAL_OK);
    assert_int_equal(journal_get(f->j, fresh, false, &got), JOURNAL_OK);
    assert_int_equal(got.attempts, 2);
    job_record_clear(&got);

    assert_int_equal(journal_get(f->j, last, false, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_FAILED);
    assert_int_equal(got.finished_ms, 5000);
    assert_string_equal(got.error_code, "attempts_exhausted");
    assert_string_equal(got.error_message, "vramd stopped while it ran, 3 attempts used");
    job_record_clear(&got);

    assert_int_equal(state_of(f->j, queued), JOB_QUEUED);
    assert_int_equal(state_of(f->j, done_id), JOB_SUCCEEDED);

    /* nothing running: recovery is a no-op */
    assert_int_equal(journal_recover(f->j, 7000, &requeued, &failed), JOURNAL_OK);
    assert_int_equal(requeued, 1); /* fresh was running again */
    assert_int_equal(failed, 0);
    assert_int_equal(journal_recover(f->j, 7001, NULL, NULL), JOURNAL_OK);

    /* a job allowed one attempt fails with the singular message */
    job_record_t one;
    make_job(&one, "a", 1, 5);
    one.max_attempts = 1;
    assert_int_equal(journal_insert(f->j, &one), JOURNAL_OK);
    assert_int_equal(journal_mark_running(f->j, one.id, 10, 0), JOURNAL_OK);
    assert_int_equal(journal_recover(f->j, 8000, &requeued, &failed), JOURNAL_OK);
    assert_int_equal(failed, 1);
    assert_int_equal(journal_get(f->j, one.id, false, &got), JOURNAL_OK);
    assert_string_equal(got.error_message, "vramd stopped while it ran, 1 attempt used");
    job_record_clear(&got);
}

static int count_model_cb(const char *model, uint64_t count, void *ctx)
{
    char *out = ctx;
    size_t len = strlen(out);
    snprintf(out + len, 256 - len, "%s=%llu;", model, (unsigned long long)count);
    return 0;
}

static void test_counts(void **state)
{
    fixture_t *f = *state;
    uint64_t counts[JOB_STATE_COUNT];
    char ids[8][JOB_ID_SIZE];
    char text[256] = "";

    assert_int_equal(journal_counts(f->j, counts), JOURNAL_OK);
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        assert_int_equal(counts[s], 0);
    for (int i = 0; i < 8; i++)
        insert_job(f->j, ids[i], i < 5 ? "a" : "b", 1, i);
    assert_int_equal(journal_mark_running(f->j, ids[0], 1, 0), JOURNAL_OK);
    assert_int_equal(journal_mark_running(f->j, ids[1], 1, 0), JOURNAL_OK);
    finish(f->j, ids[1], JOB_SUCCEEDED, 2);
    finish(f->j, ids[2], JOB_FAILED, 2);
    assert_int_equal(journal_cancel(f->j, ids[3], 3, NULL), JOURNAL_OK);

    assert_int_equal(journal_counts(f->j, counts), JOURNAL_OK);
    assert_int_equal(counts[JOB_QUEUED], 4);
    assert_int_equal(counts[JOB_RUNNING], 1);
    assert_int_equal(counts[JOB_SUCCEEDED], 1);
    assert_int_equal(counts[JOB_FAILED], 1);
    assert_int_equal(counts[JOB_CANCELLED], 1);

    assert_int_equal(journal_count_by_model(f->j, JOB_QUEUED, count_model_cb, text), JOURNAL_OK);
    assert_string_equal(text, "a=1;b=3;");
}


static void test_list_filters_and_paging(void **state)
{
    fixture_t *f = *state;
    char ids[25][JOB_ID_SIZE];
    collected_t got;
    journal_cursor_t cur, next;
    size_t n;

    for (int i = 0; i < 25; i++) {
        /* created in pairs: the order is still the order of insertion */
        insert_job(f->j, ids[i], i % 2 ? "b" : "a", 1, 1000 + i / 2);
        if (i % 3 == 0) {
            assert_int_equal(journal_mark_running(f->j, ids[i], 2000, 0), JOURNAL_OK);
            finish(f->j, ids[i], JOB_SUCCEEDED, 2001);
        }
    }

    /* all, in pages of 10: every job exactly once, newest first */
    memset(&got, 0, sizeof got);
    memset(&cur, 0, sizeof cur);
    int pages = 0;
    do {
        assert_int_equal(journal_list(f->j, NULL, &cur, 10, collect_cb, &got, &next, &n), JOURNAL_OK);
        pages++;
        cur = next;
    } while (next.valid && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(got.n, 25);
    for (size_t i = 0; i < got.n; i++) {
        assert_string_equal(got.ids[i], ids[24 - i]);
        assert_true(i == 0 || got.seq[i - 1] > got.seq[i]);
    }
    /* exactly a page: no cursor after it */
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, NULL, NULL, 25, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 25);
    assert_false(next.valid);

    /* filters */
    journal_filter_t by_state = {.state = JOB_SUCCEEDED, .model = NULL};
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, &by_state, NULL, 100, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 9); /* i = 0,3,...,24 */
    journal_filter_t by_model = {.state = -1, .model = "b"};
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, &by_model, NULL, 100, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 12);
    journal_filter_t both = {.state = JOB_QUEUED, .model = "a"};
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, &both, NULL, 100, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 8); /* 13 in a, 5 of them (i = 0,6,12,18,24) succeeded */
    journal_filter_t none = {.state = JOB_CANCELLED, .model = NULL};
    assert_int_equal(journal_list(f->j, &none, NULL, 100, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 0);
    journal_filter_t bad = {.state = 17, .model = NULL};
    assert_int_equal(journal_list(f->j, &bad, NULL, 100, collect_cb, &got, &next, &n), JOURNAL_INVALID);

    /* the callback stops early: the cursor continues right after what it saw */
    memset(&got, 0, sizeof got);
    got.stop_after = 4;
    assert_int_equal(journal_list(f->j, NULL, NULL, 10, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_int_equal(n, 4);
    assert_true(next.valid);
    char first_of_next[JOB_ID_SIZE];
    collected_t rest;
    memset(&rest, 0, sizeof rest);
    assert_int_equal(journal_list(f->j, NULL, &next, 1, collect_cb, &rest, NULL, NULL), JOURNAL_OK);
    memcpy(first_of_next, rest.ids[0], JOB_ID_SIZE);
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, NULL, NULL, 5, collect_cb, &got, NULL, NULL), JOURNAL_OK);
    assert_string_equal(got.ids[4], first_of_next);
}


/* The cursor's text form: what format writes, parse reads back, and nothing else. */
static void test_cursor_text(void **state)
{
    char text[JOURNAL_CURSOR_TEXT_MAX];
    journal_cursor_t parsed, next = {.valid = true, .seq = 4711};

    journal_cursor_format(&next, text, sizeof text);
    assert_string_equal(text, "4711");
    assert_int_equal(journal_cursor_parse(text, &parsed), 0);
    assert_true(parsed.valid);
    assert_int_equal(parsed.seq, next.seq);
    journal_cursor_t invalid = {.valid = false};
    journal_cursor_format(&invalid, text, sizeof text);
    assert_string_equal(text, "");
    assert_int_equal(journal_cursor_parse("9223372036854775807", &parsed), 0);
    assert_int_equal(parsed.seq, INT64_MAX);
    journal_cursor_format(&parsed, text, sizeof text);
    assert_string_equal(text, "9223372036854775807");
    /* not what format writes: refused (the old "<created_ms>-<id>" form included) */
    const char *bad_cursors[] = {"", "-", "0", "012", "-1", "+1", " 1", "1 ", "1x", "x", "12-",
                                 "9223372036854775808", "99999999999999999999",
                                 "1764000000123-0123456789abcdef0123456789abcdef", "12-../../etc/passwd"};
    for (size_t i = 0; i < sizeof bad_cursors / sizeof bad_cursors[0]; i++) {
        if (journal_cursor_parse(bad_cursors[i], &parsed) != -1)
            fail_msg("cursor \"%s\" accepted", bad_cursors[i]);
    }
    assert_int_equal(journal_cursor_parse(NULL, &parsed), -1);
}

static void insert_burst(journal_t *j, const int *priorities)
{
    for (int i = 0; i < 6; i++) {
        job_record_t r;
        make_job(&r, i % 2 ? "b" : "a", priorities[i], 1764000000123);
        memcpy(r.id, burst_ids[i], JOB_ID_SIZE);
        int rc = journal_insert(j, &r);
        if (rc != JOURNAL_OK)
            fail_msg("insert %d: %d %s", i, rc, journal_errmsg(j));
    }
}

static void test_same_millisecond_list_order(void **state)
{
    fixture_t *f = *state;
    const int same[6] = {1, 1, 1, 1, 1, 1};
    collected_t got;
    journal_cursor_t cur, next;
    char text[JOURNAL_CURSOR_TEXT_MAX];
    size_t n;

    insert_burst(f->j, same);
    /* newest first, in pages of 2, each cursor through its text form (as a client has it) */
    memset(&got, 0, sizeof got);
    memset(&cur, 0, sizeof cur);
    int pages = 0;
    do {
        assert_int_equal(journal_list(f->j, NULL, &cur, 2, collect_cb, &got, &next, &n), JOURNAL_OK);
        assert_int_equal(n, 2);
        pages++;
        journal_cursor_format(&next, text, sizeof text);
        if (next.valid)
            assert_int_equal(journal_cursor_parse(text, &cur), 0);
    } while (next.valid && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(got.n, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(got.ids[i], burst_ids[5 - i]);

    /* filtered by model: the same order within the model */
    journal_filter_t by_model = {.state = -1, .model = "b"};
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(f->j, &by_model, NULL, 1, collect_cb, &got, &next, &n), JOURNAL_OK);
    assert_string_equal(got.ids[0], burst_ids[5]);
    assert_int_equal(journal_list(f->j, &by_model, &next, 10, collect_cb, &got, NULL, &n), JOURNAL_OK);
    assert_int_equal(got.n, 3);
    assert_string_equal(got.ids[1], burst_ids[3]);
    assert_string_equal(got.ids[2], burst_ids[1]);

    /* the sequence numbers a get shows go up with insertion */
    int64_t last = 0;
    for (int i = 0; i < 6; i++) {
        job_record_t r;
        assert_int_equal(journal_get(f->j, burst_ids[i], false, &r), JOURNAL_OK);
        assert_true(r.seq > last);
        last = r.seq;
        job_record_clear(&r);
    }
}

static void test_same_millisecond_run_order(void **state)
{
    fixture_t *f = *state;
    const int prio[6] = {1, 5, 1, 5, 1, 5};
    char ids[10][JOB_ID_SIZE];
    size_t n;

    insert_burst(f->j, prio);
    /* priority first, then first come first served */
    assert_int_equal(journal_next_queued(f->j, NULL, 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 6);
    const int want[6] = {1, 3, 5, 0, 2, 4};
    for (int i = 0; i < 6; i++)
        assert_string_equal(ids[i], burst_ids[want[i]]);
    /* per model ("a" has 0, 2, 4 at priority 1) */
    assert_int_equal(journal_next_queued(f->j, "a", 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(ids[i], burst_ids[2 * i]);
}

typedef struct purged {
    char ids[16][JOB_ID_SIZE];
    size_t n;
} purged_t;

static void purge_cb(const char *id, void *ctx)
{
    purged_t *p = ctx;
    assert_true(p->n < 16);
    memcpy(p->ids[p->n++], id, JOB_ID_SIZE);
}

static void test_purge(void **state)
{
    fixture_t *f = *state;
    char old1[JOB_ID_SIZE], old2[JOB_ID_SIZE], old3[JOB_ID_SIZE], young[JOB_ID_SIZE], queued[JOB_ID_SIZE];
    char running[JOB_ID_SIZE];
    purged_t p;
    size_t n;

    insert_job(f->j, old1, "a", 1, 1);
    insert_job(f->j, old2, "a", 1, 1);
    insert_job(f->j, old3, "a", 1, 1);
    insert_job(f->j, young, "a", 1, 1);
    insert_job(f->j, queued, "a", 1, 1);
    insert_job(f->j, running, "a", 1, 1);
    finish(f->j, old1, JOB_FAILED, 100);
    assert_int_equal(journal_cancel(f->j, old2, 200, NULL), JOURNAL_OK);
    finish(f->j, old3, JOB_SUCCEEDED, 300);
    finish(f->j, young, JOB_SUCCEEDED, 5000);
    assert_int_equal(journal_mark_running(f->j, running, 10, 0), JOURNAL_OK);

    memset(&p, 0, sizeof p);
    assert_int_equal(journal_purge(f->j, 1000, 2, purge_cb, &p, &n), JOURNAL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.ids[0], old1); /* oldest first */
    assert_string_equal(p.ids[1], old2);
    assert_int_equal(journal_purge(f->j, 1000, 2, purge_cb, &p, &n), JOURNAL_OK);
    assert_int_equal(n, 1);
    assert_string_equal(p.ids[2], old3);
    assert_int_equal(journal_purge(f->j, 1000, 2, purge_cb, &p, &n), JOURNAL_OK);
    assert_int_equal(n, 0);

    assert_int_equal(journal_peek(f->j, old1, NULL, NULL), JOURNAL_NOT_FOUND);
    assert_int_equal(journal_peek(f->j, old3, NULL, NULL), JOURNAL_NOT_FOUND);
    assert_int_equal(state_of(f->j, young), JOB_SUCCEEDED);
    /* live jobs are never purged, however old */
    assert_int_equal(journal_purge(f->j, INT64_MAX, 100, NULL, NULL, &n), JOURNAL_OK);
    assert_int_equal(n, 1); /* young */
    assert_int_equal(state_of(f->j, queued), JOB_QUEUED);
    assert_int_equal(state_of(f->j, running), JOB_RUNNING);
}

static void test_state_names(void **state)
{
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        assert_int_equal(job_state_parse(job_state_name((enum job_state)s)), s);
    for (int s = 0; s < JOB_RESULT_STATE_COUNT; s++)
        assert_int_equal(job_result_state_parse(job_result_state_name((enum job_result_state)s)), s);
    assert_string_equal(job_state_name(JOB_STATE_COUNT), "unknown");
    assert_int_equal(job_state_parse("Queued"), -1);
    assert_int_equal(job_state_parse(NULL), -1);
    assert_int_equal(job_result_state_parse("gone"), -1);
    assert_true(job_state_is_final(JOB_CANCELLED));
    assert_false(job_state_is_final(JOB_RUNNING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_insert_get_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pragmas_in_effect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_queued_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overdue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_each_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requeue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_filters_and_paging, setup, teardown),
        cmocka_unit_test(test_cursor_text),
        cmocka_unit_test_setup_teardown(test_same_millisecond_list_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_millisecond_run_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_purge, setup, teardown),
        cmocka_unit_test(test_state_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
