/*
 * fields: the key-table machinery and the scalar parsers every section uses.
 *
 * cfg_apply_mapping() walks a mapping against a section's table (field_spec_t) and calls
 * each key's parser on the field at its offset; the cfg_fp_* parsers read one value kind
 * (string, HTTP path, bool, integers within [min, max], size, duration, a route);
 * cfg_parse_* are the same checks for callers that are not table entries,
 * cfg_parse_argv() reads a list of words (a model's cmd, a validate cmd) that
 * cfg_free_argv() frees, cfg_parse_string_list() a list of scalars each checked by its
 * caller's function (alias_of targets, allowed_hosts), and cfg_parse_aliases() a list of
 * names (a model's or an alias_of entry's aliases).
 * Invariants: an unknown key is an error (naming the closest known key, when one is
 * within an edit distance of 2, of 1 for keys of up to 4 characters); a mapping's keys are
 * all walked, each reported on its own (a failed one leaves its field as it was); a parser returns 0
 * or -1 after ydoc_fail(), and a string field is replaced only once its new value is
 * copied, so the struct stays freeable; applying a mapping sets only the keys it names
 * (null applies nothing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"
#include "config/config_int.h"

void cfg_free_argv(char **argv, size_t n)
{
    if (argv == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    free(argv);
}

/* A list of strings (each a scalar, stringified as written) into argv[0..n-1] + NULL. */
int cfg_parse_argv(ctx_t *c, yaml_node_t *v, char ***argv, size_t *n_argv)
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
        cfg_free_argv(words, n);
        return -1;
    }
    cfg_free_argv(*argv, *n_argv);
    *argv = words;
    *n_argv = n;
    return 0;
}

/* Levenshtein distance between two keys ((size_t)-1 past 64 characters). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* An unknown key's error, with the closest known key of the section (edit distance <= 2). */
static int unknown_key(ctx_t *c, yaml_node_t *k, const section_t *section, const char *key)
{
    const char *best = NULL;
    size_t best_distance = strlen(key) <= 4 ? 2 : 3; /* "foo" is not a typo of "log" */
    for (size_t f = 0; f < section->n_fields; f++) {
        size_t d = edit_distance(key, section->fields[f].key);
        if (d < best_distance) {
            best_distance = d;
            best = section->fields[f].key;
        }
    }
    if (best != NULL)
        return ydoc_fail(c, k, "unknown key \"%s\" (did you mean \"%s\"?)", key, best);
    return ydoc_fail(c, k, "unknown key \"%s\"", key);
}

/* Applies a mapping of known keys onto base; null = nothing to apply. */
int cfg_apply_mapping(ctx_t *c, yaml_node_t *map, const section_t *section, void *base)
{
    if (ydoc_is_null(map))
        return 0;
    if (ydoc_need_mapping(c, map, "a mapping") != 0 || ydoc_check_mapping(c, map) != 0)
        return -1;
    int failed = 0;
    for (size_t i = 0; i < ydoc_mapping_size(map); i++) {
        ydoc_unit_begin(c); /* each key is checked, and reported, on its own */
        yaml_node_t *k = ydoc_pair_key(c, map, i);
        const char *key = ydoc_scalar_text(k);
        const field_spec_t *spec = NULL;
        for (size_t f = 0; f < section->n_fields; f++)
            if (strcmp(section->fields[f].key, key) == 0)
                spec = &section->fields[f];
        size_t saved = ydoc_path_push_key(c, key);
        int rc = spec ? spec->parse(c, ydoc_pair_value(c, map, i), (char *)base + spec->offset, spec)
                      : unknown_key(c, k, section, key);
        ydoc_path_pop(c, saved);
        if (rc != 0)
            failed = -1;
    }
    return failed;
}

int cfg_fp_section(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return cfg_apply_mapping(c, v, spec->extra, field);
}

int cfg_set_string(ctx_t *c, yaml_node_t *v, char **field)
{
    char *copy = ydoc_dup_or_fail(c, v, ydoc_scalar_text(v));
    if (copy == NULL)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

int cfg_fp_string(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_need_scalar(c, v, "a string") != 0)
        return -1;
    if (v->data.scalar.length == 0)
        return ydoc_fail(c, v, "must not be empty");
    return cfg_set_string(c, v, field);
}

/* A string, or null to unset. */
int cfg_fp_string_opt(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_is_null(v)) {
        free(*(char **)field);
        *(char **)field = NULL;
        return 0;
    }
    return cfg_fp_string(c, v, field, spec);
}

/* An absolute HTTP path: starts with '/', printable, no spaces, '?' allowed (query). */
int cfg_fp_http_path(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
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
    return cfg_set_string(c, v, field);
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

int cfg_fp_bool(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_bool(c, v, field);
}

/* A decimal integer within [min, max]. */
int cfg_parse_integer(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t max, uint64_t *out)
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

int cfg_fp_unsigned(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    uint64_t value;
    if (cfg_parse_integer(c, v, spec->min, spec->max, &value) != 0)
        return -1;
    *(unsigned *)field = (unsigned)value;
    return 0;
}

int cfg_fp_int(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    uint64_t value;
    if (cfg_parse_integer(c, v, spec->min, spec->max, &value) != 0)
        return -1;
    *(int *)field = (int)value;
    return 0;
}

int cfg_fp_u64(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return cfg_parse_integer(c, v, spec->min, spec->max, field);
}

int cfg_parse_size(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t *out)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a size like 12GiB") != 0)
        return -1;
    uint64_t value;
    if (units_parse_size(ydoc_scalar_text(v), &value) != 0)
        return ydoc_fail(c, v, "expected a size like 12GiB, got %s", ydoc_describe(v, d, sizeof d));
    if (value < min)
        return ydoc_fail(c, v, "must be at least %llu bytes, got %s", (unsigned long long)min,
                         ydoc_describe(v, d, sizeof d));
    *out = value;
    return 0;
}

int cfg_fp_size(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return cfg_parse_size(c, v, spec->min, field);
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
        return ydoc_fail(c, v, "must be at least %llums, got %s", (unsigned long long)min_ms,
                         ydoc_describe(v, d, sizeof d));
    *out = value;
    return 0;
}

int cfg_fp_duration(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    return parse_duration(c, v, spec->min, field);
}

/* One of names[] (NULL-terminated) -> its index. */
int cfg_parse_choice(ctx_t *c, yaml_node_t *v, const char *const *names, int *out)
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

int cfg_set_choice_name(ctx_t *c, yaml_node_t *v, const char *const *names, char **field)
{
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    char *copy = ydoc_dup_or_fail(c, v, names[choice]);
    if (!copy)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

/* A route is normalised to "/a/b/": leading and trailing '/', no "//". */
int cfg_fp_route(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
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

int cfg_parse_string_list(ctx_t *c, yaml_node_t *v, const char *what, size_t min, size_t max,
                          cfg_item_check_fn check, char ***out, size_t *n_out)
{
    if (ydoc_need_sequence(c, v, what, min, max) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    char **names = calloc(n + 1, sizeof *names);
    if (names == NULL)
        return ydoc_fail(c, v, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        rc = check(c, item);
        if (rc == 0 && (names[i] = ydoc_dup_or_fail(c, item, ydoc_scalar_text(item))) == NULL)
            rc = -1;
        ydoc_path_pop(c, saved);
    }
    if (rc != 0) {
        cfg_free_argv(names, n);
        return -1;
    }
    cfg_free_argv(*out, *n_out);
    *out = names;
    *n_out = n;
    return 0;
}

/* An alias: a non-empty scalar without spaces or control characters. */
static int alias_item(ctx_t *c, yaml_node_t *item)
{
    if (ydoc_need_scalar(c, item, "a name") != 0)
        return -1;
    for (const char *p = ydoc_scalar_text(item); *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return ydoc_fail(c, item, "an alias may not contain spaces or control characters");
    if (item->data.scalar.length == 0)
        return ydoc_fail(c, item, "an alias must not be empty");
    return 0;
}

/* A list of names (aliases: of a model or an alias_of entry), no spaces nor control
 * characters, at most ALIASES_MAX; null = none. */
int cfg_parse_aliases(ctx_t *c, yaml_node_t *v, char ***aliases, size_t *n_aliases)
{
    if (ydoc_is_null(v)) {
        cfg_free_argv(*aliases, *n_aliases);
        *aliases = NULL;
        *n_aliases = 0;
        return 0;
    }
    return cfg_parse_string_list(c, v, "a list of names", 0, ALIASES_MAX, alias_item, aliases, n_aliases);
}
