/*
 * test_request_path: the request path router -> dispatch -> proxy in one process, against
 * a fake upstream worker and libuv clients in the same loop (tests/unit/path_fixture.h):
 * routing by path prefix (prefix stripped, X-Request-Id and X-Forwarded-For added, the
 * client's hop-by-hop headers dropped, vramd's X-Vramd-* headers on the answer), routing by
 * the JSON "model" field, 404 unknown_model, upstream answers with Content-Length, chunked
 * (re-chunked to the client), split over several writes, pooled keep-alive connections,
 * and the upstream failing: closed before the head (502 worker_failed), closed in the middle
 * of the body (the client's connection is cut), a malformed head (502), a 500 (passed on).
 * Queues, deadlines, cancellation and the verdict are in test_request_path_queue.c.
 * Every test ends with path_after_test: nothing queued, in flight or left unfreed.
 */
#include "path_fixture.h"

static const char MODELS[] = "models:\n"
                             "  echo: { route: /echo/, aliases: [echo-alias] }\n"
                             "  flaky: { route: /flaky/ }\n"
                             "  pooled: { route: /pooled/ }\n";

static int group_setup(void **state)
{
    (void)state;
    return path_group_setup(MODELS);
}

/* The request the fake upstream got last has this text. */
static void assert_upstream_has(const char *s)
{
    if (!strstr(F.last_req, s))
        fail_msg("upstream request lacks \"%s\":\n%s", s, F.last_req);
}

/* vramd's headers on a worker's answer. */
static void assert_vramd_headers(const client_t *cl, unsigned long attempts)
{
    header_number(cl, "X-Vramd-Queue-Ms");
    header_number(cl, "X-Vramd-Run-Ms");
    assert_int_equal(header_number(cl, "X-Vramd-Attempts"), attempts);
    assert_non_null(resp_header(cl, "X-Request-Id"));
    assert_null(resp_header(cl, "X-Vramd-Gpu")); /* no GPU was used */
}

/* ---- routing -------------------------------------------------------------------------- */

static void test_route_by_prefix_strips_and_adds_headers(void **state)
{
    (void)state;
    client_t *cl = client_call(0, "GET /echo/hello?x=1 HTTP/1.1\r\nHost: t\r\nX-Client: yes\r\n"
                                  "Connection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_body(cl), "hello world");
    assert_string_equal(resp_header(cl, "X-Worker"), "fake");
    assert_string_equal(resp_header(cl, "Content-Length"), "11");
    assert_string_equal(resp_header(cl, "Connection"), "close");
    assert_vramd_headers(cl, 1);
    /* the upstream saw the path without the prefix, vramd's headers, none of the client's
     * hop-by-hop ones */
    assert_int_equal(F.requests, 1);
    assert_true(strncmp(F.last_req, "GET /hello?x=1 HTTP/1.1\r\n", 25) == 0);
    assert_upstream_has("\r\nHost: t\r\n");
    assert_upstream_has("\r\nX-Client: yes\r\n");
    assert_upstream_has("\r\nX-Forwarded-For: 127.0.0.1\r\n");
    assert_upstream_has("\r\nConnection: keep-alive\r\n");
    assert_null(strstr(F.last_req, "Connection: close"));
    char id[128];
    assert_true(head_value(F.last_req, "X-Request-Id", id, sizeof id));
    assert_string_equal(id, resp_header(cl, "X-Request-Id"));
}

static void test_route_prefix_alone_keeps_client_request_id(void **state)
{
    (void)state;
    client_t *cl = client_call(0, "GET /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: client-id-42\r\n"
                                  "Connection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_true(strncmp(F.last_req, "GET / HTTP/1.1\r\n", 16) == 0);
    assert_upstream_has("\r\nX-Request-Id: client-id-42\r\n");
    assert_string_equal(resp_header(cl, "X-Request-Id"), "client-id-42");
    /* a path that only starts like the route is not the route */
    cl = client_call(1, "GET /echoes HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 404, "unknown_model");
    assert_int_equal(F.requests, 1);
}

static void test_route_by_model_field(void **state)
{
    (void)state;
    fake_script(1, A_JSON);
    uint64_t before = path_model("echo")->requests_total;
    static const char body[] = "{\"model\":\"echo-alias\",\"prompt\":\"hi\"}";
    client_t *cl = client_call(0, "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                                  "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", sizeof body - 1, body);
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_body(cl), "{\"ok\":true}");
    assert_vramd_headers(cl, 1);
    /* not stripped (no route matched), body forwarded whole with its length */
    assert_true(strncmp(F.last_req, "POST /v1/chat/completions HTTP/1.1\r\n", 36) == 0);
    char want[64];
    snprintf(want, sizeof want, "\r\nContent-Length: %zu\r\n", sizeof body - 1);
    assert_upstream_has(want);
    assert_string_equal(strstr(F.last_req, "\r\n\r\n") + 4, body);
    assert_int_equal(path_model("echo")->requests_total, before + 1); /* the alias's model */
}

static void test_unknown_model(void **state)
{
    (void)state;
    client_t *cl = client_call(0, "GET /nowhere/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 404, "unknown_model");
    static const char body[] = "{\"model\":\"nope\"}";
    cl = client_call(1, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n%s", sizeof body - 1, body);
    assert_error(cl, 404, "unknown_model");
    assert_non_null(strstr(resp_body(cl), "\"model\":\"nope\""));
    assert_non_null(resp_header(cl, "X-Request-Id"));
    cl = client_call(2, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                        "Connection: close\r\n\r\n{bad}");
    assert_error(cl, 400, "bad_request");
    assert_int_equal(F.requests, 0);
}

/* ---- answers -------------------------------------------------------------------------- */

static void test_chunked_answer_rechunked(void **state)
{
    (void)state;
    fake_script(1, A_CHUNKED);
    client_t *cl = client_call(0, "GET /echo/c HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_header(cl, "Transfer-Encoding"), "chunked");
    assert_null(resp_header(cl, "Content-Length"));
    assert_vramd_headers(cl, 1);
    char body[256];
    if (!dechunk(resp_body(cl), body, sizeof body))
        fail_msg("not a chunked body:\n%s", resp_body(cl));
    assert_string_equal(body, "hello world");
}

static void test_chunked_answer_to_http10_client(void **state)
{
    (void)state;
    fake_script(1, A_CHUNKED);
    /* HTTP/1.0 cannot take chunks: the body is close-delimited */
    client_t *cl = client_call(0, "GET /echo/c HTTP/1.0\r\nHost: t\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_null(resp_header(cl, "Transfer-Encoding"));
    assert_null(resp_header(cl, "Content-Length"));
    assert_string_equal(resp_body(cl), "hello world");
    assert_int_equal(cl->end, UV_EOF);
}

static void test_answer_split_over_writes(void **state)
{
    (void)state;
    fake_script(1, A_SPLIT);
    client_t *cl = client_call(0, "GET /echo/s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_header(cl, "Content-Length"), "11");
    assert_string_equal(resp_body(cl), "hello world");
    assert_vramd_headers(cl, 1);
}

static void test_chunked_answer_split_over_writes(void **state)
{
    (void)state;
    fake_script(1, A_SPLIT_CHUNKED);
    client_t *cl = client_call(0, "GET /echo/s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    char body[256];
    if (!dechunk(resp_body(cl), body, sizeof body))
        fail_msg("not a chunked body:\n%s", resp_body(cl));
    assert_string_equal(body, "hello world");
}

static void test_keep_alive_upstream_is_pooled(void **state)
{
    (void)state;
    fake_script(2, A_KEEP_ALIVE, A_LENGTH);
    client_t *cl = client_call(0, "GET /pooled/1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_string_equal(resp_body(cl), "ka");
    instance_t *inst = list_entry(list_first(&path_model("pooled")->instances), instance_t, link);
    assert_int_equal(inst->path.pool_size, 1);
    cl = client_call(1, "GET /pooled/2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_string_equal(resp_body(cl), "hello world");
    assert_int_equal(F.requests, 2);
    assert_int_equal(F.reused, 1); /* the second request came on the first one's connection */
    assert_int_equal(inst->path.pool_size, 0); /* "Connection: close" from the worker: not pooled */
}

/* ---- the upstream failing ------------------------------------------------------------- */

static void test_upstream_closes_before_head(void **state)
{
    (void)state;
    fake_script(1, A_CLOSE_EARLY);
    client_t *cl = client_call(0, "GET /flaky/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 502, "worker_failed");
    assert_non_null(strstr(resp_body(cl), "\"model\":\"flaky\""));
    assert_non_null(strstr(resp_body(cl), "worker closed the connection"));
    assert_int_equal(F.requests, 1); /* a fresh connection is not retried */
}

static void test_upstream_closes_mid_body_cuts_client(void **state)
{
    (void)state;
    fake_script(1, A_CLOSE_MID_BODY);
    /* keep-alive: only a cut closes this connection */
    client_t *cl = client_send(0, "GET /flaky/x HTTP/1.1\r\nHost: t\r\n\r\n");
    RUN_UNTIL(cl->closed);
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_header(cl, "Content-Length"), "100");
    assert_string_equal(resp_body(cl), "partial"); /* 7 of 100 bytes, then the cut */
    assert_true(cl->end == UV_EOF || cl->end == UV_ECONNRESET);
}

static void test_upstream_malformed_head(void **state)
{
    (void)state;
    fake_script(1, A_MALFORMED);
    client_t *cl = client_call(0, "GET /flaky/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 502, "worker_failed");
    assert_non_null(strstr(resp_body(cl), "malformed response"));
}

static void test_upstream_500_passed_on(void **state)
{
    (void)state;
    fake_script(1, A_500);
    client_t *cl = client_call(0, "GET /flaky/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 500);
    assert_string_equal(resp_body(cl), "oops");
    assert_vramd_headers(cl, 1);
    assert_false(path_model("flaky")->failed); /* one 5xx is not a failed model */
}

/* A keep-alive client: two requests on one connection, answered in order. */
static void test_two_requests_on_one_client_connection(void **state)
{
    (void)state;
    client_t *cl = client_send(0, "GET /echo/1 HTTP/1.1\r\nHost: t\r\n\r\n"
                                  "GET /echo/2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    RUN_UNTIL(cl->closed);
    assert_int_equal(F.requests, 2);
    assert_true(strncmp(F.last_req, "GET /2 HTTP/1.1\r\n", 17) == 0);
    const char *second = strstr(resp_body(cl), "HTTP/1.1 200 ");
    assert_non_null(second);
    assert_string_equal(strstr(second, "\r\n\r\n") + 4, "hello world");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        PATH_TEST(test_route_by_prefix_strips_and_adds_headers),
        PATH_TEST(test_route_prefix_alone_keeps_client_request_id),
        PATH_TEST(test_route_by_model_field),
        PATH_TEST(test_unknown_model),
        PATH_TEST(test_chunked_answer_rechunked),
        PATH_TEST(test_chunked_answer_to_http10_client),
        PATH_TEST(test_answer_split_over_writes),
        PATH_TEST(test_chunked_answer_split_over_writes),
        PATH_TEST(test_keep_alive_upstream_is_pooled),
        PATH_TEST(test_upstream_closes_before_head),
        PATH_TEST(test_upstream_closes_mid_body_cuts_client),
        PATH_TEST(test_upstream_malformed_head),
        PATH_TEST(test_upstream_500_passed_on),
        PATH_TEST(test_two_requests_on_one_client_connection),
    };
    return cmocka_run_group_tests(tests, group_setup, path_group_teardown);
}
