/*
 * http1: strict, pure HTTP/1.1 message parsing. No I/O, no allocation, no global state.
 *
 * Bytes in; a parsed message head, "need more", or an error with its byte position out.
 * It is the only place vramd (and simworker) interpret HTTP/1.x syntax, so it is where
 * request smuggling is stopped. It is fuzzed (tests/fuzz/fuzz_http1.c).
 *
 * Heads. http1_parse_request / http1_parse_response look at buf[0..len) which holds the
 * start of a message. They return:
 *   HTTP1_NEED_MORE  the head (through the empty line) is not complete yet. *scan_from is
 *                    updated so the next call with more bytes resumes the search for the
 *                    end of the head instead of rescanning (callers reset it to 0 for each
 *                    new message). If len already exceeds limits->max_header_bytes the
 *                    result is HTTP1_ERROR with HTTP1_E_HEAD_TOO_LARGE instead (for a
 *                    request whose request line alone does not end within the limit:
 *                    HTTP1_E_REQUEST_LINE_TOO_LONG, answered 414 like nginx).
 *   HTTP1_OK         msg is filled in; msg->head_len bytes of buf were the head. Spans in
 *                    msg point into buf by offset, so they survive a realloc of buf.
 *   HTTP1_ERROR      err says what and where. The connection must not be reused.
 *
 * Strictness (each is an HTTP1_ERROR, for requests; responses follow the same rules where
 * they apply, and the proxy answers them with 502):
 *   - lines end in CRLF; a bare CR or bare LF anywhere in the head is an error;
 *   - request line: METHOD SP origin-form-target (or "*") SP HTTP/1.0|HTTP/1.1, one SP each;
 *     the target is visible ASCII only; other versions -> HTTP1_E_VERSION;
 *   - header names are tokens, with no whitespace before the colon; values are trimmed of
 *     SP/HTAB and may contain VCHAR, SP, HTAB and obs-text only (NUL, CR, LF, other CTLs:
 *     error); obs-fold (a line starting with SP/HTAB) is an error;
 *   - more than limits->max_headers headers -> HTTP1_E_TOO_MANY_HEADERS;
 *   - Content-Length: 1*DIGIT, no sign, no overflow of 2^53, at most one such header;
 *   - Transfer-Encoding in a request: exactly "chunked" (case-insensitive), at most one such
 *     header, only with HTTP/1.1; together with Content-Length -> HTTP1_E_CL_AND_TE; a
 *     well-formed list of codings other than exactly "chunked" ("identity", "gzip, chunked",
 *     "chunked, identity") -> HTTP1_E_UNKNOWN_TRANSFER_CODING (RFC 9112 6.1: 501), reported
 *     after every other head error (so CL+TE stays a 400); an empty element, a non-token or
 *     "chunked" twice -> HTTP1_E_BAD_TRANSFER_ENCODING;
 *   - HTTP/1.1 requests need exactly one Host header.
 *
 * Bodies. The head decides the body framing (msg->body). Content-Length bodies are counted
 * by the caller. Chunked bodies go through http1_chunked_feed, which calls on_data for each
 * run of payload bytes (spans of the input, no copy) and stops after the last chunk and its
 * trailers. Chunk sizes are hex without sign or whitespace and must fit in 2^53; chunk
 * extensions and trailers are bounded.
 *
 * Return convention for the whole module: HTTP1_OK (1), HTTP1_NEED_MORE (0),
 * HTTP1_ERROR (-1); helpers that answer a question return bool.
 */
#ifndef VRAMD_HTTP_HTTP1_H
#define VRAMD_HTTP_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP1_OK 1
#define HTTP1_NEED_MORE 0
#define HTTP1_ERROR (-1)

#define HTTP1_MAX_CONTENT_LENGTH ((uint64_t)1 << 53)

typedef struct http1_limits {
    size_t max_header_bytes; /* whole head, request line through the empty line */
    size_t max_headers;      /* number of header lines; <= capacity of the hdrs array */
} http1_limits_t;

typedef struct http1_span {
    uint32_t off;
    uint32_t len;
} http1_span_t;

typedef struct http1_header {
    http1_span_t name;
    http1_span_t value; /* trimmed of leading/trailing SP and HTAB */
} http1_header_t;

typedef enum http1_body {
    HTTP1_BODY_NONE = 0,    /* no body at all (no CL/TE in a request; HEAD/1xx/204/304 responses) */
    HTTP1_BODY_LENGTH,      /* content_length bytes (may be 0) */
    HTTP1_BODY_CHUNKED,     /* chunked transfer coding */
    HTTP1_BODY_UNTIL_CLOSE, /* responses only: read until the peer closes */
} http1_body_t;

typedef struct http1_msg {
    /* request line (requests) */
    http1_span_t method;
    http1_span_t target;
    /* status line (responses) */
    int status;
    http1_span_t reason;
    int version_minor;       /* 0 or 1 */
    size_t head_len;         /* bytes of the head including the final CRLF CRLF */
    http1_header_t *headers; /* caller's array, filled with n_headers entries */
    size_t n_headers;
    http1_body_t body;
    uint64_t content_length; /* when body == HTTP1_BODY_LENGTH */
    bool keep_alive;         /* version default adjusted by Connection: close / keep-alive */
    bool expect_continue;    /* request had "Expect: 100-continue" */
    bool upgrade;            /* Connection: upgrade with an Upgrade header */
} http1_msg_t;

typedef enum http1_errcode {
    HTTP1_E_NONE = 0,
    HTTP1_E_HEAD_TOO_LARGE,
    HTTP1_E_TOO_MANY_HEADERS,
    HTTP1_E_BAD_REQUEST_LINE,
    HTTP1_E_BAD_STATUS_LINE,
    HTTP1_E_BAD_METHOD,
    HTTP1_E_BAD_TARGET,
    HTTP1_E_VERSION,
    HTTP1_E_BARE_CR_OR_LF,
    HTTP1_E_BAD_HEADER_NAME,
    HTTP1_E_SPACE_BEFORE_COLON,
    HTTP1_E_BAD_HEADER_VALUE,
    HTTP1_E_OBS_FOLD,
    HTTP1_E_BAD_CONTENT_LENGTH,
    HTTP1_E_DUPLICATE_CONTENT_LENGTH,
    HTTP1_E_CL_AND_TE,
    HTTP1_E_BAD_TRANSFER_ENCODING,
    HTTP1_E_MISSING_HOST,
    HTTP1_E_DUPLICATE_HOST,
    HTTP1_E_BAD_CHUNK_SIZE,
    HTTP1_E_BAD_CHUNK_EXT,
    HTTP1_E_BAD_CHUNK_END,
    HTTP1_E_TRAILER_TOO_LARGE,
    HTTP1_E_BAD_TRAILER,
    HTTP1_E_REQUEST_LINE_TOO_LONG,    /* 414: the request line does not end within the limit */
    HTTP1_E_UNKNOWN_TRANSFER_CODING,  /* 501: a request coding vramd does not implement */
} http1_errcode_t;

typedef struct http1_error {
    http1_errcode_t code;
    size_t pos;       /* byte offset in the input where the problem was found */
    const char *what; /* static, human-readable: "both Content-Length and Transfer-Encoding" */
} http1_error_t;

int http1_parse_request(const char *buf, size_t len, const http1_limits_t *limits,
                        http1_msg_t *msg, http1_header_t *hdrs, size_t *scan_from,
                        http1_error_t *err);

/* request_was_head: the request this answers was a HEAD (no body whatever the headers). */
int http1_parse_response(const char *buf, size_t len, const http1_limits_t *limits,
                         bool request_was_head, http1_msg_t *msg, http1_header_t *hdrs,
                         size_t *scan_from, http1_error_t *err);

/* Chunked body decoder. */
typedef void (*http1_data_cb)(void *ctx, const char *data, size_t len);

typedef struct http1_chunked {
    int state;
    uint64_t remaining;   /* payload bytes left in the current chunk */
    unsigned size_digits; /* hex digits read for the current chunk size */
    size_t ext_len;       /* bytes of chunk extension in the current size line */
    size_t trailer_len;   /* bytes of trailer section so far */
    size_t max_ext;       /* bound on one chunk-ext, default 4096 */
    size_t max_trailer;   /* bound on the trailer section, default 16384 */
    uint64_t total;       /* payload bytes decoded so far */
} http1_chunked_t;

void http1_chunked_init(http1_chunked_t *d, size_t max_trailer);
/* Feed in[0..len). *consumed = bytes used. HTTP1_NEED_MORE: all consumed, body not finished.
 * HTTP1_OK: the body ended after *consumed bytes (the rest belongs to the next message).
 * HTTP1_ERROR: malformed, err filled (pos relative to in). */
int http1_chunked_feed(http1_chunked_t *d, const char *in, size_t len, size_t *consumed,
                       http1_data_cb on_data, void *ctx, http1_error_t *err);

/* Helpers over a parsed head (buf is the buffer the head was parsed from). */
bool http1_span_eq(const char *buf, http1_span_t s, const char *lit);        /* exact */
bool http1_span_ieq(const char *buf, http1_span_t s, const char *lit);       /* ASCII case-insensitive */
bool http1_header_is(const char *buf, const http1_header_t *h, const char *name);
/* First header with this name, or NULL. */
const http1_header_t *http1_find_header(const char *buf, const http1_msg_t *msg, const char *name);
/* Does a comma-separated header value contain this token (case-insensitive)? */
bool http1_value_has_token(const char *buf, http1_span_t value, const char *token);
/* Hop-by-hop headers a proxy must not forward: Connection, Keep-Alive, Proxy-Connection,
 * TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate, Proxy-Authorization, and any
 * header named in a Connection header of msg. */
bool http1_is_hop_by_hop(const char *buf, const http1_msg_t *msg, const http1_header_t *h);
const char *http1_errcode_name(http1_errcode_t code);
/* Standard reason phrase for a status ("OK", "Not Found", ...; "Unknown" otherwise). */
const char *http1_reason(int status);

#endif
