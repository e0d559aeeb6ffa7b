/*
 * cli_http: a small blocking HTTP/1.1 client for vramctl (one request per connection).
 *
 * Connects over TCP with a timeout, sends one request with "Connection: close", and reads
 * the response with http1_parse_response (the same strict parser vramd uses). Bodies framed
 * by Content-Length, chunked (http1_chunked_feed) or the end of the connection are read;
 * 1xx interim responses are skipped. A body is either kept in memory (bounded by
 * CLI_HTTP_MAX_BODY) or, for 2xx answers when a sink is given, written to the sink as it
 * arrives (no bound: `jobs result` may fetch gigabytes).
 *
 * Every wait (connect, write, read) is bounded by one deadline, timeout_ms after the call
 * began, and gives up early when g_cli_stop is set (a signal arrived).
 *
 * Return convention: 0 when a complete response was read (resp filled; free its body);
 * -1 on a transport failure, with a message in err ("connection refused", "no answer within
 * 10s", "malformed response: ..."). *connected tells whether the TCP connection was made.
 */
#ifndef VRAMD_CLI_CLI_HTTP_H
#define VRAMD_CLI_CLI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/cli.h"

#define CLI_HTTP_MAX_BODY (256u << 20)  /* bodies kept in memory */
#define CLI_HTTP_MAX_HEAD (64u << 10)
#define CLI_HTTP_MAX_HEADERS 100

typedef struct cli_url {
    char host[256]; /* without brackets for IPv6 literals */
    char port[8];
    char prefix[512]; /* path prefix from the URL, without a trailing '/'; "" for none */
} cli_url_t;

/* "http://host[:port][/prefix]" or "host[:port]"; port default 8800. -1 with err on a bad URL
 * (https is refused: vramd speaks plain HTTP; put a TLS proxy in front of it). */
int cli_url_parse(const char *url, cli_url_t *out, char *err, size_t errlen);

typedef struct cli_http_request {
    const char *method;
    const char *path; /* origin-form, starts with '/' (the URL prefix is prepended) */
    const char *token; /* bearer token or NULL/"" */
    const char *content_type;
    const char *body;
    size_t body_len;
    uint64_t timeout_ms;
} cli_http_request_t;

int cli_http_exchange(const cli_url_t *url, const cli_http_request_t *req, FILE *sink,
                      cli_response_t *resp, bool *connected, char *err, size_t errlen);

#endif
