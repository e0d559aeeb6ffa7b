/*
 * proxy_int: what proxy.c, proxy_forward.c and proxy_gate.c share; nothing outside them may
 * include it. proxy_gate.c (the entry: requests held for a driver limit) calls proxy.c's
 * proxy_start_attempt, proxy_cancel and proxy_pool_close, never the other way.
 * The upstream connection object and its states are described in proxy.c. Calls go one
 * way: proxy.c (connections, outcomes, reading) -> proxy_forward.c (bytes across: the request
 * head for the worker, the response head and body for the client); proxy_forward.c never
 * closes, fails or finishes an upstream itself: it reports and proxy.c acts.
 */
#ifndef VRAMD_PATH_PROXY_INT_H
#define VRAMD_PATH_PROXY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/list.h"
#include "core/request.h"
#include "http/http1.h"
#include "path/proxy.h"
#include "quality/stream_watch.h"

#define UP_HEAD_MAX (64 * 1024)
#define UP_MAX_HEADERS 128

enum up_state { UP_CONNECTING = 0, UP_SENDING, UP_HEAD, UP_BODY, UP_IDLE, UP_CLOSED };

struct upstream {
    list_t link; /* inst->path.pool while IDLE */
    instance_t *inst;
    request_t *req;
    enum up_state state;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_timer_t timer;   /* connect timeout, then the worker-silence timer (proxy.c) */
    uint64_t t_sent;    /* the request was (being) written: response_timeout runs from here */
    uint64_t t_heard;   /* the worker's last bytes, or vramd's last resumed reading */
    buf_t in;
    size_t scan_from;
    http1_body_t framing;
    uint64_t body_left;
    http1_chunked_t chunked;
    bool reused;
    bool upstream_keep_alive;
    bool client_chunked;
    bool got_bytes;
    bool paused;
    bool too_big;       /* a held answer outgrew limits.max_body */
    bool client_gone;   /* a write to the client failed: the request was cancelled */
    int handles_open;
    stream_watch_t watch; /* a watched stream's events (verdict_hold_of: VERDICT_WATCH), else kind NONE */
};

/* What proxy_send_response_head and proxy_forward_body report (one code per outcome). */
enum fwd_result {
    FWD_OK = 0,           /* the head was sent; body: forwarded, more to come */
    FWD_BODY_DONE = 1,    /* body: complete */
    FWD_MALFORMED = -1,   /* body: not a valid body */
    FWD_TOO_LARGE = -2,   /* the head outgrew its buffer, or a held answer outgrew max_body */
    FWD_CLIENT_GONE = -3, /* a write to the client failed: the request was cancelled, the
                           * caller must not touch it */
};

/* The request head for the worker (request line with the route prefix stripped, the
 * client's end-to-end headers, X-Request-Id, X-Forwarded-For, Content-Length) into h;
 * buf_failed(h) when it outgrew h's limit. */
void proxy_request_head(request_t *r, buf_t *h);
/* The worker's head goes to the client with vramd's headers and the body's framing for
 * this client. FWD_OK, FWD_CLIENT_GONE, or FWD_TOO_LARGE (the head). */
enum fwd_result proxy_send_response_head(upstream_t *up, const char *buf, const http1_msg_t *msg);
/* An answer to hold (verdict_hold_of: VERDICT_HOLD): keep the head for the verdict instead. */
void proxy_hold_response_head(upstream_t *up, const char *buf, const http1_msg_t *msg);
/* Forward body bytes: FWD_BODY_DONE when the body is complete, FWD_OK for more,
 * FWD_MALFORMED, FWD_TOO_LARGE when a held answer outgrew max_body, FWD_CLIENT_GONE. */
enum fwd_result proxy_forward_body(upstream_t *up, const char *data, size_t len, size_t *used);
/* Stop reading the upstream while the client's backlog is over CONN_BACKLOG_MAX (the
 * worker-silence timer stops with it: a slow client is not a silent worker). */
void proxy_throttle(upstream_t *up);

/* proxy.c, for proxy_gate.c: start forwarding (allow_pooled: an idle pooled connection may
 * be taken); let go of a request whose client left; close an instance's pooled connections
 * (CORE_EV_INSTANCE_DOWN). */
void proxy_start_attempt(request_t *req, instance_t *inst, bool allow_pooled);
void proxy_cancel(request_t *r);
void proxy_pool_close(void *ctx, enum core_event ev, void *subject);

#endif
