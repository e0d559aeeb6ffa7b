/*
 * test_route_table: the matcher of vramd's route table (serve/route_table.h) on a table of
 * its own, and the texts made from rows.
 * Covers literal paths (exact bytes: no trailing slash, no case folding, no prefix), '*'
 * (one segment, possibly empty, never across '/'), a last "**" (the rest, possibly empty),
 * arg_ok refusing a segment (the row does not match, a later pattern may), the first
 * matching pattern deciding the path (rows sharing it are its methods; a method none takes
 * leaves row NULL with the methods allowed), percent-encoded and odd bytes taken as they
 * are, a 1 MiB path, method names (case-sensitive, others API_OTHER), and the method and
 * reserve texts (cut at the buffer, always terminated).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "serve/route_table.h"

static void handler_a(conn_t *c, request_t *r, const route_args_t *a)
{
    (void)c, (void)r, (void)a;
}

static void handler_b(conn_t *c, request_t *r, const route_args_t *a)
{
    (void)c, (void)r, (void)a;
}

static bool digits_only(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static const api_route_t rows_one[] = {
    {API_ANY, "/healthz", handler_a, API_PUBLIC, .reserve = true},
    {API_GET | API_HEAD, "/", handler_a, API_PUBLIC, .reserve = false},
    {API_GET | API_HEAD, "/m/*/ready", handler_a, API_PUBLIC, .reserve = false},
    {API_POST, "/m/*/load", handler_b, API_ADMIN, .reserve = true},
    {API_POST, "/m/*/*/pair", handler_b, API_ADMIN, .reserve = false},
    {0},
};

static const api_route_t rows_two[] = {
    {API_POST, "/j", handler_a, API_PUBLIC, .own_path = true},
    {API_GET | API_HEAD, "/j", handler_b, API_ADMIN, .own_path = true},
    {API_GET | API_HEAD, "/j/*", handler_a, API_PUBLIC, .own_path = true, .arg_ok = digits_only},
    {API_DELETE, "/j/*", handler_b, API_PUBLIC, .own_path = true, .arg_ok = digits_only},
    {API_ANY, "/j/**", handler_b, API_PUBLIC, .own_path = true},
    {0},
};

static const api_route_t *const tables[] = {rows_one, rows_two, NULL};

static route_match_t find_n(unsigned method, const char *path, size_t len)
{
    route_match_t m;
    memset(&m, 0xa5, sizeof m); /* route_find must set every field */
    route_find(tables, method, path, len, &m);
    return m;
}

static route_match_t find(unsigned method, const char *path)
{
    return find_n(method, path, strlen(path));
}

/* m matched the row want (NULL: no row). */
static void expect_row(const route_match_t *m, const api_route_t *want, const char *path)
{
    if (m->row != want)
        fail_msg("%s: matched row %s, wanted %s", path, m->row ? m->row->path : "(none)",
                 want ? want->path : "(none)");
}

static void expect_arg(const route_match_t *m, unsigned i, const char *want, size_t want_len)
{
    assert_true(m->args.n > i);
    assert_int_equal(m->args.len[i], want_len);
    assert_memory_equal(m->args.arg[i], want, want_len);
}

static void test_literal_paths_are_exact(void **state)
{
    (void)state;
    route_match_t m = find(API_GET, "/healthz");
    expect_row(&m, &rows_one[0], "/healthz");
    assert_int_equal(m.args.n, 0);
    static const char *const misses[] = {"/healthz/", "/healthz/x", "/health", "/HEALTHZ", "//healthz",
                                         "/healthz ", "", "healthz"};
    for (size_t i = 0; i < sizeof misses / sizeof misses[0]; i++) {
        m = find(API_GET, misses[i]);
        expect_row(&m, NULL, misses[i]);
        assert_null(m.first);
        assert_int_equal(m.allowed, 0);
    }
    m = find(API_HEAD, "/");
    expect_row(&m, &rows_one[1], "/");
    /* the span's length rules, not a NUL: "/healthzXYZ" cut at 8 bytes is "/healthz" */
    m = find_n(API_GET, "/healthzXYZ", 8);
    expect_row(&m, &rows_one[0], "/healthz (span)");
}

static void test_star_is_one_segment(void **state)
{
    (void)state;
    route_match_t m = find(API_GET, "/m/chat/ready");
    expect_row(&m, &rows_one[2], "/m/chat/ready");
    assert_int_equal(m.args.n, 1);
    expect_arg(&m, 0, "chat", 4);
    m = find(API_GET, "/m//ready"); /* an empty segment is a segment: the handler judges it */
    expect_row(&m, &rows_one[2], "/m//ready");
    expect_arg(&m, 0, "", 0);
    static const char *const misses[] = {"/m/a/b/ready", "/m/chat/ready/", "/m/chat", "/m/", "/m/chat/",
                                         "/m/chat/readyz", "/m/chat/Ready"};
    for (size_t i = 0; i < sizeof misses / sizeof misses[0]; i++) {
        m = find(API_GET, misses[i]);
        expect_row(&m, NULL, misses[i]);
        assert_null(m.first);
    }
    m = find(API_POST, "/m/a/b/pair");
    expect_row(&m, &rows_one[4], "/m/a/b/pair");
    assert_int_equal(m.args.n, 2);
    expect_arg(&m, 0, "a", 1);
    expect_arg(&m, 1, "b", 1);
}

static void test_bytes_are_taken_as_they_are(void **state)
{
    (void)state;
    /* no percent-decoding: %2F is not a slash, and the segment keeps its escape */
    route_match_t m = find(API_GET, "/m/a%2Fb/ready");
    expect_row(&m, &rows_one[2], "/m/a%2Fb/ready");
    expect_arg(&m, 0, "a%2Fb", 5);
    m = find(API_GET, "/m%2Fchat/ready");
    expect_row(&m, NULL, "/m%2Fchat/ready");
    /* a NUL, a high byte, spaces and a '?' inside the span are segment bytes */
    static const char odd[] = "/m/\0\xff x?y/ready";
    m = find_n(API_GET, odd, sizeof odd - 1);
    expect_row(&m, &rows_one[2], "odd bytes");
    expect_arg(&m, 0, "\0\xff x?y", 6);
}

static void test_long_path(void **state)
{
    (void)state;
    size_t n = 1u << 20;
    char *p = malloc(n + 16);
    assert_non_null(p);
    memcpy(p, "/m/", 3);
    memset(p + 3, 'x', n);
    memcpy(p + 3 + n, "/ready", 6);
    route_match_t m = find_n(API_GET, p, n + 9);
    expect_row(&m, &rows_one[2], "1 MiB name");
    assert_int_equal(m.args.len[0], n);
    assert_ptr_equal(m.args.arg[0], p + 3);
    p[3 + n / 2] = '/'; /* a slash inside: no pattern has that many segments */
    m = find_n(API_GET, p, n + 9);
    expect_row(&m, NULL, "1 MiB with a slash");
    free(p);
}

static void test_methods_of_one_path(void **state)
{
    (void)state;
    route_match_t m = find(API_POST, "/j");
    expect_row(&m, &rows_two[0], "POST /j");
    m = find(API_HEAD, "/j");
    expect_row(&m, &rows_two[1], "HEAD /j");
    m = find(API_OTHER, "/j"); /* PUT: the path is known, the method is not */
    expect_row(&m, NULL, "PUT /j");
    assert_ptr_equal(m.first, &rows_two[0]);
    assert_int_equal(m.allowed, API_GET | API_HEAD | API_POST);
    /* a method one row of the path takes, another row's pattern cannot take over */
    m = find(API_OTHER, "/j/42");
    expect_row(&m, NULL, "PUT /j/42");
    assert_ptr_equal(m.first, &rows_two[2]);
    assert_int_equal(m.allowed, API_GET | API_HEAD | API_DELETE);
    expect_arg(&m, 0, "42", 2);
    m = find(API_DELETE, "/j/42");
    expect_row(&m, &rows_two[3], "DELETE /j/42");
    /* a method mismatch on a path with no 405 of its own: row NULL, first says so */
    m = find(API_GET, "/m/x/load");
    expect_row(&m, NULL, "GET /m/x/load");
    assert_ptr_equal(m.first, &rows_one[3]);
    assert_false(m.first->own_path);
}

static void test_arg_ok_and_the_rest(void **state)
{
    (void)state;
    /* arg_ok refuses "abc": the one-segment row does not match, the rest row does */
    static const char *const rest[] = {"/j/abc", "/j/", "/j/42/x", "/j/42/", "/j//", "/j/a/b/c/d"};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) {
        route_match_t m = find(API_OTHER, rest[i]);
        expect_row(&m, &rows_two[4], rest[i]);
        assert_int_equal(m.allowed, API_ANY);
        assert_int_equal(m.args.n, 0);
    }
    route_match_t m = find(API_GET, "/jx");
    expect_row(&m, NULL, "/jx");
    m = find(API_GET, "/j");
    expect_row(&m, &rows_two[1], "GET /j (not the rest)");
}

static void test_method_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned bit;
    } cases[] = {{"GET", API_GET},     {"HEAD", API_HEAD},   {"POST", API_POST},   {"DELETE", API_DELETE},
                 {"PUT", API_OTHER},   {"get", API_OTHER},   {"GETX", API_OTHER},  {"OPTIONS", API_OTHER},
                 {"PATCH", API_OTHER}, {"DELET", API_OTHER}, {"", API_OTHER}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char head[32];
        size_t n = strlen(cases[i].name);
        memcpy(head, cases[i].name, n);
        memcpy(head + n, " / HTTP/1.1", 12);
        http1_span_t span = {.off = 0, .len = (uint32_t)n};
        if (route_method(head, span) != cases[i].bit)
            fail_msg("method \"%s\": %u, wanted %u", cases[i].name, route_method(head, span), cases[i].bit);
    }
}

static void test_texts(void **state)
{
    (void)state;
    char buf[128];
    route_methods_text(API_GET | API_HEAD | API_POST, ", ", buf, sizeof buf);
    assert_string_equal(buf, "GET, HEAD, POST");
    route_methods_text(API_ANY, ", ", buf, sizeof buf);
    assert_string_equal(buf, "any");
    route_methods_text(API_DELETE | API_OTHER, "|", buf, sizeof buf);
    assert_string_equal(buf, "DELETE|other");
    route_methods_text(0, ", ", buf, sizeof buf);
    assert_string_equal(buf, "");
    route_methods_text(API_GET | API_HEAD, ", ", buf, 6);
    assert_string_equal(buf, "GET, ");
    route_reserve_text(tables, buf, sizeof buf);
    assert_string_equal(buf, "/healthz, POST /m/*/load");
    memset(buf, 'x', sizeof buf);
    route_reserve_text(tables, buf, 12);
    assert_string_equal(buf, "/healthz, P");
    route_reserve_text(tables, buf, 1);
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_paths_are_exact),
        cmocka_unit_test(test_star_is_one_segment),
        cmocka_unit_test(test_bytes_are_taken_as_they_are),
        cmocka_unit_test(test_long_path),
        cmocka_unit_test(test_methods_of_one_path),
        cmocka_unit_test(test_arg_ok_and_the_rest),
        cmocka_unit_test(test_method_names),
        cmocka_unit_test(test_texts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
