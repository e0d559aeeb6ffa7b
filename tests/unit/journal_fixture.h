/*
 * journal_fixture: what the journal's unit tests share (test_journal.c, test_journal_store.c):
 * a fresh journal in a mkdtemp directory per test (setup/teardown), job builders, a list
 * collector, a pragma reader and a query-plan check on the journal's own connection, and the
 * ids of a burst of jobs inserted within one millisecond.
 * Included by test files only (static inline: each test uses what it needs).
 */
#ifndef VRAMD_TESTS_JOURNAL_FIXTURE_H
#define VRAMD_TESTS_JOURNAL_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <sqlite3.h>

#include "jobstore/journal_internal.h"

/* The first column of the first row of sql on db, as text ("" when no row). */
static inline int pragma_text(sqlite3 *db, const char *sql, char *out, size_t outlen)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    const unsigned char *t = rc == SQLITE_ROW ? sqlite3_column_text(s, 0) : NULL;
    snprintf(out, outlen, "%s", t != NULL ? (const char *)t : "");
    sqlite3_finalize(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

typedef struct fixture {
    char dir[64];
    char path[128];
    journal_t *j;
} fixture_t;

static inline int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    char err[JOURNAL_ERR_MAX];
    snprintf(f->dir, sizeof f->dir, "/tmp/test_journal.XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/jobs.db", f->dir);
    f->j = journal_open(f->path, err, sizeof err);
    if (f->j == NULL) {
        fprintf(stderr, "journal_open: %s\n", err);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static inline int teardown(void **state)
{
    fixture_t *f = *state;
    char cmd[160];
    journal_close(f->j);
    snprintf(cmd, sizeof cmd, "%s/tiny", f->dir);
    umount2(cmd, MNT_DETACH); /* a failed tmpfs test must not leave its mount behind */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

/* A queued job with a fresh id; strings are literals (the journal copies them). */
static inline void make_job(job_record_t *r, const char *model, int priority, int64_t created)
{
    job_record_init(r);
    assert_int_equal(job_id_generate(r->id), 0);
    r->model = (char *)model;
    r->method = (char *)"POST";
    r->path = (char *)"/generate";
    r->priority = priority;
    r->max_attempts = 3;
    r->created_ms = created;
}

static inline void insert_job(journal_t *j, char id_out[JOB_ID_SIZE], const char *model, int priority, int64_t created)
{
    job_record_t r;
    make_job(&r, model, priority, created);
    int rc = journal_insert(j, &r);
    if (rc != JOURNAL_OK)
        fail_msg("insert: %d %s", rc, journal_errmsg(j));
    memcpy(id_out, r.id, JOB_ID_SIZE);
}

static inline enum job_state state_of(journal_t *j, const char *id)
{
    enum job_state st = JOB_STATE_COUNT;
    assert_int_equal(journal_peek(j, id, &st, NULL), JOURNAL_OK);
    return st;
}

static inline void finish(journal_t *j, const char *id, enum job_state st, int64_t now)
{
    job_outcome_t o = {.state = st, .http_status = st == JOB_SUCCEEDED ? 200 : 502, .gpu = -1};
    if (st == JOB_FAILED) {
        o.error_code = "worker_failed";
        o.error_message = "boom";
    }
    int rc = journal_mark_finished(j, id, &o, now);
    if (rc != JOURNAL_OK)
        fail_msg("finish: %d %s", rc, journal_errmsg(j));
}

/* The query plan of one of the journal's statements names `index` and sorts nothing. */
static inline void assert_plan(sqlite3 *db, enum stmt_id which, const char *index)
{
    char sql[1024];
    sqlite3_stmt *s;
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", jnl_stmt_sql[which]);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    bool uses_index = false, sorts = false;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(s, 3);
        if (strstr(detail, index) != NULL)
            uses_index = true;
        if (strstr(detail, "TEMP B-TREE") != NULL)
            sorts = true;
    }
    sqlite3_finalize(s);
    if (!uses_index || sorts)
        fail_msg("statement %d: index %s used: %d, sorts: %d", (int)which, index, uses_index, sorts);
}

typedef struct collected {
    char ids[64][JOB_ID_SIZE];
    int64_t seq[64];
    size_t n;
    size_t stop_after; /* 0 = never stop */
} collected_t;

static inline int collect_cb(const job_record_t *rec, void *ctx)
{
    collected_t *c = ctx;
    assert_true(c->n < 64);
    assert_null(rec->body);
    memcpy(c->ids[c->n], rec->id, JOB_ID_SIZE);
    c->seq[c->n] = rec->seq;
    c->n++;
    return c->stop_after != 0 && c->n >= c->stop_after;
}

/* A burst of submits lands in one millisecond: the order must still be the order of arrival.
 * The ids are chosen so that neither ascending nor descending id order is arrival order (a
 * tie broken by id would pass by luck half the time with random ids). */
static const char *const burst_ids[6] = {
    "c0000000000000000000000000000000", "10000000000000000000000000000000",
    "f0000000000000000000000000000000", "40000000000000000000000000000000",
    "80000000000000000000000000000000", "20000000000000000000000000000000",
};

#endif
