/*
 * proxy_gate: where a dispatched request enters the proxy (proxy_start). A request whose
 * worker's driver limit (gate/driver_limit.h) does not cover what is booked for it yet
 * waits here, with a cancel of its own (no upstream: a cancel only unlinks it and releases
 * its slot), until proxy_limit_applied for its instance, or its instance goes down (then it
 * is sent on and fails or retries as any request to a dead worker does). Everything else
 * goes on at once to proxy.c (proxy_start_attempt), and so does a request that would wait
 * when vramd is out of memory for its held_t (fail open: logged driver_limit_gate_skipped,
 * counted in vramd_gate_fail_open_total).
 *
 * Invariants: a held request is in g_held exactly once, its owner is its held_t, and it
 * holds its slot on inst (released by proxy.c's cancel or outcome, never here twice).
 */
#include <stdlib.h>

#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "path/proxy.h"
#include "path/proxy_int.h"
#include "gate/driver_limit.h"

typedef struct held {
    list_t link;
    request_t *req;
    instance_t *inst;
} held_t;

static list_t g_held = {&g_held, &g_held}; /* a self-linked head: empty */

static void held_cancel(request_t *r)
{
    held_t *h = r->owner;
    if (h) {
        list_remove(&h->link);
        free(h);
        r->owner = NULL;
    }
    proxy_cancel(r);
}

static const request_ops_t held_ops = {.cancel = held_cancel, .drained = NULL};

void proxy_limit_applied(instance_t *inst, bool any)
{
    list_foreach_safe(it, tmp, &g_held) {
        held_t *h = list_entry(it, held_t, link);
        if (h->inst != inst || (!any && !driver_limit_covers(inst)))
            continue;
        request_t *r = h->req;
        list_remove(&h->link);
        free(h);
        r->owner = NULL;
        proxy_start_attempt(r, inst, true);
    }
}

void proxy_start(request_t *req, instance_t *inst)
{
    if (!driver_limit_covers(inst)) {
        held_t *h = calloc(1, sizeof *h);
        if (h) {
            h->req = req;
            h->inst = inst;
            req->up = NULL;
            req->owner = h;
            request_set_ops(req, &held_ops);
            request_set_state(req, REQ_CONNECTING);
            list_insert_tail(&g_held, &h->link);
            return;
        }
        /* out of memory: sent on now, as without a limit (fail open), said and counted */
        core_count(inst->model->core, CORE_CNT_GATE_FAIL_OPEN);
        log_event(LOG_WARN, "driver_limit_gate_skipped", "request_id=%s model=%s instance=%u error=%s", req->id,
                  inst->model->name, inst->id, "out of memory");
    }
    proxy_start_attempt(req, inst, true);
}

/* An instance went down: its pooled connections closed, its held requests sent on. */
static void on_instance_down(void *ctx, enum core_event ev, void *subject)
{
    proxy_pool_close(ctx, ev, subject);
    proxy_limit_applied(subject, true);
}

void proxy_init(core_t *core)
{
    core_listen(core, CORE_EV_INSTANCE_DOWN, on_instance_down, NULL);
}
