/*
 * result_send: a stored result, streamed from its file to a client (see result_send.h).
 *
 * The send owns the request's answer while it runs: its ops are cancel (the client left:
 * the send ends and closes its file) and drained (the client read enough: write more).
 * No timer, no polling: pieces are written while the connection's backlog is under
 * CONN_BACKLOG_MAX, then the send waits for the connection to say it drained.
 */
#include "serve/result_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "core/core.h"
#include "core/request.h"
#include "net/conn.h"
#include "http/http_out.h"

#define RESULT_SEND_PIECE (64 * 1024)

typedef struct result_send {
    conn_t *conn;
    request_t *req;
    int fd;
    uint64_t off, left;
} result_send_t;

static char g_piece[RESULT_SEND_PIECE];

static void send_free(result_send_t *s)
{
    request_set_ops(s->req, NULL);
    s->req->owner = NULL;
    close(s->fd);
    free(s);
}

/* The client left (request ops): the send ends. */
static void send_cancel(request_t *r)
{
    result_send_t *s = r->owner;
    if (s)
        send_free(s);
}

static void send_some(result_send_t *s);

/* The client read enough (request ops): write more. */
static void send_drained(request_t *r)
{
    result_send_t *s = r->owner;
    if (s)
        send_some(s);
}

static const request_ops_t send_ops = {.cancel = send_cancel, .drained = send_drained};

/* Write what the connection takes now. The send may be freed on return. */
static void send_some(result_send_t *s)
{
    conn_t *c = s->conn;
    while (s->left > 0) {
        if (conn_write_backlog(c) >= CONN_BACKLOG_MAX) {
            conn_want_drained(c); /* send_drained follows */
            return;
        }
        size_t want = s->left < sizeof g_piece ? (size_t)s->left : sizeof g_piece;
        ssize_t n = pread(s->fd, g_piece, want, (off_t)s->off);
        if (n <= 0) {
            /* the file shrank or broke under us: the head promised more, so abort */
            log_event(LOG_WARN, "job_result_read_failed", "request_id=%s offset=%llu", s->req->id,
                      (unsigned long long)s->off);
            send_free(s);
            conn_abort(c);
            return;
        }
        s->off += (uint64_t)n;
        s->left -= (uint64_t)n;
        if (conn_write(c, g_piece, (size_t)n) != 0)
            return; /* the connection closed: send_cancel freed the send */
    }
    send_free(s);
    conn_request_done(c);
}

int result_send_start(conn_t *c, request_t *r, int fd, uint64_t size, const char *content_type)
{
    result_send_t *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return -1;
    }
    buf_t h;
    buf_init(&h, 4096);
    http_out_status(&h, 200, NULL, 0);
    http_out_header(&h, "Content-Type", "%s",
                    content_type && content_type[0] ? content_type : "application/octet-stream");
    http_out_header(&h, "Content-Length", "%llu", (unsigned long long)size);
    http_out_header(&h, "X-Request-Id", "%s", r->id);
    if (!c->keep_alive)
        http_out_header(&h, "Connection", "close");
    http_out_end(&h);
    r->status = 200;
    int rc = buf_failed(&h) ? -1 : conn_write(c, h.data, h.len);
    buf_free(&h);
    if (rc != 0) {
        free(s);
        close(fd);
        return -1;
    }
    if (r->head_method || size == 0) {
        close(fd);
        free(s);
        conn_request_done(c);
        return 0;
    }
    s->conn = c;
    s->req = r;
    s->fd = fd;
    s->left = size;
    r->owner = s;
    request_set_ops(r, &send_ops);
    send_some(s);
    return 0;
}
