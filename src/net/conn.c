/*
 * conn: client connections: reading and checking requests, handing them to on_request,
 * writing answers, keep-alive and pipelining, timeouts and closing. See conn.h for the
 * states, the pipelining bound and the ownership rules.
 *
 * Memory per connection is kept small so that thousands of parked (queued) requests cost
 * little: reads land in one loop-wide 64 KiB buffer and only the bytes not yet consumed are
 * copied into the connection's own buffer; a parsed request keeps a copy of its head and
 * only as many header slots as it has headers.
 */
#include "net/conn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "core/core.h"
#include "core/mem_budget.h"
#include "core/model.h"
#include "net/conn_int.h"
#include "http/http_out.h"

#define READ_CHUNK (64 * 1024)
#define LINGER_MS 2000
#define CORK_MAX (64 * 1024)

static char g_read_buf[READ_CHUNK];
static http1_header_t *g_hdr_scratch;
static size_t g_hdr_scratch_cap;

typedef struct write_req {
    uv_write_t req;
    conn_t *conn;
    size_t len;
    char data[];
} write_req_t;

static void conn_close(conn_t *c);
static void process_input(conn_t *c);
static void conn_close_after_flush(conn_t *c);
static int conn_write_now(conn_t *c, const void *data, size_t len);
static void schedule_resume(conn_t *c);
static void watch_arm(conn_t *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/* ---- writing ---------------------------------------------------------------------- */

size_t conn_write_backlog(const conn_t *c) { return c->write_bytes_pending; }

static void on_write(uv_write_t *wr, int status)
{
    write_req_t *w = (write_req_t *)wr;
    conn_t *c = w->conn;
    c->writes_pending--;
    c->write_bytes_pending -= w->len;
    free(w);
    if (c->state == CONN_CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->write_bytes_pending >= CONN_BACKLOG_MAX / 2)
        return;
    if (c->want_drained) {
        c->want_drained = false;
        request_t *r = c->req;
        if (r && r->ops && r->ops->drained)
            r->ops->drained(r);
    }
    if (c->state == CONN_HEAD && c->in.len)
        schedule_resume(c); /* pipelined requests waited for the client to read */
}

void conn_want_drained(conn_t *c) { c->want_drained = true; }

void conn_cork(conn_t *c) { c->corked++; }

int conn_uncork(conn_t *c)
{
    if (c->corked > 0)
        c->corked--;
    int rc = c->state == CONN_CLOSING ? -1 : 0;
    if (c->corked == 0 && c->out.len) {
        if (rc == 0)
            rc = conn_write_now(c, c->out.data, c->out.len);
        buf_reset(&c->out);
    }
    return rc;
}

int conn_write(conn_t *c, const void *data, size_t len)
{
    if (c->state == CONN_CLOSING)
        return -1;
    if (len == 0)
        return 0;
    if (c->corked) {
        if (len <= buf_room(&c->out) && buf_append(&c->out, data, len) == 0)
            return 0;
        if (c->out.len) {
            int rc = conn_write_now(c, c->out.data, c->out.len);
            buf_reset(&c->out);
            if (rc != 0)
                return rc;
        }
    }
    return conn_write_now(c, data, len);
}

static int conn_write_now(conn_t *c, const void *data, size_t len)
{
    if (c->state == CONN_CLOSING)
        return -1;
    if (len == 0)
        return 0;
    if (c->writes_pending == 0) {
        /* Write at once when the socket takes it: no write request, no callback, and (with
         * libuv 1.44) no epoll_ctl to re-arm the watcher afterwards. Only a remainder the
         * kernel did not take is queued. */
        uv_buf_t direct = uv_buf_init((char *)data, (unsigned)len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &direct, 1);
        if (n == (int)len)
            return 0;
        if (n > 0) {
            data = (const char *)data + n;
            len -= (size_t)n;
        } else if (n != UV_EAGAIN && n != UV_ENOSYS) {
            conn_close(c);
            return -1;
        }
    }
    write_req_t *w = malloc(sizeof *w + len);
    if (!w) {
        conn_close(c); /* an answer with a hole in it must not go on */
        return -1;
    }
    w->conn = c;
    w->len = len;
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    conn_send_queued(&c->send, &c->tcp, len, core_now());
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        free(w);
        conn_close(c);
        return -1;
    }
    c->writes_pending++;
    c->write_bytes_pending += len;
    watch_arm(c); /* limits.send_timeout */
    return 0;
}

int conn_respond(conn_t *c, int status, const char *content_type, const char *body, size_t body_len,
                 const char *extra_headers)
{
    request_t *r = c->req;
    buf_t h;
    buf_init(&h, 64 * 1024);
    http_out_status(&h, status, NULL, 0);
    http_out_header(&h, "Content-Type", "%s", content_type ? content_type : "application/json");
    http_out_header(&h, "Content-Length", "%zu", body_len);
    if (r) {
        http_out_header(&h, "X-Request-Id", "%s", r->id);
        r->status = status;
    }
    if (extra_headers)
        http_out_raw(&h, extra_headers, strlen(extra_headers));
    if (!c->keep_alive)
        http_out_raw(&h, "Connection: close\r\n", 19);
    http_out_end(&h);
    if (buf_failed(&h)) {
        /* never send half a head */
        log_event(LOG_ERROR, "respond_failed", "request_id=%s status=%d reason=%s", r ? r->id : NULL, status,
                  "head over 64 KiB");
        buf_free(&h);
        conn_close(c);
        return -1;
    }
    if (r && r->head_method)
        body_len = 0;
    /* head and body leave in one write when they fit the cork, in two otherwise: a body of
     * any size is written whole */
    conn_cork(c);
    int rc = conn_write(c, h.data, h.len);
    buf_free(&h);
    if (rc == 0 && body_len)
        rc = conn_write(c, body, body_len);
    if (conn_uncork(c) != 0 || rc != 0)
        return -1;
    conn_request_done(c);
    return c->state == CONN_CLOSING ? -1 : 0;
}

int conn_respond_error(conn_t *c, int status, const char *code, const char *model, int retry_after_s,
                       bool close_after, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char body[2048];
    int n = conn_error_body(body, sizeof body, code, model, retry_after_s, c->req ? c->req->error_stage : NULL,
                            msg);
    char extra[64] = "";
    if (retry_after_s >= 0)
        snprintf(extra, sizeof extra, "Retry-After: %d\r\n", retry_after_s);
    if (c->req)
        c->req->outcome = code;
    log_event(status >= 500 ? LOG_WARN : LOG_INFO, "request_error",
              "request_id=%s model=%s status=%d code=%s message=%s peer=%s",
              c->req ? c->req->id : NULL, model, status, code, msg, c->peer);
    if (close_after)
        c->keep_alive = false;
    if (!c->req) {
        /* an error before a request object exists (bad head): answer and close */
        c->keep_alive = false;
        char head[512];
        int hn = snprintf(head, sizeof head,
                          "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n",
                          status, http1_reason(status), n, extra);
        if (conn_write(c, head, (size_t)hn) != 0 || conn_write(c, body, (size_t)n) != 0)
            return -1;
        conn_close_after_flush(c);
        return -1; /* the connection is closing: nothing goes on after this answer */
    }
    return conn_respond(c, status, "application/json", body, (size_t)n, extra);
}

/* ---- closing ---------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
}

/* The request ended (answered, or cancelled because its client left): tell the listeners
 * (metrics, the ledger's safety net, the retry budget, drain), detach it from its conn and
 * free it at the safe point. Exactly once per request. */
static void request_end(conn_t *c, request_t *r)
{
    BUG_ON(c->req != r);
    r->ops = NULL;
    c->req = NULL;
    core_emit(c->core, CORE_EV_REQUEST_ENDED, r); /* listeners see the last state */
    request_set_state(r, REQ_DONE);
    core_defer_free(c->core, &r->free_later);
}

/* The client left: whoever owns the answer lets go of it (queue, upstream, validator,
 * waiter), then the request ends. */
static void request_cancel(conn_t *c)
{
    request_t *r = c->req;
    if (!r)
        return;
    r->cancelled = true;
    if (r->ops && r->ops->cancel) {
        log_event(LOG_INFO, "request_cancelled", "request_id=%s model=%s while=%s", r->id,
                  r->model ? r->model->name : NULL, request_state_name(r->state));
        r->ops->cancel(r);
    }
    request_end(c, r);
}

static void conn_close(conn_t *c)
{
    if (c->state == CONN_CLOSING)
        return;
    request_cancel(c);
    conn_set_state(c, CONN_CLOSING);
    c->core->n_lingering -= c->lingering;
    c->lingering = false;
    core_defer_cancel(&c->resume);
    c->want_drained = false;
    core_conn_removed(c->core, &c->link);
    if (c->reserve)
        core_conn_reserve(c->core, false);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    c->corked = 0;
    buf_reset(&c->out);
    c->handles_open = 3;
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->watch, on_handle_closed);
}

void conn_abort(conn_t *c)
{
    /* The answer broke halfway (or vramd gives up on it): whoever still owns the request
     * lets go of it, and the connection is reset so the client sees it cut. */
    conn_close(c);
}

static void on_linger_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *sr, int status)
{
    conn_t *c = sr->data;
    free(sr);
    if (c->state == CONN_CLOSING)
        return;
    if (status < 0 || c->eof) {
        conn_close(c);
        return;
    }
    /* Lingering close: keep reading (and discarding) until the client closes or
     * LINGER_MS passes, so unread client bytes do not turn our FIN into a RST that
     * destroys the response in flight; at the cap a new client ends it (conn_accept).
     * Pipelined bytes that paused reading will never be served: drop them and read on,
     * or the client's FIN is never seen (LINGER_MS wasted). */
    if (c->read_paused) {
        c->read_paused = false;
        buf_reset(&c->in);
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
    c->lingering = true;
    c->core->n_lingering++;
    uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
}

static void conn_close_after_flush(conn_t *c)
{
    if (c->state == CONN_CLOSING)
        return;
    if (c->out.len) {
        /* corked bytes go out before the FIN */
        conn_write_now(c, c->out.data, c->out.len);
        buf_reset(&c->out);
        if (c->state == CONN_CLOSING)
            return;
    }
    c->keep_alive = false;
    conn_set_state(c, CONN_ACTIVE);
    uv_timer_stop(&c->timer);
    uv_shutdown_t *sr = malloc(sizeof *sr);
    if (!sr) {
        conn_close(c);
        return;
    }
    sr->data = c;
    /* uv_shutdown waits for queued writes to finish before sending FIN */
    if (uv_shutdown(sr, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        free(sr);
        conn_close(c);
        return;
    }
    c->in.len = 0;
}

/* ---- timers ----------------------------------------------------------------------- */

static void on_head_timeout(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->state == CONN_HEAD && c->in.len == 0 && !c->req) {
        /* idle keep-alive connection: close quietly */
        conn_close(c);
        return;
    }
    if (c->state == CONN_HEAD) {
        request_cancel(c);
        core_count(c->core, CORE_CNT_HEADER_TIMEOUT);
        conn_respond_error(c, 408, "request_timeout", NULL, -1, true,
                           "request head not received within %llu ms",
                           (unsigned long long)c->core->cfg->limits.header_timeout_ms);
    }
}

/* limits.body_timeout: an idle timeout. The timer is not moved for each read: when it fires
 * it looks at the last read and sleeps again for what is left. */
static void on_body_timeout(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->state != CONN_BODY)
        return;
    uint64_t limit = c->core->cfg->limits.body_timeout_ms, idle = core_now() - c->last_read_ms;
    if (idle < limit) {
        uv_timer_start(&c->timer, on_body_timeout, limit - idle, 0);
        return;
    }
    request_cancel(c);
    core_count(c->core, CORE_CNT_BODY_TIMEOUT);
    conn_respond_error(c, 408, "request_timeout", NULL, -1, true, "request body stalled: no bytes for %llu ms",
                       (unsigned long long)limit);
}

static void arm_body_timer(conn_t *c)
{
    c->last_read_ms = core_now();
    uv_timer_start(&c->timer, on_body_timeout, c->core->cfg->limits.body_timeout_ms, 0);
}

/* The watch timer: while answer bytes wait for the client, limits.send_timeout (checked a
 * few times per period, so it fires within a quarter of it late); while reading is paused,
 * whether the client left (every CONN_PAUSED_CHECK_MS: its FIN or RST cannot be read behind the
 * bytes vramd is not reading). Armed only while one of them applies. */
static void on_watch(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->state == CONN_CLOSING)
        return;
    uint64_t now = core_now(), limit = c->core->cfg->limits.send_timeout_ms;
    if (c->read_paused && conn_peer_closed(&c->tcp)) {
        log_event(LOG_INFO, "client_gone", "peer=%s request_id=%s while=%s", c->peer, c->req ? c->req->id : NULL,
                  "reading paused");
        c->eof = true;
        conn_close(c); /* FIN or RST: client gone, as when a read sees EOF */
        return;
    }
    uint64_t stalled = conn_send_stalled_ms(&c->send, &c->tcp, now);
    if (stalled >= limit) {
        log_event(LOG_WARN, "client_send_timeout", "peer=%s request_id=%s waiting_bytes=%zu stalled_ms=%llu limit_ms=%llu",
                  c->peer, c->req ? c->req->id : NULL, conn_send_waiting(&c->tcp), (unsigned long long)stalled,
                  (unsigned long long)limit);
        core_count(c->core, CORE_CNT_SEND_TIMEOUT);
        conn_close(c); /* cancels the request: its slot and reservation are released */
        return;
    }
    uint64_t next = conn_watch_next_ms(c, now);
    if (next != UINT64_MAX)
        uv_timer_start(&c->watch, on_watch, next, 0);
}

/* Arm the watch timer, or bring it forward (reading paused while a long send check waits). */
static void watch_arm(conn_t *c)
{
    if (c->state == CONN_CLOSING)
        return;
    uint64_t next = conn_watch_next_ms(c, core_now());
    if (next == UINT64_MAX)
        return;
    if (uv_is_active((uv_handle_t *)&c->watch) && uv_timer_get_due_in(&c->watch) <= next)
        return;
    uv_timer_start(&c->watch, on_watch, next, 0);
}

static void arm_head_timer(conn_t *c)
{
    c->head_started_ms = core_now();
    uv_timer_start(&c->timer, on_head_timeout, c->core->cfg->limits.header_timeout_ms, 0);
}

static void on_owner_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    void (*fn)(conn_t *) = c->timer_fn;
    c->timer_fn = NULL;
    if (fn && c->state == CONN_ACTIVE)
        fn(c);
}

void conn_set_timer(conn_t *c, uint64_t delay_ms, void (*fn)(conn_t *c))
{
    if (c->state == CONN_CLOSING)
        return;
    c->timer_fn = fn;
    uv_timer_start(&c->timer, on_owner_timer, delay_ms, 0);
}

void conn_stop_timer(conn_t *c)
{
    c->timer_fn = NULL;
    uv_timer_stop(&c->timer);
}

/* ---- reading ---------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    (void)suggested;
    *b = uv_buf_init(g_read_buf, sizeof g_read_buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    conn_t *c = s->data;
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        c->eof = true;
        /* The client left (or half-closed). A request still being received or served
         * cannot be answered: cancel it and close. */
        conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->last_read_ms = core_now(); /* limits.body_timeout */
    if (!c->keep_alive && c->state == CONN_ACTIVE && !c->req) {
        return; /* lingering: discard */
    }
    if (c->state == CONN_ACTIVE || core_defer_pending(&c->resume) || c->want_drained) {
        /* pipelined bytes: keep them (bounded) for after the current answer */
        if ((size_t)nread > buf_room(&c->in) || buf_append(&c->in, b->base, (size_t)nread) != 0 ||
            c->in.len > c->core->cfg->limits.max_header) {
            uv_read_stop(s);
            c->read_paused = true;
            watch_arm(c); /* the client may still leave: see on_watch */
        }
        return;
    }
    if ((size_t)nread > buf_room(&c->in) || buf_append(&c->in, b->base, (size_t)nread) != 0) {
        conn_respond_error(c, 413, "body_too_large", NULL, -1, true, "request too large");
        return;
    }
    process_input(c);
}

static void on_chunk_data(void *ctx, const char *data, size_t len)
{
    request_t *r = ctx;
    if (buf_append(&r->body, data, len) != 0)
        r->status = buf_over_budget(&r->body) ? 503 : 413; /* noted; checked after the feed */
}

static void request_complete(conn_t *c)
{
    uv_timer_stop(&c->timer);
    conn_set_state(c, CONN_ACTIVE);
    c->handlers.on_request(c, c->req);
}

/* Parse the head at the start of c->in. 1: msg is complete; 0: need more; -1: answered
 * (an error) or closed. */
static int parse_head(conn_t *c, http1_msg_t *msg)
{
    const config_t *cfg = c->core->cfg;
    size_t cap = cfg->limits.max_header_count;
    if (g_hdr_scratch_cap < cap) {
        free(g_hdr_scratch);
        g_hdr_scratch = calloc(cap, sizeof *g_hdr_scratch);
        g_hdr_scratch_cap = g_hdr_scratch ? cap : 0;
        if (!g_hdr_scratch) {
            conn_close(c);
            return -1;
        }
    }
    http1_limits_t lim = {.max_header_bytes = cfg->limits.max_header, .max_headers = cap};
    http1_error_t err;
    int rc = http1_parse_request(c->in.data, c->in.len, &lim, msg, g_hdr_scratch, &c->scan_from, &err);
    if (rc == HTTP1_NEED_MORE) {
        if (c->in.len <= cfg->limits.max_header)
            return 0;
        conn_respond_error(c, 431, "header_too_large", NULL, -1, true, "request head over %llu bytes",
                           (unsigned long long)cfg->limits.max_header);
        return -1;
    }
    if (rc == HTTP1_ERROR) {
        const char *code;
        int st = conn_refusal_status(&err, &code);
        conn_respond_error(c, st, code, NULL, -1, true,
                           "malformed request at byte %zu: %s", err.pos, err.what ? err.what : http1_errcode_name(err.code));
        return -1;
    }
    return 1;
}

static void start_request(conn_t *c)
{
    core_t *d = c->core;
    const config_t *cfg = d->cfg;
    http1_msg_t msg;
    if (parse_head(c, &msg) <= 0)
        return;
    request_t *r = conn_request_new(c, &msg, g_hdr_scratch);
    if (!r) {
        conn_close(c);
        return;
    }
    c->req = r;
    c->keep_alive = msg.keep_alive && !c->reserve; /* a reserve connection serves one answer */
    buf_consume(&c->in, msg.head_len);
    c->scan_from = 0;
    core_count_request(d);

    if (msg.upgrade) { /* a model that allows it tunnels it (path/proxy_upgrade.c); never kept alive */
        c->keep_alive = false;
        if (msg.body != HTTP1_BODY_NONE || msg.version_minor != 1 || !http1_span_eq(r->head, r->msg.method, "GET")) {
            conn_respond_error(c, 400, "bad_request", NULL, -1, true, "a protocol upgrade must be a HTTP/1.1 GET without a body");
            return;
        }
    }
    if (msg.body == HTTP1_BODY_LENGTH && msg.content_length > cfg->limits.max_body) {
        conn_respond_error(c, 413, "body_too_large", NULL, -1, true,
                           "body of %llu bytes is over the limit of %llu",
                           (unsigned long long)msg.content_length,
                           (unsigned long long)cfg->limits.max_body);
        return;
    }
    if (msg.body == HTTP1_BODY_NONE || (msg.body == HTTP1_BODY_LENGTH && msg.content_length == 0)) {
        request_complete(c);
        return;
    }
    if (msg.expect_continue && conn_refused_on_head(c))
        return; /* before the budget is charged for a body that will never come */
    if (msg.body == HTTP1_BODY_LENGTH && mem_budget_reserve_body(r, msg.content_length) != 0) {
        const buf_budget_t *bb = mem_budget();
        conn_respond_error(c, 503, "memory_budget", NULL, 2, true,
                           "a body of %llu bytes would pass limits.memory_budget (%llu of %llu bytes held)",
                           (unsigned long long)msg.content_length, (unsigned long long)bb->used,
                           (unsigned long long)bb->limit);
        return;
    }
    if (msg.expect_continue && c->in.len == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        conn_write(c, cont, sizeof cont - 1);
    }
    if (msg.body == HTTP1_BODY_CHUNKED)
        http1_chunked_init(&c->chunked, cfg->limits.max_header);
    else
        c->body_left = msg.content_length;
    conn_set_state(c, CONN_BODY);
    arm_body_timer(c); /* the head's deadline ends here: the body has its own, idle one */
}

static void read_body(conn_t *c)
{
    request_t *r = c->req;
    if (r->msg.body == HTTP1_BODY_LENGTH) {
        size_t n = c->in.len < c->body_left ? c->in.len : (size_t)c->body_left;
        if (buf_append(&r->body, c->in.data, n) != 0) {
            conn_respond_error(c, 413, "body_too_large", NULL, -1, true, "body over the limit");
            return;
        }
        buf_consume(&c->in, n);
        c->body_left -= n;
        if (c->body_left == 0)
            request_complete(c);
        return;
    }
    size_t used = 0;
    http1_error_t err;
    int rc = http1_chunked_feed(&c->chunked, c->in.data, c->in.len, &used, on_chunk_data, r, &err);
    if (r->status == 503) {
        r->status = 0;
        conn_respond_error(c, 503, "memory_budget", NULL, 2, true, "chunked body cut: it would pass limits.memory_budget");
        return;
    }
    if (r->status == 413) {
        r->status = 0;
        conn_respond_error(c, 413, "body_too_large", NULL, -1, true, "chunked body over %llu bytes",
                           (unsigned long long)c->core->cfg->limits.max_body);
        return;
    }
    if (rc == HTTP1_ERROR) {
        conn_respond_error(c, 400, "bad_request", NULL, -1, true, "malformed chunked body: %s",
                           err.what ? err.what : http1_errcode_name(err.code));
        return;
    }
    buf_consume(&c->in, used);
    if (rc == HTTP1_OK)
        request_complete(c);
}

/* Parse and hand over the requests in c->in, one after the other (never by recursion: a
 * request answered at once comes back here through conn_request_done). At most
 * CONN_PIPELINE_BURST requests per call, and none while the client has not read
 * CONN_BACKLOG_MAX of earlier answers: the rest waits for the next turn or for the
 * client (on_write). */
static void process_input(conn_t *c)
{
    if (c->in_input)
        return;
    c->in_input = true;
    unsigned started = 0;
    while ((c->state == CONN_HEAD || c->state == CONN_BODY) && c->in.len > 0) {
        if (c->state == CONN_HEAD) {
            if (c->write_bytes_pending >= CONN_BACKLOG_MAX) {
                c->want_drained = true; /* on_write resumes */
                break;
            }
            if (started >= CONN_PIPELINE_BURST) {
                schedule_resume(c);
                break;
            }
            size_t before = c->in.len;
            started++;
            start_request(c);
            if (c->state == CONN_HEAD && c->req == NULL && c->in.len == before)
                break; /* need more */
        } else {
            size_t before = c->in.len;
            read_body(c);
            if (c->state == CONN_BODY && c->in.len == before)
                break;
        }
    }
    c->in_input = false;
}

static void on_resume(core_defer_t *d)
{
    conn_t *c = list_entry(d, conn_t, resume);
    if (c->state != CONN_HEAD)
        return;
    if (c->read_paused && c->in.len <= c->core->cfg->limits.max_header) {
        c->read_paused = false;
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
    process_input(c);
}

static void schedule_resume(conn_t *c)
{
    if (c->state != CONN_CLOSING)
        core_defer(c->core, &c->resume);
}

void conn_request_done(conn_t *c)
{
    request_t *r = c->req;
    if (r)
        request_end(c, r);
    if (c->state == CONN_CLOSING)
        return;
    if (!c->keep_alive || c->eof) {
        conn_close_after_flush(c);
        return;
    }
    conn_set_state(c, CONN_HEAD);
    c->scan_from = 0;
    arm_head_timer(c);
    if (c->in_input)
        return; /* process_input's loop goes on with the next pipelined request */
    if (c->in.len || c->read_paused)
        schedule_resume(c);
}

/* ---- accepting -------------------------------------------------------------------- */

void conn_accept(core_t *d, uv_stream_t *listener, const conn_handlers_t *handlers)
{
    conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->core = d;
    c->handlers = *handlers;
    core_defer_init(&c->resume, on_resume);
    uv_tcp_init(d->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        c->handles_open = 1;
        c->state = CONN_CLOSING;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
        return;
    }
    uv_timer_init(d->loop, &c->timer);
    c->timer.data = c;
    uv_timer_init(d->loop, &c->watch);
    c->watch.data = c;
    buf_init(&c->in, d->cfg->limits.max_header + d->cfg->limits.max_body + READ_CHUNK);
    buf_init(&c->out, CORK_MAX);
    list_init(&c->link);
    core_conn_added(d, &c->link);
    c->keep_alive = true;
    conn_peer_name(&c->tcp, c->peer, sizeof c->peer);
    uv_tcp_nodelay(&c->tcp, 1);
    unsigned cap = d->cfg->limits.max_connections, reserved = d->cfg->limits.reserved_connections;
    conn_t *lingering; /* answered, FIN sent: its slot goes to the new client */
    while (d->n_conns > cap && (lingering = conn_oldest_lingering(d)) != NULL) {
        log_event(LOG_INFO, "linger_cut", "peer=%s reason=%s", lingering->peer, "max_connections");
        conn_close(lingering);
    }
    if (d->n_conns > cap + reserved) {
        log_event(LOG_WARN, "connection_refused", "peer=%s reason=%s limit=%u reserved=%u", c->peer,
                  "max_connections", cap, reserved);
        core_count(d, CORE_CNT_CONN_REFUSED);
        conn_close(c);
        return;
    }
    if (d->n_conns > cap) {
        /* past the cap: for operators (health, status, metrics, admin: serve/api.c), one answer */
        c->reserve = true;
        core_conn_reserve(d, true);
        log_event(LOG_WARN, "connection_reserved", "peer=%s limit=%u reserved=%u", c->peer, cap, reserved);
    }
    arm_head_timer(c);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}
