/*
 * proxy_upgrade: protocol upgrades (WebSocket) passed through to a worker, for models whose
 * config lists them (`upgrade: [websocket]`); every other upgrade is refused (net/conn.c
 * refuses one that is not a body-less HTTP/1.1 GET, this file one for a model without the
 * key, serve/api.c one for vramd's own routes). Strict parsing stays for everything else:
 * the head of an upgrade request is parsed like any other, and the connection leaves HTTP
 * only after the worker answered 101.
 *
 * Admission: a ready instance of the model (instance_usable) and room under
 * limits.upgrades_max (503 upgrades_full) and limits.upgrades_per_client (429
 * too_many_upgrades, per client address). An upgraded connection does NOT hold a
 * concurrency slot nor a memory reservation, and does not start a worker (no ready
 * instance: 503 model_not_ready with Retry-After; WebSocket clients reconnect): a page that
 * keeps ComfyUI's /ws open must not block prompts nor keep memory booked. It counts as a
 * client connection (max_connections) and does not keep its instance from being evicted,
 * unloaded or recycled: a worker that stops (CORE_EV_INSTANCE_DOWN) closes its tunnels, so
 * an idle browser tab cannot pin a model on a GPU. A drain closes every tunnel at its start
 * (CORE_EV_DRAINING): a tunnel has no end of its own to wait for.
 *
 * Phases of a tunnel: CONNECTING -> HANDSHAKE (request head sent, the answer head read) ->
 * OPEN (101: raw bytes both ways) | REFUSAL (another status: its body, at most 1 MiB, is
 * read and passed back as a normal response, Connection: close) ; any -> CLOSED.
 *
 * Backpressure: the worker is not read while the client's unread bytes pass CONN_BACKLOG_MAX
 * (resumed by the request's drained op), and the client is not read while more than
 * TUN_BACKLOG_MAX bytes wait for the worker's socket. Idle bound: no byte either way for
 * limits.upgrade_idle_timeout closes both sides (the same timer bounds the handshake).
 *
 * Ownership: the request stays attached to its connection while the tunnel is open (state
 * LOCAL, ops = this file's); the connection closing cancels it (tunnel_cancel), a close
 * from the worker's side ends it (tunnel_finish: the client gets the bytes already queued,
 * then FIN). The tunnel is freed in its handles' close callback, after it left g_tunnels.
 * Events: upgrade_open, upgrade_closed (reason, bytes each way, duration).
 */
#include "path/proxy_upgrade.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "http/http1.h"
#include "http/http_out.h"
#include "net/conn.h"
#include "path/proxy.h"
#include "workers/instance.h"

#define TUN_BACKLOG_MAX (256 * 1024)  /* bytes waiting for the worker before the client is paused */
#define TUN_HEAD_MAX (64 * 1024)      /* the worker's answer head */
#define TUN_REFUSAL_MAX (1024 * 1024) /* a non-101 answer's body, held and passed back */
#define TUN_MAX_HEADERS 128

enum tun_phase { TUN_CONNECTING = 0, TUN_HANDSHAKE, TUN_REFUSAL, TUN_OPEN, TUN_CLOSED };

typedef struct tunnel {
    list_t link; /* g_tunnels until closed */
    request_t *req;
    conn_t *conn;
    instance_t *inst;
    char model[128];
    unsigned inst_id;
    char client[64]; /* the client's address, for upgrades_per_client */
    enum tun_phase phase;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_timer_t timer; /* connect timeout, then the idle bound */
    buf_t in;         /* the worker's answer head (and what came with it) */
    size_t scan_from;
    http1_msg_t resp;
    char ctype[128];
    uint64_t body_left;
    http1_chunked_t chunked;
    buf_t body;       /* a refusal's body */
    bool body_failed;
    uint64_t last_ms, opened_ms, to_worker, to_client;
    size_t up_queued; /* bytes written to the worker's socket and not done yet */
    bool up_paused;
    int handles_open;
} tunnel_t;

typedef struct tun_write {
    uv_write_t req;
    tunnel_t *t;
    size_t len;
    char data[];
} tun_write_t;

static list_t g_tunnels = {&g_tunnels, &g_tunnels};
static unsigned g_count; /* in g_tunnels: every phase but CLOSED (the limits count these) */
static unsigned g_open;  /* OPEN */
static uint64_t g_opened_total;
static char g_read[64 * 1024];
static http1_header_t g_hdrs[TUN_MAX_HEADERS];

unsigned proxy_upgrade_open(void) { return g_open; }
uint64_t proxy_upgrade_opened_total(void) { return g_opened_total; }

static void tunnel_cancel(request_t *r);
static void tunnel_drained(request_t *r);
static const request_ops_t tunnel_ops = {.cancel = tunnel_cancel, .drained = tunnel_drained};

/* ---- lifetime ----------------------------------------------------------------------- */

static void on_tun_closed(uv_handle_t *h)
{
    tunnel_t *t = h->data;
    if (--t->handles_open > 0)
        return;
    buf_free(&t->in);
    buf_free(&t->body);
    free(t);
}

/* Close the worker's side and let go of the request (the caller ends it, or the conn is
 * ending it). Exactly once; logs upgrade_closed for a tunnel that was open. */
static void tunnel_close(tunnel_t *t, const char *reason)
{
    if (t->phase == TUN_CLOSED)
        return;
    if (t->phase == TUN_OPEN) {
        g_open--;
        log_event(LOG_INFO, "upgrade_closed",
                  "request_id=%s model=%s instance=%u peer=%s reason=%s to_worker=%llu to_client=%llu duration_ms=%llu",
                  t->req ? t->req->id : NULL, t->model, t->inst_id, t->conn->peer, reason,
                  (unsigned long long)t->to_worker, (unsigned long long)t->to_client,
                  (unsigned long long)(core_now() - t->opened_ms));
    }
    t->phase = TUN_CLOSED;
    list_remove(&t->link);
    list_init(&t->link);
    g_count--;
    if (t->req)
        t->req->owner = NULL;
    t->req = NULL;
    t->inst = NULL;
    uv_timer_stop(&t->timer);
    t->handles_open = 2;
    uv_close((uv_handle_t *)&t->tcp, on_tun_closed);
    uv_close((uv_handle_t *)&t->timer, on_tun_closed);
}

/* The connection closed (client gone, send_timeout, drain): the worker's side goes too. */
static void tunnel_cancel(request_t *r)
{
    tunnel_t *t = r->owner;
    if (t)
        tunnel_close(t, t->conn->eof ? "client_closed" : "client_dropped");
}

/* Ended from vramd's or the worker's side: before the 101 the client gets an error answer;
 * after it, the bytes already queued and then FIN (the request ends, keep-alive off). */
static void tunnel_finish(tunnel_t *t, const char *reason, int status, const char *code, const char *msg)
{
    request_t *r = t->req;
    conn_t *c = t->conn;
    bool was_open = t->phase == TUN_OPEN;
    tunnel_close(t, reason);
    if (!r)
        return;
    request_set_ops(r, NULL);
    c->keep_alive = false;
    if (!was_open) {
        conn_respond_error(c, status, code, r->model ? r->model->name : NULL, -1, true, "%s", msg);
        return;
    }
    conn_tunnel_end(c);
    conn_request_done(c);
}

/* ---- writing to the worker ----------------------------------------------------------- */

static void on_up_written(uv_write_t *wr, int status)
{
    tun_write_t *w = (tun_write_t *)wr;
    tunnel_t *t = w->t;
    t->up_queued -= w->len;
    free(w);
    if (t->phase == TUN_CLOSED)
        return;
    if (status < 0) {
        tunnel_finish(t, "worker_write_failed", 502, "upgrade_failed", "writing to the worker failed");
        return;
    }
    if (t->up_queued < TUN_BACKLOG_MAX / 2 && t->conn->tunnel_paused)
        conn_tunnel_pause(t->conn, false);
}

static int up_write(tunnel_t *t, const char *data, size_t len)
{
    tun_write_t *w = malloc(sizeof *w + len);
    if (!w)
        return -1;
    w->t = t;
    w->len = len;
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&t->tcp, &b, 1, on_up_written) != 0) {
        free(w);
        return -1;
    }
    t->up_queued += len;
    return 0;
}

/* The client's bytes (conn_tunnel_begin): to the worker, pausing the client over the bound. */
static void on_client_bytes(void *ctx, const char *data, size_t len)
{
    tunnel_t *t = ctx;
    if (t->phase != TUN_OPEN)
        return;
    t->last_ms = core_now();
    t->to_worker += len;
    if (up_write(t, data, len) != 0) {
        tunnel_finish(t, "worker_write_failed", 502, "upgrade_failed", "writing to the worker failed");
        return;
    }
    if (t->up_queued > TUN_BACKLOG_MAX && !t->conn->tunnel_paused) {
        log_event(LOG_DEBUG, "upgrade_paused", "request_id=%s side=%s waiting_bytes=%zu", t->req->id, "client",
                  t->up_queued);
        conn_tunnel_pause(t->conn, true);
    }
}

/* ---- reading the worker --------------------------------------------------------------- */

static void on_up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    (void)suggested;
    *b = uv_buf_init(g_read, sizeof g_read);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);
static void on_tick(uv_timer_t *tm);

static void tunnel_drained(request_t *r)
{
    tunnel_t *t = r->owner;
    if (t && t->phase == TUN_OPEN && t->up_paused) {
        t->up_paused = false;
        uv_read_start((uv_stream_t *)&t->tcp, on_up_alloc, on_up_read);
    }
}

/* Worker bytes for the client; -1 when the client is gone (the tunnel was cancelled). */
static int to_client(tunnel_t *t, const char *data, size_t len)
{
    conn_t *c = t->conn;
    t->to_client += len;
    if (conn_write(c, data, len) != 0)
        return -1;
    if (conn_write_backlog(c) >= CONN_BACKLOG_MAX && !t->up_paused) {
        log_event(LOG_DEBUG, "upgrade_paused", "request_id=%s side=%s waiting_bytes=%zu", t->req ? t->req->id : NULL,
                  "worker", conn_write_backlog(c));
        t->up_paused = true;
        uv_read_stop((uv_stream_t *)&t->tcp);
        conn_want_drained(c);
    }
    return 0;
}

static void on_refusal_chunk(void *ctx, const char *data, size_t len)
{
    tunnel_t *t = ctx;
    if (buf_append(&t->body, data, len) != 0)
        t->body_failed = true;
}

/* A non-101 answer: its body held (bounded) and answered as a normal response. 1: done
 * (answered), 0: more needed, -1: failed (answered 502). */
static int refusal_feed(tunnel_t *t, const char *data, size_t len, bool eof)
{
    int rc = 0;
    if (t->resp.body == HTTP1_BODY_CHUNKED) {
        size_t used = 0;
        http1_error_t err;
        int fr = len ? http1_chunked_feed(&t->chunked, data, len, &used, on_refusal_chunk, t, &err) : 0;
        rc = fr == HTTP1_ERROR ? -1 : fr == HTTP1_OK;
    } else if (t->resp.body == HTTP1_BODY_LENGTH) {
        size_t n = len < t->body_left ? len : (size_t)t->body_left;
        on_refusal_chunk(t, data, n);
        t->body_left -= n;
        rc = t->body_left == 0;
    } else if (t->resp.body == HTTP1_BODY_UNTIL_CLOSE) {
        on_refusal_chunk(t, data, len);
        rc = eof;
    } else {
        rc = 1;
    }
    if (rc == 0 && eof)
        rc = -1;
    if (rc < 0 || t->body_failed) {
        tunnel_finish(t, "worker_refused", 502, "upgrade_failed", "the worker's answer to the upgrade broke off or is too large");
        return -1;
    }
    if (rc == 0)
        return 0;
    request_t *r = t->req;
    conn_t *c = t->conn;
    int status = t->resp.status;
    char ctype[sizeof t->ctype];
    memcpy(ctype, t->ctype, sizeof ctype);
    buf_t body = t->body;
    buf_init(&t->body, 0);
    log_event(LOG_INFO, "upgrade_refused_by_worker", "request_id=%s model=%s status=%d", r->id, t->model, status);
    tunnel_close(t, "worker_refused");
    request_set_ops(r, NULL);
    c->keep_alive = false;
    conn_respond(c, status, ctype[0] ? ctype : "text/plain", body.data, body.len, NULL);
    buf_free(&body);
    return 1;
}

/* The tunnel opens: the worker's 101 head and whatever followed it go to the client. */
static void tunnel_open(tunnel_t *t)
{
    request_t *r = t->req;
    t->phase = TUN_OPEN;
    t->opened_ms = t->last_ms = core_now();
    g_open++;
    g_opened_total++;
    r->status = 101;
    log_event(LOG_INFO, "upgrade_open", "request_id=%s model=%s instance=%u peer=%s open=%u", r->id, t->model,
              t->inst_id, t->conn->peer, g_open);
    size_t n = t->in.len;
    t->to_client -= t->resp.head_len; /* counted: the tunnelled bytes, not the head */
    buf_t head = t->in;
    buf_init(&t->in, 0);
    int rc = to_client(t, head.data, n);
    buf_free(&head);
    if (rc != 0 || t->phase != TUN_OPEN)
        return;
    conn_tunnel_begin(t->conn, on_client_bytes, t);
}

static void handshake_read(tunnel_t *t, const char *data, size_t len)
{
    if (buf_append(&t->in, data, len) != 0) {
        tunnel_finish(t, "bad_answer", 502, "upgrade_failed", "the worker's answer head is over 64 KiB");
        return;
    }
    http1_limits_t lim = {.max_header_bytes = TUN_HEAD_MAX, .max_headers = TUN_MAX_HEADERS};
    http1_error_t err;
    int rc = http1_parse_response(t->in.data, t->in.len, &lim, false, &t->resp, g_hdrs, &t->scan_from, &err);
    if (rc == HTTP1_NEED_MORE)
        return;
    if (rc == HTTP1_ERROR) {
        tunnel_finish(t, "bad_answer", 502, "upgrade_failed", "the worker's answer to the upgrade is malformed");
        return;
    }
    if (t->resp.status == 101) {
        tunnel_open(t);
        return;
    }
    const http1_header_t *ct = http1_find_header(t->in.data, &t->resp, "content-type");
    if (ct && ct->value.len < sizeof t->ctype)
        snprintf(t->ctype, sizeof t->ctype, "%.*s", (int)ct->value.len, t->in.data + ct->value.off);
    t->phase = TUN_REFUSAL;
    t->body_left = t->resp.content_length;
    if (t->resp.body == HTTP1_BODY_CHUNKED)
        http1_chunked_init(&t->chunked, TUN_HEAD_MAX);
    refusal_feed(t, t->in.data + t->resp.head_len, t->in.len - t->resp.head_len, false);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    tunnel_t *t = s->data;
    if (t->phase == TUN_CLOSED || nread == 0)
        return;
    if (nread < 0) {
        if (t->phase == TUN_REFUSAL)
            refusal_feed(t, NULL, 0, true);
        else
            tunnel_finish(t, "worker_closed", 502, "upgrade_failed", "the worker closed the connection before answering the upgrade");
        return;
    }
    t->last_ms = core_now();
    if (t->phase == TUN_OPEN)
        to_client(t, b->base, (size_t)nread);
    else if (t->phase == TUN_HANDSHAKE)
        handshake_read(t, b->base, (size_t)nread);
    else if (t->phase == TUN_REFUSAL)
        refusal_feed(t, b->base, (size_t)nread, false);
}

/* ---- the request to the worker ------------------------------------------------------- */

/* The client's head for the worker: the route prefix stripped like any request's, its
 * end-to-end headers, then Upgrade and Connection: Upgrade (hop-by-hop: named again here). */
static void upgrade_head(tunnel_t *t, buf_t *h)
{
    request_t *r = t->req;
    const char *target = r->head + r->msg.target.off;
    size_t tlen = r->msg.target.len;
    const char *slash = "";
    if (r->strip_len && tlen >= r->strip_len) {
        target += r->strip_len;
        tlen -= r->strip_len;
        if (tlen == 0 || target[0] != '/')
            slash = "/";
    }
    buf_printf(h, "GET %s%.*s HTTP/1.1\r\n", slash, (int)tlen, target);
    static const char *const skip[] = {"X-Request-Id", "X-Vramd-Job-Client", NULL};
    http_out_copy_headers(h, r->head, &r->msg, skip);
    const http1_header_t *up = http1_find_header(r->head, &r->msg, "upgrade");
    http_out_header(h, "Upgrade", "%.*s", (int)up->value.len, r->head + up->value.off);
    http_out_header(h, "Connection", "Upgrade");
    http_out_header(h, "X-Request-Id", "%s", r->id);
    http_out_header(h, "X-Forwarded-For", "%s", t->client);
    http_out_end(h);
}

static void on_connected(uv_connect_t *cr, int status)
{
    tunnel_t *t = cr->data;
    if (t->phase != TUN_CONNECTING)
        return;
    if (status < 0) {
        tunnel_finish(t, "connect_failed", 502, "upgrade_failed", "cannot connect to the worker");
        return;
    }
    uv_tcp_nodelay(&t->tcp, 1);
    buf_t h;
    buf_init(&h, t->req->head_len + 1024);
    upgrade_head(t, &h);
    int rc = buf_failed(&h) ? -1 : up_write(t, h.data, h.len);
    buf_free(&h);
    if (rc != 0) {
        tunnel_finish(t, "connect_failed", 502, "upgrade_failed", "cannot write the upgrade request to the worker");
        return;
    }
    t->phase = TUN_HANDSHAKE;
    t->last_ms = core_now();
    uv_timer_start(&t->timer, on_tick, t->conn->core->cfg->limits.upgrade_idle_timeout_ms, 0);
    uv_read_start((uv_stream_t *)&t->tcp, on_up_alloc, on_up_read);
}

/* The timer: the connect timeout while CONNECTING, then limits.upgrade_idle_timeout (the
 * handshake and the open tunnel alike: no byte either way that long). */
static void on_tick(uv_timer_t *tm)
{
    tunnel_t *t = tm->data;
    if (t->phase == TUN_CLOSED)
        return;
    if (t->phase == TUN_CONNECTING) {
        tunnel_finish(t, "connect_timeout", 502, "upgrade_failed", "connecting to the worker timed out");
        return;
    }
    uint64_t limit = t->conn->core->cfg->limits.upgrade_idle_timeout_ms, idle = core_now() - t->last_ms;
    if (idle < limit) {
        uv_timer_start(&t->timer, on_tick, limit - idle, 0);
        return;
    }
    tunnel_finish(t, "idle_timeout", 504, "upgrade_failed", "the worker did not answer the upgrade in time");
}

/* ---- admission ----------------------------------------------------------------------- */

static unsigned client_count(const char *client)
{
    unsigned n = 0;
    list_foreach(it, &g_tunnels) {
        const tunnel_t *t = list_entry(it, tunnel_t, link);
        n += strcmp(t->client, client) == 0;
    }
    return n;
}

static instance_t *ready_instance(model_t *m)
{
    uint64_t now = core_now();
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (instance_usable(in, now))
            return in;
    }
    return NULL;
}

/* The checks before a tunnel: true when r was refused (answered). */
static bool upgrade_refused(conn_t *c, request_t *r, model_t *m, const char *client)
{
    const config_t *cfg = c->core->cfg;
    const http1_header_t *uh = http1_find_header(r->head, &r->msg, "upgrade");
    if (!(m->cfg->upgrade & CFG_UPGRADE_WEBSOCKET)) {
        conn_respond_error(c, 400, "upgrade_not_allowed", m->name, -1, true,
                           "model %s does not take protocol upgrades (its config has no upgrade: [websocket])", m->name);
        return true;
    }
    if (!uh || !http1_value_has_token(r->head, uh->value, "websocket")) {
        conn_respond_error(c, 400, "upgrade_not_allowed", m->name, -1, true,
                           "model %s takes only Upgrade: websocket", m->name);
        return true;
    }
    if (c->core->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, true, "vramd is draining");
        return true;
    }
    if (g_count >= cfg->limits.upgrades_max) {
        log_event(LOG_WARN, "upgrade_refused", "model=%s peer=%s reason=%s limit=%u", m->name, c->peer, "upgrades_max",
                  cfg->limits.upgrades_max);
        conn_respond_error(c, 503, "upgrades_full", m->name, 5, true, "%u upgraded connections are open (limits.upgrades_max)",
                           g_count);
        return true;
    }
    if (client_count(client) >= cfg->limits.upgrades_per_client) {
        log_event(LOG_INFO, "upgrade_refused", "model=%s peer=%s reason=%s limit=%u", m->name, c->peer,
                  "upgrades_per_client", cfg->limits.upgrades_per_client);
        conn_respond_error(c, 429, "too_many_upgrades", m->name, 5, true,
                           "this client has %u upgraded connections open (limits.upgrades_per_client)",
                           cfg->limits.upgrades_per_client);
        return true;
    }
    return false;
}

static void client_address(const conn_t *c, char *out, size_t cap)
{
    snprintf(out, cap, "%s", c->peer);
    char *colon = strrchr(out, ':');
    if (colon && colon != out)
        *colon = '\0';
}

static int tunnel_connect(tunnel_t *t, instance_t *inst)
{
    uv_loop_t *loop = t->conn->core->loop;
    uv_tcp_init(loop, &t->tcp);
    uv_timer_init(loop, &t->timer);
    t->tcp.data = t;
    t->timer.data = t;
    t->connect_req.data = t;
    struct sockaddr_storage addr;
    int rc;
    if (strchr(inst->life.host, ':'))
        rc = uv_ip6_addr(inst->life.host, inst->life.port, (struct sockaddr_in6 *)&addr);
    else
        rc = uv_ip4_addr(strcmp(inst->life.host, "localhost") == 0 ? "127.0.0.1" : inst->life.host, inst->life.port,
                         (struct sockaddr_in *)&addr);
    if (rc == 0)
        rc = uv_tcp_connect(&t->connect_req, &t->tcp, (struct sockaddr *)&addr, on_connected);
    uv_timer_start(&t->timer, on_tick, PROXY_CONNECT_TIMEOUT_MS, 0);
    return rc;
}

void proxy_upgrade_admit(conn_t *c, request_t *r, model_t *m, size_t strip_len)
{
    r->model = m;
    r->strip_len = m->cfg->strip ? strip_len : 0;
    request_set_state(r, REQ_LOCAL);
    char client[64];
    client_address(c, client, sizeof client);
    if (upgrade_refused(c, r, m, client))
        return;
    instance_t *inst = ready_instance(m);
    if (!inst) {
        conn_respond_error(c, 503, "model_not_ready", m->name, 2, true,
                           "model %s has no ready instance: an upgraded connection does not start one", m->name);
        return;
    }
    tunnel_t *t = calloc(1, sizeof *t);
    if (!t) {
        conn_respond_error(c, 503, "internal", m->name, 1, true, "out of memory");
        return;
    }
    t->req = r;
    t->conn = c;
    t->inst = inst;
    t->inst_id = inst->id;
    snprintf(t->model, sizeof t->model, "%s", m->name);
    snprintf(t->client, sizeof t->client, "%s", client);
    buf_init(&t->in, TUN_HEAD_MAX + sizeof g_read);
    buf_init(&t->body, TUN_REFUSAL_MAX);
    list_insert_tail(&g_tunnels, &t->link);
    g_count++;
    r->owner = t;
    request_set_ops(r, &tunnel_ops);
    t->phase = TUN_CONNECTING;
    if (tunnel_connect(t, inst) != 0)
        tunnel_finish(t, "connect_failed", 502, "upgrade_failed", "cannot connect to the worker");
}

/* The first tunnel in g_tunnels to the instance inst (any instance: NULL), or NULL. */
static tunnel_t *first_tunnel(const instance_t *inst)
{
    list_foreach(it, &g_tunnels) {
        tunnel_t *t = list_entry(it, tunnel_t, link);
        if (!inst || t->inst == inst)
            return t;
    }
    return NULL;
}

/* CORE_EV_INSTANCE_DOWN / _GONE: the worker stops (unload, eviction, recycle, exit).
 * Each tunnel_finish takes its tunnel off g_tunnels, and may run listeners that close
 * others (the request's end completes a drain, whose end stops the workers: this again),
 * so the walk starts over from the head each time instead of keeping a next pointer that
 * such a close would leave pointing at itself (a tunnel off the list links to itself). */
static void on_instance_down(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    (void)ev;
    tunnel_t *t;
    if (!subject)
        return;
    while ((t = first_tunnel(subject)) != NULL)
        tunnel_finish(t, "worker_stopped", 503, "model_not_ready", "the worker stopped before answering the upgrade");
}

/* CORE_EV_DRAINING: a tunnel has no end of its own to wait for (an external server is never
 * stopped by the drain): every one is closed at once, like an idle keep-alive connection.
 * The walk starts over after each close, as above. */
static void on_draining(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    (void)ev;
    (void)subject;
    tunnel_t *t;
    while ((t = first_tunnel(NULL)) != NULL)
        tunnel_finish(t, "draining", 503, "draining", "vramd is draining");
}

void proxy_upgrade_init(core_t *core)
{
    core_listen(core, CORE_EV_INSTANCE_DOWN, on_instance_down, NULL);
    core_listen(core, CORE_EV_INSTANCE_GONE, on_instance_down, NULL);
    core_listen(core, CORE_EV_DRAINING, on_draining, NULL);
}
