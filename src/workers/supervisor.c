/*
 * supervisor: model runtimes and worker lifecycles. The states, the restart policy and the
 * invariants are written in supervisor.h; this file keeps them.
 *
 * Every instance state change goes through instance_set_state (logged old -> new); every
 * model state change that follows is announced as CORE_EV_MODEL_CHANGED (admin calls wait
 * on it). It calls nothing above itself: requests reach it only as counted slots
 * (instance_request_done), and the queue is the dispatcher's (sched/dispatch.c).
 * Nothing is freed inside a callback that may still use it: an instance is freed only when
 * it has no process, no request in flight and its timers have closed (instance_maybe_free).
 */
#include "workers/supervisor.h"

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
#include "sched/scheduler.h"
#include "workers/http_call.h"
#include "workers/process.h"

#define STARTUP_POLL_MS 100
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS (5 * 60 * 1000)
#define FAILURE_WINDOW_MS (10 * 60 * 1000)
#define QUEUE_AGE_STEP_MS 30000

static void instance_health_tick(uv_timer_t *t);
static void instance_stop(instance_t *inst, const char *reason);
static void instance_reload(instance_t *inst);
static void model_maybe_free(model_t *m);

const char *instance_state_name(enum instance_state s)
{
    static const char *n[] = {"starting", "ready", "down", "stopping", "unloading", "unloaded", "reloading"};
    return n[s];
}

const char *model_state_name(enum model_state s)
{
    static const char *n[] = {"stopped", "starting", "ready", "draining", "unloading", "failed"};
    return n[s];
}

const char *unload_reason_name(enum unload_reason r)
{
    static const char *n[] = {"other", "idle", "evicted", "admin", "recycle", "drain", "removed", "failed"};
    return (unsigned)r < UNLOAD_REASONS ? n[r] : "other";
}

const char *restart_reason_name(enum restart_reason r)
{
    static const char *n[] = {"crash", "start_failed", "startup_timeout", "hang", "unhealthy", "reload_failed",
                              "recycle"};
    return (unsigned)r < RESTART_REASONS ? n[r] : "crash";
}

void model_note_degraded(model_t *m, unsigned level)
{
    m->degraded_total++;
    m->degraded_by_level[level < MODEL_DEGRADE_LEVELS ? level : MODEL_DEGRADE_LEVELS - 1]++;
}

void model_note_outcome(model_t *m, const char *outcome)
{
    if (!outcome || !outcome[0] || strlen(outcome) >= MODEL_OUTCOME_NAME_MAX)
        outcome = "other";
    for (unsigned i = 0; i < m->n_outcomes; i++) {
        if (strcmp(m->outcomes[i].name, outcome) == 0) {
            m->outcomes[i].n++;
            return;
        }
    }
    /* a new name; the last slot is kept for "other", so the table never overflows */
    bool is_other = strcmp(outcome, "other") == 0;
    if (m->n_outcomes < MODEL_OUTCOMES_MAX - 1 || (is_other && m->n_outcomes < MODEL_OUTCOMES_MAX)) {
        struct model_outcome *o = &m->outcomes[m->n_outcomes++];
        snprintf(o->name, sizeof o->name, "%s", outcome);
        o->n = 1;
        return;
    }
    if (!is_other)
        model_note_outcome(m, "other");
}

enum model_state model_state(const model_t *m)
{
    if (m->failed)
        return MODEL_FAILED;
    bool starting = false, stopping = false, ready = false, draining = false;
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (in->state == INST_READY && !in->stop_requested)
            ready = true;
        else if (in->state == INST_READY && in->stop_requested)
            draining = true;
        else if (in->state == INST_STARTING || in->state == INST_RELOADING)
            starting = true;
        else if (in->state == INST_STOPPING || in->state == INST_UNLOADING)
            stopping = true;
    }
    if (ready)
        return MODEL_READY;
    if (starting)
        return MODEL_STARTING;
    if (draining)
        return MODEL_DRAINING;
    if (stopping)
        return MODEL_UNLOADING;
    return MODEL_STOPPED;
}

static void instance_set_state(instance_t *inst, enum instance_state s, const char *why)
{
    model_t *m = inst->model;
    enum model_state before = model_state(m);
    if (inst->state != s) {
        log_event(LOG_INFO, "instance_state", "model=%s instance=%u pid=%d from=%s to=%s reason=%s",
                  m->name, inst->id, (int)inst->pid, instance_state_name(inst->state),
                  instance_state_name(s), why);
        inst->state = s;
    }
    enum model_state after = model_state(m);
    if (before != after) {
        log_event(LOG_INFO, "model_state", "model=%s from=%s to=%s reason=%s", m->name,
                  model_state_name(before), model_state_name(after), why);
        core_note_event(m->core, "model %s: %s -> %s (%s)", m->name, model_state_name(before),
                         model_state_name(after), why);
    }
    core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
}

/* ---- model runtime ----------------------------------------------------------------- */

static void on_backoff_timer(uv_timer_t *t)
{
    model_schedule_pump(t->data);
}

model_t *model_create(core_t *d, const model_config_t *cfg, config_t *owner, void (*pump)(core_defer_t *))
{
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->core = d;
    m->name = strdup(cfg->name);
    m->cfg = cfg;
    m->cfg_owner = config_ref(owner);
    queue_init(&m->queue, cfg->queue_max, QUEUE_AGE_STEP_MS);
    list_init(&m->instances);
    list_init(&m->waiters);
    core_defer_init(&m->pump, pump);
    list_init(&m->link);
    uv_timer_init(d->loop, &m->backoff_timer);
    m->backoff_timer.data = m;
    histogram_init(&m->duration_hist, HISTOGRAM_DURATION_BOUNDS, HISTOGRAM_DURATION_N);
    histogram_init(&m->queue_wait_hist, HISTOGRAM_WAIT_BOUNDS, HISTOGRAM_WAIT_N);
    list_insert_tail(&d->models, &m->link);
    return m;
}

void model_update_config(model_t *m, const model_config_t *cfg, config_t *owner)
{
    config_t *old = m->cfg_owner;
    m->cfg = cfg;
    m->cfg_owner = config_ref(owner);
    config_unref(old);
    m->queue.max = cfg->queue_max;
    m->removed = false;
    model_schedule_pump(m);
}

static void set_failed(model_t *m, const char *reason)
{
    m->load_requested = false;
    if (m->failed)
        return;
    enum model_state before = model_state(m);
    m->failed = true;
    snprintf(m->failed_reason, sizeof m->failed_reason, "%s", reason);
    log_event(LOG_ERROR, "model_state", "model=%s from=%s to=%s reason=%s", m->name,
              model_state_name(before), "failed", reason);
    core_note_event(m->core, "model %s failed: %s", m->name, reason);
    uv_timer_stop(&m->backoff_timer);
    model_schedule_pump(m); /* the dispatcher answers its queue 503 model_failed */
    core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
}

static void record_failure(model_t *m, enum restart_reason kind, const char *why)
{
    uint64_t now = core_now();
    m->restarts_by_reason[kind]++;
    m->failure_times[m->failure_next] = now;
    m->failure_next = (m->failure_next + 1) % MODEL_FAILURE_WINDOW;
    m->consecutive_failures++;
    m->restarts_total++;
    unsigned shift = m->consecutive_failures - 1;
    uint64_t delay = shift >= 20 ? BACKOFF_MAX_MS : (uint64_t)BACKOFF_FIRST_MS << shift;
    if (delay > BACKOFF_MAX_MS)
        delay = BACKOFF_MAX_MS;
    m->next_start_ms = now + delay;
    unsigned recent = 0;
    for (unsigned i = 0; i < MODEL_FAILURE_WINDOW; i++)
        if (m->failure_times[i] && now - m->failure_times[i] <= FAILURE_WINDOW_MS)
            recent++;
    log_event(LOG_WARN, "worker_failure", "model=%s reason=%s consecutive=%u recent=%u backoff_ms=%llu",
              m->name, why, m->consecutive_failures, recent, (unsigned long long)delay);
    core_note_event(m->core, "model %s: worker failure (%s), next start in %llu ms", m->name, why,
                     (unsigned long long)delay);
    if (recent >= MODEL_FAILURE_WINDOW) {
        char reason[160];
        snprintf(reason, sizeof reason, "%u failed starts or crashes within 10 min (last: %s)", recent, why);
        set_failed(m, reason);
    }
}

void model_load(model_t *m)
{
    if (m->failed) {
        m->failed = false;
        m->failed_reason[0] = '\0';
        log_event(LOG_INFO, "model_state", "model=%s from=%s to=%s reason=%s", m->name, "failed",
                  model_state_name(model_state(m)), "admin load");
    }
    m->consecutive_failures = 0;
    memset(m->failure_times, 0, sizeof m->failure_times);
    m->next_start_ms = 0;
    m->unload_requested = false;
    m->load_requested = true; /* the pump starts (or reloads) an instance even with an empty queue */
    if (m->cfg->url) {
        /* external: check its health right away */
        list_foreach(it, &m->instances) {
            instance_t *in = list_entry(it, instance_t, link);
            uv_timer_start(&in->timer, instance_health_tick, 0, 0);
        }
    }
    model_schedule_pump(m); /* loads_total counts when an instance becomes ready, not here */
}

bool model_has_live_instances(const model_t *m)
{
    list_foreach(it, &m->instances) {
        const instance_t *in = list_entry(it, instance_t, link);
        if (!in->external)
            return true;
    }
    return false;
}

/* ---- instances --------------------------------------------------------------------- */

static void on_instance_handle_closed(uv_handle_t *h)
{
    instance_t *inst = h->data;
    if (--inst->closing_handles > 0)
        return;
    model_t *m = inst->model;
    free(inst);
    m->instances_closing--;
    model_maybe_free(m);
}

/* Free the instance once nothing refers to it any more. */
static void instance_maybe_free(instance_t *inst)
{
    if (inst->proc || inst->in_flight > 0 || inst->closing_handles > 0 || inst->health_call || inst->hook_call ||
        sched_instance_holds_memory(inst))
        return;
    model_t *m = inst->model;
    list_remove(&inst->link);
    m->n_instances--;
    m->instances_closing++;
    if (m->unload_requested && !model_has_live_instances(m))
        m->unload_requested = false; /* the admin unload is complete: demand may start it again */
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    inst->closing_handles = 2;
    uv_timer_stop(&inst->timer);
    uv_timer_stop(&inst->idle_timer);
    uv_close((uv_handle_t *)&inst->timer, on_instance_handle_closed);
    uv_close((uv_handle_t *)&inst->idle_timer, on_instance_handle_closed);
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

static instance_t *instance_new(model_t *m)
{
    instance_t *inst = calloc(1, sizeof *inst);
    if (!inst)
        return NULL;
    inst->model = m;
    inst->id = ++m->next_instance_id;
    inst->gpu = -1;
    inst->gpu_pos = -1;
    ledger_entry_init(&inst->mem);
    list_init(&inst->pool);
    uv_timer_init(m->core->loop, &inst->timer);
    uv_timer_init(m->core->loop, &inst->idle_timer);
    inst->timer.data = inst;
    inst->idle_timer.data = inst;
    list_insert_tail(&m->instances, &inst->link);
    m->n_instances++;
    return inst;
}

static void on_health_answer(void *ctx, int status, const char *body, size_t body_len, const char *error)
{
    (void)body;
    (void)body_len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    inst->health_call = NULL;
    uint64_t now = core_now();
    bool ok = status == 200;
    if (inst->state == INST_STOPPING) {
        instance_maybe_free(inst);
        return;
    }
    if (inst->state == INST_STARTING) {
        if (ok) {
            inst->ready_ms = now;
            inst->health_failures = 0;
            m->consecutive_failures = 0;
            m->loads_total++;
            sched_note_load(m, now - inst->started_ms);
            sched_instance_ready(inst);
            log_event(LOG_INFO, "worker_ready", "model=%s instance=%u pid=%d port=%d startup_ms=%llu",
                      m->name, inst->id, (int)inst->pid, inst->port,
                      (unsigned long long)(now - inst->started_ms));
            instance_set_state(inst, INST_READY, "health check passed");
            uv_timer_start(&inst->timer, instance_health_tick, m->cfg->health.interval_ms, 0);
            model_schedule_pump(m);
            return;
        }
        if (now - inst->started_ms >= m->cfg->startup_timeout_ms) {
            char why[160];
            snprintf(why, sizeof why, "not healthy within startup_timeout %llu ms (last: %s)",
                     (unsigned long long)m->cfg->startup_timeout_ms,
                     error ? error : "non-200 answer");
            log_event(LOG_WARN, "worker_startup_timeout", "model=%s instance=%u pid=%d reason=%s", m->name,
                      inst->id, (int)inst->pid, why);
            inst->stop_reason = "startup_timeout";
            record_failure(m, RESTART_STARTUP_TIMEOUT, "startup timeout");
            inst->unload_reason = UNLOAD_FAILED;
            inst->stop_requested = true; /* counted already: its exit is not another crash */
            instance_set_state(inst, INST_STOPPING, "startup timeout");
            if (inst->proc)
                process_stop(inst->proc, 0);
            instance_maybe_free(inst);
            return;
        }
        uv_timer_start(&inst->timer, instance_health_tick, STARTUP_POLL_MS, 0);
        return;
    }
    /* READY or DOWN: periodic checks */
    if (ok) {
        inst->health_failures = 0;
        if (inst->state == INST_DOWN) {
            instance_set_state(inst, INST_READY, "health check passed");
            if (m->failed && inst->external) {
                m->failed = false;
                m->failed_reason[0] = '\0';
                core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
            }
            model_schedule_pump(m);
        }
    } else {
        inst->health_failures++;
        log_event(LOG_WARN, "health_check_failed", "model=%s instance=%u pid=%d status=%d error=%s failures=%u",
                  m->name, inst->id, (int)inst->pid, status, error, inst->health_failures);
        if (inst->health_failures >= m->cfg->health.failures) {
            if (inst->external) {
                if (inst->state != INST_DOWN) {
                    instance_set_state(inst, INST_DOWN, "health checks failing");
                    char reason[160];
                    snprintf(reason, sizeof reason, "external server %s:%d failing health checks", inst->host,
                             inst->port);
                    set_failed(m, reason);
                }
            } else if (inst->state == INST_READY) {
                log_event(LOG_WARN, "worker_unhealthy", "model=%s instance=%u pid=%d", m->name, inst->id,
                          (int)inst->pid);
                inst->kill_reason = RESTART_UNHEALTHY;
                if (inst->proc)
                    process_signal(inst->proc, SIGKILL); /* exit is then handled as a crash */
                return;
            }
        }
    }
    uv_timer_start(&inst->timer, instance_health_tick, m->cfg->health.interval_ms, 0);
}

static void instance_health_tick(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->health_call || inst->state == INST_STOPPING || inst->state == INST_UNLOADING ||
        inst->state == INST_UNLOADED || inst->state == INST_RELOADING)
        return;
    http_call_req_t req = {
        .host = inst->host,
        .port = inst->port,
        .method = "GET",
        .path = m->cfg->health.path,
        .timeout_ms = m->cfg->health.timeout_ms,
        .max_response = 64 * 1024,
    };
    char err[160];
    if (http_call_start(m->core->loop, &req, on_health_answer, inst, &inst->health_call, err, sizeof err) != 0) {
        inst->health_call = NULL;
        on_health_answer(inst, -1, NULL, 0, err);
    }
}

static void on_process_exit(process_t *p, int exit_status, int term_signal, void *ctx)
{
    (void)p;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    inst->proc = NULL;
    bool expected = inst->stop_requested;
    log_event(expected ? LOG_INFO : LOG_WARN, "worker_exit",
              "model=%s instance=%u pid=%d exit_status=%d signal=%d expected=%B state=%s", m->name, inst->id,
              (int)inst->pid, exit_status, term_signal, expected, instance_state_name(inst->state));
    if (inst->health_call) {
        http_call_cancel(inst->health_call);
        inst->health_call = NULL;
    }
    uv_timer_stop(&inst->timer);
    uv_timer_stop(&inst->idle_timer);
    if (!expected) {
        char why[96];
        if (term_signal)
            snprintf(why, sizeof why, "%s killed by signal %d",
                     inst->state == INST_STARTING ? "start failed:" : "crash:", term_signal);
        else
            snprintf(why, sizeof why, "%s exited with status %d",
                     inst->state == INST_STARTING ? "start failed:" : "crash:", exit_status);
        inst->stop_requested = true;
        enum restart_reason kind = inst->state == INST_STARTING ? RESTART_START_FAILED : RESTART_CRASH;
        if (inst->kill_reason != RESTART_CRASH)
            kind = inst->kill_reason;
        record_failure(m, kind, why);
    } else {
        m->unloads_total++;
        m->unloads_by_reason[inst->unload_reason]++;
    }
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    instance_set_state(inst, INST_STOPPING, expected ? (inst->stop_reason ? inst->stop_reason : "stopped") : "exited");
    if (sched_instance_holds_memory(inst)) {
        if (sched_gpu_ok()) {
            inst->reclaiming = false;
            sched_instance_unloading(inst); /* entry released when NVML shows the memory back */
        } else {
            ledger_release(sched_ledger(), &inst->mem);
        }
    }
    instance_maybe_free(inst);
    if (m->unload_requested && !model_has_live_instances(m))
        m->unload_requested = false;
    model_schedule_pump(m);
}

static char *subst(const char *arg, int port, int gpu)
{
    char portbuf[16], gpubuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", port);
    snprintf(gpubuf, sizeof gpubuf, "%d", gpu < 0 ? 0 : gpu);
    buf_t b;
    buf_init(&b, 64 * 1024);
    for (const char *p = arg; *p;) {
        if (strncmp(p, "{port}", 6) == 0) {
            buf_append_str(&b, portbuf);
            p += 6;
        } else if (strncmp(p, "{gpu}", 5) == 0) {
            buf_append_str(&b, gpubuf);
            p += 5;
        } else {
            buf_append(&b, p, 1);
            p++;
        }
    }
    if (!b.data)
        return strdup("");
    return buf_steal(&b, NULL);
}

static void instance_start(model_t *m, size_t gpu_pos)
{
    const model_config_t *mc = m->cfg;
    instance_t *inst = instance_new(m);
    if (!inst)
        return;
    sched_place_instance(inst, gpu_pos);
    snprintf(inst->host, sizeof inst->host, "127.0.0.1");
    inst->port = pick_free_port();
    inst->started_ms = core_now();
    inst->state = INST_STARTING;
    char **argv = calloc(mc->n_cmd + 1, sizeof *argv);
    size_t n_env = mc->n_env + 3;
    config_kv_t *env = calloc(n_env, sizeof *env);
    char portbuf[16], gpubuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", inst->port);
    snprintf(gpubuf, sizeof gpubuf, "%d", inst->gpu);
    char pidfile[4096];
    snprintf(pidfile, sizeof pidfile, "%s/pids/%s.%u.pid", m->core->cfg->state_dir, m->name, inst->id);
    char err[256] = "";
    int rc = -1;
    if (argv && env && inst->port > 0) {
        for (size_t i = 0; i < mc->n_cmd; i++)
            argv[i] = subst(mc->cmd[i], inst->port, inst->gpu);
        env[0].key = "PORT";
        env[0].value = portbuf;
        env[1].key = "VRAMD_MODEL";
        env[1].value = m->name;
        size_t k = 2;
        if (inst->gpu >= 0) {
            env[k].key = "CUDA_VISIBLE_DEVICES";
            env[k].value = gpubuf;
            k++;
        }
        for (size_t i = 0; i < mc->n_env; i++)
            env[k++] = mc->env[i];
        n_env = k;
        process_spec_t spec = {
            .argv = argv,
            .env = env,
            .n_env = n_env,
            .cwd = mc->cwd,
            .log_name = m->name,
            .pidfile = pidfile,
        };
        rc = process_spawn(m->core->loop, &spec, on_process_exit, inst, &inst->proc, err, sizeof err);
    } else {
        snprintf(err, sizeof err, "%s", inst->port <= 0 ? "no free port" : "out of memory");
    }
    if (argv)
        for (size_t i = 0; i < mc->n_cmd; i++)
            free(argv[i]);
    free(argv);
    free(env);
    if (rc != 0) {
        log_event(LOG_ERROR, "worker_spawn_failed", "model=%s instance=%u error=%s", m->name, inst->id, err);
        char why[200];
        snprintf(why, sizeof why, "start failed: %s", err);
        inst->proc = NULL;
        record_failure(m, RESTART_START_FAILED, why);
        inst->state = INST_STOPPING;
        ledger_release(sched_ledger(), &inst->mem);
        instance_maybe_free(inst);
        return;
    }
    inst->pid = process_pid(inst->proc);
    inst->pgid = inst->pid; /* process.c puts every worker in its own group */
    log_event(LOG_INFO, "worker_started", "model=%s instance=%u pid=%d port=%d gpu=%d", m->name, inst->id,
              (int)inst->pid, inst->port, inst->gpu);
    instance_set_state(inst, INST_STARTING, "started");
    uv_timer_start(&inst->timer, instance_health_tick, STARTUP_POLL_MS, 0);
}

static void ensure_external(model_t *m)
{
    if (!list_empty(&m->instances))
        return;
    instance_t *inst = instance_new(m);
    if (!inst)
        return;
    inst->external = true;
    snprintf(inst->host, sizeof inst->host, "%s", m->cfg->url_host);
    inst->port = m->cfg->url_port;
    inst->started_ms = inst->ready_ms = core_now();
    inst->state = INST_READY; /* optimistic until health checks say otherwise */
    if (sched_model_uses_gpu(m->cfg) && sched_gpu_ok()) {
        /* an external server is already loaded somewhere: book it on its allowed GPU with
         * the most room (its measured usage replaces the guess at the next snapshot) */
        size_t pos = 0;
        uint64_t best = 0;
        ledger_t *l = sched_ledger();
        for (size_t g = 0; g < l->n_gpus; g++) {
            bool ok = !m->cfg->gpus;
            for (size_t k = 0; k < m->cfg->n_gpus; k++)
                ok = ok || m->cfg->gpus[k] == l->gpus[g].index;
            if (ok && ledger_free(l, g) >= best) {
                best = ledger_free(l, g);
                pos = g;
            }
        }
        sched_place_instance(inst, pos);
    }
    log_event(LOG_INFO, "instance_state", "model=%s instance=%u from=%s to=%s reason=%s", m->name, inst->id, "none",
              "ready", "external server");
    uv_timer_start(&inst->timer, instance_health_tick, 0, 0);
}

static void instance_stop(instance_t *inst, const char *reason)
{
    model_t *m = inst->model;
    if (inst->external || inst->state == INST_STOPPING)
        return;
    inst->stop_requested = true;
    inst->stop_reason = reason;
    uv_timer_stop(&inst->idle_timer);
    if (inst->in_flight > 0) {
        /* draining: no new requests (stop_requested), stop once in-flight ones finish */
        instance_set_state(inst, inst->state, reason);
        return;
    }
    uv_timer_stop(&inst->timer);
    if (inst->health_call) {
        http_call_cancel(inst->health_call);
        inst->health_call = NULL;
    }
    core_emit(inst->model->core, CORE_EV_INSTANCE_DOWN, inst);
    instance_set_state(inst, INST_STOPPING, reason);
    if (inst->proc)
        process_stop(inst->proc, m->cfg->stop_timeout_ms);
    else
        instance_maybe_free(inst);
}

static void on_idle_timeout(uv_timer_t *t)
{
    instance_t *inst = t->data;
    model_t *m = inst->model;
    if (inst->in_flight == 0 && m->queue.depth == 0 && inst->state == INST_READY) {
        inst->unload_reason = UNLOAD_IDLE;
        instance_stop(inst, "idle");
    }
}

void instance_recycle(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    if (inst->external || inst->stop_requested || inst->state == INST_STOPPING)
        return;
    m->recycles_total++;
    m->restarts_by_reason[RESTART_RECYCLE]++;
    inst->unload_reason = UNLOAD_RECYCLE;
    log_event(LOG_INFO, "worker_recycle", "model=%s instance=%u pid=%d reason=%s requests=%llu in_flight=%u", m->name,
              inst->id, (int)inst->pid, why, (unsigned long long)inst->requests_total, inst->in_flight);
    core_note_event(m->core, "recycling %s instance %u: %s", m->name, inst->id, why);
    instance_stop(inst, why); /* drains first: new requests go elsewhere, in-flight ones finish */
    model_schedule_pump(m);   /* a replacement starts when there is demand */
}

void instance_kill_hung(instance_t *inst)
{
    model_t *m = inst->model;
    m->hangs_total++;
    if (inst->external || !inst->proc)
        return;
    inst->kill_reason = RESTART_HANG;
    log_event(LOG_WARN, "worker_kill", "model=%s instance=%u pid=%d reason=%s", m->name, inst->id, (int)inst->pid,
              "request hang");
    process_signal(inst->proc, SIGKILL); /* the exit is a crash: counted, restarted with backoff */
}

void instance_request_done(instance_t *inst, bool worker_broken)
{
    model_t *m = inst->model;
    if (inst->in_flight)
        inst->in_flight--;
    if (m->in_flight)
        m->in_flight--;
    inst->failed_in_row = worker_broken ? inst->failed_in_row + 1 : 0;
    const config_recycle_t *rc = &m->cfg->recycle;
    if (inst->failed_in_row >= 5)
        instance_recycle(inst, "5 failed requests in a row");
    else if (rc->after_requests && inst->requests_total >= rc->after_requests)
        instance_recycle(inst, "after_requests");
    if (inst->stop_requested && inst->in_flight == 0 && inst->state != INST_STOPPING && !inst->external) {
        instance_stop(inst, inst->stop_reason ? inst->stop_reason : "stopped");
    } else if (!inst->proc && !inst->external && inst->state == INST_STOPPING) {
        instance_maybe_free(inst);
    }
    model_schedule_pump(m);
    core_emit(m->core, CORE_EV_REQUEST_ENDED, NULL);
}

/* ---- hooks: unload / reload ----------------------------------------------------------- */

static int call_hook(instance_t *inst, const config_hook_t *hook, uint64_t default_timeout, http_call_cb cb)
{
    model_t *m = inst->model;
    http_call_req_t req = {
        .host = inst->host,
        .port = inst->port,
        .method = hook->method ? hook->method : "POST",
        .path = hook->path,
        .timeout_ms = hook->timeout_ms ? hook->timeout_ms : default_timeout,
        .max_response = 64 * 1024,
    };
    char err[160];
    if (http_call_start(m->core->loop, &req, cb, inst, &inst->hook_call, err, sizeof err) != 0) {
        inst->hook_call = NULL;
        log_event(LOG_WARN, "hook_failed", "model=%s instance=%u path=%s error=%s", m->name, inst->id, hook->path, err);
        return -1;
    }
    return 0;
}

/* A hook call ended: it is no longer pending; log it; was it a 2xx? */
static bool hook_answered(instance_t *inst, const char *event, int status, const char *error)
{
    inst->hook_call = NULL;
    bool ok = status >= 200 && status < 300;
    log_event(ok ? LOG_INFO : LOG_WARN, event, "model=%s instance=%u status=%d error=%s", inst->model->name, inst->id,
              status, error);
    return ok;
}

static void on_unload_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    bool ok = hook_answered(inst, "unload_hook_done", status, error);
    if (inst->state != INST_UNLOADING)
        return;
    if (!ok) {
        if (inst->external) {
            char reason[160];
            snprintf(reason, sizeof reason, "unload hook failed (%s)", error ? error : "non-2xx answer");
            instance_set_state(inst, INST_READY, "unload hook failed");
            set_failed(m, reason);
        } else {
            inst->state = INST_READY;
            instance_stop(inst, "unload hook failed");
        }
        return;
    }
    m->unloads_total++;
    m->unloads_by_reason[inst->unload_reason]++;
    sched_instance_unloading(inst); /* instance_reclaimed follows once NVML shows the memory back */
}

void instance_evict(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    uv_timer_stop(&inst->idle_timer);
    inst->unload_reason = UNLOAD_EVICTED;
    if (inst->state == INST_UNLOADED && !inst->external) {
        /* unloaded but still holding residue: only stopping it gives that back */
        inst->stop_requested = true;
        inst->stop_reason = why;
        instance_set_state(inst, INST_STOPPING, why);
        if (inst->proc)
            process_stop(inst->proc, m->cfg->stop_timeout_ms);
        return;
    }
    if (m->cfg->unload.set && inst->state == INST_READY) {
        instance_set_state(inst, INST_UNLOADING, why);
        if (call_hook(inst, &m->cfg->unload, 30000, on_unload_answer) == 0)
            return;
        instance_set_state(inst, INST_READY, "unload hook could not be called");
    }
    if (inst->external) {
        set_failed(m, "external server cannot be unloaded");
        return;
    }
    instance_stop(inst, why);
}

void instance_reclaimed(instance_t *inst, bool ok)
{
    model_t *m = inst->model;
    if (!inst->proc && !inst->external) {
        instance_maybe_free(inst);
    } else if (inst->state == INST_UNLOADING) {
        if (ok) {
            instance_set_state(inst, INST_UNLOADED, "memory reclaimed");
        } else if (inst->external) {
            instance_set_state(inst, INST_UNLOADED, "memory not returned");
            set_failed(m, "external server did not give its memory back after unload");
        } else {
            log_event(LOG_WARN, "worker_kill", "model=%s instance=%u pid=%d reason=%s", m->name, inst->id,
                      (int)inst->pid, "memory not returned after unload");
            inst->stop_requested = true;
            inst->stop_reason = "memory not returned after unload";
            instance_set_state(inst, INST_STOPPING, "memory not returned after unload");
            if (inst->proc)
                process_signal(inst->proc, SIGKILL);
        }
    }
    sched_pump_all(m->core);
}

static void on_reload_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    bool ok = hook_answered(inst, "reload_hook_done", status, error);
    if (inst->state != INST_RELOADING)
        return;
    if (!ok) {
        instance_set_state(inst, INST_UNLOADED, "reload hook failed");
        record_failure(m, RESTART_RELOAD_FAILED, "reload hook failed");
        return;
    }
    /* back to health checking: READY once it answers */
    inst->started_ms = core_now();
    instance_set_state(inst, INST_STARTING, "reloaded");
    uv_timer_start(&inst->timer, instance_health_tick, 0, 0);
}

static void instance_reload(instance_t *inst)
{
    model_t *m = inst->model;
    ledger_t *l = sched_ledger();
    if (inst->gpu_pos >= 0 && sched_model_uses_gpu(m->cfg)) {
        uint64_t want = m->cfg->memory.resident + sched_request_estimate(m);
        uint64_t held = inst->mem.bytes;
        uint64_t extra = want > held ? want - held : 0;
        if (!ledger_fits(l, (size_t)inst->gpu_pos, extra, m)) {
            size_t pos;
            (void)sched_place(m, &pos); /* starts evictions when that makes room */
            return;
        }
        uint64_t resident = m->cfg->memory.resident > held ? m->cfg->memory.resident : held;
        ledger_resize(l, &inst->mem, resident);
        sched_unblocked(m);
    }
    if (!m->cfg->reload.set) {
        /* nothing to call: the server reloads on its own; check its health */
        instance_set_state(inst, INST_STARTING, "reload (no hook)");
        uv_timer_start(&inst->timer, instance_health_tick, 0, 0);
        return;
    }
    instance_set_state(inst, INST_RELOADING, "needed again");
    if (call_hook(inst, &m->cfg->reload, 60000, on_reload_answer) != 0) {
        instance_set_state(inst, INST_UNLOADED, "reload hook could not be called");
        record_failure(m, RESTART_RELOAD_FAILED, "reload hook could not be called");
    }
}

/* ---- demand: what the dispatcher's pump asks of the supervisor ------------------------- */

static void arm_idle_timers(model_t *m)
{
    const model_config_t *mc = m->cfg;
    if (m->queue.depth > 0 || mc->url)
        return;
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->state != INST_READY || in->in_flight > 0 || in->stop_requested)
            continue;
        if (mc->keep_alive_ms == CONFIG_FOREVER)
            continue;
        if (mc->keep_alive_ms == 0) {
            in->unload_reason = UNLOAD_IDLE;
            instance_stop(in, "keep_alive 0");
            continue;
        }
        if (!uv_is_active((uv_handle_t *)&in->idle_timer))
            uv_timer_start(&in->idle_timer, on_idle_timeout, mc->keep_alive_ms, 0);
    }
}

void supervisor_prepare(model_t *m)
{
    if (m->cfg->url)
        ensure_external(m);
}

/* Start (or reload) an instance when the queue, a pin or an admin load wants one. */
static int start_on_demand(model_t *m, uint64_t now)
{
    unsigned starting = 0;
    instance_t *to_reload = NULL;
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->state == INST_STARTING || in->state == INST_RELOADING || in->state == INST_UNLOADING)
            starting++;
        if (in->state == INST_UNLOADED)
            to_reload = in;
    }
    if (starting == 0 && to_reload) {
        instance_reload(to_reload);
    } else if (starting == 0 && m->n_instances < m->cfg->instances && !m->cfg->url) {
        /* one start at a time; scale out only while the queue waits for a slot */
        if (now >= m->next_start_ms) {
            size_t pos = 0;
            enum placer_result pr = sched_place(m, &pos);
            if (pr == PLACER_FITS)
                instance_start(m, pos);
            else if (pr == PLACER_NEVER)
                return PLACER_NEVER;
            else if (pr == PLACER_WAIT || pr == PLACER_EVICT)
                log_event(LOG_DEBUG, "placement_waiting", "model=%s result=%s", m->name, placer_result_name(pr));
        } else if (!uv_is_active((uv_handle_t *)&m->backoff_timer)) {
            uv_timer_start(&m->backoff_timer, on_backoff_timer, m->next_start_ms - now, 0);
        }
    }
    return PLACER_FITS;
}

int supervisor_tend(model_t *m)
{
    core_t *d = m->core;
    bool pinned = m->cfg->keep_alive_ms == CONFIG_FOREVER && !d->stopping && !m->removed;
    bool ready_now = false;
    list_foreach(it, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->state == INST_READY && !in->stop_requested)
            ready_now = true;
    }
    if (ready_now)
        m->load_requested = false;
    bool want = (m->queue.depth > 0 || (pinned && m->n_instances == 0) || (m->load_requested && !ready_now)) &&
                !d->stopping && !m->unload_requested;
    int rc = want ? start_on_demand(m, core_now()) : PLACER_FITS;
    arm_idle_timers(m);
    model_maybe_free(m);
    return rc;
}

void model_start_pinned(model_t *m)
{
    model_schedule_pump(m);
}

void model_unload(model_t *m, const char *reason)
{
    if (m->cfg->url)
        return; /* external: unload hooks arrive with the memory ledger */
    m->unload_requested = true;
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->state != INST_STOPPING)
            in->unload_reason = UNLOAD_ADMIN;
        instance_stop(in, reason);
    }
    if (!model_has_live_instances(m))
        m->unload_requested = false;
}

void model_stop_all(model_t *m, const char *reason)
{
    list_foreach_safe(it, tmp, &m->instances) {
        instance_t *in = list_entry(it, instance_t, link);
        if (in->external) {
            uv_timer_stop(&in->timer);
            if (in->health_call) {
                http_call_cancel(in->health_call);
                in->health_call = NULL;
            }
            in->state = INST_STOPPING;
            in->stop_requested = true;
            instance_maybe_free(in);
        } else {
            if (in->state != INST_STOPPING)
                in->unload_reason = m->removed ? UNLOAD_REMOVED : UNLOAD_DRAIN;
            instance_stop(in, reason);
        }
    }
}

void model_remove(model_t *m)
{
    m->removed = true;
    log_event(LOG_INFO, "model_removed", "model=%s queued=%zu in_flight=%u", m->name, m->queue.depth, m->in_flight);
    model_schedule_pump(m);
}

static void on_model_timer_closed(uv_handle_t *h)
{
    model_t *m = h->data;
    config_unref(m->cfg_owner);
    free(m->name);
    free(m);
}

static void model_maybe_free(model_t *m)
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
