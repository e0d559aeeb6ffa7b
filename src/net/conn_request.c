/* conn_request: a request object from a parsed head, the head handler's say on it, and how
 * a refusal reads (see conn_int.h). */
#include "net/conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "core/core.h"
#include "core/mem_budget.h"

static bool loopback_peer(const char *peer)
{
    return strncmp(peer, "127.", 4) == 0 || strncmp(peer, "[::1]:", 6) == 0 ||
           strncmp(peer, "[::ffff:127.", 12) == 0;
}

/* A job attempt (jobs/jobs_attempt.c) comes from vramd itself over loopback and names its
 * submitter: "X-Vramd-Job-Client: <core->job_secret> <ip:port>[ <key>]". Such a connection
 * takes the submitter's address as its peer (logs, X-Forwarded-For, limits.per_client keyed
 * by address) and, under key: token, the submitter's token key as its client key, so a job
 * counts as its submitter's request, not as one of 127.0.0.1's. Without
 * the secret, or from another address, the header is ignored (the proxy never forwards it).
 * Each attempt has a connection of its own (Connection: close). */
static void adopt_job_submitter(conn_t *c, const request_t *r)
{
    const char *secret = c->core->job_secret;
    size_t sl = strlen(secret);
    const http1_header_t *h = http1_find_header(r->head, &r->msg, "X-Vramd-Job-Client");
    if (!h || sl == 0 || !loopback_peer(c->peer))
        return;
    const char *v = r->head + h->value.off;
    size_t len = h->value.len;
    if (len <= sl + 1 || memcmp(v, secret, sl) != 0 || v[sl] != ' ')
        return;
    const char *peer = v + sl + 1;
    size_t rest = len - sl - 1;
    const char *sp = memchr(peer, ' ', rest);
    size_t plen = sp ? (size_t)(sp - peer) : rest;
    const char *key = sp ? sp + 1 : NULL;
    size_t klen = sp ? rest - plen - 1 : 0;
    if (plen == 0 || plen >= sizeof c->peer || (key && (klen == 0 || klen >= sizeof c->client_key)))
        return;
    for (size_t i = 0; i < plen; i++)
        if (!strchr("0123456789abcdefABCDEF.:[]", peer[i]))
            return;
    for (size_t i = 0; i < klen; i++)
        if (!strchr("0123456789abcdefghijklmnopqrstuvwxyz#", key[i]))
            return;
    memcpy(c->peer, peer, plen);
    c->peer[plen] = '\0';
    c->job_attempt = true;
    if (key) {
        memcpy(c->client_key, key, klen);
        c->client_key[klen] = '\0';
    }
}

request_t *conn_request_new(conn_t *c, const http1_msg_t *msg, const http1_header_t *hdrs)
{
    const config_t *cfg = c->core->cfg;
    request_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->conn = c;
    r->gpu = -1;
    core_defer_init(&r->free_later, request_free);
    list_init(&r->wait_link);
    queue_entry_init(&r->qe);
    ledger_entry_init(&r->mem);
    buf_init(&r->body, cfg->limits.max_body);
    buf_init(&r->orig_body, cfg->limits.max_body);
    buf_init(&r->resp_head, 64 * 1024);
    buf_init(&r->resp_body, cfg->limits.max_body);
    mem_budget_attach(r); /* body, ladder copy, held answer: limits.memory_budget */
    r->head = malloc(msg->head_len + 1);
    r->hdrs = malloc((msg->n_headers ? msg->n_headers : 1) * sizeof *r->hdrs);
    if (!r->head || !r->hdrs) {
        request_free(&r->free_later);
        return NULL;
    }
    memcpy(r->head, c->in.data, msg->head_len);
    r->head[msg->head_len] = '\0';
    r->head_len = msg->head_len;
    memcpy(r->hdrs, hdrs, msg->n_headers * sizeof *r->hdrs);
    r->msg = *msg;
    r->msg.headers = r->hdrs;
    r->t_arrival = core_now();
    r->head_method = http1_span_eq(r->head, msg->method, "HEAD");
    const http1_header_t *rid = http1_find_header(r->head, &r->msg, "X-Request-Id");
    request_make_id(r, rid ? r->head + rid->value.off : NULL, rid ? rid->value.len : 0);
    adopt_job_submitter(c, r);
    return r;
}

bool conn_refused_on_head(conn_t *c)
{
    if (!c->handlers.on_head)
        return false;
    bool keep_alive = c->keep_alive;
    c->keep_alive = false; /* the body stays unread: nothing may follow a refusal */
    if (c->handlers.on_head(c, c->req))
        return true;
    BUG_ON(c->req == NULL || c->state != CONN_HEAD); /* answered, yet said it did not */
    c->keep_alive = keep_alive;
    return false;
}

int conn_refusal_status(const http1_error_t *e, const char **code)
{
    switch (e->code) {
    case HTTP1_E_HEAD_TOO_LARGE:
    case HTTP1_E_TOO_MANY_HEADERS:
        *code = "header_too_large";
        return 431;
    case HTTP1_E_REQUEST_LINE_TOO_LONG:
        *code = "uri_too_long"; /* nginx: a request line over its buffer is 414 */
        return 414;
    case HTTP1_E_UNKNOWN_TRANSFER_CODING:
        *code = "not_implemented"; /* RFC 9112 6.1 */
        return 501;
    case HTTP1_E_VERSION:
        *code = "bad_request";
        return 505;
    default:
        *code = "bad_request";
        return 400;
    }
}

static size_t json_escape_into(char *out, size_t cap, const char *s)
{
    return log_json_escape(out, cap, s, strlen(s));
}

int conn_error_body(char *out, size_t cap, const char *code, const char *model, int retry_after_s,
                    const char *stage, const char *msg)
{
    char emsg[1200], emodel[300];
    emsg[json_escape_into(emsg, sizeof emsg, msg)] = '\0';
    int n;
    if (model) {
        emodel[json_escape_into(emodel, sizeof emodel, model)] = '\0';
        n = snprintf(out, cap, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\",\"model\":\"%s\"", code, emsg,
                     emodel);
    } else {
        n = snprintf(out, cap, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"", code, emsg);
    }
    if (n < 0 || (size_t)n >= cap)
        n = cap ? (int)cap - 1 : 0;
    if (retry_after_s >= 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, ",\"retry_after_s\":%d", retry_after_s);
    if ((size_t)n >= cap)
        n = cap ? (int)cap - 1 : 0;
    if (stage && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, ",\"stage\":\"%s\"", stage);
    if ((size_t)n >= cap)
        n = cap ? (int)cap - 1 : 0;
    n += snprintf(out + n, cap - (size_t)n, "}}");
    if ((size_t)n >= cap)
        n = cap ? (int)cap - 1 : 0;
    return n;
}
