/*
 * hooks: the one way vramd calls a worker's hook (instance_call_hook: clear_cache, unload,
 * reload, sleep, wake; park.c, park_evict.c and the scheduler's actions.clear_cache all come
 * here), and eviction and its way back through a model's unload and reload hooks:
 * READY --unload hook--> UNLOADING --memory back (instance_reclaimed)--> UNLOADED
 * --reload hook (instance_reload)--> RELOADING --> STARTING (health checks) --> READY.
 * Without an unload hook, eviction stops the worker.
 *
 * Every hook call: the hook as configured (method, path, body with its placeholders filled as
 * in cmd: {served_model}, {port}, ..., timeout), logged when made
 * (hook_call) and when it ends (its *_done event: clear_cache_done, unload_hook_done, ...,
 * with outcome), or hook_failed / local_resource_exhausted when it cannot be made; counted
 * once in model->hook_calls[hook][outcome] (vramd_hook_calls_total) however it ends. A
 * non-2xx answer whose body holds the hook's nothing_to_do text (llama.cpp's router: "model is
 * not running", "model is already running") is done: outcome ok, nothing_to_do true in the
 * log, and the caller sees 200. The
 * scheduler's clear (instance_clear_cache) is followed by an NVML reading at its answer.
 *
 * The unload hook is also the tier after a park (park.c): from PARKING or PARKED.
 * Invariants: at most one hook call per instance is pending (inst->hook.hook_call, cleared when
 * it answers, before its caller's callback runs); an answer that arrives after the instance
 * left UNLOADING or RELOADING is only logged. A supervised worker whose memory does not
 * come back is killed; an external server is marked failed. Calls instance.c and
 * model_state.c, never supervisor.c (see supervisor_int.h for the order).
 *
 * vramd's own shortage: a hook that cannot be called, or fails, for want of vramd's own
 * descriptors or memory (HTTP_CALL_LOCAL_SHORTAGE) is not the worker's failure: nothing is
 * stopped or failed, no failure of the worker is counted (outcome local_shortage, and
 * CORE_CNT_LOCAL_HOOK); the instance stays as it was (READY, or UNLOADED for a reload), an
 * admin unload is answered 503 local_resource_exhausted, and no hook of that instance is
 * tried again for HOOK_LOCAL_RETRY_MS (then every model is pumped: eviction and reload try
 * again).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/core.h"
#include "net/http_call.h"
#include "proc/process.h"
#include "sched/scheduler.h"
#include "workers/hooks.h"
#include "workers/model_state.h"
#include "workers/supervisor_int.h"

#define HOOK_LOCAL_RETRY_MS 1000

static void on_local_retry(uv_timer_t *t)
{
    model_t *m = t->data;
    sched_pump_all(m->core);
}

/* A hook was not made for vramd's own shortage: log and count it, and hold further hooks of
 * this instance for HOOK_LOCAL_RETRY_MS (no busy loop of pumps while descriptors lack). */
static void hook_local_shortage(instance_t *inst, const char *hook, const char *error)
{
    model_t *m = inst->model;
    core_count(m->core, CORE_CNT_LOCAL_HOOK);
    log_event(LOG_WARN, "local_resource_exhausted", "model=%s instance=%u pid=%d call=%s error=%s", m->name,
              inst->id, (int)inst->life.pid, hook, error);
    inst->hook.local_retry_ms = core_now() + HOOK_LOCAL_RETRY_MS;
    if (!uv_is_active((uv_handle_t *)&m->backoff_timer))
        uv_timer_start(&m->backoff_timer, on_local_retry, HOOK_LOCAL_RETRY_MS, 0);
}

static bool hook_cooling(const instance_t *inst) { return core_now() < inst->hook.local_retry_ms; }

/* What each hook is: its config, the timeout when it sets none, its answer's log event. */
static const config_hook_t *hook_config(const model_t *m, enum hook_kind k)
{
    const model_config_t *c = m->cfg;
    const config_hook_t *h[HOOK_KINDS] = {&c->clear_cache, &c->unload, &c->reload, &c->sleep, &c->wake};
    return h[k];
}

uint64_t hooks_timeout_ms(const model_t *m, enum hook_kind k)
{
    const config_hook_t *h = hook_config(m, k);
    if (h->timeout_ms)
        return h->timeout_ms;
    return k == HOOK_RELOAD || k == HOOK_WAKE ? 60000 : 30000;
}

static const char *hook_done_event(enum hook_kind k)
{
    static const char *const n[HOOK_KINDS] = {"clear_cache_done", "unload_hook_done", "reload_hook_done",
                                              "sleep_hook_done", "wake_hook_done"};
    return n[k];
}

static void hook_count(instance_t *inst, enum hook_kind kind, enum hook_outcome o)
{
    inst->model->hook_calls[kind][o]++;
}

/* Every hook's answer comes here first: no longer pending, counted, logged (as the hook's
 * *_done event), vramd's own shortage noted; then the caller's callback. */
static void on_hook_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    instance_t *inst = ctx;
    model_t *m = inst->model;
    enum hook_kind kind = inst->hook.hook_kind;
    http_call_cb cb = inst->hook.hook_cb;
    inst->hook.hook_call = NULL;
    inst->hook.hook_cb = NULL;
    const char *done_text = hook_config(m, kind)->nothing_to_do;
    bool nothing = status >= 300 && done_text && body && memmem(body, len, done_text, strlen(done_text)) != NULL;
    int seen = nothing ? 200 : status; /* "already so" (the hook's nothing_to_do): done */
    enum hook_outcome o = hook_outcome_of(seen, core_now() >= inst->hook.hook_deadline_ms);
    hook_count(inst, kind, o);
    log_event(o == HOOK_OK ? LOG_INFO : LOG_WARN, hook_done_event(kind),
              "model=%s instance=%u hook=%s status=%d outcome=%s nothing_to_do=%B error=%s", m->name, inst->id,
              hook_kind_name(kind), status, hook_outcome_name(o), (int)nothing, error);
    if (o == HOOK_LOCAL_SHORTAGE)
        hook_local_shortage(inst, hook_config(m, kind)->path, error);
    cb(inst, seen, body, len, error);
}

int instance_call_hook(instance_t *inst, enum hook_kind kind, http_call_cb cb)
{
    model_t *m = inst->model;
    const config_hook_t *hook = hook_config(m, kind);
    char *body = hook->body ? worker_cmds_subst(inst, hook->body) : NULL; /* {served_model}, {port}, ... */
    http_call_req_t req = {
        .host = inst->life.host,
        .port = inst->life.port,
        .method = hook->method ? hook->method : "POST",
        .path = hook->path,
        .body = body ? body : hook->body,
        .body_len = body ? strlen(body) : hook->body ? strlen(hook->body) : 0,
        .timeout_ms = hooks_timeout_ms(m, kind),
        .max_response = 64 * 1024,
    };
    log_event(LOG_INFO, "hook_call", "model=%s instance=%u hook=%s method=%s path=%s body_bytes=%zu", m->name,
              inst->id, hook_kind_name(kind), req.method, req.path, req.body_len);
    inst->hook.hook_kind = kind;
    inst->hook.hook_cb = cb;
    inst->hook.hook_deadline_ms = core_now() + req.timeout_ms; /* the client's timer runs on the same clock */
    char err[160];
    int rc = http_call_start(m->core->loop, &req, on_hook_answer, inst, &inst->hook.hook_call, err, sizeof err);
    free(body); /* the call keeps its own copy of the request */
    if (rc == 0)
        return 0;
    inst->hook.hook_call = NULL;
    inst->hook.hook_cb = NULL;
    hook_count(inst, kind, rc == -2 ? HOOK_LOCAL_SHORTAGE : HOOK_FAILED);
    if (rc == -2)
        hook_local_shortage(inst, hook->path, err);
    else
        log_event(LOG_WARN, "hook_failed", "model=%s instance=%u hook=%s path=%s error=%s", m->name, inst->id,
                  hook_kind_name(kind), hook->path, err);
    return rc;
}

void hooks_confirm_begin(instance_t *inst, enum hook_kind after)
{
    inst->hook.hook_kind = after;
    inst->hook.hook_deadline_ms = core_now() + hooks_timeout_ms(inst->model, after);
}

static void on_confirm_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    instance_t *inst = ctx;
    http_call_cb cb = inst->hook.hook_cb;
    inst->hook.hook_call = NULL;
    inst->hook.hook_cb = NULL;
    cb(inst, status, body, len, error);
}

int hooks_confirm_get(instance_t *inst, const char *path, http_call_cb cb, char *err, size_t errlen)
{
    uint64_t now = core_now();
    http_call_req_t req = {
        .host = inst->life.host,
        .port = inst->life.port,
        .method = "GET",
        .path = path,
        .timeout_ms = inst->hook.hook_deadline_ms > now ? inst->hook.hook_deadline_ms - now : 1,
        .max_response = 4096,
    };
    inst->hook.hook_cb = cb;
    if (http_call_start(inst->model->core->loop, &req, on_confirm_answer, inst, &inst->hook.hook_call, err,
                        errlen) == 0)
        return 0;
    inst->hook.hook_call = NULL;
    inst->hook.hook_cb = NULL;
    return -1;
}

static void on_clear_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)ctx;
    (void)status;
    (void)body;
    (void)len;
    (void)error;
    sched_poll_now(); /* what it gave back shows at once, not at the next poll interval */
}

bool instance_clear_cache(instance_t *inst)
{
    return hooks_clear_cache(inst, on_clear_answer) == 0;
}

int hooks_clear_cache(instance_t *inst, http_call_cb cb)
{
    if (!inst->model->cfg->clear_cache.set || inst->life.state != INST_READY || inst->hook.hook_call || hook_cooling(inst))
        return -1;
    inst->hook.last_clear_cache_ms = core_now();
    return instance_call_hook(inst, HOOK_CLEAR_CACHE, cb);
}

static void on_unload_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    bool ok = hook_outcome_of(status, false) == HOOK_OK;
    if (status == HTTP_CALL_LOCAL_SHORTAGE) { /* counted and held back (on_hook_answer) */
        if (inst->life.state != INST_UNLOADING)
            return;
        if (inst->life.unload_reason == UNLOAD_ADMIN)
            m->unload_local_failed = true; /* before the state change answers the admin call */
        instance_set_state(inst, INST_READY, "unload hook not made: vramd short of descriptors or memory");
        return;
    }
    if (inst->life.state != INST_UNLOADING)
        return;
    if (!ok) {
        if (inst->external) {
            char reason[160];
            snprintf(reason, sizeof reason, "unload hook failed (%s)", error ? error : "non-2xx answer");
            instance_set_state(inst, INST_READY, "unload hook failed");
            model_set_failed(m, reason);
        } else {
            instance_set_state(inst, INST_READY, "unload hook failed");
            instance_stop(inst, "unload hook failed");
        }
        return;
    }
    m->unloads_total++;
    m->unloads_by_reason[inst->life.unload_reason]++;
    if (!sched_instance_holds_memory(inst)) {
        hooks_reclaimed(inst, true); /* no GPU memory booked: the hook's 2xx is the answer */
        return;
    }
    sched_instance_unloading(inst); /* instance_reclaimed follows once NVML shows the memory back */
    instance_report_poll(inst);     /* a shared Ollama: its /api/ps says it instead */
}

int instance_unload(instance_t *inst, enum unload_reason reason, const char *why)
{
    model_t *m = inst->model;
    bool parked = inst->life.state == INST_PARKING || inst->life.state == INST_PARKED; /* the next tier after a park */
    if (!m->cfg->unload.set || (inst->life.state != INST_READY && !parked) || inst->hook.hook_call)
        return -1;
    if (hook_cooling(inst)) {
        if (reason == UNLOAD_ADMIN) {
            m->unload_local_failed = true;
            core_emit(m->core, CORE_EV_MODEL_CHANGED, m); /* answers a waiting admin call */
        }
        return -2;
    }
    uv_timer_stop(&inst->life.idle_timer);
    inst->life.unload_reason = reason;
    instance_set_state(inst, INST_UNLOADING, why);
    int rc = instance_call_hook(inst, HOOK_UNLOAD, on_unload_answer);
    if (rc == 0)
        return 0;
    if (rc == -2 && reason == UNLOAD_ADMIN)
        m->unload_local_failed = true; /* before the state change answers the admin call */
    if (!parked) {
        instance_set_state(inst, INST_READY, rc == -2 ? "unload hook not made: vramd short of descriptors or memory"
                                                      : "unload hook could not be called");
        return rc;
    }
    /* parked, the next tier could not even be asked: nothing vramd can do but say so */
    instance_set_state(inst, INST_UNLOADED, "unload hook could not be called after a park");
    model_set_failed(m, "unload hook could not be called after a park");
    return 0;
}

void hooks_evict(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    uv_timer_stop(&inst->life.idle_timer);
    inst->life.unload_reason = UNLOAD_EVICTED;
    if (inst->life.state == INST_UNLOADED && !inst->external) {
        /* unloaded but still holding residue: only stopping it gives that back */
        inst->life.stop_requested = true;
        inst->life.stop_reason = why;
        instance_set_state(inst, INST_STOPPING, why);
        if (inst->life.proc)
            process_stop(inst->life.proc, m->cfg->stop_timeout_ms);
        return;
    }
    int rc = instance_unload(inst, UNLOAD_EVICTED, why);
    if (rc == 0 || rc == -2)
        return; /* -2: vramd's own shortage; eviction tries again after HOOK_LOCAL_RETRY_MS */
    if (inst->external) {
        model_set_failed(m, "external server cannot be unloaded");
        return;
    }
    instance_stop(inst, why);
}

void hooks_reclaimed(instance_t *inst, bool ok)
{
    model_t *m = inst->model;
    if (!inst->life.proc && !inst->external) {
        instance_maybe_free(inst);
    } else if (inst->life.state == INST_UNLOADING) {
        if (ok) {
            instance_set_state(inst, INST_UNLOADED, "memory reclaimed");
        } else if (inst->external) {
            instance_set_state(inst, INST_UNLOADED, "memory not returned");
            model_set_failed(m, "external server did not give its memory back after unload");
        } else {
            log_event(LOG_WARN, "worker_kill", "model=%s instance=%u pid=%d reason=%s", m->name, inst->id,
                      (int)inst->life.pid, "memory not returned after unload");
            inst->life.stop_requested = true;
            inst->life.stop_reason = "memory not returned after unload";
            instance_set_state(inst, INST_STOPPING, "memory not returned after unload");
            if (inst->life.proc)
                process_signal(inst->life.proc, SIGKILL);
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
    bool ok = hook_outcome_of(status, false) == HOOK_OK;
    if (status == HTTP_CALL_LOCAL_SHORTAGE) { /* counted and held back (on_hook_answer) */
        if (inst->life.state == INST_RELOADING)
            instance_set_state(inst, INST_UNLOADED, "reload hook not made: vramd short of descriptors or memory");
        return;
    }
    if (inst->life.state != INST_RELOADING)
        return;
    if (!ok) {
        instance_set_state(inst, INST_UNLOADED, "reload hook failed");
        model_record_failure(m, RESTART_RELOAD_FAILED, "reload hook failed");
        return;
    }
    /* back to health checking: READY once it answers */
    inst->life.started_ms = core_now();
    instance_set_state(inst, INST_STARTING, "reloaded");
    uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0);
}

void instance_reload(instance_t *inst)
{
    model_t *m = inst->model;
    const ledger_t *l = sched_ledger();
    if (hook_cooling(inst))
        return; /* vramd's own shortage a moment ago: on_local_retry pumps again */
    if (inst->memory.gpu_pos >= 0 && sched_model_uses_gpu(m->cfg)) {
        uint64_t want = m->cfg->memory.resident + sched_request_estimate(m);
        uint64_t held = inst->memory.mem.bytes;
        uint64_t extra = want > held ? want - held : 0;
        if (!ledger_fits(l, (size_t)inst->memory.gpu_pos, extra, m)) {
            size_t pos;
            (void)sched_place(m, &pos); /* starts evictions when that makes room */
            return;
        }
        uint64_t resident = m->cfg->memory.resident > held ? m->cfg->memory.resident : held;
        sched_book_resize(inst, resident);
        sched_unblocked(m);
    }
    if (!m->cfg->reload.set) {
        /* nothing to call: the server reloads on its own; check its health */
        instance_set_state(inst, INST_STARTING, "reload (no hook)");
        uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0);
        return;
    }
    instance_set_state(inst, INST_RELOADING, "needed again");
    int rc = instance_call_hook(inst, HOOK_RELOAD, on_reload_answer);
    if (rc == -2) {
        instance_set_state(inst, INST_UNLOADED, "reload hook not made: vramd short of descriptors or memory");
    } else if (rc != 0) {
        instance_set_state(inst, INST_UNLOADED, "reload hook could not be called");
        model_record_failure(m, RESTART_RELOAD_FAILED, "reload hook could not be called");
    }
}
