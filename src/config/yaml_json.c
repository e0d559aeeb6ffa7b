/*
 * yaml_json: a YAML node -> a cJSON value, for a ladder level's `set` and for
 * `json: {path, equals}` (quality_keys.c).
 *
 * Plain scalars are typed by the YAML 1.2 core schema (null, bool, int including 0x/0o,
 * float); quoted scalars are strings.
 * Invariants: the depth is at most JSON_DEPTH_MAX, and all conversions of one parse
 * together make at most JSON_VALUES_MAX values (ctx_t.json_values_left), so anchors and
 * aliases cannot make the output grow without bound; mappings go through
 * ydoc_check_mapping (no duplicate keys); a NUL byte, infinity or NaN is an error; on
 * error nothing is returned and nothing is leaked.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "config/config_int.h"

bool cfg_all_chars_in(const char *s, const char *set)
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
    if (strncmp(s, "0x", 2) == 0 && cfg_all_chars_in(s + 2, "0123456789abcdefABCDEF"))
        return cJSON_CreateNumber((double)strtoull(s + 2, NULL, 16));
    if (strncmp(s, "0o", 2) == 0 && cfg_all_chars_in(s + 2, "01234567"))
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

cJSON *cfg_yaml_to_json(ctx_t *c, yaml_node_t *n, int depth)
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
        if (out == NULL && !c->muted)
            ydoc_fail(c, n, "out of memory");
        return out;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        out = cJSON_CreateArray();
        for (size_t i = 0; out != NULL && i < ydoc_sequence_size(n); i++) {
            size_t saved = ydoc_path_push_index(c, i);
            cJSON *item = cfg_yaml_to_json(c, ydoc_sequence_item(c, n, i), depth + 1);
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
            cJSON *item = cfg_yaml_to_json(c, ydoc_pair_value(c, n, i), depth + 1);
            ydoc_path_pop(c, saved);
            if (item == NULL) {
                cJSON_Delete(out);
                return NULL;
            }
            cJSON_AddItemToObject(out, key, item);
        }
    }
    if (out == NULL && !c->muted)
        ydoc_fail(c, n, "out of memory");
    return out;
}
