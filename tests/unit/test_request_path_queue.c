/*
 * test_request_path_queue: the request path's queue and verdict in one process, against a
 * fake upstream worker and libuv clients in the same loop (tests/unit/path_fixture.h):
 * 503 queue_full while the only slot is busy and the queue holds queue_max, 504
 * deadline_exceeded for a request whose X-Vramd-Deadline passes in the queue, clients that
 * leave while queued or while their request runs (the slot and the queue place are given
 * back, the upstream connection closed), and a validated model (`validate: json`): an
 * invalid answer is retried once, a second one is 502 invalid_output; a valid retry is
 * delivered with X-Vramd-Attempts: 2.
 * Every test ends with path_after_test: nothing queued, in flight or left unfreed.
 */
#include "path_fixture.h"

/* One model per test that holds a slot: a model's learned run time (from a held request)
 * would change the next test's deadline prediction. */
static const char MODELS[] = "models:\n"
                             "  qfull: { route: /qfull/, concurrency: 1, queue_max: 1 }\n"
                             "  dline: { route: /dline/, concurrency: 1 }\n"
                             "  gone: { route: /gone/, concurrency: 1 }\n"
                             "  checked: { route: /checked/, validate: json }\n";

static int group_setup(void **state)
{
    (void)state;
    return path_group_setup(MODELS);
}

static uint64_t outcome_count(const model_t *m, const char *name)
{
    for (unsigned i = 0; i < m->n_outcomes; i++)
        if (strcmp(m->outcomes[i].name, name) == 0)
            return m->outcomes[i].n;
    return 0;
}

/* Client 0's request to model `route` is running on the fake (held there). */
static void hold_the_slot(const char *route)
{
    fake_script(2, A_HOLD, A_LENGTH);
    client_send(0, "GET /%s/first HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", route);
    RUN_UNTIL(F.held == 1);
    assert_int_equal(core_in_flight_total(&D.core), 1);
}

static void test_queue_full_while_slot_busy(void **state)
{
    (void)state;
    hold_the_slot("qfull");
    client_t *queued = client_send(1, "GET /qfull/second HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    RUN_UNTIL(core_queued_total(&D.core) == 1);
    client_t *refused = client_send(2, "GET /qfull/third HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    RUN_UNTIL(refused->closed);
    assert_error(refused, 503, "queue_full");
    assert_non_null(strstr(resp_body(refused), "\"model\":\"qfull\""));
    assert_string_equal(resp_header(refused, "Retry-After"), "2"); /* 1 queued / 1 slot + 1 */
    assert_false(queued->closed);
    /* the slot frees: the first is answered, then the queued one runs */
    fake_release();
    RUN_UNTIL(C[0].closed && queued->closed);
    assert_int_equal(resp_status(&C[0]), 200);
    assert_int_equal(resp_status(queued), 200);
    assert_string_equal(resp_body(queued), "hello world");
    assert_int_equal(header_number(queued, "X-Vramd-Attempts"), 1);
    assert_true(header_number(queued, "X-Vramd-Queue-Ms") >= header_number(&C[0], "X-Vramd-Queue-Ms"));
    assert_int_equal(F.requests, 2);
    assert_true(strncmp(F.last_req, "GET /second HTTP/1.1\r\n", 22) == 0);
    assert_int_equal(outcome_count(path_model("qfull"), "queue_full"), 1);
}

static void test_deadline_in_queue(void **state)
{
    (void)state;
    hold_the_slot("dline");
    client_t *late = client_send(1, "GET /dline/second HTTP/1.1\r\nHost: t\r\nX-Vramd-Deadline: 50ms\r\n"
                                    "Connection: close\r\n\r\n");
    RUN_UNTIL(late->closed);
    assert_error(late, 504, "deadline_exceeded");
    assert_non_null(strstr(resp_body(late), "\"model\":\"dline\""));
    uint64_t waited = late->t_end - late->t_start;
    if (waited < 50 || waited > 2000)
        fail_msg("504 after %llu ms, wanted 50 ms and a little", (unsigned long long)waited);
    assert_int_equal(core_queued_total(&D.core), 0);
    assert_int_equal(core_in_flight_total(&D.core), 1); /* the first still runs */
    fake_release();
    RUN_UNTIL(C[0].closed);
    assert_int_equal(resp_status(&C[0]), 200);
    assert_int_equal(F.requests, 1); /* the late one never reached the worker */
    assert_int_equal(outcome_count(path_model("dline"), "deadline_exceeded"), 1);
}

static void test_bad_deadline_header(void **state)
{
    (void)state;
    client_t *cl = client_call(0, "GET /dline/x HTTP/1.1\r\nHost: t\r\nX-Vramd-Deadline: soon\r\n"
                                  "Connection: close\r\n\r\n");
    assert_error(cl, 400, "bad_request");
    assert_int_equal(F.requests, 0);
}

static void test_client_leaves_while_queued_and_running(void **state)
{
    (void)state;
    model_t *m = path_model("gone");
    hold_the_slot("gone");
    client_t *queued = client_send(1, "GET /gone/second HTTP/1.1\r\nHost: t\r\n\r\n");
    RUN_UNTIL(core_queued_total(&D.core) == 1);
    /* the queued one leaves: out of the queue */
    client_hangup(queued);
    RUN_UNTIL(core_queued_total(&D.core) == 0 && D.core.n_conns == 1);
    assert_int_equal(core_in_flight_total(&D.core), 1);
    /* the running one leaves: the slot comes back and the upstream connection is closed */
    client_hangup(&C[0]);
    RUN_UNTIL(core_in_flight_total(&D.core) == 0 && F.open == 0);
    assert_int_equal(F.held, 0);
    assert_int_equal(F.requests, 1);
    assert_int_equal(outcome_count(m, "cancelled"), 2);
    /* the model still works */
    client_t *cl = client_call(2, "GET /gone/again HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
}

/* ---- the verdict ---------------------------------------------------------------------- */

static void test_invalid_output_twice(void **state)
{
    (void)state;
    model_t *m = path_model("checked");
    uint64_t invalid_before = m->invalid_total;
    fake_script(1, A_BAD_JSON);
    client_t *cl = client_call(0, "GET /checked/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 502, "invalid_output");
    assert_non_null(strstr(resp_body(cl), "\"model\":\"checked\""));
    assert_non_null(strstr(resp_body(cl), "after 2 attempts"));
    assert_int_equal(F.requests, 2); /* one retry, no more */
    assert_int_equal(m->invalid_total, invalid_before + 2);
    assert_int_equal(outcome_count(m, "invalid_output"), 1);
}

static void test_invalid_then_valid_output(void **state)
{
    (void)state;
    fake_script(2, A_BAD_JSON, A_JSON);
    client_t *cl = client_call(0, "GET /checked/x HTTP/1.1\r\nHost: t\r\nX-Request-Id: judged-1\r\n"
                                  "Connection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 200);
    assert_string_equal(resp_body(cl), "{\"ok\":true}");
    assert_string_equal(resp_header(cl, "Content-Length"), "11");
    assert_string_equal(resp_header(cl, "Content-Type"), "application/json");
    assert_string_equal(resp_header(cl, "X-Request-Id"), "judged-1");
    assert_int_equal(header_number(cl, "X-Vramd-Attempts"), 2);
    header_number(cl, "X-Vramd-Queue-Ms");
    header_number(cl, "X-Vramd-Run-Ms");
    assert_int_equal(F.requests, 2);
    assert_true(strncmp(F.last_req, "GET /x HTTP/1.1\r\n", 17) == 0);
}

/* A held (validated) answer that is not 2xx is delivered as it is, without a retry. */
static void test_validated_model_passes_errors_on(void **state)
{
    (void)state;
    fake_script(1, A_500);
    client_t *cl = client_call(0, "GET /checked/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(resp_status(cl), 500);
    assert_string_equal(resp_body(cl), "oops");
    assert_int_equal(header_number(cl, "X-Vramd-Attempts"), 1);
    assert_int_equal(F.requests, 1);
}

/* A held answer whose worker closes halfway: nothing was sent yet, so 502. */
static void test_validated_model_upstream_cut(void **state)
{
    (void)state;
    fake_script(1, A_CLOSE_MID_BODY);
    client_t *cl = client_call(0, "GET /checked/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_error(cl, 502, "worker_failed");
    assert_int_equal(F.requests, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        PATH_TEST(test_queue_full_while_slot_busy),
        PATH_TEST(test_deadline_in_queue),
        PATH_TEST(test_bad_deadline_header),
        PATH_TEST(test_client_leaves_while_queued_and_running),
        PATH_TEST(test_invalid_output_twice),
        PATH_TEST(test_invalid_then_valid_output),
        PATH_TEST(test_validated_model_passes_errors_on),
        PATH_TEST(test_validated_model_upstream_cut),
    };
    return cmocka_run_group_tests(tests, group_setup, path_group_teardown);
}
