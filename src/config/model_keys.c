/*
 * model_keys: the keys of a model (route, aliases, cmd, env, cwd, url (container and
 * stop_cmd come from container_keys.c), health, timeouts,
 * gpus, memory, concurrency, queue, deadline (and total_deadline), priority, keep_alive, hooks, recycle,
 * checkpoint, park_keep_alive; the quality keys degrade, validate and retry come from quality_keys.c,
 * preset from presets.c, max_wait and evicts from turn_keys.c), the model table, and
 * cfg_parse_models(), which builds every model: built-in defaults, then its preset
 * (presets.c), then `defaults:`, then the model's own mapping, then the per-model and
 * cross-model checks (check.c). An entry with `alias_of:` is no model: it goes to
 * config->alias_ofs (turn_keys.c) and shares only the namespace of names, aliases and routes.
 *
 * Invariants: lists (cmd, aliases, gpus) are replaced whole and env overlays per
 * variable (a null value is kept as {name, NULL}: the worker must not inherit it); null
 * removes an optional setting; a route is normalised to "/a/b/"; a url is plain http with
 * no path; every list is bounded (ARGV_MAX, ALIASES_MAX, ENV_MAX, GPUS_MAX, MODELS_MAX);
 * on error the model stays freeable (cfg_model_free).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json_util.h"
#include "common/units.h"
#include "config/config_int.h"

static int fp_model_cmd(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v)) {
        cfg_free_argv(m->cmd, m->n_cmd);
        m->cmd = NULL;
        m->n_cmd = 0;
        return 0;
    }
    return cfg_parse_argv(c, v, &m->cmd, &m->n_cmd);
}

static int fp_aliases(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    return cfg_parse_aliases(c, v, &m->aliases, &m->n_aliases);
}

static bool env_name_ok(const char *s)
{
    if (!(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

/* env overlays key by key; a null value removes an inherited variable (kept as {name, NULL}). */
static int fp_env(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v)) {
        for (size_t i = 0; i < m->n_env; i++) {
            free(m->env[i].key);
            free(m->env[i].value);
        }
        free(m->env);
        m->env = NULL;
        m->n_env = 0;
        return 0;
    }
    if (ydoc_need_mapping(c, v, "a mapping of variable names to values") != 0 || ydoc_check_mapping(c, v) != 0)
        return -1;
    for (size_t i = 0; i < ydoc_mapping_size(v); i++) {
        yaml_node_t *k = ydoc_pair_key(c, v, i), *val = ydoc_pair_value(c, v, i);
        const char *key = ydoc_scalar_text(k);
        size_t saved = ydoc_path_push_key(c, key);
        int rc = 0;
        if (!env_name_ok(key))
            rc = ydoc_fail(c, k, "an environment variable name is letters, digits and _, not starting with a digit");
        size_t at = m->n_env;
        for (size_t e = 0; e < m->n_env; e++)
            if (strcmp(m->env[e].key, key) == 0)
                at = e;
        bool unset = rc == 0 && ydoc_is_null(val); /* kept with a NULL value: the worker must not inherit it */
        if (rc == 0 && (unset || ydoc_need_scalar(c, val, "a string") == 0)) {
            char *value = unset ? NULL : ydoc_dup_or_fail(c, val, ydoc_scalar_text(val));
            if (value == NULL && !unset) {
                rc = -1;
            } else if (at < m->n_env) {
                free(m->env[at].value);
                m->env[at].value = value;
            } else if (m->n_env >= ENV_MAX) {
                free(value);
                rc = ydoc_fail(c, k, "too many environment variables (at most %d)", ENV_MAX);
            } else {
                config_kv_t *grown = realloc(m->env, (m->n_env + 1) * sizeof *grown);
                char *name = strdup(key);
                if (grown != NULL)
                    m->env = grown;
                if (grown == NULL || name == NULL) {
                    free(value);
                    free(name);
                    rc = ydoc_fail(c, k, "out of memory");
                } else {
                    m->env[m->n_env++] = (config_kv_t){name, value};
                }
            }
        } else {
            rc = -1;
        }
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static bool hostname_ok(const char *s, size_t len)
{
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-' || s[i] == '_'))
            return false;
    return true;
}

/* "host:port" or "[v6]:port" (port required when required_port) -> host without brackets, port. */
int cfg_split_host_port(const char *s, bool port_required, int default_port, char *host, size_t host_cap,
                           int *port)
{
    const char *host_start = s, *host_end;
    const char *after;
    if (*s == '[') {
        host_start = s + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL)
            return -1;
        after = host_end + 1;
        size_t hlen = (size_t)(host_end - host_start);
        if (hlen == 0 || hlen >= host_cap)
            return -1;
        memcpy(host, host_start, hlen);
        host[hlen] = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, host, &a6) != 1)
            return -1;
    } else {
        host_end = strchr(s, ':');
        if (host_end == NULL)
            host_end = s + strlen(s);
        after = host_end;
        size_t hlen = (size_t)(host_end - host_start);
        if (hlen >= host_cap || !hostname_ok(host_start, hlen))
            return -1;
        memcpy(host, host_start, hlen);
        host[hlen] = '\0';
    }
    if (*after == '\0') {
        if (port_required)
            return -1;
        *port = default_port;
        return 0;
    }
    if (*after != ':' || after[1] == '\0' || strlen(after + 1) > 5)
        return -1;
    long value = 0;
    for (const char *p = after + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        value = value * 10 + (*p - '0');
    }
    if (value < 1 || value > 65535)
        return -1;
    *port = (int)value;
    return 0;
}

/* url: http://host[:port][/] -> url (without the slash), url_host, url_port. */
/* served_model: 1..128 of A-Z a-z 0-9 . _ - : / @ (Ollama's namespace/model:tag, a router
 * model's name), so it goes into a JSON hook body as it is; null = the entry's name. */
static int fp_served_model(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (!ydoc_is_null(v)) {
        if (ydoc_need_scalar(c, v, "a model name") != 0)
            return -1;
        const char *s = ydoc_scalar_text(v);
        size_t n = strlen(s);
        if (n == 0 || n > 128 || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:/@") != n)
            return ydoc_fail(c, v, "a served model name is 1 to 128 of A-Z a-z 0-9 . _ - : / @, got \"%s\"", s);
    }
    return cfg_fp_string_opt(c, v, field, spec);
}

static int fp_url(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v)) {
        free(m->url);
        free(m->url_host);
        m->url = m->url_host = NULL;
        m->url_port = 0;
        return 0;
    }
    if (ydoc_need_scalar(c, v, "a URL like http://127.0.0.1:10006") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    char d[DESCRIBE_MAX];
    if (strncasecmp(s, "https://", 8) == 0)
        return ydoc_fail(c, v, "https is not supported (vramd talks plain HTTP to its workers), got %s",
                         ydoc_describe(v, d, sizeof d));
    if (strncasecmp(s, "http://", 7) != 0)
        return ydoc_fail(c, v, "expected a URL like http://127.0.0.1:10006, got %s", ydoc_describe(v, d, sizeof d));
    const char *authority = s + 7;
    const char *slash = strchr(authority, '/');
    if (slash != NULL && strcmp(slash, "/") != 0)
        return ydoc_fail(c, v, "a URL may not have a path (routes are per request), got %s",
                         ydoc_describe(v, d, sizeof d));
    size_t alen = slash ? (size_t)(slash - authority) : strlen(authority);
    char auth[300], host[300];
    int port = 0;
    if (alen == 0 || alen >= sizeof auth)
        return ydoc_fail(c, v, "expected a URL like http://127.0.0.1:10006, got %s", ydoc_describe(v, d, sizeof d));
    memcpy(auth, authority, alen);
    auth[alen] = '\0';
    if (cfg_split_host_port(auth, false, 80, host, sizeof host, &port) != 0)
        return ydoc_fail(c, v, "expected a URL like http://127.0.0.1:10006, got %s", ydoc_describe(v, d, sizeof d));
    char *url = malloc(7 + alen + 1);
    char *url_host = strdup(host);
    if (url == NULL || url_host == NULL) {
        free(url);
        free(url_host);
        return ydoc_fail(c, v, "out of memory");
    }
    memcpy(url, "http://", 7);
    memcpy(url + 7, auth, alen + 1);
    free(m->url);
    free(m->url_host);
    m->url = url;
    m->url_host = url_host;
    m->url_port = port;
    return 0;
}

/* A list of distinct non-negative integers (GPU indexes) of at least one entry. */
static int parse_index_list(ctx_t *c, yaml_node_t *v, const char *what, int **out, size_t *n_out)
{
    if (ydoc_need_sequence(c, v, what, 1, GPUS_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    int *indexes = calloc(n, sizeof *indexes);
    if (indexes == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        uint64_t value;
        int rc = cfg_parse_integer(c, item, 0, 1023, &value);
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (indexes[j] == (int)value)
                rc = ydoc_fail(c, item, "GPU %d is listed twice", (int)value);
        ydoc_path_pop(c, saved);
        if (rc != 0) {
            free(indexes);
            return -1;
        }
        indexes[i] = (int)value;
    }
    free(*out);
    *out = indexes;
    *n_out = n;
    return 0;
}

static int fp_gpus(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v) || (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "any") == 0)) {
        free(m->gpus);
        m->gpus = NULL;
        m->n_gpus = 0;
        return 0;
    }
    return parse_index_list(c, v, "any or a list of GPU indexes like [0, 1]", &m->gpus, &m->n_gpus);
}

/* upgrade: [websocket] (or one name): the protocol upgrades passed through to the worker;
 * [] or null: none (the default). */
static int fp_upgrade(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"websocket", NULL};
    static const unsigned bits[] = {CFG_UPGRADE_WEBSOCKET};
    model_config_t *m = field;
    (void)spec;
    m->upgrade = 0;
    if (ydoc_is_null(v))
        return 0;
    bool list = v->type == YAML_SEQUENCE_NODE;
    size_t n = list ? ydoc_sequence_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = list ? ydoc_sequence_item(c, v, i) : v;
        int which;
        if (!item || cfg_parse_choice(c, item, names, &which) != 0)
            return -1;
        m->upgrade |= bits[which];
    }
    return 0;
}

/* cuda_shim: off | auto | required. */
static int fp_cuda_shim(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"off", "auto", "required", NULL};
    (void)spec;
    int which;
    if (v->type == YAML_SCALAR_NODE && (strcmp(ydoc_scalar_text(v), "false") == 0))
        which = 0;
    else if (cfg_parse_choice(c, v, names, &which) != 0)
        return -1;
    *(enum config_cuda_shim *)field = (enum config_cuda_shim)which;
    return 0;
}

/* grant_wait: a duration up to 10 minutes (a worker thread blocks that long at most). */
static int fp_grant_wait(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (cfg_fp_duration(c, v, field, spec) != 0)
        return -1;
    if (*(uint64_t *)field > 600000)
        return ydoc_fail(c, v, "at most 10m (an allocation's thread blocks that long)");
    return 0;
}

/* memory.cancelled_hold: "auto", or a duration up to 1h (0: off). */
static int fp_cancelled_hold(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    (void)spec;
    config_memory_t *mem = field;
    char d[DESCRIBE_MAX];
    uint64_t ms;
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "auto") == 0) {
        mem->cancelled_hold_auto = true;
        return 0;
    }
    if (v->type != YAML_SCALAR_NODE || ydoc_is_null(v) || units_parse_duration_ms(ydoc_scalar_text(v), &ms) != 0)
        return ydoc_fail(c, v, "expected auto or a duration like 90s, got %s", ydoc_describe(v, d, sizeof d));
    if (ms > 3600000)
        return ydoc_fail(c, v, "at most 1h (or auto)");
    mem->cancelled_hold_ms = ms;
    mem->cancelled_hold_auto = false;
    return 0;
}

/* per_request: a size, or "learn" (learn from NVML, starting from the declared value). */
static int fp_per_request(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_memory_t *mem = field;
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "learn") == 0) {
        mem->learn = true;
        return 0;
    }
    if (v->type == YAML_SCALAR_NODE && !ydoc_is_null(v) &&
        units_parse_size(ydoc_scalar_text(v), &mem->per_request) == 0)
        return 0;
    char d[DESCRIBE_MAX];
    return ydoc_fail(c, v, "expected a size like 12GiB, got %s", ydoc_describe(v, d, sizeof d));
}

static void size_fields_clear(config_memory_t *mem)
{
    for (size_t i = 0; i < mem->n_size_fields; i++)
        free(mem->size_fields[i]);
    mem->n_size_fields = 0;
}

/* size_field: one JSON pointer or a list of at most 4 ("/width", "/height"); null: none. */
static int fp_size_field(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_memory_t *mem = field;
    size_fields_clear(mem);
    if (ydoc_is_null(v))
        return 0;
    const size_t max = sizeof mem->size_fields / sizeof mem->size_fields[0];
    bool list = v->type == YAML_SEQUENCE_NODE;
    size_t n = list ? ydoc_sequence_size(v) : 1;
    if (n == 0 || n > max)
        return ydoc_fail(c, v, "expected a JSON pointer like /resolution, or a list of 1 to %zu of them", max);
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = list ? ydoc_sequence_item(c, v, i) : v;
        size_t saved = list ? ydoc_path_push_index(c, i) : 0;
        int rc = ydoc_need_scalar(c, item, "a JSON pointer like /resolution");
        const char *s = rc == 0 ? ydoc_scalar_text(item) : NULL;
        if (rc == 0 && (s[0] != '/' || !json_pointer_valid(s)))
            rc = ydoc_fail(c, item, "expected a JSON pointer like /resolution (RFC 6901, starting with /), got \"%s\"", s);
        char *copy = rc == 0 ? ydoc_dup_or_fail(c, item, s) : NULL;
        if (list)
            ydoc_path_pop(c, saved);
        if (copy == NULL) {
            size_fields_clear(mem);
            return -1;
        }
        mem->size_fields[mem->n_size_fields++] = copy;
    }
    return 0;
}

static int fp_keep_alive(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "forever") == 0) {
        *(uint64_t *)field = CONFIG_FOREVER;
        return 0;
    }
    if (v->type == YAML_SCALAR_NODE && !ydoc_is_null(v)) {
        uint64_t ms;
        if (units_parse_duration_ms(ydoc_scalar_text(v), &ms) == 0 && ms != CONFIG_FOREVER) {
            *(uint64_t *)field = ms;
            return 0;
        }
    }
    char d[DESCRIBE_MAX];
    return ydoc_fail(c, v, "expected a duration like 10m, 0 or forever, got %s", ydoc_describe(v, d, sizeof d));
}

static int fp_http_method(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "an HTTP method like POST") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    size_t len = strlen(s);
    for (size_t i = 0; i < len; i++)
        if (!isupper((unsigned char)s[i]))
            len = 0;
    if (len == 0 || len > 16)
        return ydoc_fail(c, v, "expected an HTTP method like POST, got %s", ydoc_describe(v, d, sizeof d));
    return cfg_set_string(c, v, field);
}

/* A hook's body: any YAML value, sent as its JSON text; null removes it. */
static int fp_hook_body(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char **body = field;
    char *text = NULL;
    if (!ydoc_is_null(v)) {
        cJSON *json = cfg_yaml_to_json(c, v, 0);
        if (json == NULL)
            return -1;
        text = cJSON_PrintUnformatted(json);
        cJSON_Delete(json);
        if (text == NULL)
            return ydoc_fail(c, v, "out of memory");
    }
    free(*body);
    *body = text;
    return 0;
}

static const field_spec_t hook_fields[] = {
    {"method", fp_http_method, offsetof(config_hook_t, method), 0, 0, NULL},
    {"path", cfg_fp_http_path, offsetof(config_hook_t, path), 0, 0, NULL},
    {"body", fp_hook_body, offsetof(config_hook_t, body), 0, 0, NULL},
    {"timeout", cfg_fp_duration, offsetof(config_hook_t, timeout_ms), 1, 0, NULL},
    {"nothing_to_do", cfg_fp_string_opt, offsetof(config_hook_t, nothing_to_do), 0, 0, NULL},
};
static const section_t hook_section = SECTION(hook_fields);

/* unload/reload/clear_cache/sleep/wake: a mapping sets the hook; null removes it.
 * spec->min = default timeout. */
static int fp_hook(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_hook_t *hook = field;
    if (ydoc_is_null(v)) {
        free(hook->path);
        free(hook->body);
        free(hook->nothing_to_do);
        hook->path = NULL;
        hook->body = NULL;
        hook->nothing_to_do = NULL;
        hook->set = false;
        hook->timeout_ms = spec->min;
        char *post = strdup("POST");
        if (post == NULL)
            return ydoc_fail(c, v, "out of memory");
        free(hook->method);
        hook->method = post;
        return 0;
    }
    if (cfg_apply_mapping(c, v, &hook_section, hook) != 0)
        return -1;
    hook->set = true;
    return 0;
}

static const field_spec_t health_fields[] = {
    {"path", cfg_fp_http_path, offsetof(config_health_t, path), 0, 0, NULL},
    {"interval", cfg_fp_duration, offsetof(config_health_t, interval_ms), 1, 0, NULL},
    {"timeout", cfg_fp_duration, offsetof(config_health_t, timeout_ms), 1, 0, NULL},
    {"failures", cfg_fp_unsigned, offsetof(config_health_t, failures), 1, 1000, NULL},
};

static const field_spec_t memory_fields[] = {
    {"resident", cfg_fp_size, offsetof(config_memory_t, resident), 0, 0, NULL},
    {"per_request", fp_per_request, 0, 0, 0, NULL},
    {"learn", cfg_fp_bool, offsetof(config_memory_t, learn), 0, 0, NULL},
    {"size_field", fp_size_field, 0, 0, 0, NULL},
    {"cancelled_hold", fp_cancelled_hold, 0, 0, 0, NULL},
};

static const field_spec_t recycle_fields[] = {
    {"after_requests", cfg_fp_u64, offsetof(config_recycle_t, after_requests), 0, UINT64_MAX, NULL},
    {"max_growth", cfg_fp_size, offsetof(config_recycle_t, max_growth), 0, 0, NULL},
    {"hang_timeout", cfg_fp_duration, offsetof(config_recycle_t, hang_timeout_ms), 0, 0, NULL},
    {"on_oom", cfg_fp_bool, offsetof(config_recycle_t, on_oom), 0, 0, NULL},
};

static const field_spec_t retry_budget_fields[] = {
    {"percent", cfg_fp_unsigned, offsetof(config_retry_budget_t, percent), 0, 100, NULL},
    {"min", cfg_fp_unsigned, offsetof(config_retry_budget_t, min), 0, 100000, NULL},
};

static const field_spec_t outlier_fields[] = {
    {"base_ejection_time", cfg_fp_duration, offsetof(config_outlier_t, base_ejection_ms), 100, 0, NULL},
    {"max_ejection_time", cfg_fp_duration, offsetof(config_outlier_t, max_ejection_ms), 100, 0, NULL},
};

static const section_t health_section = SECTION(health_fields);
static const section_t outlier_section = SECTION(outlier_fields);
static const section_t retry_budget_section = SECTION(retry_budget_fields);
static const section_t memory_section = SECTION(memory_fields);
static const section_t recycle_section = SECTION(recycle_fields);

static const field_spec_t model_fields[] = {
    {"route", cfg_fp_route, offsetof(model_config_t, route), 0, 0, NULL},
    {"strip", cfg_fp_bool, offsetof(model_config_t, strip), 0, 0, NULL},
    {"upgrade", fp_upgrade, 0, 0, 0, NULL},
    {"aliases", fp_aliases, 0, 0, 0, NULL},
    {"cmd", fp_model_cmd, 0, 0, 0, NULL},
    {"env", fp_env, 0, 0, 0, NULL},
    {"cwd", cfg_fp_string_opt, offsetof(model_config_t, cwd), 0, 0, NULL},
    {"served_model", fp_served_model, offsetof(model_config_t, served_model), 0, 0, NULL},
    {"url", fp_url, 0, 0, 0, NULL},
    {"container", cfg_fp_container, offsetof(model_config_t, container), 0, 0, NULL},
    {"stop_cmd", cfg_fp_stop_cmd, 0, 0, 0, NULL},
    {"health", cfg_fp_section, offsetof(model_config_t, health), 0, 0, &health_section},
    {"startup_timeout", cfg_fp_duration, offsetof(model_config_t, startup_timeout_ms), 1, 0, NULL},
    {"stop_timeout", cfg_fp_duration, offsetof(model_config_t, stop_timeout_ms), 0, 0, NULL},
    {"gpus", fp_gpus, 0, 0, 0, NULL},
    {"memory", cfg_fp_section, offsetof(model_config_t, memory), 0, 0, &memory_section},
    {"concurrency", cfg_fp_unsigned, offsetof(model_config_t, concurrency), 1, 1024, NULL},
    {"instances", cfg_fp_unsigned, offsetof(model_config_t, instances), 1, 64, NULL},
    {"queue_max", cfg_fp_unsigned, offsetof(model_config_t, queue_max), 1, 1000000, NULL},
    {"deadline", cfg_fp_duration, offsetof(model_config_t, deadline_ms), 1, 0, NULL},
    {"max_client_deadline", cfg_fp_duration, offsetof(model_config_t, max_client_deadline_ms), 0, 0, NULL},
    {"total_deadline", cfg_fp_duration, offsetof(model_config_t, total_deadline_ms), 0, 0, NULL},
    {"priority", cfg_fp_int, offsetof(model_config_t, priority), 0, 9, NULL},
    {"keep_alive", fp_keep_alive, offsetof(model_config_t, keep_alive_ms), 0, 0, NULL},
    {"unload", fp_hook, offsetof(model_config_t, unload), 30000, 0, NULL},
    {"reload", fp_hook, offsetof(model_config_t, reload), 60000, 0, NULL},
    {"clear_cache", fp_hook, offsetof(model_config_t, clear_cache), 30000, 0, NULL},
    {"sleep", fp_hook, offsetof(model_config_t, sleep), 30000, 0, NULL},
    {"wake", fp_hook, offsetof(model_config_t, wake), 60000, 0, NULL},
    {"checkpoint", cfg_fp_bool, offsetof(model_config_t, checkpoint), 0, 0, NULL},
    {"park_keep_alive", fp_keep_alive, offsetof(model_config_t, park_keep_alive_ms), 0, 0, NULL},
    {"preset", cfg_fp_preset, offsetof(model_config_t, preset), 0, 0, NULL},
    {"recycle", cfg_fp_section, offsetof(model_config_t, recycle), 0, 0, &recycle_section},
    {"degrade", cfg_fp_degrade, offsetof(model_config_t, degrade), 0, 0, NULL},
    {"validate", cfg_fp_validate, offsetof(model_config_t, validate), 0, 0, NULL},
    {"retry", cfg_fp_retry, offsetof(model_config_t, retry_safe), 0, 0, NULL},
    {"response_timeout", cfg_fp_duration, offsetof(model_config_t, response_timeout_ms), 0, 0, NULL},
    {"retry_budget", cfg_fp_section, offsetof(model_config_t, retry_budget), 0, 0, &retry_budget_section},
    {"outlier", cfg_fp_section, offsetof(model_config_t, outlier), 0, 0, &outlier_section},
    {"prompt_hold", cfg_fp_bool, offsetof(model_config_t, prompt_hold), 0, 0, NULL},
    {"pin_model", cfg_fp_bool, offsetof(model_config_t, pin_model), 0, 0, NULL},
    {"prompt_poll", cfg_fp_duration, offsetof(model_config_t, prompt_poll_ms), 10, 0, NULL},
    {"prompt_hold_timeout", cfg_fp_duration, offsetof(model_config_t, prompt_hold_timeout_ms), 0, 0, NULL},
    {"cuda_shim", fp_cuda_shim, offsetof(model_config_t, cuda_shim), 0, 0, NULL},
    {"grant_wait", fp_grant_wait, offsetof(model_config_t, grant_wait_ms), 0, 0, NULL},
    {"shim_park", cfg_fp_bool, offsetof(model_config_t, shim_park), 0, 0, NULL},
    {"max_wait", cfg_fp_max_wait, offsetof(model_config_t, max_wait_ms), 0, 0, NULL},
    {"evicts", cfg_fp_evicts, offsetof(model_config_t, evicts), 0, 0, NULL},
};
static const section_t model_section = SECTION(model_fields);

static bool model_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > MODEL_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* Where node n's own text ends: a block collection's end mark is where the next token
 * begins (the indentation of the next entry, a comment, or the end of the file), so it is
 * taken from its last descendant instead (a loop: no recursion the input could deepen). */
static size_t text_end(ctx_t *c, const yaml_node_t *n)
{
    for (;;) {
        const yaml_node_t *last = NULL;
        if (n->type == YAML_MAPPING_NODE && n->data.mapping.style == YAML_BLOCK_MAPPING_STYLE &&
            ydoc_mapping_size(n) > 0)
            last = ydoc_pair_value(c, n, ydoc_mapping_size(n) - 1);
        else if (n->type == YAML_SEQUENCE_NODE && n->data.sequence.style == YAML_BLOCK_SEQUENCE_STYLE &&
                 ydoc_sequence_size(n) > 0)
            last = ydoc_sequence_item(c, n, ydoc_sequence_size(n) - 1);
        if (last == NULL)
            return n->end_mark.index;
        n = last;
    }
}

/* FNV-1a over the text from node a's start to node b's text end (a NULL a: nothing), on
 * top of h: what follows b in the file (another entry appended) does not change it. */
static uint64_t source_hash(ctx_t *c, const yaml_node_t *a, const yaml_node_t *b, uint64_t h)
{
    if (a == NULL || c->text == NULL)
        return h;
    size_t from = a->start_mark.index, to = text_end(c, b);
    for (size_t i = from; i < to && i < c->text_len; i++) {
        h ^= (unsigned char)c->text[i];
        h *= 1099511628211ULL;
    }
    h ^= 0xff; /* the end of one span: "ab" + "c" differs from "a" + "bc" */
    return h * 1099511628211ULL;
}

/* One model (not an alias_of entry): built-in defaults, its preset, `defaults:`, its own
 * keys, then its checks; m is zeroed or freeable on entry and freeable on any return. */
static int parse_model(ctx_t *c, model_config_t *m, yaml_node_t *k, yaml_node_t *v)
{
    const char *name = ydoc_scalar_text(k);
    if (cfg_model_init_builtin(m) != 0 || (m->name = strdup(name)) == NULL)
        return ydoc_fail(c, k, "out of memory");
    /* the preset first: `defaults:` and the model's own keys override what it fills */
    int rc = cfg_apply_preset(c, m, cfg_preset_of(c, v), k);
    if (rc == 0 && c->defaults_node != NULL) {
        ydoc_path_reset(c);
        ydoc_path_push_key(c, "defaults");
        rc = cfg_apply_mapping(c, c->defaults_node, &model_section, m);
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", name);
    }
    if (rc == 0 && !ydoc_is_null(v) && ydoc_need_mapping(c, v, "a mapping of model keys") != 0)
        rc = -1;
    if (rc == 0)
        rc = cfg_apply_mapping(c, v, &model_section, m);
    if (rc == 0)
        rc = cfg_preset_finish(c, m, !ydoc_is_null(v) ? v : k);
    if (rc == 0)
        rc = cfg_check_model(c, m, k, v);
    uint64_t h = source_hash(c, c->defaults_node, c->defaults_node, 14695981039346656037ULL);
    m->source_hash = source_hash(c, k, v, h);
    const yaml_node_t *mem = rc == 0 && !ydoc_is_null(v) ? ydoc_find_value(c, v, "memory") : NULL;
    const yaml_node_t *at = mem ? mem : k;
    char where[256];
    snprintf(where, sizeof where, "%s:%zu:%zu", c->name, at->start_mark.line + 1, at->start_mark.column + 1);
    if (rc == 0 && (m->memory_at = strdup(where)) == NULL)
        rc = ydoc_fail(c, k, "out of memory");
    return rc;
}

int cfg_parse_models(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    /* `defaults:` is checked once on its own, so its errors show even without models. */
    if (c->defaults_node != NULL) {
        model_config_t scratch;
        int ok = cfg_model_init_builtin(&scratch);
        ydoc_path_reset(c);
        ydoc_path_push_key(c, "defaults");
        int rc = ok == 0 ? cfg_apply_mapping(c, c->defaults_node, &model_section, &scratch)
                         : ydoc_fail(c, c->defaults_node, "out of memory");
        cfg_model_free(&scratch);
        if (rc != 0)
            return -1;
    }
    ydoc_unit_begin(c);
    ydoc_path_reset(c);
    ydoc_path_push_key(c, "models");
    yaml_node_t *models = c->models_node;
    if (models == NULL || ydoc_is_null(models))
        return ydoc_fail(c, models ? models : root, "at least one model is required");
    if (ydoc_need_mapping(c, models, "a mapping of model names to models") != 0)
        return -1;
    /* models: {} is a config that serves nothing until models are added (the packaged
     * /etc/vramd/vramd.yaml); a missing or null models: is still an error. */
    size_t n = ydoc_mapping_size(models);
    if (n > MODELS_MAX)
        return ydoc_fail(c, models, "too many models (%zu, at most %d)", n, MODELS_MAX);
    if (ydoc_check_mapping(c, models) != 0)
        return -1;
    if (n == 0)
        return 0;
    size_t n_alias_of = 0; /* alias_of entries go to cfg->alias_ofs, not cfg->models */
    for (size_t i = 0; i < n; i++)
        n_alias_of += cfg_is_alias_of_entry(c, ydoc_pair_value(c, models, i));
    cfg->models = calloc(n - n_alias_of + 1, sizeof *cfg->models);
    cfg->alias_ofs = calloc(n_alias_of + 1, sizeof *cfg->alias_ofs);
    cfg_entry_t *entries = calloc(n, sizeof *entries);
    int failed = 0; /* any entry's: each is checked, and reported, on its own */
    if (cfg->models == NULL || cfg->alias_ofs == NULL || entries == NULL)
        failed = ydoc_fail(c, models, "out of memory");
    for (size_t i = 0; cfg->models != NULL && cfg->alias_ofs != NULL && entries != NULL && i < n; i++) {
        ydoc_unit_begin(c);
        yaml_node_t *k = ydoc_pair_key(c, models, i), *v = ydoc_pair_value(c, models, i);
        const char *name = ydoc_scalar_text(k);
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", name);
        if (!model_name_ok(name, k->data.scalar.length)) {
            failed = ydoc_fail(c, k, "a model name is 1 to %d of A-Z a-z 0-9 . _ -", MODEL_NAME_MAX);
            continue;
        }
        yaml_node_t *where = !ydoc_is_null(v) ? v : k;
        int rc;
        if (cfg_is_alias_of_entry(c, v)) {
            config_alias_of_t *a = &cfg->alias_ofs[cfg->n_alias_ofs++];
            rc = cfg_parse_alias_of(c, a, k, v);
            entries[i] = (cfg_entry_t){a->name, a->route, a->aliases, a->n_aliases, where, true};
        } else {
            model_config_t *m = &cfg->models[cfg->n_models++];
            rc = parse_model(c, m, k, v);
            entries[i] = (cfg_entry_t){m->name, m->route, m->aliases, m->n_aliases, where, false};
        }
        if (rc != 0)
            failed = -1;
    }
    if (failed == 0) { /* names, aliases and routes across entries: once every entry is whole */
        ydoc_unit_begin(c);
        failed = cfg_check_names_and_routes(c, entries, n);
    }
    free(entries);
    return failed;
}
