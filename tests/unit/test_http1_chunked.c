/*
 * test_http1_chunked: unit tests for the chunked body decoder (src/http/http1_chunked.c).
 *
 * Every input is decoded whole, one byte at a time and split in two at every position, and
 * the three must agree on the answer, the bytes consumed, the payload and the error code;
 * every payload span must lie inside the input of its feed. Covers valid bodies (sizes,
 * extensions, trailers, what follows the body left alone), feeding after the end and after
 * an error, each rejection with its error code (table chunk_rejects), the bounds on chunk
 * extensions and the trailer section, and a chunked request followed by the next request.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "http/http1.h"

/* Parse the head of a request into *msg (its headers point into a static array). */
static int parse_request(const char *text, size_t len, http1_msg_t *msg)
{
    static http1_header_t hdrs[16];
    http1_limits_t limits = {1024, 16};
    http1_error_t err;
    size_t scan_from = 0;
    memset(msg, 0, sizeof *msg);
    return http1_parse_request(text, len, &limits, msg, hdrs, &scan_from, &err);
}

typedef struct collected {
    char data[512];
    size_t len;
    size_t calls;
    const char *in_start; /* the input of the current feed: spans must lie inside it */
    size_t in_len;
    bool outside;
} collected_t;

static void collect(void *ctx, const char *data, size_t len)
{
    collected_t *c = ctx;
    c->calls++;
    if (data < c->in_start || data + len > c->in_start + c->in_len)
        c->outside = true;
    if (c->len + len <= sizeof c->data) {
        memcpy(c->data + c->len, data, len);
        c->len += len;
    }
}

typedef struct chunk_result {
    int rc;
    size_t consumed; /* total over all feeds, or the error position in the whole input */
    http1_errcode_t code;
    uint64_t total;
    collected_t out;
} chunk_result_t;

/* Feed text[0..len) in pieces of `step` bytes (0: at once; SIZE_MAX: split once at `split`). */
static void decode(const char *text, size_t len, size_t step, size_t split, size_t max_trailer,
                   chunk_result_t *r)
{
    http1_chunked_t d;
    http1_chunked_init(&d, max_trailer);
    memset(r, 0, sizeof *r);
    size_t off = 0;
    r->rc = HTTP1_NEED_MORE;
    while (r->rc == HTTP1_NEED_MORE && off < len) {
        size_t n = len - off;
        if (step == SIZE_MAX)
            n = off < split ? split - off : len - off;
        else if (step && n > step)
            n = step;
        size_t consumed = 0;
        http1_error_t err = {HTTP1_E_NONE, 0, NULL};
        r->out.in_start = text + off;
        r->out.in_len = n;
        r->rc = http1_chunked_feed(&d, text + off, n, &consumed, collect, &r->out, &err);
        assert_true(consumed <= n);
        if (r->rc == HTTP1_ERROR) {
            r->code = err.code;
            assert_int_equal(err.pos, consumed);
            assert_non_null(err.what);
        }
        if (r->rc == HTTP1_NEED_MORE)
            assert_int_equal(consumed, n);
        off += consumed;
    }
    r->consumed = off;
    r->total = d.total;
    assert_false(r->out.outside);
}

static void assert_same_decode(const char *label, const chunk_result_t *a, const chunk_result_t *b)
{
    if (a->rc != b->rc || a->consumed != b->consumed || a->code != b->code ||
        a->total != b->total || a->out.len != b->out.len ||
        memcmp(a->out.data, b->out.data, a->out.len) != 0)
        fail_msg("%s: pieces and whole disagree (rc %d/%d consumed %zu/%zu code %s/%s)", label,
                 a->rc, b->rc, a->consumed, b->consumed, http1_errcode_name(a->code),
                 http1_errcode_name(b->code));
}

/* Whole == one byte at a time == every two-way split. */
static void decode_all_ways(const char *label, const char *text, size_t len, size_t max_trailer,
                            chunk_result_t *whole)
{
    chunk_result_t other;
    decode(text, len, 0, 0, max_trailer, whole);
    decode(text, len, 1, 0, max_trailer, &other);
    assert_same_decode(label, whole, &other);
    for (size_t k = 0; k <= len; k++) {
        decode(text, len, SIZE_MAX, k, max_trailer, &other);
        assert_same_decode(label, whole, &other);
    }
}

static void test_chunked_valid(void **state)
{
    (void)state;
    const char *text = "5\r\nhello\r\n6;name=\"v a\";x\r\n world\r\n00a\r\n0123456789\r\n"
                       "0;last\r\nX-Checksum: abc\r\nX-Other:\r\n\r\nNEXT";
    chunk_result_t r;
    decode_all_ways("valid", text, strlen(text), 0, &r);
    assert_int_equal(r.rc, HTTP1_OK);
    assert_int_equal(r.consumed, strlen(text) - 4);
    assert_int_equal(r.total, 21);
    assert_int_equal(r.out.len, 21);
    assert_memory_equal(r.out.data, "hello world0123456789", 21);

    /* uppercase hex, minimal body */
    const char *upper = "A\r\n0123456789\r\n0\r\n\r\n";
    decode_all_ways("upper", upper, strlen(upper), 0, &r);
    assert_int_equal(r.rc, HTTP1_OK);
    assert_int_equal(r.total, 10);
    const char *empty = "0\r\n\r\n";
    decode_all_ways("empty", empty, strlen(empty), 0, &r);
    assert_int_equal(r.rc, HTTP1_OK);
    assert_int_equal(r.consumed, 5);
    assert_int_equal(r.out.calls, 0);

    /* incomplete: NEED_MORE with everything consumed */
    decode(text, 20, 0, 0, 0, &r);
    assert_int_equal(r.rc, HTTP1_NEED_MORE);
    assert_int_equal(r.consumed, 20);

    /* zero copy: one call whose span is the payload inside the input */
    const char *one = "b\r\nhello world\r\n0\r\n\r\n";
    decode(one, strlen(one), 0, 0, 0, &r);
    assert_int_equal(r.out.calls, 1);
}

static void test_chunked_after_end_and_error(void **state)
{
    (void)state;
    http1_chunked_t d;
    http1_error_t err;
    size_t consumed = 99;
    collected_t out;
    memset(&out, 0, sizeof out);
    out.in_start = "0\r\n\r\n";
    out.in_len = 5;
    http1_chunked_init(&d, 0);
    assert_int_equal(http1_chunked_feed(&d, "0\r\n\r\n", 5, &consumed, collect, &out, &err), HTTP1_OK);
    assert_int_equal(consumed, 5);
    assert_int_equal(http1_chunked_feed(&d, "1\r\n", 3, &consumed, collect, &out, &err), HTTP1_OK);
    assert_int_equal(consumed, 0);

    http1_chunked_init(&d, 0);
    assert_int_equal(http1_chunked_feed(&d, "x", 1, &consumed, NULL, NULL, &err), HTTP1_ERROR);
    assert_int_equal(err.code, HTTP1_E_BAD_CHUNK_SIZE);
    memset(&err, 0, sizeof err);
    assert_int_equal(http1_chunked_feed(&d, "0\r\n\r\n", 5, &consumed, NULL, NULL, &err),
                     HTTP1_ERROR);
    assert_int_equal(err.code, HTTP1_E_BAD_CHUNK_SIZE);

    /* a zeroed decoder (init forgotten) still works with the default bounds */
    memset(&d, 0, sizeof d);
    assert_int_equal(http1_chunked_feed(&d, "1\r\na\r\n0\r\n\r\n", 11, &consumed, NULL, NULL, &err),
                     HTTP1_OK);
    assert_int_equal(d.total, 1);

    /* a 2^53 chunk size is accepted (the data is simply not there yet) */
    http1_chunked_init(&d, 0);
    assert_int_equal(http1_chunked_feed(&d, "20000000000000\r\nab", 18, &consumed, NULL, NULL, &err),
                     HTTP1_NEED_MORE);
    assert_int_equal(d.total, 2);
}

typedef struct chunk_reject {
    const char *label;
    const char *text;
    size_t len;
    size_t max_trailer;
    http1_errcode_t code;
    size_t pos;
} chunk_reject_t;

static const chunk_reject_t chunk_rejects[] = {
    {"empty size", "\r\nhello\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 0},
    {"non-hex size", "g\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 0},
    {"0x prefix", "0x5\r\nhello\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 1},
    {"minus", "-1\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 0},
    {"plus", "+1\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 0},
    {"leading space", " 1\r\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 0},
    {"trailing space", "1 \r\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 1},
    {"tab before ext", "1\t;a\r\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 1},
    {"over 2^53", "20000000000001\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 13},
    {"over 2^64", "fffffffffffffffff\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 13},
    {"too many zeros", "00000000000000001\r\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 16},
    {"bare LF after size", "1\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 1},
    {"bare CR after size", "1\rx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 2},
    {"second size bad", "1\r\nx\r\nz\r\n", 0, 0, HTTP1_E_BAD_CHUNK_SIZE, 6},
    {"data too long", "5\r\nhelloX\r\n0\r\n\r\n", 0, 0, HTTP1_E_BAD_CHUNK_END, 8},
    {"data then LF", "5\r\nhello\n0\r\n\r\n", 0, 0, HTTP1_E_BAD_CHUNK_END, 8},
    {"data then CR only", "5\r\nhello\r0\r\n\r\n", 0, 0, HTTP1_E_BAD_CHUNK_END, 9},
    {"LF in extension", "1;a\nb\r\nx\r\n", 0, 0, HTTP1_E_BAD_CHUNK_EXT, 3},
    {"NUL in extension", "1;a\0b\r\nx\r\n", 10, 0, HTTP1_E_BAD_CHUNK_EXT, 3},
    {"trailer obs-fold", "0\r\nA: b\r\n c\r\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 9},
    {"trailer without colon", "0\r\nAbc\r\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 6},
    {"trailer space before colon", "0\r\nA : b\r\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 4},
    {"trailer control byte", "0\r\nA: \x01\r\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 6},
    {"trailer bare LF", "0\r\nA: b\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 7},
    {"trailer bare CR", "0\r\nA: b\rc\r\n\r\n", 0, 0, HTTP1_E_BAD_TRAILER, 8},
    {"final CR without LF", "0\r\n\rX", 0, 0, HTTP1_E_BAD_TRAILER, 4},
    {"final bare LF", "0\r\n\n", 0, 0, HTTP1_E_BAD_TRAILER, 3},
    {"trailer too large", "0\r\nX-Long: 0123456789\r\n\r\n", 0, 16, HTTP1_E_TRAILER_TOO_LARGE, 19},
};

static void test_chunked_rejects(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof chunk_rejects / sizeof chunk_rejects[0]; i++) {
        const chunk_reject_t *c = &chunk_rejects[i];
        size_t len = c->len ? c->len : strlen(c->text);
        chunk_result_t r;
        decode_all_ways(c->label, c->text, len, c->max_trailer, &r);
        if (r.rc != HTTP1_ERROR || r.code != c->code || r.consumed != c->pos)
            fail_msg("%s: want %s at %zu, got rc %d %s at %zu", c->label,
                     http1_errcode_name(c->code), c->pos, r.rc, http1_errcode_name(r.code),
                     r.consumed);
    }
}

static void test_chunked_ext_too_long(void **state)
{
    (void)state;
    char text[4200];
    memset(text, 'a', sizeof text);
    memcpy(text, "1;", 2);
    chunk_result_t r;
    decode(text, sizeof text, 0, 0, 0, &r);
    assert_int_equal(r.rc, HTTP1_ERROR);
    assert_int_equal(r.code, HTTP1_E_BAD_CHUNK_EXT);
    assert_int_equal(r.consumed, 2 + 4096);
    /* 4096 bytes of extension is still fine */
    memcpy(text + 2 + 4096, "\r\nx\r\n0\r\n\r\n", 10);
    decode(text, 2 + 4096 + 10, 0, 0, 0, &r);
    assert_int_equal(r.rc, HTTP1_OK);
    assert_int_equal(r.total, 1);
}

/* A chunked request whose body is followed by a pipelined request. */
static void test_chunked_request_then_next(void **state)
{
    (void)state;
    const char *text = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "3\r\nabc\r\n0\r\n\r\n"
                       "GET /b HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t len = strlen(text);
    http1_msg_t msg;
    assert_int_equal(parse_request(text, len, &msg), HTTP1_OK);
    assert_int_equal(msg.body, HTTP1_BODY_CHUNKED);
    chunk_result_t r;
    decode(text + msg.head_len, len - msg.head_len, 0, 0, 0, &r);
    assert_int_equal(r.rc, HTTP1_OK);
    assert_memory_equal(r.out.data, "abc", 3);
    size_t next = msg.head_len + r.consumed;
    assert_int_equal(parse_request(text + next, len - next, &msg), HTTP1_OK);
    assert_true(http1_span_eq(text + next, msg.target, "/b"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_valid),
        cmocka_unit_test(test_chunked_after_end_and_error),
        cmocka_unit_test(test_chunked_rejects),
        cmocka_unit_test(test_chunked_ext_too_long),
        cmocka_unit_test(test_chunked_request_then_next),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
