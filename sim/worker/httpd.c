/*
 * httpd: HTTP/1.1 server for simworker. See httpd.h for the contract.
 *
 * Connection states:
 *   HEAD    reading a request head (idle keep-alive timer armed while nothing is buffered)
 *   BODY    reading its body (Content-Length bytes, or chunked through http1_chunked_feed)
 *   ACTIVE  the handler owns the request; the socket is not read (pipelined bytes wait in
 *           the kernel); when the answer is complete the request's bytes are consumed and
 *           the state goes back to HEAD (or the connection closes).
 * Invariants:
 *   - a connection is freed only from its handles' close callbacks, and it is closed only
 *     when no request is ACTIVE on it (a write error during ACTIVE marks it broken; the
 *     close waits for the handler's answer);
 *   - want_close + pending writes: uv_close runs after the last write callback;
 *   - buffers are bounded: the input by head + max_body + one read, the decoded chunked
 *     body by max_body.
 */
#include "httpd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "http/http1.h"

enum conn_state { C_HEAD = 0, C_BODY, C_ACTIVE };

struct sw_httpd {
    uv_loop_t *loop;
    uv_tcp_t listener;
    sw_httpd_opts_t o;
    list_t conns;
    size_t n_conns;
    bool stopped;
};

struct sw_conn {
    list_t link;
    sw_httpd_t *srv;
    uv_tcp_t tcp;
    uv_timer_t idle;
    int handles_open;
    enum conn_state state;
    buf_t in;
    size_t scan_from;
    http1_msg_t msg;
    http1_header_t hdrs[SW_HTTPD_MAX_HEADERS];
    http1_chunked_t chunked;
    size_t chunk_pos; /* offset in `in` of the next undecoded chunked byte */
    buf_t body;       /* decoded chunked body */
    size_t msg_total; /* bytes of `in` this request used */
    sw_http_req_t req;
    bool keep_alive;
    bool in_dispatch, responded, streaming;
    bool reading, broken, want_close, closing;
    bool body_overflow; /* a chunked body went over max_body */
    int pending_writes;
};

typedef struct write_req {
    uv_write_t w;
    sw_conn_t *c;
    size_t len;
    char data[];
} write_req_t;

static void conn_process(sw_conn_t *c);

/* ---- closing ------------------------------------------------------------------------ */

static void on_handle_closed(uv_handle_t *h)
{
    sw_conn_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    list_remove(&c->link);
    c->srv->n_conns--;
    buf_free(&c->in);
    buf_free(&c->body);
    free(c);
}

static void conn_close_now(sw_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_timer_stop(&c->idle);
    uv_close((uv_handle_t *)&c->idle, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* Close once the pending writes are out (never while a request is ACTIVE). */
static void conn_close(sw_conn_t *c)
{
    c->want_close = true;
    if (c->state == C_ACTIVE)
        return;
    if (c->pending_writes == 0)
        conn_close_now(c);
}

/* ---- writing ------------------------------------------------------------------------ */

static void on_write(uv_write_t *w, int status)
{
    write_req_t *wr = (write_req_t *)w;
    sw_conn_t *c = wr->c;
    free(wr);
    c->pending_writes--;
    if (status < 0) {
        c->broken = true;
        c->want_close = true;
    }
    if (c->want_close && c->pending_writes == 0 && c->state != C_ACTIVE)
        conn_close_now(c);
}

static void conn_write(sw_conn_t *c, const void *a, size_t alen, const void *b, size_t blen)
{
    if (c->broken || c->closing || alen + blen == 0)
        return;
    write_req_t *wr = malloc(sizeof(*wr) + alen + blen);
    if (!wr) {
        c->broken = true;
        c->want_close = true;
        return;
    }
    wr->c = c;
    wr->len = alen + blen;
    if (alen)
        memcpy(wr->data, a, alen);
    if (blen)
        memcpy(wr->data + alen, b, blen);
    uv_buf_t ub = uv_buf_init(wr->data, (unsigned)wr->len);
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &ub, 1, on_write) != 0) {
        free(wr);
        c->broken = true;
        c->want_close = true;
        return;
    }
    c->pending_writes++;
}

/* Renders a response head into out. */
static int render_head(sw_conn_t *c, buf_t *out, int status, const char *ctype,
                       const char *extra, long long content_length)
{
    int rc = buf_printf(out, "HTTP/1.1 %d %s\r\nserver: simworker\r\n", status, http1_reason(status));
    if (ctype)
        rc |= buf_printf(out, "content-type: %s\r\n", ctype);
    if (content_length >= 0)
        rc |= buf_printf(out, "content-length: %lld\r\n", content_length);
    else
        rc |= buf_append_str(out, "transfer-encoding: chunked\r\n");
    if (c->req.request_id[0])
        rc |= buf_printf(out, "x-request-id: %s\r\n", c->req.request_id);
    bool keep = c->keep_alive && !c->srv->stopped && !c->want_close;
    if (!keep)
        c->want_close = true;
    rc |= buf_append_str(out, keep ? "connection: keep-alive\r\n" : "connection: close\r\n");
    if (extra)
        rc |= buf_append_str(out, extra);
    rc |= buf_append_str(out, "\r\n");
    return rc;
}

/* The handler has answered: consume the request, then go on with the connection. */
static void conn_request_done(sw_conn_t *c)
{
    c->state = C_HEAD;
    buf_consume(&c->in, c->msg_total);
    c->msg_total = 0;
    c->scan_from = 0;
    if (c->want_close || c->broken) {
        conn_close(c);
        return;
    }
    conn_process(c);
}

static void finish_response(sw_conn_t *c)
{
    c->responded = true;
    if (!c->in_dispatch)
        conn_request_done(c);
}

void sw_http_respond(sw_http_req_t *r, int status, const char *content_type,
                     const char *extra_headers, const void *body, size_t len)
{
    sw_conn_t *c = r->conn;
    buf_t head;
    buf_init(&head, SW_HTTPD_MAX_HEAD);
    render_head(c, &head, status, content_type, extra_headers, (long long)len);
    conn_write(c, head.data, head.len, r->head_method ? NULL : body, r->head_method ? 0 : len);
    buf_free(&head);
    finish_response(c);
}

void sw_http_stream_begin(sw_http_req_t *r, int status, const char *content_type,
                          const char *extra_headers)
{
    sw_conn_t *c = r->conn;
    buf_t head;
    buf_init(&head, SW_HTTPD_MAX_HEAD);
    render_head(c, &head, status, content_type, extra_headers, -1);
    conn_write(c, head.data, head.len, NULL, 0);
    buf_free(&head);
    c->streaming = true;
}

void sw_http_stream_write(sw_http_req_t *r, const void *data, size_t len)
{
    sw_conn_t *c = r->conn;
    if (!c->streaming || len == 0 || r->head_method)
        return;
    char size[32];
    int n = snprintf(size, sizeof(size), "%zx\r\n", len);
    buf_t b;
    buf_init(&b, len + 64);
    buf_append(&b, size, (size_t)n);
    buf_append(&b, data, len);
    buf_append(&b, "\r\n", 2);
    conn_write(c, b.data, b.len, NULL, 0);
    buf_free(&b);
}

void sw_http_stream_end(sw_http_req_t *r)
{
    sw_conn_t *c = r->conn;
    if (c->streaming && !r->head_method)
        conn_write(c, "0\r\n\r\n", 5, NULL, 0);
    c->streaming = false;
    finish_response(c);
}

/* An error found by the server itself (parse errors, limits): answer and close. */
static void conn_fail(sw_conn_t *c, int status, const char *detail)
{
    char body[256];
    int n = snprintf(body, sizeof(body), "{\"detail\": \"%s\"}", detail);
    c->want_close = true;
    c->state = C_ACTIVE; /* so that request_done runs the usual way */
    c->msg_total = c->in.len;
    c->req.head_method = false;
    c->in_dispatch = true;
    sw_http_respond(&c->req, status, "application/json", NULL, body, (size_t)n);
    c->in_dispatch = false;
    conn_request_done(c);
}

/* ---- reading ------------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    sw_conn_t *c = h->data;
    (void)suggested;
    if (buf_reserve(&c->in, 65536) != 0) {
        *out = uv_buf_init(NULL, 0);
        return;
    }
    *out = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void conn_stop_reading(sw_conn_t *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    sw_conn_t *c = st->data;
    (void)b;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_stop_reading(c);
        if (nread == UV_ENOBUFS && c->state == C_HEAD) {
            conn_fail(c, 431, "request head too large");
            return;
        }
        if (nread == UV_ENOBUFS) {
            conn_fail(c, 413, "request body too large");
            return;
        }
        conn_close(c);
        return;
    }
    c->in.len += (size_t)nread;
    uv_timer_stop(&c->idle);
    conn_process(c);
}

static void on_idle_timeout(uv_timer_t *t)
{
    sw_conn_t *c = t->data;
    if (c->state == C_HEAD)
        conn_close(c);
}

static void conn_want_more(sw_conn_t *c)
{
    if (c->srv->stopped && c->in.len == 0) {
        conn_close(c);
        return;
    }
    if (!c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->reading = true;
    }
    if (c->state == C_HEAD && c->srv->o.keepalive_ms)
        uv_timer_start(&c->idle, on_idle_timeout, c->srv->o.keepalive_ms, 0);
}

static void on_chunk_data(void *ctx, const char *data, size_t len)
{
    sw_conn_t *c = ctx;
    if (buf_append(&c->body, data, len) != 0)
        c->body_overflow = true; /* reported by conn_process */
}

static void copy_header(sw_conn_t *c, const char *name, char *out, size_t cap)
{
    out[0] = 0;
    const http1_header_t *h = http1_find_header(c->in.data, &c->msg, name);
    if (!h)
        return;
    size_t n = h->value.len < cap - 1 ? h->value.len : cap - 1;
    memcpy(out, c->in.data + h->value.off, n);
    out[n] = 0;
}

/* Fills c->req from the parsed head. Returns -1 when the target does not fit. */
static int fill_request(sw_conn_t *c)
{
    sw_http_req_t *r = &c->req;
    memset(r, 0, sizeof(*r));
    r->conn = c;
    const char *buf = c->in.data;
    if (c->msg.method.len >= sizeof(r->method))
        return -1;
    memcpy(r->method, buf + c->msg.method.off, c->msg.method.len);
    r->head_method = strcmp(r->method, "HEAD") == 0;
    const char *t = buf + c->msg.target.off;
    size_t tl = c->msg.target.len;
    const char *q = memchr(t, '?', tl);
    size_t pl = q ? (size_t)(q - t) : tl;
    size_t ql = q ? tl - pl - 1 : 0;
    if (pl >= sizeof(r->path) || ql >= sizeof(r->query))
        return -1;
    memcpy(r->path, t, pl);
    if (q)
        memcpy(r->query, q + 1, ql);
    copy_header(c, "content-type", r->content_type, sizeof(r->content_type));
    copy_header(c, "x-request-id", r->request_id, sizeof(r->request_id));
    copy_header(c, "accept", r->accept, sizeof(r->accept));
    return 0;
}

static void dispatch(sw_conn_t *c)
{
    c->state = C_ACTIVE;
    conn_stop_reading(c);
    uv_timer_stop(&c->idle);
    c->responded = false;
    c->streaming = false;
    c->in_dispatch = true;
    c->srv->o.on_request(&c->req, c->srv->o.ctx);
    c->in_dispatch = false;
    if (c->responded)
        conn_request_done(c);
}

static void conn_process(sw_conn_t *c)
{
    const http1_limits_t limits = {SW_HTTPD_MAX_HEAD, SW_HTTPD_MAX_HEADERS};
    if (c->closing || c->state == C_ACTIVE)
        return;
    if (c->state == C_HEAD) {
        if (c->in.len == 0) {
            conn_want_more(c);
            return;
        }
        http1_error_t err;
        memset(&err, 0, sizeof(err));
        int rc = http1_parse_request(c->in.data, c->in.len, &limits, &c->msg, c->hdrs,
                                     &c->scan_from, &err);
        if (rc == HTTP1_NEED_MORE) {
            conn_want_more(c);
            return;
        }
        if (rc == HTTP1_ERROR) {
            memset(&c->req, 0, sizeof(c->req));
            c->req.conn = c;
            log_event(LOG_WARN, "bad_request", "error=%s pos=%zu", err.what ? err.what : "?", err.pos);
            conn_fail(c, err.code == HTTP1_E_HEAD_TOO_LARGE ? 431 : 400,
                      err.what ? err.what : "bad request");
            return;
        }
        c->keep_alive = c->msg.keep_alive;
        if (fill_request(c) != 0) {
            conn_fail(c, 414, "request target too long");
            return;
        }
        if (c->msg.body == HTTP1_BODY_LENGTH && c->msg.content_length > c->srv->o.max_body) {
            conn_fail(c, 413, "request body too large");
            return;
        }
        if (c->msg.expect_continue && c->msg.body != HTTP1_BODY_NONE &&
            !(c->msg.body == HTTP1_BODY_LENGTH && c->msg.content_length == 0))
            conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL, 0);
        c->state = C_BODY;
        c->chunk_pos = c->msg.head_len;
        buf_reset(&c->body);
        http1_chunked_init(&c->chunked, 16384);
    }
    /* C_BODY */
    if (c->msg.body == HTTP1_BODY_LENGTH) {
        size_t need = c->msg.head_len + (size_t)c->msg.content_length;
        if (c->in.len < need) {
            conn_want_more(c);
            return;
        }
        c->req.body = c->in.data + c->msg.head_len;
        c->req.body_len = (size_t)c->msg.content_length;
        c->msg_total = need;
    } else if (c->msg.body == HTTP1_BODY_CHUNKED) {
        size_t consumed = 0;
        http1_error_t err;
        memset(&err, 0, sizeof(err));
        int rc = http1_chunked_feed(&c->chunked, c->in.data + c->chunk_pos, c->in.len - c->chunk_pos,
                                    &consumed, on_chunk_data, c, &err);
        c->chunk_pos += consumed;
        if (c->body_overflow) {
            c->body_overflow = false;
            conn_fail(c, 413, "request body too large");
            return;
        }
        if (rc == HTTP1_ERROR) {
            conn_fail(c, 400, err.what ? err.what : "bad chunked body");
            return;
        }
        if (rc == HTTP1_NEED_MORE) {
            /* Keep the input bounded: decoded bytes are no longer needed in `in`. */
            conn_want_more(c);
            return;
        }
        c->req.body = c->body.data ? c->body.data : "";
        c->req.body_len = c->body.len;
        c->msg_total = c->chunk_pos;
    } else {
        c->req.body = "";
        c->req.body_len = 0;
        c->msg_total = c->msg.head_len;
    }
    dispatch(c);
}

/* ---- accepting ---------------------------------------------------------------------- */

static void on_connection(uv_stream_t *ls, int status)
{
    sw_httpd_t *s = ls->data;
    if (status < 0)
        return;
    sw_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->idle);
    c->tcp.data = c;
    c->idle.data = c;
    c->handles_open = 2;
    list_insert_tail(&s->conns, &c->link);
    s->n_conns++;
    /* Input: a head plus a body plus one read; chunked bodies are decoded into `body`. */
    buf_init(&c->in, SW_HTTPD_MAX_HEAD + (size_t)s->o.max_body + 65536);
    buf_init(&c->body, (size_t)s->o.max_body);
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0 || s->n_conns > SW_HTTPD_MAX_CONNS || s->stopped) {
        conn_close_now(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    conn_want_more(c);
}

sw_httpd_t *sw_httpd_start(uv_loop_t *loop, const sw_httpd_opts_t *o, int *bound_port, char *err,
                           size_t errlen)
{
    sw_httpd_t *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->o = *o;
    list_init(&s->conns);
    struct sockaddr_storage addr;
    int rc;
    if (strchr(o->host, ':'))
        rc = uv_ip6_addr(o->host, o->port, (struct sockaddr_in6 *)&addr);
    else
        rc = uv_ip4_addr(strcmp(o->host, "localhost") == 0 ? "127.0.0.1" : o->host, o->port,
                         (struct sockaddr_in *)&addr);
    if (rc != 0) {
        snprintf(err, errlen, "bad listen address %s: %s", o->host, uv_strerror(rc));
        free(s);
        return NULL;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", o->host, o->port, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->listener, NULL);
        return NULL; /* s is leaked on purpose: the process exits on this error */
    }
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    *bound_port = o->port;
    if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen) == 0) {
        if (bound.ss_family == AF_INET)
            *bound_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        else if (bound.ss_family == AF_INET6)
            *bound_port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    }
    return s;
}

void sw_httpd_stop(sw_httpd_t *s)
{
    if (s->stopped)
        return;
    s->stopped = true;
    uv_close((uv_handle_t *)&s->listener, NULL);
    list_foreach_safe(it, tmp, &s->conns)
    {
        sw_conn_t *c = list_entry(it, sw_conn_t, link);
        if (c->state == C_HEAD && c->in.len == 0)
            conn_close(c);
    }
}
