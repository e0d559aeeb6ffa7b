/*
 * test_json_util: RFC 7386 merge patch (the section 3 example and every row of the
 * Appendix A table), RFC 6901 pointers (the section 5 document and every pointer listed
 * there, plus invalid and missing ones) and deep equality.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"

static cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (j == NULL)
        fail_msg("test JSON does not parse: %s", text);
    return j;
}

/* Applies patch to target and checks the result equals expected; also that the patch is untouched. */
static void check_merge(const char *target_text, const char *patch_text, const char *expected_text)
{
    cJSON *target = parse(target_text);
    cJSON *patch = parse(patch_text);
    cJSON *expected = parse(expected_text);
    char *patch_before = cJSON_PrintUnformatted(patch);
    cJSON *result = json_merge_patch(target, patch);
    char *patch_after = cJSON_PrintUnformatted(patch);
    char *got = result ? cJSON_PrintUnformatted(result) : NULL;
    if (!json_equal(result, expected))
        fail_msg("merge %s + %s = %s, wanted %s", target_text, patch_text, got ? got : "NULL", expected_text);
    assert_string_equal(patch_before, patch_after);
    free(got);
    free(patch_before);
    free(patch_after);
    cJSON_Delete(result);
    cJSON_Delete(patch);
    cJSON_Delete(expected);
}

static void test_rfc7386_section3_example(void **state)
{
    (void)state;
    cJSON *target = parse("{\"title\":\"Goodbye!\",\"author\":{\"givenName\":\"John\",\"familyName\":\"Doe\"},"
                          "\"tags\":[\"example\",\"sample\"],\"content\":\"This will be unchanged\"}");
    cJSON *patch = parse("{\"title\":\"Hello!\",\"phoneNumber\":\"+01-123-456-7890\","
                         "\"author\":{\"familyName\":null},\"tags\":[\"example\"]}");
    cJSON *result = json_merge_patch(target, patch);
    char *got = cJSON_PrintUnformatted(result);
    /* Same members as the RFC's result, in the target's order with new members appended. */
    assert_string_equal(got, "{\"title\":\"Hello!\",\"author\":{\"givenName\":\"John\"},\"tags\":[\"example\"],"
                             "\"content\":\"This will be unchanged\",\"phoneNumber\":\"+01-123-456-7890\"}");
    free(got);
    cJSON_Delete(result);
    cJSON_Delete(patch);
}

static void test_rfc7386_appendix_a(void **state)
{
    (void)state;
    check_merge("{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}");
    check_merge("{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}");
    check_merge("{\"a\":\"b\"}", "{\"a\":null}", "{}");
    check_merge("{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}", "{\"b\":\"c\"}");
    check_merge("{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}");
    check_merge("{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}");
    check_merge("{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}", "{\"a\":{\"b\":\"d\"}}");
    check_merge("{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}");
    check_merge("[\"a\",\"b\"]", "[\"c\",\"d\"]", "[\"c\",\"d\"]");
    check_merge("{\"a\":\"b\"}", "[\"c\"]", "[\"c\"]");
    check_merge("{\"a\":\"foo\"}", "null", "null");
    check_merge("{\"a\":\"foo\"}", "\"bar\"", "\"bar\"");
    check_merge("{\"e\":null}", "{\"a\":1}", "{\"e\":null,\"a\":1}");
    check_merge("[1,2]", "{\"a\":\"b\",\"c\":null}", "{\"a\":\"b\"}");
    check_merge("{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}");
}

static void test_merge_more(void **state)
{
    (void)state;
    /* Nested objects merge in place; a null inside an array is data, not a removal. */
    check_merge("{\"a\":{\"x\":1,\"y\":{\"z\":2}}}", "{\"a\":{\"y\":{\"w\":3}}}", "{\"a\":{\"x\":1,\"y\":{\"z\":2,\"w\":3}}}");
    check_merge("{\"a\":1}", "{\"b\":[null,1]}", "{\"a\":1,\"b\":[null,1]}");
    check_merge("{\"steps\":50,\"resolution\":1024}", "{\"steps\":12}", "{\"steps\":12,\"resolution\":1024}");
    check_merge("{\"a\":1}", "{}", "{\"a\":1}");
    check_merge("{\"a\":1}", "{\"missing\":null}", "{\"a\":1}");
    /* A NULL target is "not an object". */
    cJSON *patch = parse("{\"a\":{\"b\":null,\"c\":1}}");
    cJSON *result = json_merge_patch(NULL, patch);
    cJSON *expected = parse("{\"a\":{\"c\":1}}");
    assert_true(json_equal(result, expected));
    cJSON_Delete(result);
    cJSON_Delete(expected);
    /* A NULL patch pointer leaves the target as it is. */
    cJSON *target = parse("{\"a\":1}");
    assert_ptr_equal(json_merge_patch(target, NULL), target);
    cJSON_Delete(target);
    cJSON_Delete(patch);
}

static const char *rfc6901_doc =
    "{\"foo\":[\"bar\",\"baz\"],\"\":0,\"a/b\":1,\"c%d\":2,\"e^f\":3,\"g|h\":4,"
    "\"i\\\\j\":5,\"k\\\"l\":6,\" \":7,\"m~n\":8}";

static void expect_number_at(const cJSON *doc, const char *pointer, double want)
{
    const cJSON *node = json_pointer_get(doc, pointer);
    if (node == NULL)
        fail_msg("pointer \"%s\" found nothing, wanted %g", pointer, want);
    assert_true(cJSON_IsNumber(node));
    assert_true(node->valuedouble == want);
}

static void test_rfc6901_section5(void **state)
{
    (void)state;
    cJSON *doc = parse(rfc6901_doc);
    assert_ptr_equal(json_pointer_get(doc, ""), doc);
    cJSON *foo = json_pointer_get(doc, "/foo");
    cJSON *expected_foo = parse("[\"bar\",\"baz\"]");
    assert_true(json_equal(foo, expected_foo));
    cJSON_Delete(expected_foo);
    cJSON *foo0 = json_pointer_get(doc, "/foo/0");
    assert_non_null(foo0);
    assert_string_equal(cJSON_GetStringValue(foo0), "bar");
    assert_string_equal(cJSON_GetStringValue(json_pointer_get(doc, "/foo/1")), "baz");
    expect_number_at(doc, "/", 0);
    expect_number_at(doc, "/a~1b", 1);
    expect_number_at(doc, "/c%d", 2);
    expect_number_at(doc, "/e^f", 3);
    expect_number_at(doc, "/g|h", 4);
    expect_number_at(doc, "/i\\j", 5);
    expect_number_at(doc, "/k\"l", 6);
    expect_number_at(doc, "/ ", 7);
    expect_number_at(doc, "/m~0n", 8);
    cJSON_Delete(doc);
}

static void test_pointer_missing_and_invalid(void **state)
{
    (void)state;
    cJSON *doc = parse(rfc6901_doc);
    const char *nothing_there[] = {
        "foo",       /* no leading slash */
        "#/foo",     /* URI fragments are not taken */
        "/foo/2",    /* out of range */
        "/foo/-",    /* past the end: never found */
        "/foo/01",   /* leading zero */
        "/foo/-1",
        "/foo/+1",
        "/foo/1e0",
        "/foo/ 1",
        "/foo/",     /* empty index */
        "/foo/0/x",  /* into a string */
        "/missing",
        "/a/b",      /* "a/b" needs ~1 */
        "/m~n",      /* invalid escape */
        "/~2",
        "/m~",
        "//",        /* member "" holds 0, which has no children */
        "/foo/99999999999",
    };
    for (size_t i = 0; i < sizeof nothing_there / sizeof nothing_there[0]; i++)
        if (json_pointer_get(doc, nothing_there[i]) != NULL)
            fail_msg("pointer \"%s\" found something, wanted nothing", nothing_there[i]);
    assert_null(json_pointer_get(doc, NULL));
    assert_null(json_pointer_get(NULL, "/foo"));
    cJSON_Delete(doc);
}

static void test_pointer_valid(void **state)
{
    (void)state;
    assert_true(json_pointer_valid(""));
    assert_true(json_pointer_valid("/"));
    assert_true(json_pointer_valid("/success"));
    assert_true(json_pointer_valid("/a~0b~1c/0/-"));
    assert_false(json_pointer_valid("success"));
    assert_false(json_pointer_valid("#/a"));
    assert_false(json_pointer_valid("/a~"));
    assert_false(json_pointer_valid("/a~2"));
    assert_false(json_pointer_valid("/~x/b"));
    assert_false(json_pointer_valid(NULL));
}

static void test_pointer_nested(void **state)
{
    (void)state;
    cJSON *doc = parse("{\"choices\":[{\"message\":{\"content\":\"hi\"}}],\"error\":{\"code\":507},\"ok\":false}");
    assert_string_equal(cJSON_GetStringValue(json_pointer_get(doc, "/choices/0/message/content")), "hi");
    expect_number_at(doc, "/error/code", 507);
    assert_true(cJSON_IsFalse(json_pointer_get(doc, "/ok")));
    assert_null(json_pointer_get(doc, "/choices/1"));
    cJSON_Delete(doc);
}

static void expect_equal(const char *a, const char *b, bool want)
{
    cJSON *x = parse(a), *y = parse(b);
    if (json_equal(x, y) != want || json_equal(y, x) != want)
        fail_msg("json_equal(%s, %s) should be %s", a, b, want ? "true" : "false");
    cJSON_Delete(x);
    cJSON_Delete(y);
}

static void test_equal(void **state)
{
    (void)state;
    expect_equal("1", "1.0", true);
    expect_equal("1", "2", false);
    expect_equal("1", "\"1\"", false);
    expect_equal("true", "1", false);
    expect_equal("true", "true", true);
    expect_equal("true", "false", false);
    expect_equal("null", "false", false);
    expect_equal("null", "null", true);
    expect_equal("\"a\"", "\"a\"", true);
    expect_equal("\"a\"", "\"b\"", false);
    expect_equal("{}", "[]", false);
    expect_equal("{\"a\":1,\"b\":[1,2]}", "{\"b\":[1,2],\"a\":1}", true);
    expect_equal("{\"a\":1,\"b\":[1,2]}", "{\"b\":[2,1],\"a\":1}", false);
    expect_equal("{\"a\":1}", "{\"a\":1,\"b\":2}", false);
    expect_equal("{\"a\":1}", "{\"b\":1}", false);
    expect_equal("[1,2]", "[1,2,3]", false);
    expect_equal("{\"a\":{\"b\":{\"c\":null}}}", "{\"a\":{\"b\":{\"c\":null}}}", true);
    expect_equal("{\"a\":{\"b\":{\"c\":null}}}", "{\"a\":{\"b\":{\"c\":0}}}", false);
    assert_true(json_equal(NULL, NULL));
    cJSON *one = parse("1");
    assert_false(json_equal(one, NULL));
    assert_false(json_equal(NULL, one));
    cJSON_Delete(one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc7386_section3_example),
        cmocka_unit_test(test_rfc7386_appendix_a),
        cmocka_unit_test(test_merge_more),
        cmocka_unit_test(test_rfc6901_section5),
        cmocka_unit_test(test_pointer_missing_and_invalid),
        cmocka_unit_test(test_pointer_valid),
        cmocka_unit_test(test_pointer_nested),
        cmocka_unit_test(test_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
