/*
 * yaml_doc: loading a YAML text into a libyaml document, the node helpers the key tables
 * walk it with, the key path, and the first error with its position. The interface and
 * its invariants are in yaml_doc.h; nothing here knows vramd's keys.
 *
 * Positions are 0-based in libyaml's marks and 1-based in messages. Errors from the
 * reader (bad UTF-8) carry only a byte offset, turned into a line and column here.
 */
#include "config/yaml_doc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ydoc_path_append(ctx_t *c, const char *fmt, ...)
{
    size_t saved = c->path_len;
    size_t room = sizeof c->path - c->path_len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->path + c->path_len, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        c->path_len += ((size_t)n < room) ? (size_t)n : room - 1;
    return saved;
}

size_t ydoc_path_push_key(ctx_t *c, const char *key)
{
    return ydoc_path_append(c, "%s%s", c->path_len ? "." : "", key);
}

size_t ydoc_path_push_index(ctx_t *c, size_t index)
{
    return ydoc_path_append(c, "[%zu]", index);
}

void ydoc_path_pop(ctx_t *c, size_t saved)
{
    c->path_len = saved;
    c->path[saved] = '\0';
}

void ydoc_path_reset(ctx_t *c)
{
    ydoc_path_pop(c, 0);
}

#define ERR_TRAILER_ROOM 160 /* kept free in err for ydoc_finish_errors' line */

static int fail_at_mark(ctx_t *c, size_t line0, size_t col0, const char *fmt, va_list ap)
{
    c->failed = true;
    if (c->muted)
        return -1;
    c->muted = true;
    c->n_errors++;
    if (c->err == NULL || c->errlen == 0 || c->n_shown >= YDOC_ERRORS_SHOWN)
        return -1;
    char line[1024];
    int n = snprintf(line, sizeof line, "%s:%zu:%zu: %s%s", c->name, line0 + 1, col0 + 1, c->path,
                     c->path_len ? ": " : "");
    if (n >= 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    if (c->n_shown == 0) { /* the first error always shows, cut to fit */
        snprintf(c->err, c->errlen, "%s", line);
        c->err_used = strlen(c->err);
    } else if (c->err_used + 1 + len + ERR_TRAILER_ROOM < c->errlen) {
        c->err[c->err_used++] = '\n';
        memcpy(c->err + c->err_used, line, len + 1);
        c->err_used += len;
    } else {
        return -1; /* no room: counted in "and N more" */
    }
    c->n_shown++;
    return -1;
}

void ydoc_unit_begin(ctx_t *c)
{
    c->muted = false;
}

void ydoc_finish_errors(ctx_t *c)
{
    if (c->err == NULL || c->n_errors <= c->n_shown || c->err_used + 1 >= c->errlen)
        return;
    snprintf(c->err + c->err_used, c->errlen - c->err_used, "\n%s: and %u more error%s (the first %u are shown)",
             c->name, c->n_errors - c->n_shown, c->n_errors - c->n_shown == 1 ? "" : "s", c->n_shown);
}

/* Records the current unit's first error, at node's position (1:1 without a node); always
 * returns -1. */
int ydoc_fail(ctx_t *c, const yaml_node_t *node, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_at_mark(c, node ? node->start_mark.line : 0, node ? node->start_mark.column : 0, fmt, ap);
    va_end(ap);
    return -1;
}

const char *ydoc_scalar_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

bool ydoc_is_plain(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

bool ydoc_is_null(const yaml_node_t *n)
{
    if (n == NULL)
        return true;
    if (!ydoc_is_plain(n))
        return false;
    const char *s = ydoc_scalar_text(n);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

size_t ydoc_mapping_size(const yaml_node_t *n)
{
    return (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

size_t ydoc_sequence_size(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

yaml_node_t *ydoc_pair_key(ctx_t *c, const yaml_node_t *map, size_t i)
{
    return yaml_document_get_node(c->doc, map->data.mapping.pairs.start[i].key);
}

yaml_node_t *ydoc_pair_value(ctx_t *c, const yaml_node_t *map, size_t i)
{
    return yaml_document_get_node(c->doc, map->data.mapping.pairs.start[i].value);
}

yaml_node_t *ydoc_sequence_item(ctx_t *c, const yaml_node_t *seq, size_t i)
{
    return yaml_document_get_node(c->doc, seq->data.sequence.items.start[i]);
}

/* The value of `key` in a mapping (the last one: duplicates are rejected before). */
yaml_node_t *ydoc_find_value(ctx_t *c, const yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    yaml_node_t *found = NULL;
    for (size_t i = 0; i < ydoc_mapping_size(map); i++) {
        yaml_node_t *k = ydoc_pair_key(c, map, i);
        if (k && k->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(k), key) == 0)
            found = ydoc_pair_value(c, map, i);
    }
    return found;
}

/* "a mapping", "a list", "null" or the scalar quoted and escaped (truncated), for messages. */
const char *ydoc_describe(const yaml_node_t *n, char *buf, size_t cap)
{
    if (n == NULL || ydoc_is_null(n))
        return "null";
    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    const unsigned char *s = n->data.scalar.value;
    size_t len = n->data.scalar.length, o = 0;
    if (cap < 16)
        return "a value";
    buf[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        if (o + 8 >= cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = s[i];
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* A non-null scalar without NUL bytes, or an error "expected <what>, got ...". */
int ydoc_need_scalar(ctx_t *c, const yaml_node_t *n, const char *what)
{
    char d[DESCRIBE_MAX];
    if (n->type != YAML_SCALAR_NODE || ydoc_is_null(n))
        return ydoc_fail(c, n, "expected %s, got %s", what, ydoc_describe(n, d, sizeof d));
    if (memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL)
        return ydoc_fail(c, n, "expected %s, got a string containing a NUL character", what);
    if (n->data.scalar.length > STRING_MAX)
        return ydoc_fail(c, n, "expected %s, got a string longer than %d bytes", what, STRING_MAX);
    return 0;
}

int ydoc_need_mapping(ctx_t *c, const yaml_node_t *n, const char *what)
{
    char d[DESCRIBE_MAX];
    if (n->type != YAML_MAPPING_NODE)
        return ydoc_fail(c, n, "expected %s, got %s", what, ydoc_describe(n, d, sizeof d));
    return 0;
}

int ydoc_need_sequence(ctx_t *c, const yaml_node_t *n, const char *what, size_t min, size_t max)
{
    char d[DESCRIBE_MAX];
    if (n->type != YAML_SEQUENCE_NODE)
        return ydoc_fail(c, n, "expected %s, got %s", what, ydoc_describe(n, d, sizeof d));
    size_t count = ydoc_sequence_size(n);
    if (count < min)
        return ydoc_fail(c, n, "expected %s, got an empty list", what);
    if (count > max)
        return ydoc_fail(c, n, "too many entries (%zu, at most %zu)", count, max);
    return 0;
}

typedef struct key_ref {
    const char *text;
    size_t len;
    size_t index;
} key_ref_t;

static int compare_key_refs(const void *a, const void *b)
{
    const key_ref_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->text, y->text, n);
    if (r != 0)
        return r;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/*
 * Every key of a mapping must be a scalar without NUL, the mapping must not be larger than
 * MAPPING_PAIRS_MAX, and no key may appear twice (the error points at the earliest repeat).
 */
int ydoc_check_mapping(ctx_t *c, const yaml_node_t *map)
{
    size_t n = ydoc_mapping_size(map);
    if (n > MAPPING_PAIRS_MAX)
        return ydoc_fail(c, map, "too many keys (%zu, at most %d)", n, MAPPING_PAIRS_MAX);
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *k = ydoc_pair_key(c, map, i);
        char d[DESCRIBE_MAX];
        if (k == NULL || k->type != YAML_SCALAR_NODE)
            return ydoc_fail(c, k, "expected a key (a string), got %s", ydoc_describe(k, d, sizeof d));
        if (memchr(k->data.scalar.value, '\0', k->data.scalar.length) != NULL)
            return ydoc_fail(c, k, "a key contains a NUL character");
    }
    if (n < 2)
        return 0;
    key_ref_t *refs = malloc(n * sizeof *refs);
    if (refs == NULL)
        return ydoc_fail(c, map, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *k = ydoc_pair_key(c, map, i);
        refs[i] = (key_ref_t){ydoc_scalar_text(k), k->data.scalar.length, i};
    }
    qsort(refs, n, sizeof refs[0], compare_key_refs);
    size_t repeat = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (refs[i].len == refs[i - 1].len && memcmp(refs[i].text, refs[i - 1].text, refs[i].len) == 0 &&
            refs[i].index < repeat)
            repeat = refs[i].index;
    free(refs);
    if (repeat == SIZE_MAX)
        return 0;
    yaml_node_t *k = ydoc_pair_key(c, map, repeat);
    size_t saved = ydoc_path_push_key(c, ydoc_scalar_text(k));
    ydoc_fail(c, k, "duplicate key \"%s\"", ydoc_scalar_text(k));
    ydoc_path_pop(c, saved);
    return -1;
}

char *ydoc_dup_or_fail(ctx_t *c, const yaml_node_t *n, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL)
        ydoc_fail(c, n, "out of memory");
    return copy;
}

/* line/column (0-based) of a byte offset, for reader errors that carry no mark. */
static void offset_to_mark(const char *text, size_t len, size_t offset, size_t *line, size_t *col)
{
    *line = *col = 0;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 0;
        } else {
            (*col)++;
        }
    }
}

int ydoc_fail_at_line(ctx_t *c, size_t line0, size_t col0, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_at_mark(c, line0, col0, fmt, ap);
    va_end(ap);
    return -1;
}

static int yaml_error(ctx_t *c, yaml_parser_t *parser, const char *text, size_t len)
{
    size_t line = parser->problem_mark.line, col = parser->problem_mark.column;
    if (parser->error == YAML_READER_ERROR)
        offset_to_mark(text, len, parser->problem_offset, &line, &col);
    else if (parser->error == YAML_MEMORY_ERROR)
        line = col = 0;
    const char *problem = parser->problem ? parser->problem : "cannot parse";
    ydoc_path_reset(c);
    if (parser->context != NULL && parser->error != YAML_READER_ERROR)
        return ydoc_fail_at_line(c, line, col, "YAML syntax error: %s (%s at line %zu, column %zu)", problem,
                                 parser->context, parser->context_mark.line + 1, parser->context_mark.column + 1);
    return ydoc_fail_at_line(c, line, col, "YAML syntax error: %s", problem);
}

/*
 * libyaml's scanner does work proportional to (tokens x flow nesting depth), so a file of
 * a few MiB of "[[[[" would take minutes to load. A first pass over the events refuses
 * nesting deeper than YAML_DEPTH_MAX before the document is built (and reports syntax
 * errors, with the same messages the loader would give).
 */
int ydoc_check_nesting(ctx_t *c, const char *text, size_t len)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return ydoc_fail_at_line(c, 0, 0, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (;;) {
        yaml_event_t event;
        if (!yaml_parser_parse(&parser, &event)) {
            rc = yaml_error(c, &parser, text, len);
            break;
        }
        yaml_event_type_t type = event.type;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > YAML_DEPTH_MAX)
                rc = ydoc_fail_at_line(c, event.start_mark.line, event.start_mark.column,
                                       "YAML nested more than %d levels deep", YAML_DEPTH_MAX);
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        yaml_event_delete(&event);
        if (rc != 0 || type == YAML_STREAM_END_EVENT)
            break;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Loads exactly one YAML document from text; -1 after ydoc_fail() on a syntax error or a second document. */
int ydoc_load_document(ctx_t *c, const char *text, size_t len, yaml_document_t *doc)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return ydoc_fail_at_line(c, 0, 0, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, doc)) {
        rc = yaml_error(c, &parser, text, len);
        yaml_parser_delete(&parser);
        return rc;
    }
    if (yaml_document_get_root_node(doc) != NULL) {
        yaml_document_t extra;
        if (!yaml_parser_load(&parser, &extra)) {
            rc = yaml_error(c, &parser, text, len);
        } else {
            yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
            if (extra_root != NULL)
                rc = ydoc_fail_at_line(c, extra.start_mark.line, extra.start_mark.column,
                                       "only one YAML document is allowed in a configuration file");
            yaml_document_delete(&extra);
        }
    }
    yaml_parser_delete(&parser);
    if (rc != 0)
        yaml_document_delete(doc);
    return rc;
}
