/*
 * http_call: a worker call on net/http_client (see http_call.h).
 *
 * Here: checking the request (method a token, path origin-form and visible, port, host
 * numeric or localhost, content type a header value), writing its bytes with http_out, and
 * turning the client's end into the callback's (status, body, error): COMPLETE and
 * TOO_LARGE are answers (health checks and hooks care about the status; a hook answering
 * 200 with a big body has still succeeded), every other end is status -1 with the error
 * (HTTP_CALL_LOCAL_SHORTAGE when vramd itself ran short: http_client_local_shortage).
 *
 * Invariants: the http_call_t lives from a successful start until the callback returns
 * or the cancel; it owns the client handle and nothing else. A cancel from inside the
 * callback is a no-op (`ended`).
 * Defaults: timeout_ms 0 -> HTTP_CALL_DEFAULT_TIMEOUT_MS; max_response 0 -> 1 MiB;
 * content_type NULL with a body -> application/json.
 */
#include "net/http_call.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "net/http_client.h"
#include "http/http_out.h"

#define HTTP_CALL_DEFAULT_TIMEOUT_MS 30000u
#define HTTP_CALL_MAX_REQUEST_HEAD 8192

struct http_call {
    http_client_t *client;
    http_call_cb cb;
    void *ctx;
    bool ended; /* the callback runs or ran: a cancel now is a no-op */
};

static void on_end(void *ctx, const http_client_result_t *r)
{
    http_call_t *c = ctx;
    c->ended = true;
    if (r->how == HTTP_CLIENT_COMPLETE || r->how == HTTP_CLIENT_TOO_LARGE)
        c->cb(c->ctx, r->msg->status, r->body, r->body_len, NULL);
    else
        c->cb(c->ctx, http_client_local_shortage(r->sys_error) ? HTTP_CALL_LOCAL_SHORTAGE : -1, NULL, 0, r->error);
    free(c);
}

/* ---- checking and writing the request ----------------------------------------------------- */

static bool is_token(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              strchr("!#$%&'*+-.^_`|~", ch)))
            return false;
    }
    return true;
}

static bool is_visible(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

static bool is_header_value(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return false;
    return true;
}

/* NULL when the request is fine, else why not. */
static const char *check(const http_call_req_t *req, const char *method, const char *path, const char *content_type)
{
    if (!is_token(method))
        return "bad method";
    if (path[0] != '/' || !is_visible(path) || strlen(path) > HTTP_CALL_MAX_REQUEST_HEAD / 2)
        return "bad path";
    if (content_type && (!is_header_value(content_type) || strlen(content_type) > 256))
        return "bad content type";
    if (req->body && req->body_len > UINT32_MAX - HTTP_CALL_MAX_REQUEST_HEAD)
        return "request body too large";
    return NULL;
}

/* The request bytes (malloc'd), or NULL when out of memory. */
static char *build(const http_call_req_t *req, const char *method, const char *path, const char *content_type,
                   bool v6, size_t *len)
{
    size_t body_len = req->body ? req->body_len : 0;
    char host[300];
    snprintf(host, sizeof host, v6 ? "[%s]:%d" : "%s:%d", req->host, req->port);
    buf_t r;
    buf_init(&r, HTTP_CALL_MAX_REQUEST_HEAD + body_len);
    http_client_head(&r, method, path, host, body_len);
    if (content_type)
        http_out_header(&r, "Content-Type", "%s", content_type);
    http_out_end(&r);
    if (body_len)
        buf_append(&r, req->body, body_len);
    if (buf_failed(&r)) {
        buf_free(&r);
        return NULL;
    }
    return buf_steal(&r, len);
}

/* ---- public API ----------------------------------------------------------------------- */

int http_call_start(uv_loop_t *loop, const http_call_req_t *req, http_call_cb cb, void *ctx,
                    http_call_t **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!req || !cb || !req->host) {
        snprintf(err, errlen, "missing request or callback");
        return -1;
    }
    const char *method = req->method ? req->method : "GET";
    const char *path = req->path ? req->path : "/";
    const char *content_type = req->content_type ? req->content_type : req->body ? "application/json" : NULL;
    const char *bad = check(req, method, path, content_type);
    struct sockaddr_storage addr;
    if (!bad && (req->port < 1 || req->port > 65535)) {
        snprintf(err, errlen, "bad port %d", req->port);
        return -1;
    }
    if (!bad && http_client_addr(req->host, req->port, &addr) != 0) {
        snprintf(err, errlen, "bad host \"%s\": a numeric address or localhost is needed", req->host);
        return -1;
    }
    http_call_t *c = bad ? NULL : calloc(1, sizeof *c);
    size_t len = 0;
    char *bytes = c ? build(req, method, path, content_type, addr.ss_family == AF_INET6, &len) : NULL;
    if (!bytes) {
        snprintf(err, errlen, "%s", bad ? bad : "out of memory");
        free(c);
        return bad ? -1 : -2;
    }
    c->cb = cb;
    c->ctx = ctx;
    http_client_opts_t o = {.on_end = on_end,
                            .ctx = c,
                            .timeout_ms = req->timeout_ms ? req->timeout_ms : HTTP_CALL_DEFAULT_TIMEOUT_MS,
                            .max_body = req->max_response};
    int rc = http_client_start(loop, (const struct sockaddr *)&addr, bytes, len, &o, &c->client, err, errlen);
    if (rc != 0) {
        free(c);
        return rc;
    }
    if (out)
        *out = c;
    return 0;
}

void http_call_cancel(http_call_t *c)
{
    if (!c || c->ended)
        return;
    http_client_cancel(c->client);
    free(c);
}
