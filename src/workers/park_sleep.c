/*
 * park_sleep: the sleep tier (park_tier.h's ops; SPEC 4.1): the worker's own sleep hook
 * takes its weights to host memory, its wake hook brings them back (vLLM's, SGLang's sleep
 * mode; a model needs both hooks, and park_keep_alive not 0).
 *
 *   READY --sleep hook (host booked first by park.c)--> PARKING --2xx--> reported OUT_DONE
 *     (park.c: PARKED once NVML shows the memory gone); not 2xx --> reported OUT_FAILED
 *     (park.c: READY, the next tier); not made for vramd's own shortage --> READY again.
 *   RESUMING (GPU booked back by park.c) --wake hook--> 2xx: reported BACK_DONE (park.c:
 *     READY once NVML shows it back); failed, or could not be called: BACK_FAILED; not made
 *     for vramd's own shortage --> PARKED again (tried after the hold).
 *   An external server with a wake hook, found at start (a vramd that stopped while it was
 *   parked leaves it asleep): READY --wake hook--> RESUMING --> READY before its first
 *   request (waking an awake vLLM or SGLang is a no-op); a failed wake leaves it to its
 *   health checks (park.c's wake_failed).
 *
 * A server whose preset names a sleep_confirm path (vLLM's /is_sleeping, config/presets.h): a
 * 2xx from /sleep or /wake_up is confirmed with GET on that path (vLLM's dev-mode route,
 * answering {"is_sleeping": true|false}) before it is reported: a
 * sleep counts (OUT_DONE, then park.c waits for NVML) only when it says true, a wake
 * (BACK_DONE) only when it says false. "Not yet" (the other value: vLLM may answer /sleep
 * before the engine is done, its api_router's FIXME) is asked again every
 * CONFIRM_RETRY_MS on inst->life.timer (idle while PARKING and RESUMING: the health tick stops
 * there) until the hook's timeout; anything else (another status, no JSON, the timeout) is
 * OUT_FAILED / BACK_FAILED. Logged once as sleep_confirm with what it said and how often
 * it asked.
 *
 * Invariant: one hook call at a time (inst->hook.hook_call, the confirmation included); each hook answer is reported at most
 * once, and not at all once the instance left the state it was made for. Calls hooks.c,
 * instance.c, model_state.c; reports to park.c only through inst->park.park_report.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config/presets.h"
#include "core/core.h"
#include "workers/model_state.h"
#include "workers/park_tier.h"
#include "workers/supervisor_int.h"

#define PARK_WAKE_GUESS_MS 1000 /* a wake before one was measured (vLLM: 0.1-6 s) */

#define CONFIRM_RETRY_MS 100

/* The tier's private state of an instance (park_tier.h). */
typedef struct sleep_state {
    park_tier_state_t head;
    unsigned confirm_asked; /* GET /is_sleeping calls of this confirmation */
} sleep_state_t;

/* inst's state, made on first use (confirm_start); NULL when out of memory. */
static sleep_state_t *state_of(instance_t *inst)
{
    return park_tier_state(inst, &park_tier_sleep, sizeof(sleep_state_t));
}

static bool confirm_call(instance_t *inst);

/* What GET /is_sleeping said: 1 sleeping, 0 awake, -1 no such answer. */
static int is_sleeping_of(int status, const char *body, size_t len)
{
    if (status != 200 || body == NULL)
        return -1;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "is_sleeping");
    int r = cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1 : 0) : -1;
    cJSON_Delete(j);
    return r;
}

static void confirm_retry(uv_timer_t *t)
{
    instance_t *inst = t->data;
    bool parking = inst->hook.hook_kind == HOOK_SLEEP;
    if (inst->life.state != (parking ? INST_PARKING : INST_RESUMING) || inst->hook.hook_call)
        return;
    if (!confirm_call(inst))
        inst->park.park_report(inst, parking ? PARK_TIER_OUT_FAILED : PARK_TIER_BACK_FAILED,
                          "/is_sleeping could not be asked");
}

static void on_confirm_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    instance_t *inst = ctx; /* hooks.c cleared hook_call */
    sleep_state_t *sl = state_of(inst); /* made by confirm_start */
    sl->confirm_asked++;
    bool parking = inst->hook.hook_kind == HOOK_SLEEP;
    int said = is_sleeping_of(status, body, len);
    bool ok = said == (parking ? 1 : 0);
    bool here = inst->life.state == (parking ? INST_PARKING : INST_RESUMING);
    if (!ok && said >= 0 && here && core_now() + CONFIRM_RETRY_MS < inst->hook.hook_deadline_ms) {
        uv_timer_start(&inst->life.timer, confirm_retry, CONFIRM_RETRY_MS, 0); /* not yet: ask again */
        return;
    }
    log_event(ok ? LOG_INFO : LOG_WARN, "sleep_confirm", "model=%s instance=%u after=%s status=%d is_sleeping=%s "
              "asked=%u outcome=%s error=%s", inst->model->name, inst->id, parking ? "sleep" : "wake", status,
              said < 0 ? "unknown" : said ? "true" : "false", sl->confirm_asked, ok ? "ok" : "failed",
              error ? error : "");
    if (!here)
        return;
    if (parking)
        inst->park.park_report(inst, ok ? PARK_TIER_OUT_DONE : PARK_TIER_OUT_FAILED,
                          ok ? "sleep hook done, /is_sleeping true" : "sleep hook answered but /is_sleeping not true");
    else
        inst->park.park_report(inst, ok ? PARK_TIER_BACK_DONE : PARK_TIER_BACK_FAILED,
                          ok ? "wake hook done, /is_sleeping false" : "wake hook answered but /is_sleeping not false");
}

/* One GET /is_sleeping (the answer in on_confirm_answer); false when it could not start. */
static bool confirm_call(instance_t *inst)
{
    model_t *m = inst->model;
    char err[160];
    const sleep_state_t *sl = state_of(inst); /* made by confirm_start */
    if (hooks_confirm_get(inst, config_preset(m->cfg->preset)->sleep_confirm, on_confirm_answer, err, sizeof err) == 0)
        return true;
    log_event(LOG_WARN, "sleep_confirm", "model=%s instance=%u after=%s asked=%u outcome=failed error=%s", m->name,
              inst->id, inst->hook.hook_kind == HOOK_SLEEP ? "sleep" : "wake", sl->confirm_asked, err);
    return false;
}

/* Confirm a sleep or wake with GET on the preset's sleep_confirm path (vLLM's /is_sleeping),
 * within the hook's timeout. true: the answer follows in on_confirm_answer; false: no such
 * path, or the call could not start (then
 * reported as the hook said: park.c still waits for NVML). */
static bool confirm_start(instance_t *inst, enum hook_kind after)
{
    if (config_preset(inst->model->cfg->preset)->sleep_confirm == NULL)
        return false;
    sleep_state_t *sl = state_of(inst);
    if (!sl) {
        log_event(LOG_WARN, "sleep_confirm", "model=%s instance=%u after=%s asked=0 outcome=failed error=out of memory",
                  inst->model->name, inst->id, after == HOOK_SLEEP ? "sleep" : "wake");
        return false;
    }
    sl->confirm_asked = 0;
    hooks_confirm_begin(inst, after);
    return confirm_call(inst);
}

static bool sleep_can(const instance_t *inst)
{
    const model_config_t *mc = inst->model->cfg;
    return mc->sleep.set && mc->wake.set && mc->park_keep_alive_ms != 0 && inst->life.state == INST_READY &&
           inst->path.in_flight == 0 && !inst->life.stop_requested && !inst->hook.hook_call;
}

/* A hook just failed for vramd's own shortage: not now (-2), no other tier. */
static int sleep_prepare(instance_t *inst, enum unload_reason reason)
{
    model_t *m = inst->model;
    if (core_now() >= inst->hook.local_retry_ms)
        return 0;
    if (reason == UNLOAD_ADMIN) {
        m->unload_local_failed = true;
        core_emit(m->core, CORE_EV_MODEL_CHANGED, m); /* answers a waiting admin call */
    }
    return -2;
}

static void on_sleep_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    model_t *m = inst->model;
    (void)error;
    bool ok = hook_outcome_of(status, false) == HOOK_OK; /* counted and logged (instance_call_hook) */
    if (status == HTTP_CALL_LOCAL_SHORTAGE) { /* vramd's own shortage (counted, held back): nothing was asked */
        if (inst->life.state != INST_PARKING)
            return;
        if (inst->life.unload_reason == UNLOAD_ADMIN)
            m->unload_local_failed = true; /* before the state change answers the admin call */
        instance_set_state(inst, INST_READY, "sleep hook not made: vramd short of descriptors or memory");
        return;
    }
    if (inst->life.state != INST_PARKING)
        return;
    /* not ok: it did not sleep (or says so): the memory is still needed, take the next tier */
    if (ok && confirm_start(inst, HOOK_SLEEP))
        return;
    inst->park.park_report(inst, ok ? PARK_TIER_OUT_DONE : PARK_TIER_OUT_FAILED, ok ? "sleep hook done" : "sleep hook failed");
}

static int sleep_park(instance_t *inst, const char *why)
{
    model_t *m = inst->model;
    enum unload_reason reason = inst->life.unload_reason;
    instance_set_state(inst, INST_PARKING, why);
    int rc = instance_call_hook(inst, HOOK_SLEEP, on_sleep_answer);
    if (rc == 0)
        return 0;
    if (rc == -2 && reason == UNLOAD_ADMIN)
        m->unload_local_failed = true; /* before the state change answers the admin call */
    instance_set_state(inst, INST_READY, rc == -2 ? "sleep hook not made: vramd short of descriptors or memory"
                                                  : "sleep hook could not be called"); /* host entry released */
    return rc;
}

/* The wake hook was not made for vramd's own shortage: back to where it was, tried again
 * after the hold (the pump wakes a PARKED instance; a found one is left to its health checks). */
static void wake_not_made(instance_t *inst)
{
    if (inst->park.wake_found) {
        inst->park.wake_found = false;
        instance_set_state(inst, INST_READY, "wake at start not made: health checks decide");
        uv_timer_start(&inst->life.timer, instance_health_tick, 0, 0);
        return;
    }
    instance_set_state(inst, INST_PARKED, "wake hook not made: vramd short of descriptors or memory");
}

static void on_wake_answer(void *ctx, int status, const char *body, size_t len, const char *error)
{
    (void)body;
    (void)len;
    instance_t *inst = ctx;
    (void)error;
    bool ok = hook_outcome_of(status, false) == HOOK_OK;
    if (status == HTTP_CALL_LOCAL_SHORTAGE) { /* counted and held back (instance_call_hook) */
        if (inst->life.state == INST_RESUMING)
            wake_not_made(inst);
        return;
    }
    if (inst->life.state != INST_RESUMING)
        return;
    if (ok && confirm_start(inst, HOOK_WAKE))
        return;
    inst->park.park_report(inst, ok ? PARK_TIER_BACK_DONE : PARK_TIER_BACK_FAILED, ok ? "wake hook done" : "wake hook failed");
}

static void sleep_resume(instance_t *inst)
{
    int rc = instance_call_hook(inst, HOOK_WAKE, on_wake_answer);
    if (rc == -2)
        wake_not_made(inst);
    else if (rc != 0)
        inst->park.park_report(inst, PARK_TIER_BACK_FAILED, "wake hook could not be called");
}

/* An external server with a wake hook found at start: woken in case it was left asleep. */
static bool sleep_found(instance_t *inst)
{
    model_t *m = inst->model;
    if (!inst->external || !m->cfg->wake.set)
        return false;
    if (inst->life.state != INST_READY || inst->hook.hook_call)
        return true;
    inst->park.park_tier = PARK_SLEEP;
    inst->park.park_before = inst->park.park_left = 0; /* nothing known: READY once its usage holds still */
    inst->park.park_since_ms = core_now();
    inst->park.wake_found = true;
    instance_set_state(inst, INST_RESUMING, "found at start: woken in case it was left asleep");
    sleep_resume(inst);
    return true;
}

static const char *sleep_lost(const instance_t *inst)
{
    return inst->model->cfg->wake.set ? NULL : "no wake hook any more (config reloaded)";
}

static uint64_t sleep_back_guess_ms(uint64_t bytes)
{
    (void)bytes;
    return PARK_WAKE_GUESS_MS;
}

static void sleep_state_free(park_tier_state_t *s)
{
    free(s);
}

const park_tier_ops_t park_tier_sleep = {
    .tier = PARK_SLEEP,
    .name = "sleep",
    .back_name = "wake",
    .parked_as = "sleeping",
    .parked_why = "asleep: memory left the GPU",
    .resumed_why = "awake: memory back on the GPU",
    .reclaim_failed = "sleep gave too little memory back within stop_timeout",
    .can = sleep_can,
    .prepare = sleep_prepare,
    .park = sleep_park,
    .resume = sleep_resume,
    .found = sleep_found,
    .lost = sleep_lost,
    .back_guess_ms = sleep_back_guess_ms,
    .state_free = sleep_state_free,
    .holds = NULL,     /* its hook calls hold the instance through inst->hook.hook_call */
    .measured = NULL,  /* copies nothing itself */
};
