/*
 * model_logs: GET /v1/models/NAME/logs?lines=N&after=SEQ. See model_logs.h.
 *
 * Without after: the last N lines kept (default MODEL_LOGS_DEFAULT_LINES). With after=SEQ
 * (a cursor from an earlier answer, as `vramctl logs -f` polls): the first N lines whose
 * seq is past SEQ, so a follower reads each line once; `missed` counts the lines past SEQ
 * that the ring's bounds dropped before they were read. The answer is one JSON document:
 * {"model", "cursor" (the seq of the last line returned, or SEQ / the last seq when none),
 *  "missed", "dropped_total", "lines": [{"seq", "ts_ms", "pid", "stream", "line"}]}.
 * Invariants: reads the ring only; N is bounded by limits.worker_log_lines (the ring).
 */
#include "serve/model_logs.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/model.h"
#include "net/conn.h"

/* A decimal value of key in query q (n bytes, "a=1&b=2"); 1 found, 0 absent, -1 bad. */
static int query_u64(const char *q, size_t n, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    size_t i = 0;
    while (i < n) {
        size_t end = i;
        while (end < n && q[end] != '&')
            end++;
        if (end - i > kl && memcmp(q + i, key, kl) == 0 && q[i + kl] == '=') {
            uint64_t v = 0;
            size_t p = i + kl + 1;
            if (p == end || end - p > 15)
                return -1;
            for (; p < end; p++) {
                if (q[p] < '0' || q[p] > '9')
                    return -1;
                v = v * 10 + (uint64_t)(q[p] - '0');
            }
            *out = v;
            return 1;
        }
        i = end + 1;
    }
    return 0;
}

static cJSON *render(const model_t *m, uint64_t first, uint64_t last_excl, uint64_t cursor, uint64_t missed)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", m->name);
    cJSON *arr = cJSON_AddArrayToObject(o, "lines");
    for (uint64_t s = first; s < last_excl; s++) {
        const line_entry_t *e = line_ring_get(&m->logs, s);
        if (!e)
            continue;
        cJSON *l = cJSON_CreateObject();
        cJSON_AddNumberToObject(l, "seq", (double)s);
        cJSON_AddNumberToObject(l, "ts_ms", (double)e->wall_ms);
        cJSON_AddNumberToObject(l, "pid", e->pid);
        cJSON_AddStringToObject(l, "stream", e->stream == 'e' ? "stderr" : "stdout");
        cJSON_AddStringToObject(l, "line", e->text);
        cJSON_AddItemToArray(arr, l);
        cursor = s;
    }
    cJSON_AddNumberToObject(o, "cursor", (double)cursor);
    cJSON_AddNumberToObject(o, "missed", (double)missed);
    cJSON_AddNumberToObject(o, "dropped_total", (double)m->logs.dropped);
    return o;
}

void model_logs_route(conn_t *c, request_t *r, const route_args_t *a)
{
    char name[256];
    if (a->len[0] >= sizeof name) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%.100s\"", a->arg[0]);
        return;
    }
    memcpy(name, a->arg[0], a->len[0]);
    name[a->len[0]] = '\0';
    model_t *m = model_find(c->core, name);
    if (!m) {
        conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model named \"%s\"", name);
        return;
    }
    const char *target = r->head + r->msg.target.off;
    const char *qm = memchr(target, '?', r->msg.target.len);
    const char *q = qm ? qm + 1 : "";
    size_t qn = qm ? r->msg.target.len - (size_t)(qm + 1 - target) : 0;
    uint64_t n = MODEL_LOGS_DEFAULT_LINES, after = 0;
    int has_n = query_u64(q, qn, "lines", &n), has_after = query_u64(q, qn, "after", &after);
    if (has_n < 0 || has_after < 0 || (has_n && n == 0)) {
        conn_respond_error(c, 400, "bad_request", m->name, -1, false,
                           "query: lines=N (1 or more) and after=SEQ (a cursor) take decimal numbers");
        return;
    }
    const line_ring_t *ring = &m->logs;
    uint64_t first_kept = line_ring_first_seq(ring), next = ring->next_seq;
    uint64_t from, to, missed = 0;
    if (has_after) {
        if (after + 1 < first_kept)
            missed = first_kept - after - 1;
        from = after + 1 > first_kept ? after + 1 : first_kept;
        to = from + n < next ? from + n : next;
    } else {
        to = next;
        from = next - first_kept > n ? next - n : first_kept;
    }
    uint64_t cursor = has_after ? (after < next ? after : next - 1) : next - 1;
    cJSON *o = render(m, from, to, cursor, missed);
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) {
        conn_respond_error(c, 500, "internal", m->name, -1, false, "out of memory");
        return;
    }
    conn_respond(c, 200, "application/json", s, strlen(s), "Cache-Control: no-store\r\n");
    free(s);
}
