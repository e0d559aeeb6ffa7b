/*
 * config: parse vramd's YAML configuration (SPEC section 2) into an immutable config_t.
 *
 * How it works: a first pass over libyaml's events refuses nesting deeper than 64 (libyaml's
 * scanner is slow on deep flow nesting); then libyaml loads the text into a document (every
 * node keeps its line and column); the document is walked with tables of known keys
 * (field_spec_t), one table per section. Each model starts from model_init_builtin(), then the `defaults:` mapping is
 * applied to it, then the model's own mapping; applying a mapping sets only the keys it
 * names, so nested sections (health, memory, recycle, ...) overlay key by key, while
 * lists (cmd, aliases, ladder, ...) and `json: {path, equals}` pairs are replaced whole.
 * After the walk come the checks that need the whole picture (cmd xor url, unique names,
 * aliases and routes, the admin token, loopback listen).
 *
 * Invariants:
 *  - the first error wins; it is written as "FILE:LINE:COL: key.path: message" (1-based;
 *    the path is left out for errors that belong to no key, such as YAML syntax errors);
 *  - every struct being filled is always in a state model_free()/config_free() can free,
 *    so an error at any point just frees what was built;
 *  - everything is bounded: input size, models, list lengths, mapping sizes, the depth and
 *    the total number of values converted to JSON (so YAML alias "bombs" cannot blow up);
 *  - a value of null (`null`, `~` or nothing) removes an optional setting (url, route,
 *    degrade, a hook, ...) and leaves a section unchanged; for a number, size, duration or
 *    flag it is an error.
 * Return conventions: config_load/config_parse return a config with refs = 1 or NULL with
 * the message in err; internal parse functions return 0 or -1 (after ydoc_fail()).
 * config_ref/config_unref are not atomic: a config is shared within the event-loop thread.
 */
#include "config/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <yaml.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/units.h"
#include "config/yaml_doc.h"

#define CONFIG_FILE_MAX (4u << 20)   /* bytes of YAML */
#define TOKEN_FILE_MAX 4096          /* bytes in admin_token_file */
#define MODELS_MAX 256
#define MODEL_NAME_MAX 128
#define ALIASES_MAX 64
#define ARGV_MAX 256                 /* cmd: words */
#define ENV_MAX 256
#define GPUS_MAX 64
#define STATUSES_MAX 64
#define LADDER_MAX 32
#define JSON_DEPTH_MAX 64
#define JSON_VALUES_MAX 100000       /* values converted from YAML to JSON, whole config */

static void free_argv(char **argv, size_t n)
{
    if (argv == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    free(argv);
}

/* ------------------------------------------------------------------------------------ */
/* YAML -> JSON (ladder `set`, `equals`)                                                  */
/* ------------------------------------------------------------------------------------ */

static bool all_chars_in(const char *s, const char *set)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (strchr(set, *s) == NULL)
            return false;
    return true;
}

/* A YAML 1.2 core-schema float ([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?). */
static bool looks_like_float(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    bool digits_before = false, digits_after = false;
    while (isdigit((unsigned char)*s)) {
        s++;
        digits_before = true;
    }
    if (*s == '.') {
        s++;
        while (isdigit((unsigned char)*s)) {
            s++;
            digits_after = true;
        }
    }
    if (!digits_before && !digits_after)
        return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!isdigit((unsigned char)*s))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
    }
    return *s == '\0';
}

/* A plain scalar typed by the YAML 1.2 core schema: null, bool, int (also 0x, 0o), float. */
static cJSON *plain_scalar_to_json(ctx_t *c, const yaml_node_t *n)
{
    const char *s = ydoc_scalar_text(n);
    if (ydoc_is_null(n))
        return cJSON_CreateNull();
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
        return cJSON_CreateTrue();
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        return cJSON_CreateFalse();
    if (strncmp(s, "0x", 2) == 0 && all_chars_in(s + 2, "0123456789abcdefABCDEF"))
        return cJSON_CreateNumber((double)strtoull(s + 2, NULL, 16));
    if (strncmp(s, "0o", 2) == 0 && all_chars_in(s + 2, "01234567"))
        return cJSON_CreateNumber((double)strtoull(s + 2, NULL, 8));
    if (looks_like_float(s)) {
        double d = strtod(s, NULL);
        if (isinf(d)) {
            ydoc_fail(c, n, "number %s is too large for JSON", s);
            return NULL;
        }
        return cJSON_CreateNumber(d);
    }
    const char *t = (*s == '+' || *s == '-') ? s + 1 : s;
    if (strcasecmp(t, ".inf") == 0 || strcasecmp(s, ".nan") == 0) {
        ydoc_fail(c, n, "%s cannot be written in JSON", s);
        return NULL;
    }
    return cJSON_CreateString(s);
}

static cJSON *yaml_to_json(ctx_t *c, yaml_node_t *n, int depth)
{
    if (depth > JSON_DEPTH_MAX) {
        ydoc_fail(c, n, "nested more than %d levels deep", JSON_DEPTH_MAX);
        return NULL;
    }
    if (c->json_values_left == 0) {
        ydoc_fail(c, n, "too many values (the whole configuration may hold at most %d)", JSON_VALUES_MAX);
        return NULL;
    }
    c->json_values_left--;
    cJSON *out = NULL;
    if (n->type == YAML_SCALAR_NODE) {
        if (memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL) {
            ydoc_fail(c, n, "a string contains a NUL character");
            return NULL;
        }
        out = ydoc_is_plain(n) ? plain_scalar_to_json(c, n) : cJSON_CreateString(ydoc_scalar_text(n));
        if (out == NULL && !c->failed)
            ydoc_fail(c, n, "out of memory");
        return out;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        out = cJSON_CreateArray();
        for (size_t i = 0; out != NULL && i < ydoc_sequence_size(n); i++) {
            size_t saved = ydoc_path_push_index(c, i);
            cJSON *item = yaml_to_json(c, ydoc_sequence_item(c, n, i), depth + 1);
            ydoc_path_pop(c, saved);
            if (item == NULL) {
                cJSON_Delete(out);
                return NULL;
            }
            cJSON_AddItemToArray(out, item);
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        if (ydoc_check_mapping(c, n) != 0)
            return NULL;
        out = cJSON_CreateObject();
        for (size_t i = 0; out != NULL && i < ydoc_mapping_size(n); i++) {
            const char *key = ydoc_scalar_text(ydoc_pair_key(c, n, i));
            size_t saved = ydoc_path_push_key(c, key);
            cJSON *item = yaml_to_json(c, ydoc_pair_value(c, n, i), depth + 1);
            ydoc_path_pop(c, saved);
            if (item == NULL) {
                cJSON_Delete(out);
                return NULL;
            }
            cJSON_AddItemToObject(out, key, item);
        }
    }
    if (out == NULL && !c->failed)
        ydoc_fail(c, n, "out of memory");
    return out;
}

/* ------------------------------------------------------------------------------------ */
/* Key tables                                                                            */
/* ------------------------------------------------------------------------------------ */

struct field_spec;
/* Parses `value` into the field at `field`; 0 or -1 (after ydoc_fail()). */
typedef int (*field_parser_t)(ctx_t *c, yaml_node_t *value, void *field, const struct field_spec *spec);

typedef struct field_spec {
    const char *key;
    field_parser_t parse;
    size_t offset;       /* of the field within the struct the table describes */
    uint64_t min, max;   /* bounds for numbers; min doubles as the default of a hook timeout */
    const void *extra;   /* a section's table (section_t) */
} field_spec_t;

typedef struct section {
    const field_spec_t *fields;
    size_t n_fields;
} section_t;

#define SECTION(table) {table, sizeof table / sizeof table[0]}

/* Applies a mapping of known keys onto base; null = nothing to apply. */
static int apply_mapping(ctx_t *c, yaml_node_t *map, const section_t *section, void *base)
{
    if (ydoc_is_null(map))
        return 0;
    if (ydoc_need_mapping(c, map, "a mapping") != 0 || ydoc_check_mapping(c, map) != 0)
        return -1;
    for (size_t i = 0; i < ydoc_mapping_size(map); i++) {
        yaml_node_t *k = ydoc_pair_key(c, map, i);
        const char *key = ydoc_scalar_text(k);
        const field_spec_t *spec = NULL;
        for (size_t f = 0; f < section->n_fields; f++)
            if (strcmp(section->fields[f].key, key) == 0)
                spec = &section->fields[f];
        size_t saved = ydoc_path_push_key(c, key);
        int rc = spec ? spec->parse(c, ydoc_pair_value(c, map, i), (char *)base + spec->offset, spec)
                      : ydoc_fail(c, k, "unknown key \"%s\"", key);
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int fp_section(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return apply_mapping(c, v, spec->extra, field);
}

static int set_string(ctx_t *c, yaml_node_t *v, char **field)
{
    char *copy = ydoc_dup_or_fail(c, v, ydoc_scalar_text(v));
    if (copy == NULL)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

static int fp_string(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_need_scalar(c, v, "a string") != 0)
        return -1;
    if (v->data.scalar.length == 0)
        return ydoc_fail(c, v, "must not be empty");
    return set_string(c, v, field);
}

/* A string, or null to unset. */
static int fp_string_opt(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_is_null(v)) {
        free(*(char **)field);
        *(char **)field = NULL;
        return 0;
    }
    return fp_string(c, v, field, spec);
}

/* An absolute HTTP path: starts with '/', printable, no spaces, '?' allowed (query). */
static int fp_http_path(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_need_scalar(c, v, "a path like /health") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    char d[DESCRIBE_MAX];
    if (s[0] != '/')
        return ydoc_fail(c, v, "expected a path starting with /, got %s", ydoc_describe(v, d, sizeof d));
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '#')
            return ydoc_fail(c, v, "a path may not contain spaces, control characters or '#', got %s",
                             ydoc_describe(v, d, sizeof d));
    return set_string(c, v, field);
}

static int parse_bool(ctx_t *c, yaml_node_t *v, bool *out)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "true or false") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
        *out = true;
    else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        *out = false;
    else
        return ydoc_fail(c, v, "expected true or false, got %s", ydoc_describe(v, d, sizeof d));
    return 0;
}

static int fp_bool(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_bool(c, v, field);
}

/* A decimal integer within [min, max]. */
static int parse_integer(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char what[96], d[DESCRIBE_MAX];
    if (max == UINT64_MAX)
        snprintf(what, sizeof what, "an integer of at least %llu", (unsigned long long)min);
    else
        snprintf(what, sizeof what, "an integer from %llu to %llu", (unsigned long long)min,
                 (unsigned long long)max);
    if (ydoc_need_scalar(c, v, what) != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    uint64_t value = 0;
    bool ok = *s != '\0';
    for (const char *p = s; ok && *p; p++) {
        if (*p < '0' || *p > '9' || value > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            ok = false;
        else
            value = value * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || value < min || value > max)
        return ydoc_fail(c, v, "expected %s, got %s", what, ydoc_describe(v, d, sizeof d));
    *out = value;
    return 0;
}

static int fp_unsigned(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    uint64_t value;
    if (parse_integer(c, v, spec->min, spec->max, &value) != 0)
        return -1;
    *(unsigned *)field = (unsigned)value;
    return 0;
}

static int fp_int(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    uint64_t value;
    if (parse_integer(c, v, spec->min, spec->max, &value) != 0)
        return -1;
    *(int *)field = (int)value;
    return 0;
}

static int fp_u64(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_integer(c, v, spec->min, spec->max, field);
}

static int parse_size(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t *out)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a size like 12GiB") != 0)
        return -1;
    uint64_t value;
    if (units_parse_size(ydoc_scalar_text(v), &value) != 0)
        return ydoc_fail(c, v, "expected a size like 12GiB, got %s", ydoc_describe(v, d, sizeof d));
    if (value < min)
        return ydoc_fail(c, v, "must be at least %llu bytes, got %s", (unsigned long long)min, ydoc_describe(v, d, sizeof d));
    *out = value;
    return 0;
}

static int fp_size(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_size(c, v, spec->min, field);
}

static int parse_duration(ctx_t *c, yaml_node_t *v, uint64_t min_ms, uint64_t *out)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a duration like 30s") != 0)
        return -1;
    uint64_t value;
    if (units_parse_duration_ms(ydoc_scalar_text(v), &value) != 0 || value == CONFIG_FOREVER)
        return ydoc_fail(c, v, "expected a duration like 30s, got %s", ydoc_describe(v, d, sizeof d));
    if (value < min_ms)
        return ydoc_fail(c, v, "must be at least %llums, got %s", (unsigned long long)min_ms, ydoc_describe(v, d, sizeof d));
    *out = value;
    return 0;
}

static int fp_duration(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_duration(c, v, spec->min, field);
}

/* One of names[] (NULL-terminated) -> its index. */
static int parse_choice(ctx_t *c, yaml_node_t *v, const char *const *names, int *out)
{
    char what[160] = "one of", d[DESCRIBE_MAX];
    size_t count = 0;
    while (names[count])
        count++;
    if (count == 2) {
        snprintf(what, sizeof what, "%s or %s", names[0], names[1]);
    } else {
        size_t o = strlen(what);
        for (size_t i = 0; i < count && o < sizeof what; i++)
            o += (size_t)snprintf(what + o, sizeof what - o, "%s%s", i ? ", " : " ", names[i]);
    }
    if (ydoc_need_scalar(c, v, what) != 0)
        return -1;
    for (size_t i = 0; i < count; i++) {
        if (strcmp(ydoc_scalar_text(v), names[i]) == 0) {
            *out = (int)i;
            return 0;
        }
    }
    return ydoc_fail(c, v, "expected %s, got %s", what, ydoc_describe(v, d, sizeof d));
}

/* ------------------------------------------------------------------------------------ */
/* Model keys                                                                            */
/* ------------------------------------------------------------------------------------ */

/* A list of strings (each a scalar, stringified as written) into argv[0..n-1] + NULL. */
static int parse_argv(ctx_t *c, yaml_node_t *v, char ***argv, size_t *n_argv)
{
    if (ydoc_need_sequence(c, v, "a list of words like [python3, serve.py]", 1, ARGV_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    char **words = calloc(n + 1, sizeof *words);
    if (words == NULL)
        return ydoc_fail(c, v, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        rc = ydoc_need_scalar(c, item, "a string");
        if (rc == 0 && i == 0 && item->data.scalar.length == 0)
            rc = ydoc_fail(c, item, "the program name must not be empty");
        if (rc == 0 && (words[i] = ydoc_dup_or_fail(c, item, ydoc_scalar_text(item))) == NULL)
            rc = -1;
        ydoc_path_pop(c, saved);
    }
    if (rc != 0) {
        free_argv(words, n);
        return -1;
    }
    free_argv(*argv, *n_argv);
    *argv = words;
    *n_argv = n;
    return 0;
}

static int fp_model_cmd(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v)) {
        free_argv(m->cmd, m->n_cmd);
        m->cmd = NULL;
        m->n_cmd = 0;
        return 0;
    }
    return parse_argv(c, v, &m->cmd, &m->n_cmd);
}

static int fp_aliases(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    if (ydoc_is_null(v)) {
        free_argv(m->aliases, m->n_aliases);
        m->aliases = NULL;
        m->n_aliases = 0;
        return 0;
    }
    if (ydoc_need_sequence(c, v, "a list of names", 0, ALIASES_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    char **names = calloc(n + 1, sizeof *names);
    if (names == NULL)
        return ydoc_fail(c, v, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        rc = ydoc_need_scalar(c, item, "a name");
        for (const char *p = rc == 0 ? ydoc_scalar_text(item) : ""; rc == 0 && *p; p++)
            if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                rc = ydoc_fail(c, item, "an alias may not contain spaces or control characters");
        if (rc == 0 && item->data.scalar.length == 0)
            rc = ydoc_fail(c, item, "an alias must not be empty");
        if (rc == 0 && (names[i] = ydoc_dup_or_fail(c, item, ydoc_scalar_text(item))) == NULL)
            rc = -1;
        ydoc_path_pop(c, saved);
    }
    if (rc != 0) {
        free_argv(names, n);
        return -1;
    }
    free_argv(m->aliases, m->n_aliases);
    m->aliases = names;
    m->n_aliases = n;
    return 0;
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

/* A route is normalised to "/a/b/": leading and trailing '/', no "//". */
static int fp_route(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char **route = field;
    if (ydoc_is_null(v)) {
        free(*route);
        *route = NULL;
        return 0;
    }
    if (ydoc_need_scalar(c, v, "a path prefix like /trellis/") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    char d[DESCRIBE_MAX];
    size_t len = strlen(s);
    char *norm = malloc(len + 3);
    if (norm == NULL)
        return ydoc_fail(c, v, "out of memory");
    size_t o = 0;
    norm[o++] = '/';
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '?' || *p == '#') {
            free(norm);
            return ydoc_fail(c, v, "a route may not contain spaces, control characters, '?' or '#', got %s",
                             ydoc_describe(v, d, sizeof d));
        }
        if (*p == '/' && norm[o - 1] == '/')
            continue;
        norm[o++] = *p;
    }
    if (norm[o - 1] != '/')
        norm[o++] = '/';
    norm[o] = '\0';
    free(*route);
    *route = norm;
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
static int split_host_port(const char *s, bool port_required, int default_port, char *host, size_t host_cap,
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
        return ydoc_fail(c, v, "a URL may not have a path (routes are per request), got %s", ydoc_describe(v, d, sizeof d));
    size_t alen = slash ? (size_t)(slash - authority) : strlen(authority);
    char auth[300], host[300];
    int port = 0;
    if (alen == 0 || alen >= sizeof auth)
        return ydoc_fail(c, v, "expected a URL like http://127.0.0.1:10006, got %s", ydoc_describe(v, d, sizeof d));
    memcpy(auth, authority, alen);
    auth[alen] = '\0';
    if (split_host_port(auth, false, 80, host, sizeof host, &port) != 0)
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
        int rc = parse_integer(c, item, 0, 1023, &value);
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

/* per_request: a size, or "learn" (learn from NVML, starting from the declared value). */
static int fp_per_request(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_memory_t *mem = field;
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "learn") == 0) {
        mem->learn = true;
        return 0;
    }
    if (v->type == YAML_SCALAR_NODE && !ydoc_is_null(v) && units_parse_size(ydoc_scalar_text(v), &mem->per_request) == 0)
        return 0;
    char d[DESCRIBE_MAX];
    return ydoc_fail(c, v, "expected a size like 12GiB, got %s", ydoc_describe(v, d, sizeof d));
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
    return set_string(c, v, field);
}

static const field_spec_t hook_fields[] = {
    {"method", fp_http_method, offsetof(config_hook_t, method), 0, 0, NULL},
    {"path", fp_http_path, offsetof(config_hook_t, path), 0, 0, NULL},
    {"timeout", fp_duration, offsetof(config_hook_t, timeout_ms), 1, 0, NULL},
};
static const section_t hook_section = SECTION(hook_fields);

/* unload/reload/clear_cache: a mapping sets the hook; null removes it. spec->min = default timeout. */
static int fp_hook(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_hook_t *hook = field;
    if (ydoc_is_null(v)) {
        free(hook->path);
        hook->path = NULL;
        hook->set = false;
        hook->timeout_ms = spec->min;
        char *post = strdup("POST");
        if (post == NULL)
            return ydoc_fail(c, v, "out of memory");
        free(hook->method);
        hook->method = post;
        return 0;
    }
    if (apply_mapping(c, v, &hook_section, hook) != 0)
        return -1;
    hook->set = true;
    return 0;
}

static const field_spec_t health_fields[] = {
    {"path", fp_http_path, offsetof(config_health_t, path), 0, 0, NULL},
    {"interval", fp_duration, offsetof(config_health_t, interval_ms), 1, 0, NULL},
    {"timeout", fp_duration, offsetof(config_health_t, timeout_ms), 1, 0, NULL},
    {"failures", fp_unsigned, offsetof(config_health_t, failures), 1, 1000, NULL},
};

static const field_spec_t memory_fields[] = {
    {"resident", fp_size, offsetof(config_memory_t, resident), 0, 0, NULL},
    {"per_request", fp_per_request, 0, 0, 0, NULL},
    {"learn", fp_bool, offsetof(config_memory_t, learn), 0, 0, NULL},
};

static const field_spec_t recycle_fields[] = {
    {"after_requests", fp_u64, offsetof(config_recycle_t, after_requests), 0, UINT64_MAX, NULL},
    {"max_growth", fp_size, offsetof(config_recycle_t, max_growth), 0, 0, NULL},
    {"hang_timeout", fp_duration, offsetof(config_recycle_t, hang_timeout_ms), 0, 0, NULL},
    {"on_oom", fp_bool, offsetof(config_recycle_t, on_oom), 0, 0, NULL},
};

/* status: 507 or [500, 507]; replaces the list. */
static int fp_statuses(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_detect_t *det = field;
    if (ydoc_is_null(v)) {
        free(det->statuses);
        det->statuses = NULL;
        det->n_statuses = 0;
        return 0;
    }
    bool single = v->type == YAML_SCALAR_NODE;
    if (!single && ydoc_need_sequence(c, v, "an HTTP status or a list of them", 1, STATUSES_MAX) != 0)
        return -1;
    size_t n = single ? 1 : ydoc_sequence_size(v);
    int *statuses = calloc(n, sizeof *statuses);
    if (statuses == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = single ? v : ydoc_sequence_item(c, v, i);
        size_t saved = single ? c->path_len : ydoc_path_push_index(c, i);
        uint64_t value;
        int rc = parse_integer(c, item, 100, 599, &value);
        ydoc_path_pop(c, saved);
        if (rc != 0) {
            free(statuses);
            return -1;
        }
        statuses[i] = (int)value;
    }
    free(det->statuses);
    det->statuses = statuses;
    det->n_statuses = n;
    return 0;
}

static int fp_regex(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_is_null(v))
        return fp_string_opt(c, v, field, spec);
    if (ydoc_need_scalar(c, v, "a regular expression") != 0)
        return -1;
    regex_t re;
    int rc = regcomp(&re, ydoc_scalar_text(v), REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
        char why[128], d[DESCRIBE_MAX];
        regerror(rc, &re, why, sizeof why);
        return ydoc_fail(c, v, "not a valid regular expression (%s): %s", why, ydoc_describe(v, d, sizeof d));
    }
    regfree(&re);
    return set_string(c, v, field);
}

static int fp_header_name(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_is_null(v))
        return fp_string_opt(c, v, field, spec);
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a header name") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (!all_chars_in(s, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        return ydoc_fail(c, v, "expected a header name like X-Oom, got %s", ydoc_describe(v, d, sizeof d));
    return set_string(c, v, field);
}

/* json: {path: /pointer, equals: value}; replaced whole; null removes it. */
static int parse_json_match(ctx_t *c, yaml_node_t *v, char **path, cJSON **equals)
{
    if (ydoc_is_null(v)) {
        free(*path);
        cJSON_Delete(*equals);
        *path = NULL;
        *equals = NULL;
        return 0;
    }
    if (ydoc_need_mapping(c, v, "a mapping {path: /pointer, equals: value}") != 0 || ydoc_check_mapping(c, v) != 0)
        return -1;
    yaml_node_t *path_node = NULL, *equals_node = NULL;
    for (size_t i = 0; i < ydoc_mapping_size(v); i++) {
        yaml_node_t *k = ydoc_pair_key(c, v, i);
        const char *key = ydoc_scalar_text(k);
        if (strcmp(key, "path") == 0) {
            path_node = ydoc_pair_value(c, v, i);
        } else if (strcmp(key, "equals") == 0) {
            equals_node = ydoc_pair_value(c, v, i);
        } else {
            size_t saved = ydoc_path_push_key(c, key);
            ydoc_fail(c, k, "unknown key \"%s\"", key);
            ydoc_path_pop(c, saved);
            return -1;
        }
    }
    if (path_node == NULL)
        return ydoc_fail(c, v, "path is required (a JSON pointer like /success)");
    if (equals_node == NULL)
        return ydoc_fail(c, v, "equals is required (the value that the pointer must hold)");
    size_t saved = ydoc_path_push_key(c, "path");
    char d[DESCRIBE_MAX];
    int rc = ydoc_need_scalar(c, path_node, "a JSON pointer like /success");
    if (rc == 0 && !json_pointer_valid(ydoc_scalar_text(path_node)))
        rc = ydoc_fail(c, path_node, "expected a JSON pointer like /success, got %s", ydoc_describe(path_node, d, sizeof d));
    ydoc_path_pop(c, saved);
    if (rc != 0)
        return -1;
    saved = ydoc_path_push_key(c, "equals");
    cJSON *value = yaml_to_json(c, equals_node, 0);
    ydoc_path_pop(c, saved);
    if (value == NULL)
        return -1;
    char *pointer = strdup(ydoc_scalar_text(path_node));
    if (pointer == NULL) {
        cJSON_Delete(value);
        return ydoc_fail(c, v, "out of memory");
    }
    free(*path);
    cJSON_Delete(*equals);
    *path = pointer;
    *equals = value;
    return 0;
}

static int fp_detect_json(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_detect_t *det = field;
    return parse_json_match(c, v, &det->json_path, &det->json_equals);
}

static const field_spec_t detect_fields[] = {
    {"status", fp_statuses, 0, 0, 0, NULL},
    {"body_matches", fp_regex, offsetof(config_detect_t, body_matches), 0, 0, NULL},
    {"json", fp_detect_json, 0, 0, 0, NULL},
    {"header", fp_header_name, offsetof(config_detect_t, header), 0, 0, NULL},
};
static const section_t detect_section = SECTION(detect_fields);

static void ladder_free(config_level_t *ladder, size_t n)
{
    for (size_t i = 0; ladder != NULL && i < n; i++)
        cJSON_Delete(ladder[i].set);
    free(ladder);
}

/* One ladder level: {set: {...}, per_request: size}; `set` becomes a JSON object (empty if absent). */
static int parse_level(ctx_t *c, yaml_node_t *v, config_level_t *level)
{
    if (ydoc_need_mapping(c, v, "a mapping {set: {...}, per_request: size}") != 0 || ydoc_check_mapping(c, v) != 0)
        return -1;
    if (ydoc_mapping_size(v) == 0)
        return ydoc_fail(c, v, "a ladder level needs set or per_request");
    for (size_t i = 0; i < ydoc_mapping_size(v); i++) {
        yaml_node_t *k = ydoc_pair_key(c, v, i), *val = ydoc_pair_value(c, v, i);
        const char *key = ydoc_scalar_text(k);
        size_t saved = ydoc_path_push_key(c, key);
        int rc = 0;
        if (strcmp(key, "set") == 0) {
            rc = ydoc_need_mapping(c, val, "a mapping of request fields like {steps: 12}");
            cJSON *set = rc == 0 ? yaml_to_json(c, val, 0) : NULL;
            if (set == NULL) {
                rc = -1;
            } else {
                cJSON_Delete(level->set);
                level->set = set;
            }
        } else if (strcmp(key, "per_request") == 0) {
            rc = parse_size(c, val, 0, &level->per_request);
            level->has_per_request = rc == 0;
        } else {
            rc = ydoc_fail(c, k, "unknown key \"%s\"", key);
        }
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    if (level->set == NULL && (level->set = cJSON_CreateObject()) == NULL)
        return ydoc_fail(c, v, "out of memory");
    return 0;
}

static int fp_ladder(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_degrade_t *deg = field;
    if (ydoc_is_null(v)) {
        ladder_free(deg->ladder, deg->n_ladder);
        deg->ladder = NULL;
        deg->n_ladder = 0;
        return 0;
    }
    if (ydoc_need_sequence(c, v, "a list of levels like [{set: {steps: 12}}]", 0, LADDER_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    config_level_t *ladder = calloc(n ? n : 1, sizeof *ladder);
    if (ladder == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t saved = ydoc_path_push_index(c, i);
        int rc = parse_level(c, ydoc_sequence_item(c, v, i), &ladder[i]);
        ydoc_path_pop(c, saved);
        if (rc != 0) {
            ladder_free(ladder, n);
            return -1;
        }
    }
    ladder_free(deg->ladder, deg->n_ladder);
    deg->ladder = n ? ladder : NULL;
    deg->n_ladder = n;
    if (n == 0)
        free(ladder);
    return 0;
}

static int fp_degrade_when(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"on_oom", "to_fit", NULL};
    int choice;
    if (parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(enum config_degrade_when *)field = choice == 0 ? DEGRADE_ON_OOM : DEGRADE_TO_FIT;
    return 0;
}

static const field_spec_t degrade_fields[] = {
    {"detect", fp_section, offsetof(config_degrade_t, detect), 0, 0, &detect_section},
    {"ladder", fp_ladder, 0, 0, 0, NULL},
    {"when", fp_degrade_when, offsetof(config_degrade_t, when), 0, 0, NULL},
};
static const section_t degrade_section = SECTION(degrade_fields);

static void detect_free(config_detect_t *det)
{
    free(det->statuses);
    free(det->body_matches);
    free(det->json_path);
    cJSON_Delete(det->json_equals);
    free(det->header);
    memset(det, 0, sizeof *det);
}

static void degrade_free(config_degrade_t *deg)
{
    detect_free(&deg->detect);
    ladder_free(deg->ladder, deg->n_ladder);
    memset(deg, 0, sizeof *deg);
}

static int fp_degrade(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_degrade_t *deg = field;
    if (ydoc_is_null(v)) {
        degrade_free(deg);
        return 0;
    }
    if (apply_mapping(c, v, &degrade_section, deg) != 0)
        return -1;
    deg->set = true;
    return 0;
}

static const char *const validate_kind_names[] = {"none", "glb", "ply", "png", "json", "cmd", NULL};

static int fp_validate_kind(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    int choice;
    if (parse_choice(c, v, validate_kind_names, &choice) != 0)
        return -1;
    ((config_validate_t *)field)->kind = (enum config_validate_kind)choice;
    return 0;
}

static int fp_validate_cmd(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    if (ydoc_is_null(v)) {
        free_argv(val->cmd, val->n_cmd);
        val->cmd = NULL;
        val->n_cmd = 0;
        return 0;
    }
    return parse_argv(c, v, &val->cmd, &val->n_cmd);
}

static int fp_validate_json(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    return parse_json_match(c, v, &val->json_path, &val->json_equals);
}

static const field_spec_t validate_fields[] = {
    {"kind", fp_validate_kind, 0, 0, 0, NULL},
    {"min_bytes", fp_size, offsetof(config_validate_t, min_bytes), 0, 0, NULL},
    {"cmd", fp_validate_cmd, 0, 0, 0, NULL},
    {"timeout", fp_duration, offsetof(config_validate_t, timeout_ms), 1, 0, NULL},
    {"json", fp_validate_json, 0, 0, 0, NULL},
};
static const section_t validate_section = SECTION(validate_fields);

static void validate_reset(config_validate_t *val)
{
    free_argv(val->cmd, val->n_cmd);
    free(val->json_path);
    cJSON_Delete(val->json_equals);
    memset(val, 0, sizeof *val);
    val->kind = VALIDATE_NONE;
    val->timeout_ms = 30000;
}

/*
 * validate: glb | ply | png | json | none, or a mapping {kind, min_bytes, cmd, timeout, json}.
 * A mapping with cmd and no kind means kind: cmd; cmd with another kind is an error.
 */
static int fp_validate(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    if (ydoc_is_null(v)) {
        validate_reset(val);
        return 0;
    }
    if (v->type == YAML_SCALAR_NODE)
        return fp_validate_kind(c, v, val, spec);
    if (v->type == YAML_SEQUENCE_NODE) {
        char d[DESCRIBE_MAX];
        return ydoc_fail(c, v, "expected glb, ply, png, json, none or a mapping {kind, min_bytes, cmd, ...}, got %s",
                         ydoc_describe(v, d, sizeof d));
    }
    if (apply_mapping(c, v, &validate_section, val) != 0)
        return -1;
    yaml_node_t *kind = ydoc_find_value(c, v, "kind"), *cmd = ydoc_find_value(c, v, "cmd");
    if (cmd != NULL && !ydoc_is_null(cmd)) {
        if (kind == NULL) {
            val->kind = VALIDATE_CMD;
        } else if (val->kind != VALIDATE_CMD) {
            size_t saved = ydoc_path_push_key(c, "cmd");
            ydoc_fail(c, cmd, "cmd is only used with kind: cmd (or without kind)");
            ydoc_path_pop(c, saved);
            return -1;
        }
    }
    return 0;
}

static int fp_retry(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"safe", "never", NULL};
    int choice;
    if (parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 0;
    return 0;
}

static const section_t health_section = SECTION(health_fields);
static const section_t memory_section = SECTION(memory_fields);
static const section_t recycle_section = SECTION(recycle_fields);

static const field_spec_t model_fields[] = {
    {"route", fp_route, offsetof(model_config_t, route), 0, 0, NULL},
    {"strip", fp_bool, offsetof(model_config_t, strip), 0, 0, NULL},
    {"aliases", fp_aliases, 0, 0, 0, NULL},
    {"cmd", fp_model_cmd, 0, 0, 0, NULL},
    {"env", fp_env, 0, 0, 0, NULL},
    {"cwd", fp_string_opt, offsetof(model_config_t, cwd), 0, 0, NULL},
    {"url", fp_url, 0, 0, 0, NULL},
    {"health", fp_section, offsetof(model_config_t, health), 0, 0, &health_section},
    {"startup_timeout", fp_duration, offsetof(model_config_t, startup_timeout_ms), 1, 0, NULL},
    {"stop_timeout", fp_duration, offsetof(model_config_t, stop_timeout_ms), 0, 0, NULL},
    {"gpus", fp_gpus, 0, 0, 0, NULL},
    {"memory", fp_section, offsetof(model_config_t, memory), 0, 0, &memory_section},
    {"concurrency", fp_unsigned, offsetof(model_config_t, concurrency), 1, 1024, NULL},
    {"instances", fp_unsigned, offsetof(model_config_t, instances), 1, 64, NULL},
    {"queue_max", fp_unsigned, offsetof(model_config_t, queue_max), 1, 1000000, NULL},
    {"deadline", fp_duration, offsetof(model_config_t, deadline_ms), 1, 0, NULL},
    {"priority", fp_int, offsetof(model_config_t, priority), 0, 9, NULL},
    {"keep_alive", fp_keep_alive, offsetof(model_config_t, keep_alive_ms), 0, 0, NULL},
    {"unload", fp_hook, offsetof(model_config_t, unload), 30000, 0, NULL},
    {"reload", fp_hook, offsetof(model_config_t, reload), 60000, 0, NULL},
    {"clear_cache", fp_hook, offsetof(model_config_t, clear_cache), 30000, 0, NULL},
    {"recycle", fp_section, offsetof(model_config_t, recycle), 0, 0, &recycle_section},
    {"degrade", fp_degrade, offsetof(model_config_t, degrade), 0, 0, NULL},
    {"validate", fp_validate, offsetof(model_config_t, validate), 0, 0, NULL},
    {"retry", fp_retry, offsetof(model_config_t, retry_safe), 0, 0, NULL},
};
static const section_t model_section = SECTION(model_fields);

/* ------------------------------------------------------------------------------------ */
/* Top-level keys                                                                        */
/* ------------------------------------------------------------------------------------ */

static int fp_listen(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    char d[DESCRIBE_MAX], host[300];
    int port = 0;
    if (ydoc_need_scalar(c, v, "host:port like 127.0.0.1:8800") != 0)
        return -1;
    if (split_host_port(ydoc_scalar_text(v), true, 0, host, sizeof host, &port) != 0)
        return ydoc_fail(c, v, "expected host:port like 127.0.0.1:8800 or [::1]:8800, got %s", ydoc_describe(v, d, sizeof d));
    struct in_addr a4;
    bool bracketed = ydoc_scalar_text(v)[0] == '[';
    const char *stored = host;
    if (strcmp(host, "localhost") == 0)
        stored = "127.0.0.1";
    else if (!bracketed && inet_pton(AF_INET, host, &a4) != 1)
        return ydoc_fail(c, v, "the listen host must be an IP address or localhost, got %s", ydoc_describe(v, d, sizeof d));
    char *copy = ydoc_dup_or_fail(c, v, stored);
    if (copy == NULL)
        return -1;
    free(cfg->listen_host);
    cfg->listen_host = copy;
    cfg->listen_port = port;
    return 0;
}

static int fp_log_format(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"json", "text", NULL};
    int choice;
    if (parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(int *)field = log_format_parse(names[choice]);
    return 0;
}

static int fp_log_level(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"debug", "info", "warn", "error", NULL};
    int choice;
    if (parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(int *)field = log_level_parse(names[choice]);
    return 0;
}

/* gpu.devices: all, or a list of indexes and/or UUID strings. */
static int fp_devices(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    free(cfg->gpu.devices);
    free_argv(cfg->gpu.device_uuids, cfg->gpu.n_device_uuids);
    cfg->gpu.devices = NULL;
    cfg->gpu.device_uuids = NULL;
    cfg->gpu.n_devices = cfg->gpu.n_device_uuids = 0;
    if (ydoc_is_null(v) || (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "all") == 0))
        return 0;
    if (ydoc_need_sequence(c, v, "all or a list of GPU indexes / UUIDs", 1, GPUS_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    cfg->gpu.devices = calloc(n, sizeof *cfg->gpu.devices);
    cfg->gpu.device_uuids = calloc(n + 1, sizeof *cfg->gpu.device_uuids);
    if (cfg->gpu.devices == NULL || cfg->gpu.device_uuids == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        int rc = ydoc_need_scalar(c, item, "a GPU index or UUID");
        const char *s = rc == 0 ? ydoc_scalar_text(item) : "";
        if (rc == 0 && all_chars_in(s, "0123456789")) {
            uint64_t index;
            rc = parse_integer(c, item, 0, 1023, &index);
            for (size_t j = 0; rc == 0 && j < cfg->gpu.n_devices; j++)
                if (cfg->gpu.devices[j] == (int)index)
                    rc = ydoc_fail(c, item, "GPU %d is listed twice", (int)index);
            if (rc == 0)
                cfg->gpu.devices[cfg->gpu.n_devices++] = (int)index;
        } else if (rc == 0) {
            for (const char *p = s; rc == 0 && *p; p++)
                if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                    rc = ydoc_fail(c, item, "a GPU UUID may not contain spaces or control characters");
            for (size_t j = 0; rc == 0 && j < cfg->gpu.n_device_uuids; j++)
                if (strcmp(cfg->gpu.device_uuids[j], s) == 0)
                    rc = ydoc_fail(c, item, "GPU %s is listed twice", s);
            if (rc == 0) {
                char *uuid = ydoc_dup_or_fail(c, item, s);
                if (uuid == NULL)
                    rc = -1;
                else
                    cfg->gpu.device_uuids[cfg->gpu.n_device_uuids++] = uuid;
            }
        }
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    if (cfg->gpu.n_devices == 0) {
        free(cfg->gpu.devices);
        cfg->gpu.devices = NULL;
    }
    if (cfg->gpu.n_device_uuids == 0) {
        free(cfg->gpu.device_uuids);
        cfg->gpu.device_uuids = NULL;
    }
    return 0;
}

static int fp_foreign_usage(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"measure", "ignore", NULL};
    int choice;
    if (parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 0;
    return 0;
}

static int fp_defaults(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (!ydoc_is_null(v) && ydoc_need_mapping(c, v, "a mapping of model keys") != 0)
        return -1;
    c->defaults_node = ydoc_is_null(v) ? NULL : v;
    return 0;
}

static int fp_models(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    c->models_node = v;
    return 0;
}

static const field_spec_t log_fields[] = {
    {"format", fp_log_format, offsetof(config_t, log_format), 0, 0, NULL},
    {"level", fp_log_level, offsetof(config_t, log_level), 0, 0, NULL},
};

static const field_spec_t gpu_fields[] = {
    {"nvml_library", fp_string, offsetof(config_t, gpu.nvml_library), 0, 0, NULL},
    {"devices", fp_devices, 0, 0, 0, NULL},
    {"headroom", fp_size, offsetof(config_t, gpu.headroom), 0, 0, NULL},
    {"poll", fp_duration, offsetof(config_t, gpu.poll_ms), 1, 0, NULL},
    {"foreign_usage", fp_foreign_usage, offsetof(config_t, gpu.foreign_measure), 0, 0, NULL},
};

static const field_spec_t limits_fields[] = {
    {"max_body", fp_size, offsetof(config_t, limits.max_body), 1, 0, NULL},
    {"max_header", fp_size, offsetof(config_t, limits.max_header), 1024, 0, NULL},
    {"max_header_count", fp_unsigned, offsetof(config_t, limits.max_header_count), 1, 10000, NULL},
    {"max_connections", fp_unsigned, offsetof(config_t, limits.max_connections), 1, 1000000, NULL},
    {"header_timeout", fp_duration, offsetof(config_t, limits.header_timeout_ms), 1, 0, NULL},
    {"queue_max", fp_unsigned, offsetof(config_t, limits.queue_max), 1, 10000000, NULL},
    {"drain_timeout", fp_duration, offsetof(config_t, limits.drain_timeout_ms), 0, 0, NULL},
};

static const field_spec_t jobs_fields[] = {
    {"results_max_bytes", fp_size, offsetof(config_t, jobs.results_max_bytes), 0, 0, NULL},
    {"results_ttl", fp_duration, offsetof(config_t, jobs.results_ttl_ms), 1, 0, NULL},
    {"min_free_disk", fp_size, offsetof(config_t, jobs.min_free_disk), 0, 0, NULL},
    {"max_attempts", fp_unsigned, offsetof(config_t, jobs.max_attempts), 1, 100, NULL},
    {"max_active", fp_unsigned, offsetof(config_t, jobs.max_active), 1, 10000000, NULL},
    {"records_ttl", fp_duration, offsetof(config_t, jobs.records_ttl_ms), 1000, 0, NULL},
};

static const section_t log_section = SECTION(log_fields);
static const section_t gpu_section = SECTION(gpu_fields);
static const section_t limits_section = SECTION(limits_fields);
static const section_t jobs_section = SECTION(jobs_fields);

static const field_spec_t top_fields[] = {
    {"listen", fp_listen, 0, 0, 0, NULL},
    {"admin_token_file", fp_string_opt, offsetof(config_t, admin_token_file), 0, 0, NULL},
    {"state_dir", fp_string, offsetof(config_t, state_dir), 0, 0, NULL},
    {"log", fp_section, 0, 0, 0, &log_section},
    {"gpu", fp_section, 0, 0, 0, &gpu_section},
    {"limits", fp_section, 0, 0, 0, &limits_section},
    {"jobs", fp_section, 0, 0, 0, &jobs_section},
    {"defaults", fp_defaults, 0, 0, 0, NULL},
    {"models", fp_models, 0, 0, 0, NULL},
};
static const section_t top_section = SECTION(top_fields);

/* ------------------------------------------------------------------------------------ */
/* Built-in defaults and freeing                                                         */
/* ------------------------------------------------------------------------------------ */

static void hook_init(config_hook_t *hook, uint64_t timeout_ms)
{
    hook->set = false;
    hook->method = strdup("POST");
    hook->path = NULL;
    hook->timeout_ms = timeout_ms;
}

/* The built-in model; returns -1 when out of memory (the model is still freeable). */
static int model_init_builtin(model_config_t *m)
{
    memset(m, 0, sizeof *m);
    m->strip = true;
    m->health.path = strdup("/health");
    m->health.interval_ms = 5000;
    m->health.timeout_ms = 2000;
    m->health.failures = 3;
    m->startup_timeout_ms = 5 * 60 * 1000;
    m->stop_timeout_ms = 10 * 1000;
    m->concurrency = 1;
    m->instances = 1;
    m->queue_max = 64;
    m->deadline_ms = 60 * 1000;
    m->priority = 5;
    m->keep_alive_ms = 10 * 60 * 1000;
    hook_init(&m->unload, 30000);
    hook_init(&m->reload, 60000);
    hook_init(&m->clear_cache, 30000);
    m->degrade.when = DEGRADE_ON_OOM;
    m->validate.kind = VALIDATE_NONE;
    m->validate.timeout_ms = 30000;
    m->retry_safe = false;
    bool ok = m->health.path && m->unload.method && m->reload.method && m->clear_cache.method;
    return ok ? 0 : -1;
}

static void model_free(model_config_t *m)
{
    free(m->name);
    free(m->route);
    free_argv(m->aliases, m->n_aliases);
    free_argv(m->cmd, m->n_cmd);
    for (size_t i = 0; i < m->n_env; i++) {
        free(m->env[i].key);
        free(m->env[i].value);
    }
    free(m->env);
    free(m->cwd);
    free(m->url);
    free(m->url_host);
    free(m->health.path);
    free(m->gpus);
    free(m->unload.method);
    free(m->unload.path);
    free(m->reload.method);
    free(m->reload.path);
    free(m->clear_cache.method);
    free(m->clear_cache.path);
    degrade_free(&m->degrade);
    validate_reset(&m->validate);
}

static void config_free(config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n_models; i++)
        model_free(&cfg->models[i]);
    free(cfg->models);
    free(cfg->path);
    free(cfg->listen_host);
    free(cfg->admin_token_file);
    free(cfg->admin_token);
    free(cfg->state_dir);
    free(cfg->gpu.nvml_library);
    free(cfg->gpu.devices);
    free_argv(cfg->gpu.device_uuids, cfg->gpu.n_device_uuids);
    free(cfg);
}

static config_t *config_new_builtin(void)
{
    config_t *cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    cfg->refs = 1;
    cfg->listen_host = strdup("127.0.0.1");
    cfg->listen_port = 8800;
    cfg->state_dir = strdup("./var");
    cfg->log_format = LOG_FORMAT_JSON;
    cfg->log_level = LOG_INFO;
    cfg->gpu.nvml_library = strdup("libnvidia-ml.so.1");
    cfg->gpu.headroom = 512ULL << 20;
    cfg->gpu.poll_ms = 100;
    cfg->gpu.foreign_measure = true;
    cfg->limits.max_body = 64ULL << 20;
    cfg->limits.max_header = 16ULL << 10;
    cfg->limits.max_header_count = 100;
    cfg->limits.max_connections = 20000;
    cfg->limits.header_timeout_ms = 10 * 1000;
    cfg->limits.queue_max = 1024;
    cfg->limits.drain_timeout_ms = 60 * 1000;
    cfg->jobs.results_max_bytes = 20ULL << 30;
    cfg->jobs.results_ttl_ms = 24ULL * 3600 * 1000;
    cfg->jobs.min_free_disk = 2ULL << 30;
    cfg->jobs.max_attempts = 3;
    cfg->jobs.max_active = 64;
    cfg->jobs.records_ttl_ms = 7ULL * 24 * 3600 * 1000;
    if (cfg->listen_host == NULL || cfg->state_dir == NULL || cfg->gpu.nvml_library == NULL) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* ------------------------------------------------------------------------------------ */
/* Whole-config checks                                                                   */
/* ------------------------------------------------------------------------------------ */

/* dir + "/" + rel for a relative path ("./" prefixes dropped); absolute paths copied. */
static char *resolve_path(const char *dir, const char *path)
{
    if (path[0] == '/' || dir == NULL || dir[0] == '\0')
        return strdup(path);
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    if (strcmp(path, ".") == 0 || path[0] == '\0')
        return strdup(dir);
    size_t dir_len = strlen(dir);
    bool has_slash = dir[dir_len - 1] == '/';
    size_t n = dir_len + 1 + strlen(path) + 1;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s%s%s", dir, has_slash ? "" : "/", path);
    return out;
}

/* Reads, trims and checks admin_token_file (resolved against the config's directory). */
static int load_admin_token(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    if (cfg->admin_token_file == NULL)
        return 0;
    yaml_node_t *node = ydoc_find_value(c, root, "admin_token_file");
    ydoc_path_reset(c);
    ydoc_path_push_key(c, "admin_token_file");
    char *resolved = resolve_path(c->dir, cfg->admin_token_file);
    if (resolved == NULL)
        return ydoc_fail(c, node, "out of memory");
    free(cfg->admin_token_file);
    cfg->admin_token_file = resolved;
    int fd = open(resolved, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ydoc_fail(c, node, "cannot read %s: %s", resolved, strerror(errno));
    char buf[TOKEN_FILE_MAX + 1];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof buf - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved_errno = errno;
            close(fd);
            return ydoc_fail(c, node, "cannot read %s: %s", resolved, strerror(saved_errno));
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof buf) {
            close(fd);
            return ydoc_fail(c, node, "%s is larger than %d bytes; it should hold just the token", resolved,
                             TOKEN_FILE_MAX);
        }
    }
    close(fd);
    size_t start = 0;
    while (start < len && isspace((unsigned char)buf[start]))
        start++;
    while (len > start && isspace((unsigned char)buf[len - 1]))
        len--;
    if (len == start)
        return ydoc_fail(c, node, "%s is empty; it must hold the admin token", resolved);
    for (size_t i = start; i < len; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            return ydoc_fail(c, node, "%s holds control characters; it must hold just the token", resolved);
    cfg->admin_token = strndup(buf + start, len - start);
    if (cfg->admin_token == NULL)
        return ydoc_fail(c, node, "out of memory");
    return 0;
}

static bool listen_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcmp(host, "localhost") == 0;
}

/* Where a model key was last set: the model's own mapping, else `defaults:`. Sets the path. */
static yaml_node_t *model_key_node(ctx_t *c, const char *model, yaml_node_t *model_node, const char *key)
{
    ydoc_path_reset(c);
    yaml_node_t *v = ydoc_find_value(c, model_node, key);
    if (v != NULL) {
        ydoc_path_append(c, "models.%s.%s", model, key);
        return v;
    }
    v = ydoc_find_value(c, c->defaults_node, key);
    if (v != NULL) {
        ydoc_path_append(c, "defaults.%s", key);
        return v;
    }
    ydoc_path_append(c, "models.%s", model);
    return model_node;
}

static int check_model(ctx_t *c, model_config_t *m, yaml_node_t *key_node, yaml_node_t *model_node)
{
    yaml_node_t *where = model_node && !ydoc_is_null(model_node) ? model_node : key_node;
    if (m->cmd == NULL && m->url == NULL) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", m->name);
        return ydoc_fail(c, key_node, "needs cmd (a server vramd starts) or url (a server already running)");
    }
    if (m->cmd != NULL && m->url != NULL) {
        yaml_node_t *n = model_key_node(c, m->name, where, "url");
        return ydoc_fail(c, n, "cmd and url cannot both be set (cmd: vramd starts the server; url: it is already running)");
    }
    struct {
        const char *key;
        config_hook_t *hook;
    } hooks[] = {{"unload", &m->unload}, {"reload", &m->reload}, {"clear_cache", &m->clear_cache}};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (hooks[i].hook->set && hooks[i].hook->path == NULL) {
            yaml_node_t *n = model_key_node(c, m->name, where, hooks[i].key);
            return ydoc_fail(c, n, "path is required (like /unload_models/)");
        }
    }
    if (m->validate.kind == VALIDATE_CMD && m->validate.n_cmd == 0) {
        yaml_node_t *n = model_key_node(c, m->name, where, "validate");
        return ydoc_fail(c, n, "kind cmd needs cmd: [program, args...]");
    }
    return 0;
}

/* Names and aliases are one namespace; routes are unique. */
static int check_names_and_routes(ctx_t *c, config_t *cfg, yaml_node_t **model_nodes, yaml_node_t **key_nodes)
{
    for (size_t i = 0; i < cfg->n_models; i++) {
        model_config_t *m = &cfg->models[i];
        yaml_node_t *where = model_nodes[i] && !ydoc_is_null(model_nodes[i]) ? model_nodes[i] : key_nodes[i];
        for (size_t a = 0; a < m->n_aliases; a++) {
            const char *alias = m->aliases[a];
            const char *clash = NULL, *clash_kind = NULL;
            for (size_t j = 0; j < cfg->n_models && clash == NULL; j++) {
                if (strcmp(cfg->models[j].name, alias) == 0) {
                    clash = cfg->models[j].name;
                    clash_kind = "the name of model";
                }
                size_t limit = j < i ? cfg->models[j].n_aliases : (j == i ? a : 0);
                for (size_t b = 0; b < limit && clash == NULL; b++) {
                    if (strcmp(cfg->models[j].aliases[b], alias) == 0) {
                        clash = cfg->models[j].name;
                        clash_kind = "already an alias of model";
                    }
                }
            }
            if (clash != NULL) {
                yaml_node_t *list = model_key_node(c, m->name, where, "aliases");
                yaml_node_t *item = list;
                if (list->type == YAML_SEQUENCE_NODE && a < ydoc_sequence_size(list)) {
                    item = ydoc_sequence_item(c, list, a);
                    ydoc_path_push_index(c, a);
                }
                return ydoc_fail(c, item, "alias \"%s\" is %s \"%s\"", alias, clash_kind, clash);
            }
        }
        for (size_t j = 0; m->route != NULL && j < i; j++) {
            if (cfg->models[j].route != NULL && strcmp(cfg->models[j].route, m->route) == 0) {
                yaml_node_t *n = model_key_node(c, m->name, where, "route");
                return ydoc_fail(c, n, "route %s is already used by model \"%s\"", m->route, cfg->models[j].name);
            }
        }
    }
    return 0;
}

static bool model_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > MODEL_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static int parse_models(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    /* `defaults:` is checked once on its own, so its errors show even without models. */
    if (c->defaults_node != NULL) {
        model_config_t scratch;
        int ok = model_init_builtin(&scratch);
        ydoc_path_reset(c);
        ydoc_path_push_key(c, "defaults");
        int rc = ok == 0 ? apply_mapping(c, c->defaults_node, &model_section, &scratch)
                         : ydoc_fail(c, c->defaults_node, "out of memory");
        model_free(&scratch);
        if (rc != 0)
            return -1;
    }
    ydoc_path_reset(c);
    ydoc_path_push_key(c, "models");
    yaml_node_t *models = c->models_node;
    if (models == NULL || ydoc_is_null(models))
        return ydoc_fail(c, models ? models : root, "at least one model is required");
    if (ydoc_need_mapping(c, models, "a mapping of model names to models") != 0 || ydoc_check_mapping(c, models) != 0)
        return -1;
    size_t n = ydoc_mapping_size(models);
    if (n == 0)
        return ydoc_fail(c, models, "at least one model is required");
    if (n > MODELS_MAX)
        return ydoc_fail(c, models, "too many models (%zu, at most %d)", n, MODELS_MAX);
    cfg->models = calloc(n, sizeof *cfg->models);
    yaml_node_t **model_nodes = calloc(n, sizeof *model_nodes);
    yaml_node_t **key_nodes = calloc(n, sizeof *key_nodes);
    int rc = 0;
    if (cfg->models == NULL || model_nodes == NULL || key_nodes == NULL)
        rc = ydoc_fail(c, models, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        yaml_node_t *k = ydoc_pair_key(c, models, i), *v = ydoc_pair_value(c, models, i);
        const char *name = ydoc_scalar_text(k);
        key_nodes[i] = k;
        model_nodes[i] = v;
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", name);
        if (!model_name_ok(name, k->data.scalar.length)) {
            rc = ydoc_fail(c, k, "a model name is 1 to %d of A-Z a-z 0-9 . _ -", MODEL_NAME_MAX);
            break;
        }
        model_config_t *m = &cfg->models[i];
        cfg->n_models = i + 1;
        if (model_init_builtin(m) != 0 || (m->name = strdup(name)) == NULL) {
            rc = ydoc_fail(c, k, "out of memory");
            break;
        }
        if (c->defaults_node != NULL) {
            ydoc_path_reset(c);
            ydoc_path_push_key(c, "defaults");
            rc = apply_mapping(c, c->defaults_node, &model_section, m);
            ydoc_path_reset(c);
            ydoc_path_append(c, "models.%s", name);
        }
        if (rc == 0 && !ydoc_is_null(v) && ydoc_need_mapping(c, v, "a mapping of model keys") != 0)
            rc = -1;
        if (rc == 0)
            rc = apply_mapping(c, v, &model_section, m);
        if (rc == 0)
            rc = check_model(c, m, k, v);
    }
    if (rc == 0)
        rc = check_names_and_routes(c, cfg, model_nodes, key_nodes);
    free(model_nodes);
    free(key_nodes);
    return rc;
}

static int check_top(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    if (load_admin_token(c, cfg, root) != 0)
        return -1;
    if (!listen_is_loopback(cfg->listen_host) && cfg->admin_token == NULL) {
        yaml_node_t *node = ydoc_find_value(c, root, "listen");
        ydoc_path_reset(c);
        ydoc_path_push_key(c, "listen");
        return ydoc_fail(c, node ? node : root,
                         "%s is not a loopback address, so admin_token_file is required (admin routes would be open to the network)",
                         cfg->listen_host);
    }
    char *state_dir = resolve_path(c->dir, cfg->state_dir);
    if (state_dir == NULL)
        return ydoc_fail(c, root, "out of memory");
    free(cfg->state_dir);
    cfg->state_dir = state_dir;
    const char *nvml_override = getenv("VRAMD_NVML_LIBRARY");
    if (nvml_override != NULL && nvml_override[0] != '\0') {
        char *copy = strdup(nvml_override);
        if (copy == NULL)
            return ydoc_fail(c, root, "out of memory");
        free(cfg->gpu.nvml_library);
        cfg->gpu.nvml_library = copy;
    }
    return 0;
}

/* jobs: max_active within limits.queue_max (an explicit value must fit; the default is clamped),
 * records kept at least as long as their results. */
static int check_jobs(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    yaml_node_t *jobs = ydoc_find_value(c, root, "jobs");
    if (cfg->jobs.max_active > cfg->limits.queue_max) {
        yaml_node_t *node = ydoc_find_value(c, jobs, "max_active");
        if (node == NULL) {
            cfg->jobs.max_active = cfg->limits.queue_max;
        } else {
            ydoc_path_reset(c);
            ydoc_path_append(c, "jobs.max_active");
            return ydoc_fail(c, node, "%u is more than limits.queue_max (%u)", cfg->jobs.max_active,
                             cfg->limits.queue_max);
        }
    }
    if (cfg->jobs.results_max_bytes == 0) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "jobs.results_max_bytes");
        return ydoc_fail(c, ydoc_find_value(c, jobs, "results_max_bytes"), "must be more than 0 (it bounds the store and every result)");
    }
    if (cfg->jobs.records_ttl_ms < cfg->jobs.results_ttl_ms) {
        yaml_node_t *node = ydoc_find_value(c, jobs, "records_ttl");
        ydoc_path_reset(c);
        ydoc_path_append(c, node != NULL ? "jobs.records_ttl" : "jobs.results_ttl");
        if (node == NULL)
            node = ydoc_find_value(c, jobs, "results_ttl");
        char records[32], results[32];
        units_format_duration(cfg->jobs.records_ttl_ms, records, sizeof records);
        units_format_duration(cfg->jobs.results_ttl_ms, results, sizeof results);
        return ydoc_fail(c, node != NULL ? node : root,
                         "records_ttl (%s) must be at least results_ttl (%s): a stored result needs its job record",
                         records, results);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Entry points                                                                          */
/* ------------------------------------------------------------------------------------ */

/* The whole parse, with relative paths resolved against dir. */
static config_t *parse_in_dir(const char *text, size_t len, const char *name, const char *dir, char *err,
                              size_t errlen)
{
    ctx_t c = {.name = name, .dir = dir, .err = err, .errlen = errlen, .json_values_left = JSON_VALUES_MAX};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (len > CONFIG_FILE_MAX) {
        ydoc_fail_at_line(&c, 0, 0, "the configuration is larger than %u bytes", CONFIG_FILE_MAX);
        return NULL;
    }
    yaml_document_t doc;
    if (ydoc_check_nesting(&c, text, len) != 0 || ydoc_load_document(&c, text, len, &doc) != 0)
        return NULL;
    c.doc = &doc;
    config_t *cfg = config_new_builtin();
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = 0;
    if (cfg == NULL)
        rc = ydoc_fail_at_line(&c, 0, 0, "out of memory");
    else if ((cfg->path = strdup(name)) == NULL)
        rc = ydoc_fail_at_line(&c, 0, 0, "out of memory");
    else if (root == NULL)
        rc = ydoc_fail_at_line(&c, 0, 0, "the configuration is empty (at least one model is required)");
    else if (root->type != YAML_MAPPING_NODE)
        rc = ydoc_need_mapping(&c, root, "a mapping of keys (listen, gpu, models, ...) at the top level");
    if (rc == 0)
        rc = apply_mapping(&c, root, &top_section, cfg);
    if (rc == 0)
        rc = parse_models(&c, cfg, root);
    if (rc == 0)
        rc = check_top(&c, cfg, root);
    if (rc == 0)
        rc = check_jobs(&c, cfg, root);
    yaml_document_delete(&doc);
    if (rc != 0) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* The directory part of a path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b.yaml" -> "/". */
static void dir_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

config_t *config_parse(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    if (name == NULL)
        name = "config";
    char dir[PATH_MAX];
    dir_of(name, dir, sizeof dir);
    return parse_in_dir(text, len, name, dir, err, errlen);
}

/* Reads a whole file of at most CONFIG_FILE_MAX bytes; 0, or an errno value (text freed). */
static int read_config_file(int fd, char **text_out, size_t *len_out)
{
    size_t cap = 64 * 1024, len = 0;
    char *text = malloc(cap);
    if (text == NULL)
        return ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap > CONFIG_FILE_MAX) {
                free(text);
                return EFBIG;
            }
            char *grown = realloc(text, cap * 2);
            if (grown == NULL) {
                free(text);
                return ENOMEM;
            }
            text = grown;
            cap *= 2;
        }
        ssize_t n = read(fd, text + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved_errno = errno;
            free(text);
            return saved_errno;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *text_out = text;
    *len_out = len;
    return 0;
}

config_t *config_load(const char *path, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t len = 0;
    char *text = NULL;
    int read_errno = read_config_file(fd, &text, &len);
    close(fd);
    if (read_errno != 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: cannot read: %s", path,
                     read_errno == EFBIG ? "the file is too large for a configuration" : strerror(read_errno));
        return NULL;
    }
    /* Relative paths in the file are relative to its directory, made absolute when possible
     * so that they still hold if the daemon changes directory. */
    char dir[PATH_MAX], real_dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    const char *use_dir = realpath(dir, real_dir) != NULL ? real_dir : dir;
    config_t *cfg = parse_in_dir(text, len, path, use_dir, err, errlen);
    free(text);
    return cfg;
}

config_t *config_ref(config_t *c)
{
    if (c != NULL)
        c->refs++;
    return c;
}

void config_unref(config_t *c)
{
    if (c != NULL && --c->refs <= 0)
        config_free(c);
}

const model_config_t *config_find_model(const config_t *c, const char *name_or_alias)
{
    if (c == NULL || name_or_alias == NULL)
        return NULL;
    for (size_t i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i].name, name_or_alias) == 0)
            return &c->models[i];
    for (size_t i = 0; i < c->n_models; i++)
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            if (strcmp(c->models[i].aliases[a], name_or_alias) == 0)
                return &c->models[i];
    return NULL;
}
