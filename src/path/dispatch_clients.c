/* dispatch_clients: limits.per_client on the request path. See dispatch_clients.h. */
#include "path/dispatch_clients.h"

#include <stddef.h>
#include <stdio.h>

#include "common/log.h"
#include "core/model.h"
#include "core/request.h"
#include "net/conn.h"
#include "policy/client_limit.h"

static client_table_t g_table;
static bool g_table_made;
static uint64_t g_refused;

static request_t *request_of(const queue_entry_t *e)
{
    return (request_t *)((char *)e - offsetof(request_t, qe));
}

static const config_t *cfg_of(const request_t *r) { return r->conn->core->cfg; }

static client_table_t *table(const config_t *cfg)
{
    if (!g_table_made) {
        g_table_made = true;
        if (client_table_init(&g_table, cfg->per_client.max_clients) != 0)
            log_event(LOG_ERROR, "client_table_failed", "max_clients=%u", cfg->per_client.max_clients);
    }
    return &g_table;
}

static int retry_after(const client_rec_t *rec, unsigned max_in_flight)
{
    unsigned s = 1 + rec->queued / (max_in_flight ? max_in_flight : 1);
    return s > 60 ? 60 : (int)s;
}

/* The client key of r on c: a job attempt's submitter under key: token, else from the head. */
static void request_key(const conn_t *c, const request_t *r, const config_t *cfg, char key[CLIENT_KEY_MAX])
{
    if (cfg->per_client.key == CLIENT_KEY_TOKEN && c->client_key[0]) /* a job attempt's submitter */
        snprintf(key, CLIENT_KEY_MAX, "%s", c->client_key);
    else
        client_key((enum client_key_kind)cfg->per_client.key, cfg->per_client.header, r->head, &r->msg, c->peer,
                   key);
}

/* 429: every record is busy with another client (limits.per_client.max_clients). */
static void refuse_table_full(conn_t *c, model_t *m)
{
    g_refused++;
    conn_respond_error(c, 429, "client_limit", m->name, 1, false,
                       "%u clients already have requests queued or running (limits.per_client.max_clients)",
                       g_table.cap);
}

/* 429: the client already has max_queued requests queued. */
static void refuse_queued(conn_t *c, const request_t *r, model_t *m, const client_rec_t *rec)
{
    const config_t *cfg = c->core->cfg;
    g_refused++;
    log_event(LOG_INFO, "client_limit", "request_id=%s model=%s client=%s queued=%u in_flight=%u", r->id, m->name,
              rec->key, rec->queued, rec->in_flight);
    conn_respond_error(c, 429, "client_limit", m->name, retry_after(rec, cfg->per_client.max_in_flight), false,
                       "client %s already has %u requests queued (limits.per_client.max_queued)", rec->key,
                       rec->queued);
}

bool dispatch_clients_admit(conn_t *c, request_t *r, model_t *m)
{
    const config_t *cfg = c->core->cfg;
    if (!cfg->per_client.on)
        return true;
    char key[CLIENT_KEY_MAX];
    request_key(c, r, cfg, key);
    client_rec_t *rec = client_get(table(cfg), key, core_now());
    if (!rec) {
        refuse_table_full(c, m);
        return false;
    }
    if (rec->queued >= cfg->per_client.max_queued) {
        refuse_queued(c, r, m, rec);
        return false;
    }
    r->client = rec;
    r->qe.flow = &rec->flow;
    return true;
}

bool dispatch_clients_head_ok(conn_t *c, request_t *r, model_t *m)
{
    const config_t *cfg = c->core->cfg;
    if (!cfg->per_client.on)
        return true;
    char key[CLIENT_KEY_MAX];
    request_key(c, r, cfg, key);
    const client_table_t *t = table(cfg);
    const client_rec_t *rec = client_peek(t, key);
    if (!rec && !client_has_room(t)) {
        refuse_table_full(c, m);
        return false;
    }
    if (rec && rec->queued >= cfg->per_client.max_queued) {
        refuse_queued(c, r, m, rec);
        return false;
    }
    return true;
}

void dispatch_clients_queued(request_t *r)
{
    client_rec_t *rec = r->client;
    if (!rec || r->client_queued)
        return;
    rec->queued++;
    r->client_queued = true;
    client_touch(&g_table, rec);
}

void dispatch_clients_dispatched(request_t *r)
{
    client_rec_t *rec = r->client;
    if (!rec)
        return;
    if (r->client_queued && rec->queued)
        rec->queued--;
    r->client_queued = false;
    if (!r->client_in_flight)
        rec->in_flight++;
    r->client_in_flight = true;
    client_touch(&g_table, rec);
}

/* A request of rec left a worker: if rec was at its cap, the models where it has requests
 * waiting may run one now. */
static void left_worker(request_t *r, client_rec_t *rec)
{
    bool was_capped = rec->in_flight >= cfg_of(r)->per_client.max_in_flight;
    if (rec->in_flight)
        rec->in_flight--;
    r->client_in_flight = false;
    if (!was_capped)
        return;
    list_foreach(it, &rec->flow.heads) {
        request_t *q = request_of(queue_flow_head_of(it));
        if (q->model)
            model_schedule_pump(q->model);
    }
}

void dispatch_clients_requeued(request_t *r)
{
    client_rec_t *rec = r->client;
    if (!rec)
        return;
    if (r->client_in_flight)
        left_worker(r, rec);
    if (!r->client_queued)
        rec->queued++;
    r->client_queued = true;
    client_touch(&g_table, rec);
}

void dispatch_clients_ended(request_t *r)
{
    client_rec_t *rec = r->client;
    if (!rec)
        return;
    if (r->client_queued && rec->queued)
        rec->queued--;
    r->client_queued = false;
    if (r->client_in_flight)
        left_worker(r, rec);
    r->client = NULL;
    r->qe.flow = NULL;
    client_touch(&g_table, rec);
}

bool dispatch_clients_may_run(const queue_entry_t *e, void *ctx)
{
    (void)ctx;
    const request_t *r = request_of(e);
    const client_rec_t *rec = r->client;
    return !rec || rec->in_flight < cfg_of(r)->per_client.max_in_flight;
}

void dispatch_clients_stats(const config_t *cfg, dispatch_clients_stats_t *out)
{
    out->on = cfg->per_client.on;
    out->tracked = client_count(&g_table);
    out->busy = g_table.recs ? client_busy_count(&g_table) : 0;
    out->max_clients = g_table.recs ? g_table.cap : cfg->per_client.max_clients;
    out->refused = g_refused;
    out->evicted = g_table.evicted;
}
