/*
 * proxy: one request forwarded to a worker instance and its response streamed back.
 * See proxy.h for the contract; the states of an upstream connection are:
 *
 *   CONNECTING -> SENDING -> HEAD -> BODY -> IDLE (pooled) | CLOSED
 *
 * An upstream belongs to its request while it has one (up->req), to its instance's pool
 * while IDLE, and to nobody once CLOSED: it frees itself after its handles closed.
 * Invariant: the instance slot taken by request_dispatch is released exactly once, by
 * finish_ok / fail_request / proxy_cancel, which all clear req->instance first.
 * This file owns the connections and decides every outcome; the bytes that cross (request
 * head, response head and body, re-framed or held) are written by proxy_forward.c, which
 * calls nothing here (proxy_int.h has what the two share).
 */
#include "path/proxy.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/check.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "http/http1.h"
#include "net/conn.h"
#include "net/http_client.h"
#include "path/prompt_hold.h"
#include "path/proxy_int.h"
#include "path/verdict.h"
#include "sched/scheduler.h"
#include "workers/instance.h"
#include "workers/model_state.h"

static char g_up_read[64 * 1024];
static http1_header_t g_up_hdrs[UP_MAX_HEADERS];

static void up_close(upstream_t *up);
static void up_read_start(upstream_t *up);
static void up_quickack(upstream_t *up);

/* ---- state ------------------------------------------------------------------------ */

#define UBIT(s) (1u << (s))

/* allowed[from]: the states an upstream in `from` may change to (CLOSED is terminal) */
static const unsigned up_allowed[] = {
    [UP_CONNECTING] = UBIT(UP_SENDING) | UBIT(UP_CLOSED),
    [UP_SENDING] = UBIT(UP_HEAD) | UBIT(UP_BODY) | UBIT(UP_CLOSED), /* the answer may beat the write's callback */
    [UP_HEAD] = UBIT(UP_BODY) | UBIT(UP_CLOSED),
    [UP_BODY] = UBIT(UP_IDLE) | UBIT(UP_CLOSED),
    [UP_IDLE] = UBIT(UP_SENDING) | UBIT(UP_CLOSED),
    [UP_CLOSED] = 0,
};

static const char *up_state_name(enum up_state s)
{
    static const char *const n[] = {"connecting", "sending", "head", "body", "idle", "closed"};
    return n[s];
}

#define up_set_state(up, s) up_set_state_at((up), (s), __LINE__)
static void up_set_state_at(upstream_t *up, enum up_state s, int line)
{
    if (up->state == s)
        return;
    CHECK_IF(!(up_allowed[up->state] & UBIT(s)));
    if (log_enabled(LOG_DEBUG))
        log_event(LOG_DEBUG, "upstream_state", "model=%s instance=%u request_id=%s from=%s to=%s line=%d",
                  up->inst->model->name, up->inst->id, up->req ? up->req->id : NULL, up_state_name(up->state),
                  up_state_name(s), line);
    up->state = s;
}

/* ---- lifetime ---------------------------------------------------------------------- */

static void on_up_closed(uv_handle_t *h)
{
    upstream_t *up = h->data;
    if (--up->handles_open > 0)
        return;
    buf_free(&up->in);
    free(up);
}

static void up_close(upstream_t *up)
{
    if (up->state == UP_CLOSED)
        return;
    if (up->state == UP_IDLE && list_linked(&up->link)) {
        list_remove(&up->link);
        up->inst->path.pool_size--;
    }
    up_set_state(up, UP_CLOSED);
    up->req = NULL;
    uv_timer_stop(&up->timer);
    up->handles_open = 2;
    uv_close((uv_handle_t *)&up->tcp, on_up_closed);
    uv_close((uv_handle_t *)&up->timer, on_up_closed);
}

/* CORE_EV_INSTANCE_DOWN: the instance takes no more requests; its pooled connections go. */
void proxy_pool_close(void *ctx, enum core_event ev, void *subject)
{
    instance_t *inst = subject;
    (void)ctx;
    (void)ev;
    list_foreach_safe(it, tmp, &inst->path.pool) {
        upstream_t *up = list_entry(it, upstream_t, link);
        up_close(up);
    }
}

/* Release the request's slot on its instance (exactly once). */
static void release_slot(request_t *r, bool worker_broken)
{
    instance_t *inst = r->instance;
    if (!inst || (!worker_broken && prompt_hold_take(r, inst))) /* a queued ComfyUI prompt keeps both */
        return;
    /* A well-formed answer is the worker's answer, whatever its status (a 500 is a server's
     * normal answer to input it rejects, and clients could drive it): only 502 and 504
     * count toward ejection (the worker is itself a gateway whose back end failed). 503 is
     * a busy worker. Broken exchanges (resets, timeouts, malformed answers) come in as
     * worker_broken. */
    if (r->status == 502 || r->status == 504)
        worker_broken = true;
    r->instance = NULL;
    bool ok = !worker_broken && r->status > 0 && r->status < 500;
    sched_request_finished(r, inst, core_now() - r->t_dispatched, ok);
    instance_request_done(inst, worker_broken);
}

/* ---- outcomes ---------------------------------------------------------------------- */

/* An answer ended (cut: its connection broke); the slot released as its watched events judge it. */
static void release_watched(request_t *r, instance_t *inst, stream_watch_t *w, bool cut)
{
    int status = r->status, judged = verdict_stream_end(r, inst, w, cut);
    r->status = judged ? judged : status;
    release_slot(r, cut);
    r->status = status;
}

static void finish_ok(upstream_t *up)
{
    request_t *r = up->req;
    if (!r) {
        /* the client left while this read was being handled: the request was cancelled */
        up_close(up);
        return;
    }
    conn_t *c = r->conn;
    instance_t *inst = up->inst;
    r->up = NULL;
    up->req = NULL;
    request_set_ops(r, NULL);
    if (up->client_chunked && !r->buffering && conn_write(c, "0\r\n\r\n", 5) != 0) {
        /* the client is gone: conn_close found no owner, so the slot is released here */
        up_close(up);
        release_watched(r, inst, &up->watch, false);
        return;
    }
    uv_timer_stop(&up->timer);
    bool reusable = up->upstream_keep_alive && up->framing != HTTP1_BODY_UNTIL_CLOSE &&
                    up->in.len == 0 && inst->life.state == INST_READY && !inst->life.stop_requested &&
                    inst->path.pool_size < PROXY_POOL_MAX;
    if (reusable) {
        up_set_state(up, UP_IDLE);
        up->got_bytes = false;
        up->scan_from = 0;
        list_insert_head(&inst->path.pool, &up->link);
        inst->path.pool_size++;
        if (up->paused)
            up_read_start(up);
    } else {
        up_close(up);
    }
    if (r->buffering) {
        /* the held answer: judge it once the slot is released (the instance may go away) */
        bool oom = verdict_is_oom(r);
        if (oom && inst->model->cfg->recycle.on_oom)
            instance_recycle(inst, "out of memory (recycle.on_oom)");
        /* an OOM is a failed run (no learning from it) but not the worker's ill health (it
         * does not count toward the 5-failures-in-a-row ejection; recycle.on_oom decides) */
        r->status = oom ? 503 : r->resp_status;
        release_slot(r, false);
        r->status = 0;
        r->buffering = false;
        verdict_judge(r, oom);
        return;
    }
    log_event(LOG_INFO, "request_done", "request_id=%s model=%s status=%d queue_ms=%llu run_ms=%llu attempts=%u",
              r->id, r->model->name, r->status, (unsigned long long)request_queue_ms(r),
              (unsigned long long)(core_now() - r->t_dispatched), r->attempts);
    release_watched(r, inst, &up->watch, false);
    conn_request_done(c);
}

/* The answer failed before anything reached the client: 502 worker_failed (or 504
 * worker_hang), or, for a model marked `retry: safe`, one more try from the queue. */
static void fail_unsent(request_t *r, instance_t *inst, const char *why, bool hang)
{
    conn_t *c = r->conn;
    model_t *m = inst->model;
    bool over_budget = buf_over_budget(&r->resp_body); /* not the worker's fault */
    release_slot(r, !over_budget);
    if (over_budget) { /* the held answer would pass limits.memory_budget */
        conn_respond_error(c, 503, "memory_budget", m->name, 2, false,
                           "model %s: holding the answer would pass limits.memory_budget", m->name);
        return;
    }
    if (m->cfg->retry_safe && r->crash_retries < 1 && !hang) {
        r->crash_retries++;
        core_requeue(m->core, r, why);
        return;
    }
    if (hang)
        conn_respond_error(c, 504, "worker_hang", m->name, -1, false, "model %s: %s", m->name, why);
    else
        conn_respond_error(c, 502, "worker_failed", m->name, -1, false, "model %s: worker failed: %s", m->name, why);
}

/* Something went wrong with the worker. Before the response head reached the client the
 * client gets 502 worker_failed (504 worker_hang when vramd killed it as wedged), or a fresh
 * connection is tried once, for a pooled one that died while idle; after it, the client's
 * response is cut short. conn_broke: the
 * connection itself failed (refused, reset, closed early, timed out): the instance is
 * suspect at once, before a dying worker's exit is reaped, so that a retry goes elsewhere. */
static void fail_request(upstream_t *up, const char *why, bool conn_broke)
{
    request_t *r = up->req;
    if (!r) {
        up_close(up);
        return;
    }
    conn_t *c = r->conn;
    instance_t *inst = up->inst;
    bool retry = up->reused && !up->got_bytes && up->state != UP_BODY;
    /* vramd killed the worker as wedged (failing health checks; a request's own timeout
     * answers in on_worker_silent): what that kill cut ends as a hang, not a crash */
    bool hang = inst->life.hang_killed;
    char hang_why[200];
    if (hang) {
        snprintf(hang_why, sizeof hang_why, "worker killed as hung (%s): %s", restart_reason_name(inst->life.kill_reason),
                 why);
        why = hang_why;
    }
    r->up = NULL;
    up->req = NULL;
    request_set_ops(r, NULL);
    up_close(up);
    if (retry && inst->life.state == INST_READY && !hang) {
        log_event(LOG_DEBUG, "upstream_retry", "request_id=%s model=%s reason=%s", r->id,
                  inst->model->name, why);
        proxy_start_attempt(r, inst, false);
        return;
    }
    if (conn_broke)
        instance_mark_suspect(inst, why);
    log_event(LOG_WARN, "upstream_failed", "request_id=%s model=%s instance=%u pid=%d reason=%s streamed=%B",
              r->id, inst->model->name, inst->id, (int)inst->life.pid, why, r->state == REQ_STREAMING);
    bool streamed = r->state == REQ_STREAMING && !r->buffering;
    if (streamed) {
        release_watched(r, inst, &up->watch, true); /* an OOM event before the break still counts */
        r->outcome = hang ? "worker_hang" : "worker_failed"; /* metrics: the answer broke halfway */
        conn_abort(c);
    } else {
        fail_unsent(r, inst, why, hang);
    }
}

/* vramd itself ran short (EMFILE, ENFILE, ENOBUFS, ENOMEM) opening, writing or reading
 * the worker's connection: not the worker's failure. No suspect mark, no outlier count, no
 * retry onto it; the slot is released as neither a broken nor a sound exchange, and the
 * client gets 503 local_resource_exhausted (Retry-After: 1), or a cut stream when the
 * head was already sent. */
static void fail_local(upstream_t *up, const char *why)
{
    request_t *r = up->req;
    if (!r) {
        up_close(up);
        return;
    }
    conn_t *c = r->conn;
    instance_t *inst = up->inst;
    model_t *m = inst->model;
    bool streamed = r->state == REQ_STREAMING && !r->buffering;
    r->up = NULL;
    up->req = NULL;
    request_set_ops(r, NULL);
    up_close(up);
    core_count(m->core, CORE_CNT_LOCAL_PROXY);
    log_event(LOG_WARN, "local_resource_exhausted", "request_id=%s model=%s instance=%u pid=%d call=%s error=%s",
              r->id, m->name, inst->id, (int)inst->life.pid, "proxy", why);
    if (r->instance) {
        instance_t *held = r->instance;
        r->instance = NULL;
        sched_request_finished(r, held, core_now() - r->t_dispatched, false);
        instance_request_done_local(held);
    }
    r->outcome = "local_resource_exhausted";
    if (streamed) {
        conn_abort(c);
        return;
    }
    conn_respond_error(c, 503, "local_resource_exhausted", m->name, 1, false,
                       "model %s: vramd is short of descriptors or memory itself (%s); the worker is not at fault",
                       m->name, why);
}

/* An I/O failure on the worker's connection: vramd's own shortage (fail_local), else a
 * broken connection (fail_request). */
static void fail_io(upstream_t *up, const char *what, int uv_err)
{
    char why[160];
    snprintf(why, sizeof why, "%s%s", what, uv_strerror(uv_err));
    if (http_client_local_shortage(uv_err))
        fail_local(up, why);
    else
        fail_request(up, why, true);
}

/* ---- the worker's silence ---------------------------------------------------------- */

static void on_worker_silent(uv_timer_t *t);

/* When the worker will have been silent too long: recycle.hang_timeout after its last
 * bytes (or after vramd resumed reading it), and, until the answer's head is complete,
 * response_timeout after the request was sent. *head_wait: the second comes first. */
static uint64_t silence_deadline(const upstream_t *up, bool *head_wait)
{
    const model_config_t *mc = up->inst->model->cfg;
    uint64_t at = UINT64_MAX;
    *head_wait = false;
    if (mc->recycle.hang_timeout_ms)
        at = up->t_heard + mc->recycle.hang_timeout_ms;
    if (mc->response_timeout_ms && up->state != UP_BODY && up->t_sent + mc->response_timeout_ms <= at) {
        at = up->t_sent + mc->response_timeout_ms;
        *head_wait = true;
    }
    return at;
}

/* Armed while vramd reads the worker for a request; never while reading is paused for
 * backpressure (proxy_throttle stops it: a slow client is not a silent worker). */
static void arm_silence_timer(upstream_t *up)
{
    bool head_wait;
    if (!up->req || up->paused || (up->state != UP_SENDING && up->state != UP_HEAD && up->state != UP_BODY))
        return;
    uint64_t at = silence_deadline(up, &head_wait);
    if (at == UINT64_MAX) {
        uv_timer_stop(&up->timer);
        return;
    }
    uint64_t now = core_now();
    uv_timer_start(&up->timer, on_worker_silent, at > now ? at - now : 1, 0);
}

/* The worker said nothing for too long: 504 worker_hang (or a cut stream), and the
 * instance is replaced (supervised: SIGABRT, then SIGKILL) or marked down (external). */
static void on_worker_silent(uv_timer_t *t)
{
    upstream_t *up = t->data;
    request_t *r = up->req;
    if (!r || up->paused || (up->state != UP_SENDING && up->state != UP_HEAD && up->state != UP_BODY))
        return;
    bool head_wait;
    if (silence_deadline(up, &head_wait) > core_now()) {
        arm_silence_timer(up);
        return;
    }
    instance_t *inst = up->inst;
    const model_config_t *mc = inst->model->cfg;
    conn_t *c = r->conn;
    uint64_t ms = head_wait ? mc->response_timeout_ms : mc->recycle.hang_timeout_ms;
    char why[160];
    snprintf(why, sizeof why, head_wait ? "no answer from the worker within response_timeout %llu ms"
                                        : "worker silent for recycle.hang_timeout %llu ms",
             (unsigned long long)ms);
    log_event(LOG_WARN, "worker_hang",
              "request_id=%s model=%s instance=%u pid=%d timeout=%s timeout_ms=%llu hang_timeout_ms=%llu", r->id,
              inst->model->name, inst->id, (int)inst->life.pid, head_wait ? "response_timeout" : "hang_timeout",
              (unsigned long long)ms, (unsigned long long)mc->recycle.hang_timeout_ms);
    bool streamed = r->state == REQ_STREAMING && !r->buffering;
    r->up = NULL;
    up->req = NULL;
    request_set_ops(r, NULL);
    up_close(up);
    instance_kill_hung(inst, why);
    if (streamed) {
        release_slot(r, true);
        r->outcome = "worker_hang"; /* metrics: the answer broke halfway */
        conn_abort(c);
    } else {
        fail_unsent(r, inst, why, true);
    }
}

/* The client left (request ops): the upstream is closed, never pooled, and the slot
 * released; no callback touches the request afterwards. */
void proxy_cancel(request_t *r)
{
    upstream_t *up = r->up;
    if (up) {
        /* the worker had the whole request: it may go on running it (memory.cancelled_hold) */
        r->abandoned = up->state == UP_HEAD || up->state == UP_BODY;
        r->up = NULL;
        up->req = NULL;
        up_close(up);
    }
    release_slot(r, false);
}

/* ---- response ---------------------------------------------------------------------- */

/* The client's backlog drained (request ops): read the upstream again. */
static void proxy_drained(request_t *r)
{
    upstream_t *up = r->up;
    if (!up || up->state == UP_CLOSED || !up->paused)
        return;
    up_read_start(up);
}

static const request_ops_t proxy_ops = {.cancel = proxy_cancel, .drained = proxy_drained};

static void ignore_chunk(void *ctx, const char *data, size_t len)
{
    (void)ctx;
    (void)data;
    (void)len;
}

/* A chunked answer whose first body bytes came in the head's read: their framing is checked
 * before the head goes out, so a malformed one is still a clean 502 (nothing forwarded). */
static bool chunked_prefix_ok(const upstream_t *up, size_t head_len)
{
    if (up->framing != HTTP1_BODY_CHUNKED || up->in.len <= head_len)
        return true;
    http1_chunked_t probe = up->chunked;
    size_t used = 0;
    http1_error_t err;
    return http1_chunked_feed(&probe, up->in.data + head_len, up->in.len - head_len, &used, ignore_chunk, NULL,
                              &err) != HTTP1_ERROR;
}

static void process_upstream_input(upstream_t *up)
{
    while (up->req && (up->state == UP_HEAD || up->state == UP_SENDING)) {
        http1_limits_t lim = {.max_header_bytes = UP_HEAD_MAX, .max_headers = UP_MAX_HEADERS};
        http1_msg_t msg;
        http1_error_t err;
        int rc = http1_parse_response(up->in.data, up->in.len, &lim, up->req->head_method, &msg,
                                      g_up_hdrs, &up->scan_from, &err);
        if (rc == HTTP1_NEED_MORE)
            return;
        if (rc == HTTP1_ERROR) {
            char why[160];
            snprintf(why, sizeof why, "malformed response at byte %zu: %s", err.pos,
                     err.what ? err.what : http1_errcode_name(err.code));
            fail_request(up, why, false);
            return;
        }
        if (msg.status >= 100 && msg.status < 200) {
            if (msg.status == 101) {
                fail_request(up, "worker switched protocols", false);
                return;
            }
            buf_consume(&up->in, msg.head_len); /* interim response: skip */
            up->scan_from = 0;
            continue;
        }
        up->framing = msg.body;
        up->body_left = msg.content_length;
        up->upstream_keep_alive = msg.keep_alive;
        if (msg.body == HTTP1_BODY_CHUNKED)
            http1_chunked_init(&up->chunked, 16 * 1024);
        if (!chunked_prefix_ok(up, msg.head_len)) {
            fail_request(up, "malformed response body", false); /* nothing forwarded yet: 502 */
            return;
        }
        request_set_state(up->req, REQ_STREAMING);
        if (verdict_hold_of(up->req, up->in.data, &msg, &up->watch) == VERDICT_HOLD) {
            proxy_hold_response_head(up, up->in.data, &msg);
        } else {
            enum fwd_result sent = proxy_send_response_head(up, up->in.data, &msg);
            if (sent == FWD_CLIENT_GONE)
                return; /* the request was cancelled, the upstream closed with it */
            if (sent == FWD_TOO_LARGE) {
                fail_request(up, "response head too large", false);
                return;
            }
        }
        buf_consume(&up->in, msg.head_len);
        up->scan_from = 0;
        if (up->state == UP_CLOSED)
            return;
        up_set_state(up, UP_BODY);
    }
    if (!up->req || up->state != UP_BODY)
        return;
    size_t used = 0;
    enum fwd_result rc = proxy_forward_body(up, up->in.data, up->in.len, &used);
    if (rc == FWD_CLIENT_GONE)
        return; /* the request was cancelled and the upstream closed with it */
    buf_consume(&up->in, used);
    if (rc == FWD_MALFORMED || rc == FWD_TOO_LARGE) {
        fail_request(up, rc == FWD_TOO_LARGE ? "answer larger than limits.max_body" : "malformed response body", false);
        return;
    }
    if (rc == FWD_BODY_DONE) {
        if (up->in.len > 0)
            up->upstream_keep_alive = false; /* bytes after the body: do not reuse */
        finish_ok(up);
        return;
    }
    if (up->req)
        proxy_throttle(up);
}

static void on_up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    (void)suggested;
    *b = uv_buf_init(g_up_read, sizeof g_up_read);
}

static void on_up_read_body(upstream_t *up, ssize_t nread, const uv_buf_t *b);

/* Everything one upstream read produces for the client leaves in one write. The conn is
 * never freed before the loop's close phase, so uncorking after the work is safe. */
static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    upstream_t *up = s->data;
    conn_t *c = up->req ? up->req->conn : NULL;
    if (c)
        conn_cork(c);
    if (nread > 0)
        up->t_heard = core_now();
    on_up_read_body(up, nread, b);
    /* more of this answer to come: ACK what arrived at once (a system call, so not after
     * the read that completed the answer, which is most of them) */
    if (nread > 0 && up->req && (up->state == UP_HEAD || up->state == UP_BODY || up->state == UP_SENDING))
        up_quickack(up);
    arm_silence_timer(up); /* no-op once the request ended or reading paused */
    if (c)
        conn_uncork(c);
}

static void on_up_read_body(upstream_t *up, ssize_t nread, const uv_buf_t *b)
{
    if (up->state == UP_CLOSED)
        return;
    if (up->state == UP_IDLE) {
        /* an idle pooled connection spoke or closed: it is no longer usable */
        up_close(up);
        return;
    }
    if (nread < 0) {
        if (up->state == UP_BODY && up->framing == HTTP1_BODY_UNTIL_CLOSE && nread == UV_EOF) {
            up->upstream_keep_alive = false;
            finish_ok(up);
            return;
        }
        if (nread == UV_EOF)
            fail_request(up, "worker closed the connection", true);
        else
            fail_io(up, "", (int)nread);
        return;
    }
    if (nread == 0)
        return;
    up->got_bytes = true;
    if (up->state == UP_BODY && up->in.len == 0) {
        /* fast path: forward straight from the read buffer */
        size_t used = 0;
        enum fwd_result rc = proxy_forward_body(up, b->base, (size_t)nread, &used);
        if (rc == FWD_CLIENT_GONE)
            return; /* the request was cancelled and the upstream closed with it */
        if (rc == FWD_MALFORMED || rc == FWD_TOO_LARGE) {
            fail_request(up, rc == FWD_TOO_LARGE ? "answer larger than limits.max_body" : "malformed response body", false);
            return;
        }
        if (rc == FWD_BODY_DONE) {
            if (used < (size_t)nread)
                up->upstream_keep_alive = false;
            finish_ok(up);
            return;
        }
        if (used < (size_t)nread && buf_append(&up->in, b->base + used, (size_t)nread - used) != 0) {
            fail_request(up, "response buffer overflow", false);
            return;
        }
        if (up->req)
            proxy_throttle(up);
        return;
    }
    if (buf_append(&up->in, b->base, (size_t)nread) != 0) {
        fail_request(up, "response head too large", false);
        return;
    }
    process_upstream_input(up);
}

/* Read the worker (again): its silence counts from now. */
static void up_read_start(upstream_t *up)
{
    up->paused = false;
    up->t_heard = core_now();
    uv_read_start((uv_stream_t *)&up->tcp, on_up_alloc, on_up_read);
    arm_silence_timer(up);
}

/* Answer a worker's segment at once: one that writes head and body in two sends (Python's
 * http.server family) holds the second until the first is ACKed (Nagle), and on a pooled
 * connection Linux delays that ACK (~40 ms). TCP_QUICKACK is not sticky: re-armed after
 * every read that leaves the answer incomplete. */
static void up_quickack(upstream_t *up)
{
    uv_os_fd_t fd;
    int one = 1;
    if (uv_fileno((const uv_handle_t *)&up->tcp, &fd) == 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

/* ---- request ----------------------------------------------------------------------- */

typedef struct up_write {
    uv_write_t req;
    upstream_t *up;
    char *head;
} up_write_t;

static void on_up_written(uv_write_t *w, int status)
{
    up_write_t *uw = (up_write_t *)w;
    upstream_t *up = uw->up;
    free(uw->head);
    free(uw);
    if (up->state == UP_CLOSED || !up->req)
        return;
    if (status < 0) {
        fail_io(up, "", status);
        return;
    }
    if (up->state == UP_SENDING)
        up_set_state(up, UP_HEAD);
}

static void send_request(upstream_t *up)
{
    request_t *r = up->req;
    buf_t h;
    buf_init(&h, r->head_len + 1024);
    proxy_request_head(r, &h);
    if (buf_failed(&h)) {
        buf_free(&h);
        fail_request(up, "request head too large", false);
        return;
    }

    up_set_state(up, UP_SENDING);
    request_set_state(r, REQ_WAITING);
    up->t_sent = up->t_heard = core_now();
    arm_silence_timer(up);
    /* try the whole request at once first (see conn_write_now); queue what remains */
    size_t hl = h.len;
    uv_buf_t direct[2] = {uv_buf_init(h.data, (unsigned)hl), uv_buf_init(r->body.data, (unsigned)r->body.len)};
    int sent = uv_try_write((uv_stream_t *)&up->tcp, direct, r->body.len ? 2 : 1);
    size_t total = hl + r->body.len;
    if (sent == (int)total) {
        buf_free(&h);
        up_set_state(up, UP_HEAD);
        if (up->paused)
            up_read_start(up);
        return;
    }
    if (sent < 0 && sent != UV_EAGAIN && sent != UV_ENOSYS) {
        buf_free(&h);
        fail_io(up, "", sent);
        return;
    }
    size_t skip = sent > 0 ? (size_t)sent : 0;
    up_write_t *uw = malloc(sizeof *uw);
    if (!uw) {
        buf_free(&h);
        fail_request(up, "out of memory", false);
        return;
    }
    uw->up = up;
    uw->head = buf_steal(&h, &hl);
    uv_buf_t bufs[2];
    int nbufs = 0;
    if (skip < hl)
        bufs[nbufs++] = uv_buf_init(uw->head + skip, (unsigned)(hl - skip));
    if (r->body.len) {
        size_t bskip = skip > hl ? skip - hl : 0;
        bufs[nbufs++] = uv_buf_init(r->body.data + bskip, (unsigned)(r->body.len - bskip));
    }
    int wrc = uv_write(&uw->req, (uv_stream_t *)&up->tcp, bufs, (unsigned)nbufs, on_up_written);
    if (wrc != 0) {
        free(uw->head);
        free(uw);
        fail_io(up, "write: ", wrc);
        return;
    }
    if (up->paused)
        up_read_start(up); /* a pooled connection is already reading (to notice a close) */
}

static void on_connect_timeout(uv_timer_t *t)
{
    upstream_t *up = t->data;
    if (up->state == UP_CONNECTING)
        fail_request(up, "connect timeout", true);
}

static void on_connected(uv_connect_t *cr, int status)
{
    upstream_t *up = cr->data;
    if (up->state == UP_CLOSED)
        return;
    uv_timer_stop(&up->timer);
    if (!up->req) {
        up_close(up);
        return;
    }
    if (status < 0) {
        fail_io(up, "connect: ", status);
        return;
    }
    uv_tcp_nodelay(&up->tcp, 1);
    up_read_start(up);
    send_request(up);
}

void proxy_start_attempt(request_t *req, instance_t *inst, bool allow_pooled)
{
    upstream_t *up = NULL;
    if (allow_pooled) {
        list_t *first = list_first(&inst->path.pool);
        if (first) {
            up = list_entry(first, upstream_t, link);
            list_remove(&up->link);
            inst->path.pool_size--;
            up->reused = true;
        }
    }
    req->up = NULL;
    if (up) {
        up->req = req;
        req->up = up;
        request_set_ops(req, &proxy_ops);
        buf_reset(&up->in);
        up->scan_from = 0;
        request_set_state(req, REQ_CONNECTING);
        send_request(up);
        return;
    }
    up = calloc(1, sizeof *up);
    if (!up) {
        release_slot(req, false);
        conn_respond_error(req->conn, 503, "internal", inst->model->name, 1, false, "out of memory");
        return;
    }
    up->inst = inst;
    up->req = req;
    request_set_ops(req, &proxy_ops);
    list_init(&up->link);
    buf_init(&up->in, UP_HEAD_MAX + sizeof g_up_read);
    uv_loop_t *loop = inst->model->core->loop;
    uv_tcp_init(loop, &up->tcp);
    uv_timer_init(loop, &up->timer);
    up->tcp.data = up;
    up->timer.data = up;
    up->connect_req.data = up;
    up->state = UP_CONNECTING; /* its first state (the object is new) */
    req->up = up;
    request_set_state(req, REQ_CONNECTING);
    struct sockaddr_storage addr;
    int rc;
    if (strchr(inst->life.host, ':'))
        rc = uv_ip6_addr(inst->life.host, inst->life.port, (struct sockaddr_in6 *)&addr);
    else
        rc = uv_ip4_addr(strcmp(inst->life.host, "localhost") == 0 ? "127.0.0.1" : inst->life.host, inst->life.port,
                         (struct sockaddr_in *)&addr);
    if (rc == 0)
        rc = uv_tcp_connect(&up->connect_req, &up->tcp, (struct sockaddr *)&addr, on_connected);
    if (rc != 0) {
        fail_io(up, "connect: ", rc);
        return;
    }
    uv_timer_start(&up->timer, on_connect_timeout, PROXY_CONNECT_TIMEOUT_MS, 0);
}
