/*
 * yaml_doc: a YAML document whose nodes keep their line and column, walked with a key
 * path ("models.trellis.memory.per_request"), with its errors kept as lines
 * "FILE:LINE:COL: key.path: message". Used by the configuration parser (src/config/) and
 * independent of its schema: ctx_t carries three fields that only the schema uses
 * (json_values_left, defaults_node, models_node), nothing here reads them.
 *
 * Invariants:
 *  - one error per unit: the walk over keys (cfg_apply_mapping) and over models makes each
 *    key or model a unit (ydoc_unit_begin); its first error is recorded and sets c->muted,
 *    so what the unit reports after it (a consequence) changes nothing; c->failed says that
 *    any unit failed. Errors are lines in err, the first YDOC_ERRORS_SHOWN of them (the
 *    first one cut to fit when err is small, the others only when whole), and
 *    ydoc_finish_errors adds "FILE: and N more errors" for the rest (the path is left out
 *    of messages when it is empty);
 *  - the key path is a stack: ydoc_path_push_key/index return the length to give back to
 *    ydoc_path_pop(); it is truncated, never overrun, at KEY_PATH_MAX;
 *  - ydoc_load_document() yields exactly one document (a second one is an error), and
 *    ydoc_check_nesting() refuses more than YAML_DEPTH_MAX nested collections before a
 *    document is built;
 *  - ydoc_need_scalar() accepts no null, no NUL byte and at most STRING_MAX bytes;
 *    ydoc_check_mapping() accepts only scalar keys without NUL, no key twice, and at most
 *    MAPPING_PAIRS_MAX keys.
 * Functions that can fail return 0, or -1 after recording the error in c.
 */
#ifndef VRAMD_CONFIG_YAML_DOC_H
#define VRAMD_CONFIG_YAML_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include <yaml.h>

#define KEY_PATH_MAX 512             /* "models.trellis.memory.per_request" */
#define MAPPING_PAIRS_MAX 1024       /* keys in any one mapping */
#define STRING_MAX 4096              /* any one string value */
#define YAML_DEPTH_MAX 64            /* collections inside collections, anywhere in the file */
#define DESCRIBE_MAX 96              /* a buffer for ydoc_describe() */
#define YDOC_ERRORS_SHOWN 50         /* error lines in err; the rest are counted */

typedef struct ctx {
    yaml_document_t *doc;
    const char *name; /* file name used in messages */
    const char *dir;  /* directory relative paths are resolved against */
    const char *text; /* the document's text (nodes' marks index into it), text_len bytes */
    size_t text_len;
    char *err;
    size_t errlen;
    bool failed;        /* some unit failed */
    bool muted;         /* the current unit's error is recorded: later ones are its consequences */
    unsigned n_errors;  /* units failed */
    unsigned n_shown;   /* of them, lines in err */
    size_t err_used;    /* bytes of err holding lines */
    char path[KEY_PATH_MAX];
    size_t path_len;
    size_t json_values_left;
    yaml_node_t *defaults_node;
    yaml_node_t *models_node;
} ctx_t;

/* Key path: push returns the length to pop back to. */
size_t ydoc_path_append(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t ydoc_path_push_key(ctx_t *c, const char *key);
size_t ydoc_path_push_index(ctx_t *c, size_t index);
void ydoc_path_pop(ctx_t *c, size_t saved);
void ydoc_path_reset(ctx_t *c);

/* Errors: record the current unit's first one; always return -1. */
int ydoc_fail(ctx_t *c, const yaml_node_t *node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ydoc_fail_at_line(ctx_t *c, size_t line0, size_t col0, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A new unit (a key, a model) begins: its first error will be recorded. */
void ydoc_unit_begin(ctx_t *c);
/* After a failed parse: "FILE: and N more errors (the first M are shown)" for those left out. */
void ydoc_finish_errors(ctx_t *c);

/* Nodes. */
const char *ydoc_scalar_text(const yaml_node_t *n);
bool ydoc_is_plain(const yaml_node_t *n);
bool ydoc_is_null(const yaml_node_t *n);
size_t ydoc_mapping_size(const yaml_node_t *n);
size_t ydoc_sequence_size(const yaml_node_t *n);
yaml_node_t *ydoc_pair_key(ctx_t *c, const yaml_node_t *map, size_t i);
yaml_node_t *ydoc_pair_value(ctx_t *c, const yaml_node_t *map, size_t i);
yaml_node_t *ydoc_sequence_item(ctx_t *c, const yaml_node_t *seq, size_t i);
yaml_node_t *ydoc_find_value(ctx_t *c, const yaml_node_t *map, const char *key);
const char *ydoc_describe(const yaml_node_t *n, char *buf, size_t cap);

/* Shape checks: 0, or -1 after ydoc_fail(). */
int ydoc_need_scalar(ctx_t *c, const yaml_node_t *n, const char *what);
int ydoc_need_mapping(ctx_t *c, const yaml_node_t *n, const char *what);
int ydoc_need_sequence(ctx_t *c, const yaml_node_t *n, const char *what, size_t min, size_t max);
int ydoc_check_mapping(ctx_t *c, const yaml_node_t *map);
char *ydoc_dup_or_fail(ctx_t *c, const yaml_node_t *n, const char *s);

/* Loading. */
int ydoc_check_nesting(ctx_t *c, const char *text, size_t len);
int ydoc_load_document(ctx_t *c, const char *text, size_t len, yaml_document_t *doc);

#endif
