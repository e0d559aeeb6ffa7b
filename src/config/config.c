/*
 * config: parse vramd's YAML configuration (SPEC section 2) into an immutable config_t;
 * the entry points (config_load, config_parse, config_ref/unref, config_find_model,
 * config_find_alias_of, config_summary).
 *
 * How it works: a first pass over libyaml's events refuses nesting deeper than 64 (libyaml's
 * scanner is slow on deep flow nesting); then libyaml loads the text into a document (every
 * node keeps its line and column) (yaml_doc.c); the document is walked with tables of known
 * keys (field_spec_t, fields.c), one table per section (top_keys.c, model_keys.c,
 * quality_keys.c). Each model starts from cfg_model_init_builtin() (defaults.c), then the
 * `defaults:` mapping is applied to it, then the model's own mapping (cfg_parse_models);
 * applying a mapping sets only the keys it names, so nested sections (health, memory,
 * recycle, ...) overlay key by key, while lists (cmd, aliases, ladder, ...) and
 * `json: {path, equals}` pairs are replaced whole. After the walk come the checks that need
 * the whole picture (cmd xor url, unique names, aliases and routes, the admin token,
 * loopback listen) (check.c), and last the warnings pass (warnings.c), whose findings the
 * config keeps (cfg->warnings) without refusing it.
 *
 * Invariants:
 *  - the first error wins; it is written as "FILE:LINE:COL: key.path: message" (1-based;
 *    the path is left out for errors that belong to no key, such as YAML syntax errors);
 *  - every struct being filled is always in a state cfg_model_free()/cfg_config_free() can
 *    free, so an error at any point just frees what was built;
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

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#include "config/config_int.h"
#include "config/yaml_doc.h"

/* The whole parse, with relative paths resolved against dir. */
static config_t *parse_in_dir(const char *text, size_t len, const char *name, const char *dir, char *err,
                              size_t errlen)
{
    ctx_t c = {.name = name, .dir = dir, .text = text, .text_len = len, .err = err, .errlen = errlen,
               .json_values_left = JSON_VALUES_MAX};
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
    config_t *cfg = cfg_config_new_builtin();
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
    if (rc == 0) {
        /* the top-level keys and the models are reported together; the checks across keys
         * below only run on a config whose every key parsed (else they would judge defaults
         * standing in for values in error) */
        rc = cfg_apply_mapping(&c, root, &cfg_top_section, cfg);
        ydoc_unit_begin(&c);
        /* models: once the top level was walked (it was unless its mapping is bad, a key
         * twice); a missing models: is reported on a file without other errors */
        if ((rc == 0 || c.models_node != NULL) && cfg_parse_models(&c, cfg, root) != 0)
            rc = -1;
        ydoc_unit_begin(&c);
    }
    if (rc == 0)
        rc = cfg_check_turns(&c, cfg, root);
    if (rc == 0)
        rc = cfg_check_top(&c, cfg, root);
    if (rc == 0)
        rc = cfg_check_jobs(&c, cfg, root);
    if (rc == 0)
        rc = cfg_check_fleet(&c, cfg, root);
    if (rc == 0)
        rc = cfg_collect_warnings(&c, cfg, root);
    yaml_document_delete(&doc);
    if (rc != 0) {
        ydoc_finish_errors(&c);
        cfg_config_free(cfg);
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
        cfg_config_free(c);
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

/* Names before aliases, as config_find_model: a name is never also an alias (check.c). */
const config_alias_of_t *config_find_alias_of(const config_t *c, const char *name_or_alias)
{
    if (c == NULL || name_or_alias == NULL)
        return NULL;
    for (size_t i = 0; i < c->n_alias_ofs; i++)
        if (strcmp(c->alias_ofs[i].name, name_or_alias) == 0)
            return &c->alias_ofs[i];
    for (size_t i = 0; i < c->n_alias_ofs; i++)
        for (size_t a = 0; a < c->alias_ofs[i].n_aliases; a++)
            if (strcmp(c->alias_ofs[i].aliases[a], name_or_alias) == 0)
                return &c->alias_ofs[i];
    return NULL;
}

void config_summary(const config_t *c, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%zu models", c->n_models);
    if (c->n_alias_ofs > 0 && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, ", %zu alias_of entr%s", c->n_alias_ofs, c->n_alias_ofs == 1 ? "y" : "ies");
}
