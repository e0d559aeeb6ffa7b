/*
 * test_http_auth: the Host allow-list (http_host_allowed, src/http/http_auth.c): the Host
 * values a DNS-rebinding page could send are refused, IP literals, localhost and names under
 * .localhost pass with or without a port, listed names and "*.domain" entries pass, and a
 * request with no Host passes (not a browser's). Each value is parsed as a real request head.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "http/http_auth.h"

static char *const listed[] = {"gpu-box.example", "*.lan.example"};

/* host NULL: a head without Host (HTTP/1.0). */
static bool allowed(const char *host, char *const *names, size_t n)
{
    char head[512];
    if (host)
        snprintf(head, sizeof head, "GET /v1/status HTTP/1.1\r\nHost: %s\r\n\r\n", host);
    else
        snprintf(head, sizeof head, "GET /v1/status HTTP/1.0\r\n\r\n");
    const http1_limits_t limits = {1024, 16};
    http1_msg_t msg;
    http1_header_t hdrs[16];
    size_t scan = 0;
    http1_error_t err;
    if (http1_parse_request(head, strlen(head), &limits, &msg, hdrs, &scan, &err) <= 0)
        fail_msg("head not parsed: %s", head);
    return http_host_allowed(head, &msg, names, n);
}

static void test_rebinding_names_refused(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "rebind.evil.example", "rebind.evil.example:8800", "rebind.evil.example.", "localhostx",
        "localhost.evil.example", "evil-localhost", "x", "::1", "127.0.0.1.evil.example", "lan.example",
        "gpu-box.example.evil", "xgpu-box.example", "[not-an-ip]", "1.2.3", "[::1", "gpu-box.example:80:80",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (allowed(refused[i], listed, 2))
            fail_msg("allowed: %s", refused[i]);
}

static void test_loopback_names_and_ip_literals_allowed(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "localhost", "localhost:8800", "LOCALHOST", "localhost.", "app.localhost", "a.b.localhost:1",
        "127.0.0.1", "127.0.0.1:8800", "10.1.2.3", "[::1]", "[::1]:8800", "[2001:db8::1]:80", "", ":8800",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!allowed(ok[i], NULL, 0))
            fail_msg("refused: %s", ok[i]);
    assert_true(allowed(NULL, NULL, 0));
}

static void test_listed_names(void **state)
{
    (void)state;
    assert_true(allowed("gpu-box.example", listed, 2));
    assert_true(allowed("GPU-Box.Example:8800", listed, 2));
    assert_true(allowed("gpu-box.example.", listed, 2));
    assert_true(allowed("a.lan.example", listed, 2));
    assert_true(allowed("b.a.lan.example:1", listed, 2));
    assert_false(allowed("gpu-box.example", NULL, 0));
    assert_false(allowed("a.lan.example", listed, 1)); /* only the first entry */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebinding_names_refused),
        cmocka_unit_test(test_loopback_names_and_ip_literals_allowed),
        cmocka_unit_test(test_listed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
