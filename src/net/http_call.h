/*
 * http_call: vramd's own calls to workers (health checks, unload/reload/clear_cache hooks):
 * one request built from method, path and an optional body, the answer buffered up to
 * max_response, a timeout. A thin layer over net/http_client.h, which does the exchange.
 *
 * One call = one fresh TCP connection to host:port, "Connection: close", the request,
 * the whole response read (bounded by max_response) and parsed with http1, then the
 * callback. A timeout covers the whole call (connect, write, read).
 *
 * The callback runs exactly once, unless http_call_cancel() was called first: then never.
 * status is the HTTP status, or -1 when there was no valid response (error says why:
 * "connect: connection refused", "timeout after 2000 ms", "malformed response: ..."), or
 * HTTP_CALL_LOCAL_SHORTAGE when the call failed for want of vramd's own descriptors or memory
 * (EMFILE, ENFILE, ENOBUFS, ENOMEM): not the worker's doing, never to be held against it.
 * A body longer than max_response still counts as an answer: the status and its first
 * max_response bytes, error NULL. body is valid only during the callback. The handle is
 * freed by the module after the callback returns (or at cancel); do not use it afterwards.
 * Return convention: 0 ok (callback will follow), -1 error (err filled, no callback), -2 the
 * same for vramd's own shortage (as HTTP_CALL_LOCAL_SHORTAGE).
 */
#ifndef VRAMD_NET_HTTP_CALL_H
#define VRAMD_NET_HTTP_CALL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define HTTP_CALL_LOCAL_SHORTAGE (-2) /* the callback's status: vramd's own descriptors or memory ran out */

typedef struct http_call http_call_t;

typedef void (*http_call_cb)(void *ctx, int status, const char *body, size_t body_len,
                             const char *error);

typedef struct http_call_req {
    const char *host; /* numeric IPv4/IPv6 address or "localhost" */
    int port;
    const char *method;
    const char *path;
    const char *body; /* may be NULL */
    size_t body_len;
    const char *content_type; /* default application/json when body != NULL */
    uint64_t timeout_ms;
    size_t max_response; /* bytes of body kept; default 1 MiB */
} http_call_req_t;

int http_call_start(uv_loop_t *loop, const http_call_req_t *req, http_call_cb cb, void *ctx,
                    http_call_t **out, char *err, size_t errlen);
void http_call_cancel(http_call_t *c);

#endif
