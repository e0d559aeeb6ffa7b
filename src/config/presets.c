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
 *             the unload hook (it loads again by itself at the next prompt: no reload hook);
 *             prompt_hold on: a queued prompt keeps its slot and memory until /history
 *             shows it done (path/prompt_hold.c)
 *   llamacpp  GET /health (503 while loading); no hook (stop is its only tier)
 *   ollama    GET /api/version; no hook (unloading names a model: set
 *             unload: {path: /api/generate, body: {model: NAME, keep_alive: 0}} by hand)
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
    [PRESET_OLLAMA] = {"ollama", "/api/version", {NULL, NULL}, {NULL, NULL}, {NULL, NULL},
                       "out of memory|requires more system memory"},
};

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

int cfg_apply_preset(ctx_t *c, model_config_t *m, enum config_preset p, yaml_node_t *where)
{
    m->preset = p;
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
    ok = ok && set_hook(&m->sleep, &ps->sleep) && set_hook(&m->wake, &ps->wake) && set_hook(&m->unload, &ps->unload);
    if (p == PRESET_COMFYUI)
        m->prompt_hold = true; /* POST /prompt answers at once; the GPU work runs later (prompt_hold.c) */
    if (ok && ps->oom_matches) {
        m->degrade.set = true;
        ok = set_str(&m->degrade.detect.body_matches, ps->oom_matches);
    }
    return ok ? 0 : ydoc_fail(c, where, "out of memory");
}
