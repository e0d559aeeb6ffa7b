/*
 * quality_keys: a model's quality keys: degrade (detect, ladder, when), validate and
 * retry, and freeing what they hold.
 *
 * Invariants: detect.status, the ladder and validate's cmd are replaced whole, and
 * `json: {path, equals}` as a pair; `equals` and a level's `set` are converted to JSON
 * (yaml_json.c); a regex must compile (POSIX extended, case-insensitive) and a header
 * name be an HTTP token; a validate mapping with cmd and no kind means kind: cmd, and cmd
 * with another kind is an error; null removes degrade or validate; the lists are bounded
 * (STATUSES_MAX, LADDER_MAX); on error the model stays freeable.
 */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_util.h"
#include "config/config_int.h"

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
        int rc = cfg_parse_integer(c, item, 100, 599, &value);
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
        return cfg_fp_string_opt(c, v, field, spec);
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
    return cfg_set_string(c, v, field);
}

static int fp_header_name(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (ydoc_is_null(v))
        return cfg_fp_string_opt(c, v, field, spec);
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a header name") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (!cfg_all_chars_in(s, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        return ydoc_fail(c, v, "expected a header name like X-Oom, got %s", ydoc_describe(v, d, sizeof d));
    return cfg_set_string(c, v, field);
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
        rc = ydoc_fail(c, path_node, "expected a JSON pointer like /success, got %s",
                       ydoc_describe(path_node, d, sizeof d));
    ydoc_path_pop(c, saved);
    if (rc != 0)
        return -1;
    saved = ydoc_path_push_key(c, "equals");
    cJSON *value = cfg_yaml_to_json(c, equals_node, 0);
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
            cJSON *set = rc == 0 ? cfg_yaml_to_json(c, val, 0) : NULL;
            if (set == NULL) {
                rc = -1;
            } else {
                cJSON_Delete(level->set);
                level->set = set;
            }
        } else if (strcmp(key, "per_request") == 0) {
            rc = cfg_parse_size(c, val, 0, &level->per_request);
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
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(enum config_degrade_when *)field = choice == 0 ? DEGRADE_ON_OOM : DEGRADE_TO_FIT;
    return 0;
}

static const field_spec_t degrade_fields[] = {
    {"detect", cfg_fp_section, offsetof(config_degrade_t, detect), 0, 0, &detect_section},
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

void cfg_degrade_free(config_degrade_t *deg)
{
    detect_free(&deg->detect);
    ladder_free(deg->ladder, deg->n_ladder);
    memset(deg, 0, sizeof *deg);
}

int cfg_fp_degrade(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_degrade_t *deg = field;
    if (ydoc_is_null(v)) {
        cfg_degrade_free(deg);
        return 0;
    }
    if (cfg_apply_mapping(c, v, &degrade_section, deg) != 0)
        return -1;
    deg->set = true;
    return 0;
}

static const char *const validate_kind_names[] = {"none", "glb", "ply", "png", "json", "cmd", NULL};

static int fp_validate_kind(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    int choice;
    if (cfg_parse_choice(c, v, validate_kind_names, &choice) != 0)
        return -1;
    ((config_validate_t *)field)->kind = (enum config_validate_kind)choice;
    return 0;
}

static int fp_validate_cmd(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    if (ydoc_is_null(v)) {
        cfg_free_argv(val->cmd, val->n_cmd);
        val->cmd = NULL;
        val->n_cmd = 0;
        return 0;
    }
    return cfg_parse_argv(c, v, &val->cmd, &val->n_cmd);
}

static int fp_validate_json(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    return parse_json_match(c, v, &val->json_path, &val->json_equals);
}

static const field_spec_t validate_fields[] = {
    {"kind", fp_validate_kind, 0, 0, 0, NULL},
    {"min_bytes", cfg_fp_size, offsetof(config_validate_t, min_bytes), 0, 0, NULL},
    {"cmd", fp_validate_cmd, 0, 0, 0, NULL},
    {"timeout", cfg_fp_duration, offsetof(config_validate_t, timeout_ms), 1, 0, NULL},
    {"json", fp_validate_json, 0, 0, 0, NULL},
};
static const section_t validate_section = SECTION(validate_fields);

void cfg_validate_reset(config_validate_t *val)
{
    cfg_free_argv(val->cmd, val->n_cmd);
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
int cfg_fp_validate(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_validate_t *val = field;
    if (ydoc_is_null(v)) {
        cfg_validate_reset(val);
        return 0;
    }
    if (v->type == YAML_SCALAR_NODE)
        return fp_validate_kind(c, v, val, spec);
    if (v->type == YAML_SEQUENCE_NODE) {
        char d[DESCRIBE_MAX];
        return ydoc_fail(c, v, "expected glb, ply, png, json, none or a mapping {kind, min_bytes, cmd, ...}, got %s",
                         ydoc_describe(v, d, sizeof d));
    }
    if (cfg_apply_mapping(c, v, &validate_section, val) != 0)
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

int cfg_fp_retry(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"safe", "never", NULL};
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 0;
    return 0;
}
