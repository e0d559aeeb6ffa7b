/*
 * http1: strict, pure, incremental HTTP/1.1 head parser, and the helpers over a parsed head.
 * The contract (what is refused, return convention) is in http1.h; this comment says how.
 * The chunked body decoder is in http1_chunked.c; the byte classes both use are in
 * http1_internal.h.
 *
 * Heads are parsed in two phases over buf[0..len):
 *
 *  1. scan_head walks forward from *scan_from to find the empty line that ends the head.
 *     Every CR must be followed by LF and every LF must follow a CR. As soon as a line's
 *     CRLF arrives the line's syntax is checked (start line or header line), so garbage is
 *     refused when its line ends rather than when max_header_bytes is reached.
 *     Invariants: every byte before *scan_from has been looked at and every line ending
 *     before it has passed its syntax check; *scan_from stops on a CR whose LF has not
 *     arrived yet. The scan never looks past max_header_bytes. Each byte is visited once
 *     by the forward walk and once by the backward search for the start of its line, so a
 *     head fed one byte at a time costs O(n) in total.
 *
 *  2. parse_head walks the complete head again from 0 (re-checking each line, so a wrong
 *     *scan_from can cost correctness of the early error but never memory safety) and
 *     fills msg: start line, header spans, framing (Content-Length / Transfer-Encoding),
 *     keep-alive, Expect and Upgrade.
 *
 * Errors are found in byte order and the scan's result depends only on the bytes it has
 * seen, so a message fed in pieces gives the same result, code and position as the same
 * bytes fed at once.
 *
 * Choices the header leaves open:
 *   - a message starting with an empty line is refused (no skipping of stray CRLFs);
 *   - the version is checked before the target, so "GET / HTTP/1.1 " is a version error;
 *   - target "*" only with OPTIONS; a second Host is refused in HTTP/1.0 too;
 *   - status codes 100..599; "HTTP/1.1 200" without the space before an empty reason is
 *     accepted (common in the wild, harmless for framing);
 *   - response Transfer-Encoding: a list of tokens, no empty element, no parameters,
 *     "chunked" at most once and only last; not chunked-last means read until close;
 *     Transfer-Encoding in any HTTP/1.0 message is refused;
 *   - Content-Length may not exceed 2^53 (HTTP1_MAX_CONTENT_LENGTH itself is allowed);
 *   - "Expect: 100-continue" only counts in HTTP/1.1 requests (RFC 9110 10.1.1).
 */
#include "http/http1_internal.h"

#include <string.h>

/* ------------------------------------------------------------------ small helpers */

static unsigned char ascii_lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

static bool mem_ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ascii_lower((unsigned char)a[i]) != ascii_lower((unsigned char)b[i]))
            return false;
    return true;
}

static http1_span_t make_span(size_t off, size_t len)
{
    http1_span_t s = {(uint32_t)off, (uint32_t)len};
    return s;
}

/* ------------------------------------------------------------------ line syntax */

/* Request line buf[0..end): METHOD SP target SP version. */
static int check_request_line(const char *buf, size_t end, http1_msg_t *msg, http1_error_t *err)
{
    size_t i = 0;
    while (i < end && is_tchar((unsigned char)buf[i]))
        i++;
    if (i == 0)
        return fail(err, HTTP1_E_BAD_METHOD, 0, "request line does not start with a method token");
    if (i == end)
        return fail(err, HTTP1_E_BAD_REQUEST_LINE, end, "request line has no target");
    if (buf[i] != ' ')
        return fail(err, HTTP1_E_BAD_METHOD, i, "method is not a token followed by one space");
    msg->method = make_span(0, i);

    size_t target_start = i + 1;
    const char *last_sp = memrchr(buf + target_start, ' ', end - target_start);
    if (!last_sp)
        return fail(err, HTTP1_E_BAD_REQUEST_LINE, end, "request line has no HTTP version");
    size_t target_end = (size_t)(last_sp - buf);
    size_t version_start = target_end + 1;

    /* The version (after the last space) first, so "GET / HTTP/1.1 " is a version error. */
    if (end - version_start != 8 || memcmp(buf + version_start, "HTTP/1.", 7) != 0 ||
        (buf[version_start + 7] != '0' && buf[version_start + 7] != '1'))
        return fail(err, HTTP1_E_VERSION, version_start, "version is not HTTP/1.0 or HTTP/1.1");

    if (target_end == target_start)
        return fail(err, HTTP1_E_BAD_TARGET, target_start, "empty request target");
    if (target_end - target_start == 1 && buf[target_start] == '*') {
        if (!(i == 7 && memcmp(buf, "OPTIONS", 7) == 0))
            return fail(err, HTTP1_E_BAD_TARGET, target_start, "target \"*\" is only for OPTIONS");
    } else if (buf[target_start] != '/') {
        return fail(err, HTTP1_E_BAD_TARGET, target_start,
                    "request target is not origin-form (absolute-form is refused)");
    }
    for (size_t j = target_start; j < target_end; j++) {
        unsigned char c = (unsigned char)buf[j];
        if (c <= 0x20 || c >= 0x7f)
            return fail(err, HTTP1_E_BAD_TARGET, j,
                        "request target has a space, control or non-ASCII byte");
    }
    msg->target = make_span(target_start, target_end - target_start);
    msg->version_minor = buf[version_start + 7] - '0';
    return HTTP1_OK;
}

/* Status line buf[0..end): HTTP/1.x SP 3DIGIT [SP reason]. */
static int check_status_line(const char *buf, size_t end, http1_msg_t *msg, http1_error_t *err)
{
    const char *sp = memchr(buf, ' ', end);
    size_t version_end = sp ? (size_t)(sp - buf) : end;
    if (version_end < 5 || memcmp(buf, "HTTP/", 5) != 0)
        return fail(err, HTTP1_E_BAD_STATUS_LINE, 0, "status line does not start with HTTP/");
    if (version_end != 8 || memcmp(buf, "HTTP/1.", 7) != 0 || (buf[7] != '0' && buf[7] != '1'))
        return fail(err, HTTP1_E_VERSION, 0, "version is not HTTP/1.0 or HTTP/1.1");
    msg->version_minor = buf[7] - '0';
    if (!sp)
        return fail(err, HTTP1_E_BAD_STATUS_LINE, end, "status line has no status code");

    size_t code_start = version_end + 1;
    int status = 0;
    for (size_t k = 0; k < 3; k++) {
        size_t at = code_start + k;
        if (at >= end || buf[at] < '0' || buf[at] > '9')
            return fail(err, HTTP1_E_BAD_STATUS_LINE, at, "status code is not three digits");
        status = status * 10 + (buf[at] - '0');
    }
    if (status < 100 || status > 599)
        return fail(err, HTTP1_E_BAD_STATUS_LINE, code_start, "status code outside 100..599");
    msg->status = status;

    size_t after = code_start + 3;
    if (after == end) {
        msg->reason = make_span(end, 0);
        return HTTP1_OK;
    }
    if (buf[after] != ' ')
        return fail(err, HTTP1_E_BAD_STATUS_LINE, after, "status code not followed by a space");
    for (size_t j = after + 1; j < end; j++)
        if (!is_field_char((unsigned char)buf[j]))
            return fail(err, HTTP1_E_BAD_STATUS_LINE, j, "control byte in the reason phrase");
    msg->reason = make_span(after + 1, end - after - 1);
    return HTTP1_OK;
}

/* Header line buf[start..end): name ":" OWS value OWS. */
static int check_header_line(const char *buf, size_t start, size_t end, http1_header_t *out,
                             http1_error_t *err)
{
    if (start < end && is_ows((unsigned char)buf[start]))
        return fail(err, HTTP1_E_OBS_FOLD, start, "line folding (obs-fold) is refused");
    size_t i = start;
    while (i < end && is_tchar((unsigned char)buf[i]))
        i++;
    if (i == end)
        return fail(err, HTTP1_E_BAD_HEADER_NAME, i, "header line has no colon");
    if (is_ows((unsigned char)buf[i])) {
        size_t j = i;
        while (j < end && is_ows((unsigned char)buf[j]))
            j++;
        if (j < end && buf[j] == ':')
            return fail(err, HTTP1_E_SPACE_BEFORE_COLON, i,
                        "whitespace between header name and colon");
        return fail(err, HTTP1_E_BAD_HEADER_NAME, i, "whitespace inside a header name");
    }
    if (buf[i] != ':')
        return fail(err, HTTP1_E_BAD_HEADER_NAME, i, "header name is not a token");
    if (i == start)
        return fail(err, HTTP1_E_BAD_HEADER_NAME, i, "empty header name");
    out->name = make_span(start, i - start);

    size_t v = i + 1;
    size_t e = end;
    while (v < e && is_ows((unsigned char)buf[v]))
        v++;
    while (e > v && is_ows((unsigned char)buf[e - 1]))
        e--;
    for (size_t j = v; j < e; j++)
        if (!is_field_char((unsigned char)buf[j]))
            return fail(err, HTTP1_E_BAD_HEADER_VALUE, j, "control byte in a header value");
    out->value = make_span(v, e - v);
    return HTTP1_OK;
}

/* ------------------------------------------------------------------ phase 1: find the end */

static size_t start_of_line(const char *buf, size_t cr)
{
    const char *lf = cr ? memrchr(buf, '\n', cr) : NULL;
    return lf ? (size_t)(lf - buf) + 1 : 0;
}

/* Scan buf[0..limit) (limit = min(len, max)) from *scan_from. HTTP1_OK with *head_len set,
 * HTTP1_NEED_MORE, or HTTP1_ERROR. */
static int scan_head(const char *buf, size_t limit, size_t max, bool is_request,
                     size_t *scan_from, size_t *head_len, http1_error_t *err)
{
    http1_msg_t scratch_msg;
    http1_header_t scratch_header;
    size_t i = *scan_from <= limit ? *scan_from : 0;
    for (; i < limit; i++) {
        char c = buf[i];
        if (c == '\n')
            return fail(err, HTTP1_E_BARE_CR_OR_LF, i, "LF without CR before it");
        if (c != '\r')
            continue;
        if (i + 1 == limit)
            break; /* the byte after this CR has not arrived (or is past the limit) */
        if (buf[i + 1] != '\n')
            return fail(err, HTTP1_E_BARE_CR_OR_LF, i, "CR without LF after it");
        size_t line_start = start_of_line(buf, i);
        int rc;
        if (line_start == i) {
            if (i == 0)
                return fail(err, is_request ? HTTP1_E_BAD_REQUEST_LINE : HTTP1_E_BAD_STATUS_LINE,
                            0, "empty line before the start line");
            *scan_from = i; /* calling again with the same bytes finds the same end */
            *head_len = i + 2;
            return HTTP1_OK;
        }
        if (line_start == 0) {
            memset(&scratch_msg, 0, sizeof scratch_msg);
            rc = is_request ? check_request_line(buf, i, &scratch_msg, err)
                            : check_status_line(buf, i, &scratch_msg, err);
        } else {
            rc = check_header_line(buf, line_start, i, &scratch_header, err);
        }
        if (rc != HTTP1_OK)
            return rc;
        i++; /* the LF */
    }
    *scan_from = i;
    if (limit >= max && is_request && !memchr(buf, '\n', limit))
        return fail(err, HTTP1_E_REQUEST_LINE_TOO_LONG, max, "request line longer than max_header_bytes");
    if (limit >= max)
        return fail(err, HTTP1_E_HEAD_TOO_LARGE, max, "head larger than max_header_bytes");
    return HTTP1_NEED_MORE;
}

/* ------------------------------------------------------------------ phase 2: the meaning */

/* What the headers say about framing and the connection, gathered in one pass. */
typedef struct head_facts {
    bool has_content_length;
    bool has_transfer_encoding;
    bool chunked_is_final; /* the last transfer coding seen is "chunked" */
    bool te_unknown;       /* request: a well-formed coding list other than "chunked" (501) */
    bool has_host;
    bool connection_close;
    bool connection_keep_alive;
    bool connection_upgrade;
    bool has_upgrade;
    bool expect_continue;
    uint64_t content_length;
    size_t content_length_pos;
    size_t transfer_encoding_pos;
} head_facts_t;

static bool span_is(const char *buf, http1_span_t s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && mem_ieq(buf + s.off, lit, n);
}

/* Calls visit(buf, element, arg) for each comma-separated element of value, trimmed of OWS
 * (empty elements included). Stops and returns false when visit does. */
typedef bool (*element_visitor)(const char *buf, http1_span_t element, void *arg);

static bool for_each_element(const char *buf, http1_span_t value, element_visitor visit,
                             void *arg)
{
    size_t p = value.off;
    size_t end = (size_t)value.off + value.len;
    for (;;) {
        const char *comma = memchr(buf + p, ',', end - p);
        size_t e = comma ? (size_t)(comma - buf) : end;
        size_t s = p;
        size_t t = e;
        while (s < t && is_ows((unsigned char)buf[s]))
            s++;
        while (t > s && is_ows((unsigned char)buf[t - 1]))
            t--;
        if (!visit(buf, make_span(s, t - s), arg))
            return false;
        if (!comma)
            return true;
        p = e + 1;
    }
}

static bool note_connection_option(const char *buf, http1_span_t element, void *arg)
{
    head_facts_t *facts = arg;
    if (span_is(buf, element, "close"))
        facts->connection_close = true;
    else if (span_is(buf, element, "keep-alive"))
        facts->connection_keep_alive = true;
    else if (span_is(buf, element, "upgrade"))
        facts->connection_upgrade = true;
    return true;
}

/* Response Transfer-Encoding elements: tokens only, no empty element, "chunked" last. */
typedef struct coding_walk {
    bool chunked_is_final;
    bool bad;
} coding_walk_t;

static bool note_transfer_coding(const char *buf, http1_span_t element, void *arg)
{
    coding_walk_t *walk = arg;
    if (element.len == 0 || walk->chunked_is_final) { /* empty, or something after chunked */
        walk->bad = true;
        return false;
    }
    for (uint32_t k = 0; k < element.len; k++)
        if (!is_tchar((unsigned char)buf[element.off + k])) {
            walk->bad = true;
            return false;
        }
    walk->chunked_is_final = span_is(buf, element, "chunked");
    return true;
}

/* Request Transfer-Encoding elements: non-empty tokens, "chunked" at most once. */
typedef struct request_coding_walk {
    unsigned chunked;
    bool bad;
} request_coding_walk_t;

static bool note_request_coding(const char *buf, http1_span_t element, void *arg)
{
    request_coding_walk_t *walk = arg;
    walk->bad = element.len == 0;
    for (uint32_t k = 0; k < element.len && !walk->bad; k++)
        walk->bad = !is_tchar((unsigned char)buf[element.off + k]);
    if (!walk->bad && span_is(buf, element, "chunked"))
        walk->bad = ++walk->chunked > 1;
    return !walk->bad;
}

static bool parse_decimal(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0'); /* v <= 2^53 here, so no wrap */
        if (v > HTTP1_MAX_CONTENT_LENGTH)
            return false;
    }
    *out = v;
    return true;
}

static int note_header(const char *buf, const http1_header_t *h, size_t line_start,
                       bool is_request, int version_minor, head_facts_t *facts,
                       http1_error_t *err)
{
    if (span_is(buf, h->name, "content-length")) {
        if (facts->has_content_length)
            return fail(err, HTTP1_E_DUPLICATE_CONTENT_LENGTH, line_start,
                        "more than one Content-Length header");
        if (!parse_decimal(buf + h->value.off, h->value.len, &facts->content_length))
            return fail(err, HTTP1_E_BAD_CONTENT_LENGTH, h->value.off,
                        "Content-Length is not a decimal number up to 2^53");
        facts->has_content_length = true;
        facts->content_length_pos = line_start;
    } else if (span_is(buf, h->name, "transfer-encoding")) {
        if (version_minor == 0)
            return fail(err, HTTP1_E_BAD_TRANSFER_ENCODING, line_start,
                        "Transfer-Encoding in an HTTP/1.0 message");
        if (is_request) {
            if (facts->has_transfer_encoding)
                return fail(err, HTTP1_E_BAD_TRANSFER_ENCODING, line_start,
                            "more than one Transfer-Encoding header");
            if (!span_is(buf, h->value, "chunked")) {
                request_coding_walk_t walk = {0, false};
                for_each_element(buf, h->value, note_request_coding, &walk);
                if (walk.bad)
                    return fail(err, HTTP1_E_BAD_TRANSFER_ENCODING, h->value.off,
                                "request Transfer-Encoding is not a list of codings with chunked at most once");
                facts->te_unknown = true; /* reported after the other checks (501) */
            }
            facts->chunked_is_final = true;
        } else {
            coding_walk_t walk = {facts->chunked_is_final, false};
            for_each_element(buf, h->value, note_transfer_coding, &walk);
            if (walk.bad)
                return fail(err, HTTP1_E_BAD_TRANSFER_ENCODING, h->value.off,
                            "Transfer-Encoding is not a list of codings ending once in chunked");
            facts->chunked_is_final = walk.chunked_is_final;
        }
        facts->has_transfer_encoding = true;
        facts->transfer_encoding_pos = line_start;
    } else if (span_is(buf, h->name, "host")) {
        if (is_request && facts->has_host)
            return fail(err, HTTP1_E_DUPLICATE_HOST, line_start, "more than one Host header");
        facts->has_host = true;
    } else if (span_is(buf, h->name, "connection")) {
        for_each_element(buf, h->value, note_connection_option, facts);
    } else if (span_is(buf, h->name, "upgrade")) {
        facts->has_upgrade = true;
    } else if (span_is(buf, h->name, "expect")) {
        /* RFC 9110 10.1.1: a 100-continue expectation in HTTP/1.0 is ignored. */
        if (is_request && version_minor == 1 && span_is(buf, h->value, "100-continue"))
            facts->expect_continue = true;
    }
    return HTTP1_OK;
}

static http1_body_t response_body(const http1_msg_t *msg, const head_facts_t *facts,
                                  bool request_was_head)
{
    if (request_was_head || msg->status < 200 || msg->status == 204 || msg->status == 304)
        return HTTP1_BODY_NONE;
    if (facts->has_transfer_encoding)
        return facts->chunked_is_final ? HTTP1_BODY_CHUNKED : HTTP1_BODY_UNTIL_CLOSE;
    if (facts->has_content_length)
        return HTTP1_BODY_LENGTH;
    return HTTP1_BODY_UNTIL_CLOSE;
}

/* buf[0..head_len) is a complete head ending in CRLF CRLF. */
static int parse_head(const char *buf, size_t head_len, const http1_limits_t *limits,
                      bool is_request, bool request_was_head, http1_msg_t *msg,
                      http1_header_t *hdrs, http1_error_t *err)
{
    const char *cr = memchr(buf, '\r', head_len);
    size_t end = (size_t)(cr - buf); /* a CR exists: the head ends in CRLF CRLF */
    if (buf[end + 1] != '\n')
        return fail(err, HTTP1_E_BARE_CR_OR_LF, end, "CR without LF after it");
    int rc = is_request ? check_request_line(buf, end, msg, err)
                        : check_status_line(buf, end, msg, err);
    if (rc != HTTP1_OK)
        return rc;

    head_facts_t facts;
    memset(&facts, 0, sizeof facts);
    msg->headers = hdrs;
    size_t pos = end + 2;
    while (pos < head_len - 2) {
        cr = memchr(buf + pos, '\r', head_len - pos);
        end = (size_t)(cr - buf);
        if (buf[end + 1] != '\n')
            return fail(err, HTTP1_E_BARE_CR_OR_LF, end, "CR without LF after it");
        if (msg->n_headers >= limits->max_headers)
            return fail(err, HTTP1_E_TOO_MANY_HEADERS, pos, "more headers than max_headers");
        http1_header_t *h = &hdrs[msg->n_headers];
        rc = check_header_line(buf, pos, end, h, err);
        if (rc != HTTP1_OK)
            return rc;
        msg->n_headers++;
        rc = note_header(buf, h, pos, is_request, msg->version_minor, &facts, err);
        if (rc != HTTP1_OK)
            return rc;
        pos = end + 2;
    }

    if (facts.has_content_length && facts.has_transfer_encoding) {
        size_t later = facts.content_length_pos > facts.transfer_encoding_pos
                           ? facts.content_length_pos
                           : facts.transfer_encoding_pos;
        return fail(err, HTTP1_E_CL_AND_TE, later, "both Content-Length and Transfer-Encoding");
    }
    if (is_request && msg->version_minor == 1 && !facts.has_host)
        return fail(err, HTTP1_E_MISSING_HOST, head_len - 2, "HTTP/1.1 request without Host");
    if (facts.te_unknown)
        return fail(err, HTTP1_E_UNKNOWN_TRANSFER_CODING, facts.transfer_encoding_pos,
                    "request Transfer-Encoding other than \"chunked\" is not implemented");

    msg->head_len = head_len;
    if (is_request) {
        if (facts.has_transfer_encoding)
            msg->body = HTTP1_BODY_CHUNKED;
        else if (facts.has_content_length)
            msg->body = HTTP1_BODY_LENGTH;
        else
            msg->body = HTTP1_BODY_NONE;
    } else {
        msg->body = response_body(msg, &facts, request_was_head);
    }
    if (msg->body == HTTP1_BODY_LENGTH)
        msg->content_length = facts.content_length;
    if (msg->version_minor == 1)
        msg->keep_alive = !facts.connection_close;
    else
        msg->keep_alive = facts.connection_keep_alive && !facts.connection_close;
    if (msg->body == HTTP1_BODY_UNTIL_CLOSE)
        msg->keep_alive = false;
    msg->expect_continue = facts.expect_continue;
    msg->upgrade = facts.connection_upgrade && facts.has_upgrade;
    return HTTP1_OK;
}

static int parse_message(const char *buf, size_t len, const http1_limits_t *limits,
                         bool is_request, bool request_was_head, http1_msg_t *msg,
                         http1_header_t *hdrs, size_t *scan_from, http1_error_t *err)
{
    size_t local_scan = 0;
    size_t max = limits->max_header_bytes;
    if (max > UINT32_MAX) /* spans are 32-bit offsets */
        max = UINT32_MAX;
    size_t limit = len < max ? len : max;
    size_t head_len = 0;

    memset(msg, 0, sizeof *msg);
    if (err) {
        err->code = HTTP1_E_NONE;
        err->pos = 0;
        err->what = "no error";
    }
    if (!scan_from)
        scan_from = &local_scan;
    int rc = scan_head(buf, limit, max, is_request, scan_from, &head_len, err);
    if (rc != HTTP1_OK)
        return rc;
    rc = parse_head(buf, head_len, limits, is_request, request_was_head, msg, hdrs, err);
    if (rc != HTTP1_OK) {
        memset(msg, 0, sizeof *msg);
        return rc;
    }
    return HTTP1_OK;
}

int http1_parse_request(const char *buf, size_t len, const http1_limits_t *limits,
                        http1_msg_t *msg, http1_header_t *hdrs, size_t *scan_from,
                        http1_error_t *err)
{
    return parse_message(buf, len, limits, true, false, msg, hdrs, scan_from, err);
}

int http1_parse_response(const char *buf, size_t len, const http1_limits_t *limits,
                         bool request_was_head, http1_msg_t *msg, http1_header_t *hdrs,
                         size_t *scan_from, http1_error_t *err)
{
    return parse_message(buf, len, limits, false, request_was_head, msg, hdrs, scan_from, err);
}

/* ------------------------------------------------------------------ helpers */

bool http1_span_eq(const char *buf, http1_span_t s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && memcmp(buf + s.off, lit, n) == 0;
}

bool http1_span_ieq(const char *buf, http1_span_t s, const char *lit)
{
    return span_is(buf, s, lit);
}

bool http1_header_is(const char *buf, const http1_header_t *h, const char *name)
{
    return span_is(buf, h->name, name);
}

const http1_header_t *http1_find_header(const char *buf, const http1_msg_t *msg,
                                        const char *name)
{
    for (size_t i = 0; i < msg->n_headers; i++)
        if (span_is(buf, msg->headers[i].name, name))
            return &msg->headers[i];
    return NULL;
}

/* Token search, the token given as pointer and length (a C string or a span of buf). */
typedef struct token_search {
    const char *token;
    size_t len;
    bool found;
} token_search_t;

static bool match_token(const char *buf, http1_span_t element, void *arg)
{
    token_search_t *search = arg;
    if (element.len == search->len && mem_ieq(buf + element.off, search->token, search->len)) {
        search->found = true;
        return false;
    }
    return true;
}

bool http1_value_has_token(const char *buf, http1_span_t value, const char *token)
{
    token_search_t search = {token, strlen(token), false};
    if (search.len == 0)
        return false;
    for_each_element(buf, value, match_token, &search);
    return search.found;
}

bool http1_is_hop_by_hop(const char *buf, const http1_msg_t *msg, const http1_header_t *h)
{
    static const char *const always[] = {
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
        "upgrade", "proxy-authenticate", "proxy-authorization",
    };
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (span_is(buf, h->name, always[i]))
            return true;
    if (h->name.len == 0)
        return false;
    for (size_t i = 0; i < msg->n_headers; i++) {
        if (!span_is(buf, msg->headers[i].name, "connection"))
            continue;
        token_search_t search = {buf + h->name.off, h->name.len, false};
        for_each_element(buf, msg->headers[i].value, match_token, &search);
        if (search.found)
            return true;
    }
    return false;
}

const char *http1_errcode_name(http1_errcode_t code)
{
    switch (code) {
    case HTTP1_E_NONE: return "none";
    case HTTP1_E_HEAD_TOO_LARGE: return "head_too_large";
    case HTTP1_E_TOO_MANY_HEADERS: return "too_many_headers";
    case HTTP1_E_BAD_REQUEST_LINE: return "bad_request_line";
    case HTTP1_E_BAD_STATUS_LINE: return "bad_status_line";
    case HTTP1_E_BAD_METHOD: return "bad_method";
    case HTTP1_E_BAD_TARGET: return "bad_target";
    case HTTP1_E_VERSION: return "version";
    case HTTP1_E_BARE_CR_OR_LF: return "bare_cr_or_lf";
    case HTTP1_E_BAD_HEADER_NAME: return "bad_header_name";
    case HTTP1_E_SPACE_BEFORE_COLON: return "space_before_colon";
    case HTTP1_E_BAD_HEADER_VALUE: return "bad_header_value";
    case HTTP1_E_OBS_FOLD: return "obs_fold";
    case HTTP1_E_BAD_CONTENT_LENGTH: return "bad_content_length";
    case HTTP1_E_DUPLICATE_CONTENT_LENGTH: return "duplicate_content_length";
    case HTTP1_E_CL_AND_TE: return "cl_and_te";
    case HTTP1_E_BAD_TRANSFER_ENCODING: return "bad_transfer_encoding";
    case HTTP1_E_MISSING_HOST: return "missing_host";
    case HTTP1_E_DUPLICATE_HOST: return "duplicate_host";
    case HTTP1_E_BAD_CHUNK_SIZE: return "bad_chunk_size";
    case HTTP1_E_BAD_CHUNK_EXT: return "bad_chunk_ext";
    case HTTP1_E_BAD_CHUNK_END: return "bad_chunk_end";
    case HTTP1_E_TRAILER_TOO_LARGE: return "trailer_too_large";
    case HTTP1_E_BAD_TRAILER: return "bad_trailer";
    case HTTP1_E_REQUEST_LINE_TOO_LONG: return "request_line_too_long";
    case HTTP1_E_UNKNOWN_TRANSFER_CODING: return "unknown_transfer_coding";
    }
    return "unknown";
}

const char *http1_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}
