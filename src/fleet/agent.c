/* agent: the agent-check listener and its connections. See agent.h. */
#include "fleet/agent.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "fleet/agent_line.h"
#include "fleet/agent_view.h"

typedef struct agent_conn {
    list_t link;          /* agent_state.conns */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    uv_shutdown_t sd;
    uint64_t deadline_ms; /* accept + agent_timeout */
    size_t len;
    bool answered;        /* the line is being written */
    bool peer_eof;        /* the peer sent FIN: close once the line is written */
    bool closing;
    int open_handles;
    char in[AGENT_REQ_MAX + 1]; /* one byte past the bound: a request that long is refused */
    char line[AGENT_LINE_MAX];
} agent_conn_t;

static struct {
    core_t *core;
    uv_tcp_t listener;
    bool listening;
    list_t conns;
    unsigned n_conns;
    fleet_agent_stats_t stats;
} agent_state;

const fleet_agent_stats_t *fleet_agent_stats(void) { return &agent_state.stats; }

static void on_handle_closed(uv_handle_t *h)
{
    agent_conn_t *a = h->data;
    if (--a->open_handles == 0)
        free(a);
}

static void conn_close(agent_conn_t *a)
{
    if (a->closing)
        return;
    a->closing = true;
    list_remove(&a->link);
    agent_state.n_conns--;
    uv_close((uv_handle_t *)&a->timer, on_handle_closed);
    uv_close((uv_handle_t *)&a->tcp, on_handle_closed);
}

static void on_shutdown(uv_shutdown_t *sd, int status)
{
    agent_conn_t *a = sd->data;
    if (status != 0)
        conn_close(a);
    /* else: reading on (and discarding) until the peer closes or the deadline passes */
}

/* The line is out: send FIN, and close once the peer does (HAProxy closes after reading
 * its line), so that bytes it sent past what was read do not turn the close into a reset
 * that could destroy the answer before it is read (a lingering close, as nginx's). */
static void on_written(uv_write_t *wr, int status)
{
    agent_conn_t *a = wr->data;
    a->sd.data = a;
    if (status != 0 || a->closing || a->peer_eof || uv_shutdown(&a->sd, (uv_stream_t *)&a->tcp, on_shutdown) != 0)
        conn_close(a);
}

static void on_timer(uv_timer_t *t);

static void answer(agent_conn_t *a)
{
    if (a->answered || a->closing)
        return;
    a->answered = true;
    agent_req_t req;
    agent_figures_t f;
    char err[160];
    if (agent_parse_request(a->in, a->len, &req, err, sizeof err) != 0) {
        memset(&f, 0, sizeof f);
        f.maxconn = 1;
        agent_set_down(&f, "bad agent-send: %s", err);
        agent_state.stats.bad_requests++;
        log_event(LOG_WARN, "agent_bad_request", "error=%s", err);
    } else {
        agent_view(agent_state.core, &req, &f);
        if (req.target == AGENT_HOST)
            agent_state.stats.checks_host++;
        else
            agent_state.stats.checks_model++;
    }
    size_t n = agent_format(&f, a->line);
    log_event(LOG_DEBUG, "agent_check", "target=%s answer=%.*s", req.target == AGENT_HOST ? "host" : req.name,
              (int)(n ? n - 1 : 0), a->line);
    uv_buf_t buf = uv_buf_init(a->line, (unsigned)n);
    a->wr.data = a;
    if (uv_write(&a->wr, (uv_stream_t *)&a->tcp, &buf, 1, on_written) != 0) {
        conn_close(a);
        return;
    }
    uint64_t now = core_now(); /* from now on the timer is the deadline only */
    uv_timer_start(&a->timer, on_timer, a->deadline_ms > now ? a->deadline_ms - now : 0, 0);
}

static void on_timer(uv_timer_t *t)
{
    agent_conn_t *a = t->data;
    if (!a->answered && core_now() < a->deadline_ms) {
        answer(a); /* quiet for agent_wait: what arrived is the request */
        return;
    }
    if (!a->answered)
        agent_state.stats.timed_out++;
    conn_close(a);
}

/* The quiet time after the last byte (or the connect), never past the deadline. */
static void rearm(agent_conn_t *a)
{
    uint64_t now = core_now();
    uint64_t wait = agent_state.core->cfg->fleet.agent_wait_ms;
    uint64_t left = a->deadline_ms > now ? a->deadline_ms - now : 0;
    uv_timer_start(&a->timer, on_timer, wait < left ? wait : left, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    agent_conn_t *a = h->data;
    (void)suggested;
    if (a->answered) /* the request was parsed: in[] now takes what follows, dropped */
        *buf = uv_buf_init(a->in, (unsigned)sizeof a->in);
    else
        *buf = uv_buf_init(a->in + a->len, (unsigned)(sizeof a->in - a->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    agent_conn_t *a = s->data;
    (void)buf;
    if (a->closing)
        return;
    if (a->answered) {
        if (nread < 0)
            conn_close(a); /* the peer closed after reading the line: done */
        return;
    }
    if (nread == UV_EOF) {
        a->peer_eof = true;
        answer(a);
        return;
    }
    if (nread < 0) {
        conn_close(a);
        return;
    }
    a->len += (size_t)nread;
    if (a->len >= sizeof a->in || agent_request_complete(a->in, a->len))
        answer(a);
    else if (nread > 0)
        rearm(a);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0) {
        log_event(LOG_WARN, "agent_accept_failed", "error=%s", uv_strerror(status));
        return;
    }
    core_t *core = agent_state.core;
    agent_conn_t *a = calloc(1, sizeof *a);
    if (a == NULL || uv_tcp_init(core->loop, &a->tcp) != 0) {
        free(a);
        return;
    }
    a->tcp.data = a;
    a->open_handles = 1;
    if (uv_accept(server, (uv_stream_t *)&a->tcp) != 0 || agent_state.n_conns >= core->cfg->fleet.agent_max_connections) {
        if (agent_state.n_conns >= core->cfg->fleet.agent_max_connections)
            agent_state.stats.refused++;
        uv_close((uv_handle_t *)&a->tcp, on_handle_closed);
        return;
    }
    uv_timer_init(core->loop, &a->timer);
    a->timer.data = a;
    a->open_handles = 2;
    list_insert_tail(&agent_state.conns, &a->link);
    agent_state.n_conns++;
    a->deadline_ms = core_now() + core->cfg->fleet.agent_timeout_ms;
    uv_tcp_nodelay(&a->tcp, 1);
    rearm(a);
    if (uv_read_start((uv_stream_t *)&a->tcp, on_alloc, on_read) != 0)
        conn_close(a);
}

int fleet_agent_start(core_t *core, char *err, size_t errlen)
{
    const config_t *c = core->cfg;
    agent_state.core = core;
    list_init(&agent_state.conns);
    if (c->fleet.agent_host == NULL)
        return 0;
    struct sockaddr_storage addr;
    const char *host = c->fleet.agent_host;
    int rc = strchr(host, ':') ? uv_ip6_addr(host, c->fleet.agent_port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(host, c->fleet.agent_port, (struct sockaddr_in *)&addr);
    if (rc == 0)
        rc = uv_tcp_init(core->loop, &agent_state.listener);
    if (rc == 0) {
        agent_state.listening = true;
        rc = uv_tcp_bind(&agent_state.listener, (struct sockaddr *)&addr, 0);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&agent_state.listener, 256, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "fleet.agent_listen: cannot listen on %s:%d: %s", host, c->fleet.agent_port,
                 uv_strerror(rc));
        return -1;
    }
    log_event(LOG_INFO, "agent_listening", "host=%s port=%d", host, c->fleet.agent_port);
    return 0;
}

void fleet_agent_stop(void)
{
    if (agent_state.listening && !uv_is_closing((uv_handle_t *)&agent_state.listener))
        uv_close((uv_handle_t *)&agent_state.listener, NULL);
    agent_state.listening = false;
    if (agent_state.core == NULL)
        return;
    list_foreach_safe(it, tmp, &agent_state.conns) conn_close(list_entry(it, agent_conn_t, link));
}
