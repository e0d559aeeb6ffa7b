/*
 * prompt_hold: a queued ComfyUI prompt keeps its request's slot and memory reservation until
 * ComfyUI reports it done (see prompt_hold.h for the rules).
 *
 * A hold is taken in the proxy's release_slot, on the loop thread, from a request whose
 * answer is held for the verdict (verdict_hold_of holds every answer of a prompt_hold model,
 * so the body with the prompt_id is in r->resp_body): the request's ledger entry moves to the hold's
 * shadow request (released and forced back at the same GPU position in one turn: nothing
 * else can run in between), with its credit, level and size class, and r->instance is
 * cleared. The request itself then goes on as usual (the client gets the 200 at once).
 *
 * A hold polls GET /history/{id} with http_call: one call at a time, the next one
 * prompt_poll after the last answer. Ends (hold_end, exactly once, then the hold is freed
 * when its timer handle closed):
 *   done        the id shows in /history (status_str success or error; an error with an
 *               out-of-memory exception_message feeds sched_note_oom);
 *   gone        the instance went down (CORE_EV_INSTANCE_DOWN: ended on the next turn, by
 *               the hold's timer), or HOLD_FAILS_MAX polls in a row got no answer;
 *   timeout     prompt_hold_timeout (0: response_timeout; both 0: HOLD_DEFAULT_MS) passed.
 * Invariants: a live hold has inst->path.in_flight counted once and its shadow.mem linked (or
 * never reserved); hold_end releases both through sched_request_finished and
 * instance_request_done, as the proxy would have, and touches inst no more afterwards.
 */
#include "path/prompt_hold.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "net/http_call.h"
#include "quality/degrade.h"
#include "quality/oom_message.h"
#include "sched/scheduler.h"
#include "workers/instance.h"

#define HOLD_FAILS_MAX 8                /* polls in a row without an answer: the worker is gone */
#define HOLD_DEFAULT_MS (10 * 60 * 1000) /* bound when both timeouts are 0 */
#define HOLD_CALL_MAX_MS 10000          /* one /history call */
#define HOLD_HISTORY_MAX (4u << 20)     /* bytes of /history answer read */
#define PROMPT_ID_MAX 96

typedef struct prompt_hold {
    list_t link;
    instance_t *inst;
    request_t shadow; /* mem, credit, level, size class of the request it came from */
    char prompt_id[PROMPT_ID_MAX];
    uv_timer_t timer;
    http_call_t *call;
    uint64_t t_start, deadline, poll_ms;
    unsigned fails;
    bool ended;
} prompt_hold_t;

static list_t g_holds = {&g_holds, &g_holds}; /* every live hold (all models) */

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

static void hold_end(prompt_hold_t *h, const char *how, bool ok)
{
    if (h->ended)
        return;
    h->ended = true;
    if (h->call) {
        http_call_cancel(h->call);
        h->call = NULL;
    }
    list_remove(&h->link);
    instance_t *inst = h->inst;
    uint64_t held_ms = core_now() - h->t_start;
    log_event(LOG_INFO, "prompt_hold_end", "request_id=%s model=%s prompt_id=%s how=%s held_ms=%llu bytes=%llu",
              h->shadow.id, inst->model->name, h->prompt_id, how, (unsigned long long)held_ms,
              (unsigned long long)h->shadow.mem.bytes);
    sched_request_finished(&h->shadow, inst, core_now() - h->shadow.t_dispatched, ok);
    instance_request_done(inst, false);
    uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, on_timer_closed);
}

/* The exception_message of the history entry's execution_error message, or NULL. */
static const char *history_error_text(const cJSON *status)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(status, "messages");
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *kind = cJSON_GetArrayItem(m, 0), *data = cJSON_GetArrayItem(m, 1);
        if (cJSON_IsString(kind) && strcmp(kind->valuestring, "execution_error") == 0) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(data, "exception_message");
            if (cJSON_IsString(e))
                return e->valuestring;
        }
    }
    return NULL;
}

/* The prompt's history entry: done (success or error) -> hold ended. */
static void hold_finished(prompt_hold_t *h, const cJSON *entry)
{
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(entry, "status");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(status, "status_str");
    bool error = cJSON_IsString(str) && strcmp(str->valuestring, "error") == 0;
    if (!error) {
        hold_end(h, "done", true);
        return;
    }
    model_t *m = h->inst->model;
    const char *text = history_error_text(status);
    size_t len = text ? strlen(text) : 0;
    bool oom = text && m->cfg->degrade.set && degrade_is_oom(&m->cfg->degrade.detect, 500, "", 0, text, len);
    if (oom) {
        sched_note_oom(m, &h->shadow, oom_message_need(text, len));
        log_event(LOG_WARN, "oom", "request_id=%s model=%s level=%u prompt_id=%s async=%d retry=%s", h->shadow.id,
                  m->name, h->shadow.level, h->prompt_id, 1, "impossible_after_200");
        core_note_event(m->core, "OOM in %s (ComfyUI prompt %s, after its 200: not retried)", m->name, h->prompt_id);
    } else {
        log_event(LOG_WARN, "prompt_failed", "request_id=%s model=%s prompt_id=%s", h->shadow.id, m->name,
                  h->prompt_id);
    }
    hold_end(h, oom ? "error_oom" : "error", false);
}

static void hold_poll(uv_timer_t *t);

static void hold_next(prompt_hold_t *h)
{
    uint64_t now = core_now();
    if (now >= h->deadline) {
        hold_end(h, "timeout", false);
        return;
    }
    uint64_t wait = h->poll_ms < h->deadline - now ? h->poll_ms : h->deadline - now;
    uv_timer_start(&h->timer, hold_poll, wait, 0);
}

static void on_history(void *ctx, int status, const char *body, size_t len, const char *error)
{
    prompt_hold_t *h = ctx;
    h->call = NULL;
    if (status != 200) {
        h->fails++;
        log_event(LOG_DEBUG, "prompt_poll_failed", "prompt_id=%s status=%d error=%s fails=%u", h->prompt_id,
                  status, error ? error : "-", h->fails);
        if (h->fails >= HOLD_FAILS_MAX) {
            hold_end(h, "gone", false);
            return;
        }
        hold_next(h);
        return;
    }
    h->fails = 0;
    cJSON *doc = cJSON_ParseWithLength(body ? body : "", len);
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(doc, h->prompt_id);
    if (cJSON_IsObject(entry)) {
        hold_finished(h, entry);
        cJSON_Delete(doc);
        return;
    }
    cJSON_Delete(doc);
    hold_next(h);
}

static void hold_poll(uv_timer_t *t)
{
    prompt_hold_t *h = t->data;
    instance_t *inst = h->inst;
    char path[PROMPT_ID_MAX + 16];
    snprintf(path, sizeof path, "/history/%s", h->prompt_id);
    uint64_t left = h->deadline > core_now() ? h->deadline - core_now() : 1;
    http_call_req_t req = {
        .host = inst->life.host,
        .port = inst->life.port,
        .method = "GET",
        .path = path,
        .timeout_ms = left < HOLD_CALL_MAX_MS ? left : HOLD_CALL_MAX_MS,
        .max_response = HOLD_HISTORY_MAX,
    };
    char err[160];
    if (http_call_start(inst->model->core->loop, &req, on_history, h, &h->call, err, sizeof err) != 0) {
        h->call = NULL;
        on_history(h, -1, NULL, 0, err);
    }
}

/* A prompt_id of printable characters that need no escaping in a path. */
static bool id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= PROMPT_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return false;
    return true;
}

/* Is r a POST /prompt (the target after the route prefix, query ignored)? */
static bool is_prompt_post(const request_t *r)
{
    const http1_msg_t *msg = &r->msg;
    if (msg->method.len != 4 || memcmp(r->head + msg->method.off, "POST", 4) != 0)
        return false;
    const char *t = r->head + msg->target.off;
    size_t len = msg->target.len;
    if (r->strip_len && len >= r->strip_len) {
        t += r->strip_len;
        len -= r->strip_len;
    }
    return len >= 7 && memcmp(t, "/prompt", 7) == 0 && (len == 7 || t[7] == '?');
}

static uint64_t hold_bound_ms(const model_config_t *mc)
{
    if (mc->prompt_hold_timeout_ms)
        return mc->prompt_hold_timeout_ms;
    return mc->response_timeout_ms ? mc->response_timeout_ms : HOLD_DEFAULT_MS;
}

bool prompt_hold_take(request_t *r, instance_t *inst)
{
    const model_config_t *mc = inst->model->cfg;
    if (!mc->prompt_hold || r->status != 200 || !r->resp_body.data || !is_prompt_post(r))
        return false;
    cJSON *doc = cJSON_ParseWithLength(r->resp_body.data, r->resp_body.len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "prompt_id");
    prompt_hold_t *h = cJSON_IsString(id) && id_ok(id->valuestring) ? calloc(1, sizeof *h) : NULL;
    if (h == NULL) {
        cJSON_Delete(doc);
        return false; /* no prompt id (or no memory): the slot is released as for any answer */
    }
    snprintf(h->prompt_id, sizeof h->prompt_id, "%s", id->valuestring);
    cJSON_Delete(doc);
    h->inst = inst;
    request_t *s = &h->shadow;
    ledger_entry_init(&s->mem);
    snprintf(s->id, sizeof s->id, "%s", r->id);
    s->model = r->model;
    s->level = r->level;
    s->size_class = r->size_class;
    s->size_level = r->size_level;
    s->credit = r->credit;
    s->t_dispatched = r->t_dispatched;
    s->gpu = -1;
    r->credit = 0;
    sched_book_hold(r, s);
    h->t_start = core_now();
    h->deadline = h->t_start + hold_bound_ms(mc);
    h->poll_ms = mc->prompt_poll_ms ? mc->prompt_poll_ms : 250;
    uv_timer_init(inst->model->core->loop, &h->timer);
    h->timer.data = h;
    list_insert_tail(&g_holds, &h->link);
    r->instance = NULL;
    log_event(LOG_INFO, "prompt_hold", "request_id=%s model=%s instance=%u prompt_id=%s bytes=%llu bound_ms=%llu",
              r->id, inst->model->name, inst->id, h->prompt_id, (unsigned long long)s->mem.bytes,
              (unsigned long long)(h->deadline - h->t_start));
    hold_next(h);
    return true;
}

static void on_gone(uv_timer_t *t) { hold_end(t->data, "gone", false); }

/* CORE_EV_INSTANCE_DOWN: the worker takes no more requests; its prompts die with it. The
 * slot is given back on the next turn, not inside the event (instance_request_done may free
 * the instance the other listeners are still being told about). */
static void on_instance_down(void *ctx, enum core_event ev, void *subject)
{
    (void)ctx;
    (void)ev;
    list_foreach_safe(it, tmp, &g_holds) {
        prompt_hold_t *h = list_entry(it, prompt_hold_t, link);
        if (h->inst != subject)
            continue;
        if (h->call) {
            http_call_cancel(h->call);
            h->call = NULL;
        }
        uv_timer_start(&h->timer, on_gone, 0, 0);
    }
}

void prompt_hold_init(core_t *core) { core_listen(core, CORE_EV_INSTANCE_DOWN, on_instance_down, NULL); }
