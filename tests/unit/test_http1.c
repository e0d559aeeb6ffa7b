/*
 * test_http1: unit tests for the strict HTTP/1.x head parser (src/http/http1.c). The chunked
 * decoder (src/http/http1_chunked.c) is tested in test_http1_chunked.c.
 *
 * Every rejection the header promises is checked for its error code and position (tables
 * reject_requests / reject_responses), valid requests and responses of each body framing
 * (tables accept_requests / accept_responses), pipelining, the incremental contract (every
 * table entry is also fed as every prefix with a shared scan_from and must answer NEED_MORE
 * until it answers exactly what the whole input answers), and the helpers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "http/http1.h"

#define MAX_HEADERS 16

static const http1_limits_t default_limits = {1024, MAX_HEADERS};

typedef struct parsed {
    int rc;
    http1_msg_t msg;
    http1_header_t hdrs[MAX_HEADERS];
    http1_error_t err;
    size_t scan_from;
} parsed_t;

static int parse(const char *text, size_t len, bool is_request, bool head,
                 const http1_limits_t *limits, parsed_t *p)
{
    memset(p, 0, sizeof *p);
    p->rc = is_request ? http1_parse_request(text, len, limits, &p->msg, p->hdrs, &p->scan_from,
                                             &p->err)
                       : http1_parse_response(text, len, limits, head, &p->msg, p->hdrs,
                                              &p->scan_from, &p->err);
    return p->rc;
}

/* Offset of needle in text[0..len) plus delta; fails the test when absent. */
static size_t offset_of(const char *text, size_t len, const char *needle, size_t delta)
{
    const char *hit = memmem(text, len, needle, strlen(needle));
    if (!hit)
        fail_msg("needle \"%s\" not found in test input", needle);
    return (size_t)(hit - text) + delta;
}

static void assert_same_msg(const char *label, size_t k, const http1_msg_t *a,
                            const http1_msg_t *b)
{
    if (a->method.off != b->method.off || a->method.len != b->method.len ||
        a->target.off != b->target.off || a->target.len != b->target.len ||
        a->status != b->status || a->reason.off != b->reason.off ||
        a->reason.len != b->reason.len || a->version_minor != b->version_minor ||
        a->head_len != b->head_len || a->n_headers != b->n_headers || a->body != b->body ||
        a->content_length != b->content_length || a->keep_alive != b->keep_alive ||
        a->expect_continue != b->expect_continue || a->upgrade != b->upgrade)
        fail_msg("%s: prefix %zu parsed differently from the whole input", label, k);
    for (size_t i = 0; i < a->n_headers; i++)
        if (a->headers[i].name.off != b->headers[i].name.off ||
            a->headers[i].name.len != b->headers[i].name.len ||
            a->headers[i].value.off != b->headers[i].value.off ||
            a->headers[i].value.len != b->headers[i].value.len)
            fail_msg("%s: prefix %zu: header %zu differs", label, k, i);
}

/*
 * The incremental contract: feed text[0..k) for k = 0..len with one scan_from. Each answer
 * is NEED_MORE until the answer of the whole input appears, then stays that answer (same
 * code and position, or same message). After NEED_MORE, scan_from has moved to the end of
 * the bytes seen (or onto a final CR whose LF is missing): nothing is rescanned.
 */
static void check_every_split(const char *label, const char *text, size_t len, bool is_request,
                              bool head, const http1_limits_t *limits)
{
    parsed_t whole;
    parse(text, len, is_request, head, limits, &whole);
    assert_int_not_equal(whole.rc, HTTP1_NEED_MORE);

    parsed_t step;
    memset(&step, 0, sizeof step);
    size_t scan_from = 0;
    bool answered = false;
    for (size_t k = 0; k <= len; k++) {
        size_t before = scan_from;
        int rc = is_request
                     ? http1_parse_request(text, k, limits, &step.msg, step.hdrs, &scan_from,
                                           &step.err)
                     : http1_parse_response(text, k, limits, head, &step.msg, step.hdrs,
                                            &scan_from, &step.err);
        if (rc == HTTP1_NEED_MORE) {
            if (answered)
                fail_msg("%s: prefix %zu went back to NEED_MORE", label, k);
            if (scan_from < before || scan_from > k ||
                (scan_from < k && !(scan_from == k - 1 && text[k - 1] == '\r')))
                fail_msg("%s: prefix %zu: scan_from %zu does not resume at the end", label, k,
                         scan_from);
            continue;
        }
        answered = true;
        if (rc != whole.rc)
            fail_msg("%s: prefix %zu answered %d, whole input %d", label, k, rc, whole.rc);
        if (rc == HTTP1_ERROR && (step.err.code != whole.err.code || step.err.pos != whole.err.pos))
            fail_msg("%s: prefix %zu: error %s at %zu, whole input %s at %zu", label, k,
                     http1_errcode_name(step.err.code), step.err.pos,
                     http1_errcode_name(whole.err.code), whole.err.pos);
        if (rc == HTTP1_OK) {
            if (k < whole.msg.head_len)
                fail_msg("%s: OK at prefix %zu before the head ended", label, k);
            assert_same_msg(label, k, &step.msg, &whole.msg);
        }
    }
    if (!answered)
        fail_msg("%s: never answered", label);
}

/* ------------------------------------------------------------------ rejected requests */

typedef struct reject_case {
    const char *label;
    const char *text;
    size_t len;            /* 0: strlen(text) */
    http1_errcode_t code;
    const char *pos_at;    /* expected position: offset of this string in text ... */
    size_t pos_delta;      /* ... plus this (when pos_at is NULL: the position itself) */
} reject_case_t;

#define HOST "Host: x\r\n"

static const reject_case_t reject_requests[] = {
    /* smuggling: framing conflicts */
    {"CL then TE", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, HTTP1_E_CL_AND_TE, "Transfer-Encoding", 0},
    {"TE then CL", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
     0, HTTP1_E_CL_AND_TE, "Content-Length", 0},
    {"duplicate identical CL", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\nContent-Length: 5\r\n\r\n",
     0, HTTP1_E_DUPLICATE_CONTENT_LENGTH, "Content-Length: 5\r\n\r\n", 0},
    {"duplicate different CL", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\ncontent-length: 6\r\n\r\n",
     0, HTTP1_E_DUPLICATE_CONTENT_LENGTH, "content-length: 6", 0},
    {"CL plus sign", "POST / HTTP/1.1\r\n" HOST "Content-Length: +5\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "+5", 0},
    {"CL minus sign", "POST / HTTP/1.1\r\n" HOST "Content-Length: -5\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "-5", 0},
    {"CL space inside", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5 5\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "5 5", 0},
    {"CL hex", "POST / HTTP/1.1\r\n" HOST "Content-Length: 0x10\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "0x10", 0},
    {"CL empty", "POST / HTTP/1.1\r\n" HOST "Content-Length: \r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "\r\n\r\n", 0},
    {"CL list", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5, 5\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "5, 5", 0},
    {"CL over 2^53", "POST / HTTP/1.1\r\n" HOST "Content-Length: 9007199254740993\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "9007", 0},
    {"CL over 2^64", "POST / HTTP/1.1\r\n" HOST "Content-Length: 18446744073709551617\r\n\r\n",
     0, HTTP1_E_BAD_CONTENT_LENGTH, "1844", 0},
    {"CL exponent", "POST / HTTP/1.1\r\n" HOST "Content-Length: 1e3\r\n\r\n", 0,
     HTTP1_E_BAD_CONTENT_LENGTH, "1e3", 0},
    /* unknown (well-formed) codings: 501, at the Transfer-Encoding line */
    {"TE gzip", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip\r\n\r\n", 0,
     HTTP1_E_UNKNOWN_TRANSFER_CODING, "Transfer-Encoding", 0},
    {"TE gzip, chunked", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip, chunked\r\n\r\n",
     0, HTTP1_E_UNKNOWN_TRANSFER_CODING, "Transfer-Encoding", 0},
    {"TE identity", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: identity\r\n\r\n", 0,
     HTTP1_E_UNKNOWN_TRANSFER_CODING, "Transfer-Encoding", 0},
    {"TE chunked, identity", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked, identity\r\n\r\n",
     0, HTTP1_E_UNKNOWN_TRANSFER_CODING, "Transfer-Encoding", 0},
    {"TE xchunked", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: xchunked\r\n\r\n", 0,
     HTTP1_E_UNKNOWN_TRANSFER_CODING, "Transfer-Encoding", 0},
    /* ... but every other head error comes first: CL+TE stays a framing error (400) */
    {"TE identity with CL", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: identity\r\nContent-Length: 5\r\n\r\n",
     0, HTTP1_E_CL_AND_TE, "Content-Length", 0},
    {"TE identity without Host", "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 0,
     HTTP1_E_MISSING_HOST, "\r\n\r\n", 2},
    /* malformed coding lists: 400 */
    {"TE chunked, chunked", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked, chunked\r\n\r\n",
     0, HTTP1_E_BAD_TRANSFER_ENCODING, "chunked, chunked", 0},
    {"TE empty element", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip,,chunked\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "gzip", 0},
    {"TE coding with parameter", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip;q=1\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "gzip", 0},
    {"TE identity twice", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, HTTP1_E_BAD_TRANSFER_ENCODING, "Transfer-Encoding: chunked", 0},
    {"TE empty", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding:\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "\r\n\r\n", 0},
    {"TE twice", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, HTTP1_E_BAD_TRANSFER_ENCODING, "Transfer-Encoding: chunked\r\n\r\n", 0},
    {"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "Transfer-Encoding", 0},
    {"TE with space before colon", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding : chunked\r\n\r\n",
     0, HTTP1_E_SPACE_BEFORE_COLON, " : chunked", 0},
    /* header values */
    {"NUL in value", "GET / HTTP/1.1\r\n" HOST "X-A: a\0b\r\n\r\n", 36, HTTP1_E_BAD_HEADER_VALUE,
     "X-A: a", 6},
    {"CR in value", "GET / HTTP/1.1\r\n" HOST "X-A: a\rb\r\n\r\n", 0, HTTP1_E_BARE_CR_OR_LF,
     "\rb", 0},
    {"LF in value", "GET / HTTP/1.1\r\n" HOST "X-A: a\nb\r\n\r\n", 0, HTTP1_E_BARE_CR_OR_LF,
     "\nb", 0},
    {"ESC in value", "GET / HTTP/1.1\r\n" HOST "X-A: a\x1b[0m\r\n\r\n", 0,
     HTTP1_E_BAD_HEADER_VALUE, "\x1b", 0},
    {"DEL in value", "GET / HTTP/1.1\r\n" HOST "X-A: a\x7f\r\n\r\n", 0, HTTP1_E_BAD_HEADER_VALUE,
     "\x7f", 0},
    /* line endings */
    {"bare LF after request line", "GET / HTTP/1.1\n" HOST "\r\n", 0, HTTP1_E_BARE_CR_OR_LF,
     NULL, 14},
    {"bare LF ending a header", "GET / HTTP/1.1\r\nHost: x\n\r\n", 0, HTTP1_E_BARE_CR_OR_LF,
     "\n\r\n", 0},
    {"bare LF ending the head", "GET / HTTP/1.1\r\n" HOST "\n", 0, HTTP1_E_BARE_CR_OR_LF, NULL,
     25},
    {"LF LF", "GET / HTTP/1.1\n\n", 0, HTTP1_E_BARE_CR_OR_LF, NULL, 14},
    {"CR CR LF", "GET / HTTP/1.1\r\nHost: x\r\r\n\r\n", 0, HTTP1_E_BARE_CR_OR_LF, "\r\r", 0},
    {"bare CR starting a line", "GET / HTTP/1.1\r\n" HOST "\rX: y\r\n\r\n", 0,
     HTTP1_E_BARE_CR_OR_LF, "\rX", 0},
    {"bare CR in request line", "GET /\r HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BARE_CR_OR_LF,
     NULL, 5},
    {"empty line before request", "\r\nGET / HTTP/1.1\r\n" HOST "\r\n", 0,
     HTTP1_E_BAD_REQUEST_LINE, NULL, 0},
    /* header lines */
    {"obs-fold space", "GET / HTTP/1.1\r\n" HOST "X-A: a\r\n b\r\n\r\n", 0, HTTP1_E_OBS_FOLD,
     " b", 0},
    {"obs-fold tab", "GET / HTTP/1.1\r\n" HOST "X-A: a\r\n\tb\r\n\r\n", 0, HTTP1_E_OBS_FOLD,
     "\tb", 0},
    {"first header folded", "GET / HTTP/1.1\r\n Host: x\r\n\r\n", 0, HTTP1_E_OBS_FOLD, NULL, 16},
    {"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 0, HTTP1_E_SPACE_BEFORE_COLON,
     " :", 0},
    {"tab before colon", "GET / HTTP/1.1\r\n" HOST "X-A\t: b\r\n\r\n", 0,
     HTTP1_E_SPACE_BEFORE_COLON, "\t:", 0},
    {"paren in name", "GET / HTTP/1.1\r\n" HOST "X(A): 1\r\n\r\n", 0, HTTP1_E_BAD_HEADER_NAME,
     "(", 0},
    {"space in name", "GET / HTTP/1.1\r\n" HOST "X A: 1\r\n\r\n", 0, HTTP1_E_BAD_HEADER_NAME,
     " A", 0},
    {"empty name", "GET / HTTP/1.1\r\n" HOST ": 1\r\n\r\n", 0, HTTP1_E_BAD_HEADER_NAME, ": 1", 0},
    {"no colon", "GET / HTTP/1.1\r\n" HOST "NoColon\r\n\r\n", 0, HTTP1_E_BAD_HEADER_NAME,
     "\r\n\r\n", 0},
    {"non-ASCII name", "GET / HTTP/1.1\r\n" HOST "X\xc3\xa9: 1\r\n\r\n", 0,
     HTTP1_E_BAD_HEADER_NAME, "\xc3", 0},
    {"quote in name", "GET / HTTP/1.1\r\n" HOST "X\"A: 1\r\n\r\n", 0, HTTP1_E_BAD_HEADER_NAME,
     "\"", 0},
    /* request line */
    {"paren in method", "G(T / HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_METHOD, NULL, 1},
    {"leading space", " GET / HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_METHOD, NULL, 0},
    {"tab after method", "GET\t/ HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_METHOD, NULL, 3},
    {"non-ASCII method", "G\xc9T / HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_METHOD, NULL, 1},
    {"method only", "GET\r\n" HOST "\r\n", 0, HTTP1_E_BAD_REQUEST_LINE, NULL, 3},
    {"no version", "GET /\r\n" HOST "\r\n", 0, HTTP1_E_BAD_REQUEST_LINE, NULL, 5},
    {"HTTP/1.2", "GET / HTTP/1.2\r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 6},
    {"HTTP/2.0", "GET / HTTP/2.0\r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 6},
    {"HTTP/1.10", "GET / HTTP/1.10\r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 6},
    {"lowercase http", "GET / http/1.1\r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 6},
    {"HTTP/1", "GET / HTTP/1\r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 6},
    {"trailing space", "GET / HTTP/1.1 \r\n" HOST "\r\n", 0, HTTP1_E_VERSION, NULL, 15},
    {"absolute-form", "GET http://example.com/ HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET,
     NULL, 4},
    {"authority-form", "CONNECT example.com:443 HTTP/1.1\r\n" HOST "\r\n", 0,
     HTTP1_E_BAD_TARGET, NULL, 8},
    {"asterisk with GET", "GET * HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL, 4},
    {"space in target", "GET /a b HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL, 6},
    {"two spaces before target", "GET  / HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL,
     4},
    {"two spaces before version", "GET /  HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET,
     NULL, 5},
    {"tab in target", "GET /a\tb HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL, 6},
    {"control in target", "GET /a\x01 HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL, 6},
    {"NUL in target", "GET /a\0 HTTP/1.1\r\n" HOST "\r\n", 27, HTTP1_E_BAD_TARGET, NULL, 6},
    {"DEL in target", "GET /a\x7f HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL, 6},
    {"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\n" HOST "\r\n", 0, HTTP1_E_BAD_TARGET, NULL,
     5},
    /* Host */
    {"missing Host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 0, HTTP1_E_MISSING_HOST, NULL, 29},
    {"no headers at all", "GET / HTTP/1.1\r\n\r\n", 0, HTTP1_E_MISSING_HOST, NULL, 16},
    {"duplicate Host", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 0, HTTP1_E_DUPLICATE_HOST,
     "host: a", 0},
    {"duplicate Host HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n", 0,
     HTTP1_E_DUPLICATE_HOST, "HOST: b", 0},
};

static void test_reject_requests(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof reject_requests / sizeof reject_requests[0]; i++) {
        const reject_case_t *c = &reject_requests[i];
        size_t len = c->len ? c->len : strlen(c->text);
        size_t pos = c->pos_at ? offset_of(c->text, len, c->pos_at, c->pos_delta) : c->pos_delta;
        parsed_t p;
        parse(c->text, len, true, false, &default_limits, &p);
        if (p.rc != HTTP1_ERROR || p.err.code != c->code || p.err.pos != pos)
            fail_msg("%s: want %s at %zu, got rc %d %s at %zu (%s)", c->label,
                     http1_errcode_name(c->code), pos, p.rc, http1_errcode_name(p.err.code),
                     p.err.pos, p.err.what ? p.err.what : "");
        assert_non_null(p.err.what);
        assert_true(strlen(p.err.what) > 0);
        check_every_split(c->label, c->text, len, true, false, &default_limits);
    }
}

static const reject_case_t reject_responses[] = {
    {"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 11},
    {"four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 12},
    {"status 099", "HTTP/1.1 099 Odd\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 9},
    {"status 600", "HTTP/1.1 600 Odd\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 9},
    {"letters for status", "HTTP/1.1 abc OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 9},
    {"two spaces", "HTTP/1.1  200 OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 9},
    {"no status", "HTTP/1.1\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 8},
    {"not HTTP", "ICY 200 OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 0},
    {"HTTP/2", "HTTP/2 200 OK\r\n\r\n", 0, HTTP1_E_VERSION, NULL, 0},
    {"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", 0, HTTP1_E_VERSION, NULL, 0},
    {"control in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 14},
    {"empty line first", "\r\nHTTP/1.1 200 OK\r\n\r\n", 0, HTTP1_E_BAD_STATUS_LINE, NULL, 0},
    {"CL and TE", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, HTTP1_E_CL_AND_TE, "Transfer-Encoding", 0},
    {"CL and TE on a 204", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
     0, HTTP1_E_CL_AND_TE, "Content-Length", 0},
    {"duplicate CL", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 0,
     HTTP1_E_DUPLICATE_CONTENT_LENGTH, "Content-Length: 3\r\n\r\n", 0},
    {"bad CL", "HTTP/1.1 200 OK\r\nContent-Length: 3a\r\n\r\n", 0, HTTP1_E_BAD_CONTENT_LENGTH,
     "3a", 0},
    {"TE in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "Transfer-Encoding", 0},
    {"chunked not last", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "chunked", 0},
    {"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, HTTP1_E_BAD_TRANSFER_ENCODING, "chunked\r\n\r\n", 0},
    {"empty coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,,chunked\r\n\r\n", 0,
     HTTP1_E_BAD_TRANSFER_ENCODING, "gzip", 0},
    {"coding with parameter", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip;q=1, chunked\r\n\r\n",
     0, HTTP1_E_BAD_TRANSFER_ENCODING, "gzip", 0},
    {"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\n", 0, HTTP1_E_OBS_FOLD, " b", 0},
    {"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", 0, HTTP1_E_BARE_CR_OR_LF, NULL, 15},
    {"NUL in value", "HTTP/1.1 200 OK\r\nX-A: \0\r\n\r\n", 26, HTTP1_E_BAD_HEADER_VALUE, NULL,
     22},
};

static void test_reject_responses(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof reject_responses / sizeof reject_responses[0]; i++) {
        const reject_case_t *c = &reject_responses[i];
        size_t len = c->len ? c->len : strlen(c->text);
        size_t pos = c->pos_at ? offset_of(c->text, len, c->pos_at, c->pos_delta) : c->pos_delta;
        parsed_t p;
        parse(c->text, len, false, false, &default_limits, &p);
        if (p.rc != HTTP1_ERROR || p.err.code != c->code || p.err.pos != pos)
            fail_msg("%s: want %s at %zu, got rc %d %s at %zu (%s)", c->label,
                     http1_errcode_name(c->code), pos, p.rc, http1_errcode_name(p.err.code),
                     p.err.pos, p.err.what ? p.err.what : "");
        check_every_split(c->label, c->text, len, false, false, &default_limits);
    }
}

/* ------------------------------------------------------------------ accepted messages */

typedef struct accept_case {
    const char *label;
    const char *text;
    bool head; /* responses: answers a HEAD request */
    http1_body_t body;
    uint64_t content_length;
    bool keep_alive;
    bool expect_continue;
    bool upgrade;
    int version_minor;
    size_t n_headers;
} accept_case_t;

static const accept_case_t accept_requests[] = {
    {"GET", "GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost:8800\r\nAccept: */*\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, true, false, false, 1, 2},
    {"POST with CL", "POST /gen HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world",
     false, HTTP1_BODY_LENGTH, 11, true, false, false, 1, 2},
    {"CL 0", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", false, HTTP1_BODY_LENGTH,
     0, true, false, false, 1, 2},
    {"CL leading zeros and OWS", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \t007  \r\n\r\n",
     false, HTTP1_BODY_LENGTH, 7, true, false, false, 1, 2},
    {"CL 2^53", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9007199254740992\r\n\r\n", false,
     HTTP1_BODY_LENGTH, 9007199254740992ULL, true, false, false, 1, 2},
    {"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     false, HTTP1_BODY_CHUNKED, 0, true, false, false, 1, 2},
    {"Chunked, any case", "POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding:CHUNKED \r\n\r\n", false,
     HTTP1_BODY_CHUNKED, 0, true, false, false, 1, 2},
    {"HTTP/1.0 closes", "GET / HTTP/1.0\r\n\r\n", false, HTTP1_BODY_NONE, 0, false, false, false,
     0, 0},
    {"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, true, false, false, 0, 1},
    {"HTTP/1.1 close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, false, false, false, 1, 2},
    {"close in a second Connection header",
     "GET / HTTP/1.1\r\nConnection: x-foo\r\nHost: x\r\nconnection: close\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, false, false, false, 1, 3},
    {"closed is not close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, true, false, false, 1, 2},
    {"expect 100-continue",
     "PUT /f HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n", false,
     HTTP1_BODY_LENGTH, 3, true, true, false, 1, 3},
    {"expect ignored in HTTP/1.0",
     "PUT /f HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", false,
     HTTP1_BODY_LENGTH, 3, false, false, false, 0, 2},
    {"upgrade", "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
     false, HTTP1_BODY_NONE, 0, true, false, true, 1, 3},
    {"Upgrade header without Connection", "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
     false, HTTP1_BODY_NONE, 0, true, false, false, 1, 2},
    {"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", false, HTTP1_BODY_NONE, 0, true, false,
     false, 1, 1},
    {"obs-text and tabs in value", "GET / HTTP/1.1\r\nHost: x\r\nX-Name: caf\xc3\xa9\tau lait\r\n\r\n",
     false, HTTP1_BODY_NONE, 0, true, false, false, 1, 2},
    {"empty value", "GET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\n\r\n", false, HTTP1_BODY_NONE, 0, true,
     false, false, 1, 2},
    {"extension method", "PURGE /cache HTTP/1.1\r\nHost: x\r\n\r\n", false, HTTP1_BODY_NONE, 0,
     true, false, false, 1, 1},
    {"exactly max headers",
     "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\n"
     "I: 9\r\nJ: 10\r\nK: 11\r\nL: 12\r\nM: 13\r\nN: 14\r\nO: 15\r\n\r\n",
     false, HTTP1_BODY_NONE, 0, true, false, false, 1, 16},
};

static const accept_case_t accept_responses[] = {
    {"200 CL", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false, HTTP1_BODY_LENGTH, 2, true,
     false, false, 1, 1},
    {"200 chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false,
     HTTP1_BODY_CHUNKED, 0, true, false, false, 1, 1},
    {"gzip, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false,
     HTTP1_BODY_CHUNKED, 0, true, false, false, 1, 1},
    {"gzip then chunked in two headers",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", false,
     HTTP1_BODY_CHUNKED, 0, true, false, false, 1, 2},
    {"TE gzip reads until close", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false,
     HTTP1_BODY_UNTIL_CLOSE, 0, false, false, false, 1, 1},
    {"no framing reads until close", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", false,
     HTTP1_BODY_UNTIL_CLOSE, 0, false, false, false, 1, 1},
    {"204", "HTTP/1.1 204 No Content\r\n\r\n", false, HTTP1_BODY_NONE, 0, true, false, false, 1, 0},
    {"304 with CL", "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n", false,
     HTTP1_BODY_NONE, 0, true, false, false, 1, 1},
    {"100 continue", "HTTP/1.1 100 Continue\r\n\r\n", false, HTTP1_BODY_NONE, 0, true, false, false,
     1, 0},
    {"101 upgrade", "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
     false, HTTP1_BODY_NONE, 0, true, false, true, 1, 2},
    {"answer to HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", true, HTTP1_BODY_NONE, 0, true,
     false, false, 1, 1},
    {"answer to HEAD, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true,
     HTTP1_BODY_NONE, 0, true, false, false, 1, 1},
    {"empty reason", "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", false, HTTP1_BODY_LENGTH, 0, true,
     false, false, 1, 1},
    {"no reason at all", "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", false, HTTP1_BODY_LENGTH, 0,
     true, false, false, 1, 1},
    {"HTTP/1.0 with CL", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, HTTP1_BODY_LENGTH, 0,
     false, false, false, 0, 1},
    {"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
     false, HTTP1_BODY_LENGTH, 0, true, false, false, 0, 2},
    {"500 close", "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
     false, HTTP1_BODY_LENGTH, 2, false, false, false, 1, 2},
};

static void check_accept(const accept_case_t *c, bool is_request)
{
    size_t len = strlen(c->text);
    parsed_t p;
    parse(c->text, len, is_request, c->head, &default_limits, &p);
    if (p.rc != HTTP1_OK)
        fail_msg("%s: rc %d, %s at %zu (%s)", c->label, p.rc, http1_errcode_name(p.err.code),
                 p.err.pos, p.err.what ? p.err.what : "");
    const char *end = strstr(c->text, "\r\n\r\n");
    assert_non_null(end);
    if (p.msg.head_len != (size_t)(end - c->text) + 4 || p.msg.body != c->body ||
        p.msg.content_length != c->content_length || p.msg.keep_alive != c->keep_alive ||
        p.msg.expect_continue != c->expect_continue || p.msg.upgrade != c->upgrade ||
        p.msg.version_minor != c->version_minor || p.msg.n_headers != c->n_headers)
        fail_msg("%s: head_len %zu body %d cl %llu keep_alive %d expect %d upgrade %d minor %d "
                 "n_headers %zu",
                 c->label, p.msg.head_len, (int)p.msg.body,
                 (unsigned long long)p.msg.content_length, p.msg.keep_alive,
                 p.msg.expect_continue, p.msg.upgrade, p.msg.version_minor, p.msg.n_headers);
    assert_ptr_equal(p.msg.headers, p.hdrs);
    assert_int_equal(p.err.code, HTTP1_E_NONE);
    /* every span lies inside the head */
    for (size_t i = 0; i < p.msg.n_headers; i++) {
        assert_true(p.hdrs[i].name.len > 0);
        assert_true(p.hdrs[i].value.off + p.hdrs[i].value.len <= p.msg.head_len);
        if (p.hdrs[i].value.len > 0) {
            char first = c->text[p.hdrs[i].value.off];
            char last = c->text[p.hdrs[i].value.off + p.hdrs[i].value.len - 1];
            assert_true(first != ' ' && first != '\t' && last != ' ' && last != '\t');
        }
    }
    check_every_split(c->label, c->text, len, is_request, c->head, &default_limits);
}

static void test_accept_requests(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof accept_requests / sizeof accept_requests[0]; i++)
        check_accept(&accept_requests[i], true);
}

static void test_accept_responses(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof accept_responses / sizeof accept_responses[0]; i++)
        check_accept(&accept_responses[i], false);
}

static void test_request_fields(void **state)
{
    (void)state;
    const char *text = "POST /v1/generate?q=1 HTTP/1.1\r\nHost:  gpu-box:8800 \r\n"
                       "Content-Length: 4\r\nX-Request-Id:abc\r\n\r\nbody";
    parsed_t p;
    assert_int_equal(parse(text, strlen(text), true, false, &default_limits, &p), HTTP1_OK);
    assert_true(http1_span_eq(text, p.msg.method, "POST"));
    assert_true(http1_span_eq(text, p.msg.target, "/v1/generate?q=1"));
    assert_int_equal(p.msg.n_headers, 3);
    assert_true(http1_span_eq(text, p.hdrs[0].name, "Host"));
    assert_true(http1_span_eq(text, p.hdrs[0].value, "gpu-box:8800"));
    assert_true(http1_span_eq(text, p.hdrs[2].value, "abc"));
    assert_int_equal(p.msg.head_len, strlen(text) - 4);
    assert_memory_equal(text + p.msg.head_len, "body", 4);
}

static void test_response_fields(void **state)
{
    (void)state;
    const char *text = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\r\n";
    parsed_t p;
    assert_int_equal(parse(text, strlen(text), false, false, &default_limits, &p), HTTP1_OK);
    assert_int_equal(p.msg.status, 503);
    assert_true(http1_span_eq(text, p.msg.reason, "Service Unavailable"));
    assert_int_equal(p.msg.method.len, 0);
    const char *empty = "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(parse(empty, strlen(empty), false, false, &default_limits, &p), HTTP1_OK);
    assert_int_equal(p.msg.reason.len, 0);
}

/* ------------------------------------------------------------------ limits */

static void test_head_too_large(void **state)
{
    (void)state;
    const http1_limits_t small = {64, 8};
    char text[256];
    parsed_t p;

    /* A head of exactly 64 bytes passes even with bytes after it. */
    snprintf(text, sizeof text, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\nGET",
             "0123456789abcdefghijklmnopqr");
    const char *end = strstr(text, "\r\n\r\n");
    assert_int_equal((size_t)(end - text) + 4, 64);
    assert_int_equal(parse(text, strlen(text), true, false, &small, &p), HTTP1_OK);
    assert_int_equal(p.msg.head_len, 64);
    check_every_split("head of exactly max", text, strlen(text), true, false, &small);

    /* One byte more is too large, whole or fed in pieces. */
    snprintf(text, sizeof text, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n",
             "0123456789abcdefghijklmnopqrs");
    assert_int_equal(parse(text, strlen(text), true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_HEAD_TOO_LARGE);
    assert_int_equal(p.err.pos, 64);
    check_every_split("head of max + 1", text, strlen(text), true, false, &small);

    /* An unterminated head errors as soon as max bytes have arrived, not before (its
     * request line has not ended: the request-line error, see test_request_line_too_long). */
    memset(text, 'a', sizeof text);
    memcpy(text, "GET /", 5);
    assert_int_equal(parse(text, 63, true, false, &small, &p), HTTP1_NEED_MORE);
    assert_int_equal(p.scan_from, 63);
    assert_int_equal(parse(text, 64, true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_REQUEST_LINE_TOO_LONG);
    assert_int_equal(parse(text, sizeof text, true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_REQUEST_LINE_TOO_LONG);
    /* responses too */
    assert_int_equal(parse(text, sizeof text, false, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_HEAD_TOO_LARGE);
    /* with its request line ended: the head is too large */
    memcpy(text + 5, " HTTP/1.1\r\nX-A: ", 16);
    assert_int_equal(parse(text, 63, true, false, &small, &p), HTTP1_NEED_MORE);
    assert_int_equal(parse(text, 64, true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_HEAD_TOO_LARGE);
}

/* A request line that does not end within max_header_bytes is its own error (414); a head
 * whose request line ended is HEAD_TOO_LARGE (431) however long its target. */
static void test_request_line_too_long(void **state)
{
    (void)state;
    const http1_limits_t small = {64, 8};
    char text[256];
    parsed_t p;

    memset(text, 'a', sizeof text);
    memcpy(text, "GET /", 5);
    memcpy(text + 100, " HTTP/1.1\r\nHost: x\r\n\r\n", 22);
    assert_int_equal(parse(text, 63, true, false, &small, &p), HTTP1_NEED_MORE);
    assert_int_equal(parse(text, 64, true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_REQUEST_LINE_TOO_LONG);
    assert_int_equal(p.err.pos, 64);
    assert_int_equal(parse(text, 122, true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_REQUEST_LINE_TOO_LONG);
    check_every_split("long request line", text, 122, true, false, &small);
    /* a status line is not a request line */
    assert_int_equal(parse(text, 122, false, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_HEAD_TOO_LARGE);

    /* a 40-byte target whose line ends in time, then headers past the limit: 431 */
    snprintf(text, sizeof text, "GET /%s HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n",
             "0123456789012345678901234567890123456789", "0123456789");
    assert_int_equal(parse(text, strlen(text), true, false, &small, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_HEAD_TOO_LARGE);
    check_every_split("long target, line ended", text, strlen(text), true, false, &small);
}

static void test_too_many_headers(void **state)
{
    (void)state;
    const http1_limits_t four = {1024, 4};
    const char *ok = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    const char *bad = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    parsed_t p;
    assert_int_equal(parse(ok, strlen(ok), true, false, &four, &p), HTTP1_OK);
    assert_int_equal(p.msg.n_headers, 4);
    assert_int_equal(parse(bad, strlen(bad), true, false, &four, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_TOO_MANY_HEADERS);
    assert_int_equal(p.err.pos, offset_of(bad, strlen(bad), "D: 4", 0));
    check_every_split("too many headers", bad, strlen(bad), true, false, &four);
    const char *resp = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n";
    assert_int_equal(parse(resp, strlen(resp), false, false, &four, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_TOO_MANY_HEADERS);
    const http1_limits_t none = {1024, 0};
    assert_int_equal(parse(ok, strlen(ok), true, false, &none, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_TOO_MANY_HEADERS);
}

/* ------------------------------------------------------------------ incremental use */

static void test_need_more_and_resume(void **state)
{
    (void)state;
    const char *text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    parsed_t p;
    assert_int_equal(parse(text, 0, true, false, &default_limits, &p), HTTP1_NEED_MORE);
    assert_int_equal(parse(text, 10, true, false, &default_limits, &p), HTTP1_NEED_MORE);
    assert_int_equal(p.scan_from, 10);
    /* stopping right after a CR: the scan resumes on that CR */
    assert_int_equal(parse(text, 15, true, false, &default_limits, &p), HTTP1_NEED_MORE);
    assert_int_equal(p.scan_from, 14);
    assert_int_equal(parse(text, strlen(text) - 1, true, false, &default_limits, &p),
                     HTTP1_NEED_MORE);

    /* OK is stable: asking again with the same scan_from gives the same head */
    size_t scan_from = 0;
    http1_msg_t msg;
    http1_header_t hdrs[MAX_HEADERS];
    http1_error_t err;
    assert_int_equal(http1_parse_request(text, strlen(text), &default_limits, &msg, hdrs,
                                         &scan_from, &err), HTTP1_OK);
    assert_int_equal(http1_parse_request(text, strlen(text), &default_limits, &msg, hdrs,
                                         &scan_from, &err), HTTP1_OK);
    assert_int_equal(msg.head_len, strlen(text));
    /* a NULL scan_from is allowed (no resume) */
    assert_int_equal(http1_parse_request(text, strlen(text), &default_limits, &msg, hdrs, NULL,
                                         &err), HTTP1_OK);
    /* an early error is reported before the head is complete */
    const char *early = "GET / HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n";
    assert_int_equal(parse(early, strlen(early), true, false, &default_limits, &p), HTTP1_ERROR);
    assert_int_equal(p.err.code, HTTP1_E_BAD_HEADER_NAME);
}

/* Two requests (the first with a body) and a third partial one in one buffer. */
static void test_pipelined(void **state)
{
    (void)state;
    const char *text = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                       "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /c HTTP/1.1\r\nHo";
    size_t len = strlen(text);
    parsed_t p;
    assert_int_equal(parse(text, len, true, false, &default_limits, &p), HTTP1_OK);
    assert_true(http1_span_eq(text, p.msg.target, "/a"));
    assert_int_equal(p.msg.body, HTTP1_BODY_LENGTH);
    size_t next = p.msg.head_len + (size_t)p.msg.content_length;

    assert_int_equal(parse(text + next, len - next, true, false, &default_limits, &p), HTTP1_OK);
    const char *second = text + next;
    assert_true(http1_span_eq(second, p.msg.target, "/b"));
    assert_int_equal(p.msg.body, HTTP1_BODY_NONE);
    next += p.msg.head_len;

    assert_int_equal(parse(text + next, len - next, true, false, &default_limits, &p),
                     HTTP1_NEED_MORE);
}

/* ------------------------------------------------------------------ helpers */

static void test_helpers(void **state)
{
    (void)state;
    const char *text = "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret ,Close\r\n"
                       "X-Secret: 1\r\nX-Public: 2\r\nkeep-alive: timeout=5\r\nTE: trailers\r\n"
                       "X-Public: 3\r\nx-secretive: 4\r\n\r\n";
    parsed_t p;
    assert_int_equal(parse(text, strlen(text), true, false, &default_limits, &p), HTTP1_OK);
    assert_false(p.msg.keep_alive);

    http1_span_t method = p.msg.method;
    assert_true(http1_span_eq(text, method, "GET"));
    assert_false(http1_span_eq(text, method, "get"));
    assert_false(http1_span_eq(text, method, "GE"));
    assert_true(http1_span_ieq(text, method, "get"));
    assert_false(http1_span_ieq(text, method, "gets"));

    const http1_header_t *h = http1_find_header(text, &p.msg, "x-public");
    assert_non_null(h);
    assert_true(http1_span_eq(text, h->value, "2")); /* the first one */
    assert_true(http1_header_is(text, h, "X-PUBLIC"));
    assert_false(http1_header_is(text, h, "X-Publi"));
    assert_null(http1_find_header(text, &p.msg, "X-Missing"));

    const http1_header_t *conn = http1_find_header(text, &p.msg, "Connection");
    assert_non_null(conn);
    assert_true(http1_value_has_token(text, conn->value, "close"));
    assert_true(http1_value_has_token(text, conn->value, "KEEP-ALIVE"));
    assert_true(http1_value_has_token(text, conn->value, "x-secret"));
    assert_false(http1_value_has_token(text, conn->value, "clos"));
    assert_false(http1_value_has_token(text, conn->value, "keep"));
    assert_false(http1_value_has_token(text, conn->value, ""));
    const char *list = ", ,close ,";
    http1_span_t whole = {0, (uint32_t)strlen(list)};
    assert_true(http1_value_has_token(list, whole, "close"));
    http1_span_t nothing = {0, 0};
    assert_false(http1_value_has_token(list, nothing, "close"));

    struct {
        const char *name;
        bool hop;
    } want[] = {{"Host", false},      {"Connection", true}, {"X-Secret", true},
                {"X-Public", false},  {"keep-alive", true}, {"TE", true},
                {"x-secretive", false}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        h = http1_find_header(text, &p.msg, want[i].name);
        assert_non_null(h);
        if (http1_is_hop_by_hop(text, &p.msg, h) != want[i].hop)
            fail_msg("hop-by-hop(%s) should be %d", want[i].name, want[i].hop);
    }
    const char *more = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n"
                       "Upgrade: h2c\r\nProxy-Authenticate: Basic\r\nProxy-Connection: close\r\n"
                       "Proxy-Authorization: x\r\nContent-Type: a/b\r\n\r\n";
    assert_int_equal(parse(more, strlen(more), false, false, &default_limits, &p), HTTP1_OK);
    for (size_t i = 0; i < p.msg.n_headers; i++) {
        bool want_hop = !http1_header_is(more, &p.hdrs[i], "content-type");
        assert_int_equal(http1_is_hop_by_hop(more, &p.msg, &p.hdrs[i]), want_hop);
    }
}

static void test_names(void **state)
{
    (void)state;
    const char *seen[HTTP1_E_BAD_TRAILER + 1];
    for (int c = HTTP1_E_NONE; c <= HTTP1_E_BAD_TRAILER; c++) {
        seen[c] = http1_errcode_name((http1_errcode_t)c);
        assert_non_null(seen[c]);
        assert_string_not_equal(seen[c], "unknown");
        for (int d = 0; d < c; d++)
            assert_string_not_equal(seen[c], seen[d]);
    }
    assert_string_equal(http1_errcode_name(HTTP1_E_CL_AND_TE), "cl_and_te");
    assert_string_equal(http1_errcode_name((http1_errcode_t)999), "unknown");

    assert_string_equal(http1_reason(200), "OK");
    assert_string_equal(http1_reason(404), "Not Found");
    assert_string_equal(http1_reason(503), "Service Unavailable");
    assert_string_equal(http1_reason(507), "Insufficient Storage");
    assert_string_equal(http1_reason(299), "Unknown");
    assert_string_equal(http1_reason(-1), "Unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reject_requests),
        cmocka_unit_test(test_reject_responses),
        cmocka_unit_test(test_accept_requests),
        cmocka_unit_test(test_accept_responses),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_response_fields),
        cmocka_unit_test(test_head_too_large),
        cmocka_unit_test(test_request_line_too_long),
        cmocka_unit_test(test_too_many_headers),
        cmocka_unit_test(test_need_more_and_resume),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}