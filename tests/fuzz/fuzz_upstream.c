/*
 * fuzz_upstream: libFuzzer entry for what a worker answers (path/proxy.c, proxy_forward.c,
 * the verdict for a validated model), through real loopback sockets into an in-process
 * daemon (tests/fuzz/fuzz_daemon.h). A client sends one request (or two, pipelined) and
 * reads; the fake upstream answers with bytes from the input, split into pieces sent some
 * loop turns apart, then closes, keeps the connection, or holds it silent.
 *
 * Input: byte 0 flags, byte 1 the split count (bits 0-2) and a number of 4000-byte filler
 * headers inserted after the answer's first line (bits 3-7: oversized heads without huge
 * inputs), one byte per split (where, as a fraction of the answer, and 0-3 turns of delay
 * in its low bits), then the answer.
 *   flags bits 0-1  how the answer ends: 0, 1 close; 2 keep the connection; 3 hold it
 *         bits 2-3  model: 0, 1 `plain`; 2 `checked` (validate: json, answers buffered);
 *                   3 `safe` (retry: safe: one more try after a worker failure)
 *         bit 4     the request is a HEAD          bit 5  it is a POST with a body
 *         bit 6     two requests, pipelined         bit 7  the client speaks HTTP/1.0
 *
 * Checks, after the answer is out and the loop ran a bounded number of turns more:
 *   - what the client got is one well-formed response (or two), or a prefix of one cut
 *     short by the daemon (never bytes that do not parse);
 *   - no hang: when the worker closed, or its answer was complete, the client's
 *     connection has ended (it asked for Connection: close);
 *   - for the `plain` model and one request, against our own reading of the answer (the
 *     daemon's limits: 64 KiB head, 128 headers; 1xx interim heads skipped): a malformed
 *     head (or 101) gives 502 and nothing of it; a complete answer arrives with the same
 *     status and body length; an answer cut after its head gives a cut response; one cut
 *     in its head gives 502;
 *   - then the clients close and the daemon lets go of everything (fuzz_daemon.h).
 */
#include "fuzz_daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_FILLER 4000
#define FZ_ANSWER_MAX (64 * 1024 + 31 * (FZ_FILLER + 16))
#define FZ_WAIT_TURNS 3000
#define FZ_WAIT_MS 1500

static const char MODELS[] =
    "limits: { max_body: 64KiB }\n"
    "models:\n"
    "  plain: { route: /plain/ }\n"
    "  checked: { route: /checked/, validate: json }\n"
    "  safe: { route: /safe/, retry: safe }\n";

static const char *const MODEL_ROUTES[] = {"plain", "plain", "checked", "safe"};

static char g_answer[FZ_ANSWER_MAX];
static size_t g_answer_len;
static fu_piece_t g_pieces[FU_PIECES];
static int g_n_pieces;
static enum fu_end g_end;
static fz_client_t g_client;
static bool g_head_req;

static void answer_script(fu_conn_t *fc, const char *req, size_t len)
{
    (void)req;
    (void)len;
    memcpy(fc->pieces, g_pieces, sizeof g_pieces);
    fc->n_pieces = g_n_pieces;
    fc->end = g_end;
}

static void fd_dump(void)
{
    fprintf(stderr, "fuzz_upstream: waiting for: %s\n", D.what ? D.what : "-");
    if (D.up)
        fprintf(stderr, "  daemon: conns %u queued %u in flight %u requests %llu ended %llu\n", D.core.n_conns,
                core_queued_total(&D.core), core_in_flight_total(&D.core),
                (unsigned long long)D.core.requests_total, (unsigned long long)D.ended);
    fprintf(stderr, "  upstream: open %u requests %u answered %u; answer %zu bytes in %d pieces, end %d\n", U.open,
            U.requests, U.answers_done, g_answer_len, g_n_pieces, (int)g_end);
    fprintf(stderr, "  client: sent %zu read %zu eof %d reset %d\n%.*s\n", g_client.sent, g_client.rx_total,
            g_client.eof, g_client.reset, (int)(g_client.rx_len > 2000 ? 2000 : g_client.rx_len), g_client.rx);
}

/* The answer, with `fill` filler headers after its first line. */
static void build_answer(const uint8_t *p, size_t n, unsigned fill)
{
    const uint8_t *nl = memmem(p, n, "\r\n", 2);
    size_t first = nl ? (size_t)(nl - p) + 2 : 0;
    size_t cap = sizeof g_answer;
    if (n > cap - fill * (FZ_FILLER + 16))
        n = cap - fill * (FZ_FILLER + 16);
    if (first > n)
        first = n;
    memcpy(g_answer, p, first);
    size_t at = first;
    for (unsigned i = 0; i < fill; i++) {
        at += (size_t)snprintf(g_answer + at, cap - at, "X-Fill-%02u: ", i);
        memset(g_answer + at, 'f', FZ_FILLER);
        at += FZ_FILLER;
        memcpy(g_answer + at, "\r\n", 2);
        at += 2;
    }
    memcpy(g_answer + at, p + first, n - first);
    g_answer_len = at + n - first;
}

/* Pieces at the split points (fractions of the answer), each after its delay. */
static void split_answer(const uint8_t *splits, unsigned k)
{
    size_t cuts[FU_PIECES];
    unsigned delays[FU_PIECES];
    unsigned nc = 0;
    for (unsigned i = 0; i < k && nc < FU_PIECES - 1; i++) {
        size_t at = g_answer_len * splits[i] / 256;
        unsigned j = nc++;
        while (j > 0 && cuts[j - 1] > at) { /* insertion sort */
            cuts[j] = cuts[j - 1];
            delays[j] = delays[j - 1];
            j--;
        }
        cuts[j] = at;
        delays[j] = splits[i] & 3u;
    }
    size_t from = 0;
    unsigned delay = 0;
    g_n_pieces = 0;
    for (unsigned i = 0; i <= nc; i++) {
        size_t to = i < nc ? cuts[i] : g_answer_len;
        if (to > from || i == nc)
            g_pieces[g_n_pieces++] = (fu_piece_t){g_answer + from, to - from, delay};
        if (i < nc) {
            delay = delays[i];
            from = to > from ? to : from;
        }
    }
}

enum expect { EX_MALFORMED, EX_CUT_HEAD, EX_CUT_BODY, EX_BAD_BODY, EX_COMPLETE };

/* Our reading of the answer, as the proxy should read it. */
static enum expect expected(bool closed, fz_resp_t *final)
{
    static http1_header_t hdrs[129];
    http1_limits_t lim = {.max_header_bytes = 64 * 1024, .max_headers = 128};
    size_t at = 0;
    for (;;) {
        http1_msg_t msg;
        http1_error_t err;
        size_t scan = 0;
        int rc = http1_parse_response(g_answer + at, g_answer_len - at, &lim, g_head_req, &msg, hdrs, &scan, &err);
        if (rc == HTTP1_ERROR)
            return EX_MALFORMED;
        if (rc == HTTP1_NEED_MORE)
            return EX_CUT_HEAD;
        if (msg.status == 101)
            return EX_MALFORMED;
        if (msg.status >= 200)
            break;
        at += msg.head_len;
    }
    int rc = fz_parse_response(g_answer + at, g_answer_len - at, g_head_req, closed, final);
    if (rc == HTTP1_ERROR)
        return EX_BAD_BODY; /* a bad chunk: the head went out, the rest is cut */
    return rc == HTTP1_OK ? EX_COMPLETE : EX_CUT_BODY;
}

static void send_request(unsigned flags)
{
    const char *route = MODEL_ROUTES[(flags >> 2) & 3u];
    const char *method = (flags & 16u) ? "HEAD" : (flags & 32u) ? "POST" : "GET";
    const char *body = (flags & 32u) && !(flags & 16u) ? "{\"x\":1}" : "";
    const char *version = (flags & 128u) ? "1.0" : "1.1";
    char req[1024];
    size_t n = 0;
    if (flags & 64u)
        n += (size_t)snprintf(req + n, sizeof req - n, "%s /%s/one HTTP/%s\r\nHost: t\r\nConnection: keep-alive\r\n"
                              "Content-Length: %zu\r\n\r\n%s", method, route, version, strlen(body), body);
    n += (size_t)snprintf(req + n, sizeof req - n, "%s /%s/x HTTP/%s\r\nHost: t\r\nConnection: close\r\n"
                          "Content-Length: %zu\r\n\r\n%s", method, route, version, strlen(body), body);
    fz_write(&g_client, req, n);
}

static void fail(const char *why)
{
    fprintf(stderr, "fuzz_upstream: %s\n", why);
    fd_dump();
    abort();
}

/* The client's bytes: one or two well-formed responses, or a cut prefix. */
static int check_client(unsigned flags, fz_resp_t *first)
{
    int n = (flags & 64u) ? 2 : 1;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        fz_resp_t r;
        int rc = fz_parse_response(g_client.rx + at, g_client.rx_len - at, g_head_req, g_client.eof, &r);
        if (rc == HTTP1_ERROR)
            fail("the client got a malformed answer");
        if (i == 0)
            *first = r;
        if (rc != HTTP1_OK)
            return rc;
        at += r.end;
        if (r.status < 200 && r.status != 100)
            fail("the client got an interim answer other than 100");
    }
    return HTTP1_OK;
}

static void check_plain(enum expect ex, const fz_resp_t *want, int rc, const fz_resp_t *got)
{
    switch (ex) {
    case EX_MALFORMED:
    case EX_CUT_HEAD:
        if (rc != HTTP1_OK || got->status != 502)
            fail("a malformed or unfinished worker head did not give 502");
        break;
    case EX_COMPLETE:
        if (rc != HTTP1_OK || got->status != want->status)
            fail("a complete worker answer did not reach the client with its status");
        if (got->body_len != want->body_len)
            fail("a complete worker answer reached the client with another body length");
        break;
    case EX_CUT_BODY:
    case EX_BAD_BODY:
        if (rc == HTTP1_OK && got->status != 502 && !(got->framing == HTTP1_BODY_UNTIL_CLOSE))
            fail("an answer cut in its body reached the client complete");
        break;
    }
}

static bool daemon_idle(void)
{
    return D.accepted == D.connects && D.core.n_conns == 0 && core_queued_total(&D.core) == 0 && core_in_flight_total(&D.core) == 0 &&
           list_empty(&D.core.deferred) && list_empty(&D.core.graveyard) && D.ended == D.core.requests_total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    fd_once(MODELS);
    U.answer = answer_script;
    unsigned flags = data[0], k = data[1] & 7u, fill = data[1] >> 3;
    if (size < 2 + k)
        return 0;
    g_end = (flags & 3u) == 2 ? FU_END_KEEP : (flags & 3u) == 3 ? FU_END_HOLD : FU_END_CLOSE;
    g_head_req = (flags & 16u) != 0;
    build_answer(data + 2 + k, size - 2 - k, fill);
    split_answer(data + 2, k);
    memset(&g_client, 0, offsetof(fz_client_t, rx));
    g_client.fd = -1;
    g_client.rx_len = g_client.rx_total = 0;

    fd_daemon_start();
    send_request(flags);
    D.what = "the worker to get the request and send its answer";
    (void)FD_TURN_UNTIL((fz_read(&g_client), U.answers_done > 0 || g_client.eof || g_client.reset), FZ_WAIT_TURNS,
                        FZ_WAIT_MS);
    D.what = "the client's answer";
    (void)FD_TURN_UNTIL((fz_read(&g_client), g_client.eof || g_client.reset), FZ_WAIT_TURNS, FZ_WAIT_MS);
    fz_read(&g_client);

    bool closed = g_end == FU_END_CLOSE;
    fz_resp_t want = {0}, got = {0};
    enum expect ex = expected(closed, &want);
    int rc = check_client(flags, &got);
    bool one_plain = !(flags & 64u) && ((flags >> 2) & 3u) < 2 && U.requests == 1;
    if (getenv("VRAMD_FUZZ_VERBOSE"))
        fprintf(stderr, "expect %d (status %d body %zu), client rc %d status %d body %zu eof %d reset %d, "
                "upstream requests %u answered %u\n%.*s\n", (int)ex, want.status, want.body_len, rc, got.status,
                got.body_len, g_client.eof, g_client.reset, U.requests, U.answers_done,
                (int)(g_client.rx_len > 1500 ? 1500 : g_client.rx_len), g_client.rx);
    bool must_end = closed || ex == EX_COMPLETE || ex == EX_MALFORMED || ex == EX_BAD_BODY;
    if (U.answers_done > 0 && must_end && !g_client.eof && !g_client.reset)
        fail("the client's answer did not end in bounded time although the worker's did");
    if (one_plain && U.answers_done == 1 && (g_client.eof || g_client.reset))
        check_plain(ex, &want, rc, &got);

    fz_close(&g_client, false);
    D.what = "the daemon to let go of every connection and request";
    if (!FD_TURN_UNTIL(daemon_idle(), FD_SETTLE_TURNS, FD_SETTLE_MS))
        fail("the daemon did not let go of everything");
    FD_CHECK(D.core.retries_in_flight == 0);
    fd_daemon_stop();
    return 0;
}
