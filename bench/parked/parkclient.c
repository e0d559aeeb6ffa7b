/*
 * parkclient: the client side of the parked benchmark. Opens N keep-alive connections to
 * HOST:PORT, sends one "GET PATH" on each, and every time a response completes sends the
 * next request on the same connection (closed loop: N requests are always outstanding, so a
 * proxy with one upstream slot keeps N-1 of them queued).
 *
 *   parkclient HOST PORT PATH N SECONDS [CONNECT_PARALLEL]
 *
 * Output on stdout, one line every 250 ms and one at the end:
 *   stat MONO_NS CONNECTED COMPLETED NON200 CLOSED FAILED_CONNECTS
 * then "statuses CODE:COUNT ..." and, if any, "first_non200 HEAD" (the first non-200
 * response head, CR/LF shown as spaces).
 * (MONO_NS: CLOCK_MONOTONIC in ns; the other fields are cumulative counts). The driver takes
 * rates from the difference of two lines. Exits after SECONDS or on SIGTERM/SIGINT (printing a
 * final stat line), closing every connection.
 *
 * Responses are parsed just enough to find their end: status line, Content-Length or
 * chunked transfer coding (trailers are not expected). A connection the server closes is
 * counted in CLOSED and not reopened. At most CONNECT_PARALLEL (default 256) connects are
 * in progress at once, so the server's accept backlog is not flooded.
 * Bounds: N <= 60000; a response head over IN_MAX bytes closes the connection as an error.
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 60000
#define IN_MAX 16384

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED };
enum conn_state { ST_CONNECTING, ST_WAITING, ST_DEAD };

typedef struct client {
    int fd;
    enum conn_state state;
    enum body_mode body;
    bool in_head;         /* still reading the response head */
    bool chunk_in_data;   /* chunked: inside a chunk's data (or its CRLF) */
    bool chunk_last;      /* chunked: the 0-size chunk was seen */
    int status;
    uint64_t body_left;   /* LENGTH: bytes left; CHUNKED: data + CRLF bytes left */
    size_t in_len;
    char in_buf[IN_MAX];
} client_t;

static client_t *clients;
static int n_clients;
static char request[1024];
static size_t request_len;
static struct sockaddr_in target;
static uint64_t completed, non200, closed_by_peer, failed_connects, connected;
static uint64_t status_counts[600];
static char first_non200[512]; /* head of the first non-200 response, for the report */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void print_stat(void)
{
    printf("stat %llu %llu %llu %llu %llu %llu\n", (unsigned long long)mono_ns(),
           (unsigned long long)connected, (unsigned long long)completed,
           (unsigned long long)non200, (unsigned long long)closed_by_peer,
           (unsigned long long)failed_connects);
    fflush(stdout);
}

static void client_kill(int epfd, client_t *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->state = ST_DEAD;
}

/* Sends one request. Returns 0, or -1 when the connection is unusable. */
static int send_request(client_t *c)
{
    size_t off = 0;
    while (off < request_len) {
        ssize_t n = send(c->fd, request + off, request_len - off, MSG_NOSIGNAL);
        if (n > 0) off += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else return -1;
    }
    c->in_head = true;
    c->body = BODY_NONE;
    c->chunk_in_data = false;
    c->chunk_last = false;
    c->status = 0;
    c->body_left = 0;
    return 0;
}

static int start_connect(int epfd, client_t *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int r = connect(c->fd, (struct sockaddr *)&target, sizeof target);
    if (r < 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->state = ST_CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP,
                             .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    return 0;
}

static void parse_head_fields(client_t *c, const char *head, size_t len)
{
    c->status = (len > 12) ? atoi(head + 9) : 0;
    if (c->status != 200 && c->status != 100 && first_non200[0] == '\0') {
        size_t n = len < sizeof first_non200 - 1 ? len : sizeof first_non200 - 1;
        for (size_t i = 0; i < n; i++)
            first_non200[i] = (head[i] == '\r' || head[i] == '\n') ? ' ' : head[i];
        first_non200[n] = '\0';
    }
    const char *p = head, *end = head + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        size_t l = (size_t)(eol - p);
        if (l > 15 && strncasecmp(p, "content-length:", 15) == 0) {
            c->body = BODY_LENGTH;
            c->body_left = strtoull(p + 15, NULL, 10);
        } else if (l > 18 && strncasecmp(p, "transfer-encoding:", 18) == 0 &&
                   memmem(p, l, "chunked", 7)) {
            c->body = BODY_CHUNKED;
            c->body_left = 0;
        }
        p = eol + 1;
    }
}

static void consume(client_t *c, size_t n)
{
    memmove(c->in_buf, c->in_buf + n, c->in_len - n);
    c->in_len -= n;
}

/* Consumes buffered response bytes. Returns 1 when a response completed, 0 when more bytes
 * are needed, -1 on a protocol error. */
static int parse_response(client_t *c)
{
    if (c->in_head) {
        char *end = memmem(c->in_buf, c->in_len, "\r\n\r\n", 4);
        if (!end) return c->in_len >= IN_MAX ? -1 : 0;
        size_t head_len = (size_t)(end - c->in_buf) + 4;
        parse_head_fields(c, c->in_buf, head_len);
        consume(c, head_len);
        c->in_head = false;
        if (c->status == 100) { /* interim response: wait for the real one */
            c->in_head = true;
            return parse_response(c);
        }
    }
    if (c->body == BODY_NONE) return 1;
    if (c->body == BODY_LENGTH) {
        size_t take = c->body_left < c->in_len ? (size_t)c->body_left : c->in_len;
        consume(c, take);
        c->body_left -= take;
        return c->body_left == 0 ? 1 : 0;
    }
    for (;;) { /* chunked */
        if (c->chunk_in_data) {
            size_t take = c->body_left < c->in_len ? (size_t)c->body_left : c->in_len;
            consume(c, take);
            c->body_left -= take;
            if (c->body_left > 0) return 0;
            c->chunk_in_data = false;
            if (c->chunk_last) return 1;
            continue;
        }
        char *eol = memmem(c->in_buf, c->in_len, "\r\n", 2);
        if (!eol) return c->in_len >= IN_MAX ? -1 : 0;
        uint64_t size = strtoull(c->in_buf, NULL, 16);
        consume(c, (size_t)(eol - c->in_buf) + 2);
        c->chunk_in_data = true;
        c->body_left = size + 2; /* data + CRLF (for the last chunk: the final CRLF) */
        if (size == 0) c->chunk_last = true;
    }
}

static void count_response(const client_t *c)
{
    completed++;
    if (c->status != 200) non200++;
    if (c->status >= 0 && c->status < 600) status_counts[c->status]++;
}

static void on_event(int epfd, client_t *c, uint32_t events, int *connecting)
{
    if (c->state == ST_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        (*connecting)--;
        if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
            failed_connects++;
            client_kill(epfd, c);
            return;
        }
        connected++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->state = ST_WAITING;
        if (send_request(c) < 0) {
            closed_by_peer++;
            client_kill(epfd, c);
        }
        return;
    }
    if (c->state != ST_WAITING) return;
    for (;;) {
        if (c->in_len >= IN_MAX) {
            closed_by_peer++;
            client_kill(epfd, c);
            return;
        }
        ssize_t n = recv(c->fd, c->in_buf + c->in_len, IN_MAX - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            if ((size_t)n < IN_MAX - c->in_len + (size_t)n) break; /* short read: drained */
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        /* EOF or error: take what is buffered first */
        int r;
        while (c->in_len > 0 && (r = parse_response(c)) == 1) {
            count_response(c);
        }
        closed_by_peer++;
        client_kill(epfd, c);
        return;
    }
    for (;;) {
        int r = parse_response(c);
        if (r < 0) {
            closed_by_peer++;
            client_kill(epfd, c);
            return;
        }
        if (r == 0) return;
        count_response(c);
        if (send_request(c) < 0) {
            closed_by_peer++;
            client_kill(epfd, c);
            return;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: parkclient HOST PORT PATH N SECONDS [CONNECT_PARALLEL]\n");
        return 2;
    }
    target.sin_family = AF_INET;
    target.sin_port = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &target.sin_addr) != 1) {
        fprintf(stderr, "parkclient: bad host %s\n", argv[1]);
        return 2;
    }
    n_clients = atoi(argv[4]);
    double seconds = atof(argv[5]);
    int parallel = argc > 6 ? atoi(argv[6]) : 256;
    if (n_clients < 1 || n_clients > MAX_CLIENTS || parallel < 1) {
        fprintf(stderr, "parkclient: N must be 1..%d\n", MAX_CLIENTS);
        return 2;
    }
    int rl = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %s:%s\r\n\r\n",
                      argv[3], argv[1], argv[2]);
    if (rl <= 0 || (size_t)rl >= sizeof request) return 2;
    request_len = (size_t)rl;

    clients = calloc((size_t)n_clients, sizeof *clients);
    if (!clients) {
        perror("parkclient: calloc");
        return 1;
    }
    for (int i = 0; i < n_clients; i++) clients[i].fd = -1;

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &sev);

    uint64_t start = mono_ns(), end = start + (uint64_t)(seconds * 1e9);
    uint64_t next_stat = start;
    int next_to_connect = 0, connecting = 0;
    struct epoll_event events[512];
    bool stop = false;
    while (!stop) {
        while (next_to_connect < n_clients && connecting < parallel) {
            client_t *c = &clients[next_to_connect++];
            if (start_connect(epfd, c) < 0) {
                failed_connects++;
                c->state = ST_DEAD;
            } else {
                connecting++;
            }
        }
        uint64_t now = mono_ns();
        if (now >= next_stat) {
            print_stat();
            next_stat += 250000000ull;
        }
        if (now >= end) break;
        uint64_t wait_ns = (next_stat < end ? next_stat : end) - now;
        int n = epoll_wait(epfd, events, 512, (int)(wait_ns / 1000000ull) + 1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            client_t *c = events[i].data.ptr;
            if (!c) {
                stop = true;
                continue;
            }
            on_event(epfd, c, events[i].events, &connecting);
        }
    }
    print_stat();
    printf("statuses");
    for (int i = 0; i < 600; i++)
        if (status_counts[i]) printf(" %d:%llu", i, (unsigned long long)status_counts[i]);
    printf("\n");
    if (first_non200[0]) printf("first_non200 %s\n", first_non200);
    fflush(stdout);
    for (int i = 0; i < n_clients; i++)
        if (clients[i].fd >= 0) close(clients[i].fd);
    return 0;
}
