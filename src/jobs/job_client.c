/*
 * job_client: one job attempt over a loopback HTTP/1.1 connection (see job_client.h).
 *
 * connect -> write the request and start reading -> head (accumulated up to
 * JOB_CLIENT_MAX_HEAD, parsed with http1_parse_response) -> body pieces to the sink, framed
 * by the head (Content-Length, chunked through http1_chunked_feed, or until close) -> end.
 * No timer: vramd bounds the request itself (queue deadline, hang_timeout), and a cancel
 * closes the socket.
 *
 * Invariants:
 *   - `finished` goes true exactly once: when on_end is delivered or the attempt is
 *     cancelled. After that nothing is reported; the handle is closing.
 *   - the job_client_t is freed only in the tcp handle's close callback; pending connect
 *     and write requests are completed by libuv (ECANCELED) before it, so they never see
 *     freed memory.
 */
#include "jobs/job_client.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define JOB_CLIENT_READ_CHUNK (64 * 1024)
#define JOB_CLIENT_ERR_MAX 256
#define JOB_CLIENT_MAX_REQUEST_HEAD (256 * 1024)

struct job_client {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    bool finished;
    bool connected;
    const job_client_ops_t *ops;
    void *ctx;
    char *request;
    size_t request_len;
    bool request_was_head;
    int write_error;

    buf_t head;
    size_t scan_from;
    bool head_done;
    http1_msg_t msg;
    http1_header_t hdrs[JOB_CLIENT_MAX_HEADERS];
    http1_chunked_t chunked;
    uint64_t body_seen;
    bool sink_failed;

    char error[JOB_CLIENT_ERR_MAX];
    char readbuf[JOB_CLIENT_READ_CHUNK];
};

/* ---- request bytes --------------------------------------------------------------------- */

int job_client_build_request(const char *method, const char *path, const char *headers_json,
                             const void *body, size_t body_len, const char *request_id, int priority,
                             uint64_t deadline_left_ms, char **out, size_t *out_len)
{
    cJSON *hdrs = headers_json ? cJSON_Parse(headers_json) : NULL;
    if (headers_json && !cJSON_IsObject(hdrs)) {
        cJSON_Delete(hdrs);
        return -1;
    }
    buf_t b;
    buf_init(&b, JOB_CLIENT_MAX_REQUEST_HEAD + body_len);
    int bad = buf_printf(&b, "%s %s HTTP/1.1\r\nHost: vramd-jobs\r\nConnection: close\r\n"
                             "Content-Length: %zu\r\nX-Request-Id: %s\r\nX-Vramd-Priority: %d\r\n",
                         method, path, body_len, request_id, priority);
    if (deadline_left_ms > 0)
        bad |= buf_printf(&b, "X-Vramd-Deadline: %llums\r\n", (unsigned long long)deadline_left_ms);
    const cJSON *h;
    cJSON_ArrayForEach(h, hdrs) {
        if (h->string && cJSON_IsString(h) && h->valuestring)
            bad |= buf_printf(&b, "%s: %s\r\n", h->string, h->valuestring);
    }
    cJSON_Delete(hdrs);
    bad |= buf_append(&b, "\r\n", 2);
    if (body_len)
        bad |= buf_append(&b, body, body_len);
    if (bad) {
        buf_free(&b);
        return -1;
    }
    *out = buf_steal(&b, out_len);
    return 0;
}

/* ---- completion -------------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
    job_client_t *c = h->data;
    buf_free(&c->head);
    free(c->request);
    free(c);
}

static void close_handle(job_client_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void finish(job_client_t *c, enum job_client_end how, const char *error)
{
    if (c->finished)
        return;
    c->finished = true;
    close_handle(c); /* memory stays valid until the close callback, after this returns */
    c->ops->on_end(c->ctx, how, error);
}

static void fail(job_client_t *c, enum job_client_end how, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(job_client_t *c, enum job_client_end how, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    finish(c, how, c->error);
}

/* ---- response --------------------------------------------------------------------------- */

static void deliver(job_client_t *c, const char *data, size_t n)
{
    if (c->sink_failed || n == 0)
        return;
    if (c->ops->on_body(c->ctx, data, n) != 0)
        c->sink_failed = true;
}

static void on_chunk_data(void *ctx, const char *data, size_t len)
{
    deliver(ctx, data, len);
}

static void feed_body(job_client_t *c, const char *data, size_t n)
{
    http1_error_t perr;
    switch (c->msg.body) {
    case HTTP1_BODY_LENGTH: {
        uint64_t want = c->msg.content_length - c->body_seen;
        size_t take = (uint64_t)n < want ? n : (size_t)want;
        deliver(c, data, take);
        c->body_seen += take;
        if (c->sink_failed)
            fail(c, JOB_CLIENT_SINK_FAILED, "the result sink refused the body");
        else if (c->body_seen == c->msg.content_length)
            finish(c, JOB_CLIENT_COMPLETE, NULL);
        return;
    }
    case HTTP1_BODY_CHUNKED: {
        size_t used = 0;
        int rc = http1_chunked_feed(&c->chunked, data, n, &used, on_chunk_data, c, &perr);
        if (c->sink_failed)
            fail(c, JOB_CLIENT_SINK_FAILED, "the result sink refused the body");
        else if (rc == HTTP1_ERROR)
            fail(c, JOB_CLIENT_DROPPED, "malformed chunked response: %s", perr.what);
        else if (rc == HTTP1_OK)
            finish(c, JOB_CLIENT_COMPLETE, NULL);
        return;
    }
    case HTTP1_BODY_UNTIL_CLOSE:
        deliver(c, data, n);
        if (c->sink_failed)
            fail(c, JOB_CLIENT_SINK_FAILED, "the result sink refused the body");
        return;
    case HTTP1_BODY_NONE:
    default:
        finish(c, JOB_CLIENT_COMPLETE, NULL);
        return;
    }
}

static void feed(job_client_t *c, const char *data, size_t n)
{
    if (c->head_done) {
        feed_body(c, data, n);
        return;
    }
    if (buf_append(&c->head, data, n) != 0) {
        fail(c, JOB_CLIENT_DROPPED, "response head larger than %d bytes", JOB_CLIENT_MAX_HEAD);
        return;
    }
    const http1_limits_t limits = {.max_header_bytes = JOB_CLIENT_MAX_HEAD, .max_headers = JOB_CLIENT_MAX_HEADERS};
    for (;;) {
        http1_error_t perr;
        int rc = http1_parse_response(c->head.data, c->head.len, &limits, c->request_was_head, &c->msg, c->hdrs,
                                      &c->scan_from, &perr);
        if (rc == HTTP1_NEED_MORE)
            return;
        if (rc == HTTP1_ERROR) {
            fail(c, JOB_CLIENT_DROPPED, "malformed response: %s", perr.what);
            return;
        }
        if (c->msg.status >= 100 && c->msg.status < 200) {
            buf_consume(&c->head, c->msg.head_len); /* interim: the real head follows */
            c->scan_from = 0;
            if (c->head.len == 0)
                return;
            continue;
        }
        break;
    }
    c->head_done = true;
    if (c->ops->on_head(c->ctx, c->head.data, &c->msg) != 0) {
        fail(c, JOB_CLIENT_SINK_FAILED, "the result sink refused the response head");
        return;
    }
    if (c->msg.body == HTTP1_BODY_NONE || (c->msg.body == HTTP1_BODY_LENGTH && c->msg.content_length == 0)) {
        finish(c, JOB_CLIENT_COMPLETE, NULL);
        return;
    }
    if (c->msg.body == HTTP1_BODY_CHUNKED)
        http1_chunked_init(&c->chunked, 16 * 1024);
    size_t rest = c->head.len - c->msg.head_len;
    if (rest > 0)
        feed_body(c, c->head.data + c->msg.head_len, rest);
}

static void on_eof(job_client_t *c)
{
    if (!c->head_done) {
        if (c->head.len == 0 && c->write_error)
            fail(c, JOB_CLIENT_DROPPED, "write: %s", uv_strerror(c->write_error));
        else
            fail(c, JOB_CLIENT_DROPPED, "connection closed before a complete response head");
        return;
    }
    if (c->msg.body == HTTP1_BODY_UNTIL_CLOSE) {
        finish(c, JOB_CLIENT_COMPLETE, NULL);
        return;
    }
    fail(c, JOB_CLIENT_DROPPED, "connection closed in the middle of the response body");
}

/* ---- I/O -------------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    job_client_t *c = h->data;
    *b = uv_buf_init(c->readbuf, sizeof c->readbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    job_client_t *c = s->data;
    if (c->finished)
        return;
    if (n > 0)
        feed(c, b->base, (size_t)n);
    else if (n == UV_EOF)
        on_eof(c);
    else if (n < 0)
        fail(c, JOB_CLIENT_DROPPED, "read: %s", uv_strerror((int)n));
}

static void on_written(uv_write_t *req, int status)
{
    job_client_t *c = req->data;
    free(c->request); /* the bytes are no longer needed */
    c->request = NULL;
    if (status < 0 && !c->finished)
        c->write_error = status; /* the response, if any, decides */
}

static void on_connect(uv_connect_t *req, int status)
{
    job_client_t *c = req->data;
    if (c->finished)
        return;
    if (status < 0) {
        fail(c, JOB_CLIENT_CONNECT_FAILED, "connect: %s", uv_strerror(status));
        return;
    }
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        fail(c, JOB_CLIENT_CONNECT_FAILED, "read: %s", uv_strerror(rc));
        return;
    }
    uv_buf_t b = uv_buf_init(c->request, (unsigned)c->request_len);
    c->write_req.data = c;
    rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc != 0)
        fail(c, JOB_CLIENT_CONNECT_FAILED, "write: %s", uv_strerror(rc));
}

int job_client_start(uv_loop_t *loop, const struct sockaddr *addr, char *request, size_t request_len,
                     const job_client_ops_t *ops, void *ctx, job_client_t **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!ops || !ops->on_head || !ops->on_body || !ops->on_end || !request || request_len > UINT32_MAX) {
        free(request);
        snprintf(err, errlen, "bad arguments");
        return -1;
    }
    job_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        free(request);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->ops = ops;
    c->ctx = ctx;
    c->request = request;
    c->request_len = request_len;
    c->request_was_head = request_len >= 5 && memcmp(request, "HEAD ", 5) == 0;
    buf_init(&c->head, JOB_CLIENT_MAX_HEAD + JOB_CLIENT_READ_CHUNK);
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, on_connect);
    if (rc != 0) {
        snprintf(err, errlen, "connect: %s", uv_strerror(rc));
        c->finished = true;
        close_handle(c);
        return -1;
    }
    if (out)
        *out = c;
    return 0;
}

void job_client_cancel(job_client_t *c)
{
    if (!c || c->finished)
        return;
    c->finished = true;
    close_handle(c);
}
