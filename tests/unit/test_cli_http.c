/*
 * test_cli_http: vramctl's HTTP client (src/cli/cli_http.c, included here since vramctl's
 * sources are not in libvramd.a). URL parsing (forms accepted, https and bad ports refused);
 * and whole exchanges against a one-shot server in a child process that answers with canned
 * bytes: Content-Length, chunked and until-close bodies, a 100-continue before the answer,
 * a body streamed to a FILE*, a request head as vramctl sends it (token, body), a malformed
 * answer, a body cut short, a server that never answers (timeout), and a refused connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_http.c"

volatile sig_atomic_t g_cli_stop = 0;

static void test_url_forms(void **state)
{
    (void)state;
    cli_url_t u;
    char err[256];
    assert_int_equal(cli_url_parse("http://127.0.0.1:8800", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_string_equal(u.port, "8800");
    assert_string_equal(u.prefix, "");
    assert_int_equal(cli_url_parse("http://gpu-host-3", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "gpu-host-3");
    assert_string_equal(u.port, "8800");
    assert_int_equal(cli_url_parse("localhost:9000/", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "localhost");
    assert_string_equal(u.port, "9000");
    assert_string_equal(u.prefix, "");
    assert_int_equal(cli_url_parse("http://[::1]:8801/vramd/", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.port, "8801");
    assert_string_equal(u.prefix, "/vramd");
}

static void test_url_refused(void **state)
{
    (void)state;
    cli_url_t u;
    char err[256];
    static const char *const bad[] = {"https://127.0.0.1:8800", "ftp://x", "", "http://", "http://h:0",
                                      "http://h:65536", "http://h:80x", "http://h:", "http://[::1",
                                      "http://h/a b", "http://h/a?b", "http://h:8800junk"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cli_url_parse(bad[i], &u, err, sizeof err) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
    assert_int_equal(cli_url_parse("https://h", &u, err, sizeof err), -1);
    assert_non_null(strstr(err, "https is not supported"));
}

/* --- a one-shot server ------------------------------------------------------------------ */

typedef struct server {
    pid_t pid;
    int port;
    int seen_fd; /* read end: the request head the server received */
} server_t;

/* Child: accept one connection, read the request head (and a body of Content-Length), echo
 * it into a pipe, write `reply` (unless NULL: then hold the connection open), close. */
static void server_start(server_t *s, const char *reply, size_t reply_len)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(ls, 4), 0);
    socklen_t al = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    int p[2];
    assert_int_equal(pipe(p), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        close(p[0]);
        int c = accept(ls, NULL, NULL);
        char buf[65536];
        size_t got = 0;
        while (got < sizeof buf - 1) {
            ssize_t n = read(c, buf + got, sizeof buf - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            buf[got] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (!end)
                continue;
            const char *cl = strstr(buf, "Content-Length: ");
            size_t want = (size_t)(end + 4 - buf) + (cl ? (size_t)strtoul(cl + 16, NULL, 10) : 0);
            if (got >= want)
                break;
        }
        if (write(p[1], buf, got) < 0)
            _exit(1);
        close(p[1]);
        if (reply) {
            if (write(c, reply, reply_len) < 0)
                _exit(1);
        } else {
            sleep(30); /* never answer */
        }
        close(c);
        _exit(0);
    }
    close(ls);
    close(p[1]);
    s->seen_fd = p[0];
}

/* The request head the server saw (static buffer). */
static const char *server_seen(server_t *s)
{
    static char buf[65536];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(s->seen_fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    return buf;
}

static void server_end(server_t *s)
{
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    close(s->seen_fd);
}

static int exchange(server_t *s, const cli_http_request_t *req, FILE *sink, cli_response_t *resp, bool *connected,
                    char *err, size_t errlen)
{
    cli_url_t u;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    assert_int_equal(cli_url_parse(url, &u, err, errlen), 0);
    return cli_http_exchange(&u, req, sink, resp, connected, err, errlen);
}

#define REPLY(s) s, sizeof(s) - 1

static void test_content_length_and_request_head(void **state)
{
    (void)state;
    server_t s;
    server_start(&s, REPLY("HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
                           "{\"id\":\"abc\"}xyzw"));
    cli_http_request_t req = {.method = "POST", .path = "/v1/jobs", .token = "s3cret",
                              .content_type = "application/json", .body = "{\"model\":\"m\"}", .body_len = 13,
                              .timeout_ms = 5000};
    cli_response_t r;
    bool connected;
    char err[256];
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), 0);
    assert_true(connected);
    assert_int_equal(r.status, 202);
    assert_string_equal(r.content_type, "application/json");
    assert_int_equal(r.body_len, 16);
    assert_string_equal(r.body, "{\"id\":\"abc\"}xyzw");
    const char *seen = server_seen(&s);
    assert_non_null(strstr(seen, "POST /v1/jobs HTTP/1.1\r\n"));
    assert_non_null(strstr(seen, "\r\nAuthorization: Bearer s3cret\r\n"));
    assert_non_null(strstr(seen, "\r\nContent-Length: 13\r\n"));
    assert_non_null(strstr(seen, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(seen, "\r\n\r\n{\"model\":\"m\"}"));
    free(r.body);
    server_end(&s);
}

static void test_chunked_after_100_continue(void **state)
{
    (void)state;
    server_t s;
    server_start(&s, REPLY("HTTP/1.1 100 Continue\r\n\r\n"
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"));
    cli_http_request_t req = {.method = "GET", .path = "/x", .timeout_ms = 5000};
    cli_response_t r;
    bool connected;
    char err[256];
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello, world");
    free(r.body);
    server_end(&s);
}

static void test_until_close_streamed_to_a_file(void **state)
{
    (void)state;
    server_t s;
    server_start(&s, REPLY("HTTP/1.0 200 OK\r\nContent-Type: model/gltf-binary\r\n\r\nglTF\x02\x00\x00\x00 bytes"));
    cli_http_request_t req = {.method = "GET", .path = "/r", .timeout_ms = 5000};
    cli_response_t r;
    bool connected;
    char err[256];
    char *mem = NULL;
    size_t mem_len = 0;
    FILE *sink = open_memstream(&mem, &mem_len);
    assert_int_equal(exchange(&s, &req, sink, &r, &connected, err, sizeof err), 0);
    fclose(sink);
    assert_int_equal(r.status, 200);
    assert_null(r.body); /* went to the sink */
    assert_int_equal(mem_len, 14);
    assert_memory_equal(mem, "glTF\x02\x00\x00\x00 bytes", 14);
    free(mem);
    server_end(&s);
}

static void test_error_answer_is_kept_in_memory_even_with_a_sink(void **state)
{
    (void)state;
    server_t s;
    server_start(&s, REPLY("HTTP/1.1 409 Conflict\r\nContent-Length: 23\r\n\r\n{\"error\":{\"code\":\"x\"}}\n"));
    cli_http_request_t req = {.method = "GET", .path = "/r", .timeout_ms = 5000};
    cli_response_t r;
    bool connected;
    char err[256];
    FILE *sink = tmpfile();
    assert_int_equal(exchange(&s, &req, sink, &r, &connected, err, sizeof err), 0);
    assert_int_equal(r.status, 409);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, "\"code\":\"x\""));
    assert_int_equal(ftell(sink), 0);
    fclose(sink);
    free(r.body);
    server_end(&s);
}

static void test_transport_failures(void **state)
{
    (void)state;
    cli_http_request_t req = {.method = "GET", .path = "/v1/status", .timeout_ms = 5000};
    cli_response_t r;
    bool connected;
    char err[256];
    server_t s;

    server_start(&s, REPLY("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"));
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), -1);
    assert_true(connected);
    assert_non_null(strstr(err, "closed in the middle"));
    server_end(&s);

    server_start(&s, REPLY("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"));
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed answer"));
    server_end(&s);

    server_start(&s, REPLY("SSH-2.0-OpenSSH_9.2\r\n\r\n"));
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed answer"));
    server_end(&s);

    server_start(&s, NULL, 0); /* never answers */
    req.timeout_ms = 300;
    assert_int_equal(exchange(&s, &req, NULL, &r, &connected, err, sizeof err), -1);
    assert_true(connected);
    assert_non_null(strstr(err, "no answer within 300ms"));
    server_end(&s);

    /* a port nobody listens on: the server's, once it is gone */
    int port = s.port;
    cli_url_t u;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    assert_int_equal(cli_url_parse(url, &u, err, sizeof err), 0);
    assert_int_equal(cli_http_exchange(&u, &req, NULL, &r, &connected, err, sizeof err), -1);
    assert_false(connected);
    assert_string_equal(err, "connection refused");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_forms),
        cmocka_unit_test(test_url_refused),
        cmocka_unit_test(test_content_length_and_request_head),
        cmocka_unit_test(test_chunked_after_100_continue),
        cmocka_unit_test(test_until_close_streamed_to_a_file),
        cmocka_unit_test(test_error_answer_is_kept_in_memory_even_with_a_sink),
        cmocka_unit_test(test_transport_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
