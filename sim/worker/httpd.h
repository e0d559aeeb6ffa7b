/*
 * httpd: simworker's HTTP/1.1 server on libuv, built on the project's pure parser (http1).
 *
 * Keep-alive, pipelining (requests on one connection are answered in order, one at a time:
 * the next is parsed after the current response is out), Content-Length and chunked request
 * bodies (bounded by max_body: 413), Expect: 100-continue, HEAD. Idle keep-alive connections
 * are closed after keepalive_ms like uvicorn does (default 5 s), which is something a proxy
 * in front must cope with. At most SW_HTTPD_MAX_CONNS connections.
 *
 * Like a Python server, it does not notice a client that leaves while its request runs:
 * the work goes on and the answer is dropped when it cannot be written.
 *
 * Request lifetime: the handler gets a sw_http_req_t that stays valid until the handler
 * answers it, with exactly one of sw_http_respond() or sw_http_stream_begin() ...
 * sw_http_stream_end(); after that the pointer must not be used. A handler may answer
 * inside its call or later (from a timer).
 * Return convention: sw_httpd_start returns the server or NULL (err filled).
 */
#ifndef VRAMD_SIM_WORKER_HTTPD_H
#define VRAMD_SIM_WORKER_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SW_HTTPD_MAX_CONNS 4096
#define SW_HTTPD_MAX_HEADERS 100
#define SW_HTTPD_MAX_HEAD 16384

typedef struct sw_httpd sw_httpd_t;
typedef struct sw_conn sw_conn_t;

typedef struct sw_http_req {
    sw_conn_t *conn;
    char method[16];
    char path[1024];  /* target before '?' */
    char query[1024]; /* after '?', without it */
    char content_type[256];
    char request_id[128]; /* X-Request-Id, echoed back; "" when absent */
    char accept[128];
    const char *body;
    size_t body_len;
    bool head_method;
} sw_http_req_t;

typedef void (*sw_http_handler)(sw_http_req_t *req, void *ctx);

typedef struct sw_httpd_opts {
    const char *host;
    int port; /* 0: any free port, see *bound_port */
    uint64_t max_body;
    uint64_t keepalive_ms;
    sw_http_handler on_request;
    void *ctx;
} sw_httpd_opts_t;

sw_httpd_t *sw_httpd_start(uv_loop_t *loop, const sw_httpd_opts_t *o, int *bound_port, char *err,
                           size_t errlen);
/* Stop accepting and close idle connections; busy ones close after their response. */
void sw_httpd_stop(sw_httpd_t *s);

/* extra_headers: "Name: value\r\n" lines, or NULL. */
void sw_http_respond(sw_http_req_t *r, int status, const char *content_type,
                     const char *extra_headers, const void *body, size_t len);
/* A chunked response (text/event-stream for SSE): begin, any number of writes, end. */
void sw_http_stream_begin(sw_http_req_t *r, int status, const char *content_type,
                          const char *extra_headers);
void sw_http_stream_write(sw_http_req_t *r, const void *data, size_t len);
void sw_http_stream_end(sw_http_req_t *r);

#endif
