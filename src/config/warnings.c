/*
 * warnings: the warnings pass over a config that parsed and passed every check: mistakes
 * that are legal YAML and legal values but cost a user time (a program that is not there,
 * "python3 serve.py" as one word of cmd, no {port}, a model with no memory: section, a
 * pinned model with unload/sleep hooks, a large per_request without a clear_cache hook, bare
 * numbers that mean something else than the writer thought, a preset's server flags missing:
 * presets.c's cfg_preset_problems).
 *
 * Invariants: a warning never refuses a config (`--check-config --strict` does, in
 * daemon/main.c and cli/); each names the file:line:col and key path of the value it is
 * about (the model's own mapping, else `defaults:`), like errors do, and its model (NULL
 * for a top-level key, the first model for a value in `defaults:`, reported once); at
 * most WARNINGS_MAX are kept; the pass runs while the YAML document is alive and only
 * reads it (and the file system: stat, access); it fails (-1 after ydoc_fail) only when
 * out of memory.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/units.h"
#include "config/config_int.h"
#include "config/presets.h"

#define WARNINGS_MAX 256
#define BARE_DURATION_WARN 1000ULL /* a bare number of seconds this large was likely meant as ms */
#define BARE_SIZE_WARN (1ULL << 20) /* a bare number of bytes below this was likely meant as MiB */
#define CACHE_WARN_PER_REQUEST (1ULL << 30) /* per_request this large, kept cached, blocks others */

/* Records one warning at node (the key path is c->path); -1 only when out of memory. */
static int add_warning(ctx_t *c, config_t *cfg, const char *model, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int add_warning(ctx_t *c, config_t *cfg, const char *model, const yaml_node_t *node, const char *fmt, ...)
{
    if (cfg->n_warnings >= WARNINGS_MAX)
        return 0;
    if (cfg->n_warnings == 0 && (cfg->warnings = calloc(WARNINGS_MAX, sizeof *cfg->warnings)) == NULL)
        return ydoc_fail(c, node, "out of memory");
    char message[600], where[300], text[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    snprintf(where, sizeof where, "%s:%zu:%zu", c->name, node ? node->start_mark.line + 1 : 1,
             node ? node->start_mark.column + 1 : 1);
    snprintf(text, sizeof text, "%s: warning: %s: %s", where, c->path, message);
    for (size_t i = 0; i < cfg->n_warnings; i++)
        if (strcmp(cfg->warnings[i].text, text) == 0)
            return 0; /* a value in defaults: is reported once, not once per model */
    config_warning_t *w = &cfg->warnings[cfg->n_warnings];
    w->model = model ? strdup(model) : NULL;
    w->key = strdup(c->path);
    w->message = strdup(message);
    w->where = strdup(where);
    w->text = strdup(text);
    cfg->n_warnings++; /* counted first, so that cfg_config_free frees a partial one */
    if ((model && !w->model) || !w->key || !w->message || !w->where || !w->text)
        return ydoc_fail(c, node, "out of memory");
    return 0;
}

/* Is path an executable regular file? */
static bool is_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Where program would be run from: found (and executable) in PATH, or relative to cwd. */
static const char *program_problem(const char *program, const char *cwd, char *why, size_t cap)
{
    char full[4096];
    if (strchr(program, '/') != NULL) {
        if (program[0] != '/' && cwd != NULL)
            snprintf(full, sizeof full, "%s/%s", cwd, program);
        else
            snprintf(full, sizeof full, "%s", program);
        struct stat st;
        if (stat(full, &st) != 0)
            snprintf(why, cap, "program %s not found%s", full,
                     program[0] != '/' && cwd == NULL ? " (relative to vramd's working directory; set cwd:)" : "");
        else if (!is_executable(full))
            snprintf(why, cap, "program %s is not an executable file", full);
        else
            return NULL;
        return why;
    }
    const char *path = getenv("PATH");
    bool seen = false;
    for (const char *p = path ? path : "/usr/bin:/bin"; p != NULL;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(full, sizeof full, "%.*s/%s", (int)len, len ? p : ".", program);
        if (is_executable(full))
            return NULL;
        struct stat st;
        if (stat(full, &st) == 0)
            seen = true;
        p = colon ? colon + 1 : NULL;
    }
    snprintf(why, cap, seen ? "program \"%s\" is in PATH but not executable" : "program \"%s\" not found in PATH",
             program);
    return why;
}

/* A word of cmd that holds a whole command line: "python3 serve.py" (not an option's value
 * like --prompt "a cat", nor the script of sh -c). */
static bool looks_like_command_line(char **cmd, size_t i)
{
    const char *word = cmd[i];
    const char *space = strchr(word, ' ');
    if (space == NULL || space == word)
        return false;
    if (i == 0)
        return true;
    if (cmd[i - 1][0] == '-')
        return false;
    char first[256], why[300];
    snprintf(first, sizeof first, "%.*s", (int)(space - word), word);
    size_t n = strlen(first);
    if (n > 3 && (strcmp(first + n - 3, ".py") == 0 || strcmp(first + n - 3, ".sh") == 0))
        return true;
    return strchr(first, '/') == NULL && program_problem(first, NULL, why, sizeof why) == NULL;
}

static bool has_port(const model_config_t *m)
{
    for (size_t i = 0; i < m->n_cmd; i++)
        if (strstr(m->cmd[i], "{port}") != NULL)
            return true;
    for (size_t i = 0; i < m->n_env; i++)
        if (m->env[i].value != NULL && strstr(m->env[i].value, "{port}") != NULL)
            return true;
    return false;
}

/* cmd: the program, a word holding a command line, {port}. */
static int warn_cmd(ctx_t *c, config_t *cfg, const model_config_t *m, yaml_node_t *where)
{
    if (m->cmd == NULL || m->url != NULL)
        return 0;
    const char *key = m->container.set && !m->container.from_cmd ? "container" : "cmd";
    char why[700];
    yaml_node_t *node = cfg_model_key_node(c, m->name, where, key);
    if (!looks_like_command_line(m->cmd, 0) && program_problem(m->cmd[0], m->cwd, why, sizeof why) != NULL &&
        add_warning(c, cfg, m->name, node, "%s: the worker would fail to start", why) != 0)
        return -1;
    for (size_t i = 0; i < m->n_cmd; i++) {
        if (!looks_like_command_line(m->cmd, i))
            continue;
        yaml_node_t *item = node;
        size_t saved = c->path_len;
        if (node->type == YAML_SEQUENCE_NODE && i < ydoc_sequence_size(node)) {
            item = ydoc_sequence_item(c, node, i);
            ydoc_path_push_index(c, i);
        }
        int rc = add_warning(c, cfg, m->name, item, "\"%s\" is one word holding a command line: cmd is a list "
                             "of words, one per argument (like [python3, serve.py]); no shell splits it", m->cmd[i]);
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    if (!has_port(m) && add_warning(c, cfg, m->name, node, "no {port} in cmd or env: vramd chooses the worker's "
                                    "port and sets $PORT to it; the worker must listen there (use {port}, or "
                                    "read $PORT)") != 0)
        return -1;
    return 0;
}

/* The YAML value at section.key under the model (or defaults), with the path set; NULL if unset. */
static yaml_node_t *set_value(ctx_t *c, const char *model, yaml_node_t *where, const char *section, const char *key)
{
    const char *top = section ? section : key;
    if (ydoc_find_value(c, where, top) == NULL && ydoc_find_value(c, c->defaults_node, top) == NULL)
        return NULL;
    yaml_node_t *n = cfg_model_key_node(c, model, where, top);
    if (section == NULL)
        return n;
    n = n->type == YAML_MAPPING_NODE ? ydoc_find_value(c, n, key) : NULL;
    if (n != NULL)
        ydoc_path_append(c, ".%s", key);
    return n;
}

static bool is_bare_number(const yaml_node_t *n)
{
    if (n == NULL || !ydoc_is_plain(n) || n->data.scalar.length == 0)
        return false;
    const char *s = ydoc_scalar_text(n);
    for (; *s; s++)
        if ((*s < '0' || *s > '9') && *s != '.')
            return false;
    return true;
}

/* Sizes of GPU memory written as a bare number below 1 MiB, durations as a bare number of
 * seconds of 1000 or more (written as if in milliseconds). */
static int warn_bare_numbers(ctx_t *c, config_t *cfg, const model_config_t *m, yaml_node_t *where)
{
    static const struct {
        const char *section, *key;
        bool size;
    } keys[] = {{"memory", "resident", true},   {"memory", "per_request", true}, {"recycle", "max_growth", true},
                {NULL, "deadline", false},      {NULL, "keep_alive", false},     {NULL, "startup_timeout", false},
                {NULL, "stop_timeout", false},  {NULL, "response_timeout", false}, {NULL, "max_client_deadline", false},
                {NULL, "park_keep_alive", false}, {"health", "interval", false}, {"health", "timeout", false},
                {"recycle", "hang_timeout", false}, {NULL, "total_deadline", false},
                {NULL, "max_wait", false}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        yaml_node_t *n = set_value(c, m->name, where, keys[i].section, keys[i].key);
        if (!is_bare_number(n))
            continue;
        uint64_t v = 0;
        char readable[48];
        int rc = 0;
        if (keys[i].size && units_parse_size(ydoc_scalar_text(n), &v) == 0 && v > 0 && v < BARE_SIZE_WARN)
            rc = add_warning(c, cfg, m->name, n, "a bare number is bytes: %llu is %llu bytes; write a unit "
                             "(like %lluMiB) if more was meant", (unsigned long long)v, (unsigned long long)v,
                             (unsigned long long)v);
        else if (!keys[i].size && units_parse_duration_ms(ydoc_scalar_text(n), &v) == 0 &&
                 v >= BARE_DURATION_WARN * 1000 && v != CONFIG_FOREVER) {
            units_format_duration(v, readable, sizeof readable);
            char hours[32] = "";
            if (v >= 3600ULL * 1000)
                snprintf(hours, sizeof hours, " (%.1f hours)", (double)v / 3600000.0);
            rc = add_warning(c, cfg, m->name, n, "a bare number is seconds: %s is %s%s; write %sms if milliseconds "
                             "were meant, or a unit (like %s) to say so", ydoc_scalar_text(n), readable, hours,
                             ydoc_scalar_text(n), readable);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Whether the load or unload hook names the served model ({served_model} in its body). */
static bool hooks_name_served_model(const model_config_t *m)
{
    const config_hook_t *hooks[] = {&m->unload, &m->reload};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
        if (hooks[i]->set && hooks[i]->body && strstr(hooks[i]->body, "{served_model}"))
            return true;
    return false;
}

static int warn_model(ctx_t *c, config_t *cfg, const model_config_t *m, yaml_node_t *where)
{
    if (warn_cmd(c, cfg, m, where) != 0)
        return -1;
    if (m->memory.resident == 0 && m->memory.per_request == 0 && !m->memory.learn) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", m->name);
        yaml_node_t *n = ydoc_find_value(c, where, "memory");
        if (n != NULL)
            ydoc_path_append(c, ".memory");
        const char *flag = config_preset_fraction_flag(m->preset);
        if (add_warning(c, cfg, m->name, n ? n : where, "not memory-gated: no memory.resident nor "
                        "memory.per_request, so its requests are admitted without reserving GPU memory%s%s%s",
                        flag ? " (and preset " : "", flag ? config_preset_name(m->preset) : "",
                        flag ? " takes the fraction of the card its cmd gives, by default most of it: set "
                               "memory.resident and the fraction follows)" : "") != 0)
            return -1;
    }
    cfg_preset_problem_t problems[4];
    size_t n_problems = cfg_preset_problems(m, problems, 4);
    for (size_t i = 0; i < n_problems; i++) {
        const char *key = problems[i].key;
        char top[32];
        snprintf(top, sizeof top, "%.*s", (int)strcspn(key, "."), key);
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, top);
        if (strchr(key, '.') != NULL && n->type == YAML_MAPPING_NODE) {
            yaml_node_t *sub = ydoc_find_value(c, n, strchr(key, '.') + 1);
            if (sub != NULL) {
                ydoc_path_append(c, "%s", strchr(key, '.'));
                n = sub;
            }
        }
        if (add_warning(c, cfg, m->name, n, "%s", problems[i].message) != 0)
            return -1;
    }
    if (m->shim_park && m->cuda_shim == CUDA_SHIM_OFF) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, "shim_park");
        if (add_warning(c, cfg, m->name, n, "shim_park needs the CUDA shim in the worker: with cuda_shim: off "
                        "the tier is never used; set cuda_shim: auto") != 0)
            return -1;
    }
    if (m->keep_alive_ms == CONFIG_FOREVER && (m->unload.set || m->sleep.set)) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, "keep_alive");
        if (add_warning(c, cfg, m->name, n, "keep_alive: forever pins the model (never evicted), so its %s "
                        "hook%s never used", m->unload.set && m->sleep.set ? "unload and sleep" :
                        m->unload.set ? "unload" : "sleep", m->unload.set && m->sleep.set ? "s are" : " is") != 0)
            return -1;
    }
    const config_preset_t *ps = config_preset(m->preset);
    const config_preset_mode_t *mode = config_preset_mode(m);
    const char *example = mode && mode->served_model_example ? mode->served_model_example : ps->served_model_example;
    if (example && hooks_name_served_model(m) && m->served_model == NULL) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", m->name);
        if (add_warning(c, cfg, m->name, where, "preset %s without served_model: vramd names this model \"%s\" "
                        "to the server (the \"model\" of its load and unload calls); set served_model to the "
                        "name the server knows it by (like %s)", ps->name, m->name, example) != 0)
            return -1;
    }
    /* a preset's server handles its own cache (vLLM and SGLang preallocate a fixed pool,
     * llama.cpp and Ollama have no caching allocator, ComfyUI empties it after prompts) */
    if (m->memory.per_request >= CACHE_WARN_PER_REQUEST && !m->clear_cache.set && !ps->manages_cache) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, "memory");
        char size[32];
        units_format_size(m->memory.per_request, size, sizeof size);
        if (add_warning(c, cfg, m->name, n, "memory.per_request is %s and there is no clear_cache hook: a PyTorch "
                        "server keeps a finished request's memory in its cache, so NVML shows it used and vramd "
                        "cannot take it back for another model short of stopping or parking this one; add "
                        "clear_cache: {path: ...} calling torch.cuda.empty_cache()", size) != 0)
            return -1;
    }
    return warn_bare_numbers(c, cfg, m, where);
}

int cfg_collect_warnings(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    yaml_node_t *models = c->models_node;
    for (size_t i = 0; i < cfg->n_models; i++) {
        yaml_node_t *where = ydoc_find_value(c, models, cfg->models[i].name);
        if (where == NULL || ydoc_is_null(where))
            where = root; /* a model written as `name:` alone: point at the top */
        if (warn_model(c, cfg, &cfg->models[i], where) != 0)
            return -1;
    }
    ydoc_path_reset(c);
    yaml_node_t *headroom = ydoc_find_value(c, ydoc_find_value(c, root, "gpu"), "headroom");
    uint64_t v = 0;
    if (is_bare_number(headroom) && units_parse_size(ydoc_scalar_text(headroom), &v) == 0 && v > 0 &&
        v < BARE_SIZE_WARN) {
        ydoc_path_append(c, "gpu.headroom");
        if (add_warning(c, cfg, NULL, headroom, "a bare number is bytes: %llu is %llu bytes; write a unit (like "
                        "%lluMiB) if more was meant", (unsigned long long)v, (unsigned long long)v,
                        (unsigned long long)v) != 0)
            return -1;
    }
    ydoc_path_reset(c);
    return 0;
}
