/*
 * test_http_client: src/net/http_client.c (vramd's one outgoing HTTP/1.1 client) against a
 * tiny HTTP server in the same uv loop that reads one request, then writes canned byte
 * pieces `gap_ms` apart (so the client sees the answer split across reads) and closes, or
 * keeps the connection open.
 *
 * Covers: the buffered body at and over its cap (TOO_LARGE keeps the first max_body bytes);
 * a streamed chunked answer split at every byte position, and one byte per write; a
 * close-delimited body; early closes (nothing, inside the head, mid Content-Length, mid
 * chunked); the timeout before and after the head; cancel from inside on_head and on_body
 * (no callback afterwards); a refused head (SINK_FAILED); 101 as a final head; bad
 * arguments; http_client_addr and http_client_head. Each case owns its loop and ends with
 * uv_loop_close() == 0, so a handle left open fails it. Run under `make SAN=1` for leaks.
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
#include <sys/resource.h>
#include <unistd.h>

#include "net/http_client.h"

#define MAX_PIECES 512

/* ---- the test server -------------------------------------------------------------------- */

typedef struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_tcp_t conn;
    uv_timer_t timer;
    uv_write_t wr;
    bool have_conn;
    int port;
    const char *piece[MAX_PIECES];
    size_t piece_len[MAX_PIECES];
    int n_pieces, next;
    unsigned gap_ms;
    bool keep_open; /* after the last piece */
    char in[4096];
    size_t in_len;
    bool responded;
    int client_closed;
} server_t;

static void noop_close(uv_handle_t *h) { (void)h; }

static void close_conn(server_t *s)
{
    if (s->have_conn && !uv_is_closing((uv_handle_t *)&s->conn))
        uv_close((uv_handle_t *)&s->conn, noop_close);
}

static void send_next(server_t *s);

static void on_timer(uv_timer_t *t) { send_next(t->data); }

static void on_written(uv_write_t *w, int status)
{
    server_t *s = w->data;
    if (status < 0 || (s->next >= s->n_pieces && !s->keep_open))
        close_conn(s);
    else if (s->next < s->n_pieces)
        uv_timer_start(&s->timer, on_timer, s->gap_ms, 0);
}

static void send_next(server_t *s)
{
    if (uv_is_closing((uv_handle_t *)&s->conn))
        return;
    int i = s->next++;
    uv_buf_t b = uv_buf_init((char *)s->piece[i], (unsigned)s->piece_len[i]);
    s->wr.data = s;
    if (uv_write(&s->wr, (uv_stream_t *)&s->conn, &b, 1, on_written) != 0)
        close_conn(s);
}

static void s_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    server_t *s = h->data;
    *b = uv_buf_init(s->in + s->in_len, (unsigned)(sizeof s->in - 1 - s->in_len));
}

static void s_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    server_t *s = st->data;
    if (n < 0) {
        s->client_closed++;
        close_conn(s);
        return;
    }
    s->in_len += (size_t)n;
    s->in[s->in_len] = '\0';
    if (s->responded || !strstr(s->in, "\r\n\r\n"))
        return;
    s->responded = true;
    if (s->n_pieces > 0)
        send_next(s);
    else if (!s->keep_open)
        close_conn(s);
}

static void on_accept(uv_stream_t *l, int status)
{
    server_t *s = l->data;
    assert_int_equal(status, 0);
    assert_false(s->have_conn);
    uv_tcp_init(s->loop, &s->conn);
    s->conn.data = s;
    s->have_conn = true;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&s->conn), 0);
    uv_read_start((uv_stream_t *)&s->conn, s_alloc, s_read);
}

static void server_start(server_t *s, uv_loop_t *loop)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->gap_ms = 5;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 0, &addr);
    assert_int_equal(uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 4, on_accept), 0);
    int len = sizeof addr;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&addr, &len);
    s->port = ntohs(addr.sin_port);
}

static void server_piece(server_t *s, const char *data, size_t len)
{
    assert_true(s->n_pieces < MAX_PIECES);
    s->piece[s->n_pieces] = data;
    s->piece_len[s->n_pieces++] = len;
}

static void server_stop(server_t *s)
{
    uv_close((uv_handle_t *)&s->listener, noop_close);
    uv_close((uv_handle_t *)&s->timer, noop_close);
    close_conn(s);
}

/* ---- the client side ---------------------------------------------------------------------- */

typedef struct sink {
    http_client_t *handle;
    int heads, bodies, ends;
    int status;   /* from on_head */
    int end_status; /* from on_end's msg; -1 when it had none */
    http_client_end_t how;
    char error[256];
    char body[8192];
    size_t body_len;
    bool refuse_head, cancel_in_head, cancel_in_body;
    int sys_error; /* from on_end */
} sink_t;

static int on_head(void *ctx, const char *head, const http1_msg_t *msg)
{
    (void)head;
    sink_t *k = ctx;
    assert_int_equal(k->ends, 0);
    k->heads++;
    k->status = msg->status;
    if (k->cancel_in_head)
        http_client_cancel(k->handle);
    return k->refuse_head ? -1 : 0;
}

static int on_body(void *ctx, const char *data, size_t len)
{
    sink_t *k = ctx;
    assert_int_equal(k->ends, 0);
    assert_true(k->body_len + len < sizeof k->body);
    memcpy(k->body + k->body_len, data, len);
    k->body_len += len;
    k->bodies++;
    if (k->cancel_in_body)
        http_client_cancel(k->handle);
    return 0;
}

static void on_end(void *ctx, const http_client_result_t *r)
{
    sink_t *k = ctx;
    k->ends++;
    k->how = r->how;
    k->end_status = r->msg ? r->msg->status : -1;
    k->sys_error = r->sys_error;
    snprintf(k->error, sizeof k->error, "%s", r->error ? r->error : "");
    assert_true(r->how == HTTP_CLIENT_COMPLETE ? r->error == NULL : r->error != NULL);
    if (r->body) { /* buffered */
        assert_true(r->body_len < sizeof k->body);
        memcpy(k->body, r->body, r->body_len);
        k->body_len = r->body_len;
    }
}

/* Start a GET to the server: streamed (on_body) or buffered (max_body). */
static void start(server_t *s, sink_t *k, bool streamed, size_t max_body, uint64_t timeout_ms)
{
    char *req = strdup("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    assert_non_null(req);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", s->port, &addr);
    http_client_opts_t o = {.on_head = on_head, .on_body = streamed ? on_body : NULL, .on_end = on_end, .ctx = k,
                            .timeout_ms = timeout_ms, .max_body = max_body};
    char err[256];
    assert_int_equal(http_client_start(s->loop, (struct sockaddr *)&addr, req, strlen(req), &o, &k->handle, err,
                                       sizeof err),
                     0);
    assert_non_null(k->handle);
}

static void run_until_end(uv_loop_t *loop, const sink_t *k)
{
    for (int i = 0; i < 5000 && k->ends == 0; i++)
        uv_run(loop, UV_RUN_ONCE);
    assert_int_equal(k->ends, 1);
}

/* Run until the server saw the client leave (cancel, end), then close everything. */
static void finish(uv_loop_t *loop, server_t *s)
{
    for (int i = 0; i < 5000 && s->have_conn && s->client_closed == 0 && !uv_is_closing((uv_handle_t *)&s->conn);
         i++)
        uv_run(loop, UV_RUN_ONCE);
    server_stop(s);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* One exchange against an answer given as pieces; the sink is left for the checks. */
static void exchange(sink_t *k, bool streamed, size_t max_body, bool keep_open, int n, const char *const *pieces)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop);
    s.keep_open = keep_open;
    for (int i = 0; i < n; i++)
        server_piece(&s, pieces[i], strlen(pieces[i]));
    start(&s, k, streamed, max_body, 0);
    run_until_end(&loop, k);
    finish(&loop, &s);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_buffered_cap(void **state)
{
    (void)state;
    /* exactly at the cap: complete */
    sink_t k = {0};
    const char *at[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", "56789"};
    exchange(&k, false, 10, true, 2, at);
    assert_int_equal(k.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k.end_status, 200);
    assert_int_equal(k.body_len, 10);
    assert_memory_equal(k.body, "0123456789", 10);

    /* over it, the connection kept open: ends at once with the first max_body bytes */
    sink_t k2 = {0};
    const char *over[] = {"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n01234", "56789abcdef"};
    exchange(&k2, false, 10, true, 2, over);
    assert_int_equal(k2.how, HTTP_CLIENT_TOO_LARGE);
    assert_int_equal(k2.end_status, 200);
    assert_int_equal(k2.body_len, 10);
    assert_memory_equal(k2.body, "0123456789", 10);
    assert_non_null(strstr(k2.error, "larger than 10 bytes"));

    /* chunked over the cap, never ending */
    sink_t k3 = {0};
    const char *chunked[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n", "8\r\n89abcdef\r\n"};
    exchange(&k3, false, 12, true, 2, chunked);
    assert_int_equal(k3.how, HTTP_CLIENT_TOO_LARGE);
    assert_int_equal(k3.body_len, 12);
    assert_memory_equal(k3.body, "0123456789ab", 12);
}

static const char chunked_answer[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n"
                                     "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-X: y\r\n\r\n";

static void check_chunked(const sink_t *k)
{
    assert_int_equal(k->how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k->heads, 1);
    assert_int_equal(k->status, 200);
    assert_int_equal(k->body_len, 11);
    assert_memory_equal(k->body, "hello world", 11);
}

static void test_streamed_chunked_split_everywhere(void **state)
{
    (void)state;
    size_t n = sizeof chunked_answer - 1;
    for (size_t at = 1; at < n; at++) {
        uv_loop_t loop;
        uv_loop_init(&loop);
        server_t s;
        server_start(&s, &loop);
        s.gap_ms = 2;
        s.keep_open = true; /* the last chunk alone ends it */
        server_piece(&s, chunked_answer, at);
        server_piece(&s, chunked_answer + at, n - at);
        sink_t k = {0};
        start(&s, &k, true, 0, 0);
        run_until_end(&loop, &k);
        finish(&loop, &s);
        check_chunked(&k);
    }
}

static void test_streamed_chunked_byte_by_byte(void **state)
{
    (void)state;
    size_t n = sizeof chunked_answer - 1;
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop);
    s.gap_ms = 1;
    s.keep_open = true;
    for (size_t i = 0; i < n; i++)
        server_piece(&s, chunked_answer + i, 1);
    sink_t k = {0};
    start(&s, &k, true, 0, 0);
    run_until_end(&loop, &k);
    finish(&loop, &s);
    check_chunked(&k);
    /* buffered, the same answer */
    sink_t k2 = {0};
    const char *whole[] = {chunked_answer};
    exchange(&k2, false, 0, true, 1, whole);
    check_chunked(&k2);
}

static void test_close_delimited(void **state)
{
    (void)state;
    sink_t k = {0};
    const char *p[] = {"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ", "close"};
    exchange(&k, false, 0, false, 2, p);
    assert_int_equal(k.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k.body_len, 11);
    assert_memory_equal(k.body, "until close", 11);

    sink_t k2 = {0};
    exchange(&k2, true, 0, false, 2, p);
    assert_int_equal(k2.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k2.heads, 1);
    assert_int_equal(k2.body_len, 11);
}

static void test_early_close(void **state)
{
    (void)state;
    sink_t k = {0};
    exchange(&k, false, 0, false, 0, NULL);
    assert_int_equal(k.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k.end_status, -1);
    assert_string_equal(k.error, "connection closed without a response");

    sink_t k2 = {0};
    const char *head[] = {"HTTP/1.1 200 OK\r\nContent-Le"};
    exchange(&k2, true, 0, false, 1, head);
    assert_int_equal(k2.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k2.heads, 0);
    assert_non_null(strstr(k2.error, "inside the head"));

    sink_t k3 = {0};
    const char *cl[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"};
    exchange(&k3, true, 0, false, 1, cl);
    assert_int_equal(k3.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k3.heads, 1);
    assert_int_equal(k3.end_status, 200);
    assert_int_equal(k3.body_len, 3);
    assert_non_null(strstr(k3.error, "middle of the response body (3 of 10 bytes)"));

    sink_t k4 = {0};
    const char *ch[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"};
    exchange(&k4, false, 0, false, 1, ch);
    assert_int_equal(k4.how, HTTP_CLIENT_DROPPED);
    assert_non_null(strstr(k4.error, "chunked"));

    sink_t k5 = {0};
    const char *bad[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"};
    exchange(&k5, false, 0, false, 1, bad);
    assert_int_equal(k5.how, HTTP_CLIENT_DROPPED);
    assert_non_null(strstr(k5.error, "malformed response: chunked body"));
}

static void timeout_case(const char *piece, int expect_status)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop);
    s.keep_open = true;
    if (piece)
        server_piece(&s, piece, strlen(piece));
    sink_t k = {0};
    start(&s, &k, true, 0, 100);
    run_until_end(&loop, &k);
    assert_int_equal(k.how, HTTP_CLIENT_TIMED_OUT);
    assert_string_equal(k.error, "timeout after 100 ms");
    assert_int_equal(k.end_status, expect_status);
    finish(&loop, &s);
    assert_int_equal(s.client_closed, 1); /* the client hung up */
}

static void test_timeout(void **state)
{
    (void)state;
    timeout_case(NULL, -1);                                                  /* no answer at all */
    timeout_case("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 200); /* a head, part of the body */
}

/* Cancel from inside a callback: nothing is called afterwards. */
static void cancel_case(bool in_head)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop);
    s.keep_open = true;
    const char *answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\n\r\n";
    server_piece(&s, answer, strlen(answer));
    sink_t k = {.cancel_in_head = in_head, .cancel_in_body = !in_head};
    start(&s, &k, true, 0, 200);
    for (int i = 0; i < 5000 && s.client_closed == 0; i++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(s.client_closed, 1);
    finish(&loop, &s);
    assert_int_equal(k.heads, 1);
    assert_int_equal(k.bodies, in_head ? 0 : 1);
    assert_int_equal(k.ends, 0);
}

static void test_cancel_inside_callbacks(void **state)
{
    (void)state;
    cancel_case(true);
    cancel_case(false);
}

static void test_head_refused_and_101(void **state)
{
    (void)state;
    sink_t k = {.refuse_head = true};
    const char *p[] = {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"};
    exchange(&k, true, 0, true, 1, p);
    assert_int_equal(k.how, HTTP_CLIENT_SINK_FAILED);
    assert_int_equal(k.bodies, 0);

    /* 100 is skipped; 101 is a final head (with no body) */
    sink_t k2 = {0};
    const char *up[] = {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n"
                        "Connection: upgrade\r\n\r\n"};
    exchange(&k2, true, 0, true, 1, up);
    assert_int_equal(k2.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k2.heads, 1);
    assert_int_equal(k2.status, 101);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 1, &addr);
    char err[64];
    http_client_t *c = (http_client_t *)1;
    /* the request is taken over (and freed) even on failure: ASan checks */
    assert_int_equal(http_client_start(&loop, (struct sockaddr *)&addr, strdup("x"), 1, NULL, &c, err, sizeof err), -1);
    assert_null(c);
    http_client_opts_t no_end = {.on_end = NULL};
    assert_int_equal(http_client_start(&loop, (struct sockaddr *)&addr, strdup("x"), 1, &no_end, &c, err, sizeof err),
                     -1);
    assert_string_equal(err, "bad arguments");
    http_client_cancel(NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* vramd's own shortage is told apart: a refused connect reports its error (not a shortage);
 * with the process's descriptors exhausted (RLIMIT_NOFILE at the lowest free descriptor)
 * start fails with -2 and says why; a complete exchange has no sys_error. */
static void test_local_shortage(void **state)
{
    (void)state;
    assert_true(http_client_local_shortage(UV_EMFILE));
    assert_true(http_client_local_shortage(UV_ENFILE));
    assert_true(http_client_local_shortage(UV_ENOBUFS));
    assert_true(http_client_local_shortage(UV_ENOMEM));
    assert_false(http_client_local_shortage(UV_ECONNREFUSED));
    assert_false(http_client_local_shortage(0));

    sink_t ok = {0};
    const char *p[] = {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"};
    exchange(&ok, false, 0, false, 1, p);
    assert_int_equal(ok.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(ok.sys_error, 0);

    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop); /* a port that was listening, then closed: refused */
    int port = s.port;
    server_stop(&s);
    uv_run(&loop, UV_RUN_DEFAULT);
    s.port = port;
    sink_t k = {0};
    start(&s, &k, false, 0, 2000);
    run_until_end(&loop, &k);
    assert_int_equal(k.how, HTTP_CLIENT_CONNECT_FAILED);
    assert_int_equal(k.sys_error, UV_ECONNREFUSED);
    assert_false(http_client_local_shortage(k.sys_error));

    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    struct rlimit low = {.rlim_cur = (rlim_t)lowest, .rlim_max = old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    http_client_opts_t o = {.on_end = on_end, .ctx = &k};
    http_client_t *c = NULL;
    char err[256];
    int rc = http_client_start(&loop, (struct sockaddr *)&addr, strdup("GET / HTTP/1.1\r\n\r\n"), 18, &o, &c, err,
                               sizeof err);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(rc, -2);
    assert_null(c);
    assert_non_null(strstr(err, "too many open files"));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_addr_and_head(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    assert_int_equal(http_client_addr("localhost", 80, &ss), 0);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr), 0x7f000001);
    assert_int_equal(http_client_addr("::1", 8080, &ss), 0);
    assert_int_equal(ss.ss_family, AF_INET6);
    assert_int_equal(http_client_addr("example.com", 80, &ss), -1);
    assert_int_equal(http_client_addr("127.0.0.1", 0, &ss), -1);
    assert_int_equal(http_client_addr("127.0.0.1", 65536, &ss), -1);
    assert_int_equal(http_client_addr(NULL, 80, &ss), -1);

    buf_t b;
    buf_init(&b, 1024);
    http_client_head(&b, "POST", "/x?y", "h:1", 7);
    assert_false(buf_failed(&b));
    assert_string_equal(b.data, "POST /x?y HTTP/1.1\r\nHost: h:1\r\nConnection: close\r\nContent-Length: 7\r\n");
    buf_free(&b);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server may write to a client that already left */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffered_cap),
        cmocka_unit_test(test_streamed_chunked_split_everywhere),
        cmocka_unit_test(test_streamed_chunked_byte_by_byte),
        cmocka_unit_test(test_close_delimited),
        cmocka_unit_test(test_early_close),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_cancel_inside_callbacks),
        cmocka_unit_test(test_head_refused_and_101),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_addr_and_head),
        cmocka_unit_test(test_local_shortage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
