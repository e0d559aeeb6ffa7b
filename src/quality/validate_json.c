/*
 * validate_json: the JSON validator (RFC 8259) and the syntax checker behind it, which the
 * GLB validator also runs over its JSON chunk (validate_json_scan, validate_json_fail).
 *
 * Invariants: validate_json builds no tree. validate_json_scan is a syntax checker in O(1)
 * memory (nesting depth <= JSON_MAX_DEPTH, one bit per open container) and counts the
 * values it sees, so the GLB validator can bound what it hands to cJSON. Every loop
 * advances by at least one byte. The shared safety invariants are in validate_int.h.
 *
 * Choices the header leaves open: RFC 8259 strictly (UTF-8 checked inside strings, no
 * control characters, no trailing commas, only space/tab/CR/LF as whitespace); one
 * leading UTF-8 BOM is skipped.
 */
#include "quality/validate.h"
#include "quality/validate_int.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define JSON_MAX_DEPTH 512

static bool json_is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t json_skip_ws(const unsigned char *p, size_t n, size_t i)
{
    while (i < n && json_is_ws(p[i]))
        i++;
    return i;
}

static bool is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Length of the well-formed UTF-8 sequence (RFC 3629) starting at p[0], p[0] >= 0x80,
 * within avail bytes; 0 when it is not one. */
static size_t utf8_sequence_length(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return 0;
    }
    if (avail < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (p[k] < 0x80 || p[k] > 0xBF)
            return 0;
    return len;
}

static bool json_error(json_scan_t *s, size_t pos, const char *what)
{
    s->pos = pos;
    s->what = what;
    return false;
}

/* p[*io] == '"'. On success *io is just past the closing quote. */
static bool json_scan_string(const unsigned char *p, size_t n, size_t *io, json_scan_t *s)
{
    size_t i = *io + 1;
    for (;;) {
        /* fast path: printable ASCII other than '"' and '\\' */
        while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\')
            i++;
        if (i >= n)
            return json_error(s, *io, "unterminated string");
        unsigned char c = p[i];
        if (c == '"') {
            *io = i + 1;
            return true;
        }
        if (c < 0x20)
            return json_error(s, i, "control character in a string");
        if (c == '\\') {
            if (n - i < 2)
                return json_error(s, *io, "unterminated string");
            unsigned char e = p[i + 1];
            if (e == 'u') {
                if (n - i < 6)
                    return json_error(s, i, "short \\u escape");
                for (size_t k = 2; k < 6; k++)
                    if (!is_hex(p[i + k]))
                        return json_error(s, i, "bad \\u escape");
                i += 6;
            } else if (strchr("\"\\/bfnrt", e) != NULL && e != '\0') {
                i += 2;
            } else {
                return json_error(s, i, "bad escape in a string");
            }
        } else if (c < 0x80) {
            i++;
        } else {
            size_t len = utf8_sequence_length(p + i, n - i);
            if (len == 0)
                return json_error(s, i, "invalid UTF-8 in a string");
            i += len;
        }
    }
}

static bool json_scan_number(const unsigned char *p, size_t n, size_t *io, json_scan_t *s)
{
    size_t i = *io;
    if (p[i] == '-')
        i++;
    if (i < n && p[i] == '0') {
        i++;
    } else if (i < n && p[i] >= '1' && p[i] <= '9') {
        while (i < n && is_digit(p[i]))
            i++;
    } else {
        return json_error(s, *io, "bad number");
    }
    if (i < n && p[i] == '.') {
        i++;
        if (i >= n || !is_digit(p[i]))
            return json_error(s, *io, "bad number");
        while (i < n && is_digit(p[i]))
            i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-'))
            i++;
        if (i >= n || !is_digit(p[i]))
            return json_error(s, *io, "bad number");
        while (i < n && is_digit(p[i]))
            i++;
    }
    *io = i;
    return true;
}

static bool json_scan_literal(const unsigned char *p, size_t n, size_t *io, json_scan_t *s)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < 3; w++) {
        size_t len = strlen(words[w]);
        if (n - *io >= len && memcmp(p + *io, words[w], len) == 0) {
            *io += len;
            return true;
        }
    }
    return json_error(s, *io, "unexpected character");
}

/* Checks that p[0..n) is exactly one JSON value with optional surrounding whitespace.
 * Returns true when valid; otherwise s->what and s->pos say what and where. */
bool validate_json_scan(const unsigned char *p, size_t n, json_scan_t *s)
{
    enum { WANT_VALUE, WANT_MEMBER, AFTER_VALUE } state = WANT_VALUE;
    unsigned char is_object[JSON_MAX_DEPTH / 8] = {0}; /* bit per open container: 1 object, 0 array */
    size_t depth = 0;
    size_t i = json_skip_ws(p, n, 0);
    s->what = NULL;
    s->pos = 0;
    s->values = 0;
    for (;;) {
        if (state == WANT_VALUE) {
            if (i >= n)
                return json_error(s, i, n == 0 ? "empty" : "a value is missing");
            unsigned char c = p[i];
            s->values++;
            if (c == '{' || c == '[') {
                if (depth == JSON_MAX_DEPTH)
                    return json_error(s, i, "nested more than 512 deep");
                if (c == '{')
                    is_object[depth / 8] |= (unsigned char)(1u << (depth % 8));
                else
                    is_object[depth / 8] &= (unsigned char)~(1u << (depth % 8));
                depth++;
                i = json_skip_ws(p, n, i + 1);
                if (i < n && p[i] == (c == '{' ? '}' : ']')) {
                    depth--;
                    i++;
                    state = AFTER_VALUE;
                } else {
                    state = c == '{' ? WANT_MEMBER : WANT_VALUE;
                }
                continue;
            }
            bool ok;
            if (c == '"')
                ok = json_scan_string(p, n, &i, s);
            else if (c == '-' || is_digit(c))
                ok = json_scan_number(p, n, &i, s);
            else
                ok = json_scan_literal(p, n, &i, s);
            if (!ok)
                return false;
            state = AFTER_VALUE;
        } else if (state == WANT_MEMBER) {
            if (i >= n || p[i] != '"')
                return json_error(s, i, "a member name is missing");
            if (!json_scan_string(p, n, &i, s))
                return false;
            i = json_skip_ws(p, n, i);
            if (i >= n || p[i] != ':')
                return json_error(s, i, "':' is missing");
            i = json_skip_ws(p, n, i + 1);
            state = WANT_VALUE;
        } else { /* AFTER_VALUE */
            i = json_skip_ws(p, n, i);
            if (depth == 0)
                break;
            bool in_object = is_object[(depth - 1) / 8] & (1u << ((depth - 1) % 8));
            if (i < n && p[i] == ',') {
                i = json_skip_ws(p, n, i + 1);
                state = in_object ? WANT_MEMBER : WANT_VALUE;
            } else if (i < n && p[i] == (in_object ? '}' : ']')) {
                depth--;
                i++;
            } else {
                return json_error(s, i, in_object ? "',' or '}' is missing" : "',' or ']' is missing");
            }
        }
    }
    if (i != n)
        return json_error(s, i, "data after the JSON value");
    return true;
}

/* Writes "<prefix><what> at byte <pos>" plus the byte found there, or "(end of data)". */
int validate_json_fail(char *why, size_t whylen, const char *prefix, const unsigned char *p, size_t n,
                       const json_scan_t *s, size_t shift)
{
    if (s->pos >= n)
        return fail(why, whylen, "%s%s at byte %zu (end of data)", prefix, s->what, s->pos + shift);
    unsigned char c = p[s->pos];
    if (c >= 0x21 && c < 0x7f)
        return fail(why, whylen, "%s%s at byte %zu ('%c')", prefix, s->what, s->pos + shift, c);
    return fail(why, whylen, "%s%s at byte %zu (0x%02x)", prefix, s->what, s->pos + shift, c);
}

int validate_json(const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if (p == NULL || n == 0)
        return fail(why, whylen, "json: empty body");
    size_t skip = (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF) ? 3 : 0;
    json_scan_t s;
    if (!validate_json_scan(p + skip, n - skip, &s))
        return validate_json_fail(why, whylen, "json: ", p + skip, n - skip, &s, skip);
    return 0;
}
