/*
 * validate_ply: the PLY validator: the header grammar, then the body, binary (byte counts
 * row by row) or ascii (data lines and their tokens).
 *
 * Invariants: the parsed header has fixed bounds (PLY_MAX_ELEMENTS elements,
 * PLY_MAX_PROPERTIES properties) and is freed on every path through validate_ply. Counts
 * and row sizes from the header are combined with checked arithmetic; the binary walk
 * compares every row size with the bytes that remain before advancing, and the ascii walk
 * consumes one non-empty line per row and one token per value. The shared safety
 * invariants are in validate_int.h.
 *
 * Choices the header leaves open: blank header lines are skipped; "format" must come
 * once, before any element; list counts must be integer types (negative counts are
 * invalid). An element without properties takes no bytes and no lines. ascii: blank lines
 * are skipped, each row is one line, every value must read as a number (nan/inf allowed),
 * list counts as non-negative integers, and each row holds exactly the values its
 * properties call for.
 */
#include "quality/validate.h"
#include "quality/validate_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PLY_MAX_ELEMENTS 64
#define PLY_MAX_PROPERTIES 1024

enum ply_format { PLY_ASCII, PLY_BINARY_LE, PLY_BINARY_BE };

typedef struct ply_property {
    unsigned char size;       /* bytes of a scalar, or of each list item */
    unsigned char count_size; /* lists: bytes of the count; 0 for scalars */
    bool count_signed;
} ply_property_t;

typedef struct ply_element {
    char name[QUOTE_MAX + 4];
    uint64_t count;
    size_t first_property, n_properties;
    uint64_t row_size; /* fixed-size rows: bytes per row */
    bool has_list;
} ply_element_t;

typedef struct ply_header {
    int format; /* enum ply_format, -1 until the format line */
    size_t body_offset;
    size_t n_elements, n_properties;
    ply_element_t elements[PLY_MAX_ELEMENTS];
    ply_property_t properties[PLY_MAX_PROPERTIES];
} ply_header_t;

/* A header line, tokenised: at most 6 tokens kept (more makes every keyword's line invalid). */
typedef struct ply_line {
    const unsigned char *tok[6];
    size_t len[6];
    size_t n_tokens;
} ply_line_t;

static bool ply_is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static void ply_tokenise(const unsigned char *s, size_t len, ply_line_t *line)
{
    size_t i = 0;
    line->n_tokens = 0;
    while (i < len) {
        while (i < len && ply_is_space(s[i]))
            i++;
        if (i >= len)
            break;
        size_t start = i;
        while (i < len && !ply_is_space(s[i]))
            i++;
        if (line->n_tokens < 6) {
            line->tok[line->n_tokens] = s + start;
            line->len[line->n_tokens] = i - start;
        }
        line->n_tokens++;
    }
}

static bool token_is(const ply_line_t *line, size_t k, const char *word)
{
    return k < line->n_tokens && k < 6 && line->len[k] == strlen(word) && memcmp(line->tok[k], word, line->len[k]) == 0;
}

/* Size of a PLY scalar type (and whether it is an integer / signed); 0 when unknown. */
static unsigned ply_type_size(const unsigned char *t, size_t len, bool *is_int, bool *is_signed)
{
    static const struct {
        const char *name;
        unsigned size;
        bool is_int, is_signed;
    } types[] = {{"char", 1, true, true},     {"uchar", 1, true, false},  {"short", 2, true, true},
                 {"ushort", 2, true, false},  {"int", 4, true, true},     {"uint", 4, true, false},
                 {"float", 4, false, true},   {"double", 8, false, true}, {"int8", 1, true, true},
                 {"uint8", 1, true, false},   {"int16", 2, true, true},   {"uint16", 2, true, false},
                 {"int32", 4, true, true},    {"uint32", 4, true, false}, {"float32", 4, false, true},
                 {"float64", 8, false, true}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (len == strlen(types[k].name) && memcmp(t, types[k].name, len) == 0) {
            *is_int = types[k].is_int;
            *is_signed = types[k].is_signed;
            return types[k].size;
        }
    return 0;
}

/* Decimal digits only, no overflow of uint64. */
static bool parse_u64(const unsigned char *t, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(t[i]) || !mul_u64(v, 10, &v) || !add_u64(v, (uint64_t)(t[i] - '0'), &v))
            return false;
    }
    *out = v;
    return true;
}

static int ply_parse_element(ply_header_t *h, const ply_line_t *line, char *why, size_t whylen)
{
    char q[QUOTE_MAX + 4];
    if (h->format < 0)
        return fail(why, whylen, "ply: element before the format line");
    if (line->n_tokens != 3)
        return fail(why, whylen, "ply: element line needs a name and a count");
    if (h->n_elements == PLY_MAX_ELEMENTS)
        return fail(why, whylen, "ply: more than %d elements", PLY_MAX_ELEMENTS);
    ply_element_t *e = &h->elements[h->n_elements];
    memset(e, 0, sizeof *e);
    quote_bytes(e->name, sizeof e->name, line->tok[1], line->len[1]);
    if (!parse_u64(line->tok[2], line->len[2], &e->count))
        return fail(why, whylen, "ply: element '%s' count '%s' is not a number", e->name,
                    quote_bytes(q, sizeof q, line->tok[2], line->len[2]));
    e->first_property = h->n_properties;
    h->n_elements++;
    return 0;
}

static int ply_parse_property(ply_header_t *h, const ply_line_t *line, char *why, size_t whylen)
{
    char q[QUOTE_MAX + 4];
    if (h->n_elements == 0)
        return fail(why, whylen, "ply: property before any element");
    if (h->n_properties == PLY_MAX_PROPERTIES)
        return fail(why, whylen, "ply: more than %d properties", PLY_MAX_PROPERTIES);
    ply_element_t *e = &h->elements[h->n_elements - 1];
    ply_property_t *prop = &h->properties[h->n_properties];
    memset(prop, 0, sizeof *prop);
    bool is_int, is_signed;
    if (token_is(line, 1, "list")) {
        if (line->n_tokens != 5)
            return fail(why, whylen, "ply: list property line needs count type, item type and name");
        prop->count_size = (unsigned char)ply_type_size(line->tok[2], line->len[2], &is_int, &is_signed);
        if (prop->count_size == 0 || !is_int)
            return fail(why, whylen, "ply: list count type '%s' is not an integer type",
                        quote_bytes(q, sizeof q, line->tok[2], line->len[2]));
        prop->count_signed = is_signed;
        prop->size = (unsigned char)ply_type_size(line->tok[3], line->len[3], &is_int, &is_signed);
        if (prop->size == 0)
            return fail(why, whylen, "ply: unknown property type '%s'", quote_bytes(q, sizeof q, line->tok[3], line->len[3]));
        e->has_list = true;
    } else {
        if (line->n_tokens != 3)
            return fail(why, whylen, "ply: property line needs a type and a name");
        prop->size = (unsigned char)ply_type_size(line->tok[1], line->len[1], &is_int, &is_signed);
        if (prop->size == 0)
            return fail(why, whylen, "ply: unknown property type '%s'", quote_bytes(q, sizeof q, line->tok[1], line->len[1]));
        e->row_size += prop->size; /* <= 1024 x 8: cannot overflow */
    }
    e->n_properties++;
    h->n_properties++;
    return 0;
}

static int ply_parse_format(ply_header_t *h, const ply_line_t *line, char *why, size_t whylen)
{
    char q[QUOTE_MAX + 4];
    if (h->format >= 0)
        return fail(why, whylen, "ply: a second format line");
    if (line->n_tokens != 3)
        return fail(why, whylen, "ply: format line needs a format and a version");
    if (token_is(line, 1, "ascii"))
        h->format = PLY_ASCII;
    else if (token_is(line, 1, "binary_little_endian"))
        h->format = PLY_BINARY_LE;
    else if (token_is(line, 1, "binary_big_endian"))
        h->format = PLY_BINARY_BE;
    else
        return fail(why, whylen, "ply: unknown format '%s'", quote_bytes(q, sizeof q, line->tok[1], line->len[1]));
    if (!token_is(line, 2, "1.0"))
        return fail(why, whylen, "ply: format version '%s' is not 1.0", quote_bytes(q, sizeof q, line->tok[2], line->len[2]));
    return 0;
}

static int ply_parse_header(const unsigned char *p, size_t n, ply_header_t *h, char *why, size_t whylen)
{
    h->format = -1;
    h->n_elements = h->n_properties = 0;
    size_t off = 0;
    bool first = true;
    ply_line_t line;
    for (;;) {
        if (off >= n)
            return fail(why, whylen, first ? "ply: empty body" : "ply: missing end_header");
        const unsigned char *nl = memchr(p + off, '\n', n - off);
        size_t end = nl ? (size_t)(nl - p) : n;
        ply_tokenise(p + off, end - off, &line);
        size_t next = nl ? end + 1 : n;
        if (first) {
            if (line.n_tokens != 1 || !token_is(&line, 0, "ply") || p[off] != 'p')
                return fail(why, whylen, "ply: first line is not \"ply\"");
            first = false;
        } else if (line.n_tokens == 0 || token_is(&line, 0, "comment") || token_is(&line, 0, "obj_info")) {
            /* nothing to check */
        } else if (token_is(&line, 0, "format")) {
            if (ply_parse_format(h, &line, why, whylen) != 0)
                return -1;
        } else if (token_is(&line, 0, "element")) {
            if (ply_parse_element(h, &line, why, whylen) != 0)
                return -1;
        } else if (token_is(&line, 0, "property")) {
            if (ply_parse_property(h, &line, why, whylen) != 0)
                return -1;
        } else if (token_is(&line, 0, "end_header")) {
            if (line.n_tokens != 1)
                return fail(why, whylen, "ply: end_header line has extra words");
            if (nl == NULL)
                return fail(why, whylen, "ply: end_header is not followed by a newline");
            if (h->format < 0)
                return fail(why, whylen, "ply: missing format line");
            h->body_offset = next;
            return 0;
        } else {
            char q[QUOTE_MAX + 4];
            return fail(why, whylen, "ply: unknown header line '%s'", quote_bytes(q, sizeof q, line.tok[0], line.len[0]));
        }
        off = next;
    }
}

static uint64_t ply_read_count(const unsigned char *p, unsigned size, bool big_endian, bool is_signed, bool *negative)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < size; k++)
        v = (v << 8) | p[big_endian ? k : size - 1 - k];
    *negative = is_signed && (v >> (8 * size - 1)) & 1;
    return v;
}

static int ply_check_binary(const unsigned char *p, size_t n, const ply_header_t *h, char *why, size_t whylen)
{
    size_t off = h->body_offset;
    bool big_endian = h->format == PLY_BINARY_BE;
    for (size_t ei = 0; ei < h->n_elements; ei++) {
        const ply_element_t *e = &h->elements[ei];
        if (!e->has_list) {
            uint64_t need;
            if (!mul_u64(e->count, e->row_size, &need) || need > (uint64_t)(n - off))
                return fail(why, whylen, "ply: body too short: element '%s' needs %llu x %llu bytes, %zu left",
                            e->name, (unsigned long long)e->count, (unsigned long long)e->row_size, n - off);
            off += (size_t)need;
            continue;
        }
        /* Rows with lists: each row takes at least one byte (a list count), so this loop
         * runs at most n times. */
        for (uint64_t row = 0; row < e->count; row++) {
            for (size_t k = 0; k < e->n_properties; k++) {
                const ply_property_t *prop = &h->properties[e->first_property + k];
                uint64_t bytes = prop->size;
                if (prop->count_size > 0) {
                    if (prop->count_size > n - off)
                        return fail(why, whylen, "ply: body too short: element '%s' row %llu of %llu is cut",
                                    e->name, (unsigned long long)row, (unsigned long long)e->count);
                    bool negative;
                    uint64_t items = ply_read_count(p + off, prop->count_size, big_endian, prop->count_signed, &negative);
                    if (negative)
                        return fail(why, whylen, "ply: negative list count in element '%s' row %llu",
                                    e->name, (unsigned long long)row);
                    off += prop->count_size;
                    bytes = items * prop->size; /* < 2^32 x 8: no overflow */
                }
                if (bytes > (uint64_t)(n - off))
                    return fail(why, whylen, "ply: body too short: element '%s' row %llu of %llu is cut",
                                e->name, (unsigned long long)row, (unsigned long long)e->count);
                off += (size_t)bytes;
            }
        }
    }
    if (off != n)
        return fail(why, whylen, "ply: body too long: %zu bytes after the data the header declares", n - off);
    return 0;
}

/* A number as PLY ascii writers print them: [+-]digits[.digits][e[+-]digits], or nan/inf. */
static bool ply_token_is_number(const unsigned char *t, size_t len)
{
    size_t i = 0, digits = 0;
    if (i < len && (t[i] == '+' || t[i] == '-'))
        i++;
    if (i < len && (t[i] == 'n' || t[i] == 'N' || t[i] == 'i' || t[i] == 'I')) {
        static const char *const words[] = {"nan", "inf", "infinity"};
        for (size_t w = 0; w < 3; w++)
            if (len - i == strlen(words[w]) && strncasecmp((const char *)t + i, words[w], len - i) == 0)
                return true;
        return false;
    }
    while (i < len && is_digit(t[i]))
        i++, digits++;
    if (i < len && t[i] == '.') {
        i++;
        while (i < len && is_digit(t[i]))
            i++, digits++;
    }
    if (digits == 0)
        return false;
    if (i < len && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < len && (t[i] == '+' || t[i] == '-'))
            i++;
        if (i >= len || !is_digit(t[i]))
            return false;
        while (i < len && is_digit(t[i]))
            i++;
    }
    return i == len;
}

/* Next token of line [*io, end): false when none is left. */
static bool ply_next_token(const unsigned char *p, size_t end, size_t *io, size_t *start, size_t *len)
{
    size_t i = *io;
    while (i < end && ply_is_space(p[i]))
        i++;
    if (i >= end)
        return false;
    *start = i;
    while (i < end && !ply_is_space(p[i]))
        i++;
    *len = i - *start;
    *io = i;
    return true;
}

/* Finds the next line with a token from *off: [*line_start, *line_end) and *off past it. */
static bool ply_next_data_line(const unsigned char *p, size_t n, size_t *off, size_t *line_start, size_t *line_end)
{
    while (*off < n) {
        const unsigned char *nl = memchr(p + *off, '\n', n - *off);
        size_t end = nl ? (size_t)(nl - p) : n;
        size_t i = *off;
        *line_start = *off;
        *line_end = end;
        *off = nl ? end + 1 : n;
        while (i < end && ply_is_space(p[i]))
            i++;
        if (i < end)
            return true;
    }
    return false;
}

static int ply_check_ascii(const unsigned char *p, size_t n, const ply_header_t *h, char *why, size_t whylen)
{
    size_t off = h->body_offset;
    uint64_t rows_declared = 0, rows_seen = 0;
    for (size_t ei = 0; ei < h->n_elements; ei++)
        if (h->elements[ei].n_properties > 0 && !add_u64(rows_declared, h->elements[ei].count, &rows_declared))
            rows_declared = UINT64_MAX;
    for (size_t ei = 0; ei < h->n_elements; ei++) {
        const ply_element_t *e = &h->elements[ei];
        if (e->n_properties == 0)
            continue;
        /* Each row consumes one non-empty line, so this loop runs at most n times. */
        for (uint64_t row = 0; row < e->count; row++) {
            size_t ls, le, tok, tlen;
            if (!ply_next_data_line(p, n, &off, &ls, &le))
                return fail(why, whylen, "ply: ascii body has %llu data lines, header declares %llu (count mismatch)",
                            (unsigned long long)rows_seen, (unsigned long long)rows_declared);
            rows_seen++;
            size_t i = ls;
            for (size_t k = 0; k < e->n_properties; k++) {
                const ply_property_t *prop = &h->properties[e->first_property + k];
                uint64_t items = 1;
                if (prop->count_size > 0) {
                    if (!ply_next_token(p, le, &i, &tok, &tlen))
                        return fail(why, whylen, "ply: element '%s' row %llu has fewer values than its properties",
                                    e->name, (unsigned long long)row);
                    if (!parse_u64(p + tok, tlen, &items))
                        return fail(why, whylen, "ply: element '%s' row %llu list count is not a non-negative integer",
                                    e->name, (unsigned long long)row);
                }
                /* Each item consumes a token of the line: bounded by the line's length. */
                for (uint64_t item = 0; item < items; item++) {
                    if (!ply_next_token(p, le, &i, &tok, &tlen))
                        return fail(why, whylen, "ply: element '%s' row %llu has fewer values than its properties",
                                    e->name, (unsigned long long)row);
                    if (!ply_token_is_number(p + tok, tlen))
                        return fail(why, whylen, "ply: element '%s' row %llu holds a value that is not a number",
                                    e->name, (unsigned long long)row);
                }
            }
            if (ply_next_token(p, le, &i, &tok, &tlen))
                return fail(why, whylen, "ply: element '%s' row %llu has more values than its properties",
                            e->name, (unsigned long long)row);
        }
    }
    size_t ls, le;
    if (ply_next_data_line(p, n, &off, &ls, &le))
        return fail(why, whylen, "ply: ascii body has more data lines than the header declares (%llu, count mismatch)",
                    (unsigned long long)rows_declared);
    return 0;
}

int validate_ply(const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if (p == NULL || n == 0)
        return fail(why, whylen, "ply: empty body");
    ply_header_t *h = malloc(sizeof *h);
    if (h == NULL)
        return fail(why, whylen, "ply: out of memory");
    int rc = ply_parse_header(p, n, h, why, whylen);
    if (rc == 0)
        rc = h->format == PLY_ASCII ? ply_check_ascii(p, n, h, why, whylen) : ply_check_binary(p, n, h, why, whylen);
    free(h);
    return rc;
}
