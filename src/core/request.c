/*
 * request: the request state machine (one set_state with a table of legal changes) and
 * the small helpers every owner of a request uses. See request.h.
 */
#include "core/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "core/model.h"
#include "http/http_out.h"

#define BIT(s) (1u << (s))

/* allowed[from]: the states `from` may change to */
static const unsigned allowed[] = {
    [REQ_NEW] = BIT(REQ_QUEUED) | BIT(REQ_LOCAL) | BIT(REQ_DONE),
    [REQ_QUEUED] = BIT(REQ_CONNECTING) | BIT(REQ_DONE),
    [REQ_CONNECTING] = BIT(REQ_WAITING) | BIT(REQ_QUEUED) | BIT(REQ_DONE),
    [REQ_WAITING] = BIT(REQ_STREAMING) | BIT(REQ_CONNECTING) | BIT(REQ_QUEUED) | BIT(REQ_DONE),
    [REQ_STREAMING] = BIT(REQ_QUEUED) | BIT(REQ_DONE),
    [REQ_LOCAL] = BIT(REQ_DONE),
    [REQ_DONE] = 0,
};

const char *request_state_name(enum request_state s)
{
    static const char *const n[] = {"new", "queued", "connecting", "waiting", "streaming", "local", "done"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

bool request_transition_ok(enum request_state from, enum request_state to)
{
    if ((unsigned)from >= sizeof allowed / sizeof allowed[0])
        return false;
    return from == to || (allowed[from] & BIT(to)) != 0;
}

void request_set_state_at(request_t *r, enum request_state s, int line, const char *file)
{
    if (r->state == s)
        return;
    CHECK_IF(!request_transition_ok(r->state, s));
    if (log_enabled(LOG_DEBUG))
        log_event(LOG_DEBUG, "request_state", "request_id=%s model=%s from=%s to=%s file=%s line=%d", r->id,
                  r->model ? r->model->name : NULL, request_state_name(r->state), request_state_name(s), file, line);
    r->state = s;
}

uint64_t request_queue_ms(const request_t *r)
{
    if (!r->t_queued)
        return 0;
    uint64_t end = r->t_dispatched ? r->t_dispatched : core_now();
    return end > r->t_queued ? end - r->t_queued : 0;
}

void request_set_ops(request_t *r, const request_ops_t *ops) { r->ops = ops; }

void request_vramd_headers(const request_t *r, buf_t *b, uint64_t run_ms)
{
    http_out_header(b, "X-Request-Id", "%s", r->id);
    http_out_header(b, "X-Vramd-Queue-Ms", "%llu", (unsigned long long)request_queue_ms(r));
    http_out_header(b, "X-Vramd-Run-Ms", "%llu", (unsigned long long)run_ms);
    http_out_header(b, "X-Vramd-Attempts", "%u", r->attempts);
    if (r->gpu >= 0)
        http_out_header(b, "X-Vramd-Gpu", "%d", r->gpu);
    if (r->level > 0)
        http_out_header(b, "X-Vramd-Degrade-Level", "%u", r->level);
}

void request_make_id(request_t *r, const char *given, size_t given_len)
{
    static uint64_t g_id_state;
    if (given && given_len > 0 && given_len < sizeof r->id) {
        bool ok = true;
        for (size_t i = 0; i < given_len; i++)
            if ((unsigned char)given[i] < 0x21 || (unsigned char)given[i] > 0x7e || given[i] == '"' ||
                given[i] == '\\')
                ok = false;
        if (ok) {
            memcpy(r->id, given, given_len);
            r->id[given_len] = '\0';
            return;
        }
    }
    if (!g_id_state) {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&g_id_state, sizeof g_id_state, 1, f) != 1)
            g_id_state = (uint64_t)uv_hrtime() ^ 0x9e3779b97f4a7c15ULL;
        if (f)
            fclose(f);
        g_id_state |= 1;
    }
    g_id_state ^= g_id_state << 13;
    g_id_state ^= g_id_state >> 7;
    g_id_state ^= g_id_state << 17;
    snprintf(r->id, sizeof r->id, "%016llx", (unsigned long long)g_id_state);
}

void request_free(core_defer_t *d)
{
    request_t *r = list_entry(d, request_t, free_later);
    buf_free(&r->orig_body);
    buf_free(&r->resp_head);
    buf_free(&r->resp_body);
    free(r->head);
    free(r->hdrs);
    buf_free(&r->body);
    free(r);
}
