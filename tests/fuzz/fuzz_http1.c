/*
 * fuzz_http1: libFuzzer entry for the HTTP/1.x parser and chunked decoder (src/http/http1.c).
 *
 * For each input it:
 *   1. parses it as a request and as a response (request_was_head from a hash bit), whole,
 *      under two sets of limits, and checks the invariants of every OK answer (head ends
 *      in CRLF CRLF within the limit, spans inside the head, header count bounded) while
 *      calling the helpers on the result;
 *   2. feeds the same input again as growing prefixes split at two points derived from
 *      the data, with one scan_from, and checks each answer is NEED_MORE or exactly the
 *      answer of the whole input (code and position, or every field of the message);
 *   3. parses it once more with a scan_from derived from the data (a caller bug): any
 *      answer may come back, but an OK must still be a well-formed head;
 *   4. runs the chunked decoder over what follows the head (the whole input when no head
 *      parsed) at once, one byte at a time and split at a derived point, and checks the
 *      three agree on the answer, bytes consumed, payload (a hash of it) and error, and
 *      that every payload span lies inside the input of its feed.
 * Any disagreement aborts, which libFuzzer (or the replay main) reports as a crash.
 * No global state: the same input always does the same work.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_HEADERS 24

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz_http1: check failed at line %d: %s\n", __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

typedef struct outcome {
    int rc;
    http1_msg_t msg;
    http1_header_t hdrs[FUZZ_MAX_HEADERS];
    http1_error_t err;
} outcome_t;

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int parse_prefix(const char *buf, size_t len, bool is_request, bool head,
                        const http1_limits_t *limits, size_t *scan_from, outcome_t *o)
{
    o->rc = is_request ? http1_parse_request(buf, len, limits, &o->msg, o->hdrs, scan_from,
                                             &o->err)
                       : http1_parse_response(buf, len, limits, head, &o->msg, o->hdrs,
                                              scan_from, &o->err);
    return o->rc;
}

static void check_span(http1_span_t s, size_t head_len)
{
    CHECK((size_t)s.off + s.len <= head_len);
}

static void check_ok_message(const char *buf, size_t len, bool is_request,
                             const http1_limits_t *limits, const outcome_t *o)
{
    const http1_msg_t *m = &o->msg;
    CHECK(m->head_len >= 4 && m->head_len <= len && m->head_len <= limits->max_header_bytes);
    CHECK(memcmp(buf + m->head_len - 4, "\r\n\r\n", 4) == 0);
    CHECK(memmem(buf, m->head_len - 2, "\r\n\r\n", 4) == NULL); /* the first empty line */
    CHECK(m->n_headers <= limits->max_headers && m->headers == o->hdrs);
    CHECK(m->version_minor == 0 || m->version_minor == 1);
    if (is_request) {
        CHECK(m->method.len > 0 && m->target.len > 0);
        check_span(m->method, m->head_len);
        check_span(m->target, m->head_len);
        CHECK(m->body != HTTP1_BODY_UNTIL_CLOSE);
    } else {
        CHECK(m->status >= 100 && m->status <= 599);
        check_span(m->reason, m->head_len);
    }
    if (m->body == HTTP1_BODY_LENGTH)
        CHECK(m->content_length <= HTTP1_MAX_CONTENT_LENGTH);
    else
        CHECK(m->content_length == 0);
    for (size_t i = 0; i < m->n_headers; i++) {
        const http1_header_t *h = &m->headers[i];
        check_span(h->name, m->head_len);
        check_span(h->value, m->head_len);
        CHECK(h->name.len > 0);
        /* the helpers must agree with the spans and never read outside them */
        const http1_header_t *first = http1_find_header(buf, m, "content-length");
        CHECK(first == NULL || http1_header_is(buf, first, "Content-Length"));
        (void)http1_is_hop_by_hop(buf, m, h);
        (void)http1_value_has_token(buf, h->value, "close");
        (void)http1_value_has_token(buf, h->value, "chunked");
        CHECK(http1_span_ieq(buf, h->name, "host") == http1_header_is(buf, h, "HOST"));
    }
    if (is_request && m->version_minor == 1)
        CHECK(http1_find_header(buf, m, "host") != NULL);
}

static void check_same(const outcome_t *a, const outcome_t *b)
{
    CHECK(a->rc == b->rc);
    if (a->rc == HTTP1_ERROR) {
        CHECK(a->err.code == b->err.code && a->err.pos == b->err.pos);
        return;
    }
    if (a->rc != HTTP1_OK)
        return;
    const http1_msg_t *x = &a->msg, *y = &b->msg;
    CHECK(x->method.off == y->method.off && x->method.len == y->method.len);
    CHECK(x->target.off == y->target.off && x->target.len == y->target.len);
    CHECK(x->status == y->status && x->reason.off == y->reason.off &&
          x->reason.len == y->reason.len);
    CHECK(x->version_minor == y->version_minor && x->head_len == y->head_len);
    CHECK(x->n_headers == y->n_headers && x->body == y->body &&
          x->content_length == y->content_length);
    CHECK(x->keep_alive == y->keep_alive && x->expect_continue == y->expect_continue &&
          x->upgrade == y->upgrade);
    for (size_t i = 0; i < x->n_headers; i++) {
        CHECK(x->headers[i].name.off == y->headers[i].name.off);
        CHECK(x->headers[i].name.len == y->headers[i].name.len);
        CHECK(x->headers[i].value.off == y->headers[i].value.off);
        CHECK(x->headers[i].value.len == y->headers[i].value.len);
    }
}

/* Whole input, then prefixes [0,k1) [0,k2) [0,len) with one scan_from. Returns the whole
 * input's outcome in *whole. */
static void parse_all_ways(const char *buf, size_t len, bool is_request, bool head,
                           const http1_limits_t *limits, size_t k1, size_t k2, outcome_t *whole)
{
    size_t scan_from = 0;
    parse_prefix(buf, len, is_request, head, limits, &scan_from, whole);
    CHECK(whole->rc == HTTP1_OK || whole->rc == HTTP1_NEED_MORE || whole->rc == HTTP1_ERROR);
    if (whole->rc == HTTP1_OK)
        check_ok_message(buf, len, is_request, limits, whole);
    if (whole->rc == HTTP1_ERROR) {
        CHECK(whole->err.what != NULL && whole->err.code != HTTP1_E_NONE);
        CHECK(whole->err.pos <= len);
        CHECK(strcmp(http1_errcode_name(whole->err.code), "unknown") != 0);
    }
    if (whole->rc == HTTP1_NEED_MORE)
        CHECK(len < limits->max_header_bytes && scan_from <= len);

    outcome_t step;
    size_t cuts[3] = {k1, k2, len};
    scan_from = 0;
    for (int i = 0; i < 3; i++) {
        size_t before = scan_from;
        parse_prefix(buf, cuts[i], is_request, head, limits, &scan_from, &step);
        if (step.rc == HTTP1_NEED_MORE) {
            CHECK(scan_from >= before && scan_from <= cuts[i]);
            CHECK(i < 2 || whole->rc == HTTP1_NEED_MORE);
            continue;
        }
        check_same(&step, whole);
    }
}

/* ------------------------------------------------------------------ chunked */

typedef struct sink {
    const char *lo, *hi; /* the input of the current feed */
    uint64_t hash;
    uint64_t bytes;
} sink_t;

static void on_data(void *ctx, const char *p, size_t n)
{
    sink_t *s = ctx;
    CHECK(n > 0 && p >= s->lo && p + n <= s->hi);
    s->hash = fnv1a(s->hash, (const uint8_t *)p, n);
    s->bytes += n;
}

typedef struct decoded {
    int rc;
    size_t consumed;
    http1_errcode_t code;
    size_t err_pos; /* relative to the whole input */
    uint64_t total;
    sink_t sink;
} decoded_t;

/* step 0: at once; step 1: one byte at a time; otherwise split once at `split`. */
static void decode(const char *in, size_t len, int step, size_t split, size_t max_trailer,
                   decoded_t *r)
{
    http1_chunked_t d;
    http1_chunked_init(&d, max_trailer);
    memset(r, 0, sizeof *r);
    r->sink.hash = 14695981039346656037ULL;
    r->rc = HTTP1_NEED_MORE;
    size_t off = 0;
    while (r->rc == HTTP1_NEED_MORE && off < len) {
        size_t n = len - off;
        if (step == 1)
            n = 1;
        else if (step == 2 && off < split)
            n = split - off;
        size_t consumed = 0;
        http1_error_t err = {HTTP1_E_NONE, 0, NULL};
        r->sink.lo = in + off;
        r->sink.hi = in + off + n;
        r->rc = http1_chunked_feed(&d, in + off, n, &consumed, on_data, &r->sink, &err);
        CHECK(consumed <= n);
        if (r->rc == HTTP1_NEED_MORE)
            CHECK(consumed == n);
        if (r->rc == HTTP1_ERROR) {
            CHECK(err.what != NULL && err.pos == consumed);
            r->code = err.code;
            r->err_pos = off + err.pos;
        }
        off += consumed;
    }
    r->consumed = off;
    r->total = d.total;
    CHECK(r->total == r->sink.bytes);
    if (r->rc == HTTP1_OK) {
        /* a finished decoder stays finished */
        size_t again = 1;
        CHECK(http1_chunked_feed(&d, in, len, &again, on_data, &r->sink, NULL) == HTTP1_OK);
        CHECK(again == 0);
    }
}

static void check_same_decode(const decoded_t *a, const decoded_t *b)
{
    CHECK(a->rc == b->rc && a->consumed == b->consumed && a->total == b->total);
    CHECK(a->sink.hash == b->sink.hash);
    if (a->rc == HTTP1_ERROR)
        CHECK(a->code == b->code && a->err_pos == b->err_pos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    uint64_t h = fnv1a(14695981039346656037ULL, data, size);
    size_t k1 = (size_t)(h % (size + 1));
    size_t k2 = k1 + (size_t)((h >> 24) % (size - k1 + 1));
    bool head = (h >> 60) & 1;
    const http1_limits_t roomy = {2048, FUZZ_MAX_HEADERS};
    const http1_limits_t tight = {96, 4};

    outcome_t req, resp, scratch;
    parse_all_ways(buf, size, true, false, &roomy, k1, k2, &req);
    parse_all_ways(buf, size, false, head, &roomy, k1, k2, &resp);
    parse_all_ways(buf, size, true, false, &tight, k1, k2, &scratch);
    parse_all_ways(buf, size, false, head, &tight, k1, k2, &scratch);

    /* A caller passing a wrong scan_from may get a different early error, but never a
     * memory error or a malformed OK. */
    size_t bogus_scan = (size_t)((h >> 16) % (size + 2));
    parse_prefix(buf, size, true, false, &roomy, &bogus_scan, &scratch);
    if (scratch.rc == HTTP1_OK)
        check_ok_message(buf, size, true, &roomy, &scratch);
    bogus_scan = (size_t)((h >> 16) % (size + 2));
    parse_prefix(buf, size, false, head, &roomy, &bogus_scan, &scratch);
    if (scratch.rc == HTTP1_OK)
        check_ok_message(buf, size, false, &roomy, &scratch);

    size_t body_at = 0;
    if (req.rc == HTTP1_OK)
        body_at = req.msg.head_len;
    else if (resp.rc == HTTP1_OK)
        body_at = resp.msg.head_len;
    const char *body = buf + body_at;
    size_t body_len = size - body_at;
    size_t max_trailer = 16 + (size_t)((h >> 40) % 256);
    size_t split = body_len ? (size_t)((h >> 8) % (body_len + 1)) : 0;

    decoded_t whole, bytewise, two_parts;
    decode(body, body_len, 0, 0, max_trailer, &whole);
    decode(body, body_len, 1, 0, max_trailer, &bytewise);
    decode(body, body_len, 2, split, max_trailer, &two_parts);
    check_same_decode(&whole, &bytewise);
    check_same_decode(&whole, &two_parts);
    if (whole.rc == HTTP1_NEED_MORE)
        CHECK(whole.consumed == body_len);
    return 0;
}
