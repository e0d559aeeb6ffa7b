/*
 * fuzz_conn: libFuzzer entry for the client connection layer (net/conn.c and what it
 * hands requests to: api, router, dispatch, proxy), through real loopback sockets into an
 * in-process daemon (tests/fuzz/fuzz_daemon.h) whose two models point at a fake upstream
 * that answers every request with a small 200 (keep-alive, after a few loop turns).
 *
 * The input is a script of client actions on up to FZ_CLIENTS connections. Byte 0 sets
 * the upstream's delay (turns before it answers); then each action is one byte, low nibble
 * the action and the high bits the client, followed by its arguments:
 *
 *   0 WRITE  n, n bytes       write the next n bytes of the input (connects first if needed)
 *   1 TPL    i, n             set the client's template i (a well-formed request from the
 *                             list below) and write its first n bytes (n = 0: all of it)
 *   2 REST                    write the rest of the current template
 *   3 READ                    read what the daemon sent (drain)
 *   4 RUN    n                let the loop run n % 64 + 1 turns
 *   5 SLEEP  n                sleep (n % 8) * 0.5 ms, then one turn (timers: header_timeout)
 *   6 SHUT                    half-close (shutdown SHUT_WR)
 *   7 RESET                   close with SO_LINGER 0 (an RST); the next action reconnects
 *   8 CLOSE                   close normally
 *   9 WAIT                    run until the client gets bytes or its answer ends (bounded)
 *  10 BURST  i, n             write template i n % 40 + 1 times in one write (pipelining)
 *  other                      one turn
 *
 * After the script every client reads what is there, its answers are checked (a sequence
 * of well-formed HTTP/1.1 responses, the last possibly cut short), and it closes; then the
 * loop turns until the daemon holds no connection, nothing is queued or in flight, the
 * deferred work and the free list are empty and every parsed request has ended. Anything
 * else aborts. The daemon is built and torn down for every input.
 */
#include "fuzz_daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CLIENTS 3
#define FZ_MAX_ACTIONS 4096

static const char MODELS[] =
    "limits: { max_header: 2KiB, max_header_count: 24, max_body: 4KiB, header_timeout: 40ms, queue_max: 8 }\n"
    "models:\n"
    "  a: { route: /a/, concurrency: 1, queue_max: 2 }\n"
    "  b: { route: /b/, aliases: [bee], concurrency: 2, queue_max: 4, retry: safe }\n"
    "  u: { route: /u/, concurrency: 1, queue_max: 2, upgrade: [websocket] }\n";

static const char *const TEMPLATES[] = {
    "GET /a/x HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST /b/y HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    "POST /b/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: x\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
    "{\"model\":\"bee\"}",
    "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
    "GET /v1/status HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST /a/e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nbody",
    "GET /a/d HTTP/1.1\r\nHost: t\r\nX-Vramd-Deadline: 1ms\r\n\r\n",
    "GET /b/k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "HEAD /a/h HTTP/1.1\r\nHost: t\r\n\r\n",
    "GET /a/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n",
    "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST /v1/models/a/unload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    "POST /v1/models/a/load HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    "POST /b/big HTTP/1.1\r\nHost: t\r\nContent-Length: 9000\r\nExpect: 100-continue\r\n\r\n",
    "POST /a/te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
    "GET /b/p HTTP/1.1\r\nHost: t\r\nX-Vramd-Priority: high\r\n\r\n",
    "POST /v1/admin/reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n",
    "GET /a/t HTTP/1.1\r\nHost: t\r\nX-Vramd-Total-Deadline: 1ms\r\n\r\n",
    /* upgrades: a model that allows them (the fake upstream answers 200: passed back, closed),
     * one that does not, a POST upgrade (refused on its head) */
    "GET /u/ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    "GET /a/ws HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "POST /u/ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nhi",
};
#define N_TEMPLATES (sizeof TEMPLATES / sizeof TEMPLATES[0])

static const char UP_ANSWER[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";

static fz_client_t CL[FZ_CLIENTS];
static struct {
    const char *tpl; /* the client's current template */
    size_t tpl_off;
} T[FZ_CLIENTS];
static unsigned g_up_delay;

static void answer_ok(fu_conn_t *fc, const char *req, size_t len)
{
    (void)req;
    (void)len;
    fc->pieces[0] = (fu_piece_t){UP_ANSWER, sizeof UP_ANSWER - 1, g_up_delay};
    fc->n_pieces = 1;
    fc->end = FU_END_KEEP;
}

static void fd_dump(void)
{
    fprintf(stderr, "fuzz_conn: waiting for: %s\n", D.what ? D.what : "-");
    if (!D.up)
        return;
    fprintf(stderr, "  daemon: conns %u queued %u in flight %u requests %llu ended %llu deferred %d graveyard %d\n",
            D.core.n_conns, core_queued_total(&D.core), core_in_flight_total(&D.core),
            (unsigned long long)D.core.requests_total, (unsigned long long)D.ended, !list_empty(&D.core.deferred),
            !list_empty(&D.core.graveyard));
    fprintf(stderr, "  listener: accepted %u of %u connections\n", D.accepted, D.connects);
    fprintf(stderr, "  upstream: open %u requests %u answered %u\n", U.open, U.requests, U.answers_done);
    for (int i = 0; i < FZ_CLIENTS; i++)
        if (CL[i].used)
            fprintf(stderr, "  client %d: fd %d sent %zu read %zu eof %d reset %d\n%.*s\n", i, CL[i].fd,
                    CL[i].sent, CL[i].rx_total, CL[i].eof, CL[i].reset, (int)(CL[i].rx_len > 2000 ? 2000 : CL[i].rx_len),
                    CL[i].rx);
}

/* The daemon's answers to one client: well-formed responses, the last one possibly cut. */
static void check_answers(const fz_client_t *cl)
{
    size_t at = 0;
    while (at < cl->rx_len) {
        fz_resp_t r;
        int rc = fz_parse_response(cl->rx + at, cl->rx_len - at, false, cl->eof, &r);
        if (rc == HTTP1_ERROR) {
            fprintf(stderr, "fuzz_conn: malformed answer at byte %zu of %zu\n", at, cl->rx_len);
            D.what = "well-formed answers";
            fd_dump();
            abort();
        }
        if (rc != HTTP1_OK)
            return; /* cut short, or not all read */
        FD_CHECK(r.status >= 100 && r.status <= 599);
        if (cl->sent_head)
            return; /* a HEAD's answer has a Content-Length and no body: stop here */
        at += r.end;
    }
}

static size_t arg(const uint8_t *data, size_t size, size_t *pos)
{
    return *pos < size ? data[(*pos)++] : 0;
}

static void run_turns(unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        fd_turn();
}

static void act(int c, unsigned op, const uint8_t *data, size_t size, size_t *pos)
{
    fz_client_t *cl = &CL[c];
    switch (op) {
    case 0: {
        size_t n = arg(data, size, pos);
        if (n > size - *pos)
            n = size - *pos;
        fz_write(cl, data + *pos, n);
        *pos += n;
        break;
    }
    case 1: {
        T[c].tpl = TEMPLATES[arg(data, size, pos) % N_TEMPLATES];
        size_t n = arg(data, size, pos), len = strlen(T[c].tpl);
        if (n == 0 || n > len)
            n = len;
        fz_write(cl, T[c].tpl, n);
        T[c].tpl_off = n;
        break;
    }
    case 2:
        if (T[c].tpl) {
            fz_write(cl, T[c].tpl + T[c].tpl_off, strlen(T[c].tpl) - T[c].tpl_off);
            T[c].tpl_off = strlen(T[c].tpl);
        }
        break;
    case 3:
        fz_read(cl);
        break;
    case 4:
        run_turns((unsigned)(arg(data, size, pos) % 64) + 1);
        break;
    case 5: {
        struct timespec ts = {0, (long)(arg(data, size, pos) % 8) * 500000L};
        nanosleep(&ts, NULL);
        fd_turn();
        break;
    }
    case 6:
        fz_shut_wr(cl);
        break;
    case 7:
    case 8:
        fz_close(cl, op == 7);
        break;
    case 9: {
        size_t before = cl->rx_total;
        D.what = "an answer to a client (WAIT)";
        /* not a failure when nothing comes: the request may be queued or incomplete */
        (void)FD_TURN_UNTIL((fz_read(cl), cl->rx_total > before || cl->eof || cl->reset || cl->fd < 0), 400, 200);
        break;
    }
    case 10: {
        const char *t = TEMPLATES[arg(data, size, pos) % N_TEMPLATES];
        size_t k = arg(data, size, pos) % 40 + 1, len = strlen(t);
        char buf[40 * 256];
        size_t n = 0;
        for (size_t i = 0; i < k && n + len <= sizeof buf; i++, n += len)
            memcpy(buf + n, t, len);
        fz_write(cl, buf, n);
        break;
    }
    default:
        fd_turn();
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
    fd_once(MODELS);
    U.answer = answer_ok;
    memset(T, 0, sizeof T);
    for (int i = 0; i < FZ_CLIENTS; i++) {
        CL[i].fd = -1;
        CL[i].used = CL[i].shut_wr = CL[i].eof = CL[i].reset = CL[i].sent_head = false;
        CL[i].sent = CL[i].rx_len = CL[i].rx_total = 0;
    }
    size_t pos = 0;
    g_up_delay = (unsigned)(arg(data, size, &pos) % 8);
    fd_daemon_start();
    for (unsigned n = 0; pos < size && n < FZ_MAX_ACTIONS; n++) {
        uint8_t b = data[pos++];
        act((b >> 4) % FZ_CLIENTS, b & 15u, data, size, &pos);
    }
    bool verbose = getenv("VRAMD_FUZZ_VERBOSE") != NULL;
    for (int i = 0; i < FZ_CLIENTS; i++) {
        fz_read(&CL[i]);
        if (verbose && CL[i].used)
            fprintf(stderr, "client %d: sent %zu, read %zu (eof %d reset %d):\n%.*s\n", i, CL[i].sent,
                    CL[i].rx_total, CL[i].eof, CL[i].reset, (int)CL[i].rx_len, CL[i].rx);
        check_answers(&CL[i]);
        fz_close(&CL[i], false);
    }
    D.what = "the daemon to let go of every connection and request";
    FD_CHECK(FD_TURN_UNTIL(daemon_idle(), FD_SETTLE_TURNS, FD_SETTLE_MS));
    FD_CHECK(core_queued_total(&D.core) == 0 && core_in_flight_total(&D.core) == 0);
    FD_CHECK(D.core.retries_in_flight == 0);
    list_foreach(it, &D.core.models) {
        model_t *m = list_entry(it, model_t, link);
        list_foreach(jt, &m->instances) FD_CHECK(list_entry(jt, instance_t, link)->path.in_flight == 0);
    }
    fd_daemon_stop();
    return 0;
}
