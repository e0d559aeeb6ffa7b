/*
 * path_upstream: the fake upstream worker of tests/unit/path_fixture.h (F): a libuv TCP
 * server whose answer to each request is scripted by the test. GET /health is always 200;
 * any other request gets the next answer of the script (fake_script; the last one repeats)
 * and is recorded (F.last_req, F.requests; F.reused counts requests that came on a
 * connection that had served one already). Answers say "Connection: close" and the server
 * closes after them, so the proxy pools nothing, except A_KEEP_ALIVE; A_HOLD keeps the
 * request unanswered until fake_release answers it with A_LENGTH. Pieces of one answer are
 * written 2 ms apart, so the proxy reads them separately.
 * Functions are static inline: each test file uses a part of them.
 */
#ifndef VRAMD_TESTS_UNIT_PATH_UPSTREAM_H
#define VRAMD_TESTS_UNIT_PATH_UPSTREAM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define PATH_MAX_HELD 4
#define PATH_REQ_MAX 16384

enum answer {
    A_LENGTH = 0,     /* 200, Content-Length 11, "hello world" */
    A_CHUNKED,        /* 200, chunked "hello" " world" */
    A_SPLIT,          /* A_LENGTH's bytes in 4 writes, 2 ms apart, split inside the head */
    A_SPLIT_CHUNKED,  /* chunked, split inside a chunk size line and a chunk's CRLF */
    A_CLOSE_EARLY,    /* close before any byte */
    A_CLOSE_MID_BODY, /* head (Content-Length 100) and 7 bytes, then close */
    A_MALFORMED,      /* a status line without a status */
    A_500,            /* 500 "oops" */
    A_JSON,           /* 200 {"ok":true} */
    A_BAD_JSON,       /* 200 "{not json" */
    A_KEEP_ALIVE,     /* 200 "ka", the connection stays open */
    A_HOLD,           /* nothing until fake_release (then A_LENGTH) */
    A_COUNT
};

typedef struct answer_spec {
    const char *pieces[5];
    bool keep_open;
} answer_spec_t;

static const answer_spec_t ANSWERS[A_COUNT] = {
    [A_LENGTH] = {{"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Worker: fake\r\nContent-Length: 11\r\n"
                   "Connection: close\r\n\r\nhello world"}},
    [A_CHUNKED] = {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"}},
    [A_SPLIT] = {{"HTTP/1.1 200 OK\r\nContent-Le", "ngth: 11\r\nConnection: close\r\n\r\nhel", "lo wor", "ld"}},
    [A_SPLIT_CHUNKED] = {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5",
                          "\r\nhel", "lo\r\n6\r", "\n world\r\n0\r\n\r\n"}},
    [A_CLOSE_EARLY] = {{NULL}},
    [A_CLOSE_MID_BODY] = {{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\npartial"}},
    [A_MALFORMED] = {{"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n"}},
    [A_500] = {{"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\nConnection: close\r\n\r\noops"}},
    [A_JSON] = {{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
                 "Connection: close\r\n\r\n{\"ok\":true}"}},
    [A_BAD_JSON] = {{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n"
                     "Connection: close\r\n\r\n{not json"}},
    [A_KEEP_ALIVE] = {{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nka"}, true},
    [A_HOLD] = {{NULL}},
};

static const answer_spec_t HEALTH_ANSWER = {{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"}, false};

typedef struct fconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    char in[PATH_REQ_MAX];
    size_t in_len;
    const answer_spec_t *ans; /* being written; NULL while waiting for a request */
    int next_piece;
    unsigned served;          /* requests (other than /health) seen on this connection */
    bool held;
    bool closing;
    int handles;
} fconn_t;

static struct fake {
    uv_tcp_t listener;
    int port;
    enum answer script[4];
    int n_script, next_script;
    unsigned requests; /* requests other than /health */
    unsigned health;   /* GET /health answered */
    unsigned reused;   /* requests that came on a connection that had served one already */
    unsigned open;     /* connections open */
    unsigned held;
    fconn_t *held_conns[PATH_MAX_HELD];
    char last_req[PATH_REQ_MAX + 1]; /* the last request other than /health, NUL-terminated */
} F;

/* The answers for the next requests, in order; the last one repeats. */
static inline void fake_script(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 4; i++)
        F.script[i] = (enum answer)va_arg(ap, int);
    va_end(ap);
    F.n_script = n < 4 ? n : 4;
    F.next_script = 0;
}

static inline void fconn_closed(uv_handle_t *h)
{
    fconn_t *fc = h->data;
    if (--fc->handles == 0) {
        F.open--;
        free(fc);
    }
}

static inline void fconn_close(fconn_t *fc)
{
    if (fc->closing)
        return;
    fc->closing = true;
    if (fc->held) {
        for (int i = 0; i < PATH_MAX_HELD; i++)
            if (F.held_conns[i] == fc)
                F.held_conns[i] = NULL;
        F.held--;
    }
    fc->handles = 2;
    uv_close((uv_handle_t *)&fc->tcp, fconn_closed);
    uv_close((uv_handle_t *)&fc->timer, fconn_closed);
}

static inline void fconn_send_next(fconn_t *fc);

static inline void fconn_on_timer(uv_timer_t *t) { fconn_send_next(t->data); }

static inline void fconn_written(uv_write_t *w, int status)
{
    fconn_t *fc = w->data;
    if (fc->closing)
        return;
    if (status < 0) {
        fconn_close(fc);
        return;
    }
    fc->next_piece++;
    if (fc->ans->pieces[fc->next_piece])
        uv_timer_start(&fc->timer, fconn_on_timer, 2, 0);
    else
        fconn_send_next(fc);
}

/* The next piece of the current answer, or its end (close, or wait for the next request). */
static inline void fconn_send_next(fconn_t *fc)
{
    if (fc->closing)
        return;
    const char *p = fc->ans->pieces[fc->next_piece];
    if (!p) {
        if (fc->ans->keep_open)
            fc->ans = NULL;
        else
            fconn_close(fc);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)strlen(p));
    fc->wr.data = fc;
    if (uv_write(&fc->wr, (uv_stream_t *)&fc->tcp, &b, 1, fconn_written) != 0)
        fconn_close(fc);
}

static inline void fconn_answer(fconn_t *fc, const answer_spec_t *ans)
{
    fc->ans = ans;
    fc->next_piece = 0;
    fconn_send_next(fc);
}

/* Bytes of the complete request at the start of buf (head + Content-Length), 0 if none. */
static inline size_t request_length(const char *buf, size_t len)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - buf) + 4;
    size_t cl = 0;
    const char *h = memmem(buf, head, "Content-Length: ", 16);
    if (h)
        cl = strtoul(h + 16, NULL, 10);
    return len >= head + cl ? head + cl : 0;
}

static inline void fake_hold(fconn_t *fc)
{
    for (int i = 0; i < PATH_MAX_HELD; i++)
        if (!F.held_conns[i]) {
            F.held_conns[i] = fc;
            fc->held = true;
            F.held++;
            return;
        }
    fconn_close(fc); /* more held than the fixture keeps: the test sees a 502 */
}

static inline void fake_request(fconn_t *fc, size_t len)
{
    fc->in_len = 0; /* the proxy sends one request at a time */
    if (len >= 12 && memcmp(fc->in, "GET /health ", 12) == 0) {
        F.health++;
        fconn_answer(fc, &HEALTH_ANSWER);
        return;
    }
    F.requests++;
    if (fc->served++)
        F.reused++;
    memcpy(F.last_req, fc->in, len);
    F.last_req[len] = '\0';
    enum answer a = F.n_script ? F.script[F.next_script] : A_LENGTH;
    if (F.next_script + 1 < F.n_script)
        F.next_script++;
    if (a == A_HOLD)
        fake_hold(fc);
    else
        fconn_answer(fc, &ANSWERS[a]);
}

static inline void fconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    fconn_t *fc = h->data;
    *b = uv_buf_init(fc->in + fc->in_len, (unsigned)(sizeof fc->in - fc->in_len));
}

static inline void fconn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    fconn_t *fc = s->data;
    if (n < 0) {
        fconn_close(fc);
        return;
    }
    fc->in_len += (size_t)n;
    size_t len = request_length(fc->in, fc->in_len);
    if (len && !fc->ans && !fc->held)
        fake_request(fc, len);
}

static inline void fake_on_accept(uv_stream_t *l, int status)
{
    fconn_t *fc = calloc(1, sizeof *fc);
    if (status < 0 || !fc) {
        free(fc);
        return;
    }
    uv_tcp_init(l->loop, &fc->tcp);
    uv_timer_init(l->loop, &fc->timer);
    fc->tcp.data = fc->timer.data = fc;
    F.open++;
    if (uv_accept(l, (uv_stream_t *)&fc->tcp) != 0) {
        fconn_close(fc);
        return;
    }
    uv_tcp_nodelay(&fc->tcp, 1);
    uv_read_start((uv_stream_t *)&fc->tcp, fconn_alloc, fconn_read);
}

/* Answer every held request with A_LENGTH; later requests get the script's answers. */
static inline void fake_release(void)
{
    for (int i = 0; i < PATH_MAX_HELD; i++) {
        fconn_t *fc = F.held_conns[i];
        if (!fc)
            continue;
        F.held_conns[i] = NULL;
        fc->held = false;
        F.held--;
        fconn_answer(fc, &ANSWERS[A_LENGTH]);
    }
}

#endif
