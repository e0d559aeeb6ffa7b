/*
 * result_send: a stored result, streamed from its file to a client (see result_send.h).
 *
 * Every send in progress is on one list, served by one loop-wide timer that runs only
 * while the list is not empty.
 */
#include "jobs/result_send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "net/conn.h"

#define RESULT_SEND_PIECE (64 * 1024)
#define RESULT_SEND_TICK_MS 2

typedef struct result_send {
    list_t link;   /* g_sends */
    list_t anchor; /* holds the request's wait_link while the request lives */
    conn_t *conn;
    request_t *req;
    int fd;
    uint64_t off, left;
} result_send_t;

static list_t g_sends = {&g_sends, &g_sends};
static uv_timer_t g_timer;
static bool g_timer_ready;
static char g_piece[RESULT_SEND_PIECE];

static void send_free(result_send_t *s)
{
    list_remove(&s->link);
    if (!list_empty(&s->anchor))
        list_remove(s->anchor.next); /* the request's wait_link */
    close(s->fd);
    free(s);
}

/* Write what the connection takes now. The send may be freed on return. */
static void send_some(result_send_t *s)
{
    while (!list_empty(&s->anchor) && s->left > 0 && conn_write_backlog(s->conn) < RESULT_SEND_BACKLOG_MAX) {
        size_t want = s->left < sizeof g_piece ? (size_t)s->left : sizeof g_piece;
        ssize_t n = pread(s->fd, g_piece, want, (off_t)s->off);
        if (n <= 0) {
            /* the file shrank or broke under us: the head promised more, so abort */
            log_event(LOG_WARN, "job_result_read_failed", "request_id=%s offset=%llu", s->req->id,
                      (unsigned long long)s->off);
            conn_t *c = s->conn;
            send_free(s);
            conn_abort(c);
            return;
        }
        s->off += (uint64_t)n;
        s->left -= (uint64_t)n;
        conn_write(s->conn, g_piece, (size_t)n); /* on failure the conn closes: the anchor empties */
    }
    if (list_empty(&s->anchor)) {
        send_free(s); /* the client went away */
        return;
    }
    if (s->left == 0) {
        conn_t *c = s->conn;
        send_free(s);
        conn_request_done(c);
    }
}

static void on_tick(uv_timer_t *t)
{
    list_foreach_safe(it, tmp, &g_sends) send_some(list_entry(it, result_send_t, link));
    if (list_empty(&g_sends))
        uv_timer_stop(t);
}

int result_send_start(conn_t *c, request_t *r, int fd, uint64_t size, const char *content_type)
{
    result_send_t *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return -1;
    }
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %llu\r\nX-Request-Id: %s\r\n%s\r\n",
                     content_type && content_type[0] ? content_type : "application/octet-stream",
                     (unsigned long long)size, r->id, c->keep_alive ? "" : "Connection: close\r\n");
    r->status = 200;
    if (conn_write(c, head, (size_t)n) != 0) {
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
    list_init(&s->anchor);
    list_insert_tail(&s->anchor, &r->wait_link);
    list_insert_tail(&g_sends, &s->link);
    if (!g_timer_ready) {
        uv_timer_init(c->core->loop, &g_timer);
        uv_unref((uv_handle_t *)&g_timer);
        g_timer_ready = true;
    }
    if (!uv_is_active((uv_handle_t *)&g_timer))
        uv_timer_start(&g_timer, on_tick, RESULT_SEND_TICK_MS, RESULT_SEND_TICK_MS);
    send_some(s);
    return 0;
}
