/*
 * http_client: vramd's one asynchronous HTTP/1.1 client on libuv, for the calls vramd
 * makes itself: health checks and hooks to workers (net/http_call.c wraps it) and the
 * job runner's loopback attempts (jobs/jobs_attempt.c). Proxied client traffic does not go
 * through here; see path/proxy.c.
 *
 * One exchange = one fresh TCP connection to a sockaddr, the caller's request bytes
 * (written at once; the head should say "Connection: close", see http_client_head), then
 * one answer: its head (at most HTTP_CLIENT_MAX_HEAD bytes, parsed with http/http1.h; 1xx
 * interim heads other than 101 are skipped) goes to on_head, then its body, decoded from
 * Content-Length, chunked or until-close framing, either goes to on_body in pieces as it
 * arrives (streamed: nothing is held beyond one read) or, with no on_body, is buffered up
 * to max_body bytes and handed to on_end. An optional timeout covers the whole exchange.
 * The client never half-closes its side.
 *
 * Callbacks: on_head at most once, on_body zero or more times, then on_end exactly once,
 * unless http_client_cancel was called first (then nothing more, even when the cancel is
 * made inside on_head or on_body). on_head / on_body returning -1 stop the exchange:
 * on_end(HTTP_CLIENT_SINK_FAILED). on_end runs with the handles already closing, so it may
 * free the caller's context and start new exchanges. The http_client_t is freed by the
 * module after on_end returns (or after cancel); do not use it afterwards.
 * vramd's own shortage: an exchange that fails because vramd could not get a descriptor or
 * memory (EMFILE, ENFILE, ENOBUFS, ENOMEM: http_client_local_shortage) says so, in the
 * result's sys_error or by http_client_start's -2; callers must not hold it against the
 * server, which was never reached (or not fully).
 * Return convention: 0 ok (on_end will follow), -1 error (err filled, no callback), -2 the
 * same for vramd's own shortage of descriptors or memory.
 */
#ifndef VRAMD_NET_HTTP_CLIENT_H
#define VRAMD_NET_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/buf.h"
#include "http/http1.h"

#define HTTP_CLIENT_MAX_HEAD (64 * 1024)
#define HTTP_CLIENT_MAX_HEADERS 100
#define HTTP_CLIENT_DEFAULT_MAX_BODY ((size_t)1 << 20)

typedef struct http_client http_client_t;

typedef enum http_client_end {
    HTTP_CLIENT_COMPLETE = 0,   /* the whole answer arrived */
    HTTP_CLIENT_CONNECT_FAILED, /* no connection was made, or nothing could be sent on it */
    HTTP_CLIENT_DROPPED,        /* closed, reset or malformed before the answer ended */
    HTTP_CLIENT_TIMED_OUT,      /* timeout_ms passed first */
    HTTP_CLIENT_TOO_LARGE,      /* buffered: the body passed max_body (its first max_body bytes are kept) */
    HTTP_CLIENT_SINK_FAILED,    /* on_head or on_body returned -1 */
} http_client_end_t;

/* What on_end is told; every pointer is valid during the call only. */
typedef struct http_client_result {
    http_client_end_t how;
    const char *error;        /* why, for all but COMPLETE: "connect: connection refused" ... */
    const char *head;         /* the answer's head bytes, msg's spans index into them */
    const http1_msg_t *msg;   /* the final head; NULL when none was parsed */
    const char *body;         /* buffered: the body kept (never NULL); streamed: NULL */
    size_t body_len;
    int sys_error;            /* the libuv error behind a failed end (connect, read, write), else 0 */
} http_client_result_t;

typedef struct http_client_opts {
    /* optional: the final head (head: its bytes; msg's spans index into them) */
    int (*on_head)(void *ctx, const char *head, const http1_msg_t *msg);
    /* NULL: buffer the body (up to max_body); else stream it here */
    int (*on_body)(void *ctx, const char *data, size_t len);
    void (*on_end)(void *ctx, const http_client_result_t *r);
    void *ctx;
    uint64_t timeout_ms; /* the whole exchange; 0 = no timeout */
    size_t max_body;     /* buffered body cap; 0 = HTTP_CLIENT_DEFAULT_MAX_BODY */
} http_client_opts_t;

/* Is uv_err (a libuv error code) vramd's own shortage: EMFILE, ENFILE, ENOBUFS or ENOMEM? */
bool http_client_local_shortage(int uv_err);

/* host: a numeric IPv4/IPv6 address or "localhost" (127.0.0.1). 0 ok, -1 not one of those
 * or a port outside 1..65535. */
int http_client_addr(const char *host, int port, struct sockaddr_storage *out);

/* The head lines every request of this client starts with: "METHOD PATH HTTP/1.1", Host,
 * Connection: close, Content-Length. The caller adds its own headers and http_out_end. */
void http_client_head(buf_t *b, const char *method, const char *path, const char *host, size_t body_len);

/* Takes ownership of request (malloc'd) in every case; opts is copied. */
int http_client_start(uv_loop_t *loop, const struct sockaddr *addr, char *request, size_t request_len,
                      const http_client_opts_t *opts, http_client_t **out, char *err, size_t errlen);
void http_client_cancel(http_client_t *c);

#endif
