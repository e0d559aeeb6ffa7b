/*
 * routes: simworker's HTTP endpoints (the union of what the field's servers expose).
 *
 *   GET  /health  /health/  /api/health   503 {"status":"loading"} while loading, else 200
 *                                          {"status":"ok"|"unloading"|"unloaded"}
 *   GET  /ready                            200 when ready, else 503
 *   POST /generate  /generate/  --path ... a generation (JSON, urlencoded or multipart body)
 *   POST /v1/chat/completions              OpenAI-style chat ("stream": true -> SSE)
 *   GET  /v1/models                        OpenAI-style model list
 *   POST /unload_models/  /reload_models/  seed001's validator hooks (memory before/after, time)
 *   POST /sleep[?level=N]  /wake_up        vLLM's sleep mode (also SGLang's names:
 *        /release_memory_occupation  /resume_memory_occupation); GET /is_sleeping
 *   POST /clear_cache/  /cleanup_gpu/  /cleanup-memory   empty the allocator cache
 *   GET  /gpu_status/  /status/            memory as this process and the GPU see it, and
 *                                          whether its GPU work is held by a CUDA lock
 * Paths match with or without a trailing slash. Unknown path: 404; wrong method: 405.
 * Every POST to a hook path (unload/reload, sleep/wake, clear_cache and their aliases) is
 * logged as `hook_called` with its path and body (the first SW_HOOK_BODY_LOG bytes) when it
 * is handled (once more when a CUDA lock held it back), so a test can see what vramd sent.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "worker.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define SW_HOOK_BODY_LOG 1024

/* A hook call as it arrived: its path and body (cut at SW_HOOK_BODY_LOG bytes; NUL bytes end it). */
static void log_hook(const sw_worker_t *w, const sw_http_req_t *r, const char *p)
{
    char body[SW_HOOK_BODY_LOG + 1];
    size_t n = r->body_len < SW_HOOK_BODY_LOG ? r->body_len : SW_HOOK_BODY_LOG;
    if (n)
        memcpy(body, r->body, n);
    body[n] = 0;
    log_event(LOG_INFO, "hook_called", "model=%s path=%s body_bytes=%zu body=%s", w->f.name, p, r->body_len, body);
}

/* Path without trailing slashes ("/" stays "/"). */
static void normalize(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    out[strcspn(out, "?")] = 0; /* /sleep?level=1: the query is not part of the route */
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = 0;
}

static bool is_get(const sw_http_req_t *r)
{
    return !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
}

static void health(sw_worker_t *w, sw_http_req_t *r)
{
    char name[256];
    sw_jesc(w->f.name, name, sizeof(name));
    switch (w->state) {
    case SW_LOADING:
        sw_respond_json(r, 503, NULL, "{\"status\": \"loading\", \"model\": \"%s\"}", name);
        break;
    case SW_READY:
        sw_respond_json(r, 200, NULL, "{\"status\": \"ok\", \"model\": \"%s\", \"running\": %u, \"waiting\": %u}",
                        name, w->n_running, w->n_waiting);
        break;
    default:
        sw_respond_json(r, 200, NULL, "{\"status\": \"%s\", \"model\": \"%s\"}", sw_model_state_name(w->state), name);
        break;
    }
}

static void gpu_status(sw_worker_t *w, sw_http_req_t *r)
{
    simgpu_info_t info;
    memset(&info, 0, sizeof(info));
    sw_gpumem_info(&w->mem, &info);
    char name[256], gname[SIMGPU_NAME_MAX * 2];
    sw_jesc(w->f.name, name, sizeof(name));
    sw_jesc(info.name, gname, sizeof(gname));
    const sw_gpumem_t *m = &w->mem;
    uint64_t held = sw_gpumem_held_measured(&w->mem);
    uint64_t allocated = m->resident + m->active;
    uint64_t reserved = allocated + m->pool + m->leaked;
    char data[128] = "null"; /* --data-chunk: the allocations' data read back now */
    uint64_t sum = 0;
    unsigned bad = 0;
    if (m->cuda && sw_cuda_data_check(m->cuda, &sum, &bad) == 0)
        snprintf(data, sizeof data, "{\"checksum\": \"%016llx\", \"bad\": %u}", (unsigned long long)sum, bad);
    sw_respond_json(r, 200, NULL,
        "{\"model\": \"%s\", \"state\": \"%s\", \"pid\": %d, \"data\": %s, "
        "\"gpu\": {\"index\": %d, \"name\": \"%s\", \"uuid\": \"%s\", \"total_bytes\": %llu, "
        "\"used_bytes\": %llu, \"free_bytes\": %llu, \"utilization\": %u}, "
        "\"process\": {\"held_bytes\": %llu, \"context_bytes\": %llu, \"resident_bytes\": %llu, "
        "\"active_bytes\": %llu, \"cached_bytes\": %llu, \"leaked_bytes\": %llu, \"peak_bytes\": %llu}, "
        "\"requests\": {\"running\": %u, \"waiting\": %u, \"started\": %llu, \"completed\": %llu, "
        "\"oom\": %llu, \"failed\": %llu}, \"gpu_held\": %s, \"holds\": %llu, "
        "\"allocated_gb\": %.3f, \"reserved_gb\": %.3f, \"total_gb\": %.3f, \"free_gb\": %.3f}",
        name, sw_model_state_name(w->state), (int)getpid(), data, w->mem.index, gname, info.uuid,
        (unsigned long long)info.total, (unsigned long long)info.used, (unsigned long long)info.free,
        info.utilization_gpu, (unsigned long long)held, (unsigned long long)m->context,
        (unsigned long long)m->resident, (unsigned long long)m->active, (unsigned long long)m->pool,
        (unsigned long long)m->leaked, (unsigned long long)m->peak, w->n_running, w->n_waiting,
        (unsigned long long)w->started, (unsigned long long)w->completed, (unsigned long long)w->ooms,
        (unsigned long long)w->failures, w->gpu_held ? "true" : "false", (unsigned long long)w->holds,
        (double)allocated / GIB, (double)reserved / GIB,
        (double)info.total / GIB, (double)info.free / GIB);
}

static void clear_cache(sw_worker_t *w, sw_http_req_t *r)
{
    if (sw_gate_defer(w, r))
        return;
    uint64_t freed = sw_gpumem_clear_cache(&w->mem);
    log_event(LOG_INFO, "cache_cleared", "model=%s freed=%llu", w->f.name, (unsigned long long)freed);
    sw_respond_json(r, 200, NULL, "{\"status\": \"success\", \"freed_bytes\": %llu, \"held_bytes\": %llu}",
                    (unsigned long long)freed, (unsigned long long)sw_gpumem_held(&w->mem));
}

static void models(sw_worker_t *w, sw_http_req_t *r)
{
    char name[256];
    sw_jesc(w->f.name, name, sizeof(name));
    sw_respond_json(r, 200, NULL,
                    "{\"object\": \"list\", \"data\": [{\"id\": \"%s\", \"object\": \"model\", "
                    "\"created\": %ld, \"owned_by\": \"simworker\"}]}",
                    name, (long)time(NULL));
}

/* /unload_models/, or /sleep (vLLM sleep mode; SGLang's /release_memory_occupation) when sleep. */
static void unload(sw_worker_t *w, sw_http_req_t *r, bool sleep)
{
    if (sw_gate_defer(w, r))
        return;
    if (w->stopping) {
        sw_respond_json(r, 503, NULL, "{\"status\": \"error\", \"error\": \"shutting down\"}");
        return;
    }
    if (w->state == SW_LOADING || w->state == SW_UNLOADING) {
        sw_respond_json(r, 409, NULL, "{\"status\": \"error\", \"error\": \"busy: %s\"}", sw_model_state_name(w->state));
        return;
    }
    if (w->state == SW_UNLOADED) {
        uint64_t held = sw_gpumem_held(&w->mem);
        sw_respond_json(r, 200, NULL,
                        "{\"status\": \"success\", \"message\": \"already unloaded\", \"memory_before_bytes\": %llu, "
                        "\"memory_after_bytes\": %llu, \"freed_bytes\": 0, \"memory_before_gb\": %.3f, "
                        "\"memory_after_gb\": %.3f, \"freed_gb\": 0.0, \"time_taken\": 0.0}",
                        (unsigned long long)held, (unsigned long long)held, (double)held / GIB, (double)held / GIB);
        return;
    }
    if (sleep)
        sw_model_start_sleep(w, r);
    else
        sw_model_start_unload(w, r);
}

/* /reload_models/, or /wake_up (SGLang's /resume_memory_occupation) when wake. */
static void reload(sw_worker_t *w, sw_http_req_t *r, bool wake)
{
    if (sw_gate_defer(w, r))
        return;
    if (w->stopping) {
        sw_respond_json(r, 503, NULL, "{\"status\": \"error\", \"error\": \"shutting down\"}");
        return;
    }
    if (w->state == SW_LOADING || w->state == SW_UNLOADING) {
        sw_respond_json(r, 409, NULL, "{\"status\": \"error\", \"error\": \"busy: %s\"}", sw_model_state_name(w->state));
        return;
    }
    if (w->state == SW_READY) {
        uint64_t held = sw_gpumem_held(&w->mem);
        sw_respond_json(r, 200, NULL,
                        "{\"status\": \"success\", \"message\": \"already loaded\", \"memory_before_bytes\": %llu, "
                        "\"memory_after_bytes\": %llu, \"freed_bytes\": 0, \"memory_before_gb\": %.3f, "
                        "\"memory_after_gb\": %.3f, \"freed_gb\": 0.0, \"time_taken\": 0.0}",
                        (unsigned long long)held, (unsigned long long)held, (double)held / GIB, (double)held / GIB);
        return;
    }
    if (wake)
        sw_model_start_wake(w, r);
    else
        sw_model_start_load(w, r);
}

static bool is_generate_path(const sw_worker_t *w, const char *p)
{
    if (!strcmp(p, "/generate"))
        return true;
    for (size_t i = 0; i < w->f.n_paths; i++) {
        char n[SW_PATH_MAX];
        normalize(w->f.paths[i], n, sizeof(n));
        if (!strcmp(p, n))
            return true;
    }
    return false;
}

void sw_routes_handle(sw_http_req_t *r, void *ctx)
{
    sw_worker_t *w = ctx;
    char p[1024];
    normalize(r->path, p, sizeof(p));
    bool post = !strcmp(r->method, "POST");
    bool known = true;
    if (!strcmp(p, "/health") || !strcmp(p, "/api/health")) {
        if (is_get(r))
            health(w, r);
        else
            known = false;
    } else if (!strcmp(p, "/ready")) {
        if (is_get(r))
            sw_respond_json(r, w->state == SW_READY ? 200 : 503, NULL, "{\"ready\": %s}",
                            w->state == SW_READY ? "true" : "false");
        else
            known = false;
    } else if (is_generate_path(w, p)) {
        if (post)
            sw_jobs_submit(w, r, 0);
        else
            known = false;
    } else if (!strcmp(p, "/v1/chat/completions")) {
        if (post)
            sw_jobs_submit(w, r, 1);
        else
            known = false;
    } else if (!strcmp(p, "/v1/models")) {
        if (is_get(r))
            models(w, r);
        else
            known = false;
    } else if (!strcmp(p, "/unload_models") || !strcmp(p, "/sleep") || !strcmp(p, "/release_memory_occupation")) {
        if (post) {
            log_hook(w, r, p);
            unload(w, r, strcmp(p, "/unload_models") != 0);
        } else {
            known = false;
        }
    } else if (!strcmp(p, "/reload_models") || !strcmp(p, "/wake_up") || !strcmp(p, "/resume_memory_occupation")) {
        if (post) {
            log_hook(w, r, p);
            reload(w, r, strcmp(p, "/reload_models") != 0);
        } else {
            known = false;
        }
    } else if (!strcmp(p, "/is_sleeping")) {
        if (is_get(r))
            sw_respond_json(r, 200, NULL, "{\"is_sleeping\": %s}", w->asleep ? "true" : "false");
        else
            known = false;
    } else if (!strcmp(p, "/clear_cache") || !strcmp(p, "/cleanup_gpu") || !strcmp(p, "/cleanup-memory")) {
        if (post) {
            log_hook(w, r, p);
            clear_cache(w, r);
        } else {
            known = false;
        }
    } else if (!strcmp(p, "/gpu_status") || !strcmp(p, "/status")) {
        if (is_get(r))
            gpu_status(w, r);
        else
            known = false;
    } else {
        sw_respond_json(r, 404, NULL, "{\"detail\": \"Not Found\"}");
        return;
    }
    if (!known)
        sw_respond_json(r, 405, NULL, "{\"detail\": \"Method Not Allowed\"}");
}
