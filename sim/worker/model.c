/*
 * model: the simulated model's life (see worker.h for the states).
 *
 * Loading takes --load-time and allocates --resident in SW_LOAD_STEPS equal steps, the first
 * at once and the others spread over the load (weights arrive layer by layer), then the
 * model is READY. The context (--context) is taken once at process start, not here.
 * Unloading takes --unload-time, then frees the resident memory except --unload-residue and
 * empties the allocator cache (what the seed001 validator's "aggressive cleanup" does); a
 * later reload allocates only what is missing. /sleep is an unload with --sleep-time and
 * --sleep-residue, /wake_up a load with --wake-time (vLLM's sleep mode level 1: the weights
 * wait in host memory, so waking is a copy, not a read from disk). Out of memory while loading: at start-up the
 * process prints PyTorch's error and exits 1; on /reload_models/ the partial load is given
 * back and the request gets HTTP 500 with the error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker.h"

#define SW_LOAD_STEPS 4
#define GIB (1024.0 * 1024.0 * 1024.0)

const char *sw_model_state_name(enum sw_model_state s)
{
    static const char *names[] = {"loading", "ready", "unloading", "unloaded"};
    return (unsigned)s < 4 ? names[s] : "?";
}

static void set_state(sw_worker_t *w, enum sw_model_state s)
{
    if (w->state != s)
        log_event(LOG_INFO, "model_state", "model=%s from=%s to=%s", w->f.name,
                  sw_model_state_name(w->state), sw_model_state_name(s));
    w->state = s;
}

static uint64_t real_ms(sw_worker_t *w, double sim_ms)
{
    double v = sim_ms * w->timescale;
    return v <= 0 ? 0 : (uint64_t)(v + 0.999);
}

/* Answers the admin request with memory before/after and the (simulated) time taken. */
static void admin_answer(sw_worker_t *w, const char *message)
{
    sw_http_req_t *r = w->admin_req;
    w->admin_req = NULL;
    if (!r)
        return;
    uint64_t after = sw_gpumem_held(&w->mem);
    double taken_s = (sw_now_ms() - w->admin_started) / w->timescale / 1000.0;
    long long freed = (long long)w->admin_mem_before - (long long)after;
    sw_respond_json(r, 200, NULL,
                    "{\"status\": \"success\", \"message\": \"%s\", \"model\": \"%s\", "
                    "\"memory_before_bytes\": %llu, \"memory_after_bytes\": %llu, \"freed_bytes\": %lld, "
                    "\"memory_before_gb\": %.3f, \"memory_after_gb\": %.3f, \"freed_gb\": %.3f, "
                    "\"time_taken\": %.3f}",
                    message, w->f.name, (unsigned long long)w->admin_mem_before,
                    (unsigned long long)after, freed, (double)w->admin_mem_before / GIB,
                    (double)after / GIB, (double)freed / GIB, taken_s);
}

static void load_failed(sw_worker_t *w, const char *oom)
{
    if (!w->admin_req) {
        fprintf(stderr, "torch.OutOfMemoryError: %s\n", oom);
        log_event(LOG_ERROR, "load_failed", "model=%s error=%s", w->f.name, oom);
        exit(1);
    }
    sw_gpumem_shrink_resident(&w->mem, w->load_from);
    set_state(w, SW_UNLOADED);
    log_event(LOG_ERROR, "reload_failed", "model=%s error=%s", w->f.name, oom);
    sw_http_req_t *r = w->admin_req;
    w->admin_req = NULL;
    char esc[SW_OOM_TEXT_MAX * 2];
    sw_respond_json(r, 500, NULL, "{\"status\": \"error\", \"error\": \"%s\"}",
                    sw_jesc(oom, esc, sizeof(esc)));
    sw_jobs_kick(w);
}

static void on_model_timer(uv_timer_t *t);

/* --size-from-free F, once after the first load: a cache of F x what cuMemGetInfo calls the
 * total, less what the process holds, as vLLM sizes its KV cache from
 * --gpu-memory-utilization (through a CUDA shim the total is the grant). -1: it did not fit
 * (the load failed). */
static int size_from_free(sw_worker_t *w)
{
    uint64_t free_b = 0, total = 0;
    w->sized = true;
    if (sw_gpumem_driver_info(&w->mem, &free_b, &total) != 0)
        return 0;
    uint64_t want = (uint64_t)((double)total * w->f.size_from_free);
    uint64_t held = sw_gpumem_held(&w->mem);
    uint64_t take = want > held ? want - held : 0;
    char oom[SW_OOM_TEXT_MAX];
    log_event(LOG_INFO, "cache_sized", "model=%s total=%llu free=%llu fraction=%.2f cache=%llu", w->f.name,
              (unsigned long long)total, (unsigned long long)free_b, w->f.size_from_free, (unsigned long long)take);
    if (sw_gpumem_grow_pool(&w->mem, take, oom, sizeof(oom)) != 0) {
        load_failed(w, oom);
        return -1;
    }
    return 0;
}

/* One step of the load: allocate its share, schedule the next step or become ready. */
static void load_advance(sw_worker_t *w)
{
    uint64_t need = w->f.resident > w->load_from ? w->f.resident - w->load_from : 0;
    if (w->load_step < SW_LOAD_STEPS) {
        uint64_t chunk = need / SW_LOAD_STEPS;
        if (w->load_step == SW_LOAD_STEPS - 1)
            chunk = need - chunk * (SW_LOAD_STEPS - 1);
        char oom[SW_OOM_TEXT_MAX];
        if (sw_gpumem_grow_resident(&w->mem, chunk, oom, sizeof(oom)) != 0) {
            load_failed(w, oom);
            return;
        }
        w->load_step++;
        uv_timer_start(&w->model_timer, on_model_timer, real_ms(w, (double)w->op_ms / SW_LOAD_STEPS), 0);
        return;
    }
    if (w->f.size_from_free > 0 && !w->sized && size_from_free(w) != 0)
        return;
    set_state(w, SW_READY);
    bool woke = w->asleep;
    if (woke)
        w->wakes++;
    else
        w->loads++;
    w->asleep = false;
    log_event(LOG_INFO, "model_loaded", "model=%s resident=%llu held=%llu", w->f.name,
              (unsigned long long)w->mem.resident, (unsigned long long)sw_gpumem_held(&w->mem));
    admin_answer(w, woke ? "woken up" : "models reloaded");
    sw_jobs_kick(w);
}

static void unload_finish(sw_worker_t *w)
{
    uint64_t residue = w->asleep ? w->f.sleep_residue : w->f.unload_residue;
    uint64_t keep = residue < w->mem.resident ? residue : w->mem.resident;
    uint64_t freed = sw_gpumem_shrink_resident(&w->mem, keep);
    freed += sw_gpumem_clear_cache(&w->mem);
    set_state(w, SW_UNLOADED);
    if (w->asleep)
        w->sleeps++;
    else
        w->unloads++;
    log_event(LOG_INFO, w->asleep ? "model_asleep" : "model_unloaded", "model=%s freed=%llu residue=%llu", w->f.name,
              (unsigned long long)freed, (unsigned long long)keep);
    admin_answer(w, w->asleep ? "asleep" : "models unloaded");
    sw_jobs_kick(w);
}

static void on_model_timer(uv_timer_t *t)
{
    sw_worker_t *w = t->data;
    if (w->gpu_held) { /* a locked process's CUDA calls block: the step waits */
        w->model_deferred = true;
        return;
    }
    if (w->state == SW_LOADING)
        load_advance(w);
    else if (w->state == SW_UNLOADING)
        unload_finish(w);
}

void sw_model_resume(sw_worker_t *w)
{
    if (!w->model_deferred)
        return;
    w->model_deferred = false;
    on_model_timer(&w->model_timer);
}

void sw_model_init(sw_worker_t *w)
{
    uv_timer_init(w->loop, &w->model_timer);
    w->model_timer.data = w;
    w->state = SW_UNLOADED;
}

static void start_load(sw_worker_t *w, sw_http_req_t *admin_req, uint64_t op_ms)
{
    w->op_ms = op_ms;
    w->admin_req = admin_req;
    w->admin_started = sw_now_ms();
    w->admin_mem_before = sw_gpumem_held(&w->mem);
    w->load_from = w->mem.resident;
    w->load_step = 0;
    set_state(w, SW_LOADING);
    log_event(LOG_INFO, "model_loading", "model=%s resident=%llu load_ms=%llu", w->f.name,
              (unsigned long long)w->f.resident, (unsigned long long)w->f.load_ms);
    load_advance(w);
}

void sw_model_start_load(sw_worker_t *w, sw_http_req_t *admin_req)
{
    w->asleep = false; /* a reload after a sleep loads from disk */
    start_load(w, admin_req, w->f.load_ms);
}

void sw_model_start_unload(sw_worker_t *w, sw_http_req_t *admin_req)
{
    w->admin_req = admin_req;
    w->admin_started = sw_now_ms();
    w->admin_mem_before = sw_gpumem_held(&w->mem);
    set_state(w, SW_UNLOADING);
    w->op_ms = w->asleep ? w->f.sleep_ms : w->f.unload_ms;
    uv_timer_start(&w->model_timer, on_model_timer, real_ms(w, (double)w->op_ms), 0);
}

void sw_model_start_sleep(sw_worker_t *w, sw_http_req_t *admin_req)
{
    w->asleep = true;
    sw_model_start_unload(w, admin_req);
}

void sw_model_start_wake(sw_worker_t *w, sw_http_req_t *admin_req)
{
    start_load(w, admin_req, w->asleep ? w->f.wake_ms : w->f.load_ms); /* after /unload_models/: a full load */
}
