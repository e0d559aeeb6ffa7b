/*
 * dispatch: admission into a model's queue, the pump that hands queued requests to free
 * instances, retries back into the queue, deadlines (the queue's, and the end-to-end
 * total_deadline while queued and while running), and the accounting of ended requests.
 * See dispatch.h.
 *
 * Deadlines: the conn's owner timer holds the earlier of the queue deadline and the total
 * deadline while a request is queued (504 deadline_exceeded, stage queued), and the total
 * deadline alone from its dispatch on (stage running: its owner lets go of it through its
 * ops' cancel, which closes the worker's connection and releases the slot and the
 * reservation, then 504, or a cut connection once answer bytes went out). Each expiry is
 * counted once, by stage, in the model's deadline_expiries.
 */
#include "path/dispatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/units.h"
#include "core/mem_budget.h"
#include "core/model.h"
#include "core/request.h"
#include "net/conn.h"
#include "path/dispatch_clients.h"
#include "path/proxy.h"
#include "path/proxy_upgrade.h"
#include "path/verdict.h"
#include "sched/scheduler.h"
#include "workers/instance.h"
#include "workers/model_state.h"
#include "workers/park_evict.h"
#include "workers/supervisor.h"

static request_t *request_of(queue_entry_t *e) { return (request_t *)((char *)e - offsetof(request_t, qe)); }

/* ---- a queued request's answer belongs to the queue ------------------------------------ */

static void queued_cancel(request_t *r)
{
    model_t *m = r->model;
    if (queue_contains(&r->qe)) {
        queue_remove(&m->queue, &r->qe);
        model_schedule_pump(m);
    }
}

static const request_ops_t queued_ops = {.cancel = queued_cancel};

enum { STAGE_QUEUED = 0, STAGE_RUNNING = 1 };

/* The earlier of r's queue deadline and its total deadline (absolute; UINT64_MAX: none). */
static uint64_t first_deadline(const request_t *r)
{
    uint64_t q = r->deadline_ms ? r->deadline_ms : UINT64_MAX;
    uint64_t t = r->total_deadline_ms ? r->total_deadline_ms : UINT64_MAX;
    return q < t ? q : t;
}

/* A deadline passed for r (nothing sent yet): counted by stage, answered 504 with it. */
static void answer_expired(conn_t *c, request_t *r, int stage, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer_expired(conn_t *c, request_t *r, int stage, const char *fmt, ...)
{
    model_t *m = r->model;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->deadline_expiries[stage]++;
    r->error_stage = stage == STAGE_QUEUED ? "queued" : "running";
    conn_respond_error(c, 504, "deadline_exceeded", m->name, -1, false, "model %s: %s", m->name, msg);
}

static void on_queue_deadline(conn_t *c)
{
    request_t *r = c->req;
    if (!r || r->state != REQ_QUEUED)
        return;
    model_t *m = r->model;
    queue_remove(&m->queue, &r->qe);
    request_set_ops(r, NULL);
    model_schedule_pump(m);
    bool total = r->total_deadline_ms && r->total_deadline_ms == first_deadline(r);
    if (total)
        answer_expired(c, r, STAGE_QUEUED, "total deadline of %llu ms passed after %llu ms in queue",
                       (unsigned long long)(r->total_deadline_ms - r->t_arrival),
                       (unsigned long long)request_queue_ms(r));
    else
        answer_expired(c, r, STAGE_QUEUED, "deadline passed after %llu ms in queue",
                       (unsigned long long)request_queue_ms(r));
}

static void enqueued(request_t *r)
{
    uint64_t now = core_now(), at = first_deadline(r);
    request_set_state(r, REQ_QUEUED);
    request_set_ops(r, &queued_ops);
    if (at != UINT64_MAX)
        conn_set_timer(r->conn, at > now ? at - now : 1, on_queue_deadline);
}

/* The total deadline passed while the request ran (dispatched: upstream, held answer,
 * validation): its owner lets go of it (the worker's connection closed, the slot and the
 * reservation released), then 504 stage running, or, once answer bytes reached the client,
 * the connection is cut. A request back in the queue has the queue's timer instead. */
static void on_total_deadline(conn_t *c)
{
    request_t *r = c->req;
    if (!r || !r->model || r->state == REQ_QUEUED || r->state == REQ_DONE || r->state == REQ_LOCAL)
        return;
    model_t *m = r->model;
    uint64_t now = core_now();
    bool streamed = r->status != 0; /* the answer's head went to the client */
    unsigned long long total = r->total_deadline_ms - r->t_arrival;
    unsigned long long ran = r->t_dispatched && now > r->t_dispatched ? now - r->t_dispatched : 0;
    log_event(LOG_WARN, "total_deadline_passed",
              "request_id=%s model=%s stage=%s while=%s total_ms=%llu run_ms=%llu streamed=%B", r->id, m->name,
              "running", request_state_name(r->state), total, ran, streamed);
    if (r->ops && r->ops->cancel)
        r->ops->cancel(r);
    request_set_ops(r, NULL);
    if (streamed) {
        m->deadline_expiries[STAGE_RUNNING]++;
        r->outcome = "deadline_exceeded"; /* metrics: the stream was cut */
        conn_abort(c);
        return;
    }
    answer_expired(c, r, STAGE_RUNNING, "total deadline of %llu ms passed while running (%llu ms on the worker)",
                   total, ran);
}

/* Every queued request of m gets `status` (model failed: 503; never fits: 422). */
static void fail_queued(model_t *m, int status, const char *code)
{
    uint64_t now = core_now();
    queue_entry_t *e;
    while ((e = queue_pop(&m->queue, now)) != NULL) {
        request_t *r = request_of(e);
        request_set_ops(r, NULL);
        char why[512];
        if (status == 422 && sched_never_fits(m, why, sizeof why)) {
            conn_respond_error(r->conn, status, code, m->name, -1, false, "%s", why);
            continue;
        }
        if (m->failed) {
            model_failed_text(m, why, sizeof why);
            conn_respond_error(r->conn, status, code, m->name, status == 503 ? 30 : -1, false, "%s", why);
            continue;
        }
        conn_respond_error(r->conn, status, code, m->name, status == 503 ? 30 : -1, false, "model %s: %s", m->name,
                           m->failed ? m->failed_reason : code);
    }
}

/* ---- admission ------------------------------------------------------------------------- */

/* Seconds, rounded up and bounded 1..RETRY_AFTER_MAX_S, of ms > 0. */
#define RETRY_AFTER_MAX_S 3600
static int retry_after_s(uint64_t ms)
{
    uint64_t s = (ms + 999) / 1000;
    return s < 1 ? 1 : s > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : (int)s;
}

/* A full queue's Retry-After: when a new request would start (sched_queue_eta_ms: the queue
 * ahead and the model's turn on its card, from the learned times); before anything is
 * learned (an estimate of 0), the queue ahead times a nominal second each. */
static int retry_after_for(const model_t *m)
{
    uint64_t eta = sched_queue_eta_ms(m);
    if (eta > 0)
        return retry_after_s(eta);
    size_t depth = m->queue.depth;
    unsigned slots = m->cfg->concurrency * (m->n_instances ? m->n_instances : 1);
    int s = (int)(depth / (slots ? slots : 1)) + 1;
    return s > 300 ? 300 : s;
}

/* A duration header (X-Vramd-Deadline, X-Vramd-Total-Deadline) into *ms: 1 when absent, 0
 * when read, -1 when malformed or 0 (answered 400, naming the header). */
static int duration_header(conn_t *c, request_t *r, model_t *m, const char *name, uint64_t *ms)
{
    const http1_header_t *h = http1_find_header(r->head, &r->msg, name);
    if (!h)
        return 1;
    char tmp[64];
    if (h->value.len >= sizeof tmp) {
        conn_respond_error(c, 400, "bad_request", m->name, -1, false, "bad %s: over %zu bytes", name, sizeof tmp - 1);
        return -1;
    }
    memcpy(tmp, r->head + h->value.off, h->value.len);
    tmp[h->value.len] = '\0';
    if (units_parse_duration_ms(tmp, ms) != 0 || *ms == 0) {
        conn_respond_error(c, 400, "bad_request", m->name, -1, false,
                           "bad %s \"%s\": expected a duration like 30s or 500ms", name, tmp);
        return -1;
    }
    return 0;
}

/* A client's asked bound, capped at `cap` (logged deadline_capped); a job attempt's is not. */
static uint64_t capped(conn_t *c, request_t *r, model_t *m, const char *bound, uint64_t asked, uint64_t cap)
{
    if (asked <= cap || c->job_attempt)
        return asked;
    log_event(LOG_INFO, "deadline_capped", "request_id=%s model=%s bound=%s asked_ms=%llu deadline_ms=%llu", r->id,
              m->name, bound, (unsigned long long)asked, (unsigned long long)cap);
    return cap;
}

/* X-Vramd-Priority, X-Vramd-Deadline and X-Vramd-Total-Deadline; false when one is malformed
 * (answered 400). A client's deadline is capped at the model's max_client_deadline (by
 * default its deadline): a client cannot hold a queue slot longer than the operator allows;
 * its total deadline at the same, or at the model's total_deadline when that is longer. A
 * job attempt's deadline is the time left to the job's own (checked at submission, at most
 * 30 days); the model's total_deadline does not bound job attempts (nobody waits on their
 * connection), only their own header would. *total: 0 = none. */
static bool read_request_headers(conn_t *c, request_t *r, model_t *m, uint64_t *deadline, uint64_t *total)
{
    const model_config_t *mc = m->cfg;
    r->priority = mc->priority;
    const http1_header_t *h = http1_find_header(r->head, &r->msg, "X-Vramd-Priority");
    if (h) {
        const char *v = r->head + h->value.off;
        if (h->value.len != 1 || v[0] < '0' || v[0] > '9') {
            conn_respond_error(c, 400, "bad_request", m->name, -1, false, "X-Vramd-Priority must be a digit 0..9");
            return false;
        }
        r->priority = v[0] - '0';
    }
    uint64_t cap = mc->max_client_deadline_ms > mc->deadline_ms ? mc->max_client_deadline_ms : mc->deadline_ms;
    *deadline = mc->deadline_ms;
    int rc = duration_header(c, r, m, "X-Vramd-Deadline", deadline);
    if (rc < 0)
        return false;
    if (rc == 0)
        *deadline = capped(c, r, m, "queue", *deadline, cap);
    *total = c->job_attempt ? 0 : mc->total_deadline_ms;
    rc = duration_header(c, r, m, "X-Vramd-Total-Deadline", total);
    if (rc < 0)
        return false;
    if (rc == 0)
        *total = capped(c, r, m, "total", *total, cap > mc->total_deadline_ms ? cap : mc->total_deadline_ms);
    return true;
}

/* What is left of a total bound of `total` ms counted from r's arrival (UINT64_MAX: none). */
static uint64_t total_left(const request_t *r, uint64_t total)
{
    if (!total)
        return UINT64_MAX;
    uint64_t spent = core_now() - r->t_arrival;
    return total > spent ? total - spent : 0;
}

/* GPU checks: NVML up, can fit at all, first level that can ever fit (on the whole request
 * only: starting at that level rewrites the body). False when answered. */
static bool check_gpu_fit(conn_t *c, request_t *r, model_t *m, bool head_only)
{
    if (!sched_model_uses_gpu(m->cfg))
        return true;
    char why[300];
    if (!sched_gpu_ok()) {
        conn_respond_error(c, 503, "gpu_unavailable", m->name, 5, false, "%s", sched_gpu_error());
        return false;
    }
    if (sched_never_fits(m, why, sizeof why)) {
        conn_respond_error(c, 422, "cannot_fit", m->name, -1, false, "%s", why);
        return false;
    }
    if (head_only)
        return true;
    int first = sched_first_possible_level(m);
    if (first > 0) {
        /* the request as sent can never fit this host's GPUs: it would OOM at every level
         * below `first`, so it starts there */
        char lwhy[160];
        if (verdict_prepare_level(r, (unsigned)first, lwhy, sizeof lwhy) == 0) {
            log_event(LOG_INFO, "degrade_never_fits", "request_id=%s model=%s level=%d", r->id, m->name, first);
            model_note_degraded(m, (unsigned)first);
        }
    }
    return true;
}

/* The predicted start must meet the deadline (degrade.when: to_fit may start it lower
 * now). False when answered 503 deadline_unmeetable. On the head alone a level that fits
 * now lets the request go on: whether its body can be rewritten to it is known later. */
static bool check_predicted_start(conn_t *c, request_t *r, model_t *m, uint64_t deadline, bool head_only)
{
    const model_config_t *mc = m->cfg;
    uint64_t predicted = sched_predicted_start_ms(m);
    if (predicted > deadline && mc->degrade.when == DEGRADE_TO_FIT && mc->degrade.n_ladder > 0) {
        unsigned level = sched_level_fitting_now(m);
        char why[160];
        if (level > 0 && head_only)
            return true;
        if (level > 0 && verdict_prepare_level(r, level, why, sizeof why) == 0) {
            log_event(LOG_INFO, "degrade_to_fit", "request_id=%s model=%s level=%u predicted_ms=%llu deadline_ms=%llu",
                      r->id, m->name, level, (unsigned long long)predicted, (unsigned long long)deadline);
            model_note_degraded(m, level);
            predicted = 0;
        }
    }
    if (predicted <= deadline)
        return true;
    /* retry once the queue's expected wait would meet the deadline (the visible queue's
     * figure when it says so, else the admission's prediction) */
    uint64_t eta = sched_queue_eta_ms(m), over = eta > deadline ? eta - deadline : predicted - deadline;
    conn_respond_error(c, 503, "deadline_unmeetable", m->name, retry_after_s(over), false,
                       "model %s: predicted start in %llu ms is past the deadline of %llu ms", m->name,
                       (unsigned long long)predicted, (unsigned long long)deadline);
    m->deadline_rejections++;
    return false;
}

/* Every admission check of r for m, in the order that picks the answer: draining, model
 * failed, the priority and deadline headers, GPU fit, predicted start, the client's cap,
 * queue room. head_only: on the head alone, changing nothing the body could still undo (no
 * degradation level prepared, no client record made). False when answered. */
static bool admission_checks(conn_t *c, request_t *r, model_t *m, bool head_only, uint64_t *deadline,
                             uint64_t *total)
{
    core_t *core = c->core;
    const model_config_t *mc = m->cfg;
    if (core->draining) {
        conn_respond_error(c, 503, "draining", m->name, 5, false, "vramd is draining");
        return false;
    }
    if (m->failed) {
        char text[512];
        model_failed_text(m, text, sizeof text);
        conn_respond_error(c, 503, "model_failed", m->name, 30, false, "%s", text);
        return false;
    }
    if (!read_request_headers(c, r, m, deadline, total) || !check_gpu_fit(c, r, m, head_only))
        return false;
    /* the start must also come before the total bound (a run takes longer still) */
    uint64_t left = total_left(r, *total);
    if (!check_predicted_start(c, r, m, left < *deadline ? left : *deadline, head_only))
        return false;
    if (!(head_only ? dispatch_clients_head_ok(c, r, m) : dispatch_clients_admit(c, r, m)))
        return false;
    if (m->queue.depth >= mc->queue_max) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false,
                           "model %s: %u requests already queued", m->name, mc->queue_max);
        return false;
    }
    if (core_queued_total(core) >= core->cfg->limits.queue_max) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false, "%u requests already queued in all",
                           core->cfg->limits.queue_max);
        return false;
    }
    return true;
}

bool dispatch_head_refused(conn_t *c, request_t *r, model_t *m)
{
    if (!m) {
        /* the body names the model: only what refuses every model is known */
        if (!c->core->draining)
            return false;
        conn_respond_error(c, 503, "draining", NULL, 5, false, "vramd is draining");
        return true;
    }
    r->model = m; /* a refusal is counted against m, as after the body */
    uint64_t deadline, total;
    if (!admission_checks(c, r, m, true, &deadline, &total))
        return true;
    r->model = NULL; /* routed again once the body is in (a reload may remove m meanwhile) */
    r->priority = 0;
    return false;
}

void dispatch_admit(conn_t *c, request_t *r, model_t *m, size_t strip_len)
{
    if (r->msg.upgrade) {
        proxy_upgrade_admit(c, r, m, strip_len); /* no queue, no slot (path/proxy_upgrade.c) */
        return;
    }
    const model_config_t *mc = m->cfg;
    r->model = m;
    r->strip_len = mc->strip ? strip_len : 0;
    uint64_t deadline, total;
    if (!admission_checks(c, r, m, false, &deadline, &total))
        return;
    uint64_t now = core_now();
    r->t_queued = now;
    r->deadline_ms = now + deadline;
    if (total) /* saturated: an uncapped bound (a job attempt's header) may be any duration */
        r->total_deadline_ms = total < UINT64_MAX - r->t_arrival ? r->t_arrival + total : UINT64_MAX - 1;
    m->queue.max = mc->queue_max;
    if (queue_push(&m->queue, &r->qe, r->priority, now) != 0) {
        conn_respond_error(c, 503, "queue_full", m->name, retry_after_for(m), false, "model %s: queue full", m->name);
        return;
    }
    m->requests_total++;
    sched_note_arrival(m);
    dispatch_clients_queued(r);
    enqueued(r);
    dispatch_pump(&m->pump);
}

/* ---- retries --------------------------------------------------------------------------- */

void dispatch_requeue(request_t *r, const char *why)
{
    conn_t *c = r->conn;
    model_t *m = r->model;
    uint64_t now = core_now();
    if (now >= first_deadline(r)) {
        answer_expired(c, r, STAGE_QUEUED, "%s passed before a retry (%s) could start",
                       now >= r->total_deadline_ms && r->total_deadline_ms ? "total deadline" : "deadline", why);
        return;
    }
    if (m->failed || c->core->draining) {
        conn_respond_error(c, 503, m->failed ? "model_failed" : "draining", m->name, 5, false,
                           "model %s: cannot retry (%s)", m->name, m->failed ? m->failed_reason : "draining");
        return;
    }
    log_event(LOG_INFO, "request_retry", "request_id=%s model=%s reason=%s level=%u attempts=%u", r->id, m->name, why,
              r->level, r->attempts);
    r->t_dispatched = 0;
    queue_push_again(&m->queue, &r->qe, r->priority, r->t_queued);
    dispatch_clients_requeued(r);
    enqueued(r);
    model_schedule_pump(m);
}

/* ---- the pump -------------------------------------------------------------------------- */

/* The invariants model.h states, checked after each pump in debug builds (the sanitizer
 * build the tests run): a model's in-flight count is the sum of its instances', none over
 * its concurrency, and its queue never holds more than the queue's depth says. */
static void check_model(const model_t *m)
{
#ifdef VRAMD_DEBUG
    unsigned sum = 0;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        CHECK_IF(in->path.in_flight > m->cfg->concurrency && !in->life.stop_requested);
        sum += in->path.in_flight;
    }
    CHECK_IF(sum > m->in_flight); /* instances that left the list may still hold slots */
    CHECK_IF(m->queue.depth > 0 && queue_peek(&m->queue, core_now()) == NULL);
#else
    (void)m;
#endif
}

/* The READY instance with a free slot and the fewest requests in flight, or NULL. */
static instance_t *free_instance(model_t *m)
{
    instance_t *best = NULL;
    uint64_t now = core_now();
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        /* not one that is stopping, suspect (its connection just broke: a retry must not
         * land on a dying worker before its exit is reaped) or ejected */
        if (!instance_usable(in, now) || in->path.in_flight >= m->cfg->concurrency)
            continue;
        if (in->memory.baseline_pending && sched_gpu_ok())
            continue; /* one NVML read away: its post-load baseline is being measured */
        if (!best || in->path.in_flight < best->path.in_flight)
            best = in;
    }
    return best;
}

/* Hand a queued request (already out of the queue) to an instance: it takes a slot. */
static void dispatch_to(request_t *r, instance_t *inst)
{
    model_t *m = inst->model;
    r->t_dispatched = core_now();
    if (r->total_deadline_ms) /* the queue's timer becomes the end-to-end bound's */
        conn_set_timer(r->conn, r->total_deadline_ms > r->t_dispatched ? r->total_deadline_ms - r->t_dispatched : 1,
                       on_total_deadline);
    else
        conn_stop_timer(r->conn);
    if (r->attempts == 0 && r->t_queued) /* metrics: queued -> first dispatch (the end listener counts the rest) */
        histogram_observe(&m->queue_wait_hist, (double)(r->t_dispatched - r->t_queued) / 1000.0);
    r->attempts++;
    inst->path.in_flight++;
    m->in_flight++;
    BUG_ON(inst->path.in_flight > m->cfg->concurrency);
    inst->path.requests_total++;
    inst->path.last_used_ms = r->t_dispatched;
    instance_keep_alive_stop(inst);
    r->instance = inst;
    r->gpu = inst->memory.gpu;
    dispatch_clients_dispatched(r);
    request_set_ops(r, NULL); /* the proxy sets its own */
    core_emit(m->core, CORE_EV_REQUEST_DISPATCHED, r);
    proxy_start(r, inst);
}

void dispatch_pump(core_defer_t *pump)
{
    model_t *m = list_entry(pump, model_t, pump);
    core_defer_cancel(&m->pump);
    supervisor_prepare(m);
    if (m->failed) {
        fail_queued(m, 503, "model_failed");
    } else {
        uint64_t now = core_now();
        while (m->queue.depth > 0) {
            instance_t *inst = free_instance(m);
            if (!inst)
                break;
            /* the next request whose client is under its in-flight cap (per_client) */
            queue_entry_t *e = queue_peek_if(&m->queue, now, dispatch_clients_may_run, NULL);
            if (!e)
                break; /* the rest wait for their clients' requests to end */
            request_t *r = request_of(e);
            if (!sched_admit(r, inst)) {
                sched_blocked(m, r, inst);
                break;
            }
            queue_take(&m->queue, e);
            dispatch_to(r, inst);
        }
        if (m->queue.depth == 0)
            sched_unblocked(m);
    }
    check_model(m);
    if (supervisor_tend(m) == PLACER_NEVER)
        fail_queued(m, 422, "cannot_fit");
}

/* ---- the end of a request --------------------------------------------------------------- */

/* Metrics: a request of a model ended (answered, or cancelled because its client left):
 * count its outcome, observe its duration and, if it never left the queue for a worker,
 * its queue wait. Admin calls on a model (REQ_LOCAL) are not model traffic. The event
 * comes before the request's state turns DONE. */
static void account(request_t *r)
{
    model_t *m = r->model;
    if (!m || r->state == REQ_LOCAL)
        return;
    const char *outcome = r->outcome;
    if (!outcome) {
        if (r->cancelled)
            outcome = "cancelled";
        else if (r->status >= 200 && r->status < 400)
            outcome = "ok";
        else if (r->status >= 400 && r->status < 500)
            outcome = "client_error";
        else if (r->status >= 500)
            outcome = "server_error";
        else
            outcome = "other";
    }
    model_note_outcome(m, outcome);
    if (!r->t_queued)
        return; /* refused at admission: counted above, no latency to speak of */
    uint64_t now = core_now();
    if (r->attempts == 0)
        histogram_observe(&m->queue_wait_hist, (double)(now > r->t_queued ? now - r->t_queued : 0) / 1000.0);
    histogram_observe(&m->duration_hist, (double)(now > r->t_arrival ? now - r->t_arrival : 0) / 1000.0);
}

static void on_request_ended(void *ctx, enum core_event ev, void *subject)
{
    core_t *core = ctx;
    request_t *r = subject;
    (void)ev;
    if (!r)
        return;
    account(r);
    CHECK_IF(queue_contains(&r->qe));
    dispatch_clients_ended(r);
    CHECK_IF(r->instance != NULL);
    /* every exit path released the reservation already; this is the last safety net */
    sched_book_request_release(r);
    if (r->is_retry)
        core_retry_end(core);
}

/* A reload may change limits.memory_budget. */
static void on_reloaded(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    (void)ev;
    mem_budget_configure(subject);
}

void dispatch_init(core_t *core)
{
    core_listen(core, CORE_EV_REQUEST_ENDED, on_request_ended, core);
    core_listen(core, CORE_EV_RELOADED, on_reloaded, core);
    mem_budget_configure(core->cfg); /* the host-memory budget for request buffers, logged */
}
