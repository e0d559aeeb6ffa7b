/*
 * test_journal_store: the SQLite job journal (src/jobstore/journal*.c) as storage, on real
 * database files in a mkdtemp directory. What it stores and its order: test_journal.c.
 *
 * Covers: disk full mapped to JOURNAL_FULL (a page cap, and a real 512 KiB tmpfs that fills
 * up: skipped with a message when tmpfs cannot be mounted); reopen keeps everything; a child
 * SIGKILLed right after insert returned leaves the job readable; schema versioning (a newer
 * version and a foreign database are refused; a version 1 journal, a burst in one
 * millisecond in it, is migrated to version 3 and keeps its jobs in order of insertion; a
 * version 2 journal gets the client column in place, its jobs with no submitter).
 * Run: make build/tests/test_journal_store && build/tests/test_journal_store (and SAN=1).
 */
#include "journal_fixture.h"

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void test_disk_full(void **state)
{
    fixture_t *f = *state;
    job_record_t r;
    size_t big = 1 << 20;
    unsigned char *body = calloc(1, big);

    /* cap the database at its current size: the next large write fails with SQLITE_FULL */
    assert_int_equal(sqlite3_exec(f->j->db, "PRAGMA max_page_count = 20", NULL, NULL, NULL), SQLITE_OK);
    make_job(&r, "a", 1, 1);
    r.body = body;
    r.body_len = big;
    assert_int_equal(journal_insert(f->j, &r), JOURNAL_FULL);
    assert_non_null(strstr(journal_errmsg(f->j), "disk full"));
    assert_int_equal(journal_peek(f->j, r.id, NULL, NULL), JOURNAL_NOT_FOUND);
    assert_true(sqlite3_get_autocommit(f->j->db));
    /* small jobs still fit, and the journal goes on working */
    r.body_len = 10;
    assert_int_equal(journal_insert(f->j, &r), JOURNAL_OK);
    free(body);
}

/* A real full filesystem: a 512 KiB tmpfs. Inserts fail with JOURNAL_FULL (never a crash or a
 * half-written job), the jobs already accepted stay readable, and the journal keeps working. */
static void test_disk_full_tmpfs(void **state)
{
    fixture_t *f = *state;
    char mnt[128], path[160], err[JOURNAL_ERR_MAX], first[JOB_ID_SIZE] = "";
    size_t big = 64 * 1024, accepted = 0;
    unsigned char *body = malloc(big);
    job_record_t r, got;
    int rc = JOURNAL_OK;

    snprintf(mnt, sizeof mnt, "%s/tiny", f->dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=512k") != 0) {
        free(body);
        print_message("SKIPPED test_disk_full_tmpfs: cannot mount a tmpfs (%s); needs root\n", strerror(errno));
        skip();
    }
    snprintf(path, sizeof path, "%s/jobs.db", mnt);
    journal_t *j = journal_open(path, err, sizeof err);
    assert_non_null(j);
    memset(body, 0x5a, big);
    for (int i = 0; i < 64 && rc == JOURNAL_OK; i++) {
        make_job(&r, "a", 1, i);
        r.body = body;
        r.body_len = big;
        rc = journal_insert(j, &r);
        if (rc == JOURNAL_OK) {
            if (accepted++ == 0)
                memcpy(first, r.id, JOB_ID_SIZE);
        }
    }
    assert_int_equal(rc, JOURNAL_FULL);
    assert_non_null(strstr(journal_errmsg(j), "disk full"));
    assert_true(accepted >= 1);
    assert_int_equal(journal_peek(j, r.id, NULL, NULL), JOURNAL_NOT_FOUND);
    uint64_t counts[JOB_STATE_COUNT];
    assert_int_equal(journal_counts(j, counts), JOURNAL_OK);
    assert_int_equal(counts[JOB_QUEUED], accepted);
    assert_int_equal(journal_get(j, first, true, &got), JOURNAL_OK);
    assert_int_equal(got.body_len, big);
    job_record_clear(&got);
    journal_close(j);
    /* everything accepted is still there after a reopen */
    j = journal_open(path, err, sizeof err);
    assert_non_null(j);
    assert_int_equal(journal_counts(j, counts), JOURNAL_OK);
    assert_int_equal(counts[JOB_QUEUED], accepted);
    journal_close(j);
    free(body);
    assert_int_equal(umount(mnt), 0);
}

static void test_reopen_keeps_everything(void **state)
{
    fixture_t *f = *state;
    char a[JOB_ID_SIZE], b[JOB_ID_SIZE], err[JOURNAL_ERR_MAX];
    job_record_t got;

    insert_job(f->j, a, "a", 3, 1);
    insert_job(f->j, b, "b", 4, 2);
    assert_int_equal(journal_mark_running(f->j, b, 10, 1), JOURNAL_OK);
    journal_close(f->j);
    f->j = journal_open(f->path, err, sizeof err);
    assert_non_null(f->j);
    assert_int_equal(journal_get(f->j, a, false, &got), JOURNAL_OK);
    assert_int_equal(got.priority, 3);
    assert_int_equal(got.state, JOB_QUEUED);
    job_record_clear(&got);
    assert_int_equal(journal_get(f->j, b, false, &got), JOURNAL_OK);
    assert_int_equal(got.state, JOB_RUNNING);
    assert_int_equal(got.gpu, 1);
    job_record_clear(&got);
}

static void test_survives_sigkill_after_insert(void **state)
{
    fixture_t *f = *state;
    int pipefd[2];
    char id[JOB_ID_SIZE] = "", err[JOURNAL_ERR_MAX];
    unsigned char body[100];

    memset(body, 0xab, sizeof body);
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the child opens its own connection, inserts, tells the id, and dies at once */
        close(pipefd[0]);
        journal_t *cj = journal_open(f->path, err, sizeof err);
        job_record_t r;
        if (cj == NULL)
            _exit(2);
        make_job(&r, "killed", 2, 77);
        r.body = body;
        r.body_len = sizeof body;
        if (journal_insert(cj, &r) != JOURNAL_OK)
            _exit(3);
        if (write(pipefd[1], r.id, JOB_ID_LEN) != JOB_ID_LEN)
            _exit(4);
        raise(SIGKILL);
        _exit(5);
    }
    close(pipefd[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_int_equal(read(pipefd[0], id, JOB_ID_LEN), JOB_ID_LEN);
    close(pipefd[0]);
    id[JOB_ID_LEN] = '\0';

    /* a fresh connection (the fixture's may have cached pages) sees the job */
    journal_close(f->j);
    f->j = journal_open(f->path, err, sizeof err);
    assert_non_null(f->j);
    job_record_t got;
    assert_int_equal(journal_get(f->j, id, true, &got), JOURNAL_OK);
    assert_string_equal(got.model, "killed");
    assert_int_equal(got.state, JOB_QUEUED);
    assert_int_equal(got.body_len, sizeof body);
    assert_memory_equal(got.body, body, sizeof body);
    job_record_clear(&got);
}

static void test_schema_versions(void **state)
{
    fixture_t *f = *state;
    char err[JOURNAL_ERR_MAX], path[160];
    sqlite3 *db;

    /* a newer schema is refused with a clear error */
    journal_close(f->j);
    f->j = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 4", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_null(journal_open(f->path, err, sizeof err));
    assert_non_null(strstr(err, "schema version 4 is newer than this vramd understands (3)"));

    /* a database that is not a journal is refused, not modified */
    snprintf(path, sizeof path, "%s/other.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t (x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_null(journal_open(path, err, sizeof err));
    assert_non_null(strstr(err, "not a vramd job journal"));

    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/missing/jobs.db", f->dir);
    assert_null(journal_open(path, err, sizeof err));
    assert_non_null(strstr(err, "missing/jobs.db"));
    assert_null(journal_open("", err, sizeof err));

    /* reopen the real one at version 3 for teardown */
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 3", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    f->j = journal_open(f->path, err, sizeof err);
    assert_non_null(f->j);
}

/* The schema of version 1 as that vramd created it (indexes ordered by created_ms, then id). */
static const char *const v1_schema_sql =
    "CREATE TABLE jobs (rowid_ INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, model TEXT NOT NULL,"
    " method TEXT NOT NULL, path TEXT NOT NULL, headers TEXT NOT NULL DEFAULT '{}', request_id TEXT,"
    " priority INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 9), deadline_ms INTEGER NOT NULL DEFAULT 0,"
    " state TEXT NOT NULL CHECK (state IN ('queued','running','succeeded','failed','cancelled')),"
    " attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, created_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0,"
    " degrade_level INTEGER NOT NULL DEFAULT 0, gpu INTEGER NOT NULL DEFAULT -1,"
    " http_status INTEGER NOT NULL DEFAULT 0, error_code TEXT, error_message TEXT, result_type TEXT,"
    " result_bytes INTEGER NOT NULL DEFAULT 0, result_state TEXT NOT NULL DEFAULT 'none'"
    " CHECK (result_state IN ('none','stored','removed')), body BLOB);"
    "CREATE INDEX jobs_queue ON jobs (state, model, priority DESC, created_ms, id);"
    "CREATE INDEX jobs_run ON jobs (state, priority DESC, created_ms, id);"
    "CREATE INDEX jobs_created ON jobs (created_ms, id);"
    "CREATE INDEX jobs_state_created ON jobs (state, created_ms, id);"
    "CREATE INDEX jobs_model_created ON jobs (model, created_ms, id);"
    "CREATE INDEX jobs_finished ON jobs (finished_ms) WHERE finished_ms > 0;"
    "CREATE INDEX jobs_overdue ON jobs (deadline_ms) WHERE state = 'queued' AND deadline_ms > 0;"
    "PRAGMA user_version = 1;";

static bool has_index(sqlite3 *db, const char *name)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?1", -1,
                                        &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    bool found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return found;
}

/* A journal written by version 1 (a burst in one millisecond in it) opens as version 2: its
 * jobs keep their order of insertion, and new ones come after them. */
static void test_schema_v1_migrated(void **state)
{
    fixture_t *f = *state;
    char err[JOURNAL_ERR_MAX], path[160], sql[512], ids[10][JOB_ID_SIZE], text[32];
    collected_t got;
    size_t n;
    sqlite3 *db;

    snprintf(path, sizeof path, "%s/v1.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, v1_schema_sql, NULL, NULL, NULL), SQLITE_OK);
    for (int i = 0; i < 4; i++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO jobs (id, model, method, path, priority, state, max_attempts, created_ms)"
                 " VALUES ('%s', 'a', 'POST', '/g', %d, 'queued', 3, 1764000000123)",
                 burst_ids[i], i == 3 ? 5 : 1);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    }
    sqlite3_close(db);

    journal_t *j = journal_open(path, err, sizeof err);
    if (j == NULL)
        fail_msg("open v1: %s", err);
    assert_int_equal(pragma_text(j->db, "PRAGMA user_version", text, sizeof text), SQLITE_OK);
    assert_string_equal(text, "3");
    assert_false(has_index(j->db, "jobs_created"));
    assert_false(has_index(j->db, "jobs_state_created"));
    assert_true(has_index(j->db, "jobs_state"));
    assert_true(has_index(j->db, "jobs_overdue"));
    assert_plan(j->db, ST_NEXT_ALL, "jobs_run");

    char late[JOB_ID_SIZE];
    insert_job(j, late, "a", 1, 1); /* an older created_ms: still the newest job */
    memset(&got, 0, sizeof got);
    assert_int_equal(journal_list(j, NULL, NULL, 10, collect_cb, &got, NULL, &n), JOURNAL_OK);
    assert_int_equal(n, 5);
    assert_string_equal(got.ids[0], late);
    for (int i = 1; i < 5; i++)
        assert_string_equal(got.ids[i], burst_ids[4 - i]);
    assert_int_equal(journal_next_queued(j, "a", 10, ids, &n), JOURNAL_OK);
    assert_int_equal(n, 5);
    assert_string_equal(ids[0], burst_ids[3]);
    assert_string_equal(ids[1], burst_ids[0]);
    assert_string_equal(ids[2], burst_ids[1]);
    assert_string_equal(ids[3], burst_ids[2]);
    assert_string_equal(ids[4], late);
    journal_close(j);

    /* opening it again changes nothing */
    j = journal_open(path, err, sizeof err);
    assert_non_null(j);
    assert_true(has_index(j->db, "jobs_model"));
    journal_close(j);

    /* a "version 1" table without the sequence column is refused, not modified */
    snprintf(path, sizeof path, "%s/v1-odd.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE jobs (id TEXT); PRAGMA user_version = 1", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_null(journal_open(path, err, sizeof err));
    assert_non_null(strstr(err, "without a rowid_ column"));
}

/* A journal written by version 2 (v1's table, v2's indexes, a queued job with a body) opens
 * as version 3 in place: the old job reads back whole with no submitter (client NULL), a new
 * job stores and reads back its submitter with its body (not without it), and opening
 * again changes nothing. */
static void test_schema_v2_migrated(void **state)
{
    fixture_t *f = *state;
    char err[JOURNAL_ERR_MAX], path[160], text[32];
    sqlite3 *db;

    snprintf(path, sizeof path, "%s/v2.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, v1_schema_sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "DROP INDEX jobs_queue; DROP INDEX jobs_run; DROP INDEX jobs_created;"
                                  "DROP INDEX jobs_state_created; DROP INDEX jobs_model_created;"
                                  "CREATE INDEX jobs_queue ON jobs (state, model, priority DESC, rowid_);"
                                  "CREATE INDEX jobs_run ON jobs (state, priority DESC, rowid_);"
                                  "CREATE INDEX jobs_state ON jobs (state, rowid_);"
                                  "CREATE INDEX jobs_model ON jobs (model, rowid_);"
                                  "INSERT INTO jobs (id, model, method, path, priority, state, max_attempts, created_ms,"
                                  " body) VALUES ('00000000000000000000000000000001', 'a', 'POST', '/g', 1, 'queued',"
                                  " 3, 1764000000123, X'7b7d');"
                                  "PRAGMA user_version = 2;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    journal_t *j = journal_open(path, err, sizeof err);
    if (j == NULL)
        fail_msg("open v2: %s", err);
    assert_int_equal(pragma_text(j->db, "PRAGMA user_version", text, sizeof text), SQLITE_OK);
    assert_string_equal(text, "3");
    job_record_t got;
    assert_int_equal(journal_get(j, "00000000000000000000000000000001", true, &got), JOURNAL_OK);
    assert_int_equal(got.body_len, 2);
    assert_memory_equal(got.body, "{}", 2);
    assert_null(got.client_json);
    job_record_clear(&got);

    job_record_t rec;
    job_record_init(&rec);
    assert_int_equal(job_id_generate(rec.id), 0);
    rec.model = "a";
    rec.method = "POST";
    rec.path = "/g";
    rec.priority = 1;
    rec.max_attempts = 3;
    rec.created_ms = 1764000000999;
    rec.body = (unsigned char *)"xy";
    rec.body_len = 2;
    rec.client_json = "{\"peer\":\"10.1.2.3:5555\"}";
    assert_int_equal(journal_insert(j, &rec), JOURNAL_OK);
    assert_int_equal(journal_get(j, rec.id, true, &got), JOURNAL_OK);
    assert_string_equal(got.client_json, "{\"peer\":\"10.1.2.3:5555\"}");
    assert_int_equal(got.body_len, 2);
    job_record_clear(&got);
    assert_int_equal(journal_get(j, rec.id, false, &got), JOURNAL_OK);
    assert_null(got.client_json); /* read only with the body */
    job_record_clear(&got);
    journal_close(j);

    j = journal_open(path, err, sizeof err);
    assert_non_null(j);
    assert_int_equal(journal_get(j, rec.id, true, &got), JOURNAL_OK);
    assert_string_equal(got.client_json, "{\"peer\":\"10.1.2.3:5555\"}");
    job_record_clear(&got);
    journal_close(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full_tmpfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_survives_sigkill_after_insert, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_v1_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_v2_migrated, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
