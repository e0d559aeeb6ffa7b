/*
 * respond: simworker's JSON answers (sw_respond_json) and the JSON string escaping they use
 * (sw_jesc). The lowest room of the worker's request side: routes, jobs, model and gate
 * answer through it; it calls only httpd.c and the log's escaper.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "worker.h"

const char *sw_jesc(const char *s, char *out, size_t cap)
{
    size_t n = log_json_escape(out, cap, s, strlen(s));
    out[n < cap ? n : cap - 1] = 0;
    return out;
}

void sw_respond_json(sw_http_req_t *req, int status, const char *extra_headers, const char *fmt, ...)
{
    buf_t b;
    buf_init(&b, 1 << 20);
    va_list ap;
    va_start(ap, fmt);
    char tmp[8192];
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof(tmp)) {
        buf_append(&b, tmp, (size_t)n);
    } else {
        va_start(ap, fmt);
        if (buf_reserve(&b, (size_t)n + 1) == 0) {
            vsnprintf(b.data, (size_t)n + 1, fmt, ap);
            b.len = (size_t)n;
        }
        va_end(ap);
    }
    sw_http_respond(req, status, "application/json", extra_headers, b.data ? b.data : "", b.len);
    buf_free(&b);
}
