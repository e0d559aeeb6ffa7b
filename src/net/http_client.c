/*
 * http_client: one HTTP/1.1 exchange on a fresh TCP connection (see http_client.h).
 *
 * connect -> write the request and start reading -> head (accumulated up to
 * HTTP_CLIENT_MAX_HEAD, parsed with http1_parse_response, 1xx but 101 skipped) -> body,
 * framed by the head (Content-Length counted here, chunked through http1_chunked_feed, or
 * until close), to the sink or the buffer -> end. One uv_timer, started only with a
 * timeout, covers all of it.
 *
 * Invariants:
 *   - `finished` goes true exactly once: when on_end is delivered, or on cancel (or when
 *     start fails). After that nothing is reported; the handles are closing. Every step
 *     that calls out (on_head, on_body, on_end) checks `finished` before going on, so a
 *     cancel or an end inside a callback stops the exchange where it is.
 *   - the http_client_t is freed only in the close callback of the last of its two handles
 *     (tcp, timer). Pending connect and write requests are completed by libuv (ECANCELED)
 *     before that close callback, so they never see freed memory.
 *   - buffered mode holds at most max_body body bytes; streamed mode holds none beyond the
 *     read buffer. The head buffer never passes HTTP_CLIENT_MAX_HEAD + one read.
 *   - a write error is reported only when no answer came: a server may answer and close
 *     before reading all of the request, and then the answer decides.
 *
 * Writing to a socket whose peer is gone raises SIGPIPE: http_client_start sets SIGPIPE to
 * SIG_IGN if it is still SIG_DFL.
 */
#include "net/http_client.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_out.h"

#define HTTP_CLIENT_READ_CHUNK (64 * 1024)
#define HTTP_CLIENT_ERR_MAX 256

struct http_client {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t write_req;
    unsigned handles_open;
    bool finished;
    http_client_opts_t o;
    char *request; /* freed once written */
    size_t request_len;
    bool request_was_head;
    int write_error; /* libuv error of the request write, 0 if none (yet) */
    int sys_error;   /* libuv error behind a failed end, 0 if none (http_client_result_t) */

    buf_t head; /* answer bytes until the head is parsed; then the head itself */
    size_t scan_from;
    bool head_done;
    http1_msg_t msg;
    http1_header_t hdrs[HTTP_CLIENT_MAX_HEADERS];
    http1_chunked_t chunked;
    uint64_t body_seen; /* Content-Length framing: body bytes received */
    buf_t body;         /* buffered mode */

    char error[HTTP_CLIENT_ERR_MAX];
    char readbuf[HTTP_CLIENT_READ_CHUNK];
};

/* ---- helpers for callers ---------------------------------------------------------------- */

int http_client_addr(const char *host, int port, struct sockaddr_storage *out)
{
    if (!host || port < 1 || port > 65535)
        return -1;
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)out) == 0)
        return 0;
    return uv_ip6_addr(host, port, (struct sockaddr_in6 *)out) == 0 ? 0 : -1;
}

void http_client_head(buf_t *b, const char *method, const char *path, const char *host, size_t body_len)
{
    buf_printf(b, "%s %s HTTP/1.1\r\n", method, path);
    http_out_header(b, "Host", "%s", host);
    http_out_header(b, "Connection", "close");
    http_out_header(b, "Content-Length", "%zu", body_len);
}

/* ---- ending ----------------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
    http_client_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    buf_free(&c->head);
    buf_free(&c->body);
    free(c->request);
    free(c);
}

static void close_all(http_client_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    if (!uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, on_closed);
}

bool http_client_local_shortage(int uv_err)
{
    return uv_err == UV_EMFILE || uv_err == UV_ENFILE || uv_err == UV_ENOBUFS || uv_err == UV_ENOMEM;
}

static void end(http_client_t *c, http_client_end_t how, const char *error)
{
    if (c->finished)
        return;
    c->finished = true;
    close_all(c); /* memory stays valid until the close callbacks, after this returns */
    bool buffered = !c->o.on_body;
    http_client_result_t r = {
        .how = how,
        .error = error,
        .head = c->head_done ? c->head.data : NULL,
        .msg = c->head_done ? &c->msg : NULL,
        .body = buffered ? (c->body.data ? c->body.data : "") : NULL,
        .body_len = buffered ? c->body.len : 0,
        .sys_error = how == HTTP_CLIENT_COMPLETE ? 0 : c->sys_error,
    };
    c->o.on_end(c->o.ctx, &r);
}

static void fail(http_client_t *c, http_client_end_t how, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(http_client_t *c, http_client_end_t how, const char *fmt, ...)
{
    if (c->finished)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    end(c, how, c->error);
}

/* ---- the answer ------------------------------------------------------------------------- */

/* Body bytes to the sink, or into the buffer up to max_body. */
static void deliver(http_client_t *c, const char *data, size_t n)
{
    if (c->finished || n == 0)
        return;
    if (c->o.on_body) {
        if (c->o.on_body(c->o.ctx, data, n) != 0)
            fail(c, HTTP_CLIENT_SINK_FAILED, "the sink refused the body");
        return;
    }
    size_t room = buf_room(&c->body);
    if (buf_append(&c->body, data, n < room ? n : room) != 0)
        fail(c, HTTP_CLIENT_DROPPED, "out of memory for the body");
    else if (n > room)
        fail(c, HTTP_CLIENT_TOO_LARGE, "body larger than %zu bytes", c->o.max_body);
}

static void on_chunk_data(void *ctx, const char *data, size_t len)
{
    deliver(ctx, data, len);
}

static void feed_body(http_client_t *c, const char *data, size_t n)
{
    if (c->msg.body == HTTP1_BODY_LENGTH) {
        uint64_t want = c->msg.content_length - c->body_seen;
        size_t take = (uint64_t)n < want ? n : (size_t)want;
        c->body_seen += take;
        deliver(c, data, take);
        if (c->body_seen == c->msg.content_length)
            end(c, HTTP_CLIENT_COMPLETE, NULL);
    } else if (c->msg.body == HTTP1_BODY_CHUNKED) {
        size_t used = 0;
        http1_error_t perr;
        int rc = http1_chunked_feed(&c->chunked, data, n, &used, on_chunk_data, c, &perr);
        if (rc == HTTP1_ERROR)
            fail(c, HTTP_CLIENT_DROPPED, "malformed response: chunked body: %s", perr.what);
        else if (rc == HTTP1_OK)
            end(c, HTTP_CLIENT_COMPLETE, NULL);
    } else {
        deliver(c, data, n); /* until close */
    }
}

/* Parse the head held so far, skipping interim 1xx heads: HTTP1_OK, NEED_MORE or ERROR. */
static int parse_head(http_client_t *c)
{
    const http1_limits_t limits = {.max_header_bytes = HTTP_CLIENT_MAX_HEAD, .max_headers = HTTP_CLIENT_MAX_HEADERS};
    for (;;) {
        http1_error_t perr;
        int rc = http1_parse_response(c->head.data, c->head.len, &limits, c->request_was_head, &c->msg, c->hdrs,
                                      &c->scan_from, &perr);
        if (rc == HTTP1_ERROR)
            fail(c, HTTP_CLIENT_DROPPED, "malformed response: %s", perr.what);
        if (rc != HTTP1_OK || c->msg.status < 100 || c->msg.status >= 200 || c->msg.status == 101)
            return rc;
        buf_consume(&c->head, c->msg.head_len); /* interim answer: the real one follows */
        c->scan_from = 0;
        if (c->head.len == 0)
            return HTTP1_NEED_MORE;
    }
}

static void feed(http_client_t *c, const char *data, size_t n)
{
    if (c->head_done) {
        feed_body(c, data, n);
        return;
    }
    if (buf_append(&c->head, data, n) != 0) {
        fail(c, HTTP_CLIENT_DROPPED, "malformed response: head larger than %d bytes", HTTP_CLIENT_MAX_HEAD);
        return;
    }
    if (parse_head(c) != HTTP1_OK)
        return;
    c->head_done = true;
    if (c->o.on_head && c->o.on_head(c->o.ctx, c->head.data, &c->msg) != 0)
        fail(c, HTTP_CLIENT_SINK_FAILED, "the sink refused the answer's head");
    if (c->finished)
        return; /* refused, or cancelled inside on_head */
    if (c->msg.body == HTTP1_BODY_NONE || (c->msg.body == HTTP1_BODY_LENGTH && c->msg.content_length == 0)) {
        end(c, HTTP_CLIENT_COMPLETE, NULL);
        return;
    }
    if (c->msg.body == HTTP1_BODY_CHUNKED)
        http1_chunked_init(&c->chunked, 16 * 1024);
    size_t rest = c->head.len - c->msg.head_len;
    if (rest > 0)
        feed_body(c, c->head.data + c->msg.head_len, rest);
}

static void on_eof(http_client_t *c)
{
    if (!c->head_done && c->head.len == 0 && c->write_error) {
        c->sys_error = c->write_error;
        fail(c, HTTP_CLIENT_DROPPED, "write: %s", uv_strerror(c->write_error));
    } else if (!c->head_done && c->head.len == 0)
        fail(c, HTTP_CLIENT_DROPPED, "connection closed without a response");
    else if (!c->head_done)
        fail(c, HTTP_CLIENT_DROPPED, "malformed response: connection closed inside the head");
    else if (c->msg.body == HTTP1_BODY_LENGTH)
        fail(c, HTTP_CLIENT_DROPPED,
             "malformed response: connection closed in the middle of the response body (%llu of %llu bytes)",
             (unsigned long long)c->body_seen, (unsigned long long)c->msg.content_length);
    else if (c->msg.body == HTTP1_BODY_CHUNKED)
        fail(c, HTTP_CLIENT_DROPPED, "malformed response: connection closed in the middle of the response body "
                                     "(chunked)");
    else
        end(c, HTTP_CLIENT_COMPLETE, NULL); /* until close */
}

/* ---- I/O: connect -> write + read; the timer covers it all ------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    http_client_t *c = h->data;
    *b = uv_buf_init(c->readbuf, sizeof c->readbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    http_client_t *c = s->data;
    if (c->finished)
        return;
    if (n > 0)
        feed(c, b->base, (size_t)n);
    else if (n == UV_EOF)
        on_eof(c);
    else if (n < 0) {
        c->sys_error = (int)n;
        fail(c, HTTP_CLIENT_DROPPED, "read: %s", uv_strerror((int)n));
    }
}

static void on_written(uv_write_t *req, int status)
{
    http_client_t *c = req->data;
    free(c->request); /* the bytes are no longer needed */
    c->request = NULL;
    if (status < 0 && !c->finished)
        c->write_error = status; /* the answer, if any, decides */
}

static void on_connect(uv_connect_t *req, int status)
{
    http_client_t *c = req->data;
    if (c->finished)
        return; /* cancelled or timed out: ECANCELED */
    if (status < 0) {
        c->sys_error = status;
        fail(c, HTTP_CLIENT_CONNECT_FAILED, "connect: %s", uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        c->sys_error = rc;
        fail(c, HTTP_CLIENT_CONNECT_FAILED, "read: %s", uv_strerror(rc));
        return;
    }
    uv_buf_t b = uv_buf_init(c->request, (unsigned)c->request_len);
    c->write_req.data = c;
    rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc != 0) {
        c->sys_error = rc;
        fail(c, HTTP_CLIENT_CONNECT_FAILED, "write: %s", uv_strerror(rc));
    }
}

static void on_timeout(uv_timer_t *t)
{
    http_client_t *c = t->data;
    fail(c, HTTP_CLIENT_TIMED_OUT, "timeout after %llu ms", (unsigned long long)c->o.timeout_ms);
}

/* ---- public API ------------------------------------------------------------------------- */

static void ignore_sigpipe_once(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPIPE, &ign, NULL);
    }
}

int http_client_start(uv_loop_t *loop, const struct sockaddr *addr, char *request, size_t request_len,
                      const http_client_opts_t *opts, http_client_t **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    http_client_t *c = NULL;
    if (!opts || !opts->on_end || !addr || !request || request_len > UINT32_MAX)
        snprintf(err, errlen, "bad arguments");
    else if (!(c = calloc(1, sizeof *c)))
        snprintf(err, errlen, "out of memory");
    if (!c) {
        free(request);
        return opts && opts->on_end && addr && request ? -2 : -1;
    }
    c->o = *opts;
    c->request = request;
    c->request_len = request_len;
    c->request_was_head = request_len >= 5 && memcmp(request, "HEAD ", 5) == 0;
    buf_init(&c->head, HTTP_CLIENT_MAX_HEAD + HTTP_CLIENT_READ_CHUNK);
    if (!c->o.max_body)
        c->o.max_body = HTTP_CLIENT_DEFAULT_MAX_BODY;
    buf_init(&c->body, opts->on_body ? 0 : c->o.max_body);
    ignore_sigpipe_once();
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    if (opts->timeout_ms)
        uv_timer_start(&c->timer, on_timeout, opts->timeout_ms, 0);
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, on_connect);
    if (rc != 0) {
        snprintf(err, errlen, "connect: %s", uv_strerror(rc));
        c->finished = true; /* no callback; freed by the close callbacks */
        close_all(c);
        return http_client_local_shortage(rc) ? -2 : -1;
    }
    if (out)
        *out = c;
    return 0;
}

void http_client_cancel(http_client_t *c)
{
    if (!c || c->finished)
        return;
    c->finished = true;
    close_all(c);
}
