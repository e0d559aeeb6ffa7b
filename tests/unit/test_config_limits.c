/*
 * test_config_limits: limits.per_client and limits.memory_budget (src/config/top_keys.c,
 * defaults.c, check.c): defaults, each key form, bounds, and the budget against max_body.
 */
#include "config_test.h"

#include <stdio.h>

static void test_per_client(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_false(c->per_client.on);
    assert_int_equal(c->per_client.max_queued, 32);
    assert_int_equal(c->per_client.max_in_flight, 8);
    assert_int_equal(c->per_client.max_clients, 4096);
    assert_int_equal(c->memory_budget, 0);
    config_unref(c);
    c = parse_ok("limits: {per_client: {}}\nmodels: {a: {cmd: [x]}}\n");
    assert_true(c->per_client.on);
    assert_int_equal(c->per_client.key, 0);
    config_unref(c);
    c = parse_ok("limits: {per_client: {key: token, max_queued: 3, max_in_flight: 1, max_clients: 100}}\n"
                 "models: {a: {cmd: [x]}}\n");
    assert_true(c->per_client.on);
    assert_int_equal(c->per_client.key, 1);
    assert_int_equal(c->per_client.max_queued, 3);
    assert_int_equal(c->per_client.max_in_flight, 1);
    assert_int_equal(c->per_client.max_clients, 100);
    config_unref(c);
    c = parse_ok("limits: {per_client: {key: \"header:X-Client-Id\"}}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->per_client.key, 2);
    assert_string_equal(c->per_client.header, "X-Client-Id");
    config_unref(c);
    expect_error("limits: {per_client: {key: cookie}}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:28: limits.per_client.key: expected address, token or header:NAME (a header name like "
                 "X-Client-Id), got \"cookie\"");
    expect_error("limits: {per_client: {max_queued: 0}}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:35: limits.per_client.max_queued: expected an integer from 1 to 1000000, got \"0\"");
    expect_error("limits: {per_client: {max_clients: 2}}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:36: limits.per_client.max_clients: expected an integer from 16 to 1000000, got \"2\"");
}

static void test_memory_budget(void **state)
{
    (void)state;
    config_t *c = parse_ok("limits: {memory_budget: 8MiB, max_body: 4MiB}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->memory_budget, 8 * MiB);
    config_unref(c);
    c = parse_ok("limits: {memory_budget: auto}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->memory_budget, 0);
    config_unref(c);
    expect_error("limits: {memory_budget: 8MiB}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:25: limits.memory_budget: 8388608 bytes is less than limits.max_body (67108864): a "
                 "body of the largest size could never be read");
    expect_error("limits: {memory_budget: 1KiB}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:25: limits.memory_budget: must be at least 1048576 bytes, got \"1KiB\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_client),
        cmocka_unit_test(test_memory_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
