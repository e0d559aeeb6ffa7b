/*
 * jstore_pg_int: what the PostgreSQL store's two files share (jstore_pg_conn.c: the
 * connection, its queue of queries, schema set-up, reconnects, LISTEN and the maintenance
 * timer; jstore_pg.c: the store's operations, their SQL and how answers become records).
 * Not for use outside src/jobstore/jstore_pg*.c. Calls go one way:
 *   jstore_pg.c (operations, open) -> jstore_pg_setup.c (set-up, maintenance)
 *     -> jstore_pg_rows.c (answers to records) -> jstore_pg_conn.c (connection, queue);
 * the connection reaches the set-up only through p->on_connected.
 *
 * Invariants:
 *   - one connection; queries go out in the order they were made (FIFO: `queue`, then
 *     `sent`), so the writes of one host reach the server in that order. While setting up,
 *     one at a time; once READY, in libpq's pipeline mode: up to PG_PIPELINE_MAX on the
 *     wire, each followed by its own sync point, so each is its own transaction and one
 *     failing does not affect the next; answers come back in the same order;
 *   - every query ends in its `done` function exactly once: with the server's result, or
 *     with res NULL and p->why set (not connected, connection lost, store closing); `done`
 *     calls the operation's callback and frees what the query owns (pg_query_free);
 *   - while the store is not READY (connecting, setting up the schema, waiting to retry)
 *     operations fail at once with JOURNAL_ERROR ("PostgreSQL is not connected ...");
 *   - the connection string is never logged (it may hold a password): the log names the
 *     server by PQhost/PQport/PQdb once connected.
 */
#ifndef VRAMD_JOBSTORE_JSTORE_PG_INT_H
#define VRAMD_JOBSTORE_JSTORE_PG_INT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/list.h"
#include "jobstore/jstore.h"

#define PG_MAX_PARAMS 16
#define PG_SCHEMA_VERSION 1
#define PG_CHANNEL "vramd_jobs"
#define PG_PIPELINE_MAX 32 /* queries on the wire at once (READY, pipeline mode) */

enum pg_state { PG_DOWN = 0, PG_CONNECTING, PG_SETUP, PG_READY, PG_CLOSED };

typedef struct jstore_pg jstore_pg_t;
typedef struct pg_query pg_query_t;
/* The query ended: res is the server's last result (or its first error), or NULL with
 * p->why saying why. done must not keep res (it is cleared after). */
typedef void (*pg_done_fn)(jstore_pg_t *p, pg_query_t *q, PGresult *res);

struct pg_query {
    list_t link;
    const char *sql;   /* a literal */
    bool simple;       /* PQsendQuery (several statements, no parameters) */
    bool internal;     /* part of the set-up: may run before READY */
    int n;
    char *values[PG_MAX_PARAMS]; /* owned; NULL = SQL NULL */
    int lengths[PG_MAX_PARAMS];
    int formats[PG_MAX_PARAMS];  /* 1 = binary (bytea) */
    pg_done_fn done;
    void (*cb)(void);  /* the operation's callback, cast back by done */
    void *ctx;
    void *op;          /* an operation's own state (claim, housekeeping), owned by done */
    char id[40];
    int64_t num;       /* an operation's number (now_ms...) */
};

struct jstore_pg {
    jstore_t base; /* first */
    uv_loop_t *loop;
    char *url;
    char host_id[256];
    uint64_t aging_ms;
    jstore_events_t ev;
    void (*on_connected)(jstore_pg_t *p); /* pg_setup (set by jstore_pg.c: calls go one way) */
    PGconn *conn;
    uv_poll_t *poll;   /* on PQsocket; heap, freed in its close callback */
    int poll_fd;
    int poll_events;
    uv_timer_t retry;  /* reconnect backoff */
    uv_timer_t maint;  /* expired leases, counts */
    uv_timer_t quiet;  /* the connection said nothing for timeout_ms while vramd waited */
    uint64_t timeout_ms;
    uint64_t backoff_ms;
    enum pg_state state;
    list_t sent;       /* pg_query_t on the wire, oldest first (its answer comes first) */
    unsigned n_sent;
    list_t queue;      /* pg_query_t waiting to be sent */
    bool pipeline;     /* READY: libpq pipeline mode, up to PG_PIPELINE_MAX queries on the wire,
                          each followed by a sync (its own transaction); else one at a time */
    bool got_null;     /* pipeline: the head's results ended, its sync is next */
    PGresult *keep;    /* the result kept for the head of `sent` */
    bool maint_out;    /* a maintenance query is queued */
    bool counts_known;
    uint64_t counts[JOB_STATE_COUNT];
    char why[512];     /* why the last query had no result */
    int why_rc;        /* and the journal_rc for it: JOURNAL_UNAVAILABLE when it was never sent */
    char server[200];  /* host:port/db, for the log */
};

/* ---- jstore_pg_conn.c ---- */
/* A new query (NULL when out of memory). Parameters are added with pg_param*. */
pg_query_t *pg_query_new(const char *sql, pg_done_fn done, void (*cb)(void), void *ctx);
/* Copy text (NULL = SQL NULL) / a decimal integer / binary bytes (owned: taken) as the next parameter. */
void pg_param(pg_query_t *q, const char *text);
void pg_param_i64(pg_query_t *q, int64_t v);
void pg_param_take_bytes(pg_query_t *q, void *data, size_t len);
void pg_query_free(pg_query_t *q);
/* pg_query_new with the job id noted (p->why says "out of memory" on NULL). */
pg_query_t *pg_new_q(jstore_pg_t *p, const char *sql, pg_done_fn done, void (*cb)(void), void *ctx, const char *id);
/* Queue q (not NULL), or end it at once (its done with res NULL) when the store is not
 * READY (SETUP: internal queries only). */
void pg_submit(jstore_pg_t *p, pg_query_t *q);
/* A set-up step failed (p->why may say why): close, fail what waits, retry with backoff. */
void pg_conn_fail(jstore_pg_t *p, const char *what);
/* The connection is READY: the set-up is over (jstore_pg.c calls it after recovery). */
void pg_ready(jstore_pg_t *p);
/* Start connecting (state DOWN -> CONNECTING), close everything. */
void pg_connect(jstore_pg_t *p);
void pg_conn_close(jstore_pg_t *p);
/* Set p->why from a result's error (or the connection's) and map it to a journal_rc:
 * JOURNAL_FULL for disk-full SQLSTATEs, JOURNAL_CONFLICT for a unique violation,
 * JOURNAL_ERROR otherwise. Returns JOURNAL_OK when res is a success. */
int pg_result_rc(jstore_pg_t *p, PGresult *res);

/* ---- jstore_pg_rows.c: reading answers (binary format) ---- */
#define PG_N_COLS 24 /* the columns of a job row (jstore_pg.c COLS), before an optional body */
/* Fill rec (initialised first; job_record_clear it) from row `row` of r. */
void pg_read_record(const PGresult *r, int row, job_record_t *rec, bool with_body);
/* A heap copy of a text/bytea value (NULL for SQL NULL). */
char *pg_col_str(const PGresult *r, int row, int col);
/* An int4/int8 value (0 for SQL NULL). */
int64_t pg_col_int(const PGresult *r, int row, int col);
/* Rows a command changed, or the first column of the first row of a query. */
int64_t pg_changed(const PGresult *r);

/* ---- jstore_pg_setup.c ---- */
/* After connecting: create or migrate the schema, release this host's old leases, LISTEN;
 * then pg_ready. */
void pg_setup(jstore_pg_t *p);
/* The maintenance pass (expired leases requeued, counts refreshed); the timer's job. */
void pg_maintain(jstore_pg_t *p);

#endif
