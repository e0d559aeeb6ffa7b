/*
 * jstore_sqlite: the job store on the local SQLite journal (jobstore/journal.h), for one host.
 *
 * Every operation is a synchronous journal call (one fsync'd commit for a change, on the
 * loop thread as before) and calls its callback before it returns. There are no leases:
 * tokens are ignored, renew always succeeds, a claim only reads the next queued jobs (they
 * stay queued until the runner marks them running), and results are the local result files
 * (inline_results false). Invariant: the journal is only used through this store once the
 * store owns it.
 */
#include <stdlib.h>
#include <string.h>

#include "jobstore/jstore.h"

typedef struct sqlite_store {
    jstore_t base; /* first: a jstore_t * is a sqlite_store_t * */
    journal_t *j;
} sqlite_store_t;

static journal_t *J_(jstore_t *s) { return ((sqlite_store_t *)s)->j; }

static const char *msg_of(jstore_t *s, int rc) { return rc == JOURNAL_OK ? "" : journal_errmsg(J_(s)); }

static void done(jstore_t *s, int rc, jstore_done_cb cb, void *ctx)
{
    if (cb)
        cb(ctx, rc, msg_of(s, rc));
}

static void sq_insert(jstore_t *s, const job_record_t *rec, jstore_done_cb cb, void *ctx)
{
    done(s, journal_insert(J_(s), rec), cb, ctx);
}

static void sq_get(jstore_t *s, const char *id, jstore_rec_cb cb, void *ctx)
{
    job_record_t rec;
    job_record_init(&rec);
    int rc = journal_get(J_(s), id, false, &rec);
    cb(ctx, rc, msg_of(s, rc), rc == JOURNAL_OK ? &rec : NULL);
    job_record_clear(&rec);
}

static void sq_get_result(jstore_t *s, const char *id, jstore_result_cb cb, void *ctx)
{
    job_record_t rec;
    job_record_init(&rec);
    int rc = journal_get(J_(s), id, false, &rec);
    cb(ctx, rc, msg_of(s, rc), rc == JOURNAL_OK ? &rec : NULL, NULL, 0);
    job_record_clear(&rec);
}

typedef struct recs {
    job_record_t *v;
    size_t n, cap;
    bool oom;
} recs_t;

/* journal_list callback: keep a deep copy (the record given is borrowed). */
static int keep_copy(const job_record_t *rec, void *ctx)
{
    recs_t *r = ctx;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        job_record_t *v = realloc(r->v, cap * sizeof *v);
        if (!v) {
            r->oom = true;
            return 1;
        }
        r->v = v;
        r->cap = cap;
    }
    job_record_t *d = &r->v[r->n];
    job_record_init(d);
    memcpy(d->id, rec->id, sizeof d->id);
    d->model = rec->model ? strdup(rec->model) : NULL;
    d->method = rec->method ? strdup(rec->method) : NULL;
    d->path = rec->path ? strdup(rec->path) : NULL;
    d->headers_json = rec->headers_json ? strdup(rec->headers_json) : NULL;
    d->error_code = rec->error_code ? strdup(rec->error_code) : NULL;
    d->error_message = rec->error_message ? strdup(rec->error_message) : NULL;
    d->result_type = rec->result_type ? strdup(rec->result_type) : NULL;
    d->priority = rec->priority;
    d->deadline_wall_ms = rec->deadline_wall_ms;
    d->max_attempts = rec->max_attempts;
    d->created_ms = rec->created_ms;
    d->seq = rec->seq;
    d->state = rec->state;
    d->attempts = rec->attempts;
    d->started_ms = rec->started_ms;
    d->finished_ms = rec->finished_ms;
    d->degrade_level = rec->degrade_level;
    d->gpu = rec->gpu;
    d->http_status = rec->http_status;
    d->result_bytes = rec->result_bytes;
    d->result_state = rec->result_state;
    r->n++;
    return 0;
}

static void recs_free(recs_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        job_record_clear(&r->v[i]);
    free(r->v);
}

static void sq_list(jstore_t *s, const journal_filter_t *f, const journal_cursor_t *cursor, size_t limit,
                    jstore_recs_cb cb, void *ctx)
{
    recs_t r = {0};
    journal_cursor_t next = {.valid = false};
    int rc = journal_list(J_(s), f, cursor, limit, keep_copy, &r, &next, NULL);
    if (rc == JOURNAL_OK && r.oom)
        cb(ctx, JOURNAL_ERROR, "out of memory", NULL, 0, &next);
    else
        cb(ctx, rc, msg_of(s, rc), r.v, rc == JOURNAL_OK ? r.n : 0, &next);
    recs_free(&r);
}

static void sq_cancel(jstore_t *s, const char *id, int64_t now_ms, jstore_cancel_cb cb, void *ctx)
{
    enum job_state was = JOB_QUEUED;
    int rc = journal_cancel(J_(s), id, now_ms, &was);
    cb(ctx, rc, msg_of(s, rc), was);
}

/* Run order: priority desc, then seq asc (as the journal's own order). */
static int run_order(const void *a, const void *b)
{
    const job_record_t *x = a, *y = b;
    if (x->priority != y->priority)
        return y->priority - x->priority;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The next queued jobs of one model that are not in flight, appended to r (with bodies). */
static void claim_model(jstore_t *s, const jstore_want_t *w, jstore_busy_fn busy, void *busy_ctx, recs_t *r)
{
    size_t limit = w->n + w->in_flight; /* in-flight jobs may come first in the order: skip them */
    if (limit > JOURNAL_LIST_MAX)
        limit = JOURNAL_LIST_MAX;
    char(*ids)[JOB_ID_SIZE] = calloc(limit, sizeof *ids);
    size_t got = 0, want = w->n;
    if (!ids || journal_next_queued(J_(s), w->model, limit, ids, &got) != JOURNAL_OK)
        got = 0;
    for (size_t i = 0; i < got && want > 0 && !r->oom; i++) {
        if (busy && busy(ids[i], busy_ctx))
            continue;
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 16;
            job_record_t *v = realloc(r->v, cap * sizeof *v);
            if (!v) {
                r->oom = true;
                break;
            }
            r->v = v;
            r->cap = cap;
        }
        job_record_init(&r->v[r->n]);
        if (journal_get(J_(s), ids[i], true, &r->v[r->n]) == JOURNAL_OK && r->v[r->n].state == JOB_QUEUED) {
            r->n++;
            want--;
        } else {
            job_record_clear(&r->v[r->n]);
        }
    }
    free(ids);
}

static void sq_claim(jstore_t *s, const jstore_want_t *w, size_t n_w, size_t limit, jstore_busy_fn busy,
                     void *busy_ctx, jstore_recs_cb cb, void *ctx)
{
    recs_t r = {0};
    for (size_t i = 0; i < n_w; i++)
        claim_model(s, &w[i], busy, busy_ctx, &r);
    if (r.n > 1)
        qsort(r.v, r.n, sizeof *r.v, run_order);
    size_t n = r.n < limit ? r.n : limit;
    journal_cursor_t none = {.valid = false};
    cb(ctx, JOURNAL_OK, "", r.v, n, &none);
    recs_free(&r);
}

static void sq_mark_running(jstore_t *s, const char *id, const char *token, int64_t now_ms, int gpu,
                            jstore_done_cb cb, void *ctx)
{
    (void)token;
    done(s, journal_mark_running(J_(s), id, now_ms, gpu), cb, ctx);
}

static void sq_set_gpu(jstore_t *s, const char *id, const char *token, int gpu, jstore_done_cb cb, void *ctx)
{
    (void)token;
    done(s, journal_set_gpu(J_(s), id, gpu), cb, ctx);
}

static void sq_finish(jstore_t *s, const char *id, const char *token, const job_outcome_t *o, int64_t now_ms,
                      void *data, size_t len, jstore_done_cb cb, void *ctx)
{
    (void)token;
    (void)len;
    free(data); /* results are local files here */
    done(s, journal_mark_finished(J_(s), id, o, now_ms), cb, ctx);
}

static void sq_requeue(jstore_t *s, const char *id, const char *token, bool refund, const char *code,
                       const char *message, jstore_done_cb cb, void *ctx)
{
    (void)token;
    done(s, journal_requeue(J_(s), id, refund, code, message), cb, ctx);
}

static void sq_renew(jstore_t *s, const char *id, const char *token, jstore_done_cb cb, void *ctx)
{
    (void)id;
    (void)token;
    done(s, JOURNAL_OK, cb, ctx);
}

static void sq_fail_overdue(jstore_t *s, int64_t now_ms, size_t limit, jstore_busy_fn busy, void *busy_ctx,
                            jstore_count_cb cb, void *ctx)
{
    char(*ids)[JOB_ID_SIZE] = calloc(limit ? limit : 1, sizeof *ids);
    size_t n = 0, failed = 0;
    if (!ids) {
        cb(ctx, JOURNAL_ERROR, "out of memory", 0);
        return;
    }
    int rc = journal_overdue(J_(s), now_ms, limit, ids, &n);
    for (size_t i = 0; rc == JOURNAL_OK && i < n; i++) {
        if (busy && busy(ids[i], busy_ctx))
            continue;
        job_outcome_t o = {.state = JOB_FAILED, .http_status = 504, .error_code = "deadline_exceeded",
                           .error_message = "the job's deadline passed while it waited to start", .gpu = -1};
        int frc = journal_mark_finished(J_(s), ids[i], &o, now_ms);
        if (frc == JOURNAL_OK)
            failed++;
        else if (frc != JOURNAL_CONFLICT)
            rc = frc;
    }
    free(ids);
    cb(ctx, rc, msg_of(s, rc), failed);
}

static void sq_result_removed(jstore_t *s, const char *id, jstore_done_cb cb, void *ctx)
{
    done(s, journal_mark_result_removed(J_(s), id), cb, ctx);
}

#define PURGE_BATCH 1000
#define PURGE_ROUNDS 20

static void sq_housekeep(jstore_t *s, int64_t now_ms, uint64_t results_ttl_ms, uint64_t records_ttl_ms,
                         journal_id_cb purged, void *purged_ctx, jstore_count_cb cb, void *ctx)
{
    (void)results_ttl_ms; /* the result files expire in the local result store */
    size_t total = 0;
    int rc = JOURNAL_OK;
    for (int round = 0; round < PURGE_ROUNDS; round++) {
        size_t n = 0;
        rc = journal_purge(J_(s), now_ms - (int64_t)records_ttl_ms, PURGE_BATCH, purged, purged_ctx, &n);
        if (rc != JOURNAL_OK)
            break;
        total += n;
        if (n < PURGE_BATCH)
            break;
    }
    if (cb)
        cb(ctx, rc, msg_of(s, rc), total);
}

static int sq_counts(jstore_t *s, uint64_t counts[JOB_STATE_COUNT])
{
    return journal_counts(J_(s), counts) == JOURNAL_OK ? 0 : -1;
}

static void sq_stop(jstore_t *s)
{
    (void)s; /* synchronous: nothing ever waits */
}

static void sq_close(jstore_t *s)
{
    journal_close(J_(s));
    free(s);
}

static const jstore_ops_t sqlite_ops = {
    .name = "sqlite",
    .insert = sq_insert,
    .get = sq_get,
    .get_result = sq_get_result,
    .list = sq_list,
    .cancel = sq_cancel,
    .claim = sq_claim,
    .mark_running = sq_mark_running,
    .set_gpu = sq_set_gpu,
    .finish = sq_finish,
    .requeue = sq_requeue,
    .renew = sq_renew,
    .fail_overdue = sq_fail_overdue,
    .result_removed = sq_result_removed,
    .housekeep = sq_housekeep,
    .counts = sq_counts,
    .stop = sq_stop,
    .close = sq_close,
};

jstore_t *jstore_sqlite_new(journal_t *j)
{
    sqlite_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base.ops = &sqlite_ops;
    s->j = j;
    return &s->base;
}

journal_t *jstore_sqlite_journal(jstore_t *s)
{
    return s && s->ops == &sqlite_ops ? J_(s) : NULL;
}
