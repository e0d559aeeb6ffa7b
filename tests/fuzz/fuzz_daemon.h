/*
 * fuzz_daemon: an in-process vramd for the connection-level fuzzers (fuzz_conn.c,
 * fuzz_upstream.c), built as tests/unit/path_fixture.h builds it, without cmocka:
 *
 *   D  the daemon side: a config parsed from a YAML string, core_init, wiring_connect (the
 *      composition root's wiring), model_create + model_start_pinned for every model, and a
 *      libuv listener on 127.0.0.1 port 0 whose connections go to conn_accept(..,
 *      wiring_conn_handlers()). No NVML (VRAMD_NVML_LIBRARY names a file that does not exist) and
 *      no memory declared. fd_daemon_start / fd_daemon_stop build and tear it down for
 *      every input (about a millisecond), so no state leaks from one input to the next.
 *   U  a fake upstream worker that every model's `url:` points at: raw non-blocking sockets
 *      polled once per loop turn by fd_turn (never a libuv handle: the harness decides when
 *      each byte leaves). GET /health is answered 200 at once; every other request is
 *      handed to U.answer, which scripts the answer as pieces, each sent after a number of
 *      turns, then the connection is closed, kept for the next request, or held silent.
 *   clients  raw non-blocking loopback sockets (blocking connect: the kernel completes it
 *      from the listen backlog), written and read by the fuzzers' scripts.
 *
 * Every wait is a bounded number of loop turns (uv_run UV_RUN_NOWAIT) and of wall time; a
 * wait that runs out is a finding: FD_CHECK prints what was waited for and aborts, which
 * libFuzzer (or the replay main) reports as a crash.
 * After an input (fd_settle): the clients are closed, and the loop turns until the daemon
 * has no connection, nothing queued or in flight, no deferred work or free-list entry,
 * and every request it parsed has ended (CORE_EV_REQUEST_ENDED).
 * Functions are static: each fuzzer includes this header once.
 */
#ifndef VRAMD_TESTS_FUZZ_DAEMON_H
#define VRAMD_TESTS_FUZZ_DAEMON_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/log.h"
#include "config/config.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "core/core.h"
#include "core/model.h"
#include "daemon/wiring.h"
#include "http/http1.h"
#include "net/conn.h"
#include "path/dispatch.h"
#include "sched/scheduler.h"
#include "serve/api.h"
#include "workers/supervisor.h"

#define FD_CHECK(cond)                                                                         \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            fd_dump();                                                                         \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define FD_SETTLE_TURNS 2000 /* turns at once for the daemon to let go of everything */
#define FD_SETTLE_MS 4000    /* the bound on the same wait: over conn.c's 2 s lingering close */

static inline void fd_dump(void);

static inline uint64_t fd_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the fake upstream (U) ------------------------------------------------------------ */

#define FU_CONNS 16
#define FU_IN_MAX 65536
#define FU_PIECES 16

typedef struct fu_piece {
    const char *data;
    size_t len;
    unsigned delay; /* turns to wait before sending it */
} fu_piece_t;

enum fu_end {
    FU_END_CLOSE = 0, /* close after the last piece */
    FU_END_KEEP,      /* wait for the next request on the same connection */
    FU_END_HOLD,      /* say nothing more; the connection stays open until the daemon closes it */
};

typedef struct fu_conn {
    int fd; /* -1: free */
    char in[FU_IN_MAX];
    size_t in_len;
    size_t req_len;      /* bytes of the request being answered */
    bool answering;
    bool health;
    fu_piece_t pieces[FU_PIECES];
    int n_pieces, next;
    size_t off;          /* bytes of pieces[next] sent */
    unsigned wait;       /* turns before pieces[next] */
    enum fu_end end;
    unsigned served;
} fu_conn_t;

/* Script the answer to a request (req[0..len) is the complete request) into fc->pieces,
 * fc->n_pieces and fc->end. */
typedef void (*fu_answer_fn)(fu_conn_t *fc, const char *req, size_t len);

static struct fake_upstream {
    int lfd;
    int port;
    fu_conn_t conns[FU_CONNS];
    unsigned open;
    unsigned health;   /* health checks answered */
    unsigned requests; /* other requests */
    unsigned closed_after_answer; /* connections U closed itself after an answer (FU_END_CLOSE) */
    unsigned answers_done;        /* answers whose last piece was sent */
    fu_answer_fn answer;
} U;

static const char FU_HEALTH[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

static inline void fu_listen(void)
{
    if (U.lfd > 0)
        return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FD_CHECK(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    FD_CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    FD_CHECK(listen(fd, 256) == 0);
    socklen_t al = sizeof a;
    FD_CHECK(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    U.lfd = fd;
    U.port = ntohs(a.sin_port);
    for (int i = 0; i < FU_CONNS; i++)
        U.conns[i].fd = -1;
}

static inline void fu_close(fu_conn_t *fc)
{
    if (fc->fd < 0)
        return;
    close(fc->fd);
    fc->fd = -1;
    U.open--;
}

/* Close every connection of U at once (the end of an input). */
static inline void fu_close_all(void)
{
    for (int i = 0; i < FU_CONNS; i++)
        fu_close(&U.conns[i]);
}

/* Bytes of a complete request at the start of buf (head + Content-Length), 0 if none. */
static inline size_t fu_request_length(const char *buf, size_t len)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - buf) + 4;
    size_t cl = 0;
    for (const char *p = buf; p && p < end; p = memmem(p, (size_t)(end - p), "\r\n", 2)) {
        p += 2;
        if ((size_t)(end - p) > 16 && strncasecmp(p, "Content-Length:", 15) == 0)
            cl = strtoul(p + 15, NULL, 10);
    }
    return len >= head + cl ? head + cl : 0;
}

static inline void fu_begin_answer(fu_conn_t *fc)
{
    size_t len = fu_request_length(fc->in, fc->in_len);
    if (!len)
        return;
    fc->req_len = len;
    fc->answering = true;
    fc->next = 0;
    fc->off = 0;
    if (len >= 12 && memcmp(fc->in, "GET /health ", 12) == 0) {
        U.health++;
        fc->health = true;
        fc->pieces[0] = (fu_piece_t){FU_HEALTH, sizeof FU_HEALTH - 1, 0};
        fc->n_pieces = 1;
        fc->end = FU_END_CLOSE;
    } else {
        U.requests++;
        fc->served++;
        fc->n_pieces = 0;
        fc->end = FU_END_CLOSE;
        U.answer(fc, fc->in, len);
    }
    fc->wait = fc->n_pieces ? fc->pieces[0].delay : 0;
}

/* Send what is due; false when the connection went away. */
static inline bool fu_send(fu_conn_t *fc)
{
    while (fc->next < fc->n_pieces) {
        if (fc->wait > 0) {
            fc->wait--;
            return true;
        }
        const fu_piece_t *p = &fc->pieces[fc->next];
        while (fc->off < p->len) {
            ssize_t n = send(fc->fd, p->data + fc->off, p->len - fc->off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return true;
            if (n <= 0)
                return false;
            fc->off += (size_t)n;
        }
        fc->next++;
        fc->off = 0;
        if (fc->next < fc->n_pieces)
            fc->wait = fc->pieces[fc->next].delay;
    }
    /* the whole answer is out */
    if (!fc->health)
        U.answers_done++;
    if (fc->end == FU_END_CLOSE) {
        if (!fc->health)
            U.closed_after_answer++;
        return false;
    }
    if (fc->end == FU_END_HOLD) {
        fc->n_pieces = 0; /* stays answering: nothing more is read as a request */
        return true;
    }
    memmove(fc->in, fc->in + fc->req_len, fc->in_len - fc->req_len);
    fc->in_len -= fc->req_len;
    fc->answering = false;
    fu_begin_answer(fc); /* a request already waiting */
    return true;
}

static inline void fu_service_conn(fu_conn_t *fc)
{
    for (;;) {
        if (fc->in_len == sizeof fc->in) {
            fc->in_len = 0; /* more than any request of the fuzzers: forget it */
        }
        ssize_t n = recv(fc->fd, fc->in + fc->in_len, sizeof fc->in - fc->in_len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            fu_close(fc);
            return;
        }
        if (fc->answering) /* bytes after a request being answered: only kept */
            fc->in_len += (size_t)n;
        else {
            fc->in_len += (size_t)n;
            fu_begin_answer(fc);
        }
    }
    if (fc->answering && !fu_send(fc))
        fu_close(fc);
}

static inline void fu_service(void)
{
    for (;;) {
        int fd = accept4(U.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        fu_conn_t *fc = NULL;
        for (int i = 0; i < FU_CONNS && !fc; i++)
            if (U.conns[i].fd < 0)
                fc = &U.conns[i];
        if (!fc) {
            close(fd); /* more than the fake keeps: the daemon sees a failed worker */
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        memset(fc, 0, sizeof *fc);
        fc->fd = fd;
        U.open++;
    }
    for (int i = 0; i < FU_CONNS; i++)
        if (U.conns[i].fd >= 0)
            fu_service_conn(&U.conns[i]);
}

/* ---- the daemon side (D) ------------------------------------------------------------- */

static struct fd_daemon {
    uv_loop_t loop;
    core_t core;
    uv_tcp_t listener;
    int port;
    bool up;
    uint64_t ended;   /* CORE_EV_REQUEST_ENDED with a request */
    unsigned accepted; /* connections accepted from the listener */
    unsigned connects; /* connections the clients made */
    config_t *cfg;    /* parsed once, for every input */
    const char *what; /* what the current wait is for (fd_dump) */
} D;

static inline void fd_on_ended(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    (void)ev;
    if (subject)
        D.ended++;
}

static inline void fd_stub_drain(void *ctx, const char *why)
{
    (void)ctx;
    (void)why;
}

static inline int fd_stub_reload(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    snprintf(err, errlen, "not in the fuzzer");
    return -1;
}

static inline void fd_on_conn(uv_stream_t *server, int status)
{
    if (status == 0) {
        D.accepted++;
        conn_accept(&D.core, server, wiring_conn_handlers());
    }
}

/* One loop turn that does not block, then the fake upstream's turn. */
static inline void fd_turn(void)
{
    uv_run(&D.loop, UV_RUN_NOWAIT);
    fu_service();
}

/* Turn until cond holds, for at most ms milliseconds; false when it did not. The first
 * `turns` turns follow each other at once; later ones are 1 ms apart (a daemon timer, such
 * as the 2 s lingering close, may be what ends the wait). */
#define FD_TURN_UNTIL(cond, turns, ms)                                                         \
    ({                                                                                         \
        uint64_t fd_t0_ = fd_mono_ms();                                                        \
        unsigned fd_n_ = 0;                                                                    \
        while (!(cond) && fd_mono_ms() - fd_t0_ < (ms)) {                                      \
            fd_turn();                                                                         \
            if (++fd_n_ > (turns)) {                                                           \
                struct timespec fd_ts_ = {0, 1000000L};                                        \
                nanosleep(&fd_ts_, NULL);                                                      \
            }                                                                                  \
        }                                                                                      \
        (bool)(cond);                                                                          \
    })

static inline bool fd_health_settled(void)
{
    size_t n = 0;
    list_foreach(it, &D.core.models) {
        model_t *m = list_entry(it, model_t, link);
        list_foreach(jt, &m->instances) if (list_entry(jt, instance_t, link)->life.health_call) return false;
        n += m->n_instances;
    }
    return n == D.core.cfg->n_models && U.health >= n;
}

/* Parse the config once (the fake upstream's port is in it); models_yaml is everything
 * after `defaults:`'s url and health lines. */
#define FD_INPUTS_PER_PORT 2000

static inline void fd_once(const char *yaml_rest)
{
    /* Every FD_INPUTS_PER_PORT inputs the fake upstream moves to a new port (and the config
     * is parsed again): the daemon's side of each upstream connection it closes first stays
     * in TIME_WAIT for a minute, and 60,000 of them to one port use up the ephemeral ports. */
    static unsigned inputs;
    if (D.cfg && ++inputs % FD_INPUTS_PER_PORT != 0)
        return;
    if (D.cfg) {
        config_unref(D.cfg);
        D.cfg = NULL;
        close(U.lfd);
        U.lfd = 0;
    }
    setenv("VRAMD_NVML_LIBRARY", "/nonexistent/vramd-fuzz/libnvidia-ml.so.1", 1);
    signal(SIGPIPE, SIG_IGN);
    const char *lv = getenv("VRAMD_FUZZ_LOG"); /* debug | info | warn | error (default) */
    int level = lv ? log_level_parse(lv) : -1;
    log_configure(LOG_FORMAT_TEXT, level >= 0 ? (enum log_level)level : LOG_ERROR, 2);
    fu_listen();
    char yaml[8192], err[CONFIG_ERR_MAX];
    /* allowed_hosts: the corpus's Host names; a mutated one is refused 403 host_not_allowed,
     * one more answer the fuzzers' checks take (the DNS-rebinding check stays on) */
    snprintf(yaml, sizeof yaml,
             "allowed_hosts: [t, x, a, b]\n"
             "defaults:\n  url: http://127.0.0.1:%d\n  health: { interval: 1h, timeout: 2s }\n%s",
             U.port, yaml_rest);
    D.cfg = config_parse(yaml, strlen(yaml), "fuzz.yaml", err, sizeof err);
    if (!D.cfg) {
        fprintf(stderr, "fuzz config: %s\n", err);
        abort();
    }
}

static inline void fd_daemon_start(void)
{
    D.ended = 0;
    D.accepted = D.connects = 0;
    U.health = U.requests = U.closed_after_answer = U.answers_done = 0;
    memset(&D.loop, 0, sizeof D.loop);
    memset(&D.core, 0, sizeof D.core); /* core_init expects a zeroed core */
    FD_CHECK(uv_loop_init(&D.loop) == 0);
    core_init(&D.core, &D.loop, D.cfg);
    wiring_root_t root = {.admin = {.drain = fd_stub_drain, .reload = fd_stub_reload, .ctx = NULL}};
    wiring_connect(&D.core, &root);
    core_listen(&D.core, CORE_EV_REQUEST_ENDED, fd_on_ended, NULL);
    for (size_t i = 0; i < D.cfg->n_models; i++)
        model_start_pinned(model_create(&D.core, &D.cfg->models[i], D.cfg, dispatch_pump));
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 0, &addr);
    uv_tcp_init(&D.loop, &D.listener);
    FD_CHECK(uv_tcp_bind(&D.listener, (struct sockaddr *)&addr, 0) == 0);
    FD_CHECK(uv_listen((uv_stream_t *)&D.listener, 256, fd_on_conn) == 0);
    int len = sizeof addr;
    uv_tcp_getsockname(&D.listener, (struct sockaddr *)&addr, &len);
    D.port = ntohs(addr.sin_port);
    D.up = true;
    D.what = "health checks of every model";
    FD_CHECK(FD_TURN_UNTIL(fd_health_settled(), FD_SETTLE_TURNS, FD_SETTLE_MS));
}

static inline void fd_close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (getenv("VRAMD_FUZZ_VERBOSE"))
        fprintf(stderr, "teardown: handle %s %p closing %d active %d\n", uv_handle_type_name(h->type), (void *)h,
                uv_is_closing(h), uv_is_active(h));
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Removed in an async callback, in the poll phase, as a reload removes models (see
 * path_fixture.h's teardown for why not from outside the loop). */
static inline void fd_remove_models(uv_async_t *a)
{
    list_foreach_safe(it, tmp, &D.core.models) model_remove(list_entry(it, model_t, link));
    uv_close((uv_handle_t *)a, NULL);
}

static inline void fd_daemon_stop(void)
{
    static uv_async_t remover;
    uv_async_init(&D.loop, &remover, fd_remove_models);
    uv_async_send(&remover);
    D.what = "models removed";
    FD_CHECK(FD_TURN_UNTIL(list_empty(&D.core.models), FD_SETTLE_TURNS, FD_SETTLE_MS));
    fu_close_all();
    shim_grants_shutdown(); /* the wiring's teardown, in vramd_run's order */
    sched_shutdown(&D.core);
    driver_limit_shutdown();
    uv_walk(&D.loop, fd_close_walk, NULL);
    uv_run(&D.loop, UV_RUN_DEFAULT);
    core_close(&D.core);
    FD_CHECK(uv_loop_close(&D.loop) == 0);
    D.up = false;
}

/* ---- clients ------------------------------------------------------------------------- */

#define FC_RX_MAX (256 * 1024)

typedef struct fz_client {
    int fd;          /* -1: not connected */
    bool used;       /* connected at least once in this input */
    bool shut_wr;
    bool eof;        /* the daemon closed (read 0) */
    bool reset;      /* a read or write failed (ECONNRESET, EPIPE) */
    bool sent_head;  /* a HEAD request may have been sent: answers have no body */
    size_t sent;
    char rx[FC_RX_MAX];
    size_t rx_len;   /* kept bytes (at most FC_RX_MAX) */
    size_t rx_total; /* all bytes read */
} fz_client_t;

static inline void fz_connect(fz_client_t *cl)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FD_CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { /* completed by the backlog */
        fprintf(stderr, "fuzz: connect to the daemon: %s\n", strerror(errno));
        FD_CHECK(!"connect");
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    cl->fd = fd;
    cl->used = true;
    D.connects++;
    cl->shut_wr = cl->eof = cl->reset = false;
}

static inline void fz_write(fz_client_t *cl, const void *p, size_t n)
{
    if (cl->fd < 0)
        fz_connect(cl);
    if (cl->shut_wr || cl->reset || n == 0)
        return;
    if (n >= 4 && memmem(p, n, "HEAD", 4))
        cl->sent_head = true;
    ssize_t w = send(cl->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        cl->reset = true;
    else if (w > 0)
        cl->sent += (size_t)w; /* a full socket buffer: the rest is dropped */
}

/* Read what is there (the client drains); true when something came. */
static inline bool fz_read(fz_client_t *cl)
{
    bool got = false;
    while (cl->fd >= 0 && !cl->eof && !cl->reset) {
        char tmp[16384];
        ssize_t n = recv(cl->fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n == 0) {
            cl->eof = true;
            break;
        }
        if (n < 0) {
            cl->reset = true;
            break;
        }
        size_t keep = FC_RX_MAX - cl->rx_len < (size_t)n ? FC_RX_MAX - cl->rx_len : (size_t)n;
        memcpy(cl->rx + cl->rx_len, tmp, keep);
        cl->rx_len += keep;
        cl->rx_total += (size_t)n;
        got = true;
    }
    return got;
}

static inline void fz_shut_wr(fz_client_t *cl)
{
    if (cl->fd < 0)
        fz_connect(cl);
    shutdown(cl->fd, SHUT_WR);
    cl->shut_wr = true;
}

/* Close; reset: SO_LINGER 0, so the daemon gets an RST instead of a FIN. */
static inline void fz_close(fz_client_t *cl, bool reset)
{
    if (cl->fd < 0)
        return;
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(cl->fd);
    cl->fd = -1;
}

/* ---- answers the clients got ------------------------------------------------------------ */

static inline void fz_noop_data(void *ctx, const char *data, size_t len)
{
    (void)data;
    size_t *n = ctx;
    *n += len;
}

typedef struct fz_resp {
    int status;
    bool complete;   /* head and body by their framing */
    size_t end;      /* bytes through its end (when complete) */
    size_t body_len; /* body bytes (decoded) seen */
    http1_body_t framing;
    bool keep_alive;
} fz_resp_t;

/* Parse one response at buf[0..len). HTTP1_OK: complete; HTTP1_NEED_MORE: cut or not there
 * yet (r->status set when the head is complete); HTTP1_ERROR: malformed. */
static inline int fz_parse_response(const char *buf, size_t len, bool head_req, bool until_close_ends, fz_resp_t *r)
{
    static http1_header_t hdrs[256];
    http1_limits_t lim = {.max_header_bytes = 256 * 1024, .max_headers = 256};
    http1_msg_t msg;
    http1_error_t err;
    size_t scan = 0;
    memset(r, 0, sizeof *r);
    int rc = http1_parse_response(buf, len, &lim, head_req, &msg, hdrs, &scan, &err);
    if (rc != HTTP1_OK)
        return rc;
    r->status = msg.status;
    r->framing = msg.body;
    r->keep_alive = msg.keep_alive;
    size_t at = msg.head_len;
    switch (msg.body) {
    case HTTP1_BODY_NONE:
        break;
    case HTTP1_BODY_LENGTH:
        if (len - at < msg.content_length) {
            r->body_len = len - at;
            return HTTP1_NEED_MORE;
        }
        r->body_len = msg.content_length;
        at += msg.content_length;
        break;
    case HTTP1_BODY_CHUNKED: {
        http1_chunked_t ch;
        http1_chunked_init(&ch, 16 * 1024);
        size_t used = 0;
        int crc = http1_chunked_feed(&ch, buf + at, len - at, &used, fz_noop_data, &r->body_len, &err);
        if (crc != HTTP1_OK)
            return crc;
        at += used;
        break;
    }
    case HTTP1_BODY_UNTIL_CLOSE:
        r->body_len = len - at;
        if (!until_close_ends)
            return HTTP1_NEED_MORE;
        at = len;
        break;
    }
    r->complete = true;
    r->end = at;
    return HTTP1_OK;
}

#endif
