/*
 * conn: one client connection and the request it is working on.
 *
 * Connection states (conn_set_state logs old -> new at debug level):
 *   HEAD     reading a request head; one deadline (limits.header_timeout) for the whole
 *            head, armed when its first byte arrives (or at accept), so slowloris cannot
 *            extend it -> 408.
 *   BODY     reading the request body (Content-Length or chunked) under the same deadline,
 *            counted from the head's start; the whole body is buffered, up to max_body (413).
 *   ACTIVE   a complete request is being served: queued, running upstream, or answered by
 *            vramd itself. The socket is still read, to notice a client that leaves, but
 *            pipelined bytes only accumulate (up to max_header) until the response is done.
 *   CLOSING  uv_close issued; freed in the close callback, never earlier.
 *
 * Request states (request_set_state logs old -> new at debug level):
 *   NEW -> QUEUED -> CONNECTING -> WAITING (sent, awaiting the worker's head) ->
 *   STREAMING (head sent to the client) -> DONE; or NEW -> LOCAL (vramd answers) -> DONE.
 *
 * Ownership: a request belongs to its conn. If the client leaves, the conn cancels the
 * request (out of the queue, or its upstream aborted: the slot is released either way) and
 * frees it. A request never outlives its conn. A conn has at most one request at a time;
 * pipelined requests are parsed after the current response has been written out.
 * Return convention: functions returning int give 0 on success, -1 on failure.
 */
#ifndef VRAMD_NET_CONN_H
#define VRAMD_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/list.h"
#include "daemon/types.h"
#include "net/http1.h"
#include "sched/ledger.h"
#include "sched/queue.h"

enum conn_state { CONN_HEAD = 0, CONN_BODY, CONN_ACTIVE, CONN_CLOSING };

enum request_state {
    REQ_NEW = 0,
    REQ_QUEUED,
    REQ_CONNECTING,
    REQ_WAITING,
    REQ_STREAMING,
    REQ_LOCAL,
    REQ_DONE,
};

enum request_wait { WAIT_NONE = 0, WAIT_LOAD, WAIT_UNLOAD };

struct request {
    conn_t *conn;
    model_t *model;
    instance_t *instance; /* set while holding a slot on it */
    upstream_t *up;
    queue_entry_t qe;     /* in model->queue while QUEUED */
    ledger_entry_t mem;   /* REQUEST reservation while it holds a slot */
    uint64_t credit;      /* part of its estimate covered by its instance's cached memory */
    list_t wait_link;     /* in model->waiters while an admin call waits */
    enum request_wait wait;
    enum request_state state;
    char id[72];
    char *head;           /* the client's head bytes; spans in msg/hdrs point into it */
    size_t head_len;
    http1_msg_t msg;
    http1_header_t *hdrs;
    buf_t body;           /* decoded body */
    int priority;
    uint64_t deadline_ms; /* absolute monotonic; 0 = none */
    uint64_t t_arrival, t_queued, t_dispatched, t_first_byte;
    unsigned attempts;
    size_t strip_len;     /* bytes of route prefix to strip, minus the trailing '/' */
    int status;           /* status sent to the client, 0 until then */
    const char *outcome;  /* metrics: vramd's error code when it answered with one (conn_respond_error),
                           * or what broke a streamed answer (proxy); NULL = judged from status.
                           * Read when the request ends, inside that call: a literal or the caller's string */
    bool head_method;
    /* resilience (quality/verdict.c) */
    unsigned level;       /* degradation ladder level in use: 0 = as sent */
    buf_t orig_body;      /* the body as the client sent it, kept while a ladder may rewrite it */
    bool buffering;       /* the worker's answer is held and judged before the client sees it */
    buf_t resp_head;      /* held answer: "Name: value\r\n" header lines (hop-by-hop removed) */
    buf_t resp_body;
    int resp_status;
    char resp_reason[64];
    unsigned invalid_retries; /* retries after an invalid output (at most 1) */
    unsigned crash_retries;   /* retries after a worker crash (retry: safe, at most 1) */
    bool is_retry;            /* this attempt is a retry (counts against the retry budget) */
    struct process *validator; /* a validate.cmd run (or pool work) judging resp_body */
    bool validating_in_pool;   /* validator points at a thread-pool validation */
};

struct conn {
    list_t link; /* vramd->conns */
    vramd_t *d;
    uv_tcp_t tcp;
    uv_timer_t timer;    /* head/body deadline; queue deadline while ACTIVE */
    enum conn_state state;
    buf_t in;            /* bytes read and not consumed yet */
    size_t scan_from;
    uint64_t head_started_ms;
    /* body reading */
    request_t *req;
    http1_chunked_t chunked;
    uint64_t body_left;  /* Content-Length bytes still to read */
    bool sent_continue;
    bool keep_alive;     /* the current request allows another after it */
    bool read_paused;
    bool eof;            /* the client closed its side */
    unsigned writes_pending;
    size_t write_bytes_pending;
    upstream_t *throttled; /* an upstream paused until our writes drain */
    int corked;            /* > 0: conn_write collects into `out` (one write per upstream read) */
    buf_t out;
    int handles_open;
    char peer[64];
};

void conn_accept(vramd_t *d, uv_stream_t *listener);
/* Copy data into a write to the client. */
int conn_write(conn_t *c, const void *data, size_t len);
/* Between cork and uncork, writes are collected and leave as one write (a response head
 * and the first body bytes that arrived with it go out in one system call). */
void conn_cork(conn_t *c);
void conn_uncork(conn_t *c);
/* A complete response with a JSON (or other) body, then the request is finished. */
void conn_respond(conn_t *c, int status, const char *content_type, const char *body,
                  size_t body_len, const char *extra_headers);
/* vramd's error shape {"error":{"code","message","model","retry_after_s"}}; retry_after < 0:
 * none. Closes the connection afterwards when close_after is set. */
void conn_respond_error(conn_t *c, int status, const char *code, const char *model,
                        int retry_after_s, bool close_after, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* The response to the current request has been written completely (proxy or local). */
void conn_request_done(conn_t *c);
/* Abort the connection now (e.g. a streamed response broke halfway). */
void conn_abort(conn_t *c);
/* Write-queue size the proxy watches for backpressure. */
size_t conn_write_backlog(const conn_t *c);
/* The conn's one timer doubles as the queue deadline while its request waits (504). */
void conn_arm_queue_deadline(conn_t *c, uint64_t delay_ms);
void conn_stop_timer(conn_t *c);

void request_set_state(request_t *r, enum request_state s);
const char *request_state_name(enum request_state s);
/* Time spent queued / running so far, in ms, for X-Vramd-Queue-Ms / Run-Ms. */
uint64_t request_queue_ms(const request_t *r);

#endif
