/*
 * turn_keys: the keys of models that take turns on a card (issue 35, SPEC section 9):
 * a model's max_wait and evicts (in its entry or `defaults:`), `alias_of:` entries of
 * models: (a name served by whichever of several models is loaded or cheapest to bring),
 * gpu.idle_model (the model brought back when a card falls idle). The scheduler, routing and status that use them live elsewhere
 * (src/sched, src/path, src/obs); here they are parsed and checked only.
 *
 * Invariants: max_wait is 0 (auto) or 1 s .. 24 h; an alias_of entry is kept out of
 * config->models (every model there has a server of its own) and takes only route, strip
 * and aliases beside alias_of; once the config is loaded its targets are 1..16 distinct
 * real models, each by its name (an alias written in the file is resolved), never itself
 * nor another alias_of entry; gpu.idle_model names real models that use GPU memory and may
 * use that GPU, at most one per GPU (gpu -1: every GPU, the scalar form). Every list is
 * bounded (ALIAS_OF_TARGETS_MAX, GPUS_MAX); on error everything built stays freeable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"
#include "config/config_int.h"

#define MAX_WAIT_MIN_MS 1000ULL
#define MAX_WAIT_MAX_MS (24ULL * 3600 * 1000)
#define IDLE_MODEL_AFTER_MAX_MS (24ULL * 3600 * 1000)
#define GPU_INDEX_MAX 1023 /* as gpus: and gpu.devices bound an index */

/* max_wait: auto (0) or a duration from 1s to 24h. */
int cfg_fp_max_wait(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    (void)spec;
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "auto or a duration like 2m") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (strcmp(s, "auto") == 0) {
        *(uint64_t *)field = 0;
        return 0;
    }
    uint64_t ms;
    if (units_parse_duration_ms(s, &ms) != 0 || ms == CONFIG_FOREVER)
        return ydoc_fail(c, v, "expected auto or a duration like 2m, got %s", ydoc_describe(v, d, sizeof d));
    if (ms < MAX_WAIT_MIN_MS || ms > MAX_WAIT_MAX_MS)
        return ydoc_fail(c, v, "must be from 1s to 24h (or auto), got %s", ydoc_describe(v, d, sizeof d));
    *(uint64_t *)field = ms;
    return 0;
}

/* evicts: any | idle_only */
int cfg_fp_evicts(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"any", "idle_only", NULL};
    (void)spec;
    int which;
    if (cfg_parse_choice(c, v, names, &which) != 0)
        return -1;
    *(enum config_evicts *)field = which == 1 ? CFG_EVICTS_IDLE_ONLY : CFG_EVICTS_ANY;
    return 0;
}

bool cfg_is_alias_of_entry(ctx_t *c, const yaml_node_t *v)
{
    return v != NULL && v->type == YAML_MAPPING_NODE && ydoc_find_value(c, v, "alias_of") != NULL;
}

void cfg_alias_of_free(config_alias_of_t *a)
{
    free(a->name);
    free(a->route);
    cfg_free_argv(a->aliases, a->n_aliases);
    cfg_free_argv(a->targets, a->n_targets);
    free(a->where);
}

/* A model name: a non-empty scalar. */
static int target_item(ctx_t *c, yaml_node_t *item)
{
    if (ydoc_need_scalar(c, item, "a model name") != 0)
        return -1;
    return item->data.scalar.length == 0 ? ydoc_fail(c, item, "a model name must not be empty") : 0;
}

/* alias_of: a list of 1..16 names, kept as written (resolved by cfg_check_turns). */
static int parse_targets(ctx_t *c, config_alias_of_t *a, yaml_node_t *v)
{
    char what[96];
    snprintf(what, sizeof what, "a list of 1 to %d model names like [qwen-7b, llama-8b]", ALIAS_OF_TARGETS_MAX);
    return cfg_parse_string_list(c, v, what, 1, ALIAS_OF_TARGETS_MAX, target_item, &a->targets, &a->n_targets);
}

int cfg_parse_alias_of(ctx_t *c, config_alias_of_t *a, yaml_node_t *k, yaml_node_t *v)
{
    char where[CONFIG_ERR_MAX / 4];
    snprintf(where, sizeof where, "%s:%zu:%zu", c->name, k->start_mark.line + 1, k->start_mark.column + 1);
    a->strip = true;
    if ((a->name = strdup(ydoc_scalar_text(k))) == NULL || (a->where = strdup(where)) == NULL)
        return ydoc_fail(c, k, "out of memory");
    /* strip is the one key of `defaults:` an alias_of entry takes (it routes like a model) */
    yaml_node_t *strip = ydoc_find_value(c, c->defaults_node, "strip");
    if (strip != NULL && cfg_fp_bool(c, strip, &a->strip, NULL) != 0)
        return -1;
    if (ydoc_check_mapping(c, v) != 0)
        return -1;
    for (size_t i = 0; i < ydoc_mapping_size(v); i++) {
        yaml_node_t *key = ydoc_pair_key(c, v, i), *value = ydoc_pair_value(c, v, i);
        const char *name = ydoc_scalar_text(key);
        size_t saved = ydoc_path_push_key(c, name);
        int rc;
        if (strcmp(name, "alias_of") == 0)
            rc = parse_targets(c, a, value);
        else if (strcmp(name, "route") == 0)
            rc = cfg_fp_route(c, value, &a->route, NULL);
        else if (strcmp(name, "strip") == 0)
            rc = cfg_fp_bool(c, value, &a->strip, NULL);
        else if (strcmp(name, "aliases") == 0)
            rc = cfg_parse_aliases(c, value, &a->aliases, &a->n_aliases);
        else
            rc = ydoc_fail(c, key, "\"%s\" is not allowed here: alias_of entries take only route, strip and "
                                   "aliases (the models it names carry the rest)", name);
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* config_find_model and config_find_alias_of of config.c, here so that this file does not
 * call up into the entry points (config.c calls cfg_check_turns) */
static const model_config_t *find_model(const config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_models; i++)
        if (strcmp(cfg->models[i].name, name) == 0)
            return &cfg->models[i];
    for (size_t i = 0; i < cfg->n_models; i++)
        for (size_t a = 0; a < cfg->models[i].n_aliases; a++)
            if (strcmp(cfg->models[i].aliases[a], name) == 0)
                return &cfg->models[i];
    return NULL;
}

static const config_alias_of_t *find_alias_of(const config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_alias_ofs; i++) {
        const config_alias_of_t *a = &cfg->alias_ofs[i];
        if (strcmp(a->name, name) == 0)
            return a;
        for (size_t k = 0; k < a->n_aliases; k++)
            if (strcmp(a->aliases[k], name) == 0)
                return a;
    }
    return NULL;
}

/* A name that must be a real model's (alias_of's targets, gpu.idle_model): the model, or
 * NULL after an error at node that says what the name is instead. */
static const model_config_t *real_model(ctx_t *c, const config_t *cfg, yaml_node_t *node, const char *name,
                                        const char *key)
{
    const model_config_t *m = find_model(cfg, name);
    if (m != NULL)
        return m;
    if (find_alias_of(cfg, name) != NULL)
        ydoc_fail(c, node, "\"%s\" is an alias_of entry: %s names models that have a server of their own", name, key);
    else
        ydoc_fail(c, node, "no model \"%s\" (%s names a model of this file, by its name or an alias)", name, key);
    return NULL;
}

/* An alias_of entry's targets: real models, not itself, each once; replaced by their names. */
static int resolve_alias_of(ctx_t *c, const config_t *cfg, config_alias_of_t *a)
{
    yaml_node_t *list = ydoc_find_value(c, ydoc_find_value(c, c->models_node, a->name), "alias_of");
    for (size_t i = 0; i < a->n_targets; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, list, i);
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s.alias_of[%zu]", a->name, i);
        const char *t = a->targets[i];
        if (find_alias_of(cfg, t) == a)
            return ydoc_fail(c, item, "an alias_of entry cannot name itself");
        const model_config_t *m = real_model(c, cfg, item, t, "alias_of");
        if (m == NULL)
            return -1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(a->targets[j], m->name) != 0)
                continue;
            if (strcmp(t, m->name) == 0)
                return ydoc_fail(c, item, "model \"%s\" is listed twice (alias_of[%zu] names it too)", t, j);
            return ydoc_fail(c, item, "\"%s\" is model \"%s\", which alias_of[%zu] names too", t, m->name, j);
        }
        if (strcmp(t, m->name) != 0) {
            char *name = ydoc_dup_or_fail(c, item, m->name);
            if (name == NULL)
                return -1;
            free(a->targets[i]);
            a->targets[i] = name;
        }
    }
    return 0;
}

/* ---- gpu.idle_model ---------------------------------------------------------------- */

/* Appends {gpu, name} (name: a scalar node's text) unless a GPU is given twice. */
static int add_idle_model(ctx_t *c, config_t *cfg, yaml_node_t *v, int gpu)
{
    if (ydoc_need_scalar(c, v, "a model name") != 0)
        return -1;
    if (v->data.scalar.length == 0)
        return ydoc_fail(c, v, "a model name must not be empty");
    for (size_t i = 0; i < cfg->gpu.n_idle_models; i++)
        if (cfg->gpu.idle_models[i].gpu == gpu)
            return ydoc_fail(c, v, "GPU %d is given twice", gpu);
    char *name = ydoc_dup_or_fail(c, v, ydoc_scalar_text(v));
    if (name == NULL)
        return -1;
    cfg->gpu.idle_models[cfg->gpu.n_idle_models++] = (config_idle_model_t){gpu, name};
    return 0;
}

static void idle_models_clear(config_t *cfg)
{
    for (size_t i = 0; i < cfg->gpu.n_idle_models; i++)
        free(cfg->gpu.idle_models[i].model);
    free(cfg->gpu.idle_models);
    cfg->gpu.idle_models = NULL;
    cfg->gpu.n_idle_models = 0;
}

/* gpu.idle_model: a model name (every GPU), a list (position = GPU index, ~ for none) or a
 * mapping of GPU index to model name (null for none); null: none. */
int cfg_fp_idle_model(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    (void)spec;
    config_t *cfg = field;
    idle_models_clear(cfg);
    if (ydoc_is_null(v))
        return 0;
    if (v->type == YAML_SCALAR_NODE) {
        if ((cfg->gpu.idle_models = calloc(1, sizeof *cfg->gpu.idle_models)) == NULL)
            return ydoc_fail(c, v, "out of memory");
        return add_idle_model(c, cfg, v, -1);
    }
    bool list = v->type == YAML_SEQUENCE_NODE;
    const char *what = "a model name, a list of them by GPU index, or a mapping of GPU index to model name";
    if (list ? ydoc_need_sequence(c, v, what, 0, GPUS_MAX) != 0
             : ydoc_need_mapping(c, v, what) != 0 || ydoc_check_mapping(c, v) != 0)
        return -1;
    size_t n = list ? ydoc_sequence_size(v) : ydoc_mapping_size(v);
    if (!list && n > GPUS_MAX)
        return ydoc_fail(c, v, "too many entries (%zu, at most %d)", n, GPUS_MAX);
    if ((cfg->gpu.idle_models = calloc(n + 1, sizeof *cfg->gpu.idle_models)) == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = list ? ydoc_sequence_item(c, v, i) : ydoc_pair_value(c, v, i);
        yaml_node_t *key = list ? NULL : ydoc_pair_key(c, v, i);
        size_t saved = list ? ydoc_path_push_index(c, i) : ydoc_path_push_key(c, ydoc_scalar_text(key));
        uint64_t gpu = i;
        int rc = list ? 0 : cfg_parse_integer(c, key, 0, GPU_INDEX_MAX, &gpu);
        if (rc == 0 && !ydoc_is_null(item))
            rc = add_idle_model(c, cfg, item, (int)gpu);
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* The node gpu.idle_model gives GPU gpu's model at (the scalar for -1), with the path set. */
static yaml_node_t *idle_model_node(ctx_t *c, yaml_node_t *root, int gpu)
{
    yaml_node_t *v = ydoc_find_value(c, ydoc_find_value(c, root, "gpu"), "idle_model");
    ydoc_path_reset(c);
    ydoc_path_append(c, "gpu.idle_model");
    if (v == NULL || gpu < 0)
        return v ? v : root;
    if (v->type == YAML_SEQUENCE_NODE) {
        ydoc_path_push_index(c, (size_t)gpu);
        return ydoc_sequence_item(c, v, (size_t)gpu);
    }
    for (size_t i = 0; i < ydoc_mapping_size(v); i++) {
        yaml_node_t *k = ydoc_pair_key(c, v, i);
        const char *text = ydoc_scalar_text(k);
        uint64_t index = 0;
        for (const char *p = text; *p >= '0' && *p <= '9' && index <= GPU_INDEX_MAX; p++)
            index = index * 10 + (uint64_t)(*p - '0');
        if (text[0] != '\0' && cfg_all_chars_in(text, "0123456789") && index == (uint64_t)gpu) {
            ydoc_path_push_key(c, ydoc_scalar_text(k));
            return ydoc_pair_value(c, v, i);
        }
    }
    return v;
}

static bool gpu_listed(const int *gpus, size_t n, int gpu)
{
    for (size_t i = 0; i < n; i++)
        if (gpus[i] == gpu)
            return true;
    return false;
}

/* Each idle model: a real model that uses GPU memory and may use its GPU. */
static int check_idle_model(ctx_t *c, config_t *cfg, yaml_node_t *root, config_idle_model_t *im)
{
    yaml_node_t *node = idle_model_node(c, root, im->gpu);
    const model_config_t *m = real_model(c, cfg, node, im->model, "gpu.idle_model");
    if (m == NULL)
        return -1;
    if (m->memory.resident == 0 && m->memory.per_request == 0 && !m->memory.learn)
        return ydoc_fail(c, node, "model \"%s\" uses no GPU memory (no memory.resident nor memory.per_request): "
                                  "there is nothing to bring back onto the card", m->name);
    if (im->gpu >= 0 && m->gpus != NULL && !gpu_listed(m->gpus, m->n_gpus, im->gpu))
        return ydoc_fail(c, node, "model \"%s\" may not use GPU %d (its gpus: list leaves it out)", m->name,
                         im->gpu);
    if (im->gpu >= 0 && cfg->gpu.devices != NULL && cfg->gpu.device_uuids == NULL &&
        !gpu_listed(cfg->gpu.devices, cfg->gpu.n_devices, im->gpu))
        return ydoc_fail(c, node, "GPU %d is not among gpu.devices", im->gpu);
    if (strcmp(im->model, m->name) != 0) {
        char *name = ydoc_dup_or_fail(c, node, m->name);
        if (name == NULL)
            return -1;
        free(im->model);
        im->model = name;
    }
    return 0;
}

int cfg_check_turns(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    for (size_t i = 0; i < cfg->n_alias_ofs; i++)
        if (resolve_alias_of(c, cfg, &cfg->alias_ofs[i]) != 0)
            return -1;
    for (size_t i = 0; i < cfg->gpu.n_idle_models; i++)
        if (check_idle_model(c, cfg, root, &cfg->gpu.idle_models[i]) != 0)
            return -1;
    ydoc_path_reset(c);
    if (cfg->gpu.idle_model_after_ms > IDLE_MODEL_AFTER_MAX_MS) {
        ydoc_path_append(c, "gpu.idle_model_after");
        return ydoc_fail(c, ydoc_find_value(c, ydoc_find_value(c, root, "gpu"), "idle_model_after"),
                         "must be at most 24h");
    }
    return 0;
}
