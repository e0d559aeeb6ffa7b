/*
 * instance: the lifecycle of one worker instance: start (spawn with {port}/{gpu}
 * substituted), health checks (STARTING -> READY, READY <-> DOWN, startup timeout, unhealthy
 * kill), process exit (crash or expected), stop and drain, recycling, wedged-worker kills
 * (a request's timeout or failing health checks: SIGABRT, then SIGKILL), request slot
 * release (keep_alive's idle timers are park_evict.c's: an expiry may park), its identity
 * (which processes are its: set at the spawn or for an external server, refreshed on the
 * scheduler's request, always through proc/attrib.h), an external Ollama's per-model figure
 * (/api/ps size_vram from its health answers; a model it does not list is unloaded; a
 * llama.cpp router's model is READY only once /models says "loaded", and one whose load
 * failed fails the check), and freeing: of an instance, and of
 * a removed model once its last instance is gone (the two are freed from each other's
 * callbacks, so they live together here).
 *
 * Invariants: nothing is freed inside a callback that may still use it: an instance is
 * freed only when it has no process, no request in flight, no pending health or hook call,
 * no memory held in the ledger and its timers have closed (instance_maybe_free); a stopped
 * instance (STOPPING) never gets a new request. Calls only model_state.c of the supervisor
 * (see supervisor_int.h for the order).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "core/core.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "net/http_call.h"
#include "proc/attrib.h"
#include "proc/process.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/instance.h"
#include "workers/model_state.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

#define STARTUP_POLL_MS 100

/* A supervised worker that stopped answering (a request's response_timeout or
 * recycle.hang_timeout, or its health checks failing `failures` times in a row): SIGABRT,
 * then SIGKILL after stop_timeout; no new requests meanwhile (suspect), and what it was
 * running ends 504 worker_hang (path/proxy.c reads hang_killed). Its exit is a failure of
 * kind `why` (RESTART_HANG, RESTART_UNHEALTHY). */
static void instance_kill_wedged(instance_t *inst, enum restart_reason why);

static void on_instance_handle_closed(uv_handle_t *h)
{
    instance_t *inst = h->data;
    if (--inst->life.closing_handles > 0)
        return;
    model_t *m = inst->model;
    park_tier_release(inst); /* the tiers' states live as long as the instance */
    free(inst);
    m->instances_closing--;
    model_maybe_free(m);
}

/* Free the instance once nothing refers to it any more. */
void instance_maybe_free(instance_t *inst)
{
    if (inst->life.proc || inst->path.in_flight > 0 || inst->life.closing_handles > 0 || inst->life.health_call || inst->hook.hook_call ||
        park_tier_holds(inst) || inst->life.cmd_proc || sched_instance_holds_memory(inst) || driver_limit_starting(inst))
        return;
    model_t *m = inst->model;
    host_book_release(inst); /* released at its last state change already; never outlives it */
    shim_grants_free(inst);
    driver_limit_free(inst);
    list_remove(&inst->link);
    m->n_instances--;
    m->instances_closing++;
    if (m->unload_requested && !model_has_live_instances(m))
        m->unload_requested = false; /* the admin unload is complete: demand may start it again */
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    inst->life.closing_handles = 2;
    uv_timer_stop(&inst->life.timer);
    uv_timer_stop(&inst->life.idle_timer);
    uv_close((uv_handle_t *)&inst->life.timer, on_instance_handle_closed);
    uv_close((uv_handle_t *)&inst->life.idle_timer, on_instance_handle_closed);
    core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
    core_emit(m->core, CORE_EV_INSTANCE_GONE, inst);
    model_schedule_pump(m);
}

static int pick_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

instance_t *instance_new(model_t *m)
{
    instance_t *inst = calloc(1, sizeof *inst);
    if (!inst)
        return NULL;
    inst->model = m;
    inst->id = ++m->next_instance_id;
    sched_instance_init(inst); /* the memory part is the scheduler's */
    inst->life.server_vram = -1;
    inst->park.park_tier = PARK_NONE;
    host_entry_init(&inst->park.parked_host);
    list_init(&inst->path.pool);
    uv_timer_init(m->core->loop, &inst->life.timer);
    uv_timer_init(m->core->loop, &inst->life.idle_timer);
    inst->life.timer.data = inst;
    inst->life.idle_timer.data = inst;
    list_insert_tail(&m->instances, &inst->link);
    m->n_instances++;
    return inst;
}

/* STARTING and healthy: the instance is READY; the model's consecutive failures reset. */
static void health_became_ready(instance_t *inst, uint64_t now)
{
    model_t *m = inst->model;
    inst->life.ready_ms = now;
    inst->life.health_failures = 0;
    m->consecutive_failures = 0;
    m->loads_total++;
    sched_note_load(m, now - inst->life.started_ms);
    sched_instance_ready(inst);
    log_event(LOG_INFO, "worker_ready", "model=%s instance=%u pid=%d port=%d startup_ms=%llu",
              m->name, inst->id, (int)inst->life.pid, inst->life.port,
              (unsigned long long)(now - inst->life.started_ms));
    instance_set_state(inst, INST_READY, "health check passed");
    uv_timer_start(&inst->life.timer, instance_health_tick, m->cfg->health.interval_ms, 0);
    model_schedule_pump(m);
}

/* STARTING and not healthy within startup_timeout: one failure, counted here; stop it. */
static void health_startup_timeout(instance_t *inst, const char *error)
{
    model_t *m = inst->model;
    char why[160];
    snprintf(why, sizeof why, "not healthy within startup_timeout %llu ms (last: %s)",
             (unsigned long long)m->cfg->startup_timeout_ms,
             error ? error : "non-200 answer");
    log_event(LOG_WARN, "worker_startup_timeout", "model=%s instance=%u pid=%d reason=%s", m->name,
              inst->id, (int)inst->life.pid, why);
    inst->life.stop_reason = "startup_timeout";
    model_record_worker_failure(m, RESTART_STARTUP_TIMEOUT, "startup timeout", inst->life.pid);
    inst->life.unload_reason = UNLOAD_FAILED;
    inst->life.stop_requested = true; /* counted already: its exit is not another crash */
    instance_set_state(inst, INST_STOPPING, "startup timeout");
    if (inst->life.proc)
        process_stop(inst->life.proc, 0);
    instance_maybe_free(inst);
}

/* A check passed while READY or DOWN: DOWN comes back READY (an external model's FAILED
 * mark, set by the failing checks, is cleared); a suspect instance takes requests again;
 * an ejection that ran out ends. */
static void health_passed(instance_t *inst)
{
    model_t *m = inst->model;
    inst->life.health_failures = 0;
    if (inst->life.suspect && !inst->life.hang_killed) {
        inst->life.suspect = false;
        log_event(LOG_INFO, "worker_suspect_cleared", "model=%s instance=%u pid=%d", m->name, inst->id,
                  (int)inst->life.pid);
        model_schedule_pump(m);
    }
    if (inst->life.ejected_until_ms && inst->life.ejected_until_ms <= core_now()) {
        inst->life.ejected_until_ms = 0;
        log_event(LOG_INFO, "worker_ejection_ended", "model=%s instance=%u pid=%d ejections=%u", m->name, inst->id,
                  (int)inst->life.pid, inst->life.ejections);
        model_schedule_pump(m);
    }
    if (inst->life.state == INST_DOWN) {
        instance_set_state(inst, INST_READY, "health check passed");
        if (m->failed && inst->external) {
            m->failed = false;
            m->failed_reason[0] = '\0';
            core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
        }
        model_schedule_pump(m);
    }
}

/* A check failed while READY or DOWN: after `failures` in a row an external server goes
 * DOWN (the model FAILED), a supervised READY worker is killed as wedged (SIGABRT, then
 * SIGKILL). Returns false when it was killed: no next check, its exit is a failure. */
static bool health_failed(instance_t *inst, int status, const char *error)
{
    model_t *m = inst->model;
    inst->life.health_failures++;
    log_event(LOG_WARN, "health_check_failed", "model=%s instance=%u pid=%d status=%d error=%s failures=%u",
              m->name, inst->id, (int)inst->life.pid, status, error, inst->life.health_failures);
    if (inst->life.health_failures < m->cfg->health.failures)
        return true;
    if (inst->external) {
        if (inst->life.state != INST_DOWN || !m->failed) {
            instance_set_state(inst, INST_DOWN, "health checks failing");
            char reason[160];
            snprintf(reason, sizeof reason, "external server %s:%d failing health checks", inst->life.host,
                     inst->life.port);
            model_set_failed(m, reason);
        }
    } else if (inst->life.state == INST_READY) {
        log_event(LOG_WARN, "worker_unhealthy", "model=%s instance=%u pid=%d", m->name, inst->id,
                  (int)inst->life.pid);
        instance_kill_wedged(inst, RESTART_UNHEALTHY); /* its exit is then handled as a failure */
        return false;
    }
    return true;
}

/* A supervised worker's first healthy answer: did it come from the worker? vramd chose the
 * port with bind(0) and let it go; until the worker binds it, another process can take it
 * (an outgoing connection's source port, another daemon's worker), and a server there could
 * answer the health check, so requests would go to it. Checked once, at the start, by
 * attribution (proc/attrib.h); when /proc cannot tell (another PID namespace), the answer
 * is taken as the worker's. */
static bool port_is_the_workers(instance_t *inst)
{
    if (attrib_port_is_workers(&inst->life.ident))
        return true;
    log_event(LOG_WARN, "worker_port_taken", "model=%s instance=%u pid=%d port=%d", inst->model->name, inst->id,
              (int)inst->life.pid, inst->life.port);
    return false;
}

/* An external Ollama or llama.cpp router reports this idle READY instance's model not loaded (never loaded yet,
 * or unloaded by Ollama itself: a client's keep_alive): it is UNLOADED like after its unload
 * hook, its booking given back once the reports agree (the scheduler's reclaim), so the next
 * request books it again and loads it through the reload hook, vramd deciding what fits. */
static bool server_model_gone(instance_t *inst)
{
    if (!inst->external || inst->model->cfg->report == MODEL_REPORT_NONE || !inst->model->cfg->served_model ||
        inst->life.state != INST_READY ||
        inst->path.in_flight > 0 || inst->life.server_vram != 0 || inst->hook.hook_call || inst->life.stop_requested)
        return false;
    uv_timer_stop(&inst->life.idle_timer);
    instance_set_state(inst, INST_UNLOADING, "the server reports the model not loaded");
    if (!sched_instance_holds_memory(inst)) {
        instance_set_state(inst, INST_UNLOADED, "nothing booked");
        return true;
    }
    sched_instance_unloading(inst); /* settled at the next snapshot: its report is 0 */
    instance_report_poll(inst);
    return true;
}

static void on_health_answer(void *ctx, int status, const char *body, size_t body_len, const char *error)
{
    instance_t *inst = ctx;
    model_t *m = inst->model;
    inst->life.health_call = NULL;
    uint64_t now = core_now();
    bool ok = status == 200;
    enum server_said said = ok && body && m->cfg->report != MODEL_REPORT_NONE ? server_report_note(inst, body, body_len)
                                                                               : SERVER_SAID_NOTHING;
    if (said == SERVER_SAID_FAILED) { /* llama.cpp's router: the model's last load failed */
        ok = false;
        error = "the server says the model's last load failed";
    }
    if (inst->life.state == INST_STOPPING) {
        instance_maybe_free(inst);
        return;
    }
    if (inst->life.state == INST_UNLOADING && inst->external && m->cfg->report != MODEL_REPORT_NONE) {
        instance_report_poll(inst); /* the unload began while this check ran: the report poll goes on */
        return;
    }
    if (status == HTTP_CALL_LOCAL_SHORTAGE) {
        /* vramd's own shortage (EMFILE, ENFILE, ENOBUFS, ENOMEM): not the worker's failure; try later */
        core_count(m->core, CORE_CNT_LOCAL_HEALTH);
        log_event(LOG_WARN, "local_resource_exhausted", "model=%s instance=%u pid=%d call=%s error=%s", m->name,
                  inst->id, (int)inst->life.pid, "health", error);
        uv_timer_start(&inst->life.timer, instance_health_tick, m->cfg->health.interval_ms, 0);
        return;
    }
    if (inst->life.state == INST_STARTING) {
        if (ok && said == SERVER_SAID_LOADING) {
            ok = false; /* ready once the server says the model is loaded */
            error = "the server is still loading the model";
        }
        if (ok && !port_is_the_workers(inst))
            ok = false; /* another process answered: wait for ours (it exits if it cannot bind) */
        if (ok)
            health_became_ready(inst, now);
        else if (now - inst->life.started_ms >= m->cfg->startup_timeout_ms)
            health_startup_timeout(inst, error);
        else
            uv_timer_start(&inst->life.timer, instance_health_tick, STARTUP_POLL_MS, 0);
        return;
    }
    /* READY or DOWN: periodic checks */
    if (ok)
        health_passed(inst);
    else if (!health_failed(inst, status, error))
        return;
    if (ok && server_model_gone(inst))
        return;
    uv_timer_start(&inst->life.timer, instance_health_tick, m->cfg->health.interval_ms, 0);
}

void instance_health_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->life.health_call || inst->life.state == INST_STOPPING || inst->life.state == INST_UNLOADING ||
        inst->life.state == INST_UNLOADED || inst->life.state == INST_RELOADING || inst->life.state == INST_PARKING ||
        inst->life.state == INST_PARKED || inst->life.state == INST_RESUMING)
        return;
    http_call_req_t req = {
        .host = inst->life.host,
        .port = inst->life.port,
        .method = "GET",
        .path = m->cfg->health.path,
        .timeout_ms = m->cfg->health.timeout_ms,
        .max_response = 64 * 1024,
    };
    char err[160];
    int rc = http_call_start(m->core->loop, &req, on_health_answer, inst, &inst->life.health_call, err, sizeof err);
    if (rc != 0) {
        inst->life.health_call = NULL;
        on_health_answer(inst, rc == -2 ? HTTP_CALL_LOCAL_SHORTAGE : -1, NULL, 0, err);
    }
}

/* An external Ollama or llama.cpp router (url:, model_config_t.report) may hold several
 * entries' models in one process:
 * NVML cannot tell them apart, so such an instance's memory is what the server reports for
 * its model (server_report.c; sched_snapshot.c). No health check runs while it unloads, so from the unload hook's answer
 * on the figure is read every gpu.poll_ms until the instance leaves UNLOADING. */
static void report_tick(uv_timer_t *t);

static void on_report_answer(void *ctx, int status, const char *body, size_t body_len, const char *error)
{
    (void)error;
    instance_t *inst = ctx;
    inst->life.health_call = NULL;
    if (inst->life.state == INST_STOPPING) {
        instance_maybe_free(inst);
        return;
    }
    if (status == 200 && body)
        server_report_note(inst, body, body_len);
    if (inst->life.state == INST_UNLOADING)
        uv_timer_start(&inst->life.timer, report_tick, inst->model->core->cfg->gpu.poll_ms, 0);
}

static void report_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->life.state != INST_UNLOADING)
        return;
    if (inst->life.health_call) { /* a check begun before the unload: its answer is older than the unload */
        uv_timer_start(&inst->life.timer, report_tick, m->core->cfg->gpu.poll_ms, 0);
        return;
    }
    http_call_req_t req = {
        .host = inst->life.host,
        .port = inst->life.port,
        .method = "GET",
        .path = m->cfg->health.path,
        .timeout_ms = m->cfg->health.timeout_ms,
        .max_response = 64 * 1024,
    };
    char err[160];
    if (http_call_start(m->core->loop, &req, on_report_answer, inst, &inst->life.health_call, err, sizeof err) != 0) {
        inst->life.health_call = NULL;
        uv_timer_start(&inst->life.timer, report_tick, m->core->cfg->gpu.poll_ms, 0);
    }
}

void instance_report_poll(instance_t *inst)
{
    if (inst->external && inst->model->cfg->report != MODEL_REPORT_NONE && inst->life.state == INST_UNLOADING)
        uv_timer_start(&inst->life.timer, report_tick, 0, 0);
}

static void on_process_exit(process_t *p, int exit_status, int term_signal, void *ctx)
{
    instance_t *inst = ctx;
    model_t *m = inst->model;
    inst->life.proc = NULL;
    driver_limit_exited(inst, p); /* its leaf stays until the driver's limit on it is reset */
    bool expected = inst->life.stop_requested;
    log_event(expected ? LOG_INFO : LOG_WARN, "worker_exit",
              "model=%s instance=%u pid=%d exit_status=%d signal=%d expected=%B state=%s", m->name, inst->id,
              (int)inst->life.pid, exit_status, term_signal, expected, instance_state_name(inst->life.state));
    if (inst->life.health_call) {
        http_call_cancel(inst->life.health_call);
        inst->life.health_call = NULL;
    }
    uv_timer_stop(&inst->life.timer);
    uv_timer_stop(&inst->life.idle_timer);
    if (!expected) {
        char why[96];
        if (term_signal)
            snprintf(why, sizeof why, "%s killed by signal %d",
                     inst->life.state == INST_STARTING ? "start failed:" : "crash:", term_signal);
        else
            snprintf(why, sizeof why, "%s exited with status %d",
                     inst->life.state == INST_STARTING ? "start failed:" : "crash:", exit_status);
        inst->life.stop_requested = true;
        enum restart_reason kind = inst->life.state == INST_STARTING ? RESTART_START_FAILED : RESTART_CRASH;
        if (inst->life.kill_reason != RESTART_CRASH)
            kind = inst->life.kill_reason;
        model_record_worker_failure(m, kind, why, inst->life.pid);
    } else {
        m->unloads_total++;
        m->unloads_by_reason[inst->life.unload_reason]++;
    }
    shim_grants_exited(inst);
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    instance_set_state(inst, INST_STOPPING, expected ? (inst->life.stop_reason ? inst->life.stop_reason : "stopped") : "exited");
    if (sched_instance_holds_memory(inst)) {
        /* verified reclaim only while it can matter: not once vramd is stopping (nothing is
         * admitted any more, and a hung NVML would hold the exit until the forced stop) */
        if (sched_gpu_ok() && !m->core->stopping) {
            sched_instance_unloading(inst); /* entry released when NVML shows the memory back */
        } else {
            sched_book_release(inst);
        }
    }
    /* a container whose CLI exited (crashed, killed) may still run: removed by the runtime
     * (the instance is freed after that; a second maybe_free below is a no-op then) */
    worker_cmds_after_exit(inst, instance_maybe_free);
    instance_maybe_free(inst);
    if (m->unload_requested && !model_has_live_instances(m))
        m->unload_requested = false;
    model_schedule_pump(m);
}

static void spawn_worker(instance_t *inst);

/* The driver's limit on the leaf was set (or could not be, or took too long): the worker
 * starts, unless it was stopped meanwhile. */
static void limit_ready(instance_t *inst)
{
    if (inst->life.state == INST_STOPPING || inst->life.stop_requested || inst->model->removed || inst->model->core->stopping) {
        driver_limit_exited(inst, NULL); /* reset; the leaf, made for a child that never ran, is swept */
        instance_set_state(inst, INST_STOPPING, "stopped before it started");
        sched_book_release(inst);
        instance_maybe_free(inst);
        return;
    }
    spawn_worker(inst);
}

void instance_start(model_t *m, size_t gpu_pos)
{
    instance_t *inst = instance_new(m);
    if (!inst)
        return;
    sched_place_instance(inst, gpu_pos);
    snprintf(inst->life.host, sizeof inst->life.host, "127.0.0.1");
    inst->life.port = pick_free_port();
    inst->life.started_ms = core_now(); /* STARTING since instance_new */
    char leaf[200];
    worker_cmds_leaf(inst, leaf, sizeof leaf);
    if (driver_limit_before_start(inst, leaf, limit_ready) == 1)
        return; /* limit_ready spawns it once the driver took the limit */
    spawn_worker(inst);
}

static void spawn_worker(instance_t *inst)
{
    model_t *m = inst->model;
    const model_config_t *mc = m->cfg;
    char **argv = worker_cmds_argv(inst, mc->cmd, mc->n_cmd);
    worker_cmds_check_fraction(inst);
    size_t n_env = mc->n_env + 3 + 6; /* PORT, VRAMD_MODEL, CUDA_VISIBLE_DEVICES; the shim's six */
    char leaf[200];
    worker_cmds_leaf(inst, leaf, sizeof leaf);
    config_kv_t *env = calloc(n_env, sizeof *env);
    char portbuf[16], gpubuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", inst->life.port);
    snprintf(gpubuf, sizeof gpubuf, "%d", inst->memory.gpu);
    char pidfile[4096];
    snprintf(pidfile, sizeof pidfile, "%s/pids/%s.%u.pid", m->core->cfg->state_dir, m->name, inst->id);
    char err[256] = "";
    int rc = -1;
    if (argv && argv[0] && env && inst->life.port > 0) {
        env[0].key = "PORT";
        env[0].value = portbuf;
        env[1].key = "VRAMD_MODEL";
        env[1].value = m->name;
        size_t k = 2;
        if (inst->memory.gpu >= 0) {
            env[k].key = "CUDA_VISIBLE_DEVICES";
            env[k].value = gpubuf;
            k++;
        }
        for (size_t i = 0; i < mc->n_env; i++) {
            env[k] = mc->env[i]; /* placeholders filled: OLLAMA_HOST=127.0.0.1:{port} */
            env[k].value = mc->env[i].value ? worker_cmds_subst(inst, mc->env[i].value) : NULL;
            if (mc->env[i].value && !env[k].value)
                env[k].value = mc->env[i].value; /* out of memory: as written */
            k++;
        }
        size_t n_model_env = k;
        if (shim_grants_prepare(inst, env, n_env, &k, err, sizeof err) != 0) {
            n_env = n_model_env; /* the model's env entries end here (freed below) */
            goto spawn_failed;
        }
        n_env = k;
        process_spec_t spec = {
            .argv = argv,
            .env = env,
            .n_env = n_env,
            .cwd = mc->cwd,
            .log_name = m->name,
            .pidfile = pidfile,
            .cgroups = m->core->cgroups,
            .cgroup_leaf = leaf,
        };
        rc = process_spawn(m->core->loop, &spec, on_process_exit, inst, &inst->life.proc, err, sizeof err);
        n_env = n_model_env;
    } else {
        snprintf(err, sizeof err, "%s", inst->life.port <= 0 ? "no free port" : "out of memory");
    }
spawn_failed:
    worker_cmds_free_argv(argv);
    for (size_t i = 0; env && i < mc->n_env; i++) /* the filled copies (zeroes when not filled) */
        if (env[n_env - mc->n_env + i].value != mc->env[i].value)
            free(env[n_env - mc->n_env + i].value);
    free(env);
    if (rc != 0) {
        log_event(LOG_ERROR, "worker_spawn_failed", "model=%s instance=%u error=%s", m->name, inst->id, err);
        char why[200];
        snprintf(why, sizeof why, "start failed: %s", err);
        inst->life.proc = NULL;
        model_record_failure(m, RESTART_START_FAILED, why);
        driver_limit_exited(inst, NULL); /* reset what was set on the leaf */
        instance_set_state(inst, INST_STOPPING, why);
        sched_book_release(inst);
        instance_maybe_free(inst);
        return;
    }
    inst->life.pid = process_pid(inst->life.proc);
    /* it leads its own process group, in a cgroup leaf of its own when vramd has a tree */
    attrib_set_worker(&inst->life.ident, inst->life.pid, inst->life.port, m->core->cgroups, leaf);
    inst->life.ident.container = mc->container.set;
    log_event(LOG_INFO, "worker_started", "model=%s instance=%u pid=%d port=%d gpu=%d", m->name, inst->id,
              (int)inst->life.pid, inst->life.port, inst->memory.gpu);
    instance_set_state(inst, INST_STARTING, "started");
    uv_timer_start(&inst->life.timer, instance_health_tick, STARTUP_POLL_MS, 0);
}

void instance_refresh_identity(instance_t *inst)
{
    if (!attrib_refresh(&inst->life.ident))
        return;
    if (inst->life.ident.external) /* its listener changed (restarted, or found for the first time) */
        log_event(LOG_INFO, "external_pid", "model=%s port=%d pid=%d", inst->model->name, inst->life.port,
                  (int)inst->life.ident.external_pid);
}

/* The stop commands ended: signal what is left (the group, the cgroup), or free. */
static void after_stop_cmds(instance_t *inst)
{
    if (inst->life.proc)
        process_stop(inst->life.proc, inst->model->cfg->stop_timeout_ms);
    else
        instance_maybe_free(inst);
}

void instance_stop(instance_t *inst, const char *reason)
{
    model_t *m = inst->model;
    if (inst->external || inst->life.state == INST_STOPPING)
        return;
    inst->life.stop_requested = true;
    inst->life.stop_reason = reason;
    uv_timer_stop(&inst->life.idle_timer);
    if (inst->path.in_flight > 0) {
        /* draining: no new requests (stop_requested), stop once in-flight ones finish */
        instance_set_state(inst, inst->life.state, reason);
        return;
    }
    uv_timer_stop(&inst->life.timer);
    if (inst->life.health_call) {
        http_call_cancel(inst->life.health_call);
        inst->life.health_call = NULL;
    }
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    instance_set_state(inst, INST_STOPPING, reason);
    if (!inst->life.proc)
        instance_maybe_free(inst);
    else if (!worker_cmds_stop(inst, after_stop_cmds)) /* stop_cmd, a container's removal */
        process_stop(inst->life.proc, m->cfg->stop_timeout_ms);
}

void instance_recycle(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    if (inst->external || inst->life.stop_requested || inst->life.state == INST_STOPPING)
        return;
    m->recycles_total++;
    m->restarts_by_reason[RESTART_RECYCLE]++;
    inst->life.unload_reason = UNLOAD_RECYCLE;
    log_event(LOG_INFO, "worker_recycle", "model=%s instance=%u pid=%d reason=%s requests=%llu in_flight=%u", m->name,
              inst->id, (int)inst->life.pid, why, (unsigned long long)inst->path.requests_total, inst->path.in_flight);
    core_note_event(m->core, "recycling %s instance %u: %s", m->name, inst->id, why);
    instance_stop(inst, why); /* drains first: new requests go elsewhere, in-flight ones finish */
    model_schedule_pump(m);   /* a replacement starts when there is demand */
}

/* Why vramd kills a wedged worker, as its worker_kill lines say. */
static const char *wedged_reason(const instance_t *inst)
{
    return inst->life.kill_reason == RESTART_UNHEALTHY ? "health checks failing" : "request hang";
}

/* The grace after SIGABRT ran out (a stopped or wedged worker does not act on it). */
static void on_wedged_grace(uv_timer_t *t)
{
    instance_t *inst = t->data;
    if (!inst->life.proc)
        return;
    log_event(LOG_WARN, "worker_kill", "model=%s instance=%u pid=%d reason=%s signal=%d", inst->model->name, inst->id,
              (int)inst->life.pid, wedged_reason(inst), SIGKILL);
    process_signal(inst->life.proc, SIGKILL);
}

static void instance_kill_wedged(instance_t *inst, enum restart_reason why)
{
    model_t *m = inst->model;
    if (inst->external || !inst->life.proc || inst->life.hang_killed)
        return;
    inst->life.hang_killed = true;
    inst->life.suspect = true; /* no new requests while it dies */
    inst->life.kill_reason = why;
    if (inst->life.health_call) {
        http_call_cancel(inst->life.health_call);
        inst->life.health_call = NULL;
    }
    uint64_t grace = m->cfg->stop_timeout_ms ? m->cfg->stop_timeout_ms : 1;
    log_event(LOG_WARN, "worker_kill", "model=%s instance=%u pid=%d reason=%s signal=%d grace_ms=%llu", m->name,
              inst->id, (int)inst->life.pid, wedged_reason(inst), SIGABRT, (unsigned long long)grace);
    /* gunicorn's sequence: SIGABRT (a core dump for the operator), SIGKILL if it is still
     * there after the grace; the exit is a failure (why), replaced with backoff */
    process_signal(inst->life.proc, SIGABRT);
    uv_timer_start(&inst->life.timer, on_wedged_grace, grace, 0);
}

void instance_kill_hung(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    m->hangs_total++;
    if (inst->external) {
        /* never signalled: out of rotation until its health check passes again */
        if (inst->life.state == INST_READY)
            instance_set_state(inst, INST_DOWN, why);
        return;
    }
    instance_kill_wedged(inst, RESTART_HANG);
}

void instance_mark_suspect(instance_t *inst, const char *why)
{
    if (inst->life.suspect || inst->life.hang_killed || inst->life.state != INST_READY)
        return;
    inst->life.suspect = true;
    log_event(LOG_WARN, "worker_suspect", "model=%s instance=%u pid=%d reason=%s", inst->model->name, inst->id,
              (int)inst->life.pid, why);
    if (inst->life.health_call) {
        http_call_cancel(inst->life.health_call);
        inst->life.health_call = NULL;
    }
    uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0); /* its next check decides */
}

bool instance_usable(const instance_t *in, uint64_t now)
{
    return in->life.state == INST_READY && !in->life.stop_requested && !in->life.suspect && in->life.ejected_until_ms <= now;
}

/* INSTANCE_OUTLIER_IN_ROW broken exchanges in a row: eject the instance for a growing time
 * (Envoy's outlier detection: outlier.base_ejection_time x ejections, at most
 * outlier.max_ejection_time; 30 s and 5 min by default), unless no other instance of
 * the model could take its requests. */
static void instance_note_outlier(instance_t *inst)
{
    model_t *m = inst->model;
    uint64_t now = core_now();
    unsigned in_row = inst->life.failed_in_row;
    inst->life.failed_in_row = 0;
    bool other = false;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in != inst && instance_usable(in, now))
            other = true;
    }
    if (!other) {
        log_event(LOG_WARN, "worker_outlier_kept", "model=%s instance=%u pid=%d failed_in_row=%u reason=%s", m->name,
                  inst->id, (int)inst->life.pid, in_row, "the model's last healthy instance");
        return;
    }
    inst->life.ejections++;
    m->ejections_total++;
    const config_outlier_t *o = &m->cfg->outlier;
    uint64_t ms = o->base_ejection_ms * inst->life.ejections; /* <= 1h x 2^32: no overflow */
    if (ms > o->max_ejection_ms)
        ms = o->max_ejection_ms;
    inst->life.ejected_until_ms = now + ms;
    log_event(LOG_WARN, "worker_ejected", "model=%s instance=%u pid=%d failed_in_row=%u ejections=%u ejection_ms=%llu",
              m->name, inst->id, (int)inst->life.pid, in_row, inst->life.ejections, (unsigned long long)ms);
    core_note_event(m->core, "ejected %s instance %u for %llu s: %u broken exchanges in a row", m->name, inst->id,
                    (unsigned long long)(ms / 1000), in_row);
}

/* broken: 1 a broken exchange, 0 a sound one, -1 neither (vramd's own shortage). */
static void request_done(instance_t *inst, int broken)
{
    model_t *m = inst->model;
    if (inst->path.in_flight)
        inst->path.in_flight--;
    if (m->in_flight)
        m->in_flight--;
    if (broken >= 0)
        inst->life.failed_in_row = broken ? inst->life.failed_in_row + 1 : 0;
    const config_recycle_t *rc = &m->cfg->recycle;
    if (inst->life.failed_in_row >= INSTANCE_OUTLIER_IN_ROW)
        instance_note_outlier(inst);
    else if (rc->after_requests && inst->path.requests_total >= rc->after_requests)
        instance_recycle(inst, "after_requests");
    if (inst->life.stop_requested && inst->path.in_flight == 0 && inst->life.state != INST_STOPPING && !inst->external) {
        instance_stop(inst, inst->life.stop_reason ? inst->life.stop_reason : "stopped");
    } else if (!inst->life.proc && !inst->external && inst->life.state == INST_STOPPING) {
        instance_maybe_free(inst);
    }
    model_schedule_pump(m);
    core_emit(m->core, CORE_EV_REQUEST_ENDED, NULL);
}

void instance_request_done(instance_t *inst, bool worker_broken) { request_done(inst, worker_broken ? 1 : 0); }

void instance_request_done_local(instance_t *inst) { request_done(inst, -1); }

void model_stop_all(model_t *m, const char *reason)
{
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->external) {
            uv_timer_stop(&in->life.timer);
            if (in->life.health_call) {
                http_call_cancel(in->life.health_call);
                in->life.health_call = NULL;
            }
            instance_set_state(in, INST_STOPPING, reason);
            in->life.stop_requested = true;
            instance_maybe_free(in);
        } else {
            if (in->life.state != INST_STOPPING)
                in->life.unload_reason = m->removed ? UNLOAD_REMOVED : UNLOAD_DRAIN;
            instance_stop(in, reason);
        }
    }
}

static void on_model_timer_closed(uv_handle_t *h)
{
    model_t *m = h->data;
    config_unref(m->cfg_owner);
    line_ring_free(&m->logs);
    free(m->name);
    free(m);
}

void model_maybe_free(model_t *m)
{
    if (!m->removed || m->queue.depth > 0 || m->in_flight > 0 || !list_empty(&m->waiters) || m->instances_closing)
        return;
    if (!list_empty(&m->instances)) {
        model_stop_all(m, "removed from config");
        return;
    }
    if (uv_is_closing((uv_handle_t *)&m->backoff_timer))
        return;
    list_remove(&m->link);
    core_defer_cancel(&m->pump);
    uv_timer_stop(&m->backoff_timer);
    uv_close((uv_handle_t *)&m->backoff_timer, on_model_timer_closed);
}
