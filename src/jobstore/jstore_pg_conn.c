/*
 * jstore_pg_conn: the PostgreSQL store's one connection, driven by libpq's asynchronous API
 * on the event loop: PQconnectStart/PQconnectPoll to connect, PQsendQuery(Params) to send,
 * PQsocket watched with uv_poll, PQconsumeInput/PQisBusy/PQgetResult to read, PQnotifies for
 * LISTEN. Nothing here blocks the loop (the connection is non-blocking; a query that does
 * not fit the socket is flushed when it becomes writable).
 *
 * States: DOWN (waiting for the retry timer) -> CONNECTING -> SETUP (schema, recovery,
 * LISTEN: internal queries only) -> READY. Any failure (connect refused, the server closed
 * the connection, a set-up query failed) ends every query with res NULL ("PostgreSQL
 * connection lost: ..."), closes the connection and goes DOWN; the retry waits 100 ms,
 * doubling to 5 s, reset once READY. Invariants: n_sent is the length of `sent`; outside
 * pipeline mode it is at most 1; `keep` belongs to the head of `sent`.
 *
 * Silence: a connection cut off without a word (a link down, a firewall dropping packets, a
 * server host frozen) looks to TCP like a slow one, and TCP waits minutes before it gives
 * up. So the `quiet` timer runs while vramd waits for the server (connecting, setting up,
 * or n_sent > 0), restarted whenever something arrives or a write makes progress; after
 * timeout_ms of silence (nothing readable on the socket either: a stalled loop is not a
 * silent server) the connection is treated as lost ("no answer from PostgreSQL for N ms")
 * like any other failure. When it fires while nothing is awaited it does nothing (an idle
 * connection is not a dead one; the maintenance query, every second or less, is awaited).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "jobstore/jstore_pg_int.h"

#define PG_BACKOFF_MIN_MS 100
#define PG_BACKOFF_MAX_MS 5000

pg_query_t *pg_query_new(const char *sql, pg_done_fn done, void (*cb)(void), void *ctx)
{
    pg_query_t *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    list_init(&q->link);
    q->sql = sql;
    q->done = done;
    q->cb = cb;
    q->ctx = ctx;
    return q;
}

pg_query_t *pg_new_q(jstore_pg_t *p, const char *sql, pg_done_fn done, void (*cb)(void), void *ctx,
                         const char *id)
{
    pg_query_t *q = pg_query_new(sql, done, cb, ctx);
    if (!q) {
        snprintf(p->why, sizeof p->why, "out of memory");
        return NULL;
    }
    if (id)
        snprintf(q->id, sizeof q->id, "%s", id);
    return q;
}

void pg_param(pg_query_t *q, const char *text)
{
    if (q->n >= PG_MAX_PARAMS)
        return;
    q->values[q->n] = text ? strdup(text) : NULL;
    q->lengths[q->n] = 0;
    q->formats[q->n] = 0;
    q->n++;
}

void pg_param_i64(pg_query_t *q, int64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRId64, v);
    pg_param(q, s);
}

void pg_param_take_bytes(pg_query_t *q, void *data, size_t len)
{
    if (q->n >= PG_MAX_PARAMS) {
        free(data);
        return;
    }
    q->values[q->n] = data;
    q->lengths[q->n] = (int)len;
    q->formats[q->n] = 1;
    q->n++;
}

void pg_query_free(pg_query_t *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->n; i++)
        free(q->values[i]);
    free(q);
}

/* End q with res (NULL: p->why, p->why_rc) and free it. */
static void query_end(jstore_pg_t *p, pg_query_t *q, PGresult *res)
{
    q->done(p, q, res);
    pg_query_free(q);
    p->why_rc = JOURNAL_ERROR;
}

/* End q unsent: the store is not connected (nothing changed). */
static void query_unsent(jstore_pg_t *p, pg_query_t *q, const char *why)
{
    snprintf(p->why, sizeof p->why, "%s", why);
    p->why_rc = JOURNAL_UNAVAILABLE;
    query_end(p, q, NULL);
}

int pg_result_rc(jstore_pg_t *p, PGresult *res)
{
    if (!res)
        return p->why_rc == JOURNAL_UNAVAILABLE ? JOURNAL_UNAVAILABLE : JOURNAL_ERROR; /* p->why is set */
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return JOURNAL_OK;
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    snprintf(p->why, sizeof p->why, "PostgreSQL: %s (SQLSTATE %s)", msg ? msg : PQresStatus(st), state ? state : "?");
    if (state && (strcmp(state, "53100") == 0 || strcmp(state, "53200") == 0))
        return JOURNAL_FULL;
    if (state && strcmp(state, "23505") == 0)
        return JOURNAL_CONFLICT;
    return JOURNAL_ERROR;
}

static void poll_closed(uv_handle_t *h) { free(h); }

static void poll_stop(jstore_pg_t *p)
{
    if (p->poll) {
        uv_poll_stop(p->poll);
        uv_close((uv_handle_t *)p->poll, poll_closed);
        p->poll = NULL;
    }
    p->poll_fd = -1;
    p->poll_events = 0;
}

static void on_poll(uv_poll_t *h, int status, int events);

/* Watch the connection's socket for `events` (it may change while connecting). */
static int poll_watch(jstore_pg_t *p, int events)
{
    int fd = PQsocket(p->conn);
    if (fd < 0)
        return -1;
    if (p->poll && p->poll_fd != fd)
        poll_stop(p);
    if (!p->poll) {
        p->poll = malloc(sizeof *p->poll);
        if (!p->poll || uv_poll_init(p->loop, p->poll, fd) != 0) {
            free(p->poll);
            p->poll = NULL;
            return -1;
        }
        p->poll->data = p;
        p->poll_fd = fd;
        p->poll_events = 0;
    }
    if (events != p->poll_events) {
        if (uv_poll_start(p->poll, events, on_poll) != 0)
            return -1;
        p->poll_events = events;
    }
    return 0;
}

/* End every query (queued or on the wire) with res NULL and p->why. */
static void fail_all(jstore_pg_t *p)
{
    if (p->keep) {
        PQclear(p->keep);
        p->keep = NULL;
    }
    p->n_sent = 0;
    p->pipeline = false;
    p->got_null = false;
    list_t *lists[2] = {&p->sent, &p->queue};
    for (int i = 0; i < 2; i++) {
        while (!list_empty(lists[i])) {
            pg_query_t *q = list_entry(lists[i]->next, pg_query_t, link);
            list_remove(&q->link);
            query_end(p, q, NULL);
        }
    }
}

static void on_retry(uv_timer_t *t)
{
    pg_connect(t->data);
}

static void on_quiet(uv_timer_t *t);

/* The server spoke (or took bytes), or vramd starts waiting for it: the silence starts now. */
static void quiet_restart(jstore_pg_t *p)
{
    uv_timer_start(&p->quiet, on_quiet, p->timeout_ms, 0);
}

/* Something failed: close, fail what waits, retry later. */
static void conn_lost_msg(jstore_pg_t *p, const char *what, const char *given)
{
    const char *e = p->conn ? PQerrorMessage(p->conn) : "";
    char msg[400];
    snprintf(msg, sizeof msg, "%s", given ? given : e && e[0] ? e : "connection closed");
    msg[strcspn(msg, "\n")] = '\0';
    if (p->state == PG_READY || p->state == PG_SETUP || p->backoff_ms <= PG_BACKOFF_MIN_MS)
        log_event(LOG_ERROR, "jobs_postgres_down", "server=%s while=%s error=%s retry_ms=%" PRIu64,
                  p->server[0] ? p->server : "-", what, msg, p->backoff_ms ? p->backoff_ms : PG_BACKOFF_MIN_MS);
    snprintf(p->why, sizeof p->why, "PostgreSQL connection lost: %s", msg);
    uv_timer_stop(&p->quiet);
    poll_stop(p);
    if (p->conn) {
        PQfinish(p->conn);
        p->conn = NULL;
    }
    p->state = PG_DOWN;
    fail_all(p);
    if (p->state != PG_DOWN)
        return; /* a callback closed the store */
    p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : PG_BACKOFF_MIN_MS;
    if (p->backoff_ms > PG_BACKOFF_MAX_MS)
        p->backoff_ms = PG_BACKOFF_MAX_MS;
    uv_timer_start(&p->retry, on_retry, p->backoff_ms, 0);
}

static void conn_lost(jstore_pg_t *p, const char *what)
{
    conn_lost_msg(p, what, NULL);
}

static void on_quiet(uv_timer_t *t)
{
    jstore_pg_t *p = t->data;
    bool waiting = p->state == PG_CONNECTING || p->state == PG_SETUP || (p->state == PG_READY && p->n_sent > 0);
    if (!waiting || !p->conn)
        return;
    /* the loop itself may have stalled (a stopped process, a slow callback): what already
     * sits in the socket is an answer, not silence (the poll callback reads it next) */
    struct pollfd pfd = {.fd = PQsocket(p->conn), .events = POLLIN};
    if (pfd.fd >= 0 && poll(&pfd, 1, 0) > 0) {
        quiet_restart(p);
        return;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "no answer from PostgreSQL for %" PRIu64 " ms", p->timeout_ms);
    conn_lost_msg(p, p->state == PG_CONNECTING ? "connecting" : "waiting", msg);
}

void pg_conn_fail(jstore_pg_t *p, const char *what)
{
    char why[sizeof p->why];
    snprintf(why, sizeof why, "%s", p->why);
    conn_lost_msg(p, what, why[0] ? why : NULL);
}

/* Put queued queries on the wire: one at a time while setting up, up to PG_PIPELINE_MAX in
 * pipeline mode (each followed by a sync). */
static void send_next(jstore_pg_t *p)
{
    unsigned max = p->pipeline ? PG_PIPELINE_MAX : 1;
    bool sent_any = false;
    if (p->n_sent == 0 && !list_empty(&p->queue))
        quiet_restart(p); /* from idle: the wait for an answer starts */
    while (p->n_sent < max && !list_empty(&p->queue) && (p->state == PG_READY || p->state == PG_SETUP)) {
        pg_query_t *q = list_entry(p->queue.next, pg_query_t, link);
        list_remove(&q->link);
        if (p->state == PG_SETUP && !q->internal) {
            query_unsent(p, q, "PostgreSQL is not connected yet (setting up)");
            continue;
        }
        int ok = q->simple && !p->pipeline
                     ? PQsendQuery(p->conn, q->sql)
                     : PQsendQueryParams(p->conn, q->sql, q->n, NULL, (const char *const *)q->values, q->lengths,
                                         q->formats, 1);
        if (ok && p->pipeline)
            ok = PQpipelineSync(p->conn);
        list_insert_tail(&p->sent, &q->link); /* failed: conn_lost ends it with the rest */
        p->n_sent++;
        if (!ok) {
            conn_lost(p, "sending");
            return;
        }
        sent_any = true;
    }
    if (!sent_any)
        return;
    int fl = PQflush(p->conn);
    if (fl < 0) {
        conn_lost(p, "sending");
        return;
    }
    if (poll_watch(p, UV_READABLE | (fl == 1 ? UV_WRITABLE : 0)) != 0)
        conn_lost(p, "watching the socket");
}

void pg_submit(jstore_pg_t *p, pg_query_t *q)
{
    if (p->state != PG_READY && !(q->internal && p->state == PG_SETUP)) {
        query_unsent(p, q, "PostgreSQL is not connected (reconnecting; see the log)");
        return;
    }
    list_insert_tail(&p->queue, &q->link);
    send_next(p);
}

static void take_notifies(jstore_pg_t *p)
{
    PGnotify *n;
    bool any = false;
    while ((n = PQnotifies(p->conn)) != NULL) {
        any = true;
        PQfreemem(n);
    }
    if (any && p->state == PG_READY && p->ev.wake)
        p->ev.wake(p->ev.ctx);
}

/* Read what the server sent: results of the query on the wire, notifications. */
static void read_input(jstore_pg_t *p)
{
    if (!PQconsumeInput(p->conn)) {
        conn_lost(p, "reading");
        return;
    }
    while (p->n_sent > 0 && p->conn && !PQisBusy(p->conn)) {
        PGresult *res = PQgetResult(p->conn);
        if (!res && p->pipeline) {
            /* the head's results ended; its sync comes next (two NULLs: nothing more yet) */
            if (p->got_null)
                break;
            p->got_null = true;
            continue;
        }
        p->got_null = false;
        if (res && !(p->pipeline && PQresultStatus(res) == PGRES_PIPELINE_SYNC)) {
            /* keep the first error, else the last result */
            if (!p->keep) {
                p->keep = res;
            } else if (PQresultStatus(p->keep) != PGRES_COMMAND_OK && PQresultStatus(p->keep) != PGRES_TUPLES_OK) {
                PQclear(res);
            } else {
                PQclear(p->keep);
                p->keep = res;
            }
            continue;
        }
        PQclear(res); /* the sync point (NULL outside pipeline mode): the head is complete */
        pg_query_t *q = list_entry(p->sent.next, pg_query_t, link);
        list_remove(&q->link);
        p->n_sent--;
        PGresult *kept = p->keep;
        p->keep = NULL;
        if (!kept)
            snprintf(p->why, sizeof p->why, "PostgreSQL gave no result");
        query_end(p, q, kept);
        PQclear(kept);
        if (p->state == PG_CLOSED || !p->conn)
            return;
        send_next(p);
    }
    if (p->conn)
        take_notifies(p);
}

static void connect_step(jstore_pg_t *p);

static void on_poll(uv_poll_t *h, int status, int events)
{
    jstore_pg_t *p = h->data;
    if (status < 0) {
        conn_lost(p, "polling");
        return;
    }
    quiet_restart(p); /* the socket is readable (data, an end) or took bytes */
    if (p->state == PG_CONNECTING) {
        connect_step(p);
        return;
    }
    if (events & UV_WRITABLE) {
        int fl = PQflush(p->conn);
        if (fl < 0) {
            conn_lost(p, "sending");
            return;
        }
        if (fl == 0 && poll_watch(p, UV_READABLE) != 0) {
            conn_lost(p, "watching the socket");
            return;
        }
    }
    if (events & UV_READABLE)
        read_input(p);
}

/* One step of PQconnectPoll; watch what it asks for. */
static void connect_step(jstore_pg_t *p)
{
    PostgresPollingStatusType st = PQconnectPoll(p->conn);
    if (st == PGRES_POLLING_FAILED) {
        conn_lost(p, "connecting");
        return;
    }
    if (st == PGRES_POLLING_OK) {
        if (PQsetnonblocking(p->conn, 1) != 0 || poll_watch(p, UV_READABLE) != 0) {
            conn_lost(p, "connecting");
            return;
        }
        snprintf(p->server, sizeof p->server, "%s:%s/%s", PQhost(p->conn), PQport(p->conn), PQdb(p->conn));
        p->state = PG_SETUP;
        p->on_connected(p);
        return;
    }
    if (poll_watch(p, st == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE) != 0)
        conn_lost(p, "connecting");
}

/* libpq's notices (e.g. "relation already exists, skipping") go to the debug log. */
static void on_notice(void *arg, const char *message)
{
    (void)arg;
    char m[300];
    snprintf(m, sizeof m, "%s", message);
    m[strcspn(m, "\n")] = '\0';
    log_event(LOG_DEBUG, "jobs_postgres_notice", "message=%s", m);
}

void pg_connect(jstore_pg_t *p)
{
    if (p->state == PG_CLOSED)
        return;
    p->conn = PQconnectStart(p->url);
    if (!p->conn) {
        snprintf(p->why, sizeof p->why, "out of memory");
        conn_lost(p, "connecting");
        return;
    }
    PQsetNoticeProcessor(p->conn, on_notice, p);
    if (PQstatus(p->conn) == CONNECTION_BAD) {
        conn_lost(p, "connecting");
        return;
    }
    p->state = PG_CONNECTING;
    quiet_restart(p);
    /* PQconnectStart wants PQconnectPoll called when the socket is writable */
    if (poll_watch(p, UV_WRITABLE) != 0)
        conn_lost(p, "connecting");
}

void pg_ready(jstore_pg_t *p)
{
    bool again = p->backoff_ms > 0;
    p->state = PG_READY;
    /* from now on several queries on the wire (the set-up's simple queries are done) */
    p->pipeline = p->n_sent == 0 && PQenterPipelineMode(p->conn) == 1;
    if (!p->pipeline)
        log_event(LOG_WARN, "jobs_postgres_pipeline", "error=%s", "pipeline mode refused: one query at a time");
    p->backoff_ms = 0;
    log_event(LOG_INFO, "jobs_postgres_ready", "server=%s host_id=%s schema=%d reconnected=%s", p->server, p->host_id,
              PG_SCHEMA_VERSION, again ? "true" : "false");
    send_next(p);
    if (p->ev.wake)
        p->ev.wake(p->ev.ctx);
}

/* The store is closing: end what waits, close the connection and the handles. */
void pg_conn_close(jstore_pg_t *p)
{
    p->state = PG_CLOSED;
    snprintf(p->why, sizeof p->why, "the job store is closing");
    poll_stop(p);
    if (p->conn) {
        PQfinish(p->conn);
        p->conn = NULL;
    }
    fail_all(p);
    uv_timer_stop(&p->quiet);
    uv_timer_stop(&p->retry);
    uv_timer_stop(&p->maint);
}
