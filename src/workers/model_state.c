/*
 * model_state: the supervisor's bookkeeping that every other part of it uses: state and
 * reason names, the derived model state, the one place an instance state changes
 * (instance_set_state), failure counting with restart backoff and the FAILED mark, and the
 * per-model metrics notes (request outcomes, degrade levels, hook outcomes' names).
 *
 * Invariants: every instance state change goes through instance_set_state (logged
 * old -> new) and is announced as CORE_EV_MODEL_CHANGED (admin calls wait on it); a
 * failure pushes next_start_ms out by the backoff, and MODEL_FAILURE_WINDOW failures within
 * FAILURE_WINDOW_MS mark the model FAILED. This file calls no other file of the supervisor
 * (see supervisor_int.h for the order).
 */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "core/core.h"
#include "workers/host_book.h"
#include "workers/model_state.h"
#include "workers/supervisor_int.h"

#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS (5 * 60 * 1000)
#define FAILURE_WINDOW_MS (10 * 60 * 1000)

const char *instance_state_name(enum instance_state s)
{
    static const char *const n[] = {"starting",  "ready",   "down",    "stopping", "unloading",
                                    "unloaded",  "reloading", "parking", "parked", "resuming"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

const char *model_state_name(enum model_state s)
{
    static const char *const n[] = {"stopped", "starting", "ready", "draining", "unloading", "failed"};
    return n[s];
}

const char *unload_reason_name(enum unload_reason r)
{
    static const char *const n[] = {"other", "idle", "evicted", "admin", "recycle", "drain", "removed", "failed"};
    return (unsigned)r < UNLOAD_REASONS ? n[r] : "other";
}

const char *restart_reason_name(enum restart_reason r)
{
    static const char *const n[] = {"crash", "start_failed", "startup_timeout", "hang", "unhealthy", "reload_failed",
                                    "park_failed", "recycle"};
    return (unsigned)r < RESTART_REASONS ? n[r] : "crash";
}

const char *hook_kind_name(enum hook_kind k)
{
    static const char *const n[] = {"clear_cache", "unload", "reload", "sleep", "wake"};
    return (unsigned)k < HOOK_KINDS ? n[k] : "other";
}

const char *hook_outcome_name(enum hook_outcome o)
{
    static const char *const n[] = {"ok", "http_error", "failed", "timeout", "local_shortage"};
    return (unsigned)o < HOOK_OUTCOMES ? n[o] : "failed";
}

enum hook_outcome hook_outcome_of(int status, bool past_deadline)
{
    if (status >= 200 && status < 300)
        return HOOK_OK;
    if (status == HTTP_CALL_LOCAL_SHORTAGE)
        return HOOK_LOCAL_SHORTAGE;
    if (status >= 0)
        return HOOK_HTTP_ERROR;
    return past_deadline ? HOOK_TIMEOUT : HOOK_FAILED;
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
        if (in->life.state == INST_READY && !in->life.stop_requested)
            ready = true;
        else if (in->life.state == INST_READY && in->life.stop_requested)
            draining = true;
        else if (in->life.state == INST_STARTING || in->life.state == INST_RELOADING || in->life.state == INST_RESUMING)
            starting = true;
        else if (in->life.state == INST_STOPPING || in->life.state == INST_UNLOADING || in->life.state == INST_PARKING)
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

#define BIT(s) (1u << (s))

/* allowed[from]: the states an instance in `from` may change to (STOPPING is its last
 * state: the instance is freed once its process is gone and its handles closed) */
static const unsigned allowed[] = {
    [INST_STARTING] = BIT(INST_READY) | BIT(INST_STOPPING),
    [INST_READY] = BIT(INST_DOWN) | BIT(INST_STOPPING) | BIT(INST_UNLOADING) | BIT(INST_PARKING) |
                   BIT(INST_RESUMING), /* an external server found at start: woken (park_wake_found) */
    [INST_DOWN] = BIT(INST_READY) | BIT(INST_STOPPING),
    [INST_STOPPING] = 0,
    [INST_UNLOADING] = BIT(INST_READY) | BIT(INST_UNLOADED) | BIT(INST_STOPPING),
    [INST_UNLOADED] = BIT(INST_RELOADING) | BIT(INST_STARTING) | BIT(INST_STOPPING),
    [INST_RELOADING] = BIT(INST_STARTING) | BIT(INST_UNLOADED) | BIT(INST_STOPPING),
    [INST_PARKING] = BIT(INST_PARKED) | BIT(INST_READY) | BIT(INST_STOPPING) | BIT(INST_UNLOADING),
    [INST_PARKED] = BIT(INST_RESUMING) | BIT(INST_STOPPING) | BIT(INST_UNLOADING),
    [INST_RESUMING] = BIT(INST_READY) | BIT(INST_PARKED) | BIT(INST_STOPPING),
};

bool instance_transition_ok(enum instance_state from, enum instance_state to)
{
    if ((unsigned)from >= sizeof allowed / sizeof allowed[0])
        return false;
    return from == to || (allowed[from] & BIT(to)) != 0;
}

void model_note_state(model_t *m, enum model_state before, const char *why)
{
    enum model_state after = model_state(m);
    if (before == after)
        return;
    log_event(after == MODEL_FAILED ? LOG_ERROR : LOG_INFO, "model_state", "model=%s from=%s to=%s reason=%s", m->name,
              model_state_name(before), model_state_name(after), why);
    core_note_event(m->core, "model %s: %s -> %s (%s)", m->name, model_state_name(before), model_state_name(after),
                    why);
}

void instance_set_state_at(instance_t *inst, enum instance_state s, const char *why, int line, const char *file)
{
    model_t *m = inst->model;
    enum model_state before = model_state(m);
    if (inst->life.state != s) {
        CHECK_IF(!instance_transition_ok(inst->life.state, s));
        log_event(LOG_INFO, "instance_state", "model=%s instance=%u pid=%d from=%s to=%s reason=%s file=%s line=%d",
                  m->name, inst->id, (int)inst->life.pid, instance_state_name(inst->life.state), instance_state_name(s), why,
                  file, line);
        inst->life.state = s;
    }
    if (s != INST_READY)
        inst->park.park_clearing = false; /* a cache clear for a park ends with READY (workers/park.c) */
    if (s != INST_PARKING && s != INST_PARKED && s != INST_RESUMING) {
        /* however a park ends (back, stopped, died, escalated), its host memory is given back */
        host_book_release(inst);
        inst->park.park_tier = PARK_NONE;
    }
    model_note_state(m, before, why);
    core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
}

void model_set_failed(model_t *m, const char *reason)
{
    m->load_requested = false;
    if (m->failed)
        return;
    enum model_state before = model_state(m);
    m->failed = true;
    snprintf(m->failed_reason, sizeof m->failed_reason, "%s", reason);
    model_note_state(m, before, reason);
    uv_timer_stop(&m->backoff_timer);
    model_schedule_pump(m); /* the dispatcher answers its queue 503 model_failed */
    core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
}

static void model_count_failure(model_t *m, enum restart_reason kind, const char *why);

/* At most this many of the ring's newest lines are looked at for a worker's own lines. */
#define LAST_OUTPUT_SCAN 4096

/* m->last_output: the last MODEL_LAST_OUTPUT_LINES lines worker pid wrote (oldest first),
 * from the model's output ring (proc/process.c runs the exit callback only once the
 * worker's pipes are drained, so its last lines are in); pid <= 0: none. */
static void note_last_output(model_t *m, pid_t pid)
{
    m->last_output[0] = '\0';
    if (pid <= 0)
        return;
    const line_entry_t *found[MODEL_LAST_OUTPUT_LINES] = {NULL};
    unsigned n = 0;
    uint64_t first = line_ring_first_seq(&m->logs);
    for (uint64_t s = m->logs.next_seq, scanned = 0; s > first && n < MODEL_LAST_OUTPUT_LINES &&
                                                     scanned < LAST_OUTPUT_SCAN; scanned++) {
        const line_entry_t *e = line_ring_get(&m->logs, --s);
        if (e && e->pid == (int)pid && e->len > 0)
            found[n++] = e;
    }
    size_t used = 0;
    for (unsigned i = n; i-- > 0;) {
        int w = snprintf(m->last_output + used, sizeof m->last_output - used, "%.*s\n", MODEL_LAST_OUTPUT_LINE,
                         found[i]->text);
        if (w < 0 || (size_t)w >= sizeof m->last_output - used)
            break;
        used += (size_t)w;
    }
}

void model_record_worker_failure(model_t *m, enum restart_reason kind, const char *why, pid_t pid)
{
    note_last_output(m, pid);
    model_count_failure(m, kind, why);
}

void model_record_failure(model_t *m, enum restart_reason kind, const char *why)
{
    model_record_worker_failure(m, kind, why, 0);
}

void model_clear_failed(model_t *m, const char *why)
{
    if (m->failed) {
        m->failed = false;
        m->failed_reason[0] = '\0';
        model_note_state(m, MODEL_FAILED, why);
        core_emit(m->core, CORE_EV_MODEL_CHANGED, m);
    }
    m->consecutive_failures = 0;
    memset(m->failure_times, 0, sizeof m->failure_times);
    m->next_start_ms = 0;
}

size_t model_failed_text(const model_t *m, char *buf, size_t cap)
{
    /* the output's lines joined by " | ", the newest kept when it must be cut (the whole
     * message fits conn_respond_error's 512 bytes) */
    char out[240];
    size_t o = sizeof out - 1;
    out[o] = '\0';
    size_t len = strlen(m->last_output);
    while (len > 0 && m->last_output[len - 1] == '\n')
        len--;
    for (size_t i = len; i-- > 0 && o > 0;) {
        if (m->last_output[i] != '\n') {
            out[--o] = m->last_output[i];
        } else if (o >= 3) {
            memcpy(out + o - 3, " | ", 3);
            o -= 3;
        } else {
            break;
        }
    }
    const char *shown = out + o;
    int n = snprintf(buf, cap,
                     "model %s has failed: %s%s%s%s; it stays failed until `vramctl load %s` or a reload that "
                     "changes its config",
                     m->name, m->failed_reason, shown[0] ? "; its worker's last output: \"" : "", shown,
                     shown[0] ? "\"" : "", m->name);
    return n < 0 ? 0 : (size_t)n;
}

static void model_count_failure(model_t *m, enum restart_reason kind, const char *why)
{
    uint64_t now = core_now();
    snprintf(m->last_failure, sizeof m->last_failure, "%s", why);
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
        model_set_failed(m, reason);
    }
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
