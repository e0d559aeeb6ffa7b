/*
 * verdict: which answers are held (verdict_hold_of); judging a held worker answer: deliver,
 * retry at the next ladder level, retry after an invalid output, or fail; and what a watched
 * stream said when it ended (verdict_stream_end). The rules and the retry budget are in
 * verdict.h.
 */
#include "path/verdict.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "common/log.h"
#include "core/core.h"
#include "core/model.h"
#include "core/request.h"
#include "http/http_out.h"
#include "net/conn.h"
#include "proc/process.h"
#include "quality/degrade.h"
#include "quality/oom_message.h"
#include "quality/stream_watch.h"
#include "quality/validate.h"
#include "sched/scheduler.h"
#include "workers/instance.h"
#include "workers/model_state.h"

typedef struct validator_run {
    uv_timer_t timer;
    request_t *r;        /* NULL once the client left */
    process_t *proc;
    bool timed_out;
    bool exited;
    int exit_status;
    int handles;
} validator_run_t;

typedef struct validate_work {
    uv_work_t work;
    request_t *r; /* NULL once the client left */
    const char *kind;
    uint64_t min_bytes;
    char *body;
    size_t body_len;
    size_t body_max;
    int rc;
    char why[256];
} validate_work_t;

enum verdict_hold verdict_hold_of(const request_t *r, const char *head, const http1_msg_t *msg,
                                  stream_watch_t *watch)
{
    const model_config_t *mc = r->model ? r->model->cfg : NULL;
    stream_watch_init(watch, STREAM_NONE);
    if (!mc || r->head_method)
        return VERDICT_PASS;
    /* the model's own config asks to judge the whole output */
    if (mc->prompt_hold || mc->validate.kind != VALIDATE_NONE || mc->validate.min_bytes)
        return VERDICT_HOLD;
    if (!mc->degrade.set)
        return VERDICT_PASS;
    const http1_header_t *ct = http1_find_header(head, msg, "Content-Type");
    enum stream_kind kind = ct ? stream_kind_of(head + ct->value.off, ct->value.len) : STREAM_NONE;
    bool stream = kind != STREAM_NONE || msg->body == HTTP1_BODY_CHUNKED || msg->body == HTTP1_BODY_UNTIL_CLOSE;
    /* an error answer, one whose head already carries an OOM signal, or a whole answer
     * (its length declared, not SSE/NDJSON) is judged whole: an OOM there is retried */
    if (msg->status < 200 || msg->status >= 300 || !stream ||
        degrade_head_signal(&mc->degrade.detect, msg->status, head, msg->head_len))
        return VERDICT_HOLD;
    stream_watch_init(watch, kind != STREAM_NONE ? kind : STREAM_RAW);
    return VERDICT_WATCH;
}

bool verdict_is_oom(const request_t *r)
{
    const model_config_t *mc = r->model->cfg;
    if (!mc->degrade.set)
        return false;
    return degrade_is_oom(&mc->degrade.detect, r->resp_status, r->resp_head.data, r->resp_head.len,
                          r->resp_body.data, r->resp_body.len);
}

int verdict_prepare_level(request_t *r, unsigned level, char *why, size_t whylen)
{
    const model_config_t *mc = r->model->cfg;
    if (level == 0) {
        if (r->orig_body.data) {
            buf_reset(&r->body);
            buf_append(&r->body, r->orig_body.data, r->orig_body.len);
        }
        r->level = 0;
        return 0;
    }
    if (level > mc->degrade.n_ladder) {
        snprintf(why, whylen, "no ladder level %u", level);
        return -1;
    }
    if (!r->orig_body.data && r->body.len) {
        /* orig_body was made with the request (same max, charged to limits.memory_budget) */
        if (buf_append(&r->orig_body, r->body.data, r->body.len) != 0) {
            snprintf(why, whylen, buf_over_budget(&r->orig_body) ? "over limits.memory_budget" : "out of memory");
            return -1;
        }
    }
    const http1_header_t *ct = http1_find_header(r->head, &r->msg, "Content-Type");
    char ctype[256] = "";
    if (ct)
        snprintf(ctype, sizeof ctype, "%.*s", (int)ct->value.len, r->head + ct->value.off);
    /* levels are cumulative, like the field's ladders: level k applies the `set` of
     * levels 1..k in order to the client's original body */
    char *cur = malloc(r->orig_body.len + 1);
    if (!cur) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    memcpy(cur, r->orig_body.data ? r->orig_body.data : "", r->orig_body.len);
    size_t cur_len = r->orig_body.len;
    for (unsigned k = 1; k <= level; k++) {
        char *out = NULL;
        size_t out_len = 0;
        if (degrade_rewrite(mc->degrade.ladder[k - 1].set, ct ? ctype : NULL, cur, cur_len, &out, &out_len, why,
                            whylen) != 0) {
            free(cur);
            return -1;
        }
        free(cur);
        cur = out;
        cur_len = out_len;
    }
    buf_reset(&r->body);
    int rc = buf_append(&r->body, cur, cur_len);
    free(cur);
    if (rc != 0) {
        snprintf(why, whylen, "rewritten body over max_body");
        return -1;
    }
    r->level = level;
    return 0;
}

/* The retry budget (the model's retry_budget): at most `percent` of the requests queued or
 * running may be retries, and never fewer than `min` at once (Envoy's retry budget and its
 * min_retry_concurrency: a burst that fails together is not refused its first retries). A
 * request counts once, however many levels it goes down. */
static bool retry_allowed(core_t *d, const request_t *r)
{
    if (r->is_retry)
        return true;
    const config_retry_budget_t *b = &r->model->cfg->retry_budget;
    uint64_t running = (uint64_t)core_in_flight_total(d) + core_queued_total(d);
    uint64_t budget = running * b->percent / 100;
    if (budget < b->min)
        budget = b->min;
    return d->retries_in_flight < budget;
}

/* A retry was needed and the budget refused it: its own answer, not the failure's. */
static void refuse_over_budget(request_t *r, const char *what)
{
    model_t *m = r->model;
    const config_retry_budget_t *b = &m->cfg->retry_budget;
    uint64_t after = m->run_ms_ewma / 1000 + 1;
    core_retry_refused(m->core);
    m->retry_budget_refusals++;
    log_event(LOG_WARN, "retry_budget_exhausted", "request_id=%s model=%s reason=%s retries_in_flight=%u", r->id,
              m->name, what, m->core->retries_in_flight);
    conn_respond_error(r->conn, 503, "retry_budget_exhausted", m->name, (int)(after > 60 ? 60 : after), false,
                       "model %s: %s needed a retry, but %u retries are already running (retry_budget: %u%%, min %u)",
                       m->name, what, m->core->retries_in_flight, b->percent, b->min);
}

static void retry(request_t *r, const char *why)
{
    core_t *d = r->conn->core;
    if (!r->is_retry) {
        r->is_retry = true;
        core_retry_begin(d);
        log_event(LOG_INFO, "retry_started", "request_id=%s model=%s reason=%s retries_in_flight=%u", r->id,
                  r->model->name, why, d->retries_in_flight);
    }
    buf_reset(&r->resp_head);
    buf_reset(&r->resp_body);
    r->resp_status = 0;
    core_requeue(d, r, why);
}

/* The held answer goes to the client: the worker's status and end-to-end headers, vramd's
 * headers (the same set a streamed answer carries), and the body. */
static void deliver(request_t *r)
{
    conn_t *c = r->conn;
    request_set_ops(r, NULL);
    buf_t h;
    buf_init(&h, r->resp_head.len + 1024);
    http_out_status(&h, r->resp_status, r->resp_reason[0] ? r->resp_reason : NULL, strlen(r->resp_reason));
    http_out_raw(&h, r->resp_head.data ? r->resp_head.data : "", r->resp_head.len);
    uint64_t run_ms = r->t_first_byte > r->t_dispatched ? r->t_first_byte - r->t_dispatched : 0;
    request_vramd_headers(r, &h, run_ms);
    bool no_body = r->resp_status == 204 || r->resp_status == 304 || (r->resp_status >= 100 && r->resp_status < 200);
    if (!no_body)
        http_out_header(&h, "Content-Length", "%zu", r->resp_body.len);
    if (!c->keep_alive)
        http_out_header(&h, "Connection", "close");
    http_out_end(&h);
    if (buf_failed(&h)) {
        buf_free(&h);
        conn_respond_error(c, 502, "worker_failed", r->model->name, -1, false, "model %s: answer head too large",
                           r->model->name);
        return;
    }
    r->status = r->resp_status;
    conn_cork(c);
    int rc = conn_write(c, h.data, h.len);
    buf_free(&h);
    if (rc == 0 && !no_body && r->resp_body.len)
        rc = conn_write(c, r->resp_body.data, r->resp_body.len);
    if (conn_uncork(c) != 0 || rc != 0)
        return; /* the client is gone: the request ended with its connection */
    log_event(LOG_INFO, "request_done", "request_id=%s model=%s status=%d level=%u attempts=%u queue_ms=%llu", r->id,
              r->model->name, r->resp_status, r->level, r->attempts, (unsigned long long)request_queue_ms(r));
    conn_request_done(c);
}

static void judged_invalid(request_t *r, const char *why)
{
    model_t *m = r->model;
    log_event(LOG_WARN, "invalid_output", "request_id=%s model=%s status=%d bytes=%zu reason=%s retries=%u", r->id,
              m->name, r->resp_status, r->resp_body.len, why, r->invalid_retries);
    m->invalid_total++;
    request_set_ops(r, NULL);
    if (r->invalid_retries < 1) {
        if (!retry_allowed(r->conn->core, r)) {
            refuse_over_budget(r, "an invalid output");
            return;
        }
        r->invalid_retries++;
        retry(r, "invalid output");
        return;
    }
    conn_respond_error(r->conn, 502, "invalid_output", m->name, -1, false,
                       "model %s: output failed validation after %u attempts: %s", m->name, r->attempts, why);
}

static void verdict_cancel(request_t *r);
static const request_ops_t validating_ops = {.cancel = verdict_cancel};

/* ---- validate.cmd --------------------------------------------------------------------- */

static void on_validator_handle_closed(uv_handle_t *h)
{
    validator_run_t *v = h->data;
    free(v);
}

static void validator_finish(validator_run_t *v)
{
    request_t *r = v->r;
    uv_timer_stop(&v->timer);
    uv_close((uv_handle_t *)&v->timer, on_validator_handle_closed);
    if (!r)
        return;
    r->validator = NULL;
    if (v->timed_out) {
        char why[96];
        snprintf(why, sizeof why, "validator timed out after %llu ms",
                 (unsigned long long)r->model->cfg->validate.timeout_ms);
        judged_invalid(r, why);
    } else if (v->exit_status != 0) {
        char why[96];
        snprintf(why, sizeof why, "validator exited with status %d", v->exit_status);
        judged_invalid(r, why);
    } else {
        deliver(r);
    }
}

static void on_validator_exit(process_t *p, int exit_status, int term_signal, void *ctx)
{
    (void)p;
    validator_run_t *v = ctx;
    v->proc = NULL;
    v->exited = true;
    v->exit_status = term_signal ? 128 + term_signal : exit_status;
    validator_finish(v);
}

static void on_validator_timeout(uv_timer_t *t)
{
    validator_run_t *v = t->data;
    v->timed_out = true;
    if (v->proc)
        process_signal(v->proc, SIGKILL);
}

static void run_validator_cmd(request_t *r)
{
    const model_config_t *mc = r->model->cfg;
    core_t *d = r->conn->core;
    validator_run_t *v = calloc(1, sizeof *v);
    if (!v) {
        judged_invalid(r, "validator could not start: out of memory");
        return;
    }
    v->r = r;
    uv_timer_init(d->loop, &v->timer);
    v->timer.data = v;
    process_spec_t spec = {
        .argv = mc->validate.cmd,
        .log_name = r->model->name,
        .stdin_data = r->resp_body.data ? r->resp_body.data : "",
        .stdin_len = r->resp_body.len,
        .capture_stdout = 1,
    };
    char err[200];
    if (process_spawn(d->loop, &spec, on_validator_exit, v, &v->proc, err, sizeof err) != 0) {
        v->r = NULL;
        uv_close((uv_handle_t *)&v->timer, on_validator_handle_closed);
        char why[260];
        snprintf(why, sizeof why, "validator could not start: %s", err);
        judged_invalid(r, why);
        return;
    }
    r->validator = (struct process *)v;
    request_set_ops(r, &validating_ops);
    uint64_t timeout = mc->validate.timeout_ms ? mc->validate.timeout_ms : 30000;
    uv_timer_start(&v->timer, on_validator_timeout, timeout, 0);
}

/* The client left while a validator ran (request ops): stop it. */
static void verdict_cancel(request_t *r)
{
    if (r->validating_in_pool) {
        validate_work_t *w = (validate_work_t *)r->validator;
        r->validator = NULL;
        r->validating_in_pool = false;
        if (w)
            w->r = NULL; /* the work frees the body and itself when it completes */
        return;
    }
    validator_run_t *v = (validator_run_t *)r->validator;
    if (!v)
        return;
    r->validator = NULL;
    v->r = NULL;
    if (v->proc)
        process_signal(v->proc, SIGKILL);
}

/* ---- built-in validators off the loop ----------------------------------------------------- */

/* Large bodies are validated on libuv's thread pool so the loop never stalls (tens of MB
 * take tens to hundreds of ms). The body moves into the work item while it runs, so a
 * client that leaves meanwhile cannot free it under the worker thread. */
#define VALIDATE_INLINE_MAX (256 * 1024)

static void judged_valid_builtin(request_t *r);

static void on_validate_work(uv_work_t *w)
{
    validate_work_t *v = (validate_work_t *)w;
    v->rc = validate_body(v->kind, v->min_bytes, (const unsigned char *)v->body, v->body_len, v->why, sizeof v->why);
}

static void on_validate_done(uv_work_t *w, int status)
{
    validate_work_t *v = (validate_work_t *)w;
    request_t *r = v->r;
    if (!r) {
        free(v->body);
        free(v);
        return;
    }
    r->validator = NULL;
    r->validating_in_pool = false;
    buf_adopt(&r->resp_body, v->body, v->body_len, v->body_max); /* give the body back */
    if (status != 0)
        judged_invalid(r, "validation was cancelled");
    else if (v->rc != 0)
        judged_invalid(r, v->why);
    else
        judged_valid_builtin(r);
    free(v);
}

static bool validate_off_loop(request_t *r, const char *kind)
{
    validate_work_t *v = calloc(1, sizeof *v);
    if (!v)
        return false;
    v->r = r;
    v->kind = kind;
    v->min_bytes = r->model->cfg->validate.min_bytes;
    v->body_max = r->resp_body.cap;
    v->body = buf_steal(&r->resp_body, &v->body_len);
    if (uv_queue_work(r->conn->core->loop, &v->work, on_validate_work, on_validate_done) != 0) {
        buf_adopt(&r->resp_body, v->body, v->body_len, v->body_max);
        free(v);
        return false;
    }
    r->validator = (struct process *)v;
    r->validating_in_pool = true;
    request_set_ops(r, &validating_ops);
    return true;
}

/* ---- the verdict ---------------------------------------------------------------------- */

static void judge_output(request_t *r)
{
    const model_config_t *mc = r->model->cfg;
    bool ok_status = r->resp_status >= 200 && r->resp_status < 300;
    if (!ok_status || (mc->validate.kind == VALIDATE_NONE && !mc->validate.min_bytes)) {
        deliver(r);
        return;
    }
    char why[256];
    static const char *const kinds[] = {"none", "glb", "ply", "png", "json", "cmd"};
    if (mc->validate.kind == VALIDATE_CMD) {
        if (mc->validate.min_bytes && r->resp_body.len < mc->validate.min_bytes) {
            snprintf(why, sizeof why, "%zu bytes < min_bytes %llu", r->resp_body.len,
                     (unsigned long long)mc->validate.min_bytes);
            judged_invalid(r, why);
            return;
        }
        run_validator_cmd(r);
        return;
    }
    if (r->resp_body.len > VALIDATE_INLINE_MAX && validate_off_loop(r, kinds[mc->validate.kind]))
        return;
    if (validate_body(kinds[mc->validate.kind], mc->validate.min_bytes, (const unsigned char *)r->resp_body.data,
                      r->resp_body.len, why, sizeof why) != 0) {
        judged_invalid(r, why);
        return;
    }
    judged_valid_builtin(r);
}

/* The built-in structural check passed: the declared false-success check, then deliver. */
static void judged_valid_builtin(request_t *r)
{
    const model_config_t *mc = r->model->cfg;
    char why[256];
    if (mc->validate.json_path) {
        /* a declared false success, e.g. {"score": 0} */
        cJSON *doc = cJSON_ParseWithLength(r->resp_body.data ? r->resp_body.data : "", r->resp_body.len);
        const cJSON *v = doc ? json_pointer_get(doc, mc->validate.json_path) : NULL;
        bool bad = v && mc->validate.json_equals && json_equal(v, mc->validate.json_equals);
        cJSON_Delete(doc);
        if (bad) {
            snprintf(why, sizeof why, "%s equals the declared failure value", mc->validate.json_path);
            judged_invalid(r, why);
            return;
        }
    }
    deliver(r);
}

void verdict_judge(request_t *r, bool oom)
{
    model_t *m = r->model;
    const model_config_t *mc = m->cfg;
    if (oom) {
        sched_note_oom(m, r, oom_message_need(r->resp_body.data, r->resp_body.len));
        unsigned next = r->level + 1;
        /* a level that can never fit this host's GPUs (its declared per_request) would wait
         * in the queue until the deadline: the retry goes past it, as an arrival does */
        while (next <= mc->degrade.n_ladder && !sched_level_possible(m, next)) {
            log_event(LOG_INFO, "degrade_never_fits", "request_id=%s model=%s level=%u", r->id, m->name, next);
            next++;
        }
        log_event(LOG_WARN, "oom", "request_id=%s model=%s level=%u status=%d next_level=%u of=%zu", r->id, m->name,
                  r->level, r->resp_status, next, mc->degrade.n_ladder);
        core_note_event(m->core, "OOM in %s at level %u", m->name, r->level);
        if (next <= mc->degrade.n_ladder && !retry_allowed(r->conn->core, r)) {
            refuse_over_budget(r, "an out-of-memory answer");
            return;
        }
        if (next <= mc->degrade.n_ladder) {
            char why[200];
            if (verdict_prepare_level(r, next, why, sizeof why) == 0) {
                model_note_degraded(m, next);
                retry(r, "out of memory");
                return;
            }
            log_event(LOG_WARN, "degrade_failed", "request_id=%s model=%s level=%u reason=%s", r->id, m->name, next, why);
        }
        conn_respond_error(r->conn, 503, "out_of_memory", m->name, 5, false,
                           "model %s: out of memory at every level tried (%u attempts, last level %u)", m->name,
                           r->attempts, r->level);
        return;
    }
    judge_output(r);
}

/* Counted as a held OOM is (verdict_judge): the estimate grows, the `oom` event, the core's
 * event line; only the retry is gone (the client has the answer's start). */
static void note_streamed_oom(request_t *r, const stream_watch_t *w)
{
    model_t *m = r->model;
    sched_note_oom(m, r, oom_message_need(w->error, w->error_len));
    log_event(LOG_WARN, "oom", "request_id=%s model=%s level=%u status=%d streamed=%B next_level=%u of=%zu", r->id,
              m->name, r->level, r->status, true, r->level, m->cfg->degrade.n_ladder);
    core_note_event(m->core, "OOM in %s at level %u (streamed)", m->name, r->level);
}

int verdict_stream_end(request_t *r, instance_t *inst, stream_watch_t *w, bool cut)
{
    if (w->kind == STREAM_NONE)
        return 0;
    const model_config_t *mc = r->model->cfg;
    if (!cut)
        stream_watch_end(w);
    enum stream_kind kind = w->kind;
    w->kind = STREAM_NONE; /* judged once */
    if (w->saw_error && degrade_error_is_oom(&mc->degrade.detect, w->error, w->error_len)) {
        note_streamed_oom(r, w);
        if (mc->recycle.on_oom)
            instance_recycle(inst, "out of memory (recycle.on_oom)");
        if (cut)
            return 0; /* the caller counts the break */
        r->outcome = "out_of_memory";
        return 503;
    }
    if (cut)
        return 0;
    if (w->saw_error) {
        log_event(LOG_WARN, "stream_error", "request_id=%s model=%s stream=%s error=%.*s", r->id, r->model->name,
                  stream_kind_name(kind), (int)(w->error_len > 300 ? 300 : w->error_len), w->error);
        r->outcome = "stream_error";
        return 500;
    }
    if (stream_watch_incomplete(w)) {
        log_event(LOG_WARN, "stream_incomplete", "request_id=%s model=%s stream=%s", r->id, r->model->name,
                  stream_kind_name(kind));
        r->outcome = "stream_incomplete";
        return 500;
    }
    return 0;
}
