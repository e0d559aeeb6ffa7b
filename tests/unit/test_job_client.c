/*
 * test_job_client: a job attempt's exchange as the runner makes it, the request of
 * src/jobs/job_client.c sent with net/http_client.c and its answer streamed to a sink,
 * against a tiny HTTP server in the same uv loop that reads one request and answers with
 * canned byte pieces sent 10 ms apart, so the client sees answers split across reads.
 *
 * Covers: the request bytes (job_client_build_request); Content-Length, chunked (split in
 * the middle of a size line and of data) and until-close bodies streamed to the sink; a
 * 100 Continue before the real head; a connection dropped mid-body, a malformed head and an
 * oversized head (DROPPED); a refused connect (CONNECT_FAILED); a sink that refuses bytes
 * (SINK_FAILED); cancel (no callback, the server sees the connection closed). Each test
 * owns its loop and ends with uv_loop_close() == 0, so a handle left open fails it.
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

#include "jobs/job_client.h"
#include "net/http_client.h"

#define MAX_PIECES 4

/* ---- the test server -------------------------------------------------------------------- */

typedef struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_tcp_t conn;
    uv_timer_t timer;
    uv_write_t wr;
    bool have_conn;
    int port;
    const char *pieces[MAX_PIECES];
    size_t piece_len[MAX_PIECES];
    int n_pieces, next;
    char in[16384];
    size_t in_len;
    bool responded;
    int client_closed;
} server_t;

static void noop_close(uv_handle_t *h) { (void)h; }

static void send_next(server_t *s);

static void on_timer(uv_timer_t *t) { send_next(t->data); }

static void on_written(uv_write_t *w, int status)
{
    server_t *s = w->data;
    if (status < 0 || s->next >= s->n_pieces) {
        if (!uv_is_closing((uv_handle_t *)&s->conn))
            uv_close((uv_handle_t *)&s->conn, noop_close);
        return;
    }
    uv_timer_start(&s->timer, on_timer, 10, 0);
}

static void send_next(server_t *s)
{
    if (uv_is_closing((uv_handle_t *)&s->conn))
        return;
    int i = s->next++;
    uv_buf_t b = uv_buf_init((char *)s->pieces[i], (unsigned)s->piece_len[i]);
    s->wr.data = s;
    uv_write(&s->wr, (uv_stream_t *)&s->conn, &b, 1, on_written);
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
        if (!uv_is_closing((uv_handle_t *)&s->conn))
            uv_close((uv_handle_t *)&s->conn, noop_close);
        return;
    }
    s->in_len += (size_t)n;
    s->in[s->in_len] = '\0';
    const char *end = strstr(s->in, "\r\n\r\n");
    if (!end || s->responded)
        return;
    const char *cl = strstr(s->in, "Content-Length: ");
    size_t want = (size_t)(end - s->in) + 4 + (cl ? strtoul(cl + 16, NULL, 10) : 0);
    if (s->in_len < want)
        return;
    s->responded = true;
    if (s->n_pieces > 0)
        send_next(s);
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

static void server_start(server_t *s, uv_loop_t *loop, int n, ...)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        s->pieces[i] = va_arg(ap, const char *);
        s->piece_len[i] = strlen(s->pieces[i]);
    }
    va_end(ap);
    s->n_pieces = n;
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

static void server_stop(server_t *s)
{
    uv_close((uv_handle_t *)&s->listener, noop_close);
    uv_close((uv_handle_t *)&s->timer, noop_close);
    if (s->have_conn && !uv_is_closing((uv_handle_t *)&s->conn))
        uv_close((uv_handle_t *)&s->conn, noop_close);
}

/* ---- client side -------------------------------------------------------------------------- */

typedef struct sink {
    int heads, ends;
    int status;
    http_client_end_t how;
    char error[256];
    char body[8192];
    size_t body_len;
    int refuse_after; /* on_body returns -1 once this many bytes were taken; 0 = never */
} sink_t;

static int on_head(void *ctx, const char *head, const http1_msg_t *msg)
{
    (void)head;
    sink_t *k = ctx;
    k->heads++;
    k->status = msg->status;
    return 0;
}

static int on_body(void *ctx, const char *data, size_t len)
{
    sink_t *k = ctx;
    assert_int_equal(k->ends, 0);
    if (k->body_len + len >= sizeof k->body)
        return -1;
    memcpy(k->body + k->body_len, data, len);
    k->body_len += len;
    return k->refuse_after && (int)k->body_len >= k->refuse_after ? -1 : 0;
}

static void on_end(void *ctx, const http_client_result_t *r)
{
    sink_t *k = ctx;
    k->ends++;
    k->how = r->how;
    snprintf(k->error, sizeof k->error, "%s", r->error ? r->error : "");
}

static void start_client(uv_loop_t *loop, int port, sink_t *k, http_client_t **out)
{
    char *req = NULL;
    size_t len = 0;
    assert_int_equal(job_client_build_request("POST", "/w/work", "{\"X-A\":\"1\"}", "{}", 2, "job-abc-123", 5, 0, NULL, &req,
                                              &len),
                     0);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    char err[256];
    http_client_opts_t o = {.on_head = on_head, .on_body = on_body, .on_end = on_end, .ctx = k};
    assert_int_equal(http_client_start(loop, (struct sockaddr *)&addr, req, len, &o, out, err, sizeof err), 0);
}

static void run_until_end(uv_loop_t *loop, const sink_t *k)
{
    for (int i = 0; i < 2000 && k->ends == 0; i++)
        uv_run(loop, UV_RUN_ONCE);
    assert_int_equal(k->ends, 1);
}

static void finish_loop(uv_loop_t *loop, server_t *s)
{
    server_stop(s);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void run_case(sink_t *k, server_t *s, int n, const char *a, const char *b, const char *c)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (n == 1)
        server_start(s, &loop, 1, a);
    else if (n == 2)
        server_start(s, &loop, 2, a, b);
    else
        server_start(s, &loop, 3, a, b, c);
    start_client(&loop, s->port, k, NULL);
    run_until_end(&loop, k);
    finish_loop(&loop, s);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_build_request(void **state)
{
    (void)state;
    char *req = NULL;
    size_t len = 0;
    assert_int_equal(job_client_build_request("PUT", "/x?y=1", "{\"Content-Type\":\"image/png\",\"X-B\":\"v w\"}", "ab",
                                              2, "job-id-nonce", 7, 1500, NULL, &req, &len),
                     0);
    assert_int_equal(len, strlen(req));
    assert_non_null(strstr(req, "PUT /x?y=1 HTTP/1.1\r\n"));
    assert_non_null(strstr(req, "Connection: close\r\n"));
    assert_non_null(strstr(req, "Content-Length: 2\r\n"));
    assert_non_null(strstr(req, "X-Request-Id: job-id-nonce\r\n"));
    assert_non_null(strstr(req, "X-Vramd-Priority: 7\r\n"));
    assert_non_null(strstr(req, "X-Vramd-Deadline: 1500ms\r\n"));
    assert_non_null(strstr(req, "Content-Type: image/png\r\n"));
    assert_non_null(strstr(req, "X-B: v w\r\n"));
    assert_true(len > 6 && memcmp(req + len - 6, "\r\n\r\nab", 6) == 0);
    free(req);
    /* no deadline, no headers */
    assert_int_equal(job_client_build_request("GET", "/", NULL, NULL, 0, "r", 0, 0, NULL, &req, &len), 0);
    assert_null(strstr(req, "X-Vramd-Deadline"));
    free(req);
    assert_int_equal(job_client_build_request("GET", "/", "[1]", NULL, 0, "r", 0, 0, NULL, &req, &len), -1);
}

/* The submitter: X-Vramd-Job-Client with the secret, and the per-client header's captured
 * value in place of the job's own header of that name; nothing without a secret or peer. */
static void test_build_request_with_submitter(void **state)
{
    (void)state;
    job_submitter_t sub;
    static const char head[] = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\n\r\n";
    http1_header_t hdrs[4];
    http1_msg_t msg;
    http1_limits_t lim = {.max_header_bytes = 1024, .max_headers = 4};
    size_t scan = 0;
    http1_error_t err;
    assert_int_equal(http1_parse_request(head, sizeof head - 1, &lim, &msg, hdrs, &scan, &err), HTTP1_OK);
    job_submitter_capture(&sub, "10.1.2.3:4567", "x-tenant", head, &msg);
    char *json = job_submitter_to_json(&sub);
    assert_non_null(json);
    job_submitter_t back;
    assert_int_equal(job_submitter_from_json(json, &back), 0);
    free(json);
    assert_string_equal(back.peer, "10.1.2.3:4567");
    assert_string_equal(back.value, "acme");
    job_client_origin_t o = {.secret = "s3cr3t", .submitter = &back, .key_header = "X-Tenant"};
    char *req = NULL;
    size_t len = 0;
    assert_int_equal(job_client_build_request("POST", "/g", "{\"x-tenant\":\"other\",\"X-C\":\"1\"}", NULL, 0, "r", 0, 0,
                                              &o, &req, &len),
                     0);
    assert_non_null(strstr(req, "X-Vramd-Job-Client: s3cr3t 10.1.2.3:4567\r\n"));
    assert_non_null(strstr(req, "X-Tenant: acme\r\n"));
    assert_null(strstr(req, "other"));
    assert_non_null(strstr(req, "X-C: 1\r\n"));
    free(req);
    /* keyed by address now: the header is not replayed; no secret: no X-Vramd-Job-Client */
    o.key_header = NULL;
    o.secret = "";
    assert_int_equal(job_client_build_request("POST", "/g", "{\"x-tenant\":\"other\"}", NULL, 0, "r", 0, 0, &o, &req,
                                              &len),
                     0);
    assert_null(strstr(req, "X-Vramd-Job-Client"));
    assert_non_null(strstr(req, "x-tenant: other\r\n"));
    free(req);
    /* what the journal may hold: anything else is refused, never put in a head */
    assert_int_equal(job_submitter_from_json(NULL, &back), 0);
    assert_string_equal(back.peer, "");
    assert_int_equal(job_submitter_from_json("{\"peer\":\"1.2.3.4:5 x\"}", &back), -1);
    assert_int_equal(job_submitter_from_json("{\"peer\":\"1.2.3.4:5\",\"header\":\"X-T\",\"value\":\"a\\r\\nB: c\"}", &back),
                     -1);
    assert_int_equal(job_submitter_from_json("[1]", &back), -1);
    assert_string_equal(back.peer, "");
    /* a value over JOB_SUBMITTER_VALUE_MAX is not captured; no header name: only the peer */
    job_submitter_capture(&sub, "[::1]:80", NULL, head, &msg);
    assert_string_equal(sub.peer, "[::1]:80");
    assert_string_equal(sub.header, "");
    job_submitter_capture(&sub, "not a peer", "X-Missing", head, &msg);
    assert_string_equal(sub.peer, "");
    assert_string_equal(sub.header, "");
    /* a token key (key: token) goes to the journal and behind the peer; only [0-9a-z#] */
    job_submitter_capture(&sub, "10.0.0.9:1", NULL, head, &msg);
    assert_int_equal(job_submitter_set_key(&sub, "token#0123456789abcdef"), 0);
    json = job_submitter_to_json(&sub);
    assert_non_null(json);
    assert_int_equal(job_submitter_from_json(json, &back), 0);
    free(json);
    assert_string_equal(back.key, "token#0123456789abcdef");
    o.secret = "s3cr3t";
    o.submitter = &back;
    assert_int_equal(job_client_build_request("GET", "/g", NULL, NULL, 0, "r", 0, 0, &o, &req, &len), 0);
    assert_non_null(strstr(req, "X-Vramd-Job-Client: s3cr3t 10.0.0.9:1 token#0123456789abcdef\r\n"));
    free(req);
    assert_int_equal(job_submitter_set_key(&sub, "Bearer alice"), -1);
    assert_string_equal(sub.key, "");
    assert_int_equal(job_submitter_from_json("{\"peer\":\"1.2.3.4:5\",\"key\":\"a b\"}", &back), -1);
}

static void test_content_length_in_pieces(void **state)
{
    (void)state;
    sink_t k = {0};
    server_t s;
    run_case(&k, &s, 3, "HTTP/1.1 200 OK\r\nContent-Le", "ngth: 11\r\nContent-Type: text/plain\r\n\r\nhello", " world");
    assert_int_equal(k.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k.heads, 1);
    assert_int_equal(k.status, 200);
    assert_int_equal(k.body_len, 11);
    assert_memory_equal(k.body, "hello world", 11);
    assert_non_null(strstr(s.in, "X-Request-Id: job-abc-123\r\n"));
    assert_non_null(strstr(s.in, "X-A: 1\r\n"));
}

static void test_chunked_split(void **state)
{
    (void)state;
    sink_t k = {0};
    server_t s;
    run_case(&k, &s, 3, "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
             "lo\r\n", "6\r\n world\r\n0\r\n\r\n");
    assert_int_equal(k.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k.status, 201);
    assert_int_equal(k.body_len, 11);
    assert_memory_equal(k.body, "hello world", 11);
}

static void test_until_close_and_interim(void **state)
{
    (void)state;
    sink_t k = {0};
    server_t s;
    run_case(&k, &s, 2, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nab", "cd", NULL);
    assert_int_equal(k.how, HTTP_CLIENT_COMPLETE);
    assert_int_equal(k.heads, 1);
    assert_int_equal(k.status, 200);
    assert_int_equal(k.body_len, 4);
    assert_memory_equal(k.body, "abcd", 4);
}

static void test_dropped_mid_body(void **state)
{
    (void)state;
    sink_t k = {0};
    server_t s;
    run_case(&k, &s, 1, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..", NULL, NULL);
    assert_int_equal(k.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k.body_len, 10);
    assert_non_null(strstr(k.error, "middle of the response body"));

    sink_t k2 = {0};
    run_case(&k2, &s, 1, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", NULL, NULL);
    assert_int_equal(k2.how, HTTP_CLIENT_DROPPED);
    assert_non_null(strstr(k2.error, "chunked"));

    sink_t k3 = {0};
    run_case(&k3, &s, 1, "NOT HTTP\r\n\r\n", NULL, NULL);
    assert_int_equal(k3.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k3.heads, 0);

    sink_t k4 = {0};
    run_case(&k4, &s, 1, "", NULL, NULL); /* an empty piece, then close: no head at all */
    assert_int_equal(k4.how, HTTP_CLIENT_DROPPED);
}

static void test_head_too_large(void **state)
{
    (void)state;
    size_t n = HTTP_CLIENT_MAX_HEAD + 1000;
    char *big = malloc(n + 64);
    assert_non_null(big);
    int off = snprintf(big, n + 64, "HTTP/1.1 200 OK\r\nX-Big: ");
    memset(big + off, 'a', n);
    memcpy(big + off + n, "\r\n\r\n", 5);
    sink_t k = {0};
    server_t s;
    run_case(&k, &s, 1, big, NULL, NULL);
    assert_int_equal(k.how, HTTP_CLIENT_DROPPED);
    assert_int_equal(k.heads, 0);
    free(big);
}

static void test_sink_refuses(void **state)
{
    (void)state;
    sink_t k = {.refuse_after = 3};
    server_t s;
    run_case(&k, &s, 2, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nabcd", "efgh", NULL);
    assert_int_equal(k.how, HTTP_CLIENT_SINK_FAILED);
}

static void test_connect_refused(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop, 0);
    int port = s.port;
    server_stop(&s); /* nothing listens there now */
    uv_run(&loop, UV_RUN_DEFAULT);
    sink_t k = {0};
    start_client(&loop, port, &k, NULL);
    run_until_end(&loop, &k);
    assert_int_equal(k.how, HTTP_CLIENT_CONNECT_FAILED);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_cancel(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    server_t s;
    server_start(&s, &loop, 0); /* never answers */
    sink_t k = {0};
    http_client_t *c = NULL;
    start_client(&loop, s.port, &k, &c);
    for (int i = 0; i < 2000 && !s.have_conn; i++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_true(s.have_conn);
    http_client_cancel(c);
    for (int i = 0; i < 2000 && s.client_closed == 0; i++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(s.client_closed, 1);
    assert_int_equal(k.ends, 0);
    finish_loop(&loop, &s);
    assert_int_equal(k.ends, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server may write to a client that already left */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_request),
        cmocka_unit_test(test_build_request_with_submitter),
        cmocka_unit_test(test_content_length_in_pieces),
        cmocka_unit_test(test_chunked_split),
        cmocka_unit_test(test_until_close_and_interim),
        cmocka_unit_test(test_dropped_mid_body),
        cmocka_unit_test(test_head_too_large),
        cmocka_unit_test(test_sink_refuses),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
