/*
 * test_request_head: the decision on a request's head, before its body is read (Expect:
 * 100-continue; net/conn.h, serve/api.h api_on_head, path/router.h router_head_refused,
 * path/dispatch.h dispatch_head_refused), in one process against the fake upstream of
 * tests/unit/path_fixture.h. Each refused client announces an 8 MiB body and sends none: it
 * gets the final answer dispatch_admit would give (queue_full, client_limit, bad_request,
 * draining, unknown_model), no "100 Continue", Connection: close, and the connection closes;
 * nothing of the memory budget is charged, nothing is queued, and the refusal counts in its
 * model's outcomes. A head that passes gets 100 Continue and, once the body is sent, its
 * answer; vramd's own routes (POST /healthz) are never refused as unknown.
 * Every test ends with path_after_test: nothing queued, in flight or left unfreed.
 */
#include "path_fixture.h"

#include "core/mem_budget.h"

static const char CONFIG[] = "limits:\n"
                             "  max_body: 16MiB\n"
                             "  per_client: { key: 'header:X-Client-Id', max_queued: 1 }\n"
                             "models:\n"
                             "  full: { route: /full/, concurrency: 1, queue_max: 1 }\n"
                             "  capped: { route: /capped/, concurrency: 1, queue_max: 8 }\n"
                             "  ok: { route: /ok/, aliases: [ok-alias] }\n";

#define EIGHT_MIB "8388608"

static int group_setup(void **state)
{
    (void)state;
    return path_group_setup(CONFIG);
}

static uint64_t outcome_count(const model_t *m, const char *name)
{
    for (unsigned i = 0; i < m->n_outcomes; i++)
        if (strcmp(m->outcomes[i].name, name) == 0)
            return m->outcomes[i].n;
    return 0;
}

/* Client i sends an Expect head announcing 8 MiB (extra: more header lines) and no body. */
static client_t *expect_head(int i, const char *method_path, const char *extra)
{
    return client_send(i, "%s HTTP/1.1\r\nHost: t\r\nContent-Length: " EIGHT_MIB "\r\nExpect: 100-continue\r\n%s\r\n",
                       method_path, extra);
}

/* The client was answered `status` `code` on its head: no 100, Connection: close, closed by
 * vramd within a second (its body_timeout is 60 s: the body was not awaited). */
static void assert_refused_on_head(client_t *cl, int status, const char *code)
{
    RUN_UNTIL(cl->closed);
    assert_error(cl, status, code);
    if (strstr(cl->resp, "100 Continue"))
        fail_msg("a 100 Continue came before the refusal:\n%s", cl->resp);
    assert_string_equal(resp_header(cl, "Connection"), "close");
    assert_int_equal(cl->end, UV_EOF);
    assert_true(cl->t_end - cl->t_start < 1000);
}

/* Client c_hold runs a request on `route` (held by the fake), client c_queue queues one. */
static void fill(const char *route, int c_hold, int c_queue, const char *client_hdr)
{
    fake_script(2, A_HOLD, A_LENGTH);
    client_send(c_hold, "GET /%s/a HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n", route, client_hdr);
    RUN_UNTIL(F.held == 1);
    client_send(c_queue, "GET /%s/b HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n", route, client_hdr);
    RUN_UNTIL(core_queued_total(&D.core) == 1);
}

static void release_and_finish(int c_hold, int c_queue)
{
    fake_release();
    RUN_UNTIL(C[c_hold].closed && C[c_queue].closed);
    assert_int_equal(resp_status(&C[c_hold]), 200);
    assert_int_equal(resp_status(&C[c_queue]), 200);
}

static void test_queue_full(void **state)
{
    (void)state;
    fill("full", 0, 1, "");
    size_t budget_used = mem_budget()->used;
    client_t *cl = expect_head(2, "POST /full/upload", "X-Client-Id: other\r\n");
    assert_refused_on_head(cl, 503, "queue_full");
    assert_non_null(strstr(resp_body(cl), "\"model\":\"full\""));
    assert_string_equal(resp_header(cl, "Retry-After"), "2");
    assert_int_equal(mem_budget()->used, budget_used); /* no 8 MiB reserved for it */
    assert_int_equal(core_queued_total(&D.core), 1);
    assert_int_equal(outcome_count(path_model("full"), "queue_full"), 1);
    release_and_finish(0, 1);
}

static void test_client_cap(void **state)
{
    (void)state;
    fill("capped", 0, 1, "X-Client-Id: alice\r\n");
    client_t *cl = expect_head(2, "POST /capped/upload", "X-Client-Id: alice\r\n");
    assert_refused_on_head(cl, 429, "client_limit");
    assert_non_null(strstr(resp_body(cl), "max_queued"));
    /* another client passes the same head: 100 Continue, then it closes without a body */
    client_t *bob = expect_head(3, "POST /capped/upload", "X-Client-Id: bob\r\n");
    RUN_UNTIL(strstr(bob->resp, "\r\n\r\n") != NULL);
    assert_string_equal(bob->resp, "HTTP/1.1 100 Continue\r\n\r\n");
    client_hangup(bob);
    release_and_finish(0, 1);
}

static void test_bad_priority_header(void **state)
{
    (void)state;
    client_t *cl = expect_head(0, "POST /ok/x", "X-Vramd-Priority: high\r\n");
    assert_refused_on_head(cl, 400, "bad_request");
    assert_non_null(strstr(resp_body(cl), "X-Vramd-Priority"));
}

static void test_unknown_route(void **state)
{
    (void)state;
    client_t *cl = expect_head(0, "PUT /nowhere/x", "");
    assert_refused_on_head(cl, 404, "unknown_model");
    assert_non_null(strstr(resp_body(cl), "no model serves /nowhere/x"));
}

static void test_draining(void **state)
{
    (void)state;
    D.core.draining = true;
    assert_refused_on_head(expect_head(0, "POST /ok/x", ""), 503, "draining");
    /* a model named in the body is not known yet, but draining refuses every model */
    client_t *cl = expect_head(1, "POST /v1/chat/completions", "");
    assert_refused_on_head(cl, 503, "draining");
    assert_null(strstr(resp_body(cl), "\"model\""));
    D.core.draining = false;
}

/* Write more bytes on client cl (after its request). */
static void client_write_more(client_t *cl, const char *data)
{
    static uv_write_t wr;
    static char buf[256];
    snprintf(buf, sizeof buf, "%s", data);
    uv_buf_t b = uv_buf_init(buf, (unsigned)strlen(buf));
    assert_int_equal(uv_write(&wr, (uv_stream_t *)&cl->tcp, &b, 1, client_written), 0);
}

static void test_admitted_head_gets_100_then_its_answer(void **state)
{
    (void)state;
    client_t *cl = client_send(0, "POST /ok/x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
                                  "Connection: close\r\n\r\n");
    RUN_UNTIL(strstr(cl->resp, "\r\n\r\n") != NULL);
    assert_string_equal(cl->resp, "HTTP/1.1 100 Continue\r\n\r\n");
    assert_int_equal(F.requests, 0);
    client_write_more(cl, "hello");
    RUN_UNTIL(cl->closed);
    assert_true(strncmp(cl->resp, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ", 38) == 0);
    assert_non_null(strstr(cl->resp, "\r\n\r\nhello world"));
    assert_int_equal(F.requests, 1);
    assert_non_null(strstr(F.last_req, "\r\n\r\nhello"));
    assert_null(strstr(F.last_req, "Expect:"));
}

/* A model named in the body: the head passes (100), the body decides. */
static void test_model_in_body_decided_after_the_body(void **state)
{
    (void)state;
    static const char body[] = "{\"model\":\"ok-alias\"}";
    client_t *cl = client_send(0, "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n"
                                  "Expect: 100-continue\r\nConnection: close\r\n\r\n", sizeof body - 1);
    RUN_UNTIL(strstr(cl->resp, "\r\n\r\n") != NULL);
    assert_string_equal(cl->resp, "HTTP/1.1 100 Continue\r\n\r\n");
    client_write_more(cl, body);
    RUN_UNTIL(cl->closed);
    assert_non_null(strstr(cl->resp, "\r\n\r\nHTTP/1.1 200 "));
    assert_int_equal(F.requests, 1);
}

/* vramd's own routes are not the router's: POST /healthz with Expect is not 404. */
static void test_own_route_not_refused(void **state)
{
    (void)state;
    client_t *cl = client_send(0, "POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n"
                                  "Connection: close\r\n\r\n");
    RUN_UNTIL(strstr(cl->resp, "\r\n\r\n") != NULL);
    assert_string_equal(cl->resp, "HTTP/1.1 100 Continue\r\n\r\n");
    client_write_more(cl, "{}");
    RUN_UNTIL(cl->closed);
    assert_non_null(strstr(cl->resp, "\r\n\r\nHTTP/1.1 200 "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        PATH_TEST(test_queue_full),
        PATH_TEST(test_client_cap),
        PATH_TEST(test_bad_priority_header),
        PATH_TEST(test_unknown_route),
        PATH_TEST(test_draining),
        PATH_TEST(test_admitted_head_gets_100_then_its_answer),
        PATH_TEST(test_model_in_body_decided_after_the_body),
        PATH_TEST(test_own_route_not_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, path_group_teardown);
}
