/*
 * jstore_pg: the job store on PostgreSQL, shared by every host of a fleet (jobstore/jstore.h
 * gives the contract; jstore_pg_conn.c drives the connection; docs/fleet-jobs.md explains
 * the design and its limits).
 *
 * Schema (version PG_SCHEMA_VERSION in vramd_meta, created or migrated at connect inside
 * one transaction under an advisory lock, so hosts starting together do not race; a newer
 * version is refused): vramd_jobs (one row per job, the journal's columns plus est_bytes,
 * owner, lease, lease_until, created_at), vramd_job_results (job_id, data bytea).
 *
 * Claims: SELECT ... FOR UPDATE SKIP LOCKED in run order (aged priority desc, then seq),
 * then owner/lease/lease_until set in the same statement: two hosts never get the same job.
 * A job of a model this host serves that has waited longer than aging_ms holds back jobs of
 * no higher (aged) priority that came after it whose claim would leave it too little room
 * here (its estimate and theirs together over the room), so memory drains until it fits
 * (large jobs are not starved by a stream of small ones); so does such a job this host
 * claimed that has not reached a worker yet (its memory is not booked until then: a younger
 * job claimed beside it, or in the next pass, could take the memory while its worker starts).
 *
 * Fencing: every write tied to an attempt is `WHERE id = $1 AND lease = $2` (the claim's
 * token, a fresh UUID); a lease that expired was cleared by whoever requeued it, so a late
 * writer changes nothing (JOURNAL_CONFLICT). Leases are compared with the server's clock
 * only (clock_timestamp()), never a host's.
 *
 * Wake-ups: an insert, a requeue and an expired lease NOTIFY channel vramd_jobs; every host
 * LISTENs (jstore_pg_conn.c calls ev.wake). Notifications can be lost (a reconnect): the
 * runner's one-second tick is the fallback.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "jobstore/jstore_pg_int.h"

#define COLS                                                                                              \
    "id, model, method, path, headers, priority::int4, deadline_ms::int8, state, attempts::int4, "        \
    "max_attempts::int4, created_ms::int8, seq::int8, started_ms::int8, finished_ms::int8, "              \
    "degrade_level::int4, gpu::int4, http_status::int4, error_code, error_message, result_type, "         \
    "result_bytes::int8, result_state, est_bytes::int8, coalesce(lease, '')"
#define LEASE_FOR(p) "clock_timestamp() + make_interval(secs => " p "::float8 / 1000)"
#define AGED(t) "vramd_aged_priority(" t ".priority, " t ".created_at, $6::int8)"
#define PURGE_BATCH "10000"

static jstore_pg_t *P_(jstore_t *s) { return (jstore_pg_t *)s; }

static int64_t clamp64(uint64_t v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

#define CB(q, type) ((type)(void (*)(void))(q)->cb)

/* ---- simple writes: the answer is how many rows changed (0 = conflict) -------------- */

static void done_write(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_done_cb cb = CB(q, jstore_done_cb);
    int rc = pg_result_rc(p, res);
    if (rc == JOURNAL_OK && pg_changed(res) == 0) {
        rc = JOURNAL_CONFLICT;
        snprintf(p->why, sizeof p->why, "job %s: not in a state (or lease) that allows %s", q->id, "the change");
    }
    if (cb)
        cb(q->ctx, rc, rc == JOURNAL_OK ? "" : p->why);
}

static void write_oom(jstore_done_cb cb, void *ctx)
{
    if (cb)
        cb(ctx, JOURNAL_ERROR, "out of memory");
}

/* ---- operations ---------------------------------------------------------------------- */

static const char SQL_INSERT[] =
    "WITH ins AS (INSERT INTO vramd_jobs (id, model, method, path, headers, body, priority, deadline_ms, "
    "max_attempts, created_ms, est_bytes, client, state) VALUES ($1, $2, $3, $4, $5, $6, $7::int4, $8::int8, "
    "$9::int4, $10::int8, $11::int8, $12, 'queued') RETURNING model) "
    "SELECT count(*)::int8 FROM (SELECT pg_notify('" PG_CHANNEL "', model) FROM ins) n";

static void pg_insert(jstore_t *s, const job_record_t *rec, jstore_done_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p, SQL_INSERT, done_write, (void (*)(void))cb, ctx, rec->id);
    if (!q) {
        write_oom(cb, ctx);
        return;
    }
    pg_param(q, rec->id);
    pg_param(q, rec->model);
    pg_param(q, rec->method);
    pg_param(q, rec->path);
    pg_param(q, rec->headers_json ? rec->headers_json : "{}");
    void *body = NULL;
    if (rec->body_len) {
        body = malloc(rec->body_len);
        if (body)
            memcpy(body, rec->body, rec->body_len);
    }
    if (rec->body_len && !body) {
        pg_query_free(q);
        write_oom(cb, ctx);
        return;
    }
    if (body)
        pg_param_take_bytes(q, body, rec->body_len);
    else
        pg_param(q, NULL);
    pg_param_i64(q, rec->priority);
    pg_param_i64(q, rec->deadline_wall_ms);
    pg_param_i64(q, rec->max_attempts);
    pg_param_i64(q, rec->created_ms);
    pg_param_i64(q, clamp64(rec->est_bytes));
    pg_param(q, rec->client_json);
    pg_submit(p, q);
}

static void done_get(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_rec_cb cb = CB(q, jstore_rec_cb);
    int rc = pg_result_rc(p, res);
    if (rc == JOURNAL_OK && PQntuples(res) == 0) {
        snprintf(p->why, sizeof p->why, "job not found");
        rc = JOURNAL_NOT_FOUND;
    }
    if (rc != JOURNAL_OK) {
        cb(q->ctx, rc, p->why, NULL);
        return;
    }
    job_record_t rec;
    pg_read_record(res, 0, &rec, false);
    if (rec.state == JOB_QUEUED && PQnfields(res) > PG_N_COLS && !PQgetisnull(res, 0, PG_N_COLS))
        rec.queue_ahead = pg_col_int(res, 0, PG_N_COLS);
    cb(q->ctx, JOURNAL_OK, "", &rec);
    job_record_clear(&rec);
}

/* One job and, while it is queued, the queued jobs of its model before it in the claims'
 * run order (aged priority desc, then seq): its place in the job queue. */
static const char SQL_GET[] =
    "SELECT " COLS ", CASE WHEN j.state = 'queued' THEN (SELECT count(*) FROM vramd_jobs a "
    "WHERE a.state = 'queued' AND a.model = j.model AND (vramd_aged_priority(a.priority, a.created_at, $2::int8) > "
    "vramd_aged_priority(j.priority, j.created_at, $2::int8) OR (vramd_aged_priority(a.priority, a.created_at, "
    "$2::int8) = vramd_aged_priority(j.priority, j.created_at, $2::int8) AND a.seq < j.seq))) END::int8 "
    "FROM vramd_jobs j WHERE j.id = $1";

static void pg_get(jstore_t *s, const char *id, jstore_rec_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p, SQL_GET, done_get, (void (*)(void))cb, ctx, id);
    if (!q) {
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL);
        return;
    }
    pg_param(q, id);
    pg_param_i64(q, (int64_t)p->aging_ms);
    pg_submit(p, q);
}

static void done_get_result(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_result_cb cb = CB(q, jstore_result_cb);
    int rc = pg_result_rc(p, res);
    if (rc == JOURNAL_OK && PQntuples(res) == 0) {
        snprintf(p->why, sizeof p->why, "job not found");
        rc = JOURNAL_NOT_FOUND;
    }
    if (rc != JOURNAL_OK) {
        cb(q->ctx, rc, p->why, NULL, NULL, 0);
        return;
    }
    job_record_t rec;
    pg_read_record(res, 0, &rec, false);
    bool has = !PQgetisnull(res, 0, PG_N_COLS);
    cb(q->ctx, JOURNAL_OK, "", &rec, has ? PQgetvalue(res, 0, PG_N_COLS) : NULL,
       has ? (size_t)PQgetlength(res, 0, PG_N_COLS) : 0);
    job_record_clear(&rec);
}

static void pg_get_result(jstore_t *s, const char *id, jstore_result_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p,
                          "SELECT " COLS ", (SELECT data FROM vramd_job_results WHERE job_id = $1) FROM vramd_jobs "
                          "WHERE id = $1",
                          done_get_result, (void (*)(void))cb, ctx, id);
    if (!q) {
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL, NULL, 0);
        return;
    }
    pg_param(q, id);
    pg_submit(p, q);
}

/* Records of every row (claim, list), handed to cb as one array. */
static void give_rows(jstore_pg_t *p, PGresult *res, bool with_body, size_t limit, jstore_recs_cb cb, void *ctx,
                     const journal_cursor_t *next)
{
    size_t n = (size_t)PQntuples(res);
    if (n > limit)
        n = limit;
    job_record_t *v = calloc(n ? n : 1, sizeof *v);
    if (!v) {
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL, 0, next);
        return;
    }
    for (size_t i = 0; i < n; i++)
        pg_read_record(res, (int)i, &v[i], with_body);
    cb(ctx, JOURNAL_OK, "", v, n, next);
    for (size_t i = 0; i < n; i++)
        job_record_clear(&v[i]);
    free(v);
    (void)p;
}

static void done_list(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_recs_cb cb = CB(q, jstore_recs_cb);
    journal_cursor_t next = {.valid = false};
    int rc = pg_result_rc(p, res);
    if (rc != JOURNAL_OK) {
        cb(q->ctx, rc, p->why, NULL, 0, &next);
        return;
    }
    size_t limit = (size_t)q->num, rows = (size_t)PQntuples(res);
    if (rows > limit && limit > 0) {
        next.valid = true;
        next.seq = pg_col_int(res, (int)limit - 1, 11);
    }
    give_rows(p, res, false, limit, cb, q->ctx, &next);
}

static void pg_list(jstore_t *s, const journal_filter_t *f, const journal_cursor_t *cursor, size_t limit,
                    jstore_recs_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    journal_cursor_t none = {.valid = false};
    pg_query_t *q = pg_new_q(p,
                          "SELECT " COLS " FROM vramd_jobs WHERE ($1::text IS NULL OR state = $1) AND "
                          "($2::text IS NULL OR model = $2) AND ($3::int8 IS NULL OR seq < $3::int8) "
                          "ORDER BY seq DESC LIMIT $4::int8",
                          done_list, (void (*)(void))cb, ctx, NULL);
    if (!q) {
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL, 0, &none);
        return;
    }
    if (limit < 1)
        limit = 1;
    if (limit > JOURNAL_LIST_MAX)
        limit = JOURNAL_LIST_MAX;
    q->num = (int64_t)limit;
    pg_param(q, f && f->state >= 0 ? job_state_name((enum job_state)f->state) : NULL);
    pg_param(q, f ? f->model : NULL);
    if (cursor && cursor->valid)
        pg_param_i64(q, cursor->seq);
    else
        pg_param(q, NULL);
    pg_param_i64(q, (int64_t)limit + 1); /* one more: is there a next page? */
    pg_submit(p, q);
}

static const char SQL_CANCEL[] =
    "WITH o AS (SELECT id, state FROM vramd_jobs WHERE id = $1 FOR UPDATE), "
    "u AS (UPDATE vramd_jobs j SET state = 'cancelled', finished_ms = $2::int8, body = NULL, owner = NULL, "
    "lease = NULL, lease_until = NULL FROM o WHERE j.id = o.id AND o.state IN ('queued', 'running') RETURNING j.id) "
    "SELECT o.state, (SELECT count(*) FROM u)::int8 FROM o";

static void done_cancel(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_cancel_cb cb = CB(q, jstore_cancel_cb);
    int rc = pg_result_rc(p, res);
    enum job_state was = JOB_QUEUED;
    if (rc == JOURNAL_OK && PQntuples(res) == 0) {
        snprintf(p->why, sizeof p->why, "job not found");
        rc = JOURNAL_NOT_FOUND;
    } else if (rc == JOURNAL_OK) {
        char *st = pg_col_str(res, 0, 0);
        int w = job_state_parse(st);
        free(st);
        was = w < 0 ? JOB_FAILED : (enum job_state)w;
        if (pg_col_int(res, 0, 1) == 0) {
            snprintf(p->why, sizeof p->why, "job is %s", job_state_name(was));
            rc = JOURNAL_CONFLICT;
        }
    }
    cb(q->ctx, rc, rc == JOURNAL_OK ? "" : p->why, was);
}

static void pg_cancel(jstore_t *s, const char *id, int64_t now_ms, jstore_cancel_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p, SQL_CANCEL, done_cancel, (void (*)(void))cb, ctx, id);
    if (!q) {
        cb(ctx, JOURNAL_ERROR, "out of memory", JOB_QUEUED);
        return;
    }
    pg_param(q, id);
    pg_param_i64(q, now_ms);
    pg_submit(p, q);
}

/* ---- claim: one query per model, one after the other, until the limit ---------------- */

static const char SQL_CLAIM[] =
    "WITH c AS (SELECT j.id AS cid FROM vramd_jobs j "
    "WHERE j.state = 'queued' AND j.lease IS NULL AND j.model = $1 AND j.est_bytes <= $2::int8 "
    "AND NOT EXISTS (SELECT 1 FROM vramd_jobs s WHERE s.state = 'queued' "
    "AND ((s.lease IS NULL AND s.model = ANY($7::text[])) OR (s.lease IS NOT NULL AND s.owner = $4)) "
    "AND s.est_bytes + j.est_bytes > $2::int8 AND s.est_bytes <= $8::int8 AND s.seq < j.seq "
    "AND s.created_at < clock_timestamp() - make_interval(secs => $6::float8 / 1000) "
    "AND " AGED("s") " >= " AGED("j") ") "
    "ORDER BY " AGED("j") " DESC, j.seq LIMIT $3::int8 FOR UPDATE SKIP LOCKED) "
    "UPDATE vramd_jobs SET owner = $4, lease = gen_random_uuid()::text, lease_until = " LEASE_FOR("$5") " "
    "FROM c WHERE id = c.cid RETURNING " COLS ", body, client";

typedef struct claim_op {
    jstore_want_t *w;   /* models copied */
    size_t n_w, next;
    size_t limit;
    char served[4096];  /* text[] literal of the GPU models wanted */
    job_record_t *recs;
    size_t n, cap;
    jstore_recs_cb cb;
    void *ctx;
    int rc;
    char err[512];
} claim_op_t;

static void claim_free(claim_op_t *c)
{
    for (size_t i = 0; i < c->n_w; i++)
        free((char *)c->w[i].model);
    free(c->w);
    for (size_t i = 0; i < c->n; i++)
        job_record_clear(&c->recs[i]);
    free(c->recs);
    free(c);
}

static int run_order(const void *a, const void *b)
{
    const job_record_t *x = a, *y = b;
    if (x->priority != y->priority)
        return y->priority - x->priority;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void claim_next(jstore_pg_t *p, claim_op_t *c);

static void done_claim(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    claim_op_t *c = q->op;
    int rc = pg_result_rc(p, res);
    if (rc != JOURNAL_OK) {
        c->rc = rc;
        snprintf(c->err, sizeof c->err, "%s", p->why);
    } else {
        size_t rows = (size_t)PQntuples(res);
        job_record_t *v = rows ? realloc(c->recs, (c->n + rows) * sizeof *v) : c->recs;
        if (rows && !v) {
            c->rc = JOURNAL_ERROR; /* the claims lapse with their leases */
            snprintf(c->err, sizeof c->err, "out of memory");
        } else {
            c->recs = v;
            for (size_t i = 0; i < rows; i++)
                pg_read_record(res, (int)i, &c->recs[c->n++], true);
        }
    }
    claim_next(p, c);
}

static void claim_next(jstore_pg_t *p, claim_op_t *c)
{
    while (c->rc == JOURNAL_OK && c->next < c->n_w && c->n < c->limit) {
        const jstore_want_t *w = &c->w[c->next++];
        size_t n = w->n < c->limit - c->n ? w->n : c->limit - c->n;
        if (n == 0)
            continue;
        pg_query_t *q = pg_new_q(p, SQL_CLAIM, done_claim, NULL, NULL, NULL);
        if (!q) {
            c->rc = JOURNAL_ERROR;
            snprintf(c->err, sizeof c->err, "out of memory");
            break;
        }
        q->op = c;
        log_event(LOG_DEBUG, "job_claim", "model=%s n=%zu room_bytes=%llu", w->model, n,
                  (unsigned long long)w->room_bytes);
        pg_param(q, w->model);
        pg_param_i64(q, clamp64(w->room_bytes));
        pg_param_i64(q, (int64_t)n);
        pg_param(q, p->host_id);
        pg_param_i64(q, (int64_t)p->base.lease_ms);
        pg_param_i64(q, (int64_t)p->aging_ms);
        pg_param(q, w->room_bytes == UINT64_MAX ? "{}" : c->served);
        pg_param_i64(q, clamp64(w->capacity_bytes));
        pg_submit(p, q); /* done_claim continues (at once when not connected) */
        return;
    }
    if (c->n > 1)
        qsort(c->recs, c->n, sizeof *c->recs, run_order);
    journal_cursor_t none = {.valid = false};
    /* on a failure the jobs claimed so far still start: their claims are ours */
    c->cb(c->ctx, c->n ? JOURNAL_OK : c->rc, c->n || c->rc == JOURNAL_OK ? "" : c->err, c->recs, c->n, &none);
    claim_free(c);
}

/* '{"a","b"}' for the GPU models wanted ('"' and '\' escaped). */
static void served_literal(const jstore_want_t *w, size_t n_w, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '{';
    for (size_t i = 0; i < n_w; i++) {
        if (w[i].room_bytes == UINT64_MAX)
            continue;
        size_t need = 2 * strlen(w[i].model) + 4;
        if (o + need + 2 >= cap)
            break;
        if (o > 1)
            out[o++] = ',';
        out[o++] = '"';
        for (const char *m = w[i].model; *m; m++) {
            if (*m == '"' || *m == '\\')
                out[o++] = '\\';
            out[o++] = *m;
        }
        out[o++] = '"';
    }
    out[o++] = '}';
    out[o] = '\0';
}

static void pg_claim(jstore_t *s, const jstore_want_t *w, size_t n_w, size_t limit, jstore_busy_fn busy,
                     void *busy_ctx, jstore_recs_cb cb, void *ctx)
{
    (void)busy; /* claimed jobs carry a lease: no claim returns them again */
    (void)busy_ctx;
    journal_cursor_t none = {.valid = false};
    claim_op_t *c = calloc(1, sizeof *c);
    if (c)
        c->w = calloc(n_w ? n_w : 1, sizeof *c->w);
    if (!c || !c->w) {
        free(c);
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL, 0, &none);
        return;
    }
    for (size_t i = 0; i < n_w; i++) {
        c->w[i] = w[i];
        c->w[i].model = strdup(w[i].model);
        c->n_w = i + 1;
        if (!c->w[i].model)
            c->rc = JOURNAL_ERROR;
    }
    snprintf(c->err, sizeof c->err, "out of memory");
    c->limit = limit;
    c->cb = cb;
    c->ctx = ctx;
    served_literal(w, n_w, c->served, sizeof c->served);
    claim_next(P_(s), c);
}

/* ---- writes of an attempt (fenced by the lease token) -------------------------------- */

static void fenced(jstore_t *s, const char *sql, const char *id, const char *token, jstore_done_cb cb, void *ctx,
                   const int64_t *nums, int n_nums)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p, sql, done_write, (void (*)(void))cb, ctx, id);
    if (!q) {
        write_oom(cb, ctx);
        return;
    }
    pg_param(q, id);
    pg_param(q, token ? token : "");
    for (int i = 0; i < n_nums; i++)
        pg_param_i64(q, nums[i]);
    pg_submit(p, q);
}

static void pg_mark_running(jstore_t *s, const char *id, const char *token, int64_t now_ms, int gpu,
                            jstore_done_cb cb, void *ctx)
{
    int64_t nums[2] = {now_ms, gpu};
    fenced(s,
           "UPDATE vramd_jobs SET state = 'running', attempts = attempts + 1, started_ms = $3::int8, gpu = $4::int4 "
           "WHERE id = $1 AND lease = $2 AND state = 'queued'",
           id, token, cb, ctx, nums, 2);
}

static void pg_set_gpu(jstore_t *s, const char *id, const char *token, int gpu, jstore_done_cb cb, void *ctx)
{
    int64_t nums[1] = {gpu};
    fenced(s, "UPDATE vramd_jobs SET gpu = $3::int4 WHERE id = $1 AND lease = $2 AND state = 'running'", id, token,
           cb, ctx, nums, 1);
}

static void pg_renew(jstore_t *s, const char *id, const char *token, jstore_done_cb cb, void *ctx)
{
    int64_t nums[1] = {(int64_t)s->lease_ms};
    fenced(s,
           "UPDATE vramd_jobs SET lease_until = " LEASE_FOR("$3") " WHERE id = $1 AND lease = $2 "
           "AND state IN ('queued', 'running')",
           id, token, cb, ctx, nums, 1);
}

static const char SQL_FINISH[] =
    "WITH u AS (UPDATE vramd_jobs SET state = $3, finished_ms = $4::int8, http_status = $5::int4, error_code = $6, "
    "error_message = $7, result_type = $8, result_bytes = $9::int8, result_state = $10, degrade_level = $11::int4, "
    "gpu = CASE WHEN $12::int4 < 0 THEN gpu ELSE $12::int4 END, body = NULL, owner = NULL, lease = NULL, "
    "lease_until = NULL WHERE id = $1 AND state IN ('queued', 'running') AND coalesce(lease, '') = $2 RETURNING id), "
    "r AS (INSERT INTO vramd_job_results (job_id, data) SELECT id, $13::bytea FROM u WHERE $13::bytea IS NOT NULL "
    "ON CONFLICT (job_id) DO UPDATE SET data = EXCLUDED.data) "
    "SELECT count(*)::int8 FROM u";

static void pg_finish(jstore_t *s, const char *id, const char *token, const job_outcome_t *o, int64_t now_ms,
                      void *data, size_t len, jstore_done_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    if (o->state != JOB_SUCCEEDED && o->state != JOB_FAILED) {
        free(data);
        if (cb)
            cb(ctx, JOURNAL_INVALID, "a job finishes as succeeded or failed");
        return;
    }
    pg_query_t *q = pg_new_q(p, SQL_FINISH, done_write, (void (*)(void))cb, ctx, id);
    if (!q) {
        free(data);
        write_oom(cb, ctx);
        return;
    }
    bool stored = o->state == JOB_SUCCEEDED && o->result_stored && data;
    pg_param(q, id);
    pg_param(q, token ? token : "");
    pg_param(q, job_state_name(o->state));
    pg_param_i64(q, now_ms);
    pg_param_i64(q, o->http_status);
    pg_param(q, o->error_code);
    pg_param(q, o->error_message);
    pg_param(q, o->result_type);
    pg_param_i64(q, stored ? (int64_t)o->result_bytes : 0);
    pg_param(q, stored ? "stored" : "none");
    pg_param_i64(q, o->degrade_level);
    pg_param_i64(q, o->gpu);
    if (stored)
        pg_param_take_bytes(q, data, len);
    else {
        free(data);
        pg_param(q, NULL);
    }
    pg_submit(p, q);
}

static const char SQL_REQUEUE[] =
    "WITH u AS (UPDATE vramd_jobs SET state = 'queued', attempts = attempts - CASE WHEN $3::bool AND "
    "state = 'running' AND attempts > 0 THEN 1 ELSE 0 END, started_ms = 0, gpu = -1, "
    "error_code = coalesce($4, error_code), error_message = coalesce($5, error_message), owner = NULL, lease = NULL, "
    "lease_until = NULL WHERE id = $1 AND lease = $2 AND state IN ('queued', 'running') RETURNING model) "
    "SELECT count(*)::int8 FROM (SELECT pg_notify('" PG_CHANNEL "', model) FROM u) n";

static void pg_requeue(jstore_t *s, const char *id, const char *token, bool refund, const char *code,
                       const char *message, jstore_done_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p, SQL_REQUEUE, done_write, (void (*)(void))cb, ctx, id);
    if (!q) {
        write_oom(cb, ctx);
        return;
    }
    pg_param(q, id);
    pg_param(q, token ? token : "");
    pg_param(q, refund ? "true" : "false");
    pg_param(q, code);
    pg_param(q, message);
    pg_submit(p, q);
}

/* ---- writes not tied to an attempt ---------------------------------------------------- */

static void done_count(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    jstore_count_cb cb = CB(q, jstore_count_cb);
    int rc = pg_result_rc(p, res);
    if (cb)
        cb(q->ctx, rc, rc == JOURNAL_OK ? "" : p->why, rc == JOURNAL_OK ? (size_t)pg_changed(res) : 0);
}

static void pg_fail_overdue(jstore_t *s, int64_t now_ms, size_t limit, jstore_busy_fn busy, void *busy_ctx,
                            jstore_count_cb cb, void *ctx)
{
    (void)busy;
    (void)busy_ctx;
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p,
                          "WITH u AS (UPDATE vramd_jobs SET state = 'failed', finished_ms = $1::int8, http_status = "
                          "504, error_code = 'deadline_exceeded', error_message = 'the job''s deadline passed while "
                          "it waited to start', body = NULL WHERE id IN (SELECT id FROM vramd_jobs WHERE state = "
                          "'queued' AND lease IS NULL AND deadline_ms > 0 AND deadline_ms <= $1::int8 LIMIT $2::int8 "
                          "FOR UPDATE SKIP LOCKED) RETURNING 1) SELECT count(*)::int8 FROM u",
                          done_count, (void (*)(void))cb, ctx, NULL);
    if (!q) {
        cb(ctx, JOURNAL_ERROR, "out of memory", 0);
        return;
    }
    pg_param_i64(q, now_ms);
    pg_param_i64(q, (int64_t)limit);
    pg_submit(p, q);
}

static void pg_result_removed(jstore_t *s, const char *id, jstore_done_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    pg_query_t *q = pg_new_q(p,
                          "WITH d AS (DELETE FROM vramd_job_results WHERE job_id = $1) UPDATE vramd_jobs SET "
                          "result_state = 'removed' WHERE id = $1 AND result_state = 'stored'",
                          done_write, (void (*)(void))cb, ctx, id);
    if (!q) {
        write_oom(cb, ctx);
        return;
    }
    pg_param(q, id);
    pg_submit(p, q);
}

static void pg_housekeep(jstore_t *s, int64_t now_ms, uint64_t results_ttl_ms, uint64_t records_ttl_ms,
                         journal_id_cb purged, void *purged_ctx, jstore_count_cb cb, void *ctx)
{
    jstore_pg_t *p = P_(s);
    (void)purged; /* no local files belong to a PostgreSQL record */
    (void)purged_ctx;
    pg_query_t *q1 = pg_new_q(p,
                           "WITH e AS (DELETE FROM vramd_job_results r USING vramd_jobs j WHERE r.job_id = j.id AND "
                           "j.finished_ms > 0 AND j.finished_ms < $1::int8 RETURNING r.job_id) UPDATE vramd_jobs SET "
                           "result_state = 'removed' WHERE id IN (SELECT job_id FROM e)",
                           done_count, NULL, NULL, NULL);
    if (q1) {
        pg_param_i64(q1, now_ms - (int64_t)results_ttl_ms);
        pg_submit(p, q1);
    }
    pg_query_t *q2 = pg_new_q(p,
                           "WITH d AS (DELETE FROM vramd_jobs WHERE id IN (SELECT id FROM vramd_jobs WHERE "
                           "finished_ms > 0 AND finished_ms < $1::int8 AND state IN ('succeeded', 'failed', "
                           "'cancelled') ORDER BY finished_ms LIMIT " PURGE_BATCH ") RETURNING 1) "
                           "SELECT count(*)::int8 FROM d",
                           done_count, (void (*)(void))cb, ctx, NULL);
    if (!q2) {
        if (cb)
            cb(ctx, JOURNAL_ERROR, "out of memory", 0);
        return;
    }
    pg_param_i64(q2, now_ms - (int64_t)records_ttl_ms);
    pg_submit(p, q2);
}

static int pg_counts(jstore_t *s, uint64_t counts[JOB_STATE_COUNT])
{
    jstore_pg_t *p = P_(s);
    if (!p->counts_known || p->state != PG_READY)
        return -1; /* vramd_jobs_available 0 while PostgreSQL cannot be reached */
    memcpy(counts, p->counts, sizeof p->counts);
    return 0;
}

/* ---- life ---------------------------------------------------------------------------------- */

static void on_maint(uv_timer_t *t)
{
    pg_maintain(t->data);
}

static void pg_stop(jstore_t *s)
{
    jstore_pg_t *p = P_(s);
    if (p->state != PG_CLOSED)
        pg_conn_close(p);
}

static void pg_close(jstore_t *s)
{
    jstore_pg_t *p = P_(s);
    pg_stop(s);
    free(p->url);
    free(p);
}

static const jstore_ops_t pg_ops = {
    .name = "postgres",
    .insert = pg_insert,
    .get = pg_get,
    .get_result = pg_get_result,
    .list = pg_list,
    .cancel = pg_cancel,
    .claim = pg_claim,
    .mark_running = pg_mark_running,
    .set_gpu = pg_set_gpu,
    .finish = pg_finish,
    .requeue = pg_requeue,
    .renew = pg_renew,
    .fail_overdue = pg_fail_overdue,
    .result_removed = pg_result_removed,
    .housekeep = pg_housekeep,
    .counts = pg_counts,
    .stop = pg_stop,
    .close = pg_close,
};

jstore_t *jstore_pg_open(uv_loop_t *loop, const jstore_pg_config_t *cfg, const jstore_events_t *ev, char *err,
                         size_t errlen)
{
    if (!cfg->url || !cfg->url[0] || !cfg->host_id || !cfg->host_id[0]) {
        snprintf(err, errlen, "jobs.postgres.url and a host id are needed");
        return NULL;
    }
    jstore_pg_t *p = calloc(1, sizeof *p);
    if (!p || !(p->url = strdup(cfg->url))) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->base.ops = &pg_ops;
    p->base.inline_results = true;
    p->base.lease_ms = cfg->lease_ms ? cfg->lease_ms : 30000;
    p->base.max_result = cfg->max_result_bytes;
    p->loop = loop;
    snprintf(p->host_id, sizeof p->host_id, "%s", cfg->host_id);
    p->aging_ms = cfg->aging_ms ? cfg->aging_ms : 60000;
    p->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 10000;
    if (ev)
        p->ev = *ev;
    p->poll_fd = -1;
    p->why_rc = JOURNAL_ERROR;
    p->on_connected = pg_setup;
    list_init(&p->queue);
    list_init(&p->sent);
    uv_timer_init(loop, &p->retry);
    p->retry.data = p;
    uv_unref((uv_handle_t *)&p->retry);
    uv_timer_init(loop, &p->quiet);
    p->quiet.data = p;
    uv_unref((uv_handle_t *)&p->quiet);
    uv_timer_init(loop, &p->maint);
    p->maint.data = p;
    uint64_t every = p->base.lease_ms / 4;
    if (every > 1000)
        every = 1000;
    if (every < 100)
        every = 100;
    uv_timer_start(&p->maint, on_maint, every, every);
    uv_unref((uv_handle_t *)&p->maint);
    log_event(LOG_INFO, "jobs_postgres_connecting", "host_id=%s lease_ms=%llu", p->host_id,
              (unsigned long long)p->base.lease_ms);
    pg_connect(p);
    return &p->base;
}
