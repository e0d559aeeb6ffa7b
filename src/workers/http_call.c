/*
 * http_call: one asynchronous HTTP/1.1 request on a fresh TCP connection (see http_call.h).
 *
 * The call goes connect -> write request -> read response, each step handing over to the
 * next callback; one uv_timer covers all of it. The response head is accumulated (at most
 * HTTP_CALL_MAX_HEAD bytes) and parsed with http1_parse_response; the body is framed by
 * what the head says: Content-Length, chunked (http1_chunked_feed) or until close. Interim
 * 1xx heads are skipped.
 *
 * Body larger than max_response: the call completes as soon as max_response body bytes are
 * held, with the real status and those first max_response bytes (error NULL); the rest is
 * not read. Health checks and hooks care about the status; a hook answering 200 with a big
 * body has still succeeded.
 *
 * Invariants:
 *   - `finished` goes true exactly once: when the callback is delivered or the call is
 *     cancelled (or start fails). After that nothing is reported; the handles are closing.
 *   - the http_call_t is freed only in the close callback of the last of its two handles
 *     (tcp, timer). Pending connect/write requests are completed by libuv (ECANCELED)
 *     before that close callback, so they never see freed memory.
 *   - the callback runs with the handles already closing, so it may start new calls.
 *
 * Writing to a socket whose peer is gone raises SIGPIPE: http_call_start sets SIGPIPE to
 * SIG_IGN if it is still SIG_DFL.
 *
 * Defaults: timeout_ms 0 -> HTTP_CALL_DEFAULT_TIMEOUT_MS; max_response 0 -> 1 MiB;
 * content_type NULL with a body -> application/json.
 * Return convention: 0 ok (callback will follow), -1 error (err filled, no callback).
 */
#include "workers/http_call.h"

#include <netinet/in.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "net/http1.h"

#define HTTP_CALL_DEFAULT_TIMEOUT_MS 30000u
#define HTTP_CALL_DEFAULT_MAX_RESPONSE ((size_t)1 << 20)
#define HTTP_CALL_MAX_HEAD (64 * 1024)
#define HTTP_CALL_MAX_HEADERS 100
#define HTTP_CALL_READ_CHUNK (16 * 1024)
#define HTTP_CALL_MAX_REQUEST_HEAD 8192
#define HTTP_CALL_ERR_MAX 256

struct http_call {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t write_req;
    unsigned handles_open;
    bool finished;

    http_call_cb cb;
    void *ctx;
    uint64_t timeout_ms;
    bool request_was_head;
    char *request;
    size_t request_len;
    int write_error; /* libuv error of the request write, 0 if none (yet) */

    buf_t head; /* response bytes until the head is parsed */
    size_t scan_from;
    bool head_done;
    http1_msg_t msg;
    http1_header_t hdrs[HTTP_CALL_MAX_HEADERS];
    http1_chunked_t chunked;
    uint64_t body_seen; /* Content-Length framing: body bytes received */
    buf_t body;
    size_t max_response;
    bool truncated;

    char error[HTTP_CALL_ERR_MAX];
    char readbuf[HTTP_CALL_READ_CHUNK];
};

static void ignore_sigpipe_once(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPIPE, &ign, NULL);
    }
}

/* ---------------------------------------------------------------------------------------
 * Closing and completion
 */

static void on_closed(uv_handle_t *h)
{
    http_call_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    buf_free(&c->head);
    buf_free(&c->body);
    free(c->request);
    free(c);
}

static void close_all(http_call_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    if (!uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, on_closed);
}

static void complete(http_call_t *c, int status, const char *error)
{
    if (c->finished)
        return;
    c->finished = true;
    close_all(c); /* memory stays valid until the close callbacks, after this returns */
    if (status < 0)
        c->cb(c->ctx, -1, NULL, 0, error);
    else
        c->cb(c->ctx, status, c->body.data ? c->body.data : "", c->body.len, NULL);
}

static void fail(http_call_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(http_call_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    complete(c, -1, c->error);
}

static void succeed(http_call_t *c)
{
    complete(c, c->msg.status, NULL);
}

/* ---------------------------------------------------------------------------------------
 * Response parsing
 */

/* Keep body bytes up to max_response; beyond that, flag truncation. */
static void keep_body(http_call_t *c, const char *data, size_t n)
{
    size_t room = c->max_response - c->body.len;
    if (n > room) {
        c->truncated = true;
        n = room;
    }
    if (n > 0 && buf_append(&c->body, data, n) != 0)
        c->truncated = true; /* out of memory: what we have is what we report */
}

static void on_chunk_data(void *ctx, const char *data, size_t len)
{
    keep_body(ctx, data, len);
}

static void feed_body(http_call_t *c, const char *data, size_t n)
{
    http1_error_t perr;
    switch (c->msg.body) {
    case HTTP1_BODY_LENGTH: {
        uint64_t want = c->msg.content_length - c->body_seen;
        size_t take = (uint64_t)n < want ? n : (size_t)want;
        keep_body(c, data, take);
        c->body_seen += take;
        if (c->truncated || c->body_seen == c->msg.content_length)
            succeed(c);
        return;
    }
    case HTTP1_BODY_CHUNKED: {
        size_t consumed = 0;
        int rc = http1_chunked_feed(&c->chunked, data, n, &consumed, on_chunk_data, c, &perr);
        if (rc == HTTP1_ERROR)
            fail(c, "malformed response: %s", perr.what);
        else if (rc == HTTP1_OK || c->truncated)
            succeed(c);
        return;
    }
    case HTTP1_BODY_UNTIL_CLOSE:
        keep_body(c, data, n);
        if (c->truncated)
            succeed(c);
        return;
    case HTTP1_BODY_NONE:
    default:
        succeed(c);
        return;
    }
}

static void feed(http_call_t *c, const char *data, size_t n)
{
    if (c->head_done) {
        feed_body(c, data, n);
        return;
    }
    if (buf_append(&c->head, data, n) != 0) {
        fail(c, "malformed response: head larger than %d bytes", HTTP_CALL_MAX_HEAD);
        return;
    }
    const http1_limits_t limits = {.max_header_bytes = HTTP_CALL_MAX_HEAD,
                                   .max_headers = HTTP_CALL_MAX_HEADERS};
    for (;;) {
        http1_error_t perr;
        int rc = http1_parse_response(c->head.data, c->head.len, &limits, c->request_was_head,
                                      &c->msg, c->hdrs, &c->scan_from, &perr);
        if (rc == HTTP1_NEED_MORE)
            return;
        if (rc == HTTP1_ERROR) {
            fail(c, "malformed response: %s", perr.what);
            return;
        }
        if (c->msg.status >= 100 && c->msg.status < 200 && c->msg.status != 101) {
            buf_consume(&c->head, c->msg.head_len); /* interim response: the real one follows */
            c->scan_from = 0;
            if (c->head.len == 0)
                return;
            continue;
        }
        break;
    }
    c->head_done = true;
    if (c->msg.body == HTTP1_BODY_NONE ||
        (c->msg.body == HTTP1_BODY_LENGTH && c->msg.content_length == 0)) {
        succeed(c);
        return;
    }
    if (c->msg.body == HTTP1_BODY_CHUNKED)
        http1_chunked_init(&c->chunked, 0);
    size_t rest = c->head.len - c->msg.head_len;
    if (rest > 0)
        feed_body(c, c->head.data + c->msg.head_len, rest);
}

static void on_eof(http_call_t *c)
{
    if (!c->head_done) {
        if (c->head.len == 0) {
            if (c->write_error)
                fail(c, "write: %s", uv_strerror(c->write_error));
            else
                fail(c, "connection closed without a response");
        } else {
            fail(c, "malformed response: connection closed inside the head");
        }
        return;
    }
    switch (c->msg.body) {
    case HTTP1_BODY_UNTIL_CLOSE:
        succeed(c);
        return;
    case HTTP1_BODY_LENGTH:
        fail(c, "malformed response: connection closed after %llu of %llu body bytes",
             (unsigned long long)c->body_seen, (unsigned long long)c->msg.content_length);
        return;
    case HTTP1_BODY_CHUNKED:
        fail(c, "malformed response: connection closed inside the chunked body");
        return;
    default:
        succeed(c);
        return;
    }
}

/* ---------------------------------------------------------------------------------------
 * I/O callbacks: connect -> write + read; the timer covers it all
 */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    http_call_t *c = h->data;
    *b = uv_buf_init(c->readbuf, sizeof c->readbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    http_call_t *c = s->data;
    if (c->finished)
        return;
    if (n > 0)
        feed(c, b->base, (size_t)n);
    else if (n == UV_EOF)
        on_eof(c);
    else if (n < 0)
        fail(c, "read: %s", uv_strerror((int)n));
}

static void on_written(uv_write_t *req, int status)
{
    http_call_t *c = req->data;
    /* A server may answer and close before reading all of the request: the response
     * decides; the write error is reported only when no response came. */
    if (status < 0 && !c->finished)
        c->write_error = status;
}

static void on_connect(uv_connect_t *req, int status)
{
    http_call_t *c = req->data;
    if (c->finished)
        return; /* cancelled or timed out: ECANCELED */
    if (status < 0) {
        fail(c, "connect: %s", uv_strerror(status));
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        fail(c, "read: %s", uv_strerror(rc));
        return;
    }
    uv_buf_t b = uv_buf_init(c->request, (unsigned)c->request_len);
    c->write_req.data = c;
    rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc != 0)
        fail(c, "write: %s", uv_strerror(rc));
}

static void on_timeout(uv_timer_t *t)
{
    http_call_t *c = t->data;
    fail(c, "timeout after %llu ms", (unsigned long long)c->timeout_ms);
}

/* ---------------------------------------------------------------------------------------
 * Request building and public API
 */

static bool is_token(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              strchr("!#$%&'*+-.^_`|~", ch)))
            return false;
    }
    return true;
}

static bool is_visible(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

static bool is_header_value(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return false;
    return true;
}

int http_call_start(uv_loop_t *loop, const http_call_req_t *req, http_call_cb cb, void *ctx,
                    http_call_t **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!req || !cb || !req->host) {
        snprintf(err, errlen, "missing request or callback");
        return -1;
    }
    const char *method = req->method ? req->method : "GET";
    const char *path = req->path ? req->path : "/";
    if (!is_token(method)) {
        snprintf(err, errlen, "bad method");
        return -1;
    }
    if (path[0] != '/' || !is_visible(path) || strlen(path) > HTTP_CALL_MAX_REQUEST_HEAD / 2) {
        snprintf(err, errlen, "bad path");
        return -1;
    }
    if (req->port < 1 || req->port > 65535) {
        snprintf(err, errlen, "bad port %d", req->port);
        return -1;
    }
    const char *content_type = req->content_type;
    if (!content_type && req->body)
        content_type = "application/json";
    if (content_type && (!is_header_value(content_type) || strlen(content_type) > 256)) {
        snprintf(err, errlen, "bad content type");
        return -1;
    }
    size_t body_len = req->body ? req->body_len : 0;
    if (body_len > UINT32_MAX - HTTP_CALL_MAX_REQUEST_HEAD) {
        snprintf(err, errlen, "request body too large");
        return -1;
    }

    const char *addr_host = strcmp(req->host, "localhost") == 0 ? "127.0.0.1" : req->host;
    struct sockaddr_storage addr;
    bool v6 = false;
    if (uv_ip4_addr(addr_host, req->port, (struct sockaddr_in *)&addr) != 0) {
        if (uv_ip6_addr(addr_host, req->port, (struct sockaddr_in6 *)&addr) != 0) {
            snprintf(err, errlen, "bad host \"%s\": a numeric address or localhost is needed",
                     req->host);
            return -1;
        }
        v6 = true;
    }

    http_call_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->loop = loop;
    c->cb = cb;
    c->ctx = ctx;
    c->timeout_ms = req->timeout_ms ? req->timeout_ms : HTTP_CALL_DEFAULT_TIMEOUT_MS;
    c->max_response = req->max_response ? req->max_response : HTTP_CALL_DEFAULT_MAX_RESPONSE;
    c->request_was_head = strcmp(method, "HEAD") == 0;
    buf_init(&c->head, HTTP_CALL_MAX_HEAD + HTTP_CALL_READ_CHUNK);
    buf_init(&c->body, c->max_response);

    buf_t r;
    buf_init(&r, HTTP_CALL_MAX_REQUEST_HEAD + body_len);
    int bad = buf_printf(&r, "%s %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nConnection: close\r\n"
                             "Content-Length: %zu\r\n",
                         method, path, v6 ? "[" : "", req->host, v6 ? "]" : "", req->port,
                         body_len);
    if (content_type)
        bad |= buf_printf(&r, "Content-Type: %s\r\n", content_type);
    bad |= buf_append(&r, "\r\n", 2);
    if (body_len)
        bad |= buf_append(&r, req->body, body_len);
    if (bad) {
        buf_free(&r);
        buf_free(&c->head);
        buf_free(&c->body);
        free(c);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->request = buf_steal(&r, &c->request_len);

    ignore_sigpipe_once();
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    uv_timer_start(&c->timer, on_timeout, c->timeout_ms, 0);
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr, on_connect);
    if (rc != 0) {
        snprintf(err, errlen, "connect: %s", uv_strerror(rc));
        c->finished = true; /* no callback; freed by the close callbacks */
        close_all(c);
        return -1;
    }
    if (out)
        *out = c;
    return 0;
}

void http_call_cancel(http_call_t *c)
{
    if (!c || c->finished)
        return;
    c->finished = true;
    close_all(c);
}
