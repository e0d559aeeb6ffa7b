/*
 * presets: `preset: vllm | sglang | comfyui | llamacpp | ollama` fills a model's keys from
 * what each server documents (docs/config.md, "Presets", gives the sources). The servers are
 * one table, `presets[]`: a row per server of designated fields, each behaviour a column
 * (config/presets.h says what each means). Adding a server is one row (and its test); no
 * code outside this table tests which preset a model has.
 *
 * What the columns fill (cfg_apply_preset, right after the built-in defaults): route /NAME/
 * (strip: the server sees its own paths), health.path, the sleep, wake, unload and reload
 * hooks, env, OOM detection (degrade on, detect.body_matches the server's out-of-memory
 * text), memory.cancelled_hold off where the server aborts a request whose connection closed
 * (aborts_on_close: vLLM's and SGLang's API servers on disconnect, llama-server's
 * is_connection_closed, Ollama's request context), prompt_hold and upgrade (ComfyUI), what the
 * health answer reports of the served model (report) and the streamed answers' framing.
 * Read where they are used: `denied` (path/router.c: 403 hook_path), `sleep_confirm`
 * (workers/park_sleep.c: vLLM's GET /is_sleeping after a sleep or wake), `fraction_flag`
 * (workers/worker_cmds.c), `served_model_example` and `manages_cache` (warnings.c).
 *
 * After the model's own keys (cfg_preset_finish; cfg_preset_problems for the warnings pass):
 *   - a row's `slots` (llama.cpp's -np) is the model's concurrency unless set by hand;
 *   - a row's `mode` (llama.cpp's router: `detect` says the model's config is one: a server
 *     given no model) gives its hooks where none was set by hand (with their nothing_to_do
 *     texts: the router's 400s when there is nothing to do), its health path (with what that
 *     answer reports) where the path is still the row's, and pin_model unless given;
 *   - sleep_env_key=value (vLLM's VLLM_SERVER_DEV_MODE=1) goes into a container: block's env
 *     (an inherited or own env value wins);
 *   - `fraction_flag {mem_fraction}` (vLLM's --gpu-memory-utilization, SGLang's
 *     --mem-fraction-static) is appended to cmd when cmd lacks the flag and memory.resident
 *     is set (the server preallocates that fraction of the whole card at start);
 *   - the sleep tier in use (sleep and wake hooks, park_keep_alive not 0) without
 *     `sleep_flag` in cmd (vLLM's --enable-sleep-mode, SGLang's --enable-memory-saver), or
 *     without sleep_env_key=value in the worker's environment, is a warning: the flag is not
 *     appended, since sleep mode changes how the server allocates and is the user's choice.
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
#include "config/presets.h"

/* The paths each server serves that change its GPU memory behind vramd's back (router.c
 * answers them 403 hook_path). vLLM: docs/features/sleep_mode.md and the dev-mode routes of
 * vllm/entrypoints/openai/api_server.py; SGLang: python/sglang/srt/entrypoints/http_server.py;
 * llama.cpp's router: tools/server/README.md ("Router mode"). */
static const char *const vllm_denied[] = {"/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache",
                                          "/reset_mm_cache", NULL};
static const char *const sglang_denied[] = {"/release_memory_occupation", "/resume_memory_occupation", NULL};
static const char *const llamacpp_denied[] = {"/models/load", "/models/unload", NULL};

static bool llamacpp_router(const model_config_t *m);
static unsigned llamacpp_slots(const model_config_t *m);

/* llama-server's router mode (tools/server/README.md, "Router mode"): one model per call of
 * POST /models/load and POST /models/unload, named by the request's "model" field; GET
 * /models gives each model's status. */
static const config_preset_mode_t llamacpp_router_mode = {
    .name = "router",
    .detect = llamacpp_router,
    .health = "/models",
    .report = MODEL_REPORT_LLAMACPP_MODELS,
    /* the router answers 400 when there is nothing to do: that is done */
    .unload = {"/models/unload", "{\"model\":\"{served_model}\"}", "model is not running"},
    .reload = {"/models/load", "{\"model\":\"{served_model}\"}", "model is already running"},
    .served_model_example = "qwen3-8b-q4_k_m",
    .pin_model = true, /* any "model" would make the router load it, beside vramd's book */
};

/* One row per server, in the enum's order (the enum value picks the row; the name is the
 * row's). */
static const config_preset_t presets[PRESET_COUNT] = {
    [PRESET_NONE] = {.name = "none"},
    [PRESET_VLLM] = {
        .name = "vllm",
        .health = "/health",
        .sleep = {"/sleep?level=1", NULL},
        .wake = {"/wake_up", NULL},
        .sleep_confirm = "/is_sleeping",
        .oom_matches = "out of memory",
        .sleep_env_key = "VLLM_SERVER_DEV_MODE",
        .sleep_env_value = "1",
        .fraction_flag = "--gpu-memory-utilization",
        .sleep_flag = "--enable-sleep-mode",
        .sleep_flag_why = "vLLM cannot sleep without it (the sleep hook fails",
        .aborts_on_close = true,
        .stream = STREAM_FRAMING_SSE,
        .denied = vllm_denied,
        .manages_cache = true,
    },
    [PRESET_SGLANG] = {
        .name = "sglang",
        .health = "/health",
        .sleep = {"/release_memory_occupation", "{}"},
        .wake = {"/resume_memory_occupation", "{}"},
        .oom_matches = "out of memory",
        .fraction_flag = "--mem-fraction-static",
        .sleep_flag = "--enable-memory-saver",
        .sleep_flag_why = "SGLang refuses to release memory without it (the sleep hook fails",
        .aborts_on_close = true,
        .stream = STREAM_FRAMING_SSE,
        .denied = sglang_denied,
        .manages_cache = true,
    },
    [PRESET_COMFYUI] = {
        .name = "comfyui",
        .health = "/system_stats",
        .unload = {"/free", "{\"unload_models\":true,\"free_memory\":true}"},
        .oom_matches = "out of memory",
        .prompt_hold = true,                  /* POST /prompt answers at once; the GPU work runs later */
        .upgrade = CFG_UPGRADE_WEBSOCKET,     /* its web UI and scripts follow prompts on /ws */
        .stream = STREAM_FRAMING_NONE,
        .manages_cache = true,
    },
    [PRESET_LLAMACPP] = {
        .name = "llamacpp",
        .health = "/health",
        .oom_matches = "out of memory|failed to allocate",
        .aborts_on_close = true,
        .stream = STREAM_FRAMING_SSE,
        .denied = llamacpp_denied,
        .manages_cache = true,
        .mode = &llamacpp_router_mode,
        .slots = llamacpp_slots,
    },
    [PRESET_OLLAMA] = {
        .name = "ollama",
        .health = "/api/ps",
        .unload = {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":0}"},
        .reload = {"/api/generate", "{\"model\":\"{served_model}\",\"keep_alive\":-1}"},
        .oom_matches = "out of memory|requires more system memory",
        .env = {{"OLLAMA_HOST", "127.0.0.1:{port}"}, {"OLLAMA_KEEP_ALIVE", "-1"}, {"OLLAMA_MAX_LOADED_MODELS", "1"}},
        .aborts_on_close = true,
        .report = MODEL_REPORT_OLLAMA_PS,
        .stream = STREAM_FRAMING_NDJSON,
        .served_model_example = "qwen3:8b",
        .manages_cache = true,
    },
};

const config_preset_t *config_preset(enum config_preset p)
{
    return &presets[(unsigned)p < PRESET_COUNT ? p : PRESET_NONE];
}

const config_preset_mode_t *config_preset_mode(const model_config_t *m)
{
    const config_preset_mode_t *mode = config_preset(m->preset)->mode;
    return mode && mode->detect(m) ? mode : NULL;
}

const char *config_preset_name(enum config_preset p)
{
    return config_preset(p)->name;
}

/* The preset named text: PRESET_NONE when none is. */
static enum config_preset preset_named(const char *text)
{
    for (int i = PRESET_NONE + 1; i < PRESET_COUNT; i++)
        if (strcmp(text, presets[i].name) == 0)
            return (enum config_preset)i;
    return PRESET_NONE;
}

enum config_preset cfg_preset_of(ctx_t *c, yaml_node_t *model_node)
{
    yaml_node_t *v = ydoc_find_value(c, model_node, "preset");
    if (v == NULL)
        v = ydoc_find_value(c, c->defaults_node, "preset");
    if (v == NULL || v->type != YAML_SCALAR_NODE || ydoc_is_null(v))
        return PRESET_NONE;
    return preset_named(ydoc_scalar_text(v));
}

int cfg_fp_preset(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    (void)spec;
    if (ydoc_is_null(v)) {
        *(enum config_preset *)field = PRESET_NONE;
        return 0;
    }
    const char *names[PRESET_COUNT]; /* the rows' names, for the choice's message */
    for (int i = PRESET_NONE + 1; i < PRESET_COUNT; i++)
        names[i - 1] = presets[i].name;
    names[PRESET_COUNT - 1] = NULL;
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
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

static bool set_hook(config_hook_t *hook, const config_preset_hook_t *ph)
{
    if (ph->path == NULL)
        return true;
    hook->set = true;
    return set_str(&hook->method, "POST") && set_str(&hook->path, ph->path) && set_str(&hook->body, ph->body) &&
           set_str(&hook->nothing_to_do, ph->nothing_to_do);
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
    const config_preset_t *ps = config_preset(p);
    m->preset = ps == config_preset(PRESET_NONE) ? PRESET_NONE : p;
    m->report = ps->report;
    m->stream_framing = ps->stream;
    if (m->preset == PRESET_NONE)
        return 0;
    size_t n = strlen(m->name) + 3;
    char *route = malloc(n);
    if (route == NULL)
        return ydoc_fail(c, where, "out of memory");
    snprintf(route, n, "/%s/", m->name);
    free(m->route);
    m->route = route;
    bool ok = set_str(&m->health.path, ps->health);
    if (ok && ps->sleep_env_key)
        ok = add_env(&m->env, &m->n_env, ps->sleep_env_key, ps->sleep_env_value);
    ok = ok && set_hook(&m->sleep, &ps->sleep) && set_hook(&m->wake, &ps->wake) && set_hook(&m->unload, &ps->unload) &&
         set_hook(&m->reload, &ps->reload);
    for (size_t i = 0; ok && i < sizeof ps->env / sizeof ps->env[0] && ps->env[i][0]; i++)
        ok = preset_env(m, ps->env[i][0], ps->env[i][1]);
    if (ps->aborts_on_close) { /* its memory is free again at once */
        m->memory.cancelled_hold_auto = false;
        m->memory.cancelled_hold_ms = 0;
    }
    if (ps->prompt_hold)
        m->prompt_hold = true;
    m->upgrade |= ps->upgrade;
    if (ok && ps->oom_matches) {
        m->degrade.set = true;
        ok = set_str(&m->degrade.detect.body_matches, ps->oom_matches);
    }
    return ok ? 0 : ydoc_fail(c, where, "out of memory");
}

/* ---------------------------------------------------------------------------------------
 * llama.cpp's llama-server: which shape its command line gives (tools/server/README.md and
 * `llama-server --help` of build 10587: a server given no model is a router, whatever else
 * its flags say) and how many slots it runs.
 */

/* The words a worker runs: cmd, else a container: block's command. */
static char *const *worker_words(const model_config_t *m, size_t *n)
{
    *n = m->cmd ? m->n_cmd : m->container.n_command;
    return m->cmd ? m->cmd : m->container.command;
}

/* The value of env KEY given to the worker (its env:, a container: block's env); NULL: none. */
static const char *given_env(const model_config_t *m, const char *key)
{
    for (size_t i = 0; i < m->n_env; i++)
        if (strcmp(m->env[i].key, key) == 0)
            return m->env[i].value;
    for (size_t i = 0; i < m->container.n_env; i++)
        if (strcmp(m->container.env[i].key, key) == 0)
            return m->container.env[i].value;
    return NULL;
}

/* Whether the blank-separated token tok (len bytes) is one of names, or NAME=VALUE; a value
 * after '=' is copied into val. 1: NAME alone (its value is the next token), 2: NAME=VALUE,
 * 0: neither. */
static int flag_token(const char *tok, size_t len, const char *const *names, char *val, size_t cap)
{
    for (size_t k = 0; names[k]; k++) {
        size_t nl = strlen(names[k]);
        if (len == nl && strncmp(tok, names[k], nl) == 0)
            return 1;
        if (len > nl && strncmp(tok, names[k], nl) == 0 && tok[nl] == '=') {
            snprintf(val, cap, "%.*s", (int)(len - nl - 1), tok + nl + 1);
            return 2;
        }
    }
    return 0;
}

/* Find a flag (one of names: "-np", "--parallel", also as "--parallel=V") among the words,
 * each word split at blanks (`sh -c "exec llama-server -m F"` is one word); its value copied
 * into val (empty when it has none). */
static bool find_flag(const model_config_t *m, const char *const *names, char *val, size_t cap)
{
    size_t n;
    char *const *words = worker_words(m, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        for (const char *w = words[i] + strspn(words[i], " \t\n"); *w; w += strspn(w, " \t\n")) {
            size_t len = strcspn(w, " \t\n");
            if (found) {
                snprintf(val, cap, "%.*s", (int)len, w);
                return true;
            }
            int kind = flag_token(w, len, names, val, cap);
            if (kind == 2)
                return true;
            found = kind == 1;
            val[0] = '\0';
            w += len;
        }
    }
    return found; /* the flag last, without its value */
}

/* llama-server in router mode: its command names no model (-m, --model, -hf, -mu, -dr, or
 * their LLAMA_ARG_* variables in its env), with or without --models-dir or --models-preset;
 * or a running server (url:) named with served_model. */
static bool llamacpp_router(const model_config_t *m)
{
    size_t n;
    if (worker_words(m, &n) == NULL)
        return m->url != NULL && m->served_model != NULL;
    static const char *const model_flags[] = {"-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo",
                                              "-dr", "--docker-repo", NULL};
    static const char *const model_env[] = {"LLAMA_ARG_MODEL", "LLAMA_ARG_MODEL_URL", "LLAMA_ARG_HF_REPO",
                                            "LLAMA_ARG_DOCKER_REPO"};
    char val[8];
    if (find_flag(m, model_flags, val, sizeof val))
        return false;
    for (size_t i = 0; i < sizeof model_env / sizeof model_env[0]; i++)
        if (given_env(m, model_env[i]))
            return false;
    return true;
}

/* llama-server's slots: -np N / --parallel N (or LLAMA_ARG_N_PARALLEL); not given, or -1
 * (auto): 4, what build 10587 takes ("n_slots = 4" in its log). A router gives its flags to
 * each model's server. 0: not known (url:, or not a number: the model's concurrency is left
 * as it is). */
static unsigned llamacpp_slots(const model_config_t *m)
{
    size_t n;
    if (worker_words(m, &n) == NULL)
        return 0; /* a running server (url:): its slots are its own (GET /props total_slots) */
    static const char *const flags[] = {"-np", "--parallel", NULL};
    char val[24] = "";
    const char *v = find_flag(m, flags, val, sizeof val) ? val : given_env(m, "LLAMA_ARG_N_PARALLEL");
    if (v == NULL || strcmp(v, "-1") == 0)
        return 4;
    char *end;
    long k = strtol(v, &end, 10);
    return *v && *end == '\0' && k >= 1 && k <= 1024 ? (unsigned)k : 0;
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

/* Whether key was given for this model by hand (in its own mapping or in `defaults:`). */
static bool given(ctx_t *c, yaml_node_t *where, const char *key)
{
    return ydoc_find_value(c, where, key) != NULL || ydoc_find_value(c, c->defaults_node, key) != NULL;
}

/* What the model's config says of its server, after its own keys: the server's slots as its
 * concurrency, unless set by hand; the preset's other mode (llama.cpp's router), when the
 * config is it: its hooks where none was set by hand, its health check (with what that
 * answer reports) where the path is still the preset's, pin_model unless given. */
static int mode_finish(ctx_t *c, model_config_t *m, yaml_node_t *where)
{
    const config_preset_t *ps = config_preset(m->preset);
    unsigned slots = ps->slots ? ps->slots(m) : 0;
    if (slots > 0 && !given(c, where, "concurrency"))
        m->concurrency = slots;
    const config_preset_mode_t *mode = config_preset_mode(m);
    if (mode == NULL)
        return 0;
    if (mode->pin_model && !given(c, where, "pin_model"))
        m->pin_model = true;
    bool ok = true;
    if (!m->unload.set)
        ok = set_hook(&m->unload, &mode->unload);
    if (ok && !m->reload.set)
        ok = set_hook(&m->reload, &mode->reload);
    const char *row_health = ps->health;
    if (ok && mode->health && m->health.path && row_health && strcmp(m->health.path, row_health) == 0) {
        ok = set_str(&m->health.path, mode->health);
        m->report = mode->report;
    }
    return ok ? 0 : ydoc_fail(c, where, "out of memory");
}

const char *config_preset_fraction_flag(enum config_preset p)
{
    return config_preset(p)->fraction_flag;
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
    if (mode_finish(c, m, where) != 0)
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
    const config_preset_t *srv = config_preset(m->preset);
    if (block && srv->sleep_env_key &&
        !add_env(&m->container.env, &m->container.n_env, srv->sleep_env_key, srv->sleep_env_value))
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
    if (m->url != NULL || m->cmd == NULL)
        return 0;
    const config_preset_t *ps = config_preset(m->preset);
    bool sleep_tier = m->sleep.set && m->wake.set && m->park_keep_alive_ms != 0;
    size_t k = 0;
    if (sleep_tier && ps->sleep_flag && !cfg_words_have_flag(m->cmd, m->n_cmd, ps->sleep_flag) &&
        k < cap) {
        out[k].key = m->container.set && !m->container.from_cmd ? "container" : "cmd";
        snprintf(out[k].message, sizeof out[k].message, "preset %s uses the sleep tier (sleep: %s) but cmd lacks "
                 "%s: %s, and parking falls to the next tier); add %s to cmd, or set park_keep_alive: 0 to not "
                 "park", ps->name, m->sleep.path, ps->sleep_flag, ps->sleep_flag_why,
                 ps->sleep_flag);
        k++;
    }
    const char *dev = ps->sleep_env_key ? worker_env(m, ps->sleep_env_key) : NULL;
    if (sleep_tier && ps->sleep_env_key && (dev == NULL || strcmp(dev, ps->sleep_env_value) != 0) && k < cap) {
        out[k].key = m->container.set && !m->container.from_cmd ? "container.env" : m->container.from_cmd ? "cmd" : "env";
        snprintf(out[k].message, sizeof out[k].message, "preset %s uses the sleep tier but the worker's "
                 "environment has %s=%s: %s serves %s (and /wake_up, /is_sleeping) only with %s=%s, else 404%s",
                 ps->name, ps->sleep_env_key, dev ? dev : "(unset)", ps->name, m->sleep.path, ps->sleep_env_key, ps->sleep_env_value,
                 m->container.from_cmd ? " (pass -e to docker run)" : "");
        k++;
    }
    return k;
}

const char *const *config_preset_denied_paths(enum config_preset p)
{
    static const char *const none[] = {NULL};
    const char *const *d = config_preset(p)->denied;
    return d ? d : none;
}
