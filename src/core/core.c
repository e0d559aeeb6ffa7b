/*
 * core: the shared state, its counters, its events and the deferred-work queue.
 * See core.h for the rules.
 *
 * The deferred queue runs in the check phase, right after each turn's I/O callbacks, so a
 * request that finishes and the queue it unblocks are handled in the same loop turn without
 * forcing a zero-timeout poll. Work scheduled outside I/O callbacks (timers, the check phase
 * itself) starts the idle handle so that the next poll does not block.
 */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include "common/check.h"
#include "common/log.h"
#include "core/model.h"

static uv_loop_t *g_clock_loop; /* the loop whose cached time core_now reads */

uint64_t core_now(void)
{
    return g_clock_loop ? uv_now(g_clock_loop) : uv_hrtime() / 1000000;
}

static void run_deferred(core_t *c);

static void on_check(uv_check_t *h)
{
    core_t *c = h->data;
    c->in_io = false;
    run_deferred(c);
}

static void on_prepare(uv_prepare_t *h)
{
    core_t *c = h->data;
    c->in_io = true;
}

static void on_idle(uv_idle_t *h)
{
    run_deferred(h->data);
}

static void run_list(list_t *pending)
{
    /* items scheduled while this batch runs go to the next turn */
    list_t batch;
    list_init(&batch);
    while (!list_empty(pending)) {
        list_t *it = pending->next;
        list_remove(it);
        list_insert_tail(&batch, it);
    }
    while (!list_empty(&batch)) {
        list_t *it = batch.next;
        list_remove(it);
        core_defer_t *d = list_entry(it, core_defer_t, link);
        d->fn(d);
    }
}

static void run_deferred(core_t *c)
{
    run_list(&c->deferred);
    run_list(&c->graveyard);
    if (list_empty(&c->deferred) && list_empty(&c->graveyard))
        uv_idle_stop(&c->idle);
    else
        uv_idle_start(&c->idle, on_idle);
}

void core_init(core_t *c, uv_loop_t *loop, config_t *cfg)
{
    c->loop = loop;
    g_clock_loop = loop;
    c->cfg = config_ref(cfg);
    list_init(&c->models);
    list_init(&c->conns);
    list_init(&c->deferred);
    list_init(&c->graveyard);
    c->started_ms = uv_now(loop);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->started_wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    uv_idle_init(loop, &c->idle);
    c->idle.data = c;
    uv_idle_start(&c->idle, on_idle); /* the first turn runs what the start scheduled */
    uv_check_init(loop, &c->check);
    c->check.data = c;
    uv_check_start(&c->check, on_check);
    uv_unref((uv_handle_t *)&c->check);
    uv_prepare_init(loop, &c->prepare);
    c->prepare.data = c;
    uv_prepare_start(&c->prepare, on_prepare);
    uv_unref((uv_handle_t *)&c->prepare);
    unsigned char rnd[(CORE_JOB_SECRET_SIZE - 1) / 2];
    if (getrandom(rnd, sizeof rnd, 0) == (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(c->job_secret + 2 * i, 3, "%02x", rnd[i]);
}

void core_close(core_t *c)
{
    /* only frees: deferred work (pumps) must not start anything while the loop ends */
    while (!list_empty(&c->graveyard))
        run_list(&c->graveyard);
    config_unref(c->cfg);
    c->cfg = NULL;
    g_clock_loop = NULL;
}

void core_set_config(core_t *c, config_t *cfg)
{
    config_t *old = c->cfg;
    c->cfg = config_ref(cfg);
    core_emit(c, CORE_EV_RELOADED, cfg);
    config_unref(old);
}

unsigned core_queued_total(const core_t *c)
{
    unsigned n = 0;
    list_foreach(it, &c->models) n += (unsigned)list_entry(it, model_t, link)->queue.depth;
    return n;
}

unsigned core_in_flight_total(const core_t *c)
{
    unsigned n = 0;
    list_foreach(it, &c->models) n += list_entry(it, model_t, link)->in_flight;
    return n;
}

void core_count_request(core_t *c) { c->requests_total++; }

void core_retry_begin(core_t *c)
{
    c->retries_in_flight++;
    c->retries_total++;
    if (c->retries_in_flight > c->retries_peak)
        c->retries_peak = c->retries_in_flight;
}

void core_retry_refused(core_t *c) { c->retries_refused++; }

void core_retry_end(core_t *c)
{
    CHECK_IF(c->retries_in_flight == 0);
    if (c->retries_in_flight)
        c->retries_in_flight--;
}

void core_conn_added(core_t *c, list_t *link)
{
    list_insert_tail(&c->conns, link);
    c->n_conns++;
}

void core_conn_removed(core_t *c, list_t *link)
{
    BUG_ON(c->n_conns == 0);
    list_remove(link);
    c->n_conns--;
}

void core_conn_reserve(core_t *c, bool on)
{
    if (on) {
        c->n_reserve_conns++;
        c->counts[CORE_CNT_RESERVE_ACCEPTED]++;
        return;
    }
    CHECK_IF(c->n_reserve_conns == 0);
    if (c->n_reserve_conns)
        c->n_reserve_conns--;
}

void core_count(core_t *c, enum core_counter k)
{
    if ((unsigned)k < CORE_COUNTERS)
        c->counts[k]++;
}

const char *core_counter_name(enum core_counter k)
{
    static const char *const names[CORE_COUNTERS] = {
        [CORE_CNT_HEADER_TIMEOUT] = "header",   [CORE_CNT_BODY_TIMEOUT] = "body",
        [CORE_CNT_SEND_TIMEOUT] = "send",       [CORE_CNT_RESERVE_ACCEPTED] = "reserve_accepted",
        [CORE_CNT_RESERVE_REFUSED] = "reserve_refused", [CORE_CNT_CONN_REFUSED] = "refused",
        [CORE_CNT_LOCAL_PROXY] = "proxy",       [CORE_CNT_LOCAL_HEALTH] = "health",
        [CORE_CNT_LOCAL_HOOK] = "hook",         [CORE_CNT_GATE_FAIL_OPEN] = "gate_fail_open",
    };
    return (unsigned)k < CORE_COUNTERS ? names[k] : "?";
}

void core_requeue(core_t *c, request_t *r, const char *why)
{
    BUG_ON(!c->requeue);
    c->requeue(r, why);
}

void core_note_event(core_t *c, const char *fmt, ...)
{
    core_note_t *e = &c->notes[c->notes_next];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
    c->notes_next = (c->notes_next + 1) % CORE_EVENTS_KEPT;
    if (c->notes_count < CORE_EVENTS_KEPT)
        c->notes_count++;
}

int core_listen(core_t *c, enum core_event ev, core_listener_fn fn, void *ctx)
{
    if (c->n_listeners >= CORE_LISTENERS_MAX || ev >= CORE_EV_COUNT)
        return -1;
    c->listeners[c->n_listeners].ev = ev;
    c->listeners[c->n_listeners].fn = fn;
    c->listeners[c->n_listeners].ctx = ctx;
    c->n_listeners++;
    return 0;
}

void core_emit(core_t *c, enum core_event ev, void *subject)
{
    for (unsigned i = 0; i < c->n_listeners; i++)
        if (c->listeners[i].ev == ev)
            c->listeners[i].fn(c->listeners[i].ctx, ev, subject);
}

void core_defer_init(core_defer_t *d, void (*fn)(core_defer_t *))
{
    list_init(&d->link);
    d->fn = fn;
}

static void schedule(core_t *c, list_t *queue, core_defer_t *d)
{
    if (list_linked(&d->link))
        return;
    list_insert_tail(queue, &d->link);
    /* from an I/O callback the check phase follows in this turn; from anywhere else keep
     * the next poll from blocking */
    if (!c->in_io && !uv_is_active((uv_handle_t *)&c->idle))
        uv_idle_start(&c->idle, on_idle);
}

void core_defer(core_t *c, core_defer_t *d) { schedule(c, &c->deferred, d); }

void core_defer_free(core_t *c, core_defer_t *d) { schedule(c, &c->graveyard, d); }

void core_defer_cancel(core_defer_t *d)
{
    if (list_linked(&d->link))
        list_remove(&d->link);
}

bool core_defer_pending(const core_defer_t *d) { return list_linked(&d->link); }
