/*
 * jobs: requests that use the GPU (/generate and its aliases, chat completions).
 *
 * Job states: WAITING (in w->waiting, FIFO) -> [LOCKING: head of the line acquiring the
 * --global-lock] -> RUNNING (in w->running) -> answered and freed. A job never outlives its
 * HTTP request; the server does not notice clients that leave (like a Python server), so a
 * job always runs to its end and answers, or hangs, or the process crashes.
 * At most `slots` jobs run: 1 with --lock or --global-lock, else --concurrency.
 *
 * Progress is simulated work in simulated ms: a job needs work = run_time x time factor x
 * jitter. While k jobs run in this process each advances at rate 1 / (1 + (k-1) x
 * contention), so two requests at once each take about twice as long (GPU time-slicing).
 * Events happen at fractions of the work:
 *   0, 0.1, 0.2, 0.3  the per-request memory arrives in 4 equal steps (peak from 0.3 on);
 *                     a step that does not fit is an OOM: the job ends with PyTorch's error
 *                     and what it had allocated goes to the allocator cache (--cache keep)
 *                     or back to the GPU (--cache release)
 *   0.3               a streamed chat response begins (after the "prefill")
 *   0.3 .. 1          stream chunks, evenly spread
 *   0.5               --crash-after: _exit(1) here; --hang-after: the job stops advancing
 *   1                 the job ends: memory released (or cached), --leak taken, answered
 * Invariant: every tick first brings all running jobs' progress up to now at the rate of
 * the interval just ended, and only then starts or ends jobs (which changes the rate).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "common/log.h"
#include "cost.h"
#include "outputs.h"
#include "worker.h"

#define ALLOC_STEPS 4
#define ALLOC_STEP_FRAC 0.1
#define STREAM_START_FRAC 0.3
#define MISHAP_FRAC 0.5
#define MAX_OUTPUT (300ull * 1024 * 1024)

enum job_kind { JOB_GENERATE = 0, JOB_CHAT = 1 };
enum job_state { J_WAITING = 0, J_LOCKING, J_RUNNING };
enum job_event { EV_NONE = 0, EV_ALLOC, EV_STREAM_BEGIN, EV_CHUNK, EV_MISHAP, EV_FINISH };

typedef struct sw_job {
    list_t link;
    sw_worker_t *w;
    sw_http_req_t *http;
    enum job_kind kind;
    enum job_state state;
    bool stream;
    uint64_t seq;
    sw_params_t params;
    char params_json[2048];
    double mem_factor, time_factor;
    uint64_t mem_need, mem_held;
    int alloc_steps;
    double work, done; /* simulated ms */
    double last;       /* real ms of the last progress update */
    double queued_at, started_at;
    bool will_crash, will_hang, will_fail, hung, mishap_done;
    bool lock_ok; /* the global lock is held for this job */
    /* chat */
    unsigned tokens, prompt_tokens, chunks_total, chunks_sent;
    bool stream_started;
    long created;
} sw_job_t;

static void tick(sw_worker_t *w);

/* ---- small helpers ----------------------------------------------------------------- */

double sw_now_ms(void)
{
    return (double)uv_hrtime() / 1e6;
}

uint64_t sw_rand(sw_worker_t *w)
{
    /* xorshift64* */
    uint64_t x = w->rng ? w->rng : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double sw_rand01(sw_worker_t *w)
{
    return (double)(sw_rand(w) >> 11) / 9007199254740992.0;
}

void sw_maybe_exit(sw_worker_t *w)
{
    if (!w->stopping || w->closing || w->n_running || w->n_waiting || w->admin_req || w->locking ||
        w->n_deferred)
        return;
    w->closing = true;
    log_event(LOG_INFO, "exit", "model=%s reason=%s", w->f.name, "signal");
    uv_close((uv_handle_t *)&w->job_timer, NULL);
    uv_close((uv_handle_t *)&w->model_timer, NULL);
    uv_close((uv_handle_t *)&w->gate_timer, NULL); /* gate.c's poll */
    uv_close((uv_handle_t *)&w->sigterm, NULL);
    uv_close((uv_handle_t *)&w->sigint, NULL);
}

static unsigned slots(const sw_worker_t *w)
{
    return (w->f.lock || w->f.global_lock[0]) ? 1 : w->f.concurrency;
}

static void job_free(sw_job_t *j)
{
    free(j);
}

/* ---- answering ---------------------------------------------------------------------- */

static void answer_oom(sw_job_t *j, const char *oom)
{
    char esc[SW_OOM_TEXT_MAX * 2];
    sw_jesc(oom, esc, sizeof(esc));
    if (j->w->f.oom_style == SW_OOM_JSON200) {
        sw_respond_json(j->http, 200, NULL,
                        "{\"success\": false, \"error\": \"Traceback (most recent call last):\\n"
                        "  File \\\"worker.py\\\", line 1672, in generate\\n"
                        "torch.OutOfMemoryError: %s\", \"model\": \"%s\", "
                        "\"worker_export\": {\"oom_quality_degradation_level\": 0}}",
                        esc, j->w->f.name);
    } else {
        char hdr[SW_OOM_TEXT_MAX + 64];
        snprintf(hdr, sizeof(hdr), "x-generation-error: %s\r\n", oom);
        sw_respond_json(j->http, 500, hdr, "{\"detail\": \"%s\"}", esc);
    }
}

static void answer_failure(sw_job_t *j)
{
    const char *msg = "RuntimeError: simulated failure (--fail-prob)";
    if (j->w->f.oom_style == SW_OOM_JSON200)
        sw_respond_json(j->http, 200, NULL, "{\"success\": false, \"error\": \"%s\", \"model\": \"%s\"}",
                        msg, j->w->f.name);
    else
        sw_respond_json(j->http, 500, "x-generation-error: simulated failure\r\n",
                        "{\"detail\": \"%s\"}", msg);
}

static double generation_seconds(const sw_job_t *j)
{
    return (sw_now_ms() - j->started_at) / j->w->timescale / 1000.0;
}

static const char *chat_word(unsigned i)
{
    static const char *words[] = {"This", " is", " a", " simulated", " answer", " from", " a",
                                  " model", " that", " holds", " GPU", " memory", " while", " it",
                                  " thinks", "."};
    return words[i % (sizeof(words) / sizeof(words[0]))];
}

static void answer_generate(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    uint64_t idx = ++w->outputs;
    unsigned variant = 0;
    if (w->f.corrupt_every && idx % w->f.corrupt_every == 0) {
        unsigned nv = sw_output_corrupt_variants(w->f.output);
        variant = nv ? 1 + (unsigned)((idx / w->f.corrupt_every - 1) % nv) : 0;
        log_event(LOG_WARN, "corrupt_output", "model=%s request=%llu kind=%s variant=%s", w->f.name,
                  (unsigned long long)j->seq, sw_output_kind_name(w->f.output),
                  sw_output_corrupt_name(w->f.output, variant));
    }
    double gen_s = generation_seconds(j);
    sw_output_meta_t meta = {w->f.name, j->seq, gen_s, 0, j->params_json};
    sw_output_info_t info;
    buf_t out;
    buf_init(&out, MAX_OUTPUT);
    if (sw_output_render(w->f.output, j->mem_factor, w->f.output_size, variant, &meta, &out, &info) != 0) {
        buf_free(&out);
        sw_respond_json(j->http, 500, NULL, "{\"detail\": \"output too large\"}");
        return;
    }
    char hdr[512];
    int n = snprintf(hdr, sizeof(hdr), "x-generation-time: %.3f\r\nx-model: %s\r\n", gen_s, w->f.name);
    if (w->f.output == SW_OUT_PLY)
        snprintf(hdr + n, sizeof(hdr) - (size_t)n, "x-gaussian-count: %llu\r\n", (unsigned long long)info.elements);
    else if (w->f.output == SW_OUT_GLB)
        snprintf(hdr + n, sizeof(hdr) - (size_t)n, "x-vertex-count: %llu\r\n", (unsigned long long)info.elements);
    sw_http_respond(j->http, 200, info.content_type, hdr, out.data, out.len);
    buf_free(&out);
}

static void answer_chat(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    char text[4096];
    size_t tl = 0;
    text[0] = 0;
    for (unsigned i = 0; i < j->chunks_total && tl + 32 < sizeof(text); i++)
        tl += (size_t)snprintf(text + tl, sizeof(text) - tl, "%s", chat_word(i));
    char name[256];
    sw_jesc(w->f.name, name, sizeof(name));
    char hdr[128];
    snprintf(hdr, sizeof(hdr), "x-generation-time: %.3f\r\n", generation_seconds(j));
    sw_respond_json(j->http, 200, hdr,
                    "{\"id\": \"chatcmpl-sim-%llu\", \"object\": \"chat.completion\", \"created\": %ld, "
                    "\"model\": \"%s\", \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", "
                    "\"content\": \"%s\"}, \"finish_reason\": \"stop\"}], \"usage\": {\"prompt_tokens\": %u, "
                    "\"completion_tokens\": %u, \"total_tokens\": %u}}",
                    (unsigned long long)j->seq, j->created, name, text, j->prompt_tokens, j->tokens,
                    j->prompt_tokens + j->tokens);
}

static void stream_event(sw_job_t *j, const char *delta_json, const char *finish)
{
    char name[256];
    sw_jesc(j->w->f.name, name, sizeof(name));
    char ev[1024];
    int n = snprintf(ev, sizeof(ev),
                     "data: {\"id\": \"chatcmpl-sim-%llu\", \"object\": \"chat.completion.chunk\", "
                     "\"created\": %ld, \"model\": \"%s\", \"choices\": [{\"index\": 0, \"delta\": %s, "
                     "\"finish_reason\": %s}]}\n\n",
                     (unsigned long long)j->seq, j->created, name, delta_json, finish);
    if (n > 0 && (size_t)n < sizeof(ev))
        sw_http_stream_write(j->http, ev, (size_t)n);
}

/* ---- the life of a job -------------------------------------------------------------- */

/* The job leaves the running set: memory back (or cached), lock released. The caller
 * answers afterwards (so that what the answer triggers sees the books already updated)
 * and then frees the job. */
static void job_detach(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    if (j->mem_held)
        sw_gpumem_request_release(&w->mem, j->mem_held, w->f.cache == SW_CACHE_KEEP);
    j->mem_held = 0;
    list_remove(&j->link);
    w->n_running--;
    if (j->lock_ok)
        sw_glock_release(&w->glock);
    j->lock_ok = false;
    w->tick_again = true;
}

static void job_oom(sw_job_t *j, const char *oom)
{
    sw_worker_t *w = j->w;
    w->ooms++;
    log_event(LOG_WARN, "request_oom", "model=%s request=%llu need=%llu held=%llu error=%s", w->f.name,
              (unsigned long long)j->seq, (unsigned long long)j->mem_need,
              (unsigned long long)j->mem_held, oom);
    /* What it had allocated goes to the cache (keep) or the GPU (release), like PyTorch
     * unwinding the failed forward pass. Memory is all taken before a stream begins, so
     * an OOM always gets a whole error response. */
    job_detach(j);
    answer_oom(j, oom);
    job_free(j);
}

/* --stream-oom-at: the stream's chunk is PyTorch's OOM as an error event, and the stream
 * ends there without data: [DONE] (as a server whose generation died mid-answer). */
static void job_stream_oom(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    char oom[SW_OOM_TEXT_MAX], esc[SW_OOM_TEXT_MAX * 2], ev[SW_OOM_TEXT_MAX * 2 + 256];
    snprintf(oom, sizeof oom, "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; simulated mid-stream)");
    sw_jesc(oom, esc, sizeof esc);
    static const char *const fmt[] = {
        [SW_SERR_EVENT] = "event: error\ndata: {\"error\": {\"message\": \"%s\", \"type\": \"server_error\"}}\n\n",
        [SW_SERR_DATA] = "data: {\"error\": {\"message\": \"%s\", \"type\": \"server_error\", \"code\": 500}}\n\n",
        [SW_SERR_LLAMACPP] = "error: {\"code\": 500, \"message\": \"%s\", \"type\": \"server_error\"}\n\n",
    };
    int n = snprintf(ev, sizeof ev, fmt[w->f.stream_error_style], esc);
    w->ooms++;
    log_event(LOG_WARN, "request_oom", "model=%s request=%llu streamed=%B error=%s", w->f.name,
              (unsigned long long)j->seq, true, oom);
    job_detach(j);
    if (n > 0 && (size_t)n < sizeof ev)
        sw_http_stream_write(j->http, ev, (size_t)n);
    sw_http_stream_end(j->http);
    job_free(j);
}

static void job_failed_early(sw_job_t *j)
{
    j->w->failures++;
    job_detach(j);
    answer_failure(j);
    job_free(j);
}

static void job_finish(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    job_detach(j);
    if (w->f.leak) {
        char oom[SW_OOM_TEXT_MAX];
        if (sw_gpumem_grow_leak(&w->mem, w->f.leak, oom, sizeof(oom)) != 0)
            log_event(LOG_WARN, "leak_skipped", "model=%s reason=%s", w->f.name, "out of memory");
    }
    if (j->will_fail && !j->stream_started) {
        w->failures++;
        log_event(LOG_WARN, "request_failed", "model=%s request=%llu", w->f.name, (unsigned long long)j->seq);
        answer_failure(j);
    } else {
        w->completed++;
        log_event(LOG_INFO, "request_done", "model=%s request=%llu seconds=%f", w->f.name,
                  (unsigned long long)j->seq, generation_seconds(j));
        if (j->kind == JOB_GENERATE) {
            answer_generate(j);
        } else if (j->stream) {
            stream_event(j, "{}", "\"stop\"");
            sw_http_stream_write(j->http, "data: [DONE]\n\n", 14);
            sw_http_stream_end(j->http);
        } else {
            answer_chat(j);
        }
    }
    job_free(j);
}

static double event_fraction(const sw_job_t *j, enum job_event *ev)
{
    double best = 1.0;
    *ev = EV_FINISH;
    /* Candidates in priority order; the first with the smallest fraction wins. */
    double c;
    if (j->stream && j->stream_started && j->chunks_sent < j->chunks_total) {
        c = STREAM_START_FRAC + (1.0 - STREAM_START_FRAC) * (j->chunks_sent + 1) / (j->chunks_total + 1);
        if (c <= best) {
            best = c;
            *ev = EV_CHUNK;
        }
    }
    if ((j->will_crash || j->will_hang) && !j->mishap_done && MISHAP_FRAC <= best) {
        best = MISHAP_FRAC;
        *ev = EV_MISHAP;
    }
    if (j->stream && !j->stream_started && STREAM_START_FRAC <= best) {
        best = STREAM_START_FRAC;
        *ev = EV_STREAM_BEGIN;
    }
    if (j->alloc_steps < ALLOC_STEPS) {
        c = ALLOC_STEP_FRAC * j->alloc_steps;
        if (c <= best) {
            best = c;
            *ev = EV_ALLOC;
        }
    }
    return best;
}

/* Runs every event the job's progress has reached. Returns false when the job ended. */
static bool job_advance(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    for (;;) {
        if (j->hung)
            return true;
        enum job_event ev;
        double f = event_fraction(j, &ev);
        if (f * j->work > j->done + 1e-6 * (j->work > 1 ? j->work : 1))
            return true;
        switch (ev) {
        case EV_ALLOC: {
            uint64_t chunk = j->mem_need / ALLOC_STEPS;
            if (j->alloc_steps == ALLOC_STEPS - 1)
                chunk = j->mem_need - chunk * (ALLOC_STEPS - 1);
            char oom[SW_OOM_TEXT_MAX];
            if (sw_gpumem_request_grow(&w->mem, chunk, oom, sizeof(oom)) != 0) {
                j->alloc_steps++;
                job_oom(j, oom);
                return false;
            }
            j->mem_held += chunk;
            j->alloc_steps++;
            break;
        }
        case EV_STREAM_BEGIN:
            j->stream_started = true;
            if (j->will_fail) {
                j->stream_started = false;
                job_failed_early(j);
                return false;
            }
            sw_http_stream_begin(j->http, 200, "text/event-stream",
                                 "cache-control: no-cache\r\nx-accel-buffering: no\r\n");
            stream_event(j, "{\"role\": \"assistant\", \"content\": \"\"}", "null");
            break;
        case EV_CHUNK: {
            if (w->f.stream_oom_at && j->chunks_sent + 1 == w->f.stream_oom_at) {
                job_stream_oom(j);
                return false;
            }
            char delta[128];
            snprintf(delta, sizeof(delta), "{\"content\": \"%s\"}", chat_word(j->chunks_sent));
            stream_event(j, delta, "null");
            j->chunks_sent++;
            break;
        }
        case EV_MISHAP:
            j->mishap_done = true;
            if (j->will_crash) {
                log_event(LOG_ERROR, "crash", "model=%s request=%llu", w->f.name, (unsigned long long)j->seq);
                static const char msg[] =
                    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                    "CUDA kernel errors might be asynchronously reported at some other API call.\n";
                ssize_t wr = write(2, msg, sizeof(msg) - 1);
                (void)wr;
                _exit(1);
            }
            log_event(LOG_ERROR, "hang", "model=%s request=%llu", w->f.name, (unsigned long long)j->seq);
            j->hung = true;
            return true;
        case EV_FINISH:
            job_finish(j);
            return false;
        case EV_NONE:
            return true;
        }
    }
}

static void job_start(sw_job_t *j)
{
    sw_worker_t *w = j->w;
    j->seq = ++w->started;
    int64_t s = (int64_t)j->seq;
    j->will_crash = w->f.crash_after >= 0 && s == w->f.crash_after + 1;
    j->will_hang = w->f.hang_after >= 0 && s == w->f.hang_after + 1;
    j->will_fail = w->f.fail_prob > 0 && sw_rand01(w) < w->f.fail_prob;
    double jitter = 1.0;
    if (w->f.run_jitter > 0)
        jitter = 1.0 + (2.0 * sw_rand01(w) - 1.0) * w->f.run_jitter;
    j->work = (double)w->f.run_ms * j->time_factor * jitter;
    j->state = J_RUNNING;
    j->started_at = j->last = sw_now_ms();
    list_insert_tail(&w->running, &j->link);
    w->n_running++;
    log_event(LOG_INFO, "request_started", "model=%s request=%llu mem=%llu sim_ms=%f running=%u",
              w->f.name, (unsigned long long)j->seq, (unsigned long long)j->mem_need, j->work,
              w->n_running);
}

static void reject_not_ready(sw_worker_t *w, sw_http_req_t *r)
{
    if (w->state == SW_LOADING)
        sw_respond_json(r, 503, NULL, "{\"error\": \"model loading\", \"status\": \"loading\"}");
    else
        sw_respond_json(r, 503, NULL, "{\"error\": \"models unloaded\"}");
}

/* ---- the line ----------------------------------------------------------------------- */

static void on_locked(void *ctx, bool ok, int errno_value)
{
    sw_job_t *j = ctx;
    sw_worker_t *w = j->w;
    w->locking = false;
    if (!ok) {
        log_event(LOG_ERROR, "global_lock_failed", "path=%s error=%s", w->f.global_lock, strerror(errno_value));
        list_remove(&j->link);
        w->n_waiting--;
        sw_respond_json(j->http, 500, NULL, "{\"detail\": \"global lock: %s\"}", strerror(errno_value));
        job_free(j);
    } else {
        j->lock_ok = true;
    }
    sw_jobs_kick(w);
}

/* Starts waiting jobs while there are slots. Returns true when it started or ended any. */
static bool pump(sw_worker_t *w)
{
    bool changed = false;
    while (!w->gpu_held && w->n_running < slots(w) && !list_empty(&w->waiting)) {
        sw_job_t *j = list_entry(list_first(&w->waiting), sw_job_t, link);
        if (w->state != SW_READY) {
            list_remove(&j->link);
            w->n_waiting--;
            if (j->lock_ok)
                sw_glock_release(&w->glock);
            reject_not_ready(w, j->http);
            job_free(j);
            changed = true;
            continue;
        }
        if (w->f.global_lock[0] && !j->lock_ok) {
            if (j->state == J_LOCKING)
                break; /* on_locked will kick */
            j->state = J_LOCKING;
            w->locking = true;
            if (sw_glock_acquire(&w->glock, w->loop, on_locked, j) != 0) {
                w->locking = false;
                j->state = J_WAITING;
                log_event(LOG_ERROR, "global_lock_failed", "path=%s error=%s", w->f.global_lock, "acquire");
                list_remove(&j->link);
                w->n_waiting--;
                sw_respond_json(j->http, 500, NULL, "{\"detail\": \"global lock unavailable\"}");
                job_free(j);
                changed = true;
                continue;
            }
            break;
        }
        list_remove(&j->link);
        w->n_waiting--;
        job_start(j);
        changed = true;
    }
    return changed;
}

static double current_rate(const sw_worker_t *w)
{
    unsigned k = w->n_running;
    return k <= 1 ? 1.0 : 1.0 / (1.0 + (double)(k - 1) * w->f.contention);
}

static void progress_update(sw_worker_t *w)
{
    double now = sw_now_ms();
    double rate = current_rate(w);
    list_foreach(it, &w->running)
    {
        sw_job_t *j = list_entry(it, sw_job_t, link);
        if (!j->hung && !w->gpu_held && now > j->last)
            j->done += (now - j->last) / w->timescale * rate;
        j->last = now;
    }
}

static void on_job_timer(uv_timer_t *t)
{
    tick(t->data);
}

static void reschedule(sw_worker_t *w)
{
    if (w->closing)
        return;
    if (w->gpu_held) {
        uv_timer_stop(&w->job_timer);
        return;
    }
    double rate = current_rate(w);
    double best = -1;
    list_foreach(it, &w->running)
    {
        sw_job_t *j = list_entry(it, sw_job_t, link);
        if (j->hung)
            continue;
        enum job_event ev;
        double f = event_fraction(j, &ev);
        double left = f * j->work - j->done;
        double real = left > 0 ? left / rate * w->timescale : 0;
        if (best < 0 || real < best)
            best = real;
    }
    if (best < 0) {
        uv_timer_stop(&w->job_timer);
        return;
    }
    uv_timer_start(&w->job_timer, on_job_timer, (uint64_t)ceil(best), 0);
}

static void update_utilization(sw_worker_t *w)
{
    unsigned u = w->n_running && !w->gpu_held ? 100 : 0;
    if (u != w->utilization_set) {
        sw_gpumem_set_utilization(&w->mem, u);
        w->utilization_set = u;
    }
}

static void tick(sw_worker_t *w)
{
    if (w->in_tick) {
        w->tick_again = true;
        return;
    }
    w->in_tick = true;
    int rounds = 0;
    do {
        w->tick_again = false;
        progress_update(w);
        list_foreach_safe(it, tmp, &w->running)
        {
            sw_job_t *j = list_entry(it, sw_job_t, link);
            job_advance(j);
        }
        if (pump(w))
            w->tick_again = true;
    } while (w->tick_again && ++rounds < 10000);
    reschedule(w);
    update_utilization(w);
    w->in_tick = false;
    sw_maybe_exit(w);
}

void sw_jobs_kick(sw_worker_t *w)
{
    tick(w);
}

void sw_jobs_hold(sw_worker_t *w)
{
    tick(w); /* everything due up to now happens first */
    w->gpu_held = true;
    tick(w); /* then: timer stopped, utilization 0 */
}

void sw_jobs_resume(sw_worker_t *w)
{
    double now = sw_now_ms();
    list_foreach(it, &w->running)
    {
        sw_job_t *j = list_entry(it, sw_job_t, link);
        j->last = now; /* the time held is not progress */
    }
    w->gpu_held = false;
    tick(w);
}

void sw_jobs_init(sw_worker_t *w)
{
    list_init(&w->waiting);
    list_init(&w->running);
    uv_timer_init(w->loop, &w->job_timer);
    w->job_timer.data = w;
    if (w->f.global_lock[0])
        sw_glock_init(&w->glock, w->f.global_lock);
}

/* Params as a JSON object of strings, for echoing in JSON outputs. */
static void render_params(sw_job_t *j)
{
    size_t o = 0;
    char *out = j->params_json;
    size_t cap = sizeof(j->params_json);
    o += (size_t)snprintf(out + o, cap - o, "{");
    for (size_t i = 0; i < j->params.n && o + 8 < cap; i++) {
        if (j->params.items[i].is_file)
            continue;
        char k[SW_PARAM_NAME_MAX * 2], v[SW_PARAM_VALUE_MAX * 2];
        sw_jesc(j->params.items[i].name, k, sizeof(k));
        sw_jesc(j->params.items[i].value, v, sizeof(v));
        int n = snprintf(out + o, cap - o, "%s\"%s\": \"%s\"", o > 1 ? ", " : "", k, v);
        if (n < 0 || (size_t)n >= cap - o - 2)
            break;
        o += (size_t)n;
    }
    snprintf(out + o, cap - o, "}");
}

/* Chat: stream flag, token counts. Returns -1 (answered 400) on a bad body. */
static int read_chat(sw_job_t *j, sw_http_req_t *r)
{
    cJSON *doc = cJSON_ParseWithLength(r->body, r->body_len);
    if (!doc || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        sw_respond_json(r, 400, NULL, "{\"error\": {\"message\": \"body must be a JSON object\", \"type\": \"invalid_request_error\"}}");
        return -1;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(doc, "messages");
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(doc);
        sw_respond_json(r, 400, NULL, "{\"error\": {\"message\": \"messages: expected an array\", \"type\": \"invalid_request_error\"}}");
        return -1;
    }
    size_t chars = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(c))
            chars += strlen(c->valuestring);
    }
    j->prompt_tokens = (unsigned)(chars / 4 + 1);
    j->stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "stream"));
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(doc, "max_tokens");
    if (!cJSON_IsNumber(mt))
        mt = cJSON_GetObjectItemCaseSensitive(doc, "max_completion_tokens");
    double t = cJSON_IsNumber(mt) ? mt->valuedouble : 64;
    j->tokens = t < 1 ? 1 : t > 1e6 ? 1000000 : (unsigned)t;
    unsigned chunks = j->tokens / 8;
    j->chunks_total = chunks < 2 ? 2 : chunks > 32 ? 32 : chunks;
    j->created = (long)time(NULL);
    cJSON_Delete(doc);
    return 0;
}

void sw_jobs_submit(sw_worker_t *w, sw_http_req_t *r, int kind)
{
    if (w->stopping) {
        sw_respond_json(r, 503, NULL, "{\"error\": \"shutting down\"}");
        return;
    }
    if (w->state != SW_READY) {
        reject_not_ready(w, r);
        return;
    }
    if (w->n_waiting >= w->f.queue_max) {
        sw_respond_json(r, 503, NULL, "{\"error\": \"too many requests waiting\"}");
        return;
    }
    sw_job_t *j = calloc(1, sizeof(*j));
    if (!j) {
        sw_respond_json(r, 503, NULL, "{\"error\": \"out of host memory\"}");
        return;
    }
    j->w = w;
    j->http = r;
    j->kind = kind == 1 ? JOB_CHAT : JOB_GENERATE;
    list_init(&j->link);
    char err[256] = "";
    if (sw_params_parse(r->content_type[0] ? r->content_type : NULL, r->body, r->body_len, &j->params,
                        err, sizeof(err)) != 0) {
        char esc[512];
        sw_respond_json(r, 400, NULL, "{\"detail\": \"%s\"}", sw_jesc(err, esc, sizeof(esc)));
        job_free(j);
        return;
    }
    if (j->kind == JOB_CHAT && read_chat(j, r) != 0) {
        job_free(j);
        return;
    }
    render_params(j);
    j->mem_factor = sw_cost_factor(w->f.mem_scale, w->f.n_mem_scale, &j->params);
    j->time_factor = sw_cost_factor(w->f.time_scale, w->f.n_time_scale, &j->params);
    double need = (double)w->f.per_request * j->mem_factor;
    j->mem_need = need >= 1.8e19 ? UINT64_MAX / 2 : (uint64_t)need;
    j->queued_at = sw_now_ms();
    j->state = J_WAITING;
    list_insert_tail(&w->waiting, &j->link);
    w->n_waiting++;
    tick(w);
}
