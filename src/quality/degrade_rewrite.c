/*
 * degrade_rewrite: request rewriting for a lower level of the degradation ladder
 * (degrade_rewrite): RFC 7386 merge patch for JSON objects, field replacement for
 * application/x-www-form-urlencoded and multipart/form-data. Pure functions over buffers:
 * no I/O, no global state, nothing kept between calls. What each body kind gets is
 * written in degrade.h.
 *
 * Invariants:
 *   - every byte of the body that is not a replaced value (or a removed field/part) is
 *     copied unchanged, in order: line endings, preamble, epilogue, part headers, file
 *     parts, other fields;
 *   - a `set` key matches a form field by its decoded name ('+' and %XX decoded), and a
 *     multipart part by its Content-Disposition name (quoted-string with \" and \\ read as
 *     escapes, as python-multipart reads them) when the part has no filename/filename*;
 *   - every matching field/part gets the value (duplicates included); a file part with
 *     the key's name is never changed, and no field of that name is added beside it; a key
 *     that matches none is appended (form: "&name=value"; multipart: a new part before the closing
 *     delimiter, with the body's own line ending); a null value removes the field/part;
 *   - a JSON body is merged as RFC 7386 says, after dropping the earlier duplicates of
 *     each member the patch touches (servers read the last one); it is re-serialised by
 *     cJSON (unformatted), so whitespace and number spelling may change;
 *   - the form/multipart output is a buf_t bounded by body_len + DEGRADE_MAX_GROWTH.
 * Return conventions are those of degrade.h.
 */
#include "quality/degrade.h"
#include "quality/degrade_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/hex.h"
#include "common/json_util.h"

#define DEGRADE_MAX_GROWTH (1u << 20)  /* a rewritten form/multipart body grows by at most this */
#define MULTIPART_BOUNDARY_MAX 200     /* RFC 2046 says 70; be lenient, but bounded */

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                         */

static void set_why(char *why, size_t whylen, const char *fmt, const char *arg)
{
    if (why != NULL && whylen > 0)
        snprintf(why, whylen, fmt, arg);
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static const char *skip_ows(const char *p, const char *end)
{
    while (p < end && is_ows(*p))
        p++;
    return p;
}

/* First occurrence of needle in hay, or NULL (memmem with explicit types). */
static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t needle_len)
{
    if (needle_len == 0 || hay_len < needle_len)
        return NULL;
    return memmem(hay, hay_len, needle, needle_len);
}

/* Whether [p, p+len) equals the C string s, ignoring ASCII case. */
static bool span_equals_nocase(const char *p, size_t len, const char *s)
{
    return strlen(s) == len && strncasecmp(p, s, len) == 0;
}


/* ------------------------------------------------------------------------------------ */
/* Values of `set` as form text                                                          */

typedef struct set_entry {
    const char *name;  /* the key of `set` */
    char *value;       /* rendered value (malloc'ed), NULL when the key removes the field */
    size_t value_len;
    bool seen;         /* some field/part of the body carried this name */
} set_entry_t;

static void entries_free(set_entry_t *entries, size_t n)
{
    for (size_t i = 0; entries != NULL && i < n; i++)
        free(entries[i].value);
    free(entries);
}

/* Renders each member of `set`: strings as-is, null as "remove", anything else as JSON text.
 * A name given twice keeps its last value (as a merge patch would end up). Returns 0, or
 * -1 with why. */
static int entries_build(const cJSON *set, set_entry_t **out, size_t *count, char *why, size_t whylen)
{
    size_t members = 0, n = 0;
    for (const cJSON *m = set->child; m != NULL; m = m->next)
        members++;
    set_entry_t *entries = calloc(members ? members : 1, sizeof *entries);
    if (entries == NULL) {
        set_why(why, whylen, "%s", "out of memory");
        return -1;
    }
    for (const cJSON *m = set->child; m != NULL; m = m->next) {
        if (m->string == NULL) {
            entries_free(entries, n);
            set_why(why, whylen, "%s", "degrade set has a member without a name");
            return -1;
        }
        set_entry_t *entry = NULL;
        for (size_t i = 0; i < n && entry == NULL; i++)
            if (strcmp(entries[i].name, m->string) == 0)
                entry = &entries[i];
        if (entry == NULL)
            entry = &entries[n++];
        free(entry->value);
        entry->value = NULL;
        entry->value_len = 0;
        entry->name = m->string;
        if (cJSON_IsNull(m))
            continue;
        if (cJSON_IsString(m))
            entry->value = strdup(m->valuestring ? m->valuestring : "");
        else
            entry->value = cJSON_PrintUnformatted(m);
        if (entry->value == NULL) {
            entries_free(entries, n);
            set_why(why, whylen, "%s", "out of memory");
            return -1;
        }
        entry->value_len = strlen(entry->value);
    }
    *out = entries;
    *count = n;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* application/x-www-form-urlencoded                                                     */

/* The WHATWG urlencoded byte serializer: [*-._A-Za-z0-9] kept, space as '+', else %XX. */
static int form_encode(buf_t *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '*' || c == '-' ||
            c == '.' || c == '_') {
            rc = buf_append(out, &s[i], 1);
        } else if (c == ' ') {
            rc = buf_append(out, "+", 1);
        } else {
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            rc = buf_append(out, esc, 3);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Whether the encoded name (enc_len bytes) decodes to key. Bad %-sequences stand for themselves. */
static bool form_name_equals(const char *enc, size_t enc_len, const char *key)
{
    size_t k = 0, key_len = strlen(key);
    for (size_t i = 0; i < enc_len; i++) {
        char c = enc[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%' && i + 2 < enc_len && hex_value(enc[i + 1]) >= 0 && hex_value(enc[i + 2]) >= 0) {
            c = (char)(hex_value(enc[i + 1]) * 16 + hex_value(enc[i + 2]));
            i += 2;
        }
        if (k >= key_len || key[k] != c)
            return false;
        k++;
    }
    return k == key_len;
}

static int rewrite_form(set_entry_t *entries, size_t n, const char *body, size_t len, buf_t *out)
{
    size_t pos = 0, emitted = 0;
    for (;;) {
        const char *seg = body + pos;
        const char *amp = len > pos ? memchr(seg, '&', len - pos) : NULL;
        size_t seg_len = amp ? (size_t)(amp - seg) : len - pos;
        const char *eq = seg_len ? memchr(seg, '=', seg_len) : NULL;
        size_t name_len = eq ? (size_t)(eq - seg) : seg_len;
        set_entry_t *match = NULL;
        for (size_t i = 0; i < n && match == NULL; i++)
            if (form_name_equals(seg, name_len, entries[i].name))
                match = &entries[i];
        if (match != NULL)
            match->seen = true;
        if (match == NULL || match->value != NULL) {
            if (emitted++ > 0 && buf_append(out, "&", 1) != 0)
                return -1;
            if (match == NULL) {
                if (buf_append(out, seg, seg_len) != 0)
                    return -1;
            } else if (buf_append(out, seg, name_len) != 0 || buf_append(out, "=", 1) != 0 ||
                       form_encode(out, match->value, match->value_len) != 0) {
                return -1;
            }
        }
        if (amp == NULL)
            break;
        pos += seg_len + 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (entries[i].seen || entries[i].value == NULL)
            continue;
        if (out->len > 0 && out->data[out->len - 1] != '&' && buf_append(out, "&", 1) != 0)
            return -1;
        if (form_encode(out, entries[i].name, strlen(entries[i].name)) != 0 || buf_append(out, "=", 1) != 0 ||
            form_encode(out, entries[i].value, entries[i].value_len) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Header parameters (Content-Type, Content-Disposition)                                 */

typedef struct param {
    const char *name;
    size_t name_len;
    const char *value; /* raw: a quoted-string with its quotes, or a token */
    size_t value_len;
} param_t;

/* Reads the next "; name=value" at *pos. Returns 1 with *param, 0 at the end, -1 malformed. */
static int next_param(const char **pos, const char *end, param_t *param)
{
    const char *p = skip_ows(*pos, end);
    if (p == end)
        return 0;
    if (*p != ';')
        return -1;
    p = skip_ows(p + 1, end);
    if (p == end)
        return 0;
    param->name = p;
    while (p < end && *p != '=' && *p != ';' && !is_ows(*p))
        p++;
    param->name_len = (size_t)(p - param->name);
    if (param->name_len == 0)
        return -1;
    p = skip_ows(p, end);
    param->value = p;
    param->value_len = 0;
    if (p < end && *p == '=') {
        p = skip_ows(p + 1, end);
        param->value = p;
        if (p < end && *p == '"') {
            const char *q = p + 1;
            while (q < end && *q != '"')
                q += (*q == '\\' && q + 1 < end) ? 2 : 1;
            if (q >= end)
                return -1;
            p = q + 1;
        } else {
            while (p < end && *p != ';' && !is_ows(*p))
                p++;
        }
        param->value_len = (size_t)(p - param->value);
    }
    *pos = p;
    return 1;
}

/* The parameter's value, unquoted (\" and \\ read as escapes), into a malloc'ed C string. */
static char *param_value(const param_t *param, size_t *len)
{
    char *s = malloc(param->value_len + 1);
    if (s == NULL)
        return NULL;
    size_t n = 0;
    const char *v = param->value, *end = param->value + param->value_len;
    if (v < end && *v == '"') {
        v++;
        end--; /* next_param made sure the value ends with the closing quote */
        while (v < end) {
            if (*v == '\\' && v + 1 < end && (v[1] == '"' || v[1] == '\\'))
                v++;
            s[n++] = *v++;
        }
    } else {
        memcpy(s, v, param->value_len);
        n = param->value_len;
    }
    s[n] = '\0';
    *len = n;
    return s;
}

/* ------------------------------------------------------------------------------------ */
/* multipart/form-data                                                                   */

typedef struct multipart {
    const char *body;
    size_t len;
    const char *delim; /* "--" boundary */
    size_t delim_len;
    const char *eol;   /* "\r\n", or "\n" for a body written with bare LFs */
    size_t eol_len;
} multipart_t;

/* Whether a delimiter line starts at pos: "--boundary" then "--" (close), or transport
 * padding and the line ending (eol; CRLF or LF when mp->eol is still unknown).
 * Sets *line_end (just after the line, or after the "--" of a close) and *is_close. */
static bool delimiter_at(const multipart_t *mp, size_t pos, size_t *line_end, bool *is_close)
{
    if (pos > mp->len || mp->len - pos < mp->delim_len || memcmp(mp->body + pos, mp->delim, mp->delim_len) != 0)
        return false;
    size_t p = pos + mp->delim_len;
    if (mp->len - p >= 2 && mp->body[p] == '-' && mp->body[p + 1] == '-') {
        *is_close = true;
        *line_end = p + 2;
        return true;
    }
    while (p < mp->len && is_ows(mp->body[p]))
        p++;
    *is_close = false;
    if (mp->eol != NULL) {
        if (mp->len - p < mp->eol_len || memcmp(mp->body + p, mp->eol, mp->eol_len) != 0)
            return false;
        *line_end = p + mp->eol_len;
        return true;
    }
    if (mp->len - p >= 2 && mp->body[p] == '\r' && mp->body[p + 1] == '\n') {
        *line_end = p + 2;
        return true;
    }
    if (mp->len - p >= 1 && mp->body[p] == '\n') {
        *line_end = p + 1;
        return true;
    }
    return false;
}

/* Finds the first delimiter line (at the very start, or at the start of a line after a
 * preamble) and fixes mp->eol from it. Returns false when there is none. */
static bool first_delimiter(multipart_t *mp, size_t *first)
{
    size_t pos = 0, line_end = 0;
    bool is_close = false, found = delimiter_at(mp, 0, &line_end, &is_close);
    const char *hit = found ? NULL : find_bytes(mp->body, mp->len, mp->delim, mp->delim_len);
    while (!found && hit != NULL) {
        pos = (size_t)(hit - mp->body);
        if (pos > 0 && mp->body[pos - 1] == '\n' && delimiter_at(mp, pos, &line_end, &is_close)) {
            found = true;
            break;
        }
        hit = find_bytes(hit + 1, mp->len - pos - 1, mp->delim, mp->delim_len);
    }
    if (!found)
        return false;
    bool crlf;
    if (is_close)
        crlf = pos == 0 || (pos >= 2 && mp->body[pos - 2] == '\r');
    else
        crlf = line_end >= pos + mp->delim_len + 2 && mp->body[line_end - 2] == '\r';
    mp->eol = crlf ? "\r\n" : "\n";
    mp->eol_len = crlf ? 2 : 1;
    *first = pos;
    return true;
}

/* Finds the next delimiter line at or after `from` (preceded by eol). Returns its start
 * (after the eol) or (size_t)-1. */
static size_t next_delimiter(const multipart_t *mp, size_t from, size_t *line_end, bool *is_close)
{
    while (from < mp->len) {
        const char *hit = find_bytes(mp->body + from, mp->len - from, mp->eol, mp->eol_len);
        if (hit == NULL)
            return (size_t)-1;
        size_t at = (size_t)(hit - mp->body) + mp->eol_len;
        if (delimiter_at(mp, at, line_end, is_close))
            return at;
        from = (size_t)(hit - mp->body) + 1;
    }
    return (size_t)-1;
}

/* From a part's header block, the Content-Disposition form-data name (malloc'ed), with
 * *is_file set when the part has a filename; NULL when the part has no usable name. */
static char *part_name(const multipart_t *mp, const char *block, size_t block_len, size_t *name_len, bool *is_file)
{
    *is_file = false;
    const char *p = block, *end = block + block_len;
    while (p < end) {
        const char *eol = find_bytes(p, (size_t)(end - p), mp->eol, mp->eol_len);
        const char *line_end = eol ? eol : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        if (colon != NULL && span_equals_nocase(p, (size_t)(colon - p), "content-disposition")) {
            const char *v = skip_ows(colon + 1, line_end);
            const char *type = v;
            while (v < line_end && *v != ';' && !is_ows(*v))
                v++;
            if (!span_equals_nocase(type, (size_t)(v - type), "form-data"))
                return NULL;
            param_t param, name_param = {0};
            bool has_name = false;
            int rc;
            while ((rc = next_param(&v, line_end, &param)) == 1) {
                if (span_equals_nocase(param.name, param.name_len, "filename") ||
                    span_equals_nocase(param.name, param.name_len, "filename*"))
                    *is_file = true;
                if (!has_name && span_equals_nocase(param.name, param.name_len, "name")) {
                    name_param = param;
                    has_name = true;
                }
            }
            if (rc != 0 || !has_name)
                return NULL;
            return param_value(&name_param, name_len);
        }
        p = eol ? eol + mp->eol_len : end;
    }
    return NULL;
}

/* Appends a new part "--boundary EOL Content-Disposition: form-data; name="key" EOL EOL value EOL". */
static int append_part(const multipart_t *mp, const set_entry_t *entry, buf_t *out)
{
    if (buf_append(out, mp->delim, mp->delim_len) != 0 || buf_append(out, mp->eol, mp->eol_len) != 0 ||
        buf_append_str(out, "Content-Disposition: form-data; name=\"") != 0)
        return -1;
    for (const char *k = entry->name; *k != '\0'; k++)
        if (((*k == '"' || *k == '\\') && buf_append(out, "\\", 1) != 0) || buf_append(out, k, 1) != 0)
            return -1;
    if (buf_append(out, "\"", 1) != 0 || buf_append(out, mp->eol, mp->eol_len) != 0 ||
        buf_append(out, mp->eol, mp->eol_len) != 0 || buf_append(out, entry->value, entry->value_len) != 0 ||
        buf_append(out, mp->eol, mp->eol_len) != 0)
        return -1;
    return 0;
}

/* Refuses a value that holds the delimiter (it would end its part early) and a key with a
 * line break (it cannot go into a Content-Disposition line). Returns 0, or -1 with why. */
static int multipart_check_entries(const multipart_t *mp, const set_entry_t *entries, size_t n, char *why,
                                   size_t whylen)
{
    for (size_t i = 0; i < n; i++) {
        if (entries[i].value != NULL && find_bytes(entries[i].value, entries[i].value_len, mp->delim, mp->delim_len)) {
            set_why(why, whylen, "degrade value for \"%s\" contains the multipart boundary", entries[i].name);
            return -1;
        }
        if (strpbrk(entries[i].name, "\r\n") != NULL) {
            set_why(why, whylen, "%s", "degrade key contains a line break; cannot name a multipart part with it");
            return -1;
        }
    }
    return 0;
}

/* Reads the part whose header block starts at headers_start and whose content ends at
 * content_end: sets *content_start (0 when the part has no blank line ending its headers)
 * and returns its form-data name (malloc'ed, *name_len and *is_file set), or NULL when
 * the part has no usable name. */
static char *part_locate(const multipart_t *mp, size_t headers_start, size_t content_end, size_t *content_start,
                         size_t *name_len, bool *is_file)
{
    char *name = NULL;
    *name_len = 0;
    *content_start = 0;
    *is_file = false;
    if (content_end >= headers_start) {
        const char *region = mp->body + headers_start;
        size_t region_len = content_end - headers_start;
        if (region_len >= mp->eol_len && memcmp(region, mp->eol, mp->eol_len) == 0) {
            *content_start = headers_start + mp->eol_len; /* a part without headers: no name */
        } else {
            char blank[4];
            memcpy(blank, mp->eol, mp->eol_len);
            memcpy(blank + mp->eol_len, mp->eol, mp->eol_len);
            const char *hit = find_bytes(region, region_len, blank, 2 * mp->eol_len);
            if (hit != NULL) {
                *content_start = (size_t)(hit - mp->body) + 2 * mp->eol_len;
                name = part_name(mp, region, (size_t)(hit - region) + mp->eol_len, name_len, is_file);
            }
        }
    }
    return name;
}

/* The entry called name[0..name_len), or NULL (always NULL when name is NULL). */
static set_entry_t *entry_named(set_entry_t *entries, size_t n, const char *name, size_t name_len)
{
    set_entry_t *match = NULL;
    for (size_t i = 0; name != NULL && i < n && match == NULL; i++)
        if (strlen(entries[i].name) == name_len && memcmp(entries[i].name, name, name_len) == 0)
            match = &entries[i];
    return match;
}

/* Returns 0, or -1 with why (out of room/memory is reported by the caller from out). */
static int rewrite_multipart(set_entry_t *entries, size_t n, const char *boundary, size_t boundary_len,
                             const char *body, size_t len, buf_t *out, char *why, size_t whylen)
{
    char delim[MULTIPART_BOUNDARY_MAX + 2];
    delim[0] = delim[1] = '-';
    memcpy(delim + 2, boundary, boundary_len);
    multipart_t mp = {body, len, delim, boundary_len + 2, NULL, 0};

    if (multipart_check_entries(&mp, entries, n, why, whylen) != 0)
        return -1;
    size_t part_start, copied = 0, line_end;
    if (!first_delimiter(&mp, &part_start)) {
        set_why(why, whylen, "%s", "multipart body has no delimiter for its boundary");
        return -1;
    }
    bool is_close;
    delimiter_at(&mp, part_start, &line_end, &is_close);
    while (!is_close) {
        size_t headers_start = line_end;
        size_t next = next_delimiter(&mp, headers_start - mp.eol_len, &line_end, &is_close);
        if (next == (size_t)-1) {
            set_why(why, whylen, "%s", "multipart body has no closing delimiter");
            return -1;
        }
        size_t content_end = next - mp.eol_len; /* the eol before the delimiter is not content */
        size_t name_len, content_start;
        bool is_file;
        char *name = part_locate(&mp, headers_start, content_end, &content_start, &name_len, &is_file);
        set_entry_t *match = entry_named(entries, n, name, name_len);
        free(name);
        if (match != NULL)
            match->seen = true; /* a file part of that name: left alone, and no field added */
        if (match != NULL && !is_file) {
            if (match->value == NULL) { /* remove the whole part, its delimiter line included */
                if (buf_append(out, body + copied, part_start - copied) != 0)
                    return -1;
                copied = next;
            } else {
                if (buf_append(out, body + copied, content_start - copied) != 0 ||
                    buf_append(out, match->value, match->value_len) != 0)
                    return -1;
                copied = content_end;
            }
        }
        part_start = next;
    }
    /* part_start is now the closing delimiter: new parts go right before it. */
    if (buf_append(out, body + copied, part_start - copied) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!entries[i].seen && entries[i].value != NULL && append_part(&mp, &entries[i], out) != 0)
            return -1;
    return buf_append(out, body + part_start, len - part_start);
}

/* ------------------------------------------------------------------------------------ */
/* Content types and the entry point                                                     */

enum body_kind { BODY_OTHER, BODY_JSON, BODY_FORM, BODY_MULTIPART };

/* Classifies the media type (parameters ignored). */
static enum body_kind media_kind(const char *ct, const char **params)
{
    const char *end = ct + strlen(ct);
    const char *p = skip_ows(ct, end);
    const char *type = p;
    while (p < end && *p != ';' && !is_ows(*p))
        p++;
    size_t type_len = (size_t)(p - type);
    *params = p;
    if (span_equals_nocase(type, type_len, "application/json"))
        return BODY_JSON;
    if (type_len > 17 && strncasecmp(type, "application/", 12) == 0 &&
        strncasecmp(type + type_len - 5, "+json", 5) == 0)
        return BODY_JSON;
    if (span_equals_nocase(type, type_len, "application/x-www-form-urlencoded"))
        return BODY_FORM;
    if (span_equals_nocase(type, type_len, "multipart/form-data"))
        return BODY_MULTIPART;
    return BODY_OTHER;
}

/* The boundary parameter into boundary[MULTIPART_BOUNDARY_MAX + 1]; its length, or -1. */
static long boundary_param(const char *params, char *boundary)
{
    const char *end = params + strlen(params);
    param_t param;
    int rc;
    while ((rc = next_param(&params, end, &param)) == 1) {
        if (!span_equals_nocase(param.name, param.name_len, "boundary"))
            continue;
        size_t len;
        char *value = param_value(&param, &len);
        if (value == NULL || len == 0 || len > MULTIPART_BOUNDARY_MAX || strpbrk(value, "\r\n") != NULL) {
            free(value);
            return -1;
        }
        memcpy(boundary, value, len + 1);
        free(value);
        return (long)len;
    }
    return -1;
}

/* For each key the patch touches, keeps only the last member of that name in target (the
 * one Python's and JavaScript's JSON parsers read), recursing where the patch has objects,
 * so that the merge changes the value the server will see. */
static void drop_shadowed_duplicates(cJSON *target, const cJSON *patch)
{
    if (!cJSON_IsObject(target) || !cJSON_IsObject(patch))
        return;
    for (const cJSON *m = patch->child; m != NULL; m = m->next) {
        if (m->string == NULL)
            continue;
        cJSON *last = NULL;
        for (cJSON *c = target->child; c != NULL; c = c->next)
            if (c->string != NULL && strcmp(c->string, m->string) == 0)
                last = c;
        if (last == NULL)
            continue;
        for (cJSON *c = target->child, *next; c != NULL; c = next) {
            next = c->next;
            if (c != last && c->string != NULL && strcmp(c->string, m->string) == 0)
                cJSON_Delete(cJSON_DetachItemViaPointer(target, c));
        }
        if (cJSON_IsObject(m))
            drop_shadowed_duplicates(last, m);
    }
}

static int rewrite_json(const cJSON *set, cJSON *doc, char **out, size_t *out_len, char *why, size_t whylen)
{
    drop_shadowed_duplicates(doc, set);
    doc = json_merge_patch(doc, set);
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (text == NULL) {
        set_why(why, whylen, "%s", "out of memory");
        return -1;
    }
    *out = text;
    *out_len = strlen(text);
    return 0;
}

int degrade_rewrite(const cJSON *set, const char *content_type, const char *body, size_t body_len, char **out,
                    size_t *out_len, char *why, size_t whylen)
{
    if (out == NULL || out_len == NULL) {
        set_why(why, whylen, "%s", "no output given");
        return -1;
    }
    *out = NULL;
    *out_len = 0;
    if (body == NULL)
        body_len = 0;
    if (!cJSON_IsObject(set)) {
        set_why(why, whylen, "%s", "degrade set is not an object");
        return -1;
    }
    const char *params = "";
    enum body_kind kind = content_type ? media_kind(content_type, &params) : BODY_OTHER;

    if (kind == BODY_JSON || kind == BODY_OTHER) {
        cJSON *doc = degrade_parse_json_body(body, body_len);
        if (cJSON_IsObject(doc))
            return rewrite_json(set, doc, out, out_len, why, whylen);
        cJSON_Delete(doc);
        if (kind == BODY_JSON)
            set_why(why, whylen, "%s", "request body is not a JSON object; cannot merge the degrade level into it");
        else if (content_type != NULL)
            set_why(why, whylen,
                    "cannot rewrite a body of type %s for a degrade level (JSON objects, form-urlencoded and "
                    "multipart/form-data only)",
                    content_type);
        else
            set_why(why, whylen, "%s", "cannot rewrite a body without a content type that is not a JSON object");
        return -1;
    }

    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    long boundary_len = 0;
    if (kind == BODY_MULTIPART && (boundary_len = boundary_param(params, boundary)) < 0) {
        set_why(why, whylen, "%s", "multipart/form-data content type without a usable boundary");
        return -1;
    }
    set_entry_t *entries = NULL;
    size_t n = 0;
    if (entries_build(set, &entries, &n, why, whylen) != 0)
        return -1;
    buf_t buf;
    buf_init(&buf, body_len > SIZE_MAX - DEGRADE_MAX_GROWTH - 1 ? SIZE_MAX : body_len + DEGRADE_MAX_GROWTH + 1);
    int rc;
    if (kind == BODY_FORM) {
        rc = rewrite_form(entries, n, body ? body : "", body_len, &buf);
        if (rc != 0)
            set_why(why, whylen, "%s", "rewritten form body too large, or out of memory");
    } else {
        char detail[160] = "";
        rc = rewrite_multipart(entries, n, boundary, (size_t)boundary_len, body ? body : "", body_len, &buf, detail,
                               sizeof detail);
        if (rc != 0)
            set_why(why, whylen, "%s", detail[0] ? detail : "rewritten multipart body too large, or out of memory");
    }
    entries_free(entries, n);
    if (rc != 0) {
        buf_free(&buf);
        return -1;
    }
    if (buf_reserve(&buf, 1) != 0) { /* so that an empty result is still a malloc'ed buffer */
        buf_free(&buf);
        set_why(why, whylen, "%s", "out of memory");
        return -1;
    }
    *out = buf_steal(&buf, out_len);
    return 0;
}
