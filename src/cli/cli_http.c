/* cli_http: vramctl's blocking HTTP/1.1 client. See cli_http.h. */
#include "cli/cli_http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/units.h"
#include "http/http1.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int cli_url_parse(const char *url, cli_url_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0) {
        p += 7;
    } else if (strncmp(p, "https://", 8) == 0) {
        snprintf(err, errlen, "%s: https is not supported (vramd speaks plain HTTP; use http://)", url);
        return -1;
    } else if (strstr(p, "://")) {
        snprintf(err, errlen, "%s: only http:// URLs are supported", url);
        return -1;
    }
    const char *host_end;
    const char *after;
    if (*p == '[') { /* [IPv6]:port */
        host_end = strchr(p, ']');
        if (!host_end) {
            snprintf(err, errlen, "%s: missing ']' after an IPv6 address", url);
            return -1;
        }
        p++;
        after = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        after = host_end;
    }
    size_t hl = (size_t)(host_end - p);
    if (hl == 0 || hl >= sizeof out->host) {
        snprintf(err, errlen, "%s: expected a URL like http://127.0.0.1:8800", url);
        return -1;
    }
    memcpy(out->host, p, hl);
    strcpy(out->port, "8800");
    if (*after == ':') {
        after++;
        size_t pl = strspn(after, "0123456789");
        long port = pl ? strtol(after, NULL, 10) : 0;
        if (pl == 0 || pl > 5 || port < 1 || port > 65535 || (after[pl] != '\0' && after[pl] != '/')) {
            snprintf(err, errlen, "%s: bad port (expected 1-65535)", url);
            return -1;
        }
        snprintf(out->port, sizeof out->port, "%ld", port);
        after += pl;
    }
    if (*after != '\0' && *after != '/') {
        snprintf(err, errlen, "%s: expected a URL like http://127.0.0.1:8800", url);
        return -1;
    }
    size_t prefix_len = strlen(after);
    while (prefix_len > 0 && after[prefix_len - 1] == '/')
        prefix_len--;
    if (prefix_len >= sizeof out->prefix) {
        snprintf(err, errlen, "%s: path too long", url);
        return -1;
    }
    for (size_t i = 0; i < prefix_len; i++) {
        unsigned char ch = (unsigned char)after[i];
        if (ch <= ' ' || ch >= 0x7f || ch == '?' || ch == '#') {
            snprintf(err, errlen, "%s: the path may hold visible ASCII only, without '?' or '#'", url);
            return -1;
        }
    }
    memcpy(out->prefix, after, prefix_len);
    return 0;
}

/* Wait until fd is ready for events or the deadline passes. 0 ready, -1 with err. */
static int wait_ready(int fd, short events, uint64_t deadline, uint64_t timeout_ms, const char *doing,
                      char *err, size_t errlen)
{
    for (;;) {
        if (g_cli_stop) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
        uint64_t now = now_ms();
        if (now >= deadline) {
            char d[32];
            units_format_duration(timeout_ms, d, sizeof d);
            snprintf(err, errlen, "no answer within %s (%s; raise --timeout)", d, doing);
            return -1;
        }
        uint64_t left = deadline - now;
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return -1;
        }
    }
}

static void lower_first(char *s)
{
    if (s[0] >= 'A' && s[0] <= 'Z')
        s[0] = (char)(s[0] - 'A' + 'a');
}

static int connect_to(const cli_url_t *url, uint64_t deadline, uint64_t timeout_ms, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(url->host, url->port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", url->host, gai_strerror(rc));
        lower_first(err);
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            if (wait_ready(fd, POLLOUT, deadline, timeout_ms, "connecting", err, errlen) == 0) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                    break;
                snprintf(err, errlen, "%s", strerror(soerr ? soerr : errno));
            }
        } else {
            snprintf(err, errlen, "%s", strerror(errno));
        }
        lower_first(err);
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *data, size_t len, uint64_t deadline, uint64_t timeout_ms, char *err,
                    size_t errlen)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "sending the request: %s", strerror(errno));
            return -1;
        }
        if (wait_ready(fd, POLLOUT, deadline, timeout_ms, "sending the request", err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* Read what is available: >0 bytes, 0 at EOF, -1 with err. */
static ssize_t recv_some(int fd, char *into, size_t cap, uint64_t deadline, uint64_t timeout_ms, char *err,
                         size_t errlen)
{
    for (;;) {
        ssize_t n = recv(fd, into, cap, 0);
        if (n >= 0)
            return n;
        if (errno == ECONNRESET)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "reading the answer: %s", strerror(errno));
            return -1;
        }
        if (wait_ready(fd, POLLIN, deadline, timeout_ms, "waiting for the answer", err, errlen) != 0)
            return -1;
    }
}

/* Where body bytes go: memory (bounded) or a sink. */
typedef struct body_out {
    buf_t mem;
    FILE *sink;
    bool overflow;
    bool write_failed;
} body_out_t;

static void body_deliver(void *ctx, const char *data, size_t len)
{
    body_out_t *b = ctx;
    if (len == 0 || b->overflow || b->write_failed)
        return;
    if (b->sink) {
        if (fwrite(data, 1, len, b->sink) != len)
            b->write_failed = true;
    } else if (buf_append(&b->mem, data, len) != 0) {
        b->overflow = true;
    }
}

static int build_head(const cli_url_t *url, const cli_http_request_t *req, buf_t *out)
{
    bool v6 = strchr(url->host, ':') != NULL;
    int rc = buf_printf(out, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: vramctl\r\n"
                             "Accept: application/json, */*\r\nConnection: close\r\n",
                        req->method, url->prefix, req->path, v6 ? "[" : "", url->host, v6 ? "]" : "", url->port);
    if (req->token && req->token[0])
        rc |= buf_printf(out, "Authorization: Bearer %s\r\n", req->token);
    if (req->body) {
        if (req->content_type)
            rc |= buf_printf(out, "Content-Type: %s\r\n", req->content_type);
        rc |= buf_printf(out, "Content-Length: %zu\r\n", req->body_len);
    } else if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
        rc |= buf_append_str(out, "Content-Length: 0\r\n");
    }
    rc |= buf_append_str(out, "\r\n");
    return rc ? -1 : 0;
}

static void copy_content_type(const char *head, const http1_msg_t *msg, cli_response_t *resp)
{
    const http1_header_t *h = http1_find_header(head, msg, "Content-Type");
    if (!h)
        return;
    size_t n = h->value.len < sizeof resp->content_type - 1 ? h->value.len : sizeof resp->content_type - 1;
    memcpy(resp->content_type, head + h->value.off, n);
    resp->content_type[n] = '\0';
}

/* Reads the body that follows a parsed head; `pending` holds bytes already received. */
static int read_body(int fd, const http1_msg_t *msg, const char *pending, size_t pending_len, body_out_t *out,
                     uint64_t deadline, uint64_t timeout_ms, char *err, size_t errlen)
{
    static char g_chunk[65536];
    http1_chunked_t dec;
    http1_chunked_init(&dec, 16384);
    uint64_t remaining = msg->content_length;
    const char *data = pending;
    size_t len = pending_len;
    if (msg->body == HTTP1_BODY_NONE)
        return 0;
    for (;;) {
        if (msg->body == HTTP1_BODY_LENGTH) {
            size_t take = len < remaining ? len : (size_t)remaining;
            body_deliver(out, data, take);
            remaining -= take;
            if (remaining == 0)
                return 0;
        } else if (msg->body == HTTP1_BODY_CHUNKED) {
            size_t consumed = 0;
            http1_error_t perr;
            int rc = http1_chunked_feed(&dec, data, len, &consumed, body_deliver, out, &perr);
            if (rc == HTTP1_OK)
                return 0;
            if (rc == HTTP1_ERROR) {
                snprintf(err, errlen, "malformed chunked body: %s", perr.what);
                return -1;
            }
        } else {
            body_deliver(out, data, len);
        }
        if (out->overflow) {
            snprintf(err, errlen, "the answer is larger than %u MiB", CLI_HTTP_MAX_BODY >> 20);
            return -1;
        }
        if (out->write_failed) {
            snprintf(err, errlen, "writing the body: %s", strerror(errno));
            return -1;
        }
        ssize_t n = recv_some(fd, g_chunk, sizeof g_chunk, deadline, timeout_ms, err, errlen);
        if (n < 0)
            return -1;
        if (n == 0) {
            if (msg->body == HTTP1_BODY_UNTIL_CLOSE)
                return 0;
            snprintf(err, errlen, "the connection closed in the middle of the answer");
            return -1;
        }
        data = g_chunk;
        len = (size_t)n;
    }
}

int cli_http_exchange(const cli_url_t *url, const cli_http_request_t *req, FILE *sink, cli_response_t *resp,
                      bool *connected, char *err, size_t errlen)
{
    memset(resp, 0, sizeof *resp);
    *connected = false;
    uint64_t deadline = now_ms() + req->timeout_ms;
    int fd = connect_to(url, deadline, req->timeout_ms, err, errlen);
    if (fd < 0)
        return -1;
    *connected = true;
    int result = -1;
    buf_t head;
    buf_init(&head, CLI_HTTP_MAX_HEAD + 4096);
    body_out_t out = {.sink = NULL};
    buf_init(&out.mem, CLI_HTTP_MAX_BODY);
    if (build_head(url, req, &head) != 0) {
        snprintf(err, errlen, "request head too large");
        goto out;
    }
    if (send_all(fd, head.data, head.len, deadline, req->timeout_ms, err, errlen) != 0)
        goto out;
    if (req->body && send_all(fd, req->body, req->body_len, deadline, req->timeout_ms, err, errlen) != 0)
        goto out;

    buf_reset(&head);
    http1_limits_t limits = {.max_header_bytes = CLI_HTTP_MAX_HEAD, .max_headers = CLI_HTTP_MAX_HEADERS};
    http1_header_t hdrs[CLI_HTTP_MAX_HEADERS];
    http1_msg_t msg;
    size_t scan = 0;
    char chunk[16384];
    for (;;) {
        http1_error_t perr;
        int rc = http1_parse_response(head.data ? head.data : "", head.len, &limits,
                                      strcmp(req->method, "HEAD") == 0, &msg, hdrs, &scan, &perr);
        if (rc == HTTP1_ERROR) {
            snprintf(err, errlen, "malformed answer from vramd: %s", perr.what);
            goto out;
        }
        if (rc == HTTP1_OK && msg.status >= 100 && msg.status < 200 && msg.status != 101) {
            buf_consume(&head, msg.head_len); /* interim response: the real one follows */
            scan = 0;
            continue;
        }
        if (rc == HTTP1_OK)
            break;
        ssize_t n = recv_some(fd, chunk, sizeof chunk, deadline, req->timeout_ms, err, errlen);
        if (n < 0)
            goto out;
        if (n == 0) {
            snprintf(err, errlen, "the connection closed before an answer (is %s:%s vramd?)", url->host, url->port);
            goto out;
        }
        if (buf_append(&head, chunk, (size_t)n) != 0) {
            snprintf(err, errlen, "answer head too large");
            goto out;
        }
    }
    resp->status = msg.status;
    copy_content_type(head.data, &msg, resp);
    if (sink && msg.status >= 200 && msg.status < 300)
        out.sink = sink;
    if (read_body(fd, &msg, head.data + msg.head_len, head.len - msg.head_len, &out, deadline, req->timeout_ms,
                  err, errlen) != 0)
        goto out;
    if (!out.sink) {
        if (buf_append(&out.mem, "", 1) != 0) {
            snprintf(err, errlen, "the answer is larger than %u MiB", CLI_HTTP_MAX_BODY >> 20);
            goto out;
        }
        resp->body = buf_steal(&out.mem, &resp->body_len);
        resp->body_len--; /* the NUL */
    }
    result = 0;
out:
    buf_free(&head);
    buf_free(&out.mem);
    close(fd);
    return result;
}
