/*
 * http_out: the one way vramd writes HTTP/1.1 heads (responses to clients, requests to
 * workers). Pure: it appends to a buf_t and does no I/O.
 *
 * A head is built with http_out_status (or a request line written by the caller), any
 * number of http_out_header / http_out_copy_headers, then http_out_end. The buffer fails
 * closed (common/buf.h): check buf_failed once, after http_out_end, before sending.
 * http_out_copy_headers copies a parsed message's end-to-end headers: never the hop-by-hop
 * ones (Connection and what it names, Keep-Alive, Transfer-Encoding, TE, Trailer, Upgrade,
 * Proxy-*), never Content-Length (the writer frames the body itself), and never the names
 * in `skip` (NULL-terminated, case-insensitive).
 */
#ifndef VRAMD_HTTP_HTTP_OUT_H
#define VRAMD_HTTP_HTTP_OUT_H

#include <stddef.h>

#include "common/buf.h"
#include "http/http1.h"

/* "HTTP/1.1 <status> <reason>\r\n"; reason NULL: the standard one for the status. */
void http_out_status(buf_t *b, int status, const char *reason, size_t reason_len);
/* "Name: value\r\n" with the value formatted. */
void http_out_header(buf_t *b, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Header lines already formatted ("Name: value\r\n" ...), appended as they are. */
void http_out_raw(buf_t *b, const char *lines, size_t len);
void http_out_copy_headers(buf_t *b, const char *raw, const http1_msg_t *msg, const char *const *skip);
/* The blank line that ends the head. */
void http_out_end(buf_t *b);

#endif
