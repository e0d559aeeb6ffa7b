/*
 * vramd: the daemon's lifecycle: start, listen, signals, reload, drain, stop.
 * See vramd.h for the lifecycle and invariants.
 */
#include "daemon/vramd.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "jobs/jobs.h"
#include "daemon/notify.h"
#include "net/conn.h"
#include "sched/scheduler.h"
#include "workers/process.h"
#include "workers/supervisor.h"

vramd_t *g_vramd;

uint64_t vramd_now(void)
{
    return g_vramd ? uv_now(g_vramd->loop) : uv_hrtime() / 1000000;
}

void vramd_note_event(vramd_t *d, const char *fmt, ...)
{
    vramd_event_t *e = &d->events[d->events_next];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
    d->events_next = (d->events_next + 1) % VRAMD_EVENTS_KEPT;
    if (d->events_count < VRAMD_EVENTS_KEPT)
        d->events_count++;
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

/* Deferred pumps run in the check phase, right after the turn's I/O callbacks, so a request
 * that finishes and the queue that it unblocks are handled in the same loop turn without
 * forcing a zero-timeout poll. Pumps scheduled by pumps run in the next turn, with the idle
 * handle keeping that turn's poll from blocking. */
static void on_pump_idle(uv_idle_t *h);

static void run_pending_pumps(vramd_t *d)
{
    /* Pumps may schedule further pumps; run each pending model once per turn. */
    list_t batch;
    list_init(&batch);
    while (!list_empty(&d->pump_pending)) {
        list_t *it = d->pump_pending.next;
        list_remove(it);
        list_insert_tail(&batch, it);
    }
    while (!list_empty(&batch)) {
        list_t *it = batch.next;
        list_remove(it);
        model_pump(list_entry(it, model_t, pump_link));
    }
    if (list_empty(&d->pump_pending))
        uv_idle_stop(&d->pump_idle);
    else
        uv_idle_start(&d->pump_idle, on_pump_idle);
}

static void on_pump_check(uv_check_t *h)
{
    vramd_t *d = h->data;
    d->in_io = false;
    run_pending_pumps(d);
}

static void on_io_mark(uv_prepare_t *h)
{
    vramd_t *d = h->data;
    d->in_io = true;
}

static void on_pump_idle(uv_idle_t *h)
{
    run_pending_pumps(h->data);
}

void vramd_wake_pumps(vramd_t *d)
{
    /* from an I/O callback the check phase follows in this turn; from anywhere else
     * (timers, pending callbacks, the check phase itself) keep the next poll from blocking */
    if (!d->in_io && !uv_is_active((uv_handle_t *)&d->pump_idle))
        uv_idle_start(&d->pump_idle, on_pump_idle);
}

static void on_connection(uv_stream_t *server, int status)
{
    vramd_t *d = server->data;
    if (status < 0) {
        log_event(LOG_WARN, "accept_failed", "error=%s", uv_strerror(status));
        return;
    }
    conn_accept(d, server);
}

static int start_listening(vramd_t *d, char *err, size_t errlen)
{
    const config_t *c = d->cfg;
    struct sockaddr_storage addr;
    int rc;
    const char *host = strcmp(c->listen_host, "localhost") == 0 ? "127.0.0.1" : c->listen_host;
    if (strchr(host, ':'))
        rc = uv_ip6_addr(host, c->listen_port, (struct sockaddr_in6 *)&addr);
    else
        rc = uv_ip4_addr(host, c->listen_port, (struct sockaddr_in *)&addr);
    if (rc == 0)
        rc = uv_tcp_init(d->loop, &d->listener);
    if (rc == 0) {
        d->listener.data = d;
        rc = uv_tcp_bind(&d->listener, (struct sockaddr *)&addr, 0);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&d->listener, 4096, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", c->listen_host, c->listen_port, uv_strerror(rc));
        return -1;
    }
    d->listening = true;
    return 0;
}

static void apply_config(vramd_t *d, config_t *cfg)
{
    log_configure((enum log_format)cfg->log_format, (enum log_level)cfg->log_level, 2);
    /* keep runtimes by name; create new ones; remove the rest */
    list_foreach(it, &d->models) list_entry(it, model_t, link)->removed = true;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const model_config_t *mc = &cfg->models[i];
        model_t *found = NULL;
        list_foreach(it, &d->models) {
            model_t *m = list_entry(it, model_t, link);
            if (strcmp(m->name, mc->name) == 0)
                found = m;
        }
        if (found)
            model_update_config(found, mc, cfg);
        else
            model_start_pinned(model_create(d, mc, cfg));
    }
    list_foreach_safe(it, tmp, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            model_remove(m);
    }
}

int vramd_reload(vramd_t *d, char *err, size_t errlen)
{
    notify_reloading();
    config_t *cfg = config_load(d->config_path, err, errlen);
    if (!cfg) {
        log_event(LOG_ERROR, "config_reload_failed", "path=%s error=%s", d->config_path, err);
        vramd_note_event(d, "config reload refused: %s", err);
        notify_reload_done(d, false);
        return -1;
    }
    if (strcmp(cfg->listen_host, d->cfg->listen_host) != 0 || cfg->listen_port != d->cfg->listen_port)
        log_event(LOG_WARN, "config_listen_unchanged", "reason=%s",
                  "a new listen address takes effect at the next start");
    config_t *old = d->cfg;
    d->cfg = cfg;
    apply_config(d, cfg);
    config_unref(old);
    log_event(LOG_INFO, "config_reloaded", "path=%s models=%zu", d->config_path, cfg->n_models);
    vramd_note_event(d, "config reloaded (%zu models)", cfg->n_models);
    notify_reload_done(d, true);
    return 0;
}

static void on_signal(uv_signal_t *s, int signum)
{
    vramd_t *d = s->data;
    if (signum == SIGHUP) {
        char err[CONFIG_ERR_MAX];
        vramd_reload(d, err, sizeof err);
        return;
    }
    vramd_drain(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void finish_stop(vramd_t *d)
{
    if (!d->stopping || d->stopped)
        return;
    d->stopped = true;
    /* every supervised instance is gone (their exits were reaped): let the loop end */
    log_event(LOG_INFO, "vramd_stopped", "exit_code=%d", d->exit_code);
    uv_stop(d->loop);
}

void vramd_check_drained(vramd_t *d)
{
    if (!d->draining)
        return;
    if (!d->stopping) {
        if (d->queued_total > 0 || d->in_flight_total > 0 || jobs_busy(d))
            return; /* jobs_busy: job attempts in flight finish and commit their results */
        d->stopping = true;
        log_event(LOG_INFO, "drain_done", "reason=%s", "no request queued or in flight");
        list_foreach_safe(it, tmp, &d->models) model_stop_all(list_entry(it, model_t, link), "drain");
    }
    bool any = false;
    list_foreach(it, &d->models) if (model_has_live_instances(list_entry(it, model_t, link))) any = true;
    if (!any)
        finish_stop(d);
}

static void on_final_timeout(uv_timer_t *t)
{
    vramd_t *d = t->data;
    log_event(LOG_WARN, "stop_forced", "workers_left=%zu", process_count());
    uv_stop(d->loop);
}

static void on_drain_deadline(uv_timer_t *t)
{
    vramd_t *d = t->data;
    if (!d->stopping) {
        log_event(LOG_WARN, "drain_timeout", "queued=%u in_flight=%u", d->queued_total, d->in_flight_total);
        list_foreach_safe(it, tmp, &d->conns) conn_abort(list_entry(it, conn_t, link));
        d->queued_total = 0;
        d->in_flight_total = 0;
        vramd_check_drained(d);
    }
    uint64_t longest = 1000;
    for (size_t i = 0; i < d->cfg->n_models; i++)
        if (d->cfg->models[i].stop_timeout_ms > longest)
            longest = d->cfg->models[i].stop_timeout_ms;
    uv_timer_start(&d->drain_timer, on_final_timeout, longest + 2000, 0);
}

void vramd_drain(vramd_t *d, const char *why)
{
    if (d->draining)
        return;
    d->draining = true;
    notify_stopping(d, why);
    log_event(LOG_INFO, "drain_started", "reason=%s queued=%u in_flight=%u", why, d->queued_total,
              d->in_flight_total);
    vramd_note_event(d, "draining (%s)", why);
    if (d->listening) {
        uv_close((uv_handle_t *)&d->listener, NULL);
        d->listening = false;
    }
    uv_timer_start(&d->drain_timer, on_drain_deadline, d->cfg->limits.drain_timeout_ms, 0);
    /* idle keep-alive connections: close them now */
    list_foreach_safe(it, tmp, &d->conns) {
        conn_t *c = list_entry(it, conn_t, link);
        if (!c->req && c->state == CONN_HEAD && c->in.len == 0)
            conn_abort(c);
    }
    vramd_check_drained(d);
}

int vramd_init(vramd_t *d, uv_loop_t *loop, const char *config_path, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    g_vramd = d;
    d->loop = loop;
    d->config_path = strdup(config_path);
    list_init(&d->models);
    list_init(&d->conns);
    list_init(&d->pump_pending);
    d->cfg = config_load(config_path, err, errlen);
    if (!d->cfg)
        return -1;
    log_configure((enum log_format)d->cfg->log_format, (enum log_level)d->cfg->log_level, 2);
    d->started_ms = uv_now(loop);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    d->started_wall_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    char pids[4096];
    snprintf(pids, sizeof pids, "%s/pids", d->cfg->state_dir);
    if (mkdir_p(pids) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", pids, strerror(errno));
        return -1;
    }
    int killed = process_kill_stale(pids);
    if (killed > 0)
        log_event(LOG_WARN, "stale_workers_killed", "count=%d dir=%s", killed, pids);
    if (start_listening(d, err, errlen) != 0)
        return -1;
    uv_idle_init(loop, &d->pump_idle);
    d->pump_idle.data = d;
    uv_idle_start(&d->pump_idle, on_pump_idle); /* the first turn pumps what the config starts */
    uv_check_init(loop, &d->pump_check);
    d->pump_check.data = d;
    uv_check_start(&d->pump_check, on_pump_check);
    uv_unref((uv_handle_t *)&d->pump_check);
    uv_prepare_init(loop, &d->io_mark);
    d->io_mark.data = d;
    uv_prepare_start(&d->io_mark, on_io_mark);
    uv_unref((uv_handle_t *)&d->io_mark);
    uv_timer_init(loop, &d->drain_timer);
    d->drain_timer.data = d;
    uv_signal_init(loop, &d->sig_hup);
    uv_signal_init(loop, &d->sig_term);
    uv_signal_init(loop, &d->sig_int);
    d->sig_hup.data = d->sig_term.data = d->sig_int.data = d;
    uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    sched_init(d);
    apply_config(d, d->cfg);
    char jerr[1024];
    if (jobs_init(d, jerr, sizeof jerr) != 0)
        log_event(LOG_ERROR, "jobs_unavailable", "error=%s", jerr);
    d->ready = true;
    log_event(LOG_INFO, "vramd_started", "version=%s listen=%s port=%d models=%zu pid=%d", VRAMD_VERSION,
              d->cfg->listen_host, d->cfg->listen_port, d->cfg->n_models, (int)getpid());
    vramd_note_event(d, "vramd %s started", VRAMD_VERSION);
    return 0;
}

int vramd_run(vramd_t *d)
{
    uv_run(d->loop, UV_RUN_DEFAULT);
    notify_close();
    jobs_shutdown(d);
    sched_shutdown(d);
    /* close every handle so the loop can be closed cleanly */
    uv_walk(d->loop, close_walk_cb, NULL);
    uv_run(d->loop, UV_RUN_DEFAULT);
    jobs_close(d);
    return d->exit_code;
}
