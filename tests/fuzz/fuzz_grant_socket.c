/*
 * fuzz_grant_socket: libFuzzer entry for the CUDA shims' socket (net/grant_socket.c) over a
 * real Unix socket and a libuv loop: up to three clients write the input's bytes, split into
 * pieces a few loop turns apart, some closing early; the handlers accept a HELLO whose token
 * starts with 0x5a, and answer each ASK with GRANT or REFUSE (its seq), at once or on a later
 * turn; a control connection (HELLO_CONTROL) is sent a PARK or RESTORE each turn no command
 * waits on it.
 *
 * Input: byte 0 flags: bits 0-1 clients - 1 (0..2 -> 1..3, 3 -> 3); bit 2 answer asks one
 * turn later; bit 3 the last client closes before its last piece; bit 4 at most 2
 * connections per peer process (else 8: every client is this process); bit 5 a HELLO
 * timeout of 1 ms (else 60 s); byte 1 the piece size
 * (1..256, 0 = 64). The rest is dealt round-robin to the clients, piece by piece.
 *
 * Checks: every byte a client reads forms whole 64-byte messages, each valid
 * (shim_msg_valid) and of a type vramd sends (HELLO_OK, GRANT, REFUSE, PARK, RESTORE),
 * GRANT/REFUSE with a seq the server was asked on that connection; a command's answer reaches
 * control() only on a control connection, once per command, with its seq; every connection closed ends with exactly
 * one closed() call (malformed or not); never more connections open than the per-process
 * bound, and the clients past it refused (refused_peer); grant_socket_close frees everything (ASan sees a
 * leak); the loop ends (bounded turns).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "net/grant_socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CLIENTS_MAX 3
#define TURNS_MAX 400
#define PENDING_MAX 64

typedef struct pending {
    grant_conn_t *c;
    uint32_t seq;
    int grant;
} pending_t;

static struct {
    unsigned accepted_hello, asks, closed;
    grant_conn_t *ctl[8]; /* control connections open */
    uint32_t ctl_seq[8];  /* the command waiting on each (0: none) */
    uint32_t next_seq;
    pending_t pend[PENDING_MAX];
    unsigned n_pend;
    int later;
} S;

static int owner_token = 1;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_grant_socket: %s\n", what);
    abort();
}

static void *on_hello(void *ctx, grant_conn_t *c, const shim_msg_t *m, pid_t pid)
{
    (void)ctx;
    (void)c;
    if (pid != getpid())
        fail("SO_PEERCRED named another process");
    if (m->token[0] != 0x5a)
        return NULL;
    S.accepted_hello++;
    if (grant_conn_is_control(c) != (m->type == SHIM_MSG_HELLO_CONTROL))
        fail("a control connection not told apart");
    for (unsigned i = 0; grant_conn_is_control(c) && i < 8; i++)
        if (!S.ctl[i]) {
            S.ctl[i] = c;
            S.ctl_seq[i] = 0;
            break;
        }
    return &owner_token;
}

static void answer(grant_conn_t *c, uint32_t seq, int grant)
{
    shim_msg_t a;
    shim_msg_init(&a, grant ? SHIM_MSG_GRANT : SHIM_MSG_REFUSE);
    a.seq = seq;
    a.aux = grant ? 0 : SHIM_REFUSE_NO_ROOM;
    if (grant_conn_answer(c, &a) != 0)
        fail("an answer to a waiting ask was refused");
    if (grant_conn_answer(c, &a) == 0)
        fail("a second answer to one ask went out");
}

static void on_ask(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m)
{
    (void)ctx;
    if (owner != &owner_token)
        fail("an ask without an accepted hello");
    S.asks++;
    int grant = (int)(m->bytes & 1);
    if (S.later && S.n_pend < PENDING_MAX) {
        S.pend[S.n_pend++] = (pending_t){.c = c, .seq = m->seq, .grant = grant};
        return;
    }
    answer(c, m->seq, grant);
}

static void on_control(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m)
{
    (void)ctx;
    if (owner != &owner_token || !grant_conn_is_control(c))
        fail("a command's answer on a connection that is not a control one");
    if (m->type < SHIM_MSG_PARK_DONE || m->type > SHIM_MSG_RESTORE_FAILED)
        fail("control() got a message that is no answer");
    for (unsigned i = 0; i < 8; i++)
        if (S.ctl[i] == c) {
            if (S.ctl_seq[i] == 0 || S.ctl_seq[i] != m->seq)
                fail("an answer to no command, or to another one");
            S.ctl_seq[i] = 0;
            return;
        }
    fail("an answer on an unknown control connection");
}

/* A command to every control connection that has none waiting. */
static void send_commands(void)
{
    for (unsigned i = 0; i < 8; i++) {
        if (!S.ctl[i] || S.ctl_seq[i])
            continue;
        shim_msg_t m;
        shim_msg_init(&m, (S.next_seq & 1) ? SHIM_MSG_RESTORE : SHIM_MSG_PARK);
        m.seq = ++S.next_seq;
        if (grant_conn_command(S.ctl[i], &m) == 0) {
            S.ctl_seq[i] = m.seq;
            if (grant_conn_command(S.ctl[i], &m) == 0)
                fail("a second command went out while one waits");
        }
    }
}

static void on_closed(void *ctx, grant_conn_t *c, void *owner, bool malformed)
{
    (void)ctx;
    (void)owner;
    (void)malformed;
    S.closed++;
    for (unsigned i = 0; i < 8; i++)
        if (S.ctl[i] == c)
            S.ctl[i] = NULL;
    for (unsigned i = 0; i < S.n_pend; i++)
        if (S.pend[i].c == c) {
            S.pend[i] = S.pend[--S.n_pend];
            i--;
        }
}

typedef struct client {
    int fd;
    const uint8_t *data; /* its pieces, in order */
    size_t len, off;
    unsigned char rx[4096];
    size_t rx_len;
    uint32_t asked[256];
    unsigned n_asked;
    bool closed;
} client_t;

/* Reads what came, checks every whole message. */
static void client_read(client_t *cl)
{
    for (;;) {
        ssize_t n = read(cl->fd, cl->rx + cl->rx_len, sizeof cl->rx - cl->rx_len);
        if (n <= 0)
            break;
        cl->rx_len += (size_t)n;
        while (cl->rx_len >= sizeof(shim_msg_t)) {
            shim_msg_t m;
            memcpy(&m, cl->rx, sizeof m);
            memmove(cl->rx, cl->rx + sizeof m, cl->rx_len - sizeof m);
            cl->rx_len -= sizeof m;
            if (shim_msg_valid(&m) != 0)
                fail("the server sent an invalid message");
            if (m.type != SHIM_MSG_HELLO_OK && m.type != SHIM_MSG_GRANT && m.type != SHIM_MSG_REFUSE &&
                m.type != SHIM_MSG_PARK && m.type != SHIM_MSG_RESTORE)
                fail("the server sent a type it never sends");
            if (m.type == SHIM_MSG_GRANT || m.type == SHIM_MSG_REFUSE) {
                bool known = false;
                for (unsigned i = 0; i < cl->n_asked; i++)
                    known = known || cl->asked[i] == m.seq;
                if (!known)
                    fail("an answer with a seq nobody asked");
            }
        }
    }
}

/* Note the ASK seqs in the bytes a client is about to send (whole frames only). */
static void note_asks(client_t *cl, size_t from, size_t to)
{
    for (size_t o = from - from % 64; o + 64 <= to; o += 64) {
        if (o < from && o + 64 > to)
            continue;
        shim_msg_t m;
        memcpy(&m, cl->data + o, sizeof m);
        if (m.type == SHIM_MSG_ASK && cl->n_asked < 256)
            cl->asked[cl->n_asked++] = m.seq;
    }
}

static char g_path[108];
static uv_loop_t g_loop;
static bool g_init;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 64 * 1024)
        return 0;
    if (!g_init) {
        uv_loop_init(&g_loop);
        snprintf(g_path, sizeof g_path, "/tmp/vramd-fuzz-grant-%d.sock", (int)getpid());
        g_init = true;
    }
    memset(&S, 0, sizeof S);
    unsigned n_clients = (data[0] & 3) + 1 > CLIENTS_MAX ? CLIENTS_MAX : (data[0] & 3) + 1;
    S.later = (data[0] >> 2) & 1;
    bool early_close = (data[0] >> 3) & 1;
    size_t piece = data[1] ? data[1] : 64;
    const uint8_t *body = data + 2;
    size_t blen = size - 2;
    static const grant_socket_handlers_t h = {
        .hello = on_hello, .ask = on_ask, .control = on_control, .closed = on_closed};
    char err[256] = "";
    const grant_socket_limits_t lim = {.max_conns = 8, .per_peer = (data[0] >> 4) & 1 ? 2 : 8,
                                       .hello_timeout_ms = (data[0] >> 5) & 1 ? 1 : 60000};
    grant_socket_t *s = grant_socket_listen(&g_loop, g_path, &lim, &h, NULL, err, sizeof err);
    if (!s)
        fail(err);
    client_t cl[CLIENTS_MAX];
    memset(cl, 0, sizeof cl);
    size_t share = blen / n_clients;
    for (unsigned i = 0; i < n_clients; i++) {
        cl[i].data = body + i * share;
        cl[i].len = i + 1 == n_clients ? blen - i * share : share;
        cl[i].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, g_path, strlen(g_path) + 1);
        if (connect(cl[i].fd, (struct sockaddr *)&sa, sizeof sa) != 0)
            fail("connect");
        fcntl(cl[i].fd, F_SETFL, O_NONBLOCK);
    }
    for (int turn = 0; turn < TURNS_MAX; turn++) {
        bool more = false;
        for (unsigned i = 0; i < n_clients; i++) {
            client_t *c = &cl[i];
            if (c->closed)
                continue;
            client_read(c);
            if (c->off < c->len) {
                size_t n = c->len - c->off < piece ? c->len - c->off : piece;
                if (early_close && i + 1 == n_clients && c->off + n >= c->len) {
                    close(c->fd);
                    c->closed = true;
                    continue;
                }
                note_asks(c, c->off, c->off + n);
                ssize_t w = send(c->fd, c->data + c->off, n, MSG_NOSIGNAL);
                if (w > 0)
                    c->off += (size_t)w;
                else if (w < 0 && errno != EAGAIN) /* the server closed it */
                    c->off = c->len;
                more = true;
            }
        }
        uv_run(&g_loop, UV_RUN_NOWAIT);
        grant_socket_stats_t now;
        grant_socket_stats(s, &now);
        if (now.open > lim.per_peer)
            fail("more connections open than the per-process bound");
        send_commands();
        for (unsigned k = 0; S.later && k < S.n_pend; k++)
            answer(S.pend[k].c, S.pend[k].seq, S.pend[k].grant);
        S.n_pend = 0;
        if (!more && turn > 8)
            break;
    }
    uv_run(&g_loop, UV_RUN_NOWAIT);
    for (unsigned i = 0; i < n_clients; i++) {
        if (!cl[i].closed) {
            client_read(&cl[i]);
            close(cl[i].fd);
        }
    }
    grant_socket_stats_t st;
    grant_socket_stats(s, &st);
    grant_socket_close(s);
    for (int turn = 0; turn < TURNS_MAX && uv_loop_alive(&g_loop); turn++)
        uv_run(&g_loop, UV_RUN_NOWAIT);
    if (uv_loop_alive(&g_loop))
        fail("the loop did not end after grant_socket_close");
    if (S.closed != st.accepted)
        fail("closed() did not run once per accepted connection");
    if (st.accepted + st.refused_full == n_clients && st.refused_peer != (n_clients > lim.per_peer ? n_clients - lim.per_peer : 0))
        fail("the clients past the per-process bound were not refused");
    return 0;
}
