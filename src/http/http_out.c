/* http_out: writing HTTP/1.1 heads into a buffer. See http_out.h. */
#include "http/http_out.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void http_out_status(buf_t *b, int status, const char *reason, size_t reason_len)
{
    if (!reason || reason_len == 0) {
        reason = http1_reason(status);
        reason_len = strlen(reason);
    }
    buf_printf(b, "HTTP/1.1 %d %.*s\r\n", status, (int)reason_len, reason);
}

void http_out_header(buf_t *b, const char *name, const char *fmt, ...)
{
    buf_append_str(b, name);
    buf_append(b, ": ", 2);
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
    buf_append(b, "\r\n", 2);
}

void http_out_raw(buf_t *b, const char *lines, size_t len) { buf_append(b, lines, len); }

static int skipped(const char *raw, const http1_header_t *h, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (http1_header_is(raw, h, *skip))
            return 1;
    return 0;
}

void http_out_copy_headers(buf_t *b, const char *raw, const http1_msg_t *msg, const char *const *skip)
{
    for (size_t i = 0; i < msg->n_headers; i++) {
        const http1_header_t *h = &msg->headers[i];
        if (http1_is_hop_by_hop(raw, msg, h) || http1_header_is(raw, h, "Content-Length") || skipped(raw, h, skip))
            continue;
        buf_append(b, raw + h->name.off, h->name.len);
        buf_append(b, ": ", 2);
        buf_append(b, raw + h->value.off, h->value.len);
        buf_append(b, "\r\n", 2);
    }
}

void http_out_end(buf_t *b) { buf_append(b, "\r\n", 2); }
