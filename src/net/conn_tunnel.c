/*
 * conn_tunnel: an upgraded client connection's reading. Once the owner of an ACTIVE request
 * (path/proxy_upgrade.c) has a 101 from the worker, the connection stops being HTTP: conn.c's
 * reader (parser, pipelining, limits) is replaced by this one, which hands every byte to the
 * owner's function. Writing still goes through conn_write, so limits.send_timeout and the
 * write backlog (conn_want_drained -> the request's ops->drained) hold for tunnelled bytes.
 *
 * Invariants: a connection that entered the tunnel never goes back to HEAD (its request is
 * ended with keep_alive off); the owner's function is never called after conn_tunnel_end or
 * once the connection is CLOSING; the client's FIN or a read error closes the connection
 * (conn_abort), which cancels the request through its ops (the owner closes its side there).
 */
#include <stdbool.h>
#include <stddef.h>

#include "net/conn.h"

#define TUNNEL_READ_CHUNK (64 * 1024)

static char g_tunnel_read[TUNNEL_READ_CHUNK];

static void tunnel_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    (void)suggested;
    *b = uv_buf_init(g_tunnel_read, sizeof g_tunnel_read);
}

static void tunnel_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    conn_t *c = s->data;
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        c->eof = true;
        conn_abort(c); /* the owner's cancel closes the worker's side */
        return;
    }
    if (nread == 0 || !c->tunnel_fn)
        return; /* after the tunnel ended: discarded until the client's FIN */
    c->tunnel_fn(c->tunnel_ctx, b->base, (size_t)nread);
}

void conn_tunnel_begin(conn_t *c, void (*fn)(void *ctx, const char *data, size_t len), void *ctx)
{
    if (c->state == CONN_CLOSING)
        return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->read_paused = false;
    c->tunnel = true;
    c->tunnel_paused = false;
    c->tunnel_fn = fn;
    c->tunnel_ctx = ctx;
    uv_read_start((uv_stream_t *)&c->tcp, tunnel_alloc, tunnel_read);
    if (c->in.len) {
        /* sent right behind the request head, before the worker's 101 */
        size_t n = c->in.len;
        c->in.len = 0;
        fn(ctx, c->in.data, n);
    }
}

void conn_tunnel_pause(conn_t *c, bool pause)
{
    if (c->state == CONN_CLOSING || !c->tunnel || c->tunnel_paused == pause)
        return;
    c->tunnel_paused = pause;
    if (pause)
        uv_read_stop((uv_stream_t *)&c->tcp);
    else
        uv_read_start((uv_stream_t *)&c->tcp, tunnel_alloc, tunnel_read);
}

void conn_tunnel_end(conn_t *c)
{
    c->tunnel_fn = NULL;
    c->tunnel_ctx = NULL;
    conn_tunnel_pause(c, false); /* read on, so the client's FIN is seen */
}
