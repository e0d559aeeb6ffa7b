/*
 * conn: one client connection: reading and checking requests, handing each complete one to
 * the handler the composition root gave (on_request), writing answers, keep-alive and
 * pipelining, timeouts and closing. It knows nothing above the core: whoever owns a
 * request's answer acts through the request's ops (core/request.h).
 *
 * Refusing on the head: a request with a body and "Expect: 100-continue" is shown to the
 * composition root's on_head before any of its body is read, and before the memory budget
 * is charged for it: on_head either answers it (the final refusal: no 100 Continue is sent,
 * the answer says Connection: close, and the connection closes without reading the body)
 * or lets it go on (100 Continue, the body, then on_request, which decides again on the
 * whole request). Without Expect the body is read first, as the client is already sending
 * it: answering mid-upload and closing can reset the connection under the client before it
 * reads the answer (RFC 9112 9.6). Only a Content-Length over max_body (413) and one the
 * memory budget cannot hold (503) are refused before the body either way.
 *
 * Connection states (conn_set_state logs old -> new at debug level):
 *   HEAD     reading a request head; one deadline (limits.header_timeout) for the whole
 *            head, armed when its first byte arrives (or at accept), so slowloris cannot
 *            extend it -> 408.
 *   BODY     reading the request body (Content-Length or chunked) under an idle timeout
 *            (limits.body_timeout): it may take as long as bytes keep coming; none for that
 *            long -> 408. The whole body is buffered, up to max_body (413).
 *   ACTIVE   a complete request is being served: queued, running upstream, or answered by
 *            vramd itself. The socket is still read, to notice a client that leaves, but
 *            pipelined bytes only accumulate (up to max_header) until the answer is done;
 *            past that reading pauses, and the watch timer asks the kernel every 250 ms
 *            whether the client sent FIN or RST meanwhile (TCP_INFO), which closes the
 *            connection as a read of EOF would.
 *            An upgraded connection (the worker answered 101: net/conn_tunnel.c) stays
 *            ACTIVE until it closes; its bytes are never parsed again.
 *   CLOSING  uv_close issued; freed in the close callback, never earlier.
 *   HEAD|BODY -> ACTIVE -> HEAD (keep-alive) ; any -> CLOSING (terminal).
 *
 * Sending: while answer bytes wait for the client, the watch timer checks that the kernel
 * takes some at least every limits.send_timeout; a client that reads nothing for that long
 * is closed (client_send_timeout) and its request cancelled, releasing its slot.
 *
 * The reserve: past limits.max_connections, up to reserved_connections more are accepted
 * with `reserve` set: one answer each, Connection: close, and serve/api.c answers only the
 * operator routes on them (503 overloaded otherwise). Past the reserve: closed at once.
 *
 * Pipelining: requests are parsed in a loop, never by recursion. A request answered at once
 * (vramd's own routes) returns to the loop, which parses the next one; at most
 * CONN_PIPELINE_BURST requests are parsed per call, and none while the client's unread
 * answers pass CONN_BACKLOG_MAX: the rest waits for the next loop turn or for the client to
 * read (backpressure), so no client can make vramd recurse or buffer without bound.
 *
 * Half-close: a client's FIN means the client is gone, whether a read sees it (EOF) or the
 * watch timer does while reading is paused: the current request is cancelled, even if it
 * was complete (HAProxy without `option abortonclose` would serve it; vramd frees the GPU
 * slot instead, since an HTTP/1.1 client that wants the answer keeps its side open).
 *
 * Ownership: a request belongs to its conn. When the client leaves, the conn calls the
 * request's ops->cancel (out of the queue, upstream closed, validator stopped: the slot is
 * released either way), emits CORE_EV_REQUEST_ENDED, and puts the request on the core's
 * free list: it is freed at the loop's safe point, never inside the call that ended it.
 * Return convention: conn_write, conn_respond and conn_respond_error give 0 when the
 * connection is still open and -1 when it is closed (or closing): the caller's request was
 * then cancelled and must not be acted on any more.
 */
#ifndef VRAMD_NET_CONN_H
#define VRAMD_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/list.h"
#include "core/types.h"
#include "http/http1.h"
#include "core/request.h"

enum conn_state { CONN_HEAD = 0, CONN_BODY, CONN_ACTIVE, CONN_CLOSING };

#define CONN_BACKLOG_MAX (256 * 1024) /* unread answer bytes before producers pause */
#define CONN_PIPELINE_BURST 32          /* pipelined requests parsed per loop turn */

typedef void (*conn_request_fn)(conn_t *c, request_t *r);
/* A head whose body is not read yet: true when it answered r (a refusal; r has then ended
 * and the connection is closing), false to let the body be read. */
typedef bool (*conn_head_fn)(conn_t *c, request_t *r);

/* What the composition root hands each accepted connection. on_head may be NULL (nothing is
 * refused before its body). */
typedef struct conn_handlers {
    conn_request_fn on_request; /* a complete request */
    conn_head_fn on_head;       /* the head of an Expect: 100-continue request */
} conn_handlers_t;

/* Write progress of one connection (net/conn_watch.c): a stall is measured from the last
 * time the kernel took answer bytes, or from when bytes started waiting. */
typedef struct conn_send_watch {
    uint64_t queued_total;  /* bytes ever queued with uv_write */
    uint64_t flushed_seen;  /* of those, taken by the kernel at the last progress */
    uint64_t progress_ms;   /* the last progress, or when bytes started waiting */
} conn_send_watch_t;

struct conn {
    list_t link; /* core->conns */
    core_t *core;
    conn_handlers_t handlers;
    uv_tcp_t tcp;
    uv_timer_t timer;    /* head/body deadline; the owner's timer (queue deadline) while ACTIVE */
    void (*timer_fn)(conn_t *c);
    core_defer_t resume; /* parse pipelined input at the next safe point */
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
    bool in_input;       /* inside process_input: a request that ends returns to its loop */
    bool want_drained;   /* call req->ops->drained once the backlog is below half the mark */
    unsigned writes_pending;
    size_t write_bytes_pending;
    int corked;            /* > 0: conn_write collects into `out` (one write per upstream read) */
    buf_t out;
    int handles_open;
    char peer[64];
    char client_key[64];   /* a job attempt's submitter key (limits.per_client, key: token); "" = none */
    bool job_attempt;      /* vramd's own job attempt (X-Vramd-Job-Client with the secret) */
    /* reliability (conn_watch.c) */
    uv_timer_t watch;       /* send progress and peer-gone checks; armed only while needed */
    conn_send_watch_t send; /* write progress, for limits.send_timeout */
    uint64_t last_read_ms;  /* the last bytes read, for limits.body_timeout */
    bool reserve;           /* accepted past max_connections: operator routes only, one answer */
    bool lingering;         /* answered and FIN sent: waiting for the client's FIN (LINGER_MS) */
    /* an upgraded connection (net/conn_tunnel.c): the client's bytes go to tunnel_fn */
    void (*tunnel_fn)(void *ctx, const char *data, size_t len);
    void *tunnel_ctx;
    bool tunnel;            /* reading belongs to conn_tunnel.c (for good: never HEAD again) */
    bool tunnel_paused;     /* the tunnel stopped reading the client (backpressure) */
};

void conn_accept(core_t *core, uv_stream_t *listener, const conn_handlers_t *handlers);
/* Copy data into a write to the client. */
int conn_write(conn_t *c, const void *data, size_t len);
/* Between cork and uncork, writes are collected and leave as one write (a response head
 * and the first body bytes that arrived with it go out in one system call). */
void conn_cork(conn_t *c);
int conn_uncork(conn_t *c);
/* A complete answer (head and a body of any size), then the request is finished. */
int conn_respond(conn_t *c, int status, const char *content_type, const char *body, size_t body_len,
                 const char *extra_headers);
/* vramd's error shape {"error":{"code","message","model","retry_after_s","stage"}}; retry_after < 0:
 * none; "stage" only when the request's error_stage is set (a deadline's). Closes the
 * connection afterwards when close_after is set. */
int conn_respond_error(conn_t *c, int status, const char *code, const char *model, int retry_after_s,
                       bool close_after, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* The answer to the current request has been written completely (proxy or local). */
void conn_request_done(conn_t *c);
/* Abort the connection now (a streamed answer broke halfway): the client sees it cut. */
void conn_abort(conn_t *c);
/* Unread answer bytes queued for the client. */
size_t conn_write_backlog(const conn_t *c);
/* Call the request's ops->drained once the backlog falls below CONN_BACKLOG_MAX / 2. */
void conn_want_drained(conn_t *c);
/* The conn's one timer, for the owner of an ACTIVE request (the queue deadline). */
void conn_set_timer(conn_t *c, uint64_t delay_ms, void (*fn)(conn_t *c));
void conn_stop_timer(conn_t *c);

/* Upgraded connections (net/conn_tunnel.c), for the owner of an ACTIVE request whose worker
 * answered 101: from conn_tunnel_begin on, every byte the client sends goes to fn(ctx, ...)
 * (first what was already read behind the request head), never parsed again. The client's
 * FIN or an error closes the connection (conn_abort: the request's ops->cancel runs).
 * Bytes to the client still go through conn_write (send_timeout, backlog, drained). */
void conn_tunnel_begin(conn_t *c, void (*fn)(void *ctx, const char *data, size_t len), void *ctx);
/* Stop or resume reading the client (the other side's write queue is over its bound). */
void conn_tunnel_pause(conn_t *c, bool pause);
/* No more client bytes for the owner (the tunnel ended): what still comes is discarded until
 * the client's FIN closes the connection. */
void conn_tunnel_end(conn_t *c);

#endif
