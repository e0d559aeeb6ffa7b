/*
 * vramd: the composition root and the daemon's lifecycle: start, wiring, listen, signals,
 * reload, drain, stop. See vramd.h.
 *
 * Wiring: wiring_connect (daemon/wiring.c) sets every handler, hook, action and listener,
 * called once from wire() with what the daemon brings:
 *   api admin ops = {vramd_drain, vramd_reload}
 *   on_progress: the drain check (REQUEST_ENDED, INSTANCE_GONE)
 * What the daemon then hands over as it starts: conn_accept(.., wiring_conn_handlers()) for
 * each client connection, model_create(.., dispatch_pump) for each model, fleet_agent_start
 * (the agent-check listener, fleet.agent_listen), jobs_init (the store; its listener was set
 * by the wiring).
 */
#include "daemon/vramd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/pause_point.h"
#include "daemon/notify.h"
#include "daemon/wiring.h"
#include "fleet/agent.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "gpu/cuda.h"
#include "jobs/jobs.h"
#include "net/conn.h"
#include "obs/metrics.h"
#include "path/dispatch.h"
#include "path/proxy.h"
#include "proc/cgroup.h"
#include "proc/process.h"
#include "proc/state_lock.h"
#include "sched/scheduler.h"
#include "serve/api.h"
#include "workers/instance.h"
#include "workers/model_state.h"
#include "workers/supervisor.h"
#include "workers/worker_cmds.h"

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

static void on_connection(uv_stream_t *server, int status)
{
    vramd_t *d = server->data;
    if (status < 0) {
        log_event(LOG_WARN, "accept_failed", "error=%s", uv_strerror(status));
        return;
    }
    conn_accept(&d->core, server, wiring_conn_handlers());
}

static int start_listening(vramd_t *d, char *err, size_t errlen)
{
    const config_t *c = d->core.cfg;
    struct sockaddr_storage addr;
    int rc;
    const char *host = strcmp(c->listen_host, "localhost") == 0 ? "127.0.0.1" : c->listen_host;
    if (strchr(host, ':'))
        rc = uv_ip6_addr(host, c->listen_port, (struct sockaddr_in6 *)&addr);
    else
        rc = uv_ip4_addr(host, c->listen_port, (struct sockaddr_in *)&addr);
    if (rc == 0)
        rc = uv_tcp_init(d->core.loop, &d->listener);
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
    snprintf(d->bound_host, sizeof d->bound_host, "%s", c->listen_host);
    d->bound_port = c->listen_port;
    d->core.listening = true;
    return 0;
}

static void apply_config(vramd_t *d, config_t *cfg)
{
    core_t *core = &d->core;
    log_configure((enum log_format)cfg->log_format, (enum log_level)cfg->log_level, 2);
    /* keep runtimes by name; create new ones; remove the rest */
    list_foreach(it, &core->models) list_entry(it, model_t, link)->removed = true;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const model_config_t *mc = &cfg->models[i];
        model_t *found = NULL;
        list_foreach(it, &core->models) {
            model_t *m = list_entry(it, model_t, link);
            if (strcmp(m->name, mc->name) == 0)
                found = m;
        }
        if (found)
            model_update_config(found, mc, cfg);
        else
            model_start_pinned(model_create(core, mc, cfg, dispatch_pump));
    }
    list_foreach_safe(it, tmp, &core->models) {
        model_t *m = list_entry(it, model_t, link);
        if (m->removed)
            model_remove(m);
    }
}

/* The CUDA driver for the checkpoint tier (workers/park.c), opened once when a model has
 * checkpoint: true (at start, or at the first reload that adds one: gpu.cuda_library, or
 * $VRAMD_CUDA_LIBRARY, which config_load already applied) and handed down through the core;
 * closed at exit. Unavailable (no driver, too old): logged, and the tier is skipped. */
static void open_cuda(core_t *core, const config_t *cfg)
{
    bool wanted = false;
    for (size_t i = 0; i < cfg->n_models; i++)
        wanted = wanted || cfg->models[i].checkpoint;
    if (!wanted || core->cuda)
        return;
    core->cuda = cuda_open(cfg->gpu.cuda_library);
    if (!core->cuda) {
        log_event(LOG_ERROR, "checkpoint_unavailable", "library=%s reason=%s", cfg->gpu.cuda_library, "out of memory");
        return;
    }
    cuda_use_custom_storage(core->cuda, cfg->gpu.custom_storage);
    if (cuda_available(core->cuda)) {
        int v = cuda_driver_version(core->cuda);
        char ver[32];
        snprintf(ver, sizeof ver, "%d.%d", v / 1000, (v % 1000) / 10);
        log_event(LOG_INFO, "checkpoint_available", "library=%s driver=%s custom_storage=%s reason=%s",
                  cuda_library(core->cuda), ver, cuda_custom_storage(core->cuda) ? "yes" : "no",
                  cuda_custom_storage_reason(core->cuda));
    } else {
        log_event(LOG_WARN, "checkpoint_unavailable", "library=%s reason=%s", cuda_library(core->cuda),
                  cuda_unavailable_reason(core->cuda));
        core_note_event(core, "checkpoint tier unavailable: %s", cuda_unavailable_reason(core->cuda));
    }
}

static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* The listener is bound once, at start, and a reload never re-binds it: a reload whose
 * listen differs from the address actually bound is refused (accepting it would leave the
 * socket where it is while the token rule was checked against the new address: a reload
 * to 127.0.0.1 without a token would open the admin routes on 0.0.0.0). And the token
 * rule holds for the bound address: bound off loopback, admin_token_file stays required. */
static int check_listen(const vramd_t *d, const config_t *cfg, char *err, size_t errlen)
{
    if (strcmp(cfg->listen_host, d->bound_host) != 0 || cfg->listen_port != d->bound_port) {
        snprintf(err, errlen,
                 "%s: listen: changed from %s:%d to %s:%d; the listener is bound only at start "
                 "(restart vramd to change it)",
                 cfg->path, d->bound_host, d->bound_port, cfg->listen_host, cfg->listen_port);
        return -1;
    }
    if (!config_host_is_loopback(d->bound_host) && cfg->admin_token == NULL) {
        snprintf(err, errlen,
                 "%s: admin_token_file: required while vramd listens on %s:%d, which is not a loopback "
                 "address (admin routes would be open to the network)",
                 cfg->path, d->bound_host, d->bound_port);
        return -1;
    }
    return 0;
}

/* GPU settings take effect at start only (the NVML and CUDA libraries are loaded and the
 * devices and poll timer set up once), and so does the job store (opened once, jobs_init):
 * a reload that changes one is refused, naming the key. */
static int check_start_only(const config_t *old, const config_t *cfg, char *err, size_t errlen)
{
    const char *key = NULL;
    if (!same_str(old->gpu.nvml_library, cfg->gpu.nvml_library))
        key = "gpu.nvml_library";
    else if (!same_str(old->fleet.agent_host, cfg->fleet.agent_host) || old->fleet.agent_port != cfg->fleet.agent_port)
        key = "fleet.agent_listen";
    else if (!same_str(old->gpu.cuda_library, cfg->gpu.cuda_library))
        key = "gpu.cuda_library";
    else if (old->gpu.custom_storage != cfg->gpu.custom_storage)
        key = "gpu.checkpoint_storage"; /* parked processes' bytes are where the old setting put them */
    else if (old->gpu.poll_ms != cfg->gpu.poll_ms)
        key = "gpu.poll";
    else if (old->gpu.n_devices != cfg->gpu.n_devices || old->gpu.n_device_uuids != cfg->gpu.n_device_uuids)
        key = "gpu.devices";
    for (size_t i = 0; !key && i < cfg->gpu.n_devices; i++)
        if (old->gpu.devices[i] != cfg->gpu.devices[i])
            key = "gpu.devices";
    for (size_t i = 0; !key && i < cfg->gpu.n_device_uuids; i++)
        if (!same_str(old->gpu.device_uuids[i], cfg->gpu.device_uuids[i]))
            key = "gpu.devices";
    if (!key && (!same_str(old->cgroup.mode, cfg->cgroup.mode) || !same_str(old->cgroup.path, cfg->cgroup.path)))
        key = "cgroup";
    if (!key && old->jobs.backend != cfg->jobs.backend)
        key = "jobs.backend";
    else if (!key && (!same_str(old->jobs.pg.url, cfg->jobs.pg.url) || !same_str(old->jobs.pg.host_id, cfg->jobs.pg.host_id) ||
                      old->jobs.pg.lease_ms != cfg->jobs.pg.lease_ms || old->jobs.pg.aging_ms != cfg->jobs.pg.aging_ms ||
                      old->jobs.pg.max_result_bytes != cfg->jobs.pg.max_result_bytes ||
                      old->jobs.pg.timeout_ms != cfg->jobs.pg.timeout_ms))
        key = "jobs.postgres";
    if (!key)
        return 0;
    snprintf(err, errlen, "%s: %s changed; it takes effect only at start (restart vramd to change it)", cfg->path,
             key);
    return -1;
}

/* Descriptors vramd may need at once: every client connection, per instance its upstream
 * connections (concurrency) and a few more (stdout and stderr pipes, a health check, a
 * hook), job attempts' loopback client sides, and a fixed part (listener, loop, signals,
 * journal with its WAL and index, result files, NVML, the guard's pipe, stdio). */
static uint64_t fd_need(const config_t *cfg)
{
    uint64_t need = cfg->limits.max_connections + cfg->jobs.max_active + 128;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const model_config_t *mc = &cfg->models[i];
        need += (uint64_t)(mc->url ? 1 : mc->instances) * (mc->concurrency + 4);
    }
    return need;
}

/* Raise the soft RLIMIT_NOFILE to the hard one, and warn (once per start or reload) when
 * even that is below what the config may need. A warning, not a refusal: the defaults
 * (max_connections 20000) exceed the hard limit of many hosts that never see that many
 * clients, and running out is survivable: accept fails (accept_failed), and a health check
 * that cannot open a socket is not counted against the worker (local_resource_exhausted). */
static void fit_fd_limit(const config_t *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    uint64_t need = fd_need(cfg);
    if (rl.rlim_cur == RLIM_INFINITY || need <= (uint64_t)rl.rlim_cur)
        return;
    log_event(LOG_WARN, "fd_limit_low", "need=%llu limit=%llu max_connections=%u hint=%s",
              (unsigned long long)need, (unsigned long long)rl.rlim_cur, cfg->limits.max_connections,
              "raise LimitNOFILE (the hard RLIMIT_NOFILE) or lower limits.max_connections");
}

int vramd_reload(vramd_t *d, char *err, size_t errlen)
{
    core_t *core = &d->core;
    notify_reloading();
    config_t *cfg = config_load(d->config_path, err, errlen);
    if (cfg && (check_listen(d, cfg, err, errlen) != 0 || check_start_only(core->cfg, cfg, err, errlen) != 0)) {
        config_unref(cfg);
        cfg = NULL;
    }
    if (!cfg) {
        log_event(LOG_ERROR, "config_reload_failed", "path=%s error=%s", d->config_path, err);
        core_note_event(core, "config reload refused: %s", err);
        notify_reload_done(core, false);
        return -1;
    }
    core_set_config(core, cfg);
    open_cuda(core, cfg);
    apply_config(d, cfg);
    fit_fd_limit(cfg);
    config_unref(cfg); /* the core holds its own reference */
    log_event(LOG_INFO, "config_reloaded", "path=%s models=%zu", d->config_path, cfg->n_models);
    core_note_event(core, "config reloaded (%zu models)", cfg->n_models);
    notify_reload_done(core, true);
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
    if (!d->core.stopping || d->stopped)
        return;
    d->stopped = true;
    /* every supervised instance is gone (their exits were reaped): let the loop end */
    log_event(LOG_INFO, "vramd_stopped", "exit_code=%d", d->exit_code);
    uv_stop(d->core.loop);
}

/* A piece of drain progress happened (a request or a job attempt ended, an instance is
 * gone): stop the workers once nothing is queued or in flight, end once they are gone. */
static void check_drained(vramd_t *d)
{
    core_t *core = &d->core;
    if (!core->draining)
        return;
    if (!core->stopping) {
        if (core_queued_total(core) > 0 || core_in_flight_total(core) > 0 || jobs_busy(core))
            return; /* jobs_busy: job attempts in flight finish and commit their results */
        core->stopping = true;
        log_event(LOG_INFO, "drain_done", "reason=%s", "no request queued or in flight");
        list_foreach_safe(it, tmp, &core->models) model_stop_all(list_entry(it, model_t, link), "drain");
    }
    bool any = false;
    list_foreach(it, &core->models) if (model_has_live_instances(list_entry(it, model_t, link))) any = true;
    if (!any)
        finish_stop(d);
}

static void on_progress(void *ctx, enum core_event ev, void *subject)
{
    (void)ev;
    (void)subject;
    check_drained(ctx);
}

static void on_final_timeout(uv_timer_t *t)
{
    vramd_t *d = t->data;
    log_event(LOG_WARN, "stop_forced", "workers_left=%zu", process_count());
    uv_stop(d->core.loop);
}

static void on_drain_deadline(uv_timer_t *t)
{
    vramd_t *d = t->data;
    core_t *core = &d->core;
    if (!core->stopping) {
        log_event(LOG_WARN, "drain_timeout", "queued=%u in_flight=%u", core_queued_total(core),
                  core_in_flight_total(core));
        /* every connection goes, and with it every request still queued or running: the
         * owners let go of them (queue, upstream, validator), so the counts reach 0 */
        list_foreach_safe(it, tmp, &core->conns) conn_abort(list_entry(it, conn_t, link));
        core->stopping = false;
        check_drained(d);
        if (!core->stopping) {
            /* what is left is not a client's (a job attempt committing): stop anyway */
            core->stopping = true;
            list_foreach_safe(it, tmp, &core->models) model_stop_all(list_entry(it, model_t, link), "drain");
        }
    }
    uint64_t longest = 1000;
    for (size_t i = 0; i < core->cfg->n_models; i++)
        if (core->cfg->models[i].stop_timeout_ms > longest)
            longest = core->cfg->models[i].stop_timeout_ms;
    uv_timer_start(&d->drain_timer, on_final_timeout, longest + 2000, 0);
}

void vramd_drain(vramd_t *d, const char *why)
{
    core_t *core = &d->core;
    if (core->draining)
        return;
    core->draining = true;
    core_emit(core, CORE_EV_DRAINING, (void *)why);
    notify_stopping(core, why);
    log_event(LOG_INFO, "drain_started", "reason=%s queued=%u in_flight=%u", why, core_queued_total(core),
              core_in_flight_total(core));
    core_note_event(core, "draining (%s)", why);
    if (core->listening) {
        uv_close((uv_handle_t *)&d->listener, NULL);
        core->listening = false;
    }
    uv_timer_start(&d->drain_timer, on_drain_deadline, core->cfg->limits.drain_timeout_ms, 0);
    /* idle keep-alive connections: close them now */
    list_foreach_safe(it, tmp, &core->conns) {
        conn_t *c = list_entry(it, conn_t, link);
        if (!c->req && c->state == CONN_HEAD && c->in.len == 0)
            conn_abort(c);
    }
    check_drained(d);
}

static void admin_drain(void *ctx, const char *why) { vramd_drain(ctx, why); }
static int admin_reload(void *ctx, char *err, size_t errlen) { return vramd_reload(ctx, err, errlen); }

/* Everything that flows upward, set once (daemon/wiring.c): handlers, hooks, actions and
 * listeners; the daemon brings its admin ops and its drain check. */
static void wire(vramd_t *d)
{
    wiring_root_t root = {.admin = {.drain = admin_drain, .reload = admin_reload, .ctx = d},
                          .on_progress = on_progress, .progress_ctx = d};
    wiring_connect(&d->core, &root);
}

static void start_signals(vramd_t *d)
{
    uv_loop_t *loop = d->core.loop;
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
}

/* The guard kills this run's workers (whole groups, wrappers' children included) when this
 * process ends, however it ends (proc/process_guard.c). Started before the listener, the
 * journal and any worker or thread, so it holds none of them. Without it (fork failed)
 * vramd runs on: PR_SET_PDEATHSIG still takes each worker's leader. */
static void start_guard(vramd_t *d, const char *pids)
{
    char gerr[256];
    pid_t gpid = 0;
    d->guard_fd = process_guard_start(pids, cgroup_tree_active(&d->cgroups) ? &d->cgroups : NULL, &gpid, gerr,
                                      sizeof gerr);
    if (d->guard_fd < 0)
        log_event(LOG_ERROR, "guard_unavailable", "error=%s", gerr);
    else
        log_event(LOG_INFO, "guard_started", "pid=%d", (int)gpid);
}

/* The workers' cgroup subtree (proc/cgroup.h): opened once, at start; what an earlier run
 * left in it (a setsid helper, a container's processes) is killed and removed first
 * (RELIABILITY case 37). A mode named in the config that cannot be had is an error. */
static int open_cgroups(vramd_t *d, const config_t *cfg, char *err, size_t errlen)
{
    char name[32], cerr[512];
    cgroup_tree_name(cfg->state_dir, name, sizeof name);
    if (cgroup_tree_open(&d->cgroups, cfg->cgroup.mode, cfg->cgroup.path, name, cerr, sizeof cerr) != 0) {
        snprintf(err, errlen, "%s: cgroup: %s", cfg->path, cerr);
        return -1;
    }
    d->core.cgroups = &d->cgroups;
    pause_point("cgroup_opened");
    if (cgroup_tree_active(&d->cgroups)) {
        /* after a dead vramd's guard, if one is still sweeping; before our own sweep */
        char lock[4096];
        snprintf(lock, sizeof lock, "%s/pids/cgroup.lock", cfg->state_dir);
        if (cgroup_tree_lock(&d->cgroups, lock, CGROUP_LOCK_WAIT_MS) != 0)
            log_event(LOG_WARN, "cgroup_lock_unavailable", "path=%s error=%s", lock, strerror(errno));
        /* the subtree cgroup_tree_open found may have been the dead run's, removed since by
         * its guard's sweep: made again now that no guard can sweep any more */
        if (cgroup_tree_ensure(&d->cgroups) != 0) {
            snprintf(err, errlen, "%s: cgroup %s: %s", cfg->path, d->cgroups.join[0], strerror(errno));
            return -1;
        }
    }
    size_t killed = 0, removed = 0;
    int left = cgroup_sweep(&d->cgroups, &killed, &removed);
    if (killed > 0 || removed > 0 || left > 0)
        log_event(LOG_WARN, "cgroup_swept", "killed=%zu removed=%zu left=%d path=%s", killed, removed, left,
                  d->cgroups.rel);
    const char *gaps = cgroup_mode_cannot_catch(d->cgroups.mode);
    log_event(gaps ? LOG_WARN : LOG_INFO, "cgroup_ready", "mode=%s path=%s kill=%s cannot_catch=%s",
              cgroup_mode_name(d->cgroups.mode), cgroup_tree_active(&d->cgroups) ? d->cgroups.join[0] : "",
              d->cgroups.has_freeze ? "cgroup.freeze" : d->cgroups.freezer >= 0 ? "freezer" : "signals", gaps);
    return 0;
}

int vramd_init(vramd_t *d, uv_loop_t *loop, const char *config_path, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->guard_fd = -1;
    d->state_lock_fd = -1;
    d->config_path = strdup(config_path);
    config_t *cfg = config_load(config_path, err, errlen);
    if (!cfg)
        return -1;
    core_init(&d->core, loop, cfg);
    config_unref(cfg); /* the core holds its own reference */
    core_t *core = &d->core;
    log_configure((enum log_format)cfg->log_format, (enum log_level)cfg->log_level, 2);
    for (size_t i = 0; i < cfg->n_warnings; i++)
        log_event(LOG_WARN, "config_warning", "model=%s key=%s message=%s at=%s",
                  cfg->warnings[i].model ? cfg->warnings[i].model : "", cfg->warnings[i].key,
                  cfg->warnings[i].message, cfg->warnings[i].where);
    fit_fd_limit(cfg);
    char pids[4096];
    snprintf(pids, sizeof pids, "%s/pids", cfg->state_dir);
    if (mkdir_p(pids) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", pids, strerror(errno));
        return -1;
    }
    /* one vramd per state_dir, before anything under it is touched (proc/state_lock.h) */
    pid_t holder = 0;
    if (state_lock_take(cfg->state_dir, &d->state_lock_fd, &holder, err, errlen) != 0) {
        log_event(LOG_ERROR, "state_dir_taken", "state_dir=%s running_pid=%d error=%s", cfg->state_dir, (int)holder,
                  err);
        return -1;
    }
    int killed = process_kill_stale(pids);
    if (killed > 0)
        log_event(LOG_WARN, "stale_workers_killed", "count=%d dir=%s", killed, pids);
    if (open_cgroups(d, cfg, err, errlen) != 0)
        return -1;
    supervisor_sweep_containers(cfg); /* before any worker: a name it will use may be taken */
    start_guard(d, pids);
    if (cgroup_subreaper_start(&d->cgroups) != 0) /* after the guard: it must not become our child */
        log_event(LOG_WARN, "subreaper_unavailable", "error=%s", strerror(errno));
    else if (d->cgroups.mode == CGROUP_SUBREAPER && process_reap_always(loop, err, errlen) != 0)
        return -1; /* adopted orphans are reaped whenever they exit */
    if (start_listening(d, err, errlen) != 0)
        return -1;
    if (fleet_agent_start(core, err, errlen) != 0)
        return -1;
    start_signals(d);
    wire(d);
    open_cuda(core, cfg);
    apply_config(d, cfg);
    char jerr[1024];
    if (jobs_init(core, jerr, sizeof jerr) != 0)
        log_event(LOG_ERROR, "jobs_unavailable", "error=%s", jerr);
    core->ready = true;
    log_event(LOG_INFO, "vramd_started", "version=%s listen=%s port=%d models=%zu pid=%d", VRAMD_VERSION,
              cfg->listen_host, cfg->listen_port, cfg->n_models, (int)getpid());
    core_note_event(core, "vramd %s started", VRAMD_VERSION);
    return 0;
}

int vramd_run(vramd_t *d)
{
    core_t *core = &d->core;
    uv_run(core->loop, UV_RUN_DEFAULT);
    notify_close();
    jobs_shutdown(core);
    fleet_agent_stop();
    shim_grants_shutdown();
    sched_shutdown(core);
    driver_limit_shutdown(); /* after the NVML probe closed: no call's end comes any more */
    metrics_forget();
    cuda_close(core->cuda); /* calls still in the driver are abandoned, never waited for (gpu/driver_thread.h) */
    core->cuda = NULL;
    /* close every handle so the loop can be closed cleanly */
    uv_walk(core->loop, close_walk_cb, NULL);
    uv_run(core->loop, UV_RUN_DEFAULT);
    core_close(core);
    jobs_close(core);
    size_t killed = 0, removed = 0;
    if (cgroup_sweep(&d->cgroups, &killed, &removed) == 0) /* every worker is gone: leaves are empty */
        cgroup_tree_remove(&d->cgroups);
    return d->exit_code;
}
