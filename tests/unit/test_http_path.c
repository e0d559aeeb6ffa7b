/*
 * test_http_path: unit tests for the dot-segment check (src/http/http_path.c): the paths
 * vramd refuses (a "." or ".." segment, literal or percent-encoded, between '/', '\', %2f or
 * %5c) and the ones it passes (dots inside a name, three dots, dots in the query), each
 * also checked with a prefix and a query around it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "http/http_path.h"

static bool dotted(const char *s) { return http_path_has_dot_segment(s, strlen(s)); }

static const char *const refused[] = {
    "/..",          "/.",           "/../",         "/./",           "/w/../v1/admin/drain",
    "/w/./x",       "/w/..",        "/w/.",         "/w/..?x=1",     "/w/.#frag",
    "/w/%2e%2e/x",  "/w/%2E%2E/x",  "/w/.%2e/x",    "/w/%2e./x",     "/w/%2e/x",
    "/w/..%2fx",    "/w/..%2Fx",    "/w/%2e%2e%2fx", "/w/..\\x",     "/w\\..\\x",
    "/w/..%5cx",    "/w/..%5Cx",    "/w//../x",     "/a/b/c/../../../../etc/passwd",
};

static const char *const passed[] = {
    "/",           "/w/",         "/w/x",        "/w/..x",       "/w/x..",       "/w/.x",
    "/w/x.",       "/w/...",      "/w/....",     "/w/%2e%2e%2e", "/w/.%2e.",     "/w/a.b.c",
    "/w/%2ex",     "/w/x?p=/../", "/w/x?../..",  "/w/x#/../",    "/w/%2",        "/w/%2e%2",
    "/w/%",        "/w/.%",       "/w/%25%2e",   "/v1/chat/completions",
};

static void test_refused(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (!dotted(refused[i]))
            fail_msg("not refused: %s", refused[i]);
        char longer[256];
        snprintf(longer, sizeof longer, "/prefix%s?q=1", refused[i]);
        if (!dotted(longer))
            fail_msg("not refused: %s", longer);
    }
}

static void test_passed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++) {
        if (dotted(passed[i]))
            fail_msg("refused: %s", passed[i]);
        char longer[256];
        snprintf(longer, sizeof longer, "/prefix%s", passed[i]);
        if (strchr(passed[i], '?') == NULL && strchr(passed[i], '#') == NULL && dotted(longer))
            fail_msg("refused: %s", longer);
    }
}

/* Only len bytes are read: a dot segment past them does not count, one cut short does. */
static void test_length_bounds(void **state)
{
    (void)state;
    const char *s = "/w/x/../y";
    assert_false(http_path_has_dot_segment(s, 4)); /* "/w/x" */
    assert_true(http_path_has_dot_segment(s, 7));  /* "/w/x/.." */
    assert_true(http_path_has_dot_segment(s, 6));  /* "/w/x/.": the second dot cut, "." is a segment */
    assert_false(http_path_has_dot_segment("", 0));
    assert_true(http_path_has_dot_segment("/%2e%2e", 7));
    assert_false(http_path_has_dot_segment("/%2e%2e", 6)); /* "/%2e%2": the second is no dot */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_passed),
        cmocka_unit_test(test_length_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
