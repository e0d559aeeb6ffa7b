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
 *             shows it done (path/prompt_hold.c); upgrade: [websocket] (its /ws)
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
 * degrade on, detect.body_matches the server's out-of-memory text. All but comfyui turn
 * memory.cancelled_hold off: these servers abort a request whose client connection closed
 * (vLLM's and SGLang's API servers on disconnect, llama-server's is_connection_closed,
 * Ollama's request context).
 *
 * The server's own flags and environment (cfg_preset_finish, after the model's keys;
 * cfg_preset_problems for the warnings pass):
 *   vllm      env VLLM_SERVER_DEV_MODE=1 (an inherited or own env value wins; in a
 *             container: block, added to container.env); `--gpu-memory-utilization
 *             {mem_fraction}` appended to cmd when cmd lacks the flag and memory.resident is
 *             set (vLLM preallocates that fraction of the whole card at start); a sleep tier
 *             in use (sleep and wake hooks, park_keep_alive not 0) without
 *             `--enable-sleep-mode` in cmd, or without VLLM_SERVER_DEV_MODE=1, is a warning
 *             (vLLM then answers the sleep hook 404): not appended, since sleep mode changes
 *             how vLLM allocates (its CuMemAllocator) and is the user's choice
 *   sglang    `--mem-fraction-static {mem_fraction}` likewise; `--enable-memory-saver`
 *             required (a warning) when the sleep tier is in use
 * {mem_fraction} (workers/worker_cmds.c) is the instance's reservation over its GPU's
 * total, rounded up to 2 decimals; a cmd that uses it without memory.resident is an error.
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

typedef struct preset_server {
    const char *env_key, *env_value; /* set in the worker's environment (NULL: nothing) */
    const char *fraction_flag;       /* appended as FLAG {mem_fraction} when cmd lacks it */
    const char *sleep_flag;          /* cmd needs it when the sleep tier is in use */
    const char *sleep_flag_why;      /* what the server does without it */
} preset_server_t;

typedef struct preset {
    const char *name;
    const char *health;
    preset_hook_t sleep, wake, unload;
    const char *oom_matches; /* detect.body_matches (POSIX ERE, case-insensitive) */
    preset_server_t server;
    preset_hook_t reload;
    const char *env[3][2]; /* variables set for the worker (the model's env: overrides them) */
    bool aborts_on_close;  /* the server aborts a request whose connection closed:
                            * memory.cancelled_hold off */
} preset_t;

static const preset_t presets[PRESET_COUNT] = {
    [PRESET_NONE] = {"none", NULL, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, NULL},
    [PRESET_VLLM] = {"vllm", "/health", {"/sleep?level=1", NULL}, {"/wake_up", NULL}, {NULL, NULL},
                     "out of memory",
                     {"VLLM_SERVER_DEV_MODE", "1", "--gpu-memory-utilization", "--enable-sleep-mode",
                      "vLLM cannot sleep without it (the sleep hook fails"},
                     .aborts_on_close = true},
    [PRESET_SGLANG] = {"sglang", "/health", {"/release_memory_occupation", "{}"},
                       {"/resume_memory_occupation", "{}"}, {NULL, NULL}, "out of memory",
                       {NULL, NULL, "--mem-fraction-static", "--enable-memory-saver",
                        "SGLang refuses to release memory without it (the sleep hook fails"},
                       .aborts_on_close = true},
    [PRESET_COMFYUI] = {"comfyui", "/system_stats", {NULL, NULL}, {NULL, NULL},
                        {"/free", "{\"unload_models\":true,\"free_memory\":true}"}, "out of memory"},
    [PRESET_LLAMACPP] = {"llamacpp", "/health", {NULL, NULL}, {NULL, NULL}, {NULL, NULL},
                         "out of memory|failed to allocate", .aborts_on_close = true},
    [PRESET_OLLAMA] = {"ollama", "/api/ps", {NULL, NULL}, {NULL, NULL},
                       {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":0}"},
                       "out of memory|requires more system memory",
                       {NULL, NULL, NULL, NULL, NULL},
                       {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":-1}"},
                       {{"OLLAMA_HOST", "127.0.0.1:{port}"}, {"OLLAMA_KEEP_ALIVE", "-1"},
                        {"OLLAMA_MAX_LOADED_MODELS", "1"}},
                       .aborts_on_close = true},
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

/* Append KEY=VALUE to an env list unless KEY is there already; false when out of memory. */
static bool add_env(config_kv_t **env, size_t *n, const char *key, const char *value)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*env)[i].key, key) == 0)
            return true;
    config_kv_t *grown = realloc(*env, (*n + 1) * sizeof *grown);
    if (grown == NULL)
        return false;
    *env = grown;
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return false;
    }
    grown[(*n)++] = (config_kv_t){k, v};
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
    if (ok && ps->server.env_key)
        ok = add_env(&m->env, &m->n_env, ps->server.env_key, ps->server.env_value);
    ok = ok && set_hook(&m->sleep, &ps->sleep) && set_hook(&m->wake, &ps->wake) && set_hook(&m->unload, &ps->unload) &&
         set_hook(&m->reload, &ps->reload);
    for (size_t i = 0; ok && i < sizeof ps->env / sizeof ps->env[0] && ps->env[i][0]; i++)
        ok = preset_env(m, ps->env[i][0], ps->env[i][1]);
    if (ps->aborts_on_close) { /* its memory is free again at once */
        m->memory.cancelled_hold_auto = false;
        m->memory.cancelled_hold_ms = 0;
    }
    if (p == PRESET_COMFYUI) {
        m->prompt_hold = true; /* POST /prompt answers at once; the GPU work runs later (prompt_hold.c) */
        m->upgrade |= CFG_UPGRADE_WEBSOCKET; /* its web UI and scripts follow prompts on /ws */
    }
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

/* ---------------------------------------------------------------------------------------
 * The server's flags
 */

/* Does word name flag ("--gpu-memory-utilization", "--gpu-memory-utilization=0.5", or the
 * underscore spelling, which vLLM's and SGLang's argument parsers accept too)? */
static bool is_flag(const char *word, const char *flag)
{
    size_t n = strlen(flag);
    if (strncmp(word, "--", 2) != 0 || strlen(word) < n)
        return false;
    for (size_t i = 2; i < n; i++) {
        char a = word[i] == '_' ? '-' : word[i];
        if (a != flag[i])
            return false;
    }
    return word[n] == '\0' || word[n] == '=';
}

bool cfg_words_have_flag(char *const *words, size_t n, const char *flag)
{
    for (size_t i = 0; i < n; i++)
        if (is_flag(words[i], flag))
            return true;
    return false;
}

/* llama.cpp's router mode: its load/unload hooks and its /models health check. */
static int llamacpp_router_finish(ctx_t *c, model_config_t *m, yaml_node_t *where)
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

const char *config_preset_fraction_flag(enum config_preset p)
{
    return (unsigned)p < PRESET_COUNT ? presets[p].server.fraction_flag : NULL;
}

static bool words_have(char *const *words, size_t n, const char *needle)
{
    for (size_t i = 0; i < n; i++)
        if (strstr(words[i], needle) != NULL)
            return true;
    return false;
}

/* Append two words to a list; false when out of memory. The list stays NULL-terminated. */
static bool append_words(char ***words, size_t *n, const char *a, const char *b)
{
    char **grown = realloc(*words, (*n + 3) * sizeof *grown);
    if (grown == NULL)
        return false;
    *words = grown;
    grown[*n] = strdup(a);
    grown[*n + 1] = strdup(b);
    grown[*n + 2] = NULL;
    bool ok = grown[*n] && grown[*n + 1];
    *n += 2; /* counted even when a copy failed: cfg_free_argv frees NULL fine */
    return ok;
}

int cfg_preset_finish(ctx_t *c, model_config_t *m, yaml_node_t *where)
{
    if (llamacpp_router_finish(c, m, where) != 0)
        return -1;
    bool block = m->container.set; /* before cfg_container_finish: set means a container: block */
    char ***words = block ? &m->container.command : &m->cmd;
    size_t *n = block ? &m->container.n_command : &m->n_cmd;
    const char *key = block ? "container" : "cmd";
    if (m->url == NULL && (*words != NULL || block) && words_have(*words, *n, "{mem_fraction}") &&
        m->memory.resident == 0) {
        yaml_node_t *node = cfg_model_key_node(c, m->name, where, key);
        return ydoc_fail(c, node, "{mem_fraction} is the model's memory.resident over its GPU's memory: set "
                         "memory.resident");
    }
    if (m->preset == PRESET_NONE || (unsigned)m->preset >= PRESET_COUNT)
        return 0;
    const preset_server_t *srv = &presets[m->preset].server;
    if (block && srv->env_key && !add_env(&m->container.env, &m->container.n_env, srv->env_key, srv->env_value))
        return ydoc_fail(c, where, "out of memory");
    if (srv->fraction_flag == NULL || m->url != NULL || (*words == NULL && !block) || m->memory.resident == 0 ||
        cfg_words_have_flag(*words, *n, srv->fraction_flag))
        return 0;
    if (*n + 2 > ARGV_MAX)
        return ydoc_fail(c, cfg_model_key_node(c, m->name, where, key), "too many words to append %s (at most %d)",
                         srv->fraction_flag, ARGV_MAX);
    return append_words(words, n, srv->fraction_flag, "{mem_fraction}") ? 0 : ydoc_fail(c, where, "out of memory");
}

/* The value of env KEY for the worker: its env, a container's -e, or a NAME=VALUE word in a
 * `docker run` cmd; NULL when unset. */
static const char *worker_env(const model_config_t *m, const char *key)
{
    for (size_t i = 0; i < m->n_env; i++)
        if (strcmp(m->env[i].key, key) == 0 && !m->container.set)
            return m->env[i].value ? m->env[i].value : NULL;
    for (size_t i = 0; i < m->container.n_env; i++)
        if (strcmp(m->container.env[i].key, key) == 0)
            return m->container.env[i].value;
    size_t klen = strlen(key);
    for (size_t i = 0; m->container.from_cmd && i < m->n_cmd; i++)
        if (strncmp(m->cmd[i], key, klen) == 0 && m->cmd[i][klen] == '=')
            return m->cmd[i] + klen + 1;
    return NULL;
}

size_t cfg_preset_problems(const model_config_t *m, cfg_preset_problem_t *out, size_t cap)
{
    if (m->preset == PRESET_NONE || (unsigned)m->preset >= PRESET_COUNT || m->url != NULL || m->cmd == NULL)
        return 0;
    const preset_t *ps = &presets[m->preset];
    bool sleep_tier = m->sleep.set && m->wake.set && m->park_keep_alive_ms != 0;
    size_t k = 0;
    if (sleep_tier && ps->server.sleep_flag && !cfg_words_have_flag(m->cmd, m->n_cmd, ps->server.sleep_flag) &&
        k < cap) {
        out[k].key = m->container.set && !m->container.from_cmd ? "container" : "cmd";
        snprintf(out[k].message, sizeof out[k].message, "preset %s uses the sleep tier (sleep: %s) but cmd lacks "
                 "%s: %s, and parking falls to the next tier); add %s to cmd, or set park_keep_alive: 0 to not "
                 "park", ps->name, m->sleep.path, ps->server.sleep_flag, ps->server.sleep_flag_why,
                 ps->server.sleep_flag);
        k++;
    }
    const char *dev = ps->server.env_key ? worker_env(m, ps->server.env_key) : NULL;
    if (sleep_tier && ps->server.env_key && (dev == NULL || strcmp(dev, ps->server.env_value) != 0) && k < cap) {
        out[k].key = m->container.set && !m->container.from_cmd ? "container.env" : m->container.from_cmd ? "cmd" : "env";
        snprintf(out[k].message, sizeof out[k].message, "preset %s uses the sleep tier but the worker's "
                 "environment has %s=%s: %s serves %s (and /wake_up, /is_sleeping) only with %s=%s, else 404%s",
                 ps->name, ps->server.env_key, dev ? dev : "(unset)", ps->name, m->sleep.path, ps->server.env_key, ps->server.env_value,
                 m->container.from_cmd ? " (pass -e to docker run)" : "");
        k++;
    }
    return k;
}

const char *const *config_preset_denied_paths(enum config_preset p)
{
    /* vLLM: docs/features/sleep_mode.md and the dev-mode routes of
     * vllm/entrypoints/openai/api_server.py; SGLang: python/sglang/srt/entrypoints/http_server.py;
     * llama.cpp's router: tools/server/README.md ("Router mode") */
    static const char *const vllm[] = {"/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache",
                                       "/reset_mm_cache", NULL};
    static const char *const sglang[] = {"/release_memory_occupation", "/resume_memory_occupation", NULL};
    static const char *const llamacpp[] = {"/models/load", "/models/unload", NULL}; /* router mode */
    static const char *const none[] = {NULL};
    return p == PRESET_VLLM ? vllm : p == PRESET_SGLANG ? sglang : p == PRESET_LLAMACPP ? llamacpp : none;
}
