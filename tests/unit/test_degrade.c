/*
 * test_degrade: OOM detection and request rewriting for the degradation ladder
 * (src/quality/degrade_detect.c, degrade_rewrite.c).
 *
 * Detection: the default rules (a 500 with a CUDA OOM text; a 500 "internal error"; the
 * TRELLIS.2 style 200 {"success": false, "error": "... out of memory ..."}; 200
 * {"success": true}); a configured status list with a body regex (both needed); the json
 * rule with and without body_matches; the header rule (case-insensitive names, no prefix
 * matches); the SPEC example; regex case-insensitivity; the 64 KiB regex window and NUL
 * bytes; invalid JSON bodies under a json rule.
 * Rewriting: JSON merge patch (replace, nested objects, null removes, member order,
 * duplicate members (the last one is the one changed), JSON
 * content types with parameters, no content type); non-object or invalid JSON under a JSON
 * content type; form-urlencoded (replace, add, order, encoding of spaces, + & = % and UTF-8,
 * decode-then-compare names, duplicates, null removes, numbers and booleans, a key given
 * twice in `set`, the growth bound);
 * multipart/form-data (quoted and unquoted boundary, replace a text field, add a field
 * before the closing delimiter, file parts untouched, CRLF kept, bare-LF bodies, null
 * removes, missing boundary / closing delimiter, a value holding the boundary); unknown
 * content types.
 * Run: make build/tests/test_degrade && build/tests/test_degrade (and with make SAN=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quality/degrade.h"

static cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (j == NULL)
        fail_msg("test JSON does not parse: %s", text);
    return j;
}

static bool oom(const config_detect_t *detect, int status, const char *headers, const char *body)
{
    return degrade_is_oom(detect, status, headers, headers ? strlen(headers) : 0, body, body ? strlen(body) : 0);
}

/* ---------------------------------------------------------------- detection */

static const char *cuda_oom =
    "Traceback (most recent call last):\n  File \"serve.py\", line 80\ntorch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 20.00 MiB (GPU 0; 23.65 GiB total capacity; 22.10 GiB already allocated)";

static void test_default_rules_500_cuda_oom(void **state)
{
    (void)state;
    config_detect_t none = {0};
    assert_true(oom(&none, 500, NULL, cuda_oom));
    assert_true(oom(NULL, 500, NULL, cuda_oom)); /* no detect section at all: the same defaults */
    assert_true(oom(&none, 503, "Content-Type: text/plain\r\n", cuda_oom));
}

static void test_default_rules_500_other_error_is_not_oom(void **state)
{
    (void)state;
    config_detect_t none = {0};
    assert_false(oom(&none, 500, NULL, "internal error"));
    assert_false(oom(&none, 500, NULL, ""));
    assert_false(oom(&none, 500, NULL, NULL));
    /* the text alone, in a success, is no signal */
    assert_false(oom(&none, 200, NULL, "the model ran out of memory once, but this is fine"));
    assert_false(oom(&none, 404, NULL, "out of memory"));
}

static void test_default_rules_json200_success_false(void **state)
{
    (void)state;
    config_detect_t none = {0};
    assert_true(oom(&none, 200, NULL,
                    "{\"success\": false, \"error\": \"Traceback ...\\ntorch.OutOfMemoryError: CUDA out of memory. "
                    "Tried to allocate 2.00 GiB\"}"));
    /* success:false that is not about memory */
    assert_false(oom(&none, 200, NULL, "{\"success\": false, \"error\": \"image could not be decoded\"}"));
}

static void test_default_rules_success_true_is_not_oom(void **state)
{
    (void)state;
    config_detect_t none = {0};
    assert_false(oom(&none, 200, NULL, "{\"success\": true}"));
    /* even when the text mentions memory, success:true is no signal */
    assert_false(oom(&none, 200, NULL, "{\"success\": true, \"log\": \"recovered from out of memory\"}"));
    assert_false(oom(&none, 200, NULL, "{\"success\": \"false\", \"error\": \"out of memory\"}"));
}

static void test_status_list_and_regex_both_needed(void **state)
{
    (void)state;
    int statuses[] = {500, 507};
    config_detect_t d = {.statuses = statuses, .n_statuses = 2, .body_matches = (char *)"out of memory"};
    assert_true(oom(&d, 507, NULL, "out of memory"));
    assert_true(oom(&d, 500, NULL, cuda_oom));
    assert_false(oom(&d, 500, NULL, "internal error")); /* status without the text */
    assert_false(oom(&d, 503, NULL, cuda_oom));         /* text without a listed status */
    assert_false(oom(&d, 200, NULL, cuda_oom));
    /* a configured status list replaces the default signal: success:false is not one */
    assert_false(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"out of memory\"}"));
}

static void test_status_list_alone_needs_no_text(void **state)
{
    (void)state;
    int statuses[] = {507};
    config_detect_t d = {.statuses = statuses, .n_statuses = 1};
    assert_true(oom(&d, 507, NULL, ""));
    assert_true(oom(&d, 507, NULL, "anything at all"));
    assert_false(oom(&d, 500, NULL, cuda_oom)); /* 500 is not listed */
}

static void test_json_rule_with_body_matches(void **state)
{
    (void)state;
    cJSON *f = parse("false");
    config_detect_t d = {.json_path = (char *)"/success", .json_equals = f, .body_matches = (char *)"out of memory"};
    assert_true(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"CUDA out of memory\"}"));
    assert_false(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"bad image\"}"));
    assert_false(oom(&d, 200, NULL, "{\"success\": true, \"note\": \"out of memory\"}"));
    assert_false(oom(&d, 500, NULL, cuda_oom)); /* not JSON, and 500 is no configured signal */
    cJSON_Delete(f);
}

static void test_json_rule_without_body_matches(void **state)
{
    (void)state;
    cJSON *f = parse("false");
    config_detect_t d = {.json_path = (char *)"/success", .json_equals = f};
    assert_true(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"anything\"}"));
    assert_true(oom(&d, 200, NULL, "  {\"glb_path\": null, \"success\": false}\r\n"));
    assert_false(oom(&d, 200, NULL, "{\"success\": true}"));
    assert_false(oom(&d, 200, NULL, "{\"ok\": false}"));          /* pointer not there */
    assert_false(oom(&d, 200, NULL, "{\"success\": 0}"));         /* 0 is not false */
    assert_false(oom(&d, 200, NULL, "{\"success\": \"false\"}")); /* nor is the string */
    assert_false(oom(&d, 200, NULL, "[false]"));
    cJSON_Delete(f);

    cJSON *t = parse("true");
    config_detect_t nested = {.json_path = (char *)"/worker_export/oom", .json_equals = t};
    assert_true(oom(&nested, 200, NULL, "{\"success\": true, \"worker_export\": {\"oom\": true}}"));
    assert_false(oom(&nested, 200, NULL, "{\"success\": true, \"worker_export\": {\"oom\": false}}"));
    cJSON_Delete(t);
}

static void test_header_rule(void **state)
{
    (void)state;
    config_detect_t d = {.header = (char *)"X-Generation-Error"};
    assert_true(oom(&d, 500, "Content-Type: text/plain\r\nX-Generation-Error: CUDA OOM\r\n", "x"));
    assert_true(oom(&d, 200, "x-generation-error: 1\r\n", ""));        /* name in any case */
    assert_true(oom(&d, 500, "Date: x\r\nX-GENERATION-ERROR:\r\n", "")); /* empty value: still present */
    assert_false(oom(&d, 500, "Content-Type: text/plain\r\n", cuda_oom));
    assert_false(oom(&d, 500, "X-Generation-Error-Code: 3\r\n", "")); /* a longer name is another header */
    assert_false(oom(&d, 500, "X-Other: X-Generation-Error: 1\r\n", ""));
    assert_false(oom(&d, 500, NULL, cuda_oom));

    config_detect_t qualified = {.header = (char *)"X-Generation-Error", .body_matches = (char *)"memory"};
    assert_true(oom(&qualified, 500, "X-Generation-Error: oom\r\n", "CUDA out of memory"));
    assert_false(oom(&qualified, 500, "X-Generation-Error: bad prompt\r\n", "bad prompt"));
}

static void test_spec_example(void **state)
{
    (void)state;
    int statuses[] = {500, 507};
    cJSON *f = parse("false");
    config_detect_t d = {.statuses = statuses,
                         .n_statuses = 2,
                         .body_matches = (char *)"out of memory",
                         .json_path = (char *)"/success",
                         .json_equals = f};
    assert_true(oom(&d, 507, NULL, "out of memory"));
    assert_true(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"out of memory\"}"));
    assert_false(oom(&d, 200, NULL, "{\"success\": false, \"error\": \"bad input\"}"));
    assert_false(oom(&d, 500, NULL, "internal error"));
    assert_false(oom(&d, 200, NULL, "{\"success\": true}"));
    cJSON_Delete(f);
}

static void test_regex_is_case_insensitive(void **state)
{
    (void)state;
    config_detect_t none = {0};
    assert_true(oom(&none, 500, NULL, "RuntimeError: CUDA OUT OF MEMORY"));
    assert_true(oom(&none, 500, NULL, "Out Of Memory"));
    int statuses[] = {500};
    config_detect_t d = {.statuses = statuses, .n_statuses = 1, .body_matches = (char *)"cuda.*(memory|oom)"};
    assert_true(oom(&d, 500, NULL, "Cuda error: OOM"));
    assert_true(oom(&d, 500, NULL, "CUDA\nerror: out of MEMORY")); /* '.' crosses lines */
    assert_false(oom(&d, 500, NULL, "memory before cuda"));
    /* a pattern that does not compile matches nothing (the config parser refuses it) */
    config_detect_t bad = {.statuses = statuses, .n_statuses = 1, .body_matches = (char *)"(unclosed"};
    assert_false(oom(&bad, 500, NULL, "(unclosed"));
}

static void test_regex_window_and_nul_bytes(void **state)
{
    (void)state;
    config_detect_t none = {0};
    /* NUL bytes before the text do not hide it */
    static const char with_nul[] = "bin\0ary\0 CUDA out of memory";
    assert_true(degrade_is_oom(&none, 500, NULL, 0, with_nul, sizeof with_nul - 1));
    /* the regex reads the first 64 KiB only */
    size_t filler = 64 * 1024;
    const char *tail = "CUDA out of memory";
    char *late = malloc(filler + strlen(tail));
    assert_non_null(late);
    memset(late, 'x', filler);
    memcpy(late + filler, tail, strlen(tail));
    assert_false(degrade_is_oom(&none, 500, NULL, 0, late, filler + strlen(tail)));
    memcpy(late + filler - strlen(tail), tail, strlen(tail)); /* now it ends right at the window */
    assert_true(degrade_is_oom(&none, 500, NULL, 0, late, filler + strlen(tail)));
    free(late);
}

static void test_invalid_json_with_json_rule(void **state)
{
    (void)state;
    cJSON *f = parse("false");
    config_detect_t d = {.json_path = (char *)"/success", .json_equals = f};
    assert_false(oom(&d, 200, NULL, "{\"success\": false"));                   /* truncated */
    assert_false(oom(&d, 200, NULL, "{\"success\": false} {\"more\": 1}"));     /* trailing text */
    assert_false(oom(&d, 200, NULL, "{\"success\": false,}"));
    assert_false(oom(&d, 200, NULL, "ply\nformat binary_little_endian 1.0\n"));
    assert_false(oom(&d, 200, NULL, ""));
    assert_false(oom(&d, 200, NULL, NULL));
    static const char nul_inside[] = "{\"success\": false, \"e\": \"a\0b\"}";
    assert_false(degrade_is_oom(&d, 200, NULL, 0, nul_inside, sizeof nul_inside - 1));
    /* the JSON is read within its length: no terminator needed */
    static const char unterminated[] = {'{', '"', 's', 'u', 'c', 'c', 'e', 's', 's', '"', ':', 'f', 'a', 'l', 's', 'e', '}'};
    assert_true(degrade_is_oom(&d, 200, NULL, 0, unterminated, sizeof unterminated));
    assert_false(degrade_is_oom(&d, 200, NULL, 0, unterminated, sizeof unterminated - 1));
    cJSON_Delete(f);
}

/* ---------------------------------------------------------------- rewriting */

/* Rewrites and checks the exact result. */
static void check_rewrite(const char *set_text, const char *content_type, const char *body, size_t body_len,
                          const char *expected, size_t expected_len)
{
    cJSON *set = parse(set_text);
    char *out = NULL, why[256] = "";
    size_t out_len = 0;
    int rc = degrade_rewrite(set, content_type, body, body_len, &out, &out_len, why, sizeof why);
    if (rc != 0)
        fail_msg("rewrite with %s failed: %s", set_text, why);
    assert_non_null(out);
    if (out_len != expected_len || memcmp(out, expected, expected_len) != 0)
        fail_msg("rewrite with %s gave\n[%.*s]\nwanted\n[%.*s]", set_text, (int)out_len, out, (int)expected_len,
                 expected);
    free(out);
    cJSON_Delete(set);
}

static void check_rewrite_str(const char *set_text, const char *content_type, const char *body, const char *expected)
{
    check_rewrite(set_text, content_type, body, strlen(body), expected, strlen(expected));
}

/* Checks that the rewrite is refused with a reason that contains `reason_part`. */
static void check_refused(const char *set_text, const char *content_type, const char *body, size_t body_len,
                          const char *reason_part)
{
    cJSON *set = parse(set_text);
    char *out = (char *)"untouched", why[256] = "";
    size_t out_len = 99;
    assert_int_equal(degrade_rewrite(set, content_type, body, body_len, &out, &out_len, why, sizeof why), -1);
    assert_null(out);
    assert_int_equal(out_len, 0);
    if (strstr(why, reason_part) == NULL)
        fail_msg("reason \"%s\" does not mention \"%s\"", why, reason_part);
    cJSON_Delete(set);
}

static void test_json_merge_replaces_value(void **state)
{
    (void)state;
    check_rewrite_str("{\"steps\": 12}", "application/json", "{\"steps\": 50, \"prompt\": \"x\"}",
                      "{\"steps\":12,\"prompt\":\"x\"}");
    check_rewrite_str("{\"pipeline_type\": \"512\"}", "application/json; charset=utf-8", "{\"seed\": 1}",
                      "{\"seed\":1,\"pipeline_type\":\"512\"}");
    check_rewrite_str("{\"steps\": 12}", "Application/Vnd.Api+JSON", "{\"steps\": 50}", "{\"steps\":12}");
}

static void test_json_merge_nested_objects(void **state)
{
    (void)state;
    check_rewrite_str("{\"sampler\": {\"steps\": 8, \"extra\": {\"tiled\": true}}}", "application/json",
                      "{\"sampler\": {\"steps\": 25, \"cfg\": 7.5}, \"prompt\": \"x\"}",
                      "{\"sampler\":{\"steps\":8,\"cfg\":7.5,\"extra\":{\"tiled\":true}},\"prompt\":\"x\"}");
    /* a non-object member is replaced whole by an object, and an array by an array */
    check_rewrite_str("{\"size\": {\"w\": 512}, \"tags\": [1]}", "application/json",
                      "{\"size\": 1024, \"tags\": [1, 2, 3]}", "{\"size\":{\"w\":512},\"tags\":[1]}");
}

static void test_json_merge_null_removes(void **state)
{
    (void)state;
    check_rewrite_str("{\"texture_size\": null, \"steps\": 4}", "application/json",
                      "{\"texture_size\": 2048, \"steps\": 12, \"prompt\": \"x\"}", "{\"steps\":4,\"prompt\":\"x\"}");
    check_rewrite_str("{\"absent\": null}", "application/json", "{\"a\": 1}", "{\"a\":1}");
    check_rewrite_str("{\"o\": {\"x\": null}}", "application/json", "{\"o\": {\"x\": 1, \"y\": 2}}",
                      "{\"o\":{\"y\":2}}");
}

static void test_json_duplicate_members_last_one_wins(void **state)
{
    (void)state;
    /* servers read the last of duplicate members: that one is changed, earlier ones dropped */
    check_rewrite_str("{\"steps\": 12}", "application/json", "{\"steps\": 50, \"x\": 1, \"steps\": 40}",
                      "{\"x\":1,\"steps\":12}");
    check_rewrite_str("{\"o\": {\"a\": null}}", "application/json",
                      "{\"o\": {\"a\": 1}, \"o\": {\"a\": 2, \"b\": 3}, \"u\": 1, \"u\": 2}",
                      "{\"o\":{\"b\":3},\"u\":1,\"u\":2}");
}

static void test_json_object_without_json_content_type(void **state)
{
    (void)state;
    check_rewrite_str("{\"steps\": 12}", NULL, "{\"steps\": 50}", "{\"steps\":12}");
    check_rewrite_str("{\"steps\": 12}", "text/plain", " {\"steps\": 50}\n", "{\"steps\":12}");
}

static void test_json_content_type_with_non_object_body(void **state)
{
    (void)state;
    const char *arr = "[{\"steps\": 50}]";
    check_refused("{\"steps\": 12}", "application/json", arr, strlen(arr), "not a JSON object");
    check_refused("{\"steps\": 12}", "application/json", "\"text\"", 6, "not a JSON object");
    check_refused("{\"steps\": 12}", "application/json", "{\"steps\": ", 10, "not a JSON object");
    check_refused("{\"steps\": 12}", "application/json", "", 0, "not a JSON object");
    check_refused("{\"steps\": 12}", "application/json", NULL, 0, "not a JSON object");
}

static void test_set_must_be_an_object(void **state)
{
    (void)state;
    check_refused("[1]", "application/json", "{}", 2, "not an object");
    check_refused("12", "application/x-www-form-urlencoded", "a=1", 3, "not an object");
}

static void test_form_replaces_existing_field(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    check_rewrite_str("{\"steps\": 12}", ct, "prompt=a+red+car&steps=50&seed=7", "prompt=a+red+car&steps=12&seed=7");
    check_rewrite_str("{\"steps\": 12}", ct, "steps=50", "steps=12");
    check_rewrite_str("{\"steps\": 12}", ct, "steps", "steps=12"); /* a field without '=' */
    check_rewrite_str("{\"steps\": 12}", "Application/X-WWW-Form-Urlencoded; charset=UTF-8", "a=1&steps=&b=2",
                      "a=1&steps=12&b=2");
    /* every field of that name; empty segments and other fields kept as sent */
    check_rewrite_str("{\"steps\": 12}", ct, "steps=50&&x=%zz&steps=40", "steps=12&&x=%zz&steps=12");
}

static void test_form_adds_missing_field(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    check_rewrite_str("{\"pipeline_type\": \"512\"}", ct, "prompt=x&seed=1", "prompt=x&seed=1&pipeline_type=512");
    check_rewrite_str("{\"pipeline_type\": \"512\"}", ct, "", "pipeline_type=512");
    check_rewrite_str("{\"pipeline_type\": \"512\"}", ct, "prompt=x&", "prompt=x&pipeline_type=512");
    check_rewrite_str("{\"b\": 2, \"a\": 1, \"c\": 3}", ct, "a=9", "a=1&b=2&c=3");
}

static void test_form_encodes_values(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    check_rewrite_str("{\"prompt\": \"a b+c&d=e%f\"}", ct, "prompt=old&seed=1", "prompt=a+b%2Bc%26d%3De%25f&seed=1");
    check_rewrite_str("{\"prompt\": \"caf\u00e9 \u732b\"}", ct, "seed=1", "seed=1&prompt=caf%C3%A9+%E7%8C%AB");
    check_rewrite_str("{\"my key\": \"v/w\"}", ct, "seed=1", "seed=1&my+key=v%2Fw");
    check_rewrite_str("{\"safe\": \"Az09*-._\"}", ct, "", "safe=Az09*-._");
}

static void test_form_compares_decoded_names(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    /* names are matched after decoding, and written back as they were sent */
    check_rewrite_str("{\"my key\": \"v\", \"steps\": 12}", ct, "my+key=1&st%65ps=50&other=2",
                      "my+key=v&st%65ps=12&other=2");
    check_rewrite_str("{\"caf\u00e9\": 1}", ct, "caf%C3%A9=0", "caf%C3%A9=1");
    check_rewrite_str("{\"a&b\": 1}", ct, "a%26b=0&a=5&b=6", "a%26b=1&a=5&b=6");
    /* a name that only looks alike is another field */
    check_rewrite_str("{\"steps\": 12}", ct, "Steps=50&steps2=1", "Steps=50&steps2=1&steps=12");
}

static void test_form_set_with_a_key_twice_uses_the_last(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    check_rewrite_str("{\"a\": 1, \"a\": 2}", ct, "a=0&b=1", "a=2&b=1");
    check_rewrite_str("{\"a\": 1, \"a\": 2}", ct, "b=1", "b=1&a=2");
    check_rewrite_str("{\"a\": 1, \"a\": null}", ct, "a=0&b=1", "b=1");
}

static void test_form_growth_is_bounded(void **state)
{
    (void)state;
    /* 300,000 fields all named "a": a 10-byte value in each would add about 3 MB */
    size_t fields = 300000, len = fields * 2 - 1;
    char *body = malloc(len);
    assert_non_null(body);
    for (size_t i = 0; i < fields; i++) {
        body[2 * i] = 'a';
        if (i + 1 < fields)
            body[2 * i + 1] = '&';
    }
    check_refused("{\"a\": \"0123456789\"}", "application/x-www-form-urlencoded", body, len, "too large");
    /* a short value stays within the bound */
    cJSON *set = parse("{\"a\": 1}");
    char *out = NULL, why[128] = "";
    size_t out_len = 0;
    assert_int_equal(degrade_rewrite(set, "application/x-www-form-urlencoded", body, len, &out, &out_len, why, sizeof why), 0);
    assert_int_equal(out_len, len + fields * 2);
    assert_memory_equal(out, "a=1&a=1&", 8);
    free(out);
    cJSON_Delete(set);
    free(body);
}

static void test_form_values_null_numbers_booleans(void **state)
{
    (void)state;
    const char *ct = "application/x-www-form-urlencoded";
    check_rewrite_str("{\"steps\": 12, \"tiled\": true, \"ratio\": 0.5, \"refine\": false}", ct,
                      "steps=50&tiled=false", "steps=12&tiled=true&ratio=0.5&refine=false");
    check_rewrite_str("{\"texture\": null}", ct, "texture=2048&seed=1&texture=1", "seed=1");
    check_rewrite_str("{\"texture\": null}", ct, "seed=1", "seed=1");
    check_rewrite_str("{\"sizes\": [512, 256]}", ct, "", "sizes=%5B512%2C256%5D");
}

/* A TRELLIS.2-style request: an image file part (binary, with NUL bytes and CRLFs inside,
 * named like a degrade key in one test), then text fields. `eol` is "\r\n" or "\n". */
static size_t build_multipart(char *out, size_t cap, const char *boundary, const char *eol, const char *steps_value,
                              const char *extra_part)
{
    static const char image[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR--not-the-boundary\r\n\0end";
    size_t n = 0;
#define PUT(s, len)                                                                                                    \
    do {                                                                                                               \
        assert_true(n + (len) <= cap);                                                                                 \
        memcpy(out + n, (s), (len));                                                                                   \
        n += (len);                                                                                                    \
    } while (0)
#define PUTS(s) PUT((s), strlen(s))
    PUTS("--");
    PUTS(boundary);
    PUTS(eol);
    PUTS("Content-Disposition: form-data; name=\"image\"; filename=\"in.png\"");
    PUTS(eol);
    PUTS("Content-Type: image/png");
    PUTS(eol);
    PUTS(eol);
    PUT(image, sizeof image - 1);
    PUTS(eol);
    PUTS("--");
    PUTS(boundary);
    PUTS(eol);
    PUTS("content-disposition: form-data; name=steps");
    PUTS(eol);
    PUTS(eol);
    PUTS(steps_value);
    PUTS(eol);
    PUTS("--");
    PUTS(boundary);
    PUTS(eol);
    PUTS("Content-Disposition: form-data; name=\"seed\"");
    PUTS(eol);
    PUTS(eol);
    PUTS("42");
    PUTS(eol);
    if (extra_part != NULL) {
        PUTS("--");
        PUTS(boundary);
        PUTS(eol);
        PUTS(extra_part);
        PUTS(eol);
    }
    PUTS("--");
    PUTS(boundary);
    PUTS("--");
    PUTS(eol);
#undef PUTS
#undef PUT
    return n;
}

static void test_multipart_replaces_text_field_quoted_boundary(void **state)
{
    (void)state;
    char body[1024], expected[1024];
    const char *b = "----WebKitFormBoundary7MA4YWxkTrZu0gW";
    size_t body_len = build_multipart(body, sizeof body, b, "\r\n", "50", NULL);
    size_t expected_len = build_multipart(expected, sizeof expected, b, "\r\n", "12", NULL);
    check_rewrite("{\"steps\": 12}", "multipart/form-data; boundary=\"----WebKitFormBoundary7MA4YWxkTrZu0gW\"", body,
                  body_len, expected, expected_len);
    /* an empty value becomes empty content */
    expected_len = build_multipart(expected, sizeof expected, b, "\r\n", "", NULL);
    check_rewrite("{\"steps\": \"\"}", "Multipart/Form-Data;charset=utf-8; BOUNDARY=\"----WebKitFormBoundary7MA4YWxkTrZu0gW\"",
                  body, body_len, expected, expected_len);
}

static void test_multipart_adds_missing_field_unquoted_boundary(void **state)
{
    (void)state;
    char body[1024], expected[1024];
    const char *b = "xYzZY";
    size_t body_len = build_multipart(body, sizeof body, b, "\r\n", "50", NULL);
    size_t expected_len = build_multipart(expected, sizeof expected, b, "\r\n", "50",
                                          "Content-Disposition: form-data; name=\"pipeline_type\"\r\n\r\n512");
    check_rewrite("{\"pipeline_type\": \"512\"}", "multipart/form-data; boundary=xYzZY", body, body_len, expected,
                  expected_len);
    /* replace and add at once; numbers rendered as JSON renders them */
    expected_len = build_multipart(expected, sizeof expected, b, "\r\n", "4",
                                   "Content-Disposition: form-data; name=\"texture_size\"\r\n\r\n1024");
    check_rewrite("{\"steps\": 4, \"texture_size\": 1024}", "multipart/form-data; boundary=xYzZY", body, body_len,
                  expected, expected_len);
    /* a key with a quote is escaped in the new part's name */
    expected_len = build_multipart(expected, sizeof expected, b, "\r\n", "50",
                                   "Content-Disposition: form-data; name=\"a\\\"b\"\r\n\r\ntrue");
    check_rewrite("{\"a\\\"b\": true}", "multipart/form-data; boundary=xYzZY", body, body_len, expected,
                  expected_len);
}

static void test_multipart_file_part_is_never_changed(void **state)
{
    (void)state;
    char body[1024];
    const char *b = "xYzZY";
    size_t body_len = build_multipart(body, sizeof body, b, "\r\n", "50", NULL);
    /* "image" names only a file part: nothing changes, nothing is added */
    check_rewrite("{\"image\": \"small.png\"}", "multipart/form-data; boundary=xYzZY", body, body_len, body, body_len);
    check_rewrite("{\"image\": null}", "multipart/form-data; boundary=xYzZY", body, body_len, body, body_len);
}

static size_t count_bare_lf(const char *p, size_t len)
{
    size_t bare = 0;
    for (size_t i = 0; i < len; i++)
        if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r'))
            bare++;
    return bare;
}

static void test_multipart_keeps_crlf(void **state)
{
    (void)state;
    char body[1024];
    size_t body_len = build_multipart(body, sizeof body, "bnd", "\r\n", "50", NULL);
    cJSON *set = parse("{\"steps\": 8, \"new\": \"a\\r\\nb\"}");
    char *out = NULL, why[128] = "";
    size_t out_len = 0;
    assert_int_equal(degrade_rewrite(set, "multipart/form-data; boundary=bnd", body, body_len, &out, &out_len, why,
                                     sizeof why),
                     0);
    /* the only bare LF is the one inside the PNG signature, as sent */
    assert_int_equal(count_bare_lf(body, body_len), 1);
    assert_int_equal(count_bare_lf(out, out_len), 1);
    assert_true(out_len > body_len);
    const char *added = "\r\n--bnd\r\nContent-Disposition: form-data; name=\"new\"\r\n\r\na\r\nb\r\n--bnd--\r\n";
    const char *replaced = "name=steps\r\n\r\n8\r\n--bnd\r\n";
    assert_non_null(memmem(out, out_len, added, strlen(added)));
    assert_non_null(memmem(out, out_len, replaced, strlen(replaced)));
    free(out);
    cJSON_Delete(set);
}

static void test_multipart_bare_lf_body(void **state)
{
    (void)state;
    char body[1024], expected[1024];
    size_t body_len = build_multipart(body, sizeof body, "bnd", "\n", "50", NULL);
    size_t expected_len =
        build_multipart(expected, sizeof expected, "bnd", "\n", "12", "Content-Disposition: form-data; name=\"x\"\n\ny");
    check_rewrite("{\"steps\": 12, \"x\": \"y\"}", "multipart/form-data; boundary=bnd", body, body_len, expected,
                  expected_len);
}

static void test_multipart_preamble_epilogue_and_removal(void **state)
{
    (void)state;
    const char *ct = "multipart/form-data; boundary=B";
    check_rewrite_str("{\"a\": \"9\"}", ct,
                      "preamble\r\n--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\nepilogue",
                      "preamble\r\n--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n9\r\n--B--\r\nepilogue");
    /* null removes the part, delimiter line included */
    check_rewrite_str("{\"a\": null}", ct,
                      "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n"
                      "--B\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n2\r\n--B--\r\n",
                      "--B\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n2\r\n--B--\r\n");
    /* a body with no parts gets its first one */
    check_rewrite_str("{\"a\": 1}", ct, "--B--\r\n", "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\n");
    /* a line that starts with the boundary but goes on is content, not a delimiter */
    check_rewrite_str("{\"a\": 2}", ct,
                      "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--Bnot\r\n--B--",
                      "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n2\r\n--B--");
}

static void test_multipart_refusals(void **state)
{
    (void)state;
    const char *body = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\n";
    check_refused("{\"a\": 1}", "multipart/form-data", body, strlen(body), "boundary");
    check_refused("{\"a\": 1}", "multipart/form-data; boundary=\"\"", body, strlen(body), "boundary");
    check_refused("{\"a\": 1}", "multipart/form-data; boundary=\"B", body, strlen(body), "boundary");
    check_refused("{\"a\": 1}", "multipart/form-data; boundary=C", body, strlen(body), "delimiter");
    const char *truncated = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n";
    check_refused("{\"a\": 1}", "multipart/form-data; boundary=B", truncated, strlen(truncated), "closing");
    check_refused("{\"a\": \"x\\r\\n--B--\"}", "multipart/form-data; boundary=B", body, strlen(body), "boundary");
}

static void test_unknown_content_type_non_json_body(void **state)
{
    (void)state;
    check_refused("{\"steps\": 12}", "text/plain", "steps=50", 8, "text/plain");
    static const char png[] = "\x89PNG\r\n\x1a\n\0\0";
    check_refused("{\"steps\": 12}", "image/png", png, sizeof png - 1, "image/png");
    check_refused("{\"steps\": 12}", NULL, "steps=50", 8, "content type");
    check_refused("{\"steps\": 12}", NULL, "[1]", 3, "content type");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_rules_500_cuda_oom),
        cmocka_unit_test(test_default_rules_500_other_error_is_not_oom),
        cmocka_unit_test(test_default_rules_json200_success_false),
        cmocka_unit_test(test_default_rules_success_true_is_not_oom),
        cmocka_unit_test(test_status_list_and_regex_both_needed),
        cmocka_unit_test(test_status_list_alone_needs_no_text),
        cmocka_unit_test(test_json_rule_with_body_matches),
        cmocka_unit_test(test_json_rule_without_body_matches),
        cmocka_unit_test(test_header_rule),
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_regex_is_case_insensitive),
        cmocka_unit_test(test_regex_window_and_nul_bytes),
        cmocka_unit_test(test_invalid_json_with_json_rule),
        cmocka_unit_test(test_json_merge_replaces_value),
        cmocka_unit_test(test_json_merge_nested_objects),
        cmocka_unit_test(test_json_merge_null_removes),
        cmocka_unit_test(test_json_duplicate_members_last_one_wins),
        cmocka_unit_test(test_json_object_without_json_content_type),
        cmocka_unit_test(test_json_content_type_with_non_object_body),
        cmocka_unit_test(test_set_must_be_an_object),
        cmocka_unit_test(test_form_replaces_existing_field),
        cmocka_unit_test(test_form_adds_missing_field),
        cmocka_unit_test(test_form_encodes_values),
        cmocka_unit_test(test_form_compares_decoded_names),
        cmocka_unit_test(test_form_set_with_a_key_twice_uses_the_last),
        cmocka_unit_test(test_form_growth_is_bounded),
        cmocka_unit_test(test_form_values_null_numbers_booleans),
        cmocka_unit_test(test_multipart_replaces_text_field_quoted_boundary),
        cmocka_unit_test(test_multipart_adds_missing_field_unquoted_boundary),
        cmocka_unit_test(test_multipart_file_part_is_never_changed),
        cmocka_unit_test(test_multipart_keeps_crlf),
        cmocka_unit_test(test_multipart_bare_lf_body),
        cmocka_unit_test(test_multipart_preamble_epilogue_and_removal),
        cmocka_unit_test(test_multipart_refusals),
        cmocka_unit_test(test_unknown_content_type_non_json_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
