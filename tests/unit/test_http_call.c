/*
 * test_http_call: src/net/http_call.c against a tiny HTTP server running in the same
 * uv loop (tests/unit only; it reads one request, checks nothing itself, and answers with
 * canned byte pieces sent 20 ms apart so the client sees responses split across reads).
 *
 * Each test owns its loop and ends with uv_loop_close() == 0: a handle left open by the
 * client (or a callback after cancel) fails the test. Run under `make SAN=1` for leaks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/http_call.h"

#define DEADLINE_MS 20000
#define MAX_PIECES 4
#define MAX_CONNS 8

/* ---- the test server -------------------------------------------------------------------- */

typedef struct piece {
    const char *data;
    size_t len;
} piece_t;

typedef struct server server_t;

typedef struct sconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    server_t *srv;
    int handles_open;
    bool closing;
    bool responded;
    int next_piece;
    uv_write_t wr;
    char in[16384];
    size_t in_len;
} sconn_t;

struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    piece_t pieces[MAX_PIECES];
    int n_pieces;
    bool close_after; /* close the connection after the last piece */
    /* observations */
    int accepted;
    int requests;
    char request[16384];
    size_t request_len;
    int client_closed; /* EOFs/errors seen from clients */
    sconn_t *conns[MAX_CONNS];
};

static void sconn_closed(uv_handle_t *h)
{
    sconn_t *c = h->data;
    if (--c->handles_open == 0) {
        for (int i = 0; i < MAX_CONNS; i++)
            if (c->srv->conns[i] == c)
                c->srv->conns[i] = NULL;
        free(c);
    }
}

static void sconn_close(sconn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, sconn_closed);
    uv_close((uv_handle_t *)&c->timer, sconn_closed);
}

static void send_next_piece(sconn_t *c);
static void on_timer_piece(uv_timer_t *t);

static void on_piece_written(uv_write_t *w, int status)
{
    sconn_t *c = w->data;
    if (c->closing)
        return;
    if (status < 0 || c->next_piece >= c->srv->n_pieces) {
        if (status < 0 || c->srv->close_after)
            sconn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timer_piece, 20, 0);
}

static void send_next_piece(sconn_t *c)
{
    if (c->closing)
        return;
    const piece_t *p = &c->srv->pieces[c->next_piece++];
    uv_buf_t b = uv_buf_init((char *)p->data, (unsigned)p->len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_piece_written) != 0)
        sconn_close(c);
}

static void on_timer_piece(uv_timer_t *t)
{
    send_next_piece(t->data);
}

static void sconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    sconn_t *c = h->data;
    *b = uv_buf_init(c->in + c->in_len, (unsigned)(sizeof c->in - c->in_len));
}

/* Complete request: head through CRLF CRLF plus Content-Length bytes. */
static bool request_complete(const sconn_t *c)
{
    const char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (!end)
        return false;
    size_t head = (size_t)(end - c->in) + 4;
    size_t cl = 0;
    const char *h = memmem(c->in, head, "Content-Length: ", 16);
    if (h)
        cl = strtoul(h + 16, NULL, 10);
    return c->in_len >= head + cl;
}

static void sconn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    sconn_t *c = s->data;
    if (n < 0) {
        c->srv->client_closed++;
        sconn_close(c);
        return;
    }
    c->in_len += (size_t)n;
    if (c->responded || !request_complete(c))
        return;
    c->responded = true;
    server_t *srv = c->srv;
    srv->requests++;
    memcpy(srv->request, c->in, c->in_len);
    srv->request_len = c->in_len;
    srv->request[c->in_len] = '\0';
    if (srv->n_pieces > 0)
        send_next_piece(c);
}

static void on_accept(uv_stream_t *l, int status)
{
    server_t *srv = l->data;
    assert_int_equal(status, 0);
    sconn_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->srv = srv;
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    srv->accepted++;
    for (int i = 0; i < MAX_CONNS; i++)
        if (!srv->conns[i]) {
            srv->conns[i] = c;
            break;
        }
    uv_read_start((uv_stream_t *)&c->tcp, sconn_alloc, sconn_read);
}

static bool server_start(server_t *srv, uv_loop_t *loop, const char *ip)
{
    memset(srv, 0, sizeof *srv);
    srv->loop = loop;
    srv->close_after = true;
    uv_tcp_init(loop, &srv->listener);
    srv->listener.data = srv;
    struct sockaddr_storage addr;
    if (strchr(ip, ':'))
        uv_ip6_addr(ip, 0, (struct sockaddr_in6 *)&addr);
    else
        uv_ip4_addr(ip, 0, (struct sockaddr_in *)&addr);
    if (uv_tcp_bind(&srv->listener, (struct sockaddr *)&addr, 0) != 0 ||
        uv_listen((uv_stream_t *)&srv->listener, 16, on_accept) != 0)
        return false;
    int len = sizeof addr;
    uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&addr, &len);
    srv->port = ntohs(((struct sockaddr_in *)&addr)->sin_port); /* same offset for v6 */
    return true;
}

static void server_respond_with(server_t *srv, bool close_after, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *s = va_arg(ap, const char *);
        srv->pieces[i] = (piece_t){s, strlen(s)};
    }
    va_end(ap);
    srv->n_pieces = n;
    srv->close_after = close_after;
}

static void server_stop(server_t *srv)
{
    uv_close((uv_handle_t *)&srv->listener, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        if (srv->conns[i])
            sconn_close(srv->conns[i]);
}

/* ---- client side helpers ---------------------------------------------------------------- */

typedef struct result {
    int calls;
    int status;
    size_t body_len;
    char body[4096];
    char error[256];
} result_t;

static void on_result(void *ctx, int status, const char *body, size_t len, const char *error)
{
    result_t *r = ctx;
    r->calls++;
    r->status = status;
    r->body_len = len;
    if (status >= 0) {
        assert_non_null(body);
        assert_null(error);
        memcpy(r->body, body, len < sizeof r->body - 1 ? len : sizeof r->body - 1);
    } else {
        assert_null(body);
        assert_non_null(error);
        snprintf(r->error, sizeof r->error, "%s", error);
    }
}

static void on_guard(uv_timer_t *t)
{
    (void)t;
}

static bool run_until_int(uv_loop_t *loop, const int *value, int at_least)
{
    uv_timer_t guard;
    uv_timer_init(loop, &guard);
    uv_timer_start(&guard, on_guard, 10, 10);
    uint64_t end = uv_hrtime() / 1000000u + DEADLINE_MS;
    while (*value < at_least && uv_hrtime() / 1000000u < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *value >= at_least;
}

static void on_time_up(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Let the loop run for ms (to give it the chance to do something it must not). */
static void run_for(uv_loop_t *loop, uint64_t ms)
{
    int up = 0;
    uv_timer_t t;
    uv_timer_init(loop, &t);
    t.data = &up;
    uv_timer_start(&t, on_time_up, ms, 0);
    while (!up)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

typedef struct fixture {
    uv_loop_t loop;
    server_t srv;
    result_t res;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_true(server_start(&f->srv, &f->loop, "127.0.0.1"));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    server_stop(&f->srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

static http_call_req_t req_to(const fixture_t *f, const char *method, const char *path)
{
    return (http_call_req_t){.host = "127.0.0.1", .port = f->srv.port, .method = method,
                             .path = path, .timeout_ms = DEADLINE_MS};
}

/* Start a call and run until its callback; the callback must run exactly once. */
static void call_and_wait(fixture_t *f, const http_call_req_t *req)
{
    char err[256] = "";
    http_call_t *c = NULL;
    if (http_call_start(&f->loop, req, on_result, &f->res, &c, err, sizeof err) != 0)
        fail_msg("http_call_start: %s", err);
    assert_non_null(c);
    assert_int_equal(f->res.calls, 0); /* never synchronously */
    assert_true(run_until_int(&f->loop, &f->res.calls, 1));
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->res.calls, 1);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_content_length_body_and_request_format(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 2, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhel",
                        "lo world");
    http_call_req_t req = req_to(f, "POST", "/v1/unload?x=1");
    req.body = "{\"a\":1}";
    req.body_len = 7;
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->res.body_len, 11);
    assert_string_equal(f->res.body, "hello world");
    char expect[512];
    snprintf(expect, sizeof expect,
             "POST /v1/unload?x=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
             "Content-Length: 7\r\nContent-Type: application/json\r\n\r\n{\"a\":1}",
             f->srv.port);
    assert_string_equal(f->srv.request, expect);
}

static void test_get_localhost_no_body(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "HTTP/1.1 204 No Content\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/health");
    req.host = "localhost";
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 204);
    assert_int_equal(f->res.body_len, 0);
    char expect[256];
    snprintf(expect, sizeof expect,
             "GET /health HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n"
             "Content-Length: 0\r\n\r\n",
             f->srv.port);
    assert_string_equal(f->srv.request, expect);
}

static void test_chunked_body(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 3,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
                        "lo\r\n7\r\n, world\r\n", "0\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/status");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->res.body_len, 12);
    assert_string_equal(f->res.body, "hello, world");
}

static void test_chunked_body_completes_without_close(void **state)
{
    fixture_t *f = *state;
    /* The server keeps the connection open: the last chunk alone must end the call. */
    server_respond_with(&f->srv, false, 1,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_string_equal(f->res.body, "abc");
}

static void test_until_close_body(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 2, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ",
                        "close body");
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_string_equal(f->res.body, "until close body");
}

static void test_server_error_status(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1,
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops");
    http_call_req_t req = req_to(f, "POST", "/reload");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 500);
    assert_string_equal(f->res.body, "oops");
}

static void test_interim_response_skipped(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 2, "HTTP/1.1 100 Continue\r\n\r\n",
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    http_call_req_t req = req_to(f, "POST", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_string_equal(f->res.body, "ok");
}

static void test_head_request_has_no_body(void **state)
{
    fixture_t *f = *state;
    /* Content-Length describes the GET body; after HEAD none follows (and no close). */
    server_respond_with(&f->srv, false, 1, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
    http_call_req_t req = req_to(f, "HEAD", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->res.body_len, 0);
}

static void test_garbage_is_malformed(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "garbage garbage\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_non_null(strstr(f->res.error, "malformed response"));
}

static void test_truncated_body_is_malformed(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_non_null(strstr(f->res.error, "malformed response"));
    assert_non_null(strstr(f->res.error, "3 of 10"));
}

static void test_bad_chunk_is_malformed(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_non_null(strstr(f->res.error, "malformed response"));
}

static void test_close_without_response(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "");
    f->srv.pieces[0].len = 0; /* an empty write, then close */
    http_call_req_t req = req_to(f, "GET", "/");
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_non_null(strstr(f->res.error, "closed without a response"));
}

static void test_no_answer_times_out(void **state)
{
    fixture_t *f = *state;
    f->srv.n_pieces = 0; /* read the request, never answer */
    http_call_req_t req = req_to(f, "GET", "/health");
    req.timeout_ms = 200;
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_string_equal(f->res.error, "timeout after 200 ms");
    assert_int_equal(f->srv.requests, 1);
    assert_true(run_until_int(&f->loop, &f->srv.client_closed, 1)); /* the client hung up */
}

static void test_connection_refused(void **state)
{
    fixture_t *f = *state;
    /* A port that was just free: bind, read it, close. */
    uv_tcp_t probe;
    uv_tcp_init(&f->loop, &probe);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 0, &addr);
    assert_int_equal(uv_tcp_bind(&probe, (struct sockaddr *)&addr, 0), 0);
    int len = sizeof addr;
    uv_tcp_getsockname(&probe, (struct sockaddr *)&addr, &len);
    int port = ntohs(addr.sin_port);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);

    http_call_req_t req = req_to(f, "GET", "/");
    req.port = port;
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, -1);
    assert_string_equal(f->res.error, "connect: connection refused");
}

static void test_body_over_max_response_is_truncated(void **state)
{
    fixture_t *f = *state;
    /* Content-Length says 100 KiB; only 2000 bytes come and the connection stays open:
     * the call must end as soon as max_response bytes are held, not wait for the rest. */
    static char big[2000 + 128];
    int head = snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 100 * 1024);
    memset(big + head, 'x', 2000);
    big[head + 2000] = '\0';
    server_respond_with(&f->srv, false, 1, big);
    http_call_req_t req = req_to(f, "GET", "/");
    req.max_response = 1000;
    req.timeout_ms = 5000;
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->res.body_len, 1000);
    assert_int_equal(strspn(f->res.body, "x"), 1000);
}

static void test_chunked_over_max_response_is_truncated(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, false, 2,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n",
                        "8\r\n89abcdef\r\n"); /* never ends: the cap ends the call */
    http_call_req_t req = req_to(f, "GET", "/");
    req.max_response = 10;
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->res.body_len, 10);
    assert_memory_equal(f->res.body, "0123456789", 10);
}

static void test_cancel_before_connect(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    http_call_req_t req = req_to(f, "GET", "/");
    char err[256];
    http_call_t *c = NULL;
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), 0);
    http_call_cancel(c);
    run_for(&f->loop, 200); /* time for anything it wrongly still would do */
    assert_int_equal(f->res.calls, 0);
}

static void test_cancel_while_waiting_for_response(void **state)
{
    fixture_t *f = *state;
    f->srv.n_pieces = 0; /* never answers */
    http_call_req_t req = req_to(f, "GET", "/health");
    req.timeout_ms = 300; /* the timer must die with the cancel, not fire later */
    char err[256];
    http_call_t *c = NULL;
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), 0);
    assert_true(run_until_int(&f->loop, &f->srv.requests, 1));
    http_call_cancel(c);
    assert_true(run_until_int(&f->loop, &f->srv.client_closed, 1));
    run_for(&f->loop, 500); /* past the call's timeout */
    assert_int_equal(f->res.calls, 0);
}

typedef struct chain {
    fixture_t *f;
    result_t first;
    int started_second;
} chain_t;

static void on_first_then_call_again(void *ctx, int status, const char *body, size_t len,
                                     const char *error)
{
    chain_t *ch = ctx;
    on_result(&ch->first, status, body, len, error);
    http_call_req_t req = req_to(ch->f, "GET", "/again");
    char err[256];
    if (http_call_start(&ch->f->loop, &req, on_result, &ch->f->res, NULL, err, sizeof err) == 0)
        ch->started_second = 1;
}

static void test_new_call_from_callback(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
    chain_t ch = {.f = f};
    http_call_req_t req = req_to(f, "GET", "/first");
    char err[256];
    assert_int_equal(http_call_start(&f->loop, &req, on_first_then_call_again, &ch, NULL, err,
                                     sizeof err),
                     0);
    assert_true(run_until_int(&f->loop, &f->res.calls, 1));
    assert_int_equal(ch.first.calls, 1);
    assert_int_equal(ch.first.status, 200);
    assert_int_equal(ch.started_second, 1);
    assert_int_equal(f->res.status, 200);
    assert_int_equal(f->srv.requests, 2);
    assert_non_null(strstr(f->srv.request, "GET /again HTTP/1.1\r\n"));
}

typedef struct self_cancel {
    result_t res;
    http_call_t *handle;
} self_cancel_t;

static void on_result_then_cancel(void *ctx, int status, const char *body, size_t len, const char *error)
{
    self_cancel_t *sc = ctx;
    on_result(&sc->res, status, body, len, error);
    http_call_cancel(sc->handle); /* a no-op now: the handle is freed after this returns */
}

static void test_cancel_inside_callback_is_noop(void **state)
{
    fixture_t *f = *state;
    server_respond_with(&f->srv, true, 1, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
    self_cancel_t sc = {0};
    http_call_req_t req = req_to(f, "GET", "/");
    char err[256];
    assert_int_equal(http_call_start(&f->loop, &req, on_result_then_cancel, &sc, &sc.handle, err, sizeof err), 0);
    assert_true(run_until_int(&f->loop, &sc.res.calls, 1));
    run_for(&f->loop, 50);
    assert_int_equal(sc.res.calls, 1);
    assert_int_equal(sc.res.status, 200);
}

static void test_bad_arguments_fail_synchronously(void **state)
{
    fixture_t *f = *state;
    char err[256];
    http_call_t *c = (http_call_t *)1;
    http_call_req_t req = req_to(f, "GET", "/");
    req.host = "example.com";
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    assert_null(c);
    assert_non_null(strstr(err, "bad host"));
    req = req_to(f, "GE T", "/");
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    req = req_to(f, "GET", "/a\r\nX-Injected: 1");
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    req = req_to(f, "GET", "relative");
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    req = req_to(f, "GET", "/");
    req.port = 0;
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    req = req_to(f, "POST", "/");
    req.body = "x";
    req.body_len = 1;
    req.content_type = "text/plain\r\nX-Injected: 1";
    assert_int_equal(http_call_start(&f->loop, &req, on_result, &f->res, &c, err, sizeof err), -1);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->res.calls, 0);
    assert_int_equal(f->srv.accepted, 0);
}

static void test_ipv6_loopback(void **state)
{
    fixture_t *f = *state;
    server_t *srv6 = malloc(sizeof *srv6);
    assert_non_null(srv6);
    if (!server_start(srv6, &f->loop, "::1")) {
        uv_close((uv_handle_t *)&srv6->listener, NULL);
        uv_run(&f->loop, UV_RUN_NOWAIT);
        free(srv6);
        skip(); /* no IPv6 loopback here */
    }
    server_respond_with(srv6, true, 1, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nv6");
    http_call_req_t req = {.host = "::1", .port = srv6->port, .method = "GET", .path = "/",
                           .timeout_ms = DEADLINE_MS};
    call_and_wait(f, &req);
    assert_int_equal(f->res.status, 200);
    assert_string_equal(f->res.body, "v6");
    char host[64];
    snprintf(host, sizeof host, "Host: [::1]:%d\r\n", srv6->port);
    assert_non_null(strstr(srv6->request, host));
    server_stop(srv6);
    run_for(&f->loop, 50); /* the main server still listens: no UV_RUN_DEFAULT */
    for (int i = 0; i < MAX_CONNS; i++)
        assert_null(srv6->conns[i]);
    free(srv6);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the test server writes to clients that may be gone */
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_content_length_body_and_request_format),
        T(test_get_localhost_no_body),
        T(test_chunked_body),
        T(test_chunked_body_completes_without_close),
        T(test_until_close_body),
        T(test_server_error_status),
        T(test_interim_response_skipped),
        T(test_head_request_has_no_body),
        T(test_garbage_is_malformed),
        T(test_truncated_body_is_malformed),
        T(test_bad_chunk_is_malformed),
        T(test_close_without_response),
        T(test_no_answer_times_out),
        T(test_connection_refused),
        T(test_body_over_max_response_is_truncated),
        T(test_chunked_over_max_response_is_truncated),
        T(test_cancel_before_connect),
        T(test_cancel_while_waiting_for_response),
        T(test_new_call_from_callback),
        T(test_cancel_inside_callback_is_noop),
        T(test_bad_arguments_fail_synchronously),
        T(test_ipv6_loopback),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
