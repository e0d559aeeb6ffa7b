/*
 * proxy_forward: the bytes that cross the proxy, written in the form the other side needs:
 * the request head for the worker (route prefix stripped, vramd's headers added), and the
 * worker's response head and body for the client (re-framed: chunked for HTTP/1.1 clients
 * when the worker's length is unknown), or held in the request for the verdict
 * (verdict_hold_of: VERDICT_HOLD). A watched stream's bytes (VERDICT_WATCH) go to its
 * stream_watch as they are forwarded: read, never held or changed.
 *
 * Invariants: hop-by-hop headers and Content-Length never pass either way; X-Request-Id is
 * always vramd's. Nothing here closes, fails or finishes an upstream or a request: a write
 * to the client that fails is reported (FWD_CLIENT_GONE) and from then on neither the
 * request nor the upstream may be touched (the client's close cancelled them). Calls
 * nothing in proxy.c (see proxy_int.h).
 */
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "core/core.h"
#include "net/conn.h"
#include "http/http1.h"
#include "http/http_out.h"
#include "path/proxy_int.h"

void proxy_throttle(upstream_t *up)
{
    if (up->req->buffering)
        return;
    conn_t *c = up->req->conn;
    if (conn_write_backlog(c) > CONN_BACKLOG_MAX && !up->paused) {
        uv_read_stop((uv_stream_t *)&up->tcp);
        uv_timer_stop(&up->timer);
        up->paused = true;
        conn_want_drained(c);
    }
}

/* One chunk to the client; 0, or -1 when the client is gone (its request was cancelled). */
static int write_chunk(conn_t *c, const char *data, size_t len)
{
    char head[24];
    int n = snprintf(head, sizeof head, "%zx\r\n", len);
    if (conn_write(c, head, (size_t)n) != 0 || conn_write(c, data, len) != 0)
        return -1;
    return conn_write(c, "\r\n", 2);
}

/* Body bytes of a held answer; false when it outgrew limits.max_body. */
static bool hold(upstream_t *up, const char *data, size_t len)
{
    return buf_append(&up->req->resp_body, data, len) == 0;
}

static void on_chunk(void *ctx, const char *data, size_t len)
{
    upstream_t *up = ctx;
    if (len == 0 || !up->req)
        return;
    if (up->req->buffering) {
        if (!hold(up, data, len))
            up->too_big = true;
        return;
    }
    conn_t *c = up->req->conn;
    stream_watch_feed(&up->watch, data, len);
    int rc = up->client_chunked ? write_chunk(c, data, len) : conn_write(c, data, len);
    if (rc != 0)
        up->client_gone = true;
}

/* Forward body bytes (proxy_int.h says what it returns). */
enum fwd_result proxy_forward_body(upstream_t *up, const char *data, size_t len, size_t *used)
{
    conn_t *c = up->req->conn;
    *used = 0;
    switch (up->framing) {
    case HTTP1_BODY_NONE:
        return FWD_BODY_DONE;
    case HTTP1_BODY_LENGTH: {
        size_t n = len < up->body_left ? len : (size_t)up->body_left;
        if (n && up->req->buffering) {
            if (!hold(up, data, n))
                return FWD_TOO_LARGE;
        } else if (n && !up->req->head_method) {
            stream_watch_feed(&up->watch, data, n);
            if (conn_write(c, data, n) != 0)
                return FWD_CLIENT_GONE;
        }
        up->body_left -= n;
        *used = n;
        return up->body_left == 0 ? FWD_BODY_DONE : FWD_OK;
    }
    case HTTP1_BODY_CHUNKED: {
        http1_error_t err;
        int rc = http1_chunked_feed(&up->chunked, data, len, used, on_chunk, up, &err);
        if (up->client_gone)
            return FWD_CLIENT_GONE;
        if (up->too_big)
            return FWD_TOO_LARGE;
        if (rc == HTTP1_ERROR)
            return FWD_MALFORMED;
        return rc == HTTP1_OK ? FWD_BODY_DONE : FWD_OK;
    }
    case HTTP1_BODY_UNTIL_CLOSE:
        if (len && up->req->buffering) {
            if (!hold(up, data, len))
                return FWD_TOO_LARGE;
        } else if (len) {
            stream_watch_feed(&up->watch, data, len);
            int rc = up->client_chunked ? write_chunk(c, data, len) : conn_write(c, data, len);
            if (rc != 0)
                return FWD_CLIENT_GONE;
        }
        *used = len;
        return FWD_OK;
    }
    return FWD_MALFORMED;
}

/* Hop-by-hop headers and Content-Length never pass; X-Request-Id is vramd's own. */
static const char *const answer_skip[] = {"X-Request-Id", NULL};

/* The worker's head goes to the client with vramd's headers and the body's framing for
 * this client (proxy_int.h says what it returns). */
enum fwd_result proxy_send_response_head(upstream_t *up, const char *buf, const http1_msg_t *msg)
{
    request_t *r = up->req;
    conn_t *c = r->conn;
    buf_t h;
    buf_init(&h, UP_HEAD_MAX + 1024);
    http_out_status(&h, msg->status, msg->reason.len ? buf + msg->reason.off : NULL, msg->reason.len);
    http_out_copy_headers(&h, buf, msg, answer_skip);
    uint64_t now = core_now();
    r->t_first_byte = now;
    request_vramd_headers(r, &h, now - r->t_dispatched);
    up->client_chunked = false;
    switch (up->framing) {
    case HTTP1_BODY_NONE:
        if (msg->status >= 200 && msg->status != 204 && msg->status != 304 && !r->head_method)
            http_out_header(&h, "Content-Length", "0");
        break;
    case HTTP1_BODY_LENGTH:
        http_out_header(&h, "Content-Length", "%llu", (unsigned long long)msg->content_length);
        break;
    case HTTP1_BODY_CHUNKED:
    case HTTP1_BODY_UNTIL_CLOSE:
        if (r->head_method)
            break;
        if (r->msg.version_minor >= 1)
            up->client_chunked = true;
        else
            c->keep_alive = false;
        if (up->client_chunked)
            http_out_header(&h, "Transfer-Encoding", "chunked");
        break;
    }
    if (r->head_method) {
        const http1_header_t *cl = http1_find_header(buf, msg, "Content-Length");
        if (cl)
            http_out_header(&h, "Content-Length", "%.*s", (int)cl->value.len, buf + cl->value.off);
    }
    if (!c->keep_alive)
        http_out_header(&h, "Connection", "close");
    http_out_end(&h);
    r->status = msg->status;
    enum fwd_result rc = FWD_OK;
    if (buf_failed(&h))
        rc = FWD_TOO_LARGE;
    else if (conn_write(c, h.data, h.len) != 0)
        rc = FWD_CLIENT_GONE;
    buf_free(&h);
    return rc;
}

/* An answer to hold (verdict_hold_of): keep the head (status, reason, end-to-end headers)
 * for the verdict instead of sending it. */
void proxy_hold_response_head(upstream_t *up, const char *buf, const http1_msg_t *msg)
{
    request_t *r = up->req;
    r->buffering = true;
    r->resp_status = msg->status;
    r->t_first_byte = core_now();
    snprintf(r->resp_reason, sizeof r->resp_reason, "%.*s", (int)msg->reason.len, buf + msg->reason.off);
    buf_reset(&r->resp_head);
    buf_reset(&r->resp_body);
    http_out_copy_headers(&r->resp_head, buf, msg, answer_skip);
    up->client_chunked = false;
}

/* Hop-by-hop headers and Content-Length never pass; Expect was answered by vramd;
 * X-Vramd-Job-Client (a job attempt's submitter, with vramd's secret) stays inside. */
static const char *const request_skip[] = {"Expect", "X-Request-Id", "X-Vramd-Job-Client", NULL};

void proxy_request_head(request_t *r, buf_t *h)
{
    conn_t *c = r->conn;
    const char *target = r->head + r->msg.target.off;
    size_t tlen = r->msg.target.len;
    if (r->strip_len && tlen >= r->strip_len) {
        target += r->strip_len;
        tlen -= r->strip_len;
        if (tlen == 0 || target[0] != '/') {
            /* "/echo" or "/echo?x" -> "/" or "/?x" */
            buf_printf(h, "%.*s /%.*s HTTP/1.1\r\n", (int)r->msg.method.len, r->head + r->msg.method.off,
                       (int)tlen, target);
            goto headers;
        }
    }
    buf_printf(h, "%.*s %.*s HTTP/1.1\r\n", (int)r->msg.method.len, r->head + r->msg.method.off,
               (int)tlen, target);
headers:
    http_out_copy_headers(h, r->head, &r->msg, request_skip);
    http_out_header(h, "X-Request-Id", "%s", r->id);
    if (c->peer[0]) {
        char ip[64];
        snprintf(ip, sizeof ip, "%s", c->peer);
        char *colon = strrchr(ip, ':');
        if (colon)
            *colon = '\0';
        http_out_header(h, "X-Forwarded-For", "%s", ip);
    }
    if (r->body.len || r->msg.body != HTTP1_BODY_NONE)
        http_out_header(h, "Content-Length", "%zu", r->body.len);
    http_out_header(h, "Connection", "keep-alive");
    http_out_end(h);
}
