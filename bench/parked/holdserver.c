/*
 * holdserver: the "slow test worker" of the parked benchmark. A tiny single-threaded HTTP/1.1
 * upstream (epoll) that answers every request with 200 "ok\n" (Content-Length, keep-alive),
 * except that while the gate is CLOSED it holds each request (no answer) until the gate opens.
 *
 *   holdserver PORT [--closed]      (PORT 0: pick a free one; the chosen port is printed
 *                                    on stdout as "port N")
 *   SIGUSR1: open the gate: answer every held request now, answer new ones at once.
 *   SIGUSR2: close the gate again (requests arriving afterwards are held).
 *   SIGHUP: print "served N accepted A held M" on stdout (counts so far) and go on.
 *   SIGTERM/SIGINT: print the same line and exit 0.
 *
 * Requests whose path starts with /health are always answered at once, so a proxy's health
 * checks never see the slot as dead. Pipelined requests on one connection are answered in
 * order: a held request also holds the ones behind it on the same connection.
 *
 * Invariants and bounds: at most MAX_CONNS connections (more are closed at accept); each
 * connection buffers at most IN_MAX bytes of request data (a request head larger than that
 * closes the connection). Request bodies announced by Content-Length are skipped.
 * This is benchmark tooling only: it trusts its loopback peers and does no timeouts.
 */
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
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 65536
#define IN_MAX 65536

static const char OK_RESPONSE[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n";

typedef struct conn {
    int fd;
    size_t in_len;
    size_t body_left; /* bytes of the current request body still to skip */
    bool held;        /* the request at the head of in_buf waits for the gate */
    char in_buf[IN_MAX];
} conn_t;

static conn_t *conns[MAX_CONNS]; /* indexed by fd */
static bool gate_open = true;
static uint64_t served_total;
static uint64_t accepted_total;

static void conn_close(int epfd, conn_t *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c);
}

/* Writes the whole fixed response (small: loopback socket buffers take it at once).
 * Returns 0, or -1 when the peer is gone. */
static int send_ok(conn_t *c)
{
    size_t off = 0, len = sizeof OK_RESPONSE - 1;
    while (off < len) {
        ssize_t n = send(c->fd, OK_RESPONSE + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            return -1; /* EAGAIN on a 72-byte answer means a stuck peer: give up on it */
        }
    }
    served_total++;
    return 0;
}

static size_t content_length_of(const char *head, size_t head_len)
{
    const char *p = head, *end = head + head_len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        if ((size_t)(eol - p) > 15 && strncasecmp(p, "content-length:", 15) == 0)
            return (size_t)strtoull(p + 15, NULL, 10);
        p = eol + 1;
    }
    return 0;
}

/* Answers every complete request in the buffer, in order, unless the gate holds one.
 * Returns 0, or -1 when the connection must be closed. */
static int conn_process(conn_t *c)
{
    for (;;) {
        if (c->body_left > 0) {
            size_t skip = c->body_left < c->in_len ? c->body_left : c->in_len;
            memmove(c->in_buf, c->in_buf + skip, c->in_len - skip);
            c->in_len -= skip;
            c->body_left -= skip;
            if (c->body_left > 0) return 0;
        }
        char *end = memmem(c->in_buf, c->in_len, "\r\n\r\n", 4);
        if (!end) return c->in_len >= IN_MAX ? -1 : 0;
        size_t head_len = (size_t)(end - c->in_buf) + 4;
        const char *sp = memchr(c->in_buf, ' ', head_len);
        bool is_health = sp && head_len - (size_t)(sp - c->in_buf) > 8 && memcmp(sp + 1, "/health", 7) == 0;
        if (!gate_open && !is_health) {
            c->held = true;
            return 0;
        }
        c->held = false;
        size_t body = content_length_of(c->in_buf, head_len);
        memmove(c->in_buf, c->in_buf + head_len, c->in_len - head_len);
        c->in_len -= head_len;
        c->body_left = body;
        if (send_ok(c) < 0) return -1;
    }
}

static void on_readable(int epfd, conn_t *c)
{
    for (;;) {
        if (c->in_len >= IN_MAX) {
            conn_close(epfd, c);
            return;
        }
        ssize_t n = recv(c->fd, c->in_buf + c->in_len, IN_MAX - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        conn_close(epfd, c); /* EOF or error */
        return;
    }
    if (!c->held && conn_process(c) < 0) conn_close(epfd, c);
}

static void release_all(int epfd)
{
    for (int fd = 0; fd < MAX_CONNS; fd++) {
        conn_t *c = conns[fd];
        if (c && c->held) {
            c->held = false;
            if (conn_process(c) < 0) conn_close(epfd, c);
        }
    }
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4096) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: holdserver PORT [--closed]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    if (argc > 2 && strcmp(argv[2], "--closed") == 0) gate_open = false;

    int lfd = listen_on(port);
    if (lfd < 0) {
        perror("holdserver: listen");
        return 1;
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    getsockname(lfd, (struct sockaddr *)&bound, &blen);
    printf("port %d\n", ntohs(bound.sin_port));
    fflush(stdout);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);

    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.fd = sfd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);

    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epfd, events, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                for (;;) {
                    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (cfd < 0) break;
                    if (cfd >= MAX_CONNS) {
                        close(cfd);
                        continue;
                    }
                    int one = 1;
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *c = calloc(1, sizeof *c);
                    if (!c) {
                        close(cfd);
                        continue;
                    }
                    c->fd = cfd;
                    conns[cfd] = c;
                    accepted_total++;
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = cfd};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &cev);
                }
            } else if (fd == sfd) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    if (si.ssi_signo == SIGUSR1) {
                        gate_open = true;
                        release_all(epfd);
                    } else if (si.ssi_signo == SIGUSR2) {
                        gate_open = false;
                    } else {
                        size_t held = 0;
                        for (int k = 0; k < MAX_CONNS; k++)
                            if (conns[k] && conns[k]->held) held++;
                        printf("served %llu accepted %llu held %zu\n", (unsigned long long)served_total,
                               (unsigned long long)accepted_total, held);
                        fflush(stdout);
                        if (si.ssi_signo != SIGHUP) return 0;
                    }
                }
            } else if (conns[fd]) {
                on_readable(epfd, conns[fd]);
            }
        }
    }
}
