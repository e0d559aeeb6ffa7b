/*
 * test_jstore_sqlite: the job store interface (src/jobstore/jstore.h) on its SQLite
 * implementation (src/jobstore/jstore_sqlite.c), on a real journal in a mkdtemp directory.
 *
 * Covers the contract a caller relies on: every callback is called exactly once and before
 * the operation returns (the SQLite store is synchronous); records handed to a callback are
 * the stored ones; a claim gives queued jobs in run order (priority, then age) across
 * models, with their bodies, at most each model's `n` and the overall limit, skipping jobs
 * the caller has in flight; the SQLite store has no leases (tokens ignored, renew is OK,
 * lease_ms 0, results not inline); finish of a final job is a conflict; cancel reports the
 * state the job was in; list pages newest first; overdue jobs fail, skipping busy ones;
 * finish frees the result data it is given (ASan would see a leak otherwise).
 * Run: make build/tests/test_jstore_sqlite && build/tests/test_jstore_sqlite (and SAN=1).
 */
#include "journal_fixture.h"

#include "jobstore/jstore.h"

typedef struct seen {
    int calls;
    int rc;
    size_t n;
    char ids[16][JOB_ID_SIZE];
    int prio[16];
    size_t body_len[16];
    enum job_state was;
    enum job_state state;
    journal_cursor_t next;
} seen_t;

static void on_done(void *ctx, int rc, const char *err)
{
    seen_t *s = ctx;
    assert_non_null(err);
    s->calls++;
    s->rc = rc;
}

static void on_recs(void *ctx, int rc, const char *err, const job_record_t *recs, size_t n,
                    const journal_cursor_t *next)
{
    seen_t *s = ctx;
    assert_non_null(err);
    s->calls++;
    s->rc = rc;
    s->n = n;
    for (size_t i = 0; i < n && i < 16; i++) {
        memcpy(s->ids[i], recs[i].id, JOB_ID_SIZE);
        s->prio[i] = recs[i].priority;
        s->body_len[i] = recs[i].body_len;
        assert_string_equal(recs[i].token, "");
    }
    s->next = *next;
}

static void on_rec(void *ctx, int rc, const char *err, const job_record_t *rec)
{
    seen_t *s = ctx;
    assert_non_null(err);
    s->calls++;
    s->rc = rc;
    if (rc == JOURNAL_OK) {
        memcpy(s->ids[0], rec->id, JOB_ID_SIZE);
        s->state = rec->state;
    } else {
        assert_null(rec);
    }
}

static void on_cancel(void *ctx, int rc, const char *err, enum job_state was)
{
    seen_t *s = ctx;
    assert_non_null(err);
    s->calls++;
    s->rc = rc;
    s->was = was;
}

static void on_count(void *ctx, int rc, const char *err, size_t n)
{
    seen_t *s = ctx;
    assert_non_null(err);
    s->calls++;
    s->rc = rc;
    s->n = n;
}

static char g_busy[JOB_ID_SIZE];
static bool busy_one(const char *id, void *ctx)
{
    (void)ctx;
    return strcmp(id, g_busy) == 0;
}

/* The store owns the journal: take it from the fixture so teardown does not close it twice. */
static jstore_t *store_of(fixture_t *f)
{
    jstore_t *s = jstore_sqlite_new(f->j);
    assert_non_null(s);
    f->j = NULL;
    return s;
}

static void insert_body(jstore_t *s, char id[JOB_ID_SIZE], const char *model, int prio, size_t body_len)
{
    job_record_t r;
    static unsigned char body[64];
    make_job(&r, model, prio, 1000);
    r.body = body;
    r.body_len = body_len;
    seen_t seen = {0};
    jstore_insert(s, &r, on_done, &seen);
    assert_int_equal(seen.calls, 1); /* called before the operation returned */
    assert_int_equal(seen.rc, JOURNAL_OK);
    memcpy(id, r.id, JOB_ID_SIZE);
}

static void test_claim_order_limits_and_busy(void **state)
{
    fixture_t *f = *state;
    jstore_t *s = store_of(f);
    char a1[JOB_ID_SIZE], a2[JOB_ID_SIZE], a3[JOB_ID_SIZE], b1[JOB_ID_SIZE], b2[JOB_ID_SIZE];
    insert_body(s, a1, "a", 5, 3);
    insert_body(s, a2, "a", 5, 4);
    insert_body(s, b1, "b", 7, 5);
    insert_body(s, a3, "a", 9, 6);
    insert_body(s, b2, "b", 1, 7);
    assert_int_equal(s->lease_ms, 0);
    assert_false(s->inline_results);

    /* a: at most 2 (a3 first: priority 9, then a1: older than a2); b: at most 5 */
    jstore_want_t w[2] = {{.model = "a", .n = 2, .room_bytes = UINT64_MAX},
                          {.model = "b", .n = 5, .room_bytes = UINT64_MAX}};
    seen_t seen = {0};
    jstore_claim(s, w, 2, 10, NULL, NULL, on_recs, &seen);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.rc, JOURNAL_OK);
    assert_int_equal(seen.n, 4);
    assert_string_equal(seen.ids[0], a3); /* 9 */
    assert_string_equal(seen.ids[1], b1); /* 7 */
    assert_string_equal(seen.ids[2], a1); /* 5, older */
    assert_string_equal(seen.ids[3], b2); /* 1 */
    assert_int_equal(seen.body_len[0], 6); /* with their bodies */
    assert_false(seen.next.valid);

    /* the overall limit keeps the first in run order; a busy job is skipped */
    memcpy(g_busy, a3, JOB_ID_SIZE);
    w[0].in_flight = 1;
    memset(&seen, 0, sizeof seen);
    jstore_claim(s, w, 2, 2, busy_one, NULL, on_recs, &seen);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.ids[0], b1);
    assert_string_equal(seen.ids[1], a1);

    /* claims are only reads here: the jobs are still queued */
    memset(&seen, 0, sizeof seen);
    jstore_get(s, a1, on_rec, &seen);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.state, JOB_QUEUED);
    jstore_close(s);
}

static void test_attempt_writes_cancel_and_conflicts(void **state)
{
    fixture_t *f = *state;
    jstore_t *s = store_of(f);
    char a[JOB_ID_SIZE], b[JOB_ID_SIZE];
    insert_body(s, a, "m", 5, 1);
    insert_body(s, b, "m", 5, 1);
    seen_t seen = {0};

    /* tokens are ignored; renew always succeeds */
    jstore_mark_running(s, a, "whatever", 2000, 0, on_done, &seen);
    assert_int_equal(seen.rc, JOURNAL_OK);
    jstore_renew(s, a, "x", on_done, &seen);
    assert_int_equal(seen.rc, JOURNAL_OK);
    jstore_set_gpu(s, a, "", 1, on_done, &seen);
    assert_int_equal(seen.rc, JOURNAL_OK);
    job_outcome_t o = {.state = JOB_SUCCEEDED, .http_status = 200, .result_type = "text/plain", .result_bytes = 5,
                       .result_stored = true, .gpu = -1};
    void *data = malloc(5); /* the store frees it */
    jstore_finish(s, a, "", &o, 3000, data, 5, on_done, &seen);
    assert_int_equal(seen.rc, JOURNAL_OK);
    assert_int_equal(seen.calls, 4);

    /* a second finish, a cancel of a final job: conflicts, with the state it was in */
    jstore_finish(s, a, "", &o, 3001, NULL, 0, on_done, &seen);
    assert_int_equal(seen.rc, JOURNAL_CONFLICT);
    seen_t c = {0};
    jstore_cancel(s, a, 3002, on_cancel, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.rc, JOURNAL_CONFLICT);
    assert_int_equal(c.was, JOB_SUCCEEDED);
    memset(&c, 0, sizeof c);
    jstore_cancel(s, b, 3003, on_cancel, &c);
    assert_int_equal(c.rc, JOURNAL_OK);
    assert_int_equal(c.was, JOB_QUEUED);

    /* unknown ids */
    char none[JOB_ID_SIZE];
    assert_int_equal(job_id_generate(none), 0);
    memset(&c, 0, sizeof c);
    jstore_get(s, none, on_rec, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.rc, JOURNAL_NOT_FOUND);

    /* writes whose outcome nobody needs take a NULL callback */
    jstore_result_removed(s, a, NULL, NULL);
    memset(&c, 0, sizeof c);
    jstore_get(s, a, on_rec, &c);
    assert_int_equal(c.rc, JOURNAL_OK);
    uint64_t counts[JOB_STATE_COUNT] = {0};
    assert_int_equal(jstore_counts(s, counts), 0);
    assert_int_equal(counts[JOB_SUCCEEDED], 1);
    assert_int_equal(counts[JOB_CANCELLED], 1);
    jstore_close(s);
}

static void test_list_pages_and_overdue(void **state)
{
    fixture_t *f = *state;
    jstore_t *s = store_of(f);
    char ids[3][JOB_ID_SIZE];
    for (int i = 0; i < 3; i++)
        insert_body(s, ids[i], "m", 5, 1);
    seen_t seen = {0};
    journal_filter_t all = {.state = -1};
    jstore_list(s, &all, NULL, 2, on_recs, &seen);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.ids[0], ids[2]); /* newest first */
    assert_true(seen.next.valid);
    journal_cursor_t cur = seen.next;
    memset(&seen, 0, sizeof seen);
    jstore_list(s, &all, &cur, 2, on_recs, &seen);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.ids[0], ids[0]);
    assert_false(seen.next.valid);

    /* two queued jobs with a start deadline in the past; one is busy here: only one fails */
    job_record_t r;
    char late[2][JOB_ID_SIZE];
    for (int i = 0; i < 2; i++) {
        make_job(&r, "m", 5, 1000);
        r.deadline_wall_ms = 1500;
        seen_t d = {0};
        jstore_insert(s, &r, on_done, &d);
        assert_int_equal(d.rc, JOURNAL_OK);
        memcpy(late[i], r.id, JOB_ID_SIZE);
    }
    memcpy(g_busy, late[0], JOB_ID_SIZE);
    seen_t n = {0};
    jstore_fail_overdue(s, 2000, 10, busy_one, NULL, on_count, &n);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.rc, JOURNAL_OK);
    assert_int_equal(n.n, 1);
    seen_t g = {0};
    jstore_get(s, late[1], on_rec, &g);
    assert_int_equal(g.state, JOB_FAILED);
    memset(&g, 0, sizeof g);
    jstore_get(s, late[0], on_rec, &g);
    assert_int_equal(g.state, JOB_QUEUED);

    /* housekeeping purges final records past records_ttl, naming each */
    seen_t h = {0};
    jstore_housekeep(s, 2000 + 10000, 1000, 5000, NULL, NULL, on_count, &h);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.n, 1);
    jstore_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_claim_order_limits_and_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attempt_writes_cancel_and_conflicts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_pages_and_overdue, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
