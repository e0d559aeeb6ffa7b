/*
 * jstore_pg_setup: the PostgreSQL store's set-up at every connect and its maintenance
 * (see jstore_pg.c for the design):
 *   connect -> BEGIN + advisory lock + vramd_meta -> schema version: created (0 -> 1) or
 *   checked (a newer one is refused) -> COMMIT -> this host's leases of a previous run
 *   released (its jobs requeued, or failed when their attempts are used up) -> LISTEN ->
 *   READY. Any step that fails closes the connection and the whole set-up starts again
 *   after the backoff.
 *   maintenance (every lease/4, at most 1 s): expired leases of any host released the same
 *   way, counts per state refreshed (for /metrics).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "jobstore/jstore_pg_int.h"

static const char SQL_REAP[] =
    "WITH x AS (UPDATE vramd_jobs SET "
    "state = CASE WHEN state = 'running' AND attempts >= max_attempts THEN 'failed' ELSE 'queued' END, "
    "finished_ms = CASE WHEN state = 'running' AND attempts >= max_attempts THEN $1::int8 ELSE finished_ms END, "
    "error_code = CASE WHEN state <> 'running' THEN error_code WHEN attempts >= max_attempts "
    "THEN 'attempts_exhausted' ELSE 'interrupted' END, "
    "error_message = CASE WHEN state <> 'running' THEN error_message WHEN attempts >= max_attempts "
    "THEN 'host ' || owner || ' lost its lease while it ran, ' || attempts || ' attempts used' "
    "ELSE 'interrupted: host ' || owner || ' lost its lease while it ran (attempt ' || attempts || ' of ' || "
    "max_attempts || ')' END, "
    "body = CASE WHEN state = 'running' AND attempts >= max_attempts THEN NULL ELSE body END, "
    "started_ms = CASE WHEN state = 'running' AND attempts < max_attempts THEN 0 ELSE started_ms END, "
    "gpu = CASE WHEN state = 'running' AND attempts < max_attempts THEN -1 ELSE gpu END, "
    "owner = NULL, lease = NULL, lease_until = NULL "
    "WHERE lease IS NOT NULL AND (($2::text IS NULL AND lease_until < clock_timestamp()) OR owner = $2::text) "
    "RETURNING model) "
    "SELECT count(*)::int8 FROM (SELECT pg_notify('" PG_CHANNEL "', model) FROM x) n";

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void done_reap(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    int rc = pg_result_rc(p, res);
    int64_t n = rc == JOURNAL_OK ? pg_changed(res) : 0;
    if (rc != JOURNAL_OK && p->state == PG_READY)
        log_event(LOG_WARN, "job_journal_error", "op=%s error=%s", "requeue_expired", p->why);
    if (n > 0) {
        log_event(LOG_WARN, "jobs_leases_expired", "requeued_or_failed=%" PRId64, n);
        if (p->ev.wake)
            p->ev.wake(p->ev.ctx);
    }
}

static void done_counts(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    p->maint_out = false;
    if (pg_result_rc(p, res) != JOURNAL_OK)
        return;
    memset(p->counts, 0, sizeof p->counts);
    for (int i = 0; i < PQntuples(res); i++) {
        char *st = pg_col_str(res, i, 0);
        int s = job_state_parse(st);
        free(st);
        if (s >= 0)
            p->counts[s] = (uint64_t)pg_col_int(res, i, 1);
    }
    p->counts_known = true;
}

static pg_query_t *reap_query(jstore_pg_t *p, const char *owner, pg_done_fn done)
{
    pg_query_t *q = pg_new_q(p, SQL_REAP, done, NULL, NULL, NULL);
    if (!q)
        return NULL;
    pg_param_i64(q, wall_ms());
    pg_param(q, owner);
    return q;
}

void pg_maintain(jstore_pg_t *p)
{
    if (p->state != PG_READY || p->maint_out)
        return;
    pg_query_t *r = reap_query(p, NULL, done_reap);
    pg_query_t *c = pg_new_q(p, "SELECT state, count(*)::int8 FROM vramd_jobs GROUP BY state", done_counts, NULL, NULL,
                          NULL);
    if (!r || !c) {
        pg_query_free(r);
        pg_query_free(c);
        return;
    }
    p->maint_out = true;
    pg_submit(p, r);
    pg_submit(p, c);
}

/* ---- set-up at connect: schema, recovery, LISTEN ---------------------------------------- */

static const char SQL_SETUP_BEGIN[] =
    "BEGIN; SELECT pg_advisory_xact_lock(7372690114); "
    "CREATE TABLE IF NOT EXISTS vramd_meta (key text PRIMARY KEY, value text NOT NULL); "
    "SELECT value FROM vramd_meta WHERE key = 'schema_version'";

/* Version 0 -> 1: the whole schema. A later version appends its own step. */
static const char SQL_MIGRATE_1[] =
    "CREATE TABLE vramd_jobs ("
    " seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id text NOT NULL UNIQUE CHECK (id ~ '^[0-9a-f]{32}$'),"
    " model text NOT NULL, method text NOT NULL, path text NOT NULL, headers text NOT NULL DEFAULT '{}',"
    " priority int NOT NULL CHECK (priority BETWEEN 0 AND 9), deadline_ms bigint NOT NULL DEFAULT 0,"
    " state text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),"
    " attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL,"
    " created_ms bigint NOT NULL, started_ms bigint NOT NULL DEFAULT 0, finished_ms bigint NOT NULL DEFAULT 0,"
    " degrade_level int NOT NULL DEFAULT 0, gpu int NOT NULL DEFAULT -1, http_status int NOT NULL DEFAULT 0,"
    " error_code text, error_message text, result_type text, result_bytes bigint NOT NULL DEFAULT 0,"
    " result_state text NOT NULL DEFAULT 'none' CHECK (result_state IN ('none', 'stored', 'removed')),"
    " est_bytes bigint NOT NULL DEFAULT 0, owner text, lease text, lease_until timestamptz,"
    " created_at timestamptz NOT NULL DEFAULT clock_timestamp(), client text, body bytea);"
    "CREATE TABLE vramd_job_results (job_id text PRIMARY KEY REFERENCES vramd_jobs (id) ON DELETE CASCADE,"
    " data bytea NOT NULL);"
    "CREATE INDEX vramd_jobs_claim ON vramd_jobs (model, priority DESC, seq) WHERE state = 'queued' AND lease IS NULL;"
    "CREATE INDEX vramd_jobs_leases ON vramd_jobs (lease_until) WHERE lease IS NOT NULL;"
    "CREATE INDEX vramd_jobs_owner ON vramd_jobs (owner) WHERE owner IS NOT NULL;"
    "CREATE INDEX vramd_jobs_state_seq ON vramd_jobs (state, seq);"
    "CREATE INDEX vramd_jobs_model_seq ON vramd_jobs (model, seq);"
    "CREATE INDEX vramd_jobs_finished ON vramd_jobs (finished_ms) WHERE finished_ms > 0;"
    "CREATE INDEX vramd_jobs_deadline ON vramd_jobs (deadline_ms) WHERE state = 'queued' AND deadline_ms > 0;"
    "CREATE FUNCTION vramd_aged_priority(p int, created timestamptz, aging_ms bigint) RETURNS int"
    " LANGUAGE sql VOLATILE AS $$ SELECT LEAST(9, p + floor(extract(epoch FROM clock_timestamp() - created)"
    " * 1000 / GREATEST(aging_ms, 1))::int) $$;"
    "INSERT INTO vramd_meta VALUES ('schema_version', '1') ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;"
    "COMMIT";

static pg_query_t *setup_q(jstore_pg_t *p, const char *sql, pg_done_fn done)
{
    pg_query_t *q = pg_new_q(p, sql, done, NULL, NULL, NULL);
    if (q)
        q->internal = true;
    return q;
}

static void setup_send(jstore_pg_t *p, pg_query_t *q, bool simple)
{
    if (!q) {
        pg_conn_fail(p, "setting up (out of memory)");
        return;
    }
    q->simple = simple;
    pg_submit(p, q);
}

static void done_listen(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    if (pg_result_rc(p, res) != JOURNAL_OK)
        pg_conn_fail(p, "LISTEN");
    else
        pg_ready(p);
}

static void done_recover(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    if (pg_result_rc(p, res) != JOURNAL_OK) {
        pg_conn_fail(p, "releasing this host's old leases");
        return;
    }
    int64_t n = pg_changed(res);
    if (n > 0)
        log_event(LOG_INFO, "jobs_recovered", "host_id=%s requeued_or_failed=%" PRId64, p->host_id, n);
    setup_send(p, setup_q(p, "LISTEN " PG_CHANNEL, done_listen), true);
}

static void done_schema(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    if (pg_result_rc(p, res) != JOURNAL_OK) {
        pg_conn_fail(p, "creating the schema");
        return;
    }
    pg_query_t *r = reap_query(p, p->host_id, done_recover);
    if (r)
        r->internal = true;
    setup_send(p, r, false);
}

static void done_version(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    (void)q;
    if (pg_result_rc(p, res) != JOURNAL_OK) {
        pg_conn_fail(p, "reading the schema version");
        return;
    }
    /* a simple query answers in text */
    long v = PQntuples(res) > 0 ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    if (v > PG_SCHEMA_VERSION) {
        log_event(LOG_ERROR, "jobs_postgres_schema", "error=schema version %ld is newer than this vramd understands (%d)",
                  v, PG_SCHEMA_VERSION);
        snprintf(p->why, sizeof p->why, "schema version %ld is newer than this vramd understands (%d)", v,
                 PG_SCHEMA_VERSION);
        pg_conn_fail(p, "checking the schema version");
        return;
    }
    if (v < PG_SCHEMA_VERSION)
        log_event(LOG_INFO, "jobs_postgres_schema", "from=%ld to=%d", v, PG_SCHEMA_VERSION);
    setup_send(p, setup_q(p, v < PG_SCHEMA_VERSION ? SQL_MIGRATE_1 : "COMMIT", done_schema), true);
}

void pg_setup(jstore_pg_t *p)
{
    setup_send(p, setup_q(p, SQL_SETUP_BEGIN, done_version), true);
}

