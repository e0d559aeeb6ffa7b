/*
 * grant_socket: the shims' Unix socket, transport only (grant_socket.h).
 *
 * Bounds on connections that have not said HELLO (any local process that can reach the
 * socket may connect): at most per_peer open per peer pid (SO_PEERCRED), max_conns in all
 * (both: more are accepted and closed at once), and each closed hello_timeout_ms after its
 * accept unless its HELLO came. The HELLO timer is armed while such a connection is open,
 * for the oldest one's end (conns are kept in accept order). Each refusal and timeout is
 * counted (grant_socket_stats) and logged (shim_conn_refused, shim_hello_timeout), at most
 * one line a second per kind, with the count since the last line.
 * Lifetime: s is freed once the listener and the timer are closed and no connection is left.
 */
#include "net/grant_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/list.h"
#include "common/log.h"

struct grant_conn {
    list_t link;            /* s->conns */
    uv_pipe_t pipe;
    grant_socket_t *sock;
    void *owner;
    pid_t pid;
    unsigned slot;
    bool hello_done;
    bool control;           /* HELLO_CONTROL: vramd commands, the shim answers */
    bool command_waiting;   /* a PARK or RESTORE sent, its answer not yet read */
    uint32_t command_seq;
    bool ask_waiting;
    uint32_t ask_seq;
    bool closing;
    bool malformed;
    uint64_t accepted_ms;   /* uv_now when accepted: the HELLO timeout counts from it */
    size_t have;
    unsigned char buf[sizeof(shim_msg_t)];
};

struct grant_socket {
    uv_loop_t *loop;
    uv_pipe_t listener;
    bool listening;
    bool closing;
    char path[4096];
    grant_socket_limits_t lim;
    uv_timer_t hello_timer;
    bool timer_open;
    grant_socket_handlers_t h;
    void *ctx;
    list_t conns;
    unsigned pre_hello;     /* open connections that have not said HELLO */
    grant_socket_stats_t stats;
};

typedef struct log_limit {
    uint64_t last_ms;
    uint64_t unlogged;
} log_limit_t;

static log_limit_t g_log_refused, g_log_timeout;

/* At most one line a second per kind: true when this one is to be logged (*n: the events
 * since the last line, this one included). */
static bool log_due(log_limit_t *l, uint64_t now, uint64_t *n)
{
    l->unlogged++;
    if (l->last_ms && now - l->last_ms < 1000)
        return false;
    l->last_ms = now;
    *n = l->unlogged;
    l->unlogged = 0;
    return true;
}

static void maybe_free(grant_socket_t *s)
{
    if (s->closing && list_empty(&s->conns) && !s->listening && !s->timer_open)
        free(s);
}

typedef struct answer_write {
    uv_write_t req;
    shim_msg_t msg;
} answer_write_t;

static void conn_closed_cb(uv_handle_t *h)
{
    grant_conn_t *c = h->data;
    grant_socket_t *s = c->sock;
    list_remove(&c->link);
    s->stats.open--;
    if (s->h.closed)
        s->h.closed(s->ctx, c, c->owner, c->malformed);
    free(c);
    maybe_free(s);
}

static void conn_close(grant_conn_t *c, bool malformed)
{
    if (c->closing)
        return;
    c->closing = true;
    c->malformed = malformed;
    if (!c->hello_done)
        c->sock->pre_hello--;
    if (malformed)
        c->sock->stats.malformed++;
    uv_close((uv_handle_t *)&c->pipe, conn_closed_cb);
}

void grant_conn_close(grant_conn_t *c) { conn_close(c, false); }

pid_t grant_conn_pid(const grant_conn_t *c) { return c->pid; }

unsigned grant_conn_slot(const grant_conn_t *c) { return c->hello_done ? c->slot : SHIM_PAGE_PROCS; }

static void on_answer_written(uv_write_t *req, int status)
{
    (void)status; /* a broken connection shows as its read's EOF */
    free(req->data);
}

static int conn_write(grant_conn_t *c, const shim_msg_t *m)
{
    uv_buf_t b = uv_buf_init((char *)m, sizeof *m);
    int n = uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
    if (n == (int)sizeof *m)
        return 0;
    size_t off = n > 0 ? (size_t)n : 0;
    answer_write_t *w = malloc(sizeof *w);
    if (!w) {
        conn_close(c, false);
        return -1;
    }
    w->msg = *m;
    w->req.data = w;
    uv_buf_t rest = uv_buf_init((char *)&w->msg + off, (unsigned)(sizeof *m - off));
    if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &rest, 1, on_answer_written) != 0) {
        free(w);
        conn_close(c, false);
        return -1;
    }
    return 0;
}

int grant_conn_answer(grant_conn_t *c, const shim_msg_t *m)
{
    if (c->closing || !c->ask_waiting)
        return -1;
    c->ask_waiting = false;
    c->sock->stats.answers++;
    return conn_write(c, m);
}

int grant_conn_command(grant_conn_t *c, const shim_msg_t *m)
{
    if (c->closing || !c->control || c->command_waiting)
        return -1;
    c->command_waiting = true;
    c->command_seq = m->seq;
    return conn_write(c, m);
}

bool grant_conn_is_control(const grant_conn_t *c) { return c->control; }

/* One whole message read: the rules of grant_socket.h. */
static void conn_message(grant_conn_t *c, const shim_msg_t *m)
{
    grant_socket_t *s = c->sock;
    if (shim_msg_valid(m) != 0) {
        conn_close(c, true);
        return;
    }
    if (!c->hello_done) {
        if ((m->type != SHIM_MSG_HELLO && m->type != SHIM_MSG_HELLO_CONTROL) || m->aux >= SHIM_PAGE_PROCS) {
            conn_close(c, true);
            return;
        }
        c->hello_done = true;
        s->pre_hello--;
        c->control = m->type == SHIM_MSG_HELLO_CONTROL;
        c->slot = (unsigned)m->aux;
        c->owner = s->h.hello ? s->h.hello(s->ctx, c, m, c->pid) : NULL;
        if (!c->owner) {
            conn_close(c, true);
            return;
        }
        shim_msg_t ok;
        shim_msg_init(&ok, SHIM_MSG_HELLO_OK);
        conn_write(c, &ok);
        return;
    }
    if (c->control) {
        bool answer = m->type >= SHIM_MSG_PARK_DONE && m->type <= SHIM_MSG_RESTORE_FAILED;
        if (!answer || !c->command_waiting || m->seq != c->command_seq) {
            conn_close(c, true);
            return;
        }
        c->command_waiting = false;
        if (s->h.control)
            s->h.control(s->ctx, c, c->owner, m);
        return;
    }
    if (m->type != SHIM_MSG_ASK || c->ask_waiting) {
        conn_close(c, true);
        return;
    }
    c->ask_waiting = true;
    c->ask_seq = m->seq;
    s->stats.asks++;
    if (s->h.ask)
        s->h.ask(s->ctx, c, c->owner, m);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    grant_conn_t *c = h->data;
    *buf = uv_buf_init((char *)c->buf + c->have, (unsigned)(sizeof c->buf - c->have));
}

static void conn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    grant_conn_t *c = st->data;
    if (n < 0) {
        conn_close(c, false);
        return;
    }
    c->have += (size_t)n;
    if (c->have < sizeof c->buf)
        return;
    shim_msg_t m;
    memcpy(&m, c->buf, sizeof m);
    c->have = 0;
    conn_message(c, &m);
}

static void on_refused_closed(uv_handle_t *h) { free(h); }

/* Take the next connection off the listener and close it unanswered. */
static void accept_and_close(grant_socket_t *s, uv_stream_t *server)
{
    uv_pipe_t *p = malloc(sizeof *p);
    if (p && uv_pipe_init(s->loop, p, 0) == 0) {
        (void)uv_accept(server, (uv_stream_t *)p);
        uv_close((uv_handle_t *)p, on_refused_closed);
    } else {
        free(p); /* left in the backlog: the kernel refuses once it is full */
    }
}

static void refused_log(grant_socket_t *s, const char *reason, pid_t pid, unsigned limit, unsigned open)
{
    uint64_t n;
    if (log_due(&g_log_refused, uv_now(s->loop), &n))
        log_event(LOG_WARN, "shim_conn_refused", "reason=%s pid=%d limit=%u refused=%llu open=%u", reason, (int)pid,
                  limit, (unsigned long long)n, open);
}

static unsigned peer_conns(const grant_socket_t *s, pid_t pid)
{
    unsigned n = 0;
    list_foreach(it, &s->conns) {
        const grant_conn_t *c = list_entry(it, grant_conn_t, link);
        n += c->pid == pid && !c->closing;
    }
    return n;
}

static void on_hello_timer(uv_timer_t *t);

/* Armed for the oldest connection still without a HELLO (conns are in accept order). */
static void hello_timer_arm(grant_socket_t *s)
{
    if (!s->timer_open || s->closing)
        return;
    if (s->pre_hello == 0) {
        uv_timer_stop(&s->hello_timer);
        return;
    }
    list_foreach(it, &s->conns) {
        const grant_conn_t *c = list_entry(it, grant_conn_t, link);
        if (c->hello_done || c->closing)
            continue;
        uint64_t now = uv_now(s->loop), end = c->accepted_ms + s->lim.hello_timeout_ms;
        uv_timer_start(&s->hello_timer, on_hello_timer, end > now ? end - now : 0, 0);
        return;
    }
    uv_timer_stop(&s->hello_timer);
}

static void on_hello_timer(uv_timer_t *t)
{
    grant_socket_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    list_foreach_safe(it, tmp, &s->conns) {
        grant_conn_t *c = list_entry(it, grant_conn_t, link);
        if (c->hello_done || c->closing)
            continue;
        if (now - c->accepted_ms < s->lim.hello_timeout_ms)
            break; /* the rest came later */
        s->stats.hello_timeouts++;
        uint64_t n;
        if (log_due(&g_log_timeout, now, &n))
            log_event(LOG_WARN, "shim_hello_timeout", "pid=%d timeout_ms=%llu closed=%llu", (int)c->pid,
                      (unsigned long long)s->lim.hello_timeout_ms, (unsigned long long)n);
        conn_close(c, false); /* whose it is is not known: no worker is failed for it */
    }
    hello_timer_arm(s);
}

static pid_t peer_pid(uv_pipe_t *p)
{
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)p, &fd) == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
        return cred.pid;
    return 0;
}

static void on_connection(uv_stream_t *server, int status)
{
    grant_socket_t *s = server->data;
    if (status < 0)
        return;
    if (s->stats.open >= s->lim.max_conns) {
        accept_and_close(s, server);
        s->stats.refused_full++;
        refused_log(s, "max", 0, s->lim.max_conns, s->stats.open);
        return;
    }
    grant_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        accept_and_close(s, server);
        return;
    }
    if (uv_pipe_init(s->loop, &c->pipe, 0) != 0) {
        free(c);
        accept_and_close(s, server);
        return;
    }
    c->pipe.data = c;
    c->sock = s;
    c->slot = SHIM_PAGE_PROCS;
    c->accepted_ms = uv_now(s->loop);
    list_insert_tail(&s->conns, &c->link);
    s->stats.open++;
    s->stats.accepted++;
    s->pre_hello++;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0) {
        conn_close(c, false);
        return;
    }
    c->pid = peer_pid(&c->pipe);
    if (peer_conns(s, c->pid) > s->lim.per_peer) { /* this one counted too */
        s->stats.refused_peer++;
        refused_log(s, "per_process", c->pid, s->lim.per_peer, s->stats.open - 1);
        conn_close(c, false);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read) != 0) {
        conn_close(c, false);
        return;
    }
    if (!uv_is_active((uv_handle_t *)&s->hello_timer))
        hello_timer_arm(s);
}

/* bind() to path, through /proc/self/fd/N/NAME of its directory when path is longer than
 * sun_path holds. */
static int bind_path(int fd, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    int dirfd = -1;
    if (shim_socket_address(path, &sa, &dirfd) != 0) {
        snprintf(err, errlen, "%s: %s", path, errno == ENAMETOOLONG ? "path too long for a Unix socket" : strerror(errno));
        return -1;
    }
    unlink(sa.sun_path); /* a socket file a vramd before this one left */
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0)
        snprintf(err, errlen, "%s: bind: %s", path, strerror(errno));
    if (dirfd >= 0)
        close(dirfd);
    return rc;
}

static void listener_closed(uv_handle_t *h)
{
    grant_socket_t *s = h->data;
    s->listening = false;
    maybe_free(s);
}

static void timer_closed(uv_handle_t *h)
{
    grant_socket_t *s = h->data;
    s->timer_open = false;
    maybe_free(s);
}

grant_socket_t *grant_socket_listen(uv_loop_t *loop, const char *path, const grant_socket_limits_t *lim,
                                    const grant_socket_handlers_t *h, void *ctx, char *err, size_t errlen)
{
    if (strlen(path) >= sizeof(((grant_socket_t *)0)->path)) {
        snprintf(err, errlen, "socket path too long");
        return NULL;
    }
    grant_socket_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->lim = *lim;
    if (!s->lim.max_conns)
        s->lim.max_conns = 1;
    if (!s->lim.per_peer)
        s->lim.per_peer = 1;
    if (!s->lim.hello_timeout_ms)
        s->lim.hello_timeout_ms = 1;
    s->h = *h;
    s->ctx = ctx;
    list_init(&s->conns);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        free(s);
        return NULL;
    }
    if (bind_path(fd, path, err, errlen) != 0 || chmod(path, 0600) != 0 || listen(fd, 128) != 0) {
        if (!err[0])
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        free(s);
        return NULL;
    }
    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    int rc = uv_pipe_open(&s->listener, fd);
    if (rc != 0)
        close(fd); /* not the handle's */
    else
        rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "%s: listen: %s", path, uv_strerror(rc));
        unlink(path);
        s->closing = true;
        s->listening = true;
        uv_close((uv_handle_t *)&s->listener, listener_closed); /* frees s once the loop ran the close */
        return NULL;
    }
    s->listening = true;
    uv_timer_init(loop, &s->hello_timer);
    s->hello_timer.data = s;
    s->timer_open = true;
    return s;
}

void grant_socket_close(grant_socket_t *s)
{
    if (!s || s->closing)
        return;
    s->closing = true;
    unlink(s->path);
    list_foreach_safe(it, tmp, &s->conns) conn_close(list_entry(it, grant_conn_t, link), false);
    uv_close((uv_handle_t *)&s->listener, listener_closed);
    if (s->timer_open)
        uv_close((uv_handle_t *)&s->hello_timer, timer_closed);
}

const char *grant_socket_path(const grant_socket_t *s) { return s->path; }

void grant_socket_stats(const grant_socket_t *s, grant_socket_stats_t *out) { *out = s->stats; }
