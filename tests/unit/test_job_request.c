/*
 * test_job_request: the POST /v1/jobs body parser (src/jobstore/job_request.c).
 * Covers a full valid job, defaults, JSON and base64 bodies with their content types, each
 * refusal naming its field (unknown and repeated members, bad model/path/method, refused and
 * malformed headers, both bodies, bad base64, limits, priority, deadline, trailing bytes),
 * that a refused parse leaves nothing to free, and the base64 decoder on its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "jobstore/job_request.h"

static const job_request_limits_t lim = {.max_body = 1024, .max_header_bytes = 256};

static int parse(const char *json, job_request_t *r, char *err, size_t errlen)
{
    return job_request_parse(json, strlen(json), &lim, r, err, errlen);
}

static void expect_error(const char *json, const char *field)
{
    job_request_t r;
    char err[512] = "";
    if (parse(json, &r, err, sizeof err) != -1)
        fail_msg("accepted: %s", json);
    if (!strstr(err, field))
        fail_msg("error \"%s\" does not name \"%s\" (input %s)", err, field, json);
    assert_null(r.model);
    assert_null(r.path);
    assert_null(r.headers);
    assert_null(r.body);
}

static void test_full_job(void **state)
{
    (void)state;
    job_request_t r;
    char err[512];
    assert_int_equal(parse("{\"model\":\"trellis\",\"path\":\"/generate?x=1\",\"method\":\"PUT\","
                           "\"headers\":{\"X-Trace\":\"a b\\tc\"},\"body\":{\"steps\": 12},"
                           "\"priority\":7,\"deadline\":\"10m\"}",
                           &r, err, sizeof err),
                     0);
    assert_string_equal(r.model, "trellis");
    assert_string_equal(r.path, "/generate?x=1");
    assert_string_equal(r.method, "PUT");
    assert_int_equal(r.n_headers, 1);
    assert_string_equal(r.headers[0].name, "X-Trace");
    assert_string_equal(r.headers[0].value, "a b\tc");
    assert_string_equal(job_request_header(&r, "x-trace"), "a b\tc");
    assert_string_equal(r.body, "{\"steps\":12}");
    assert_int_equal(r.body_len, strlen("{\"steps\":12}"));
    assert_true(r.body_is_json);
    assert_string_equal(r.content_type, "application/json");
    assert_int_equal(r.priority, 7);
    assert_int_equal(r.deadline_ms, 600000);
    job_request_free(&r);
    assert_null(r.model);
}

static void test_defaults_and_base64(void **state)
{
    (void)state;
    job_request_t r;
    char err[512];
    assert_int_equal(parse("{\"model\":\"w\",\"path\":\"/\"}", &r, err, sizeof err), 0);
    assert_string_equal(r.method, "POST");
    assert_null(r.body);
    assert_int_equal(r.body_len, 0);
    assert_null(r.content_type);
    assert_int_equal(r.priority, -1);
    assert_int_equal(r.deadline_ms, 0);
    job_request_free(&r);

    assert_int_equal(parse("{\"model\":\"w\",\"path\":\"/b\",\"body_base64\":\"AAEC/w==\"}", &r, err, sizeof err), 0);
    assert_int_equal(r.body_len, 4);
    assert_memory_equal(r.body, "\x00\x01\x02\xff", 4);
    assert_false(r.body_is_json);
    assert_string_equal(r.content_type, "application/octet-stream");
    job_request_free(&r);

    /* a Content-Type header wins over the defaults */
    assert_int_equal(parse("{\"model\":\"w\",\"path\":\"/b\",\"body_base64\":\"YQ==\",\"headers\":{\"content-type\":\"image/png\"}}",
                           &r, err, sizeof err),
                     0);
    assert_string_equal(r.content_type, "image/png");
    job_request_free(&r);

    /* "body": null is no body */
    assert_int_equal(parse("{\"model\":\"w\",\"path\":\"/b\",\"body\":null}", &r, err, sizeof err), 0);
    assert_null(r.body);
    job_request_free(&r);
}

static void test_refusals_name_the_field(void **state)
{
    (void)state;
    expect_error("", "empty");
    expect_error("[]", "object");
    expect_error("{\"model\":\"w\",\"path\":\"/a\"} x", "JSON");
    expect_error("{\"path\":\"/a\"}", "model");
    expect_error("{\"model\":\"\",\"path\":\"/a\"}", "model");
    expect_error("{\"model\":5,\"path\":\"/a\"}", "model");
    expect_error("{\"model\":\"w\"}", "path");
    expect_error("{\"model\":\"w\",\"path\":\"a\"}", "path");
    expect_error("{\"model\":\"w\",\"path\":\"/a b\"}", "path");
    expect_error("{\"model\":\"w\",\"path\":\"/a#frag\"}", "path");
    expect_error("{\"model\":\"w\",\"path\":\"/a/../admin\"}", "dot segment");
    expect_error("{\"model\":\"w\",\"path\":\"/a/%2E%2e/admin\"}", "dot segment");
    expect_error("{\"model\":\"w\",\"path\":\"/a\\u0000\"}", "NUL");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"extra\":1}", "extra");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"path\":\"/b\"}", "given twice");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"method\":\"get\"}", "method");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"method\":\"G T\"}", "method");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"method\":\"CONNECT\"}", "method");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":[]}", "headers");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X A\":\"1\"}}", "header name");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-A\":1}}", "headers.X-A");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-A\":\"a\\r\\nX-B: b\"}}", "headers.X-A");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-A\":\"a\\u0000\"}}", "NUL");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"Content-Length\":\"5\"}}", "Content-Length");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"transfer-encoding\":\"chunked\"}}", "transfer-encoding");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"Host\":\"h\"}}", "Host");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"Connection\":\"close\"}}", "Connection");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-Vramd-Priority\":\"9\"}}", "X-Vramd-Priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-A\":\"1\",\"x-a\":\"2\"}}", "twice");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"body\":1,\"body_base64\":\"YQ==\"}", "not both");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"body_base64\":\"YQ=\"}", "body_base64");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"body_base64\":\"YR==\"}", "body_base64");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"body_base64\":\"Y Q==\"}", "body_base64");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"priority\":10}", "priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"priority\":-1}", "priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"priority\":2.5}", "priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"priority\":1e300}", "priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"priority\":\"5\"}", "priority");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"deadline\":\"0s\"}", "deadline");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"deadline\":\"soon\"}", "deadline");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"deadline\":\"31d\"}", "deadline");
    expect_error("{\"model\":\"w\",\"path\":\"/a\",\"deadline\":30}", "deadline");
}

static void test_limits(void **state)
{
    (void)state;
    char big[2048 + 64];
    char body[1100];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    snprintf(big, sizeof big, "{\"model\":\"w\",\"path\":\"/a\",\"body\":\"%s\"}", body);
    expect_error(big, "max_body");
    char hdr[400];
    memset(hdr, 'v', 300);
    hdr[300] = '\0';
    snprintf(big, sizeof big, "{\"model\":\"w\",\"path\":\"/a\",\"headers\":{\"X-A\":\"%s\"}}", hdr);
    expect_error(big, "headers");
}

static void test_base64_decoder(void **state)
{
    (void)state;
    unsigned char out[16];
    assert_int_equal(job_base64_decode("", 0, out, sizeof out), 0);
    assert_int_equal(job_base64_decode("TWFu", 4, out, sizeof out), 3);
    assert_memory_equal(out, "Man", 3);
    assert_int_equal(job_base64_decode("TWE=", 4, out, sizeof out), 2);
    assert_int_equal(job_base64_decode("TQ==", 4, out, sizeof out), 1);
    assert_int_equal(job_base64_decode("TQ=", 3, out, sizeof out), -1);
    assert_int_equal(job_base64_decode("T===", 4, out, sizeof out), -1);
    assert_int_equal(job_base64_decode("TQ==TWFu", 8, out, sizeof out), -1);
    assert_int_equal(job_base64_decode("TR==", 4, out, sizeof out), -1); /* not canonical */
    assert_int_equal(job_base64_decode("TWFuTWFu", 8, out, 5), -1);     /* over max */
    assert_int_equal(job_base64_decode("TW-u", 4, out, sizeof out), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_job),
        cmocka_unit_test(test_defaults_and_base64),
        cmocka_unit_test(test_refusals_name_the_field),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_base64_decoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
