/*
 * presets: `preset: vllm | sglang | comfyui | llamacpp | ollama` fills a model's health
 * path, route, eviction hooks (sleep/wake, or unload) and OOM detection from what each
 * server documents (docs/config.md, "Presets", gives the sources):
 *
 *   vllm      GET /health; POST /sleep?level=1 and POST /wake_up (served only with
 *             VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode)
 *   sglang    GET /health; POST /release_memory_occupation {} and
 *             POST /resume_memory_occupation {} (served with --enable-memory-saver)
 *   comfyui   GET /system_stats; POST /free {"unload_models":true,"free_memory":true} as
 *             the unload hook (it loads again by itself at the next prompt: no reload hook)
 *   llamacpp  GET /health (503 while loading); single-model (`-m FILE`): no hook (stop is its
 *             only tier); router mode (cmd with --models-dir or --models-preset, or a url:
 *             server with served_model): POST /models/unload and POST /models/load
 *             {"model":"{served_model}"} as the unload and reload hooks, GET /models (each
 *             model's status) as the health check (cfg_preset_finish)
 *   ollama    GET /api/ps (its size_vram: the model's own figure, in status); POST /api/generate {"model":"{served_model}","keep_alive":0}
 *             as the unload hook and the same with keep_alive -1 (loaded, never unloaded by
 *             Ollama itself) as the reload hook; env OLLAMA_HOST=127.0.0.1:{port},
 *             OLLAMA_KEEP_ALIVE=-1, OLLAMA_MAX_LOADED_MODELS=1 (one `ollama serve` per entry,
 *             its one model's memory measured by NVML; vramd alone decides what unloads).
 *             Several url: entries may share one server: each is then measured by its
 *             /api/ps size_vram (sched_snapshot.c, instance.c)
 * Each sets route /NAME/ (strip: the server sees its own paths) and OOM detection:
 * degrade on, detect.body_matches the server's out-of-memory text.
 *
 * Invariants: a preset is applied right after the built-in defaults, before `defaults:` and
 * the model's own keys, so any key set by hand overrides what it filled (sections overlay
 * key by key as everywhere else: `health: {interval: 1s}` keeps the preset's path). A model's
 * own `preset:` wins over one in `defaults:`; `preset: null` turns an inherited one off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_int.h"

typedef struct preset_hook {
    const char *path; /* NULL: the preset leaves this hook alone */
    const char *body;
} preset_hook_t;

typedef struct preset {
    const char *name;
    const char *health;
    preset_hook_t sleep, wake, unload;
    const char *oom_matches; /* detect.body_matches (POSIX ERE, case-insensitive) */
    preset_hook_t reload;
    const char *env[3][2]; /* variables set for the worker (the model's env: overrides them) */
} preset_t;

static const preset_t presets[PRESET_COUNT] = {
    [PRESET_NONE] = {"none", NULL, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, NULL},
    [PRESET_VLLM] = {"vllm", "/health", {"/sleep?level=1", NULL}, {"/wake_up", NULL}, {NULL, NULL},
                     "out of memory"},
    [PRESET_SGLANG] = {"sglang", "/health", {"/release_memory_occupation", "{}"},
                       {"/resume_memory_occupation", "{}"}, {NULL, NULL}, "out of memory"},
    [PRESET_COMFYUI] = {"comfyui", "/system_stats", {NULL, NULL}, {NULL, NULL},
                        {"/free", "{\"unload_models\":true,\"free_memory\":true}"}, "out of memory"},
    [PRESET_LLAMACPP] = {"llamacpp", "/health", {NULL, NULL}, {NULL, NULL}, {NULL, NULL},
                         "out of memory|failed to allocate"},
    [PRESET_OLLAMA] = {"ollama", "/api/ps", {NULL, NULL}, {NULL, NULL},
                       {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":0}"},
                       "out of memory|requires more system memory",
                       {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":-1}"},
                       {{"OLLAMA_HOST", "127.0.0.1:{port}"}, {"OLLAMA_KEEP_ALIVE", "-1"},
                        {"OLLAMA_MAX_LOADED_MODELS", "1"}}},
};

/* llama-server's router mode (tools/server/README.md, "Router mode"): one model per call of
 * POST /models/load and POST /models/unload, named by the request's "model" field. */
static const preset_hook_t llamacpp_router_unload = {"/models/unload", "{\"model\":\"{served_model}\"}"};
static const preset_hook_t llamacpp_router_load = {"/models/load", "{\"model\":\"{served_model}\"}"};

const char *config_preset_name(enum config_preset p)
{
    return (unsigned)p < PRESET_COUNT ? presets[p].name : "none";
}

static const char *const preset_names[] = {"vllm", "sglang", "comfyui", "llamacpp", "ollama", NULL};

enum config_preset cfg_preset_of(ctx_t *c, yaml_node_t *model_node)
{
    yaml_node_t *v = ydoc_find_value(c, model_node, "preset");
    if (v == NULL)
        v = ydoc_find_value(c, c->defaults_node, "preset");
    if (v == NULL || v->type != YAML_SCALAR_NODE || ydoc_is_null(v))
        return PRESET_NONE;
    for (int i = 0; preset_names[i]; i++)
        if (strcmp(ydoc_scalar_text(v), preset_names[i]) == 0)
            return (enum config_preset)(i + 1);
    return PRESET_NONE;
}

int cfg_fp_preset(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    (void)spec;
    if (ydoc_is_null(v)) {
        *(enum config_preset *)field = PRESET_NONE;
        return 0;
    }
    int choice;
    if (cfg_parse_choice(c, v, preset_names, &choice) != 0)
        return -1;
    *(enum config_preset *)field = (enum config_preset)(choice + 1);
    return 0;
}

/* Replace *field with a copy of s; false when out of memory (field unchanged). */
static bool set_str(char **field, const char *s)
{
    char *copy = s ? strdup(s) : NULL;
    if (s && !copy)
        return false;
    free(*field);
    *field = copy;
    return true;
}

static bool set_hook(config_hook_t *hook, const preset_hook_t *ph)
{
    if (ph->path == NULL)
        return true;
    hook->set = true;
    return set_str(&hook->method, "POST") && set_str(&hook->path, ph->path) && set_str(&hook->body, ph->body);
}

/* One variable of the preset's, added to the model's env (whose keys, read later, replace it). */
static bool preset_env(model_config_t *m, const char *key, const char *value)
{
    config_kv_t *env = realloc(m->env, (m->n_env + 1) * sizeof *env);
    if (env == NULL)
        return false;
    m->env = env;
    env[m->n_env].key = strdup(key);
    env[m->n_env].value = strdup(value);
    if (!env[m->n_env].key || !env[m->n_env].value) {
        free(env[m->n_env].key);
        free(env[m->n_env].value);
        return false;
    }
    m->n_env++;
    return true;
}

int cfg_apply_preset(ctx_t *c, model_config_t *m, enum config_preset p, yaml_node_t *where)
{
    m->preset = p;
    m->report = p == PRESET_OLLAMA ? MODEL_REPORT_OLLAMA_PS : MODEL_REPORT_NONE;
    if (p == PRESET_NONE || (unsigned)p >= PRESET_COUNT)
        return 0;
    const preset_t *ps = &presets[p];
    size_t n = strlen(m->name) + 3;
    char *route = malloc(n);
    if (route == NULL)
        return ydoc_fail(c, where, "out of memory");
    snprintf(route, n, "/%s/", m->name);
    free(m->route);
    m->route = route;
    bool ok = set_str(&m->health.path, ps->health);
    ok = ok && set_hook(&m->sleep, &ps->sleep) && set_hook(&m->wake, &ps->wake) && set_hook(&m->unload, &ps->unload) &&
         set_hook(&m->reload, &ps->reload);
    for (size_t i = 0; ok && i < sizeof ps->env / sizeof ps->env[0] && ps->env[i][0]; i++)
        ok = preset_env(m, ps->env[i][0], ps->env[i][1]);
    if (ok && ps->oom_matches) {
        m->degrade.set = true;
        ok = set_str(&m->degrade.detect.body_matches, ps->oom_matches);
    }
    return ok ? 0 : ydoc_fail(c, where, "out of memory");
}

/* llama-server in router mode: started with --models-dir or --models-preset (no -m), or a
 * running server (url:) named with served_model. */
static bool llamacpp_router(const model_config_t *m)
{
    if (m->cmd == NULL)
        return m->url != NULL && m->served_model != NULL;
    for (size_t i = 0; i < m->n_cmd; i++)
        if (strncmp(m->cmd[i], "--models-dir", 12) == 0 || strncmp(m->cmd[i], "--models-preset", 15) == 0)
            return true;
    return false;
}

int cfg_preset_finish(ctx_t *c, model_config_t *m, yaml_node_t *where)
{
    if (m->preset != PRESET_LLAMACPP || !llamacpp_router(m))
        return 0;
    bool ok = true;
    if (!m->unload.set)
        ok = set_hook(&m->unload, &llamacpp_router_unload);
    if (ok && !m->reload.set)
        ok = set_hook(&m->reload, &llamacpp_router_load);
    /* the health check reads GET /models (the router's own word on each model), unless the
     * path was set by hand */
    if (ok && m->health.path && strcmp(m->health.path, "/health") == 0) {
        ok = set_str(&m->health.path, "/models");
        m->report = MODEL_REPORT_LLAMACPP_MODELS;
    }
    return ok ? 0 : ydoc_fail(c, where, "out of memory");
}
