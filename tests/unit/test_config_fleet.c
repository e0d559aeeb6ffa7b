/* Unit tests for the fleet: section of the config (config/fleet_keys.c): agent_listen (off by
 * default, host:port like listen, never listen's own address), the agent's read bounds and
 * host_name (default: the machine's hostname; a label-safe name). */
#include <unistd.h>

#include "config_test.h"

#define MODELS "models: {a: {cmd: [x]}}\n"

static void test_fleet_defaults(void **state)
{
    (void)state;
    config_t *c = parse_ok(MODELS);
    assert_null(c->fleet.agent_host);
    assert_int_equal(c->fleet.agent_port, 0);
    assert_int_equal(c->fleet.agent_wait_ms, 100);
    assert_int_equal(c->fleet.agent_timeout_ms, 2000);
    assert_int_equal(c->fleet.agent_max_connections, 64);
    assert_non_null(c->fleet.host_name);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    size_t n = strlen(c->fleet.host_name);
    assert_true(n >= 1 && n <= 64);
    if (host[0] && strchr(host, '.') == NULL && strlen(host) <= 64)
        assert_string_equal(c->fleet.host_name, host);
    config_unref(c);
}

static void test_fleet_keys(void **state)
{
    (void)state;
    config_t *c = parse_ok("fleet: {agent_listen: 0.0.0.0:9800, agent_wait: 50ms, agent_timeout: 3s,\n"
                           "        agent_max_connections: 8, host_name: gpu-node-1}\n" MODELS);
    assert_string_equal(c->fleet.agent_host, "0.0.0.0");
    assert_int_equal(c->fleet.agent_port, 9800);
    assert_int_equal(c->fleet.agent_wait_ms, 50);
    assert_int_equal(c->fleet.agent_timeout_ms, 3000);
    assert_int_equal(c->fleet.agent_max_connections, 8);
    assert_string_equal(c->fleet.host_name, "gpu-node-1");
    config_unref(c);
    c = parse_ok("fleet: {agent_listen: localhost:9800}\n" MODELS);
    assert_string_equal(c->fleet.agent_host, "127.0.0.1");
    config_unref(c);
    c = parse_ok("fleet: {agent_listen: \"[::1]:9800\"}\n" MODELS);
    assert_string_equal(c->fleet.agent_host, "::1");
    config_unref(c);
    c = parse_ok("fleet: {agent_listen: off}\n" MODELS);
    assert_null(c->fleet.agent_host);
    config_unref(c);
}

static void test_fleet_errors(void **state)
{
    (void)state;
    expect_error("fleet: {agent_listen: 9800}\n" MODELS,
                 "test.yaml:1:23: fleet.agent_listen: expected host:port like 0.0.0.0:9800 or [::]:9800 (or off), got \"9800\"");
    expect_error("fleet: {agent_listen: gpu1:9800}\n" MODELS,
                 "test.yaml:1:23: fleet.agent_listen: the agent_listen host must be an IP address or localhost, "
                 "got \"gpu1:9800\"");
    expect_error("listen: 127.0.0.1:8800\nfleet: {agent_listen: 127.0.0.1:8800}\n" MODELS,
                 "test.yaml:2:23: fleet.agent_listen: 127.0.0.1:8800 is the address of listen; the agent needs a "
                 "port of its own");
    expect_error("fleet: {agent_wait: 3s}\n" MODELS,
                 "test.yaml:1:21: fleet.agent_wait: agent_wait (3000 ms) is longer than agent_timeout (2000 ms)");
    expect_error("fleet: {host_name: \"a b\"}\n" MODELS,
                 "test.yaml:1:20: fleet.host_name: expected 1 to 64 of A-Z a-z 0-9 . _ - (a host name), got \"a b\"");
    expect_error("fleet: {agent_max_connections: 0}\n" MODELS,
                 "test.yaml:1:32: fleet.agent_max_connections: expected an integer from 1 to 10000, got \"0\"");
    expect_error("fleet: {agent_lisen: 1.2.3.4:5}\n" MODELS,
                 "test.yaml:1:9: fleet.agent_lisen: unknown key \"agent_lisen\" (did you mean \"agent_listen\"?)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_defaults),
        cmocka_unit_test(test_fleet_keys),
        cmocka_unit_test(test_fleet_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
