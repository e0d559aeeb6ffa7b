/*
 * validate: structural checks of a worker's output (GLB, PLY, PNG, JSON). The contract is
 * in validate.h; this comment says how, and what the header leaves open.
 *
 * Safety invariants (inputs are hostile):
 *  - Every read is at an offset already proven inside [0, n). A length read from the
 *    body is compared with what remains (n - off) before it is added to an offset, and
 *    sums and products of body-supplied numbers use checked arithmetic (add_u64/mul_u64),
 *    so no length field can make an offset wrap.
 *  - Every loop advances by at least one byte of input, or is bounded by a constant.
 *  - validate_json builds no tree: json_scan is a syntax checker in O(1) memory (nesting
 *    depth <= JSON_MAX_DEPTH). The GLB JSON chunk goes through json_scan first and reaches
 *    cJSON only when it is valid and holds at most GLB_MAX_JSON_VALUES values, so a hostile
 *    chunk cannot make cJSON allocate much more than a real glTF scene would.
 *  - Reasons quote body bytes only through quote_bytes (printable ASCII, bounded length).
 *  - No global mutable state except the CRC tables, built once under pthread_once.
 *
 * Choices the header leaves open:
 *  - glb: chunks after the first two are allowed when of an unknown type (the glTF spec
 *    says loaders ignore them), each with a length multiple of 4; a second JSON chunk, or
 *    a BIN chunk other than the second, is invalid. asset.version must read "2.<minor>".
 *    Buffers: byteLength >= 1; buffer 0 without uri is the BIN chunk (byteLength <= its
 *    length); any other buffer needs a uri (its bytes are not here, its byteLength is
 *    trusted). bufferViews: byteStride 4..252 and a multiple of 4. Accessors: count >= 1,
 *    byteStride >= element size, offsets aligned to the component size, matrix columns
 *    padded to 4 bytes; sparse indices/values inside their bufferViews; mesh primitives'
 *    attributes/indices name existing accessors. An accessor without bufferView is fine.
 *  - ply: blank header lines are skipped; "format" must come once, before any element;
 *    list counts must be integer types (negative counts are invalid). An element without
 *    properties takes no bytes and no lines. ascii: blank lines are skipped, each row is
 *    one line, every value must read as a number (nan/inf allowed), list counts as
 *    non-negative integers, and each row holds exactly the values its properties call for.
 *  - png: chunk lengths <= 2^31-1, chunk types four ASCII letters, unknown critical chunks
 *    invalid, PLTE required for colour type 3 and refused for 0 and 4, IDAT chunks
 *    consecutive, the zlib header of the image data valid (no preset dictionary). The
 *    deflate data itself is not inflated.
 *  - json: RFC 8259 strictly (UTF-8 checked inside strings, no control characters, no
 *    trailing commas, only space/tab/CR/LF as whitespace); one leading UTF-8 BOM is skipped.
 *  - validate_body: kind NULL is "none"; an unknown kind is invalid.
 *  - On 0, why is left untouched. why may be NULL or whylen 0 (nothing is written then).
 */
#include "quality/validate.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#define JSON_MAX_DEPTH 512
#define GLB_MAX_JSON_VALUES 1000000u
#define PLY_MAX_ELEMENTS 64
#define PLY_MAX_PROPERTIES 1024
#define QUOTE_MAX 24 /* body bytes quoted in a reason at most */
#define MAX_SAFE_INTEGER 9007199254740992.0 /* 2^53: larger doubles are not exact integers */

/* ------------------------------------------------------------------ small helpers */

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (why != NULL && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Writes at most QUOTE_MAX bytes of s as printable ASCII ('?' for anything else) into dst. */
static const char *quote_bytes(char *dst, size_t cap, const unsigned char *s, size_t len)
{
    size_t k = 0;
    if (cap == 0)
        return dst;
    for (size_t i = 0; i < len && i < QUOTE_MAX && k + 1 < cap; i++)
        dst[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (len > QUOTE_MAX && k + 4 < cap) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k] = '\0';
    return dst;
}

static bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* ------------------------------------------------------------------ CRC-32 (PNG, zlib) */

/* Slicing-by-8 over the reflected polynomial 0xEDB88320; tables built once. */
static uint32_t crc_tables[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xff];
}

/* CRC-32 of p[0..n) (ISO 3309 / PNG / zlib): crc32_of("123456789") == 0xCBF43926. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    pthread_once(&crc_once, crc_build_tables);
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ get_le32(p), hi = get_le32(p + 4);
        c = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^
            crc_tables[5][(lo >> 16) & 0xff] ^ crc_tables[4][lo >> 24] ^
            crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff] ^
            crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------------ JSON syntax (RFC 8259) */

typedef struct json_scan {
    size_t pos;       /* byte offset of the error */
    const char *what; /* static text of the error, NULL when valid */
    uint64_t values;  /* values seen (scalars and containers) */
} json_scan_t;

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

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
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
static bool json_scan(const unsigned char *p, size_t n, json_scan_t *s)
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
static int json_fail(char *why, size_t whylen, const char *prefix, const unsigned char *p, size_t n,
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
    if (!json_scan(p + skip, n - skip, &s))
        return json_fail(why, whylen, "json: ", p + skip, n - skip, &s, skip);
    return 0;
}

/* ------------------------------------------------------------------ GLB (glTF 2.0 binary) */

#define GLB_CHUNK_JSON 0x4E4F534Au /* "JSON" little-endian */
#define GLB_CHUNK_BIN 0x004E4942u  /* "BIN\0" little-endian */

/* v as an integer in [0, 2^53]: true and *out set, or false. */
static bool json_value_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_SAFE_INTEGER) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/* Member `name` of obj as an integer in [0, 2^53]. Returns 1 found (*out set), 0 absent,
 * -1 present but not such an integer. */
static int json_member_uint(const cJSON *obj, const char *name, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v == NULL)
        return 0;
    return json_value_uint(v, out) ? 1 : -1;
}

/* The same for a required member: -1 unless present and valid. */
static int json_member_uint_required(const cJSON *obj, const char *name, uint64_t *out)
{
    return json_member_uint(obj, name, out) == 1 ? 0 : -1;
}

/* The same for an optional member with a default. */
static int json_member_uint_default(const cJSON *obj, const char *name, uint64_t dflt, uint64_t *out)
{
    int rc = json_member_uint(obj, name, out);
    if (rc == 0)
        *out = dflt;
    return rc < 0 ? -1 : 0;
}

/* Member `name` of obj as an array (NULL when absent, *bad when present and not an array). */
static const cJSON *json_member_array(const cJSON *obj, const char *name, bool *bad)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v != NULL && !cJSON_IsArray(v)) {
        *bad = true;
        return NULL;
    }
    return v;
}

static size_t json_array_length(const cJSON *a)
{
    size_t count = 0;
    for (const cJSON *e = a ? a->child : NULL; e != NULL; e = e->next)
        count++;
    return count;
}

/* Bytes of one component, 0 when componentType is not a glTF 2.0 one. */
static uint64_t gltf_component_size(uint64_t component_type)
{
    switch (component_type) {
    case 5120: /* BYTE */
    case 5121: /* UNSIGNED_BYTE */
        return 1;
    case 5122: /* SHORT */
    case 5123: /* UNSIGNED_SHORT */
        return 2;
    case 5125: /* UNSIGNED_INT */
    case 5126: /* FLOAT */
        return 4;
    default:
        return 0;
    }
}

/* Bytes of one element (matrix columns padded to 4 bytes), 0 when type is unknown. */
static uint64_t gltf_element_size(const char *type, uint64_t comp)
{
    static const struct {
        const char *name;
        unsigned columns, rows;
    } types[] = {{"SCALAR", 1, 1}, {"VEC2", 1, 2}, {"VEC3", 1, 3}, {"VEC4", 1, 4},
                 {"MAT2", 2, 2},   {"MAT3", 3, 3}, {"MAT4", 4, 4}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (strcmp(type, types[t].name) != 0)
            continue;
        if (types[t].columns == 1)
            return comp * types[t].rows;
        uint64_t column = comp * types[t].rows;
        column = (column + 3) & ~(uint64_t)3;
        return column * types[t].columns;
    }
    return 0;
}

typedef struct glb_view {
    uint64_t offset; /* byteOffset inside its buffer */
    uint64_t length;
    uint64_t stride; /* 0 = tightly packed */
} glb_view_t;

/* The parts of the glTF document validate_glb checks, and their verdict. */
typedef struct glb_doc {
    const cJSON *root;
    bool has_bin;
    uint64_t bin_length;
    uint64_t *buffer_lengths; /* byteLength of each buffer */
    size_t n_buffers;
    glb_view_t *views;
    size_t n_views;
    size_t n_accessors;
    char *why;
    size_t whylen;
} glb_doc_t;

static int glb_check_asset(glb_doc_t *d)
{
    const cJSON *asset = cJSON_GetObjectItemCaseSensitive(d->root, "asset");
    if (!cJSON_IsObject(asset))
        return fail(d->why, d->whylen, "glb: JSON has no \"asset\" object");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(asset, "version");
    if (!cJSON_IsString(version) || version->valuestring == NULL)
        return fail(d->why, d->whylen, "glb: asset.version is missing");
    const char *v = version->valuestring;
    size_t k = 2;
    bool minor_ok = v[0] == '2' && v[1] == '.' && is_digit((unsigned char)v[2]);
    while (minor_ok && is_digit((unsigned char)v[k]))
        k++;
    if (!minor_ok || v[k] != '\0') {
        char q[QUOTE_MAX + 4];
        return fail(d->why, d->whylen, "glb: asset.version \"%s\" is not 2.x",
                    quote_bytes(q, sizeof q, (const unsigned char *)v, strlen(v)));
    }
    return 0;
}

static int glb_check_buffers(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *buffers = json_member_array(d->root, "buffers", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"buffers\" is not an array");
    d->n_buffers = json_array_length(buffers);
    if (d->n_buffers == 0)
        return 0;
    d->buffer_lengths = calloc(d->n_buffers, sizeof *d->buffer_lengths);
    if (d->buffer_lengths == NULL)
        return fail(d->why, d->whylen, "glb: out of memory");
    size_t i = 0;
    for (const cJSON *b = buffers->child; b != NULL; b = b->next, i++) {
        if (!cJSON_IsObject(b))
            return fail(d->why, d->whylen, "glb: buffer %zu is not an object", i);
        uint64_t len;
        if (json_member_uint_required(b, "byteLength", &len) != 0 || len == 0)
            return fail(d->why, d->whylen, "glb: buffer %zu has no valid byteLength", i);
        const cJSON *uri = cJSON_GetObjectItemCaseSensitive(b, "uri");
        if (uri != NULL && !cJSON_IsString(uri))
            return fail(d->why, d->whylen, "glb: buffer %zu uri is not a string", i);
        if (uri == NULL) {
            if (i != 0)
                return fail(d->why, d->whylen, "glb: buffer %zu has no uri (only buffer 0 may be the BIN chunk)", i);
            if (!d->has_bin)
                return fail(d->why, d->whylen, "glb: buffer 0 has no uri but there is no BIN chunk");
            if (len > d->bin_length)
                return fail(d->why, d->whylen, "glb: buffer 0 byteLength %llu exceeds the BIN chunk (%llu bytes)",
                            (unsigned long long)len, (unsigned long long)d->bin_length);
        }
        d->buffer_lengths[i] = len;
    }
    return 0;
}

static int glb_check_buffer_views(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *views = json_member_array(d->root, "bufferViews", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"bufferViews\" is not an array");
    d->n_views = json_array_length(views);
    if (d->n_views == 0)
        return 0;
    d->views = calloc(d->n_views, sizeof *d->views);
    if (d->views == NULL)
        return fail(d->why, d->whylen, "glb: out of memory");
    size_t i = 0;
    for (const cJSON *v = views->child; v != NULL; v = v->next, i++) {
        if (!cJSON_IsObject(v))
            return fail(d->why, d->whylen, "glb: bufferView %zu is not an object", i);
        uint64_t buffer, offset, length, stride, end;
        if (json_member_uint_required(v, "buffer", &buffer) != 0 || buffer >= d->n_buffers)
            return fail(d->why, d->whylen, "glb: bufferView %zu names no existing buffer", i);
        if (json_member_uint_default(v, "byteOffset", 0, &offset) != 0)
            return fail(d->why, d->whylen, "glb: bufferView %zu byteOffset is not a valid integer", i);
        if (json_member_uint_required(v, "byteLength", &length) != 0 || length == 0)
            return fail(d->why, d->whylen, "glb: bufferView %zu has no valid byteLength", i);
        int has_stride = json_member_uint(v, "byteStride", &stride);
        if (has_stride < 0 || (has_stride == 1 && (stride < 4 || stride > 252 || stride % 4 != 0)))
            return fail(d->why, d->whylen, "glb: bufferView %zu byteStride is not 4..252 and a multiple of 4", i);
        if (!add_u64(offset, length, &end) || end > d->buffer_lengths[buffer])
            return fail(d->why, d->whylen,
                        "glb: bufferView %zu (offset %llu + length %llu) is past the end of buffer %llu (%llu bytes)",
                        i, (unsigned long long)offset, (unsigned long long)length,
                        (unsigned long long)buffer, (unsigned long long)d->buffer_lengths[buffer]);
        d->views[i].offset = offset;
        d->views[i].length = length;
        d->views[i].stride = has_stride == 1 ? stride : 0;
    }
    return 0;
}

/* Checks that `count` items of `item` bytes, `stride` apart, starting at `offset`, fit in
 * view `view_index`, with offsets aligned to `align`. `what` names the data in reasons. */
static int glb_check_span(glb_doc_t *d, const char *what, size_t accessor, uint64_t view_index,
                          uint64_t offset, uint64_t count, uint64_t stride, uint64_t item, uint64_t align)
{
    if (view_index >= d->n_views)
        return fail(d->why, d->whylen, "glb: accessor %zu %s names no existing bufferView", accessor, what);
    const glb_view_t *v = &d->views[view_index];
    if (offset % align != 0 || (v->offset + offset) % align != 0)
        return fail(d->why, d->whylen, "glb: accessor %zu %s offset is not a multiple of its component size %llu",
                    accessor, what, (unsigned long long)align);
    uint64_t span = 0, end = 0;
    bool fits = count > 0 && mul_u64(count - 1, stride, &span) && add_u64(span, item, &span) &&
                add_u64(span, offset, &end) && end <= v->length;
    if (!fits)
        return fail(d->why, d->whylen,
                    "glb: accessor %zu %s (offset %llu, %llu x %llu bytes, stride %llu) is past the end of bufferView %llu (%llu bytes)",
                    accessor, what, (unsigned long long)offset, (unsigned long long)count,
                    (unsigned long long)item, (unsigned long long)stride,
                    (unsigned long long)view_index, (unsigned long long)v->length);
    return 0;
}

static int glb_check_sparse(glb_doc_t *d, size_t i, const cJSON *sparse, uint64_t count, uint64_t elem,
                            uint64_t comp)
{
    if (!cJSON_IsObject(sparse))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse is not an object", i);
    uint64_t n_sparse, view, offset, ct;
    if (json_member_uint_required(sparse, "count", &n_sparse) != 0 || n_sparse == 0 || n_sparse > count)
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.count is not 1..count", i);
    const cJSON *indices = cJSON_GetObjectItemCaseSensitive(sparse, "indices");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(sparse, "values");
    if (!cJSON_IsObject(indices) || !cJSON_IsObject(values))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse needs indices and values objects", i);
    if (json_member_uint_required(indices, "bufferView", &view) != 0 ||
        json_member_uint_default(indices, "byteOffset", 0, &offset) != 0 ||
        json_member_uint_required(indices, "componentType", &ct) != 0 ||
        (ct != 5121 && ct != 5123 && ct != 5125))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.indices is malformed", i);
    uint64_t isize = gltf_component_size(ct);
    if (glb_check_span(d, "sparse indices", i, view, offset, n_sparse, isize, isize, isize) != 0)
        return -1;
    if (json_member_uint_required(values, "bufferView", &view) != 0 ||
        json_member_uint_default(values, "byteOffset", 0, &offset) != 0)
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.values is malformed", i);
    return glb_check_span(d, "sparse values", i, view, offset, n_sparse, elem, elem, comp);
}

static int glb_check_accessors(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *accessors = json_member_array(d->root, "accessors", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"accessors\" is not an array");
    size_t i = 0;
    for (const cJSON *a = accessors ? accessors->child : NULL; a != NULL; a = a->next, i++) {
        if (!cJSON_IsObject(a))
            return fail(d->why, d->whylen, "glb: accessor %zu is not an object", i);
        uint64_t ct, count, view, offset;
        uint64_t comp = json_member_uint_required(a, "componentType", &ct) == 0 ? gltf_component_size(ct) : 0;
        if (comp == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu componentType is not a glTF one", i);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(a, "type");
        uint64_t elem = cJSON_IsString(type) && type->valuestring ? gltf_element_size(type->valuestring, comp) : 0;
        if (elem == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu type is not SCALAR, VECn or MATn", i);
        if (json_member_uint_required(a, "count", &count) != 0 || count == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu has no valid count", i);
        if (json_member_uint_default(a, "byteOffset", 0, &offset) != 0)
            return fail(d->why, d->whylen, "glb: accessor %zu byteOffset is not a valid integer", i);
        int has_view = json_member_uint(a, "bufferView", &view);
        if (has_view < 0)
            return fail(d->why, d->whylen, "glb: accessor %zu bufferView is not a valid index", i);
        if (has_view == 1) {
            if (view >= d->n_views)
                return fail(d->why, d->whylen, "glb: accessor %zu names no existing bufferView", i);
            uint64_t stride = d->views[view].stride ? d->views[view].stride : elem;
            if (stride < elem)
                return fail(d->why, d->whylen, "glb: accessor %zu element (%llu bytes) is larger than its byteStride %llu",
                            i, (unsigned long long)elem, (unsigned long long)stride);
            if (glb_check_span(d, "data", i, view, offset, count, stride, elem, comp) != 0)
                return -1;
        }
        const cJSON *sparse = cJSON_GetObjectItemCaseSensitive(a, "sparse");
        if (sparse != NULL && glb_check_sparse(d, i, sparse, count, elem, comp) != 0)
            return -1;
    }
    d->n_accessors = i;
    return 0;
}

/* Mesh primitives must name existing accessors. */
static int glb_check_meshes(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *meshes = json_member_array(d->root, "meshes", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"meshes\" is not an array");
    size_t m = 0;
    for (const cJSON *mesh = meshes ? meshes->child : NULL; mesh != NULL; mesh = mesh->next, m++) {
        const cJSON *prims = cJSON_IsObject(mesh) ? json_member_array(mesh, "primitives", &bad) : NULL;
        if (!cJSON_IsObject(mesh) || bad || prims == NULL)
            return fail(d->why, d->whylen, "glb: mesh %zu has no primitives array", m);
        for (const cJSON *prim = prims->child; prim != NULL; prim = prim->next) {
            const cJSON *attrs = cJSON_IsObject(prim) ? cJSON_GetObjectItemCaseSensitive(prim, "attributes") : NULL;
            if (!cJSON_IsObject(attrs))
                return fail(d->why, d->whylen, "glb: mesh %zu has a primitive without attributes", m);
            uint64_t index;
            for (const cJSON *at = attrs->child; at != NULL; at = at->next) {
                if (!json_value_uint(at, &index) || index >= d->n_accessors)
                    return fail(d->why, d->whylen, "glb: mesh %zu attribute names no existing accessor", m);
            }
            int has = json_member_uint(prim, "indices", &index);
            if (has < 0 || (has == 1 && index >= d->n_accessors))
                return fail(d->why, d->whylen, "glb: mesh %zu indices names no existing accessor", m);
        }
    }
    return 0;
}

static int glb_check_document(const unsigned char *json, size_t json_len, bool has_bin, uint64_t bin_length,
                              char *why, size_t whylen)
{
    json_scan_t s;
    if (!json_scan(json, json_len, &s))
        return json_fail(why, whylen, "glb: JSON chunk does not parse: ", json, json_len, &s, 0);
    if (s.values > GLB_MAX_JSON_VALUES)
        return fail(why, whylen, "glb: JSON chunk holds more than %u values", GLB_MAX_JSON_VALUES);
    /* cJSON gets a NUL-terminated copy: it never relies on its length bound alone then. */
    char *copy = malloc(json_len + 1);
    if (copy == NULL)
        return fail(why, whylen, "glb: out of memory");
    memcpy(copy, json, json_len);
    copy[json_len] = '\0';
    cJSON *root = cJSON_ParseWithLength(copy, json_len);
    free(copy);
    if (root == NULL)
        return fail(why, whylen, "glb: JSON chunk could not be loaded (a lone \\u surrogate, or out of memory)");
    glb_doc_t d = {.root = root, .has_bin = has_bin, .bin_length = bin_length, .why = why, .whylen = whylen};
    int rc;
    if (!cJSON_IsObject(root))
        rc = fail(why, whylen, "glb: JSON chunk is not an object");
    else
        rc = (glb_check_asset(&d) == 0 && glb_check_buffers(&d) == 0 && glb_check_buffer_views(&d) == 0 &&
              glb_check_accessors(&d) == 0 && glb_check_meshes(&d) == 0) ? 0 : -1;
    free(d.buffer_lengths);
    free(d.views);
    cJSON_Delete(root);
    return rc;
}

static const char *glb_chunk_name(uint32_t type)
{
    return type == GLB_CHUNK_JSON ? "JSON" : type == GLB_CHUNK_BIN ? "BIN" : "unknown";
}

int validate_glb(const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if (p == NULL || n < 12)
        return fail(why, whylen, "glb: %zu bytes, shorter than the 12-byte header", n);
    if (memcmp(p, "glTF", 4) != 0)
        return fail(why, whylen, "glb: bad magic (not \"glTF\")");
    uint32_t version = get_le32(p + 4);
    if (version != 2)
        return fail(why, whylen, "glb: version %u, not 2", version);
    uint32_t total = get_le32(p + 8);
    if ((uint64_t)total != (uint64_t)n)
        return fail(why, whylen, "glb: header says %u bytes, body has %zu (total length mismatch)", total, n);
    size_t off = 12, json_off = 0, json_len = 0;
    bool has_bin = false;
    uint64_t bin_len = 0;
    unsigned index = 0;
    if (n - off < 8)
        return fail(why, whylen, "glb: no JSON chunk");
    while (off < n) {
        if (n - off < 8)
            return fail(why, whylen, "glb: %zu trailing bytes after the last chunk", n - off);
        uint32_t len = get_le32(p + off), type = get_le32(p + off + 4);
        if ((uint64_t)len > (uint64_t)(n - off - 8))
            return fail(why, whylen, "glb: chunk %u (%s, %u bytes) at byte %zu runs past the end", index,
                        glb_chunk_name(type), len, off);
        if (len % 4 != 0)
            return fail(why, whylen, "glb: chunk %u (%s) length %u is not a multiple of 4", index,
                        glb_chunk_name(type), len);
        if (index == 0 && type != GLB_CHUNK_JSON)
            return fail(why, whylen, "glb: first chunk is not JSON");
        if (index > 0 && type == GLB_CHUNK_JSON)
            return fail(why, whylen, "glb: a second JSON chunk (chunk %u)", index);
        if (type == GLB_CHUNK_BIN && index != 1)
            return fail(why, whylen, "glb: BIN chunk is chunk %u, not chunk 1", index);
        if (index == 0) {
            json_off = off + 8;
            json_len = len;
        } else if (type == GLB_CHUNK_BIN) {
            has_bin = true;
            bin_len = len;
        }
        off += 8 + (size_t)len;
        index++;
    }
    return glb_check_document(p + json_off, json_len, has_bin, bin_len, why, whylen);
}

/* ------------------------------------------------------------------ PLY */

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

/* ------------------------------------------------------------------ PNG */

static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static bool png_type_is(const unsigned char *type, const char *name)
{
    return memcmp(type, name, 4) == 0;
}

static bool png_is_letter(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static int png_check_ihdr(const unsigned char *d, uint32_t len, char *why, size_t whylen)
{
    if (len != 13)
        return fail(why, whylen, "png: IHDR length %u, not 13", len);
    uint32_t width = get_be32(d), height = get_be32(d + 4);
    if (width == 0 || height == 0 || width > 0x7fffffffu || height > 0x7fffffffu)
        return fail(why, whylen, "png: IHDR size %ux%u is not 1..2^31-1", width, height);
    unsigned depth = d[8], colour = d[9];
    bool ok;
    switch (colour) {
    case 0: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16; break;
    case 3: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8; break;
    case 2:
    case 4:
    case 6: ok = depth == 8 || depth == 16; break;
    default: ok = false; break;
    }
    if (!ok)
        return fail(why, whylen, "png: IHDR bit depth %u with colour type %u is not valid", depth, colour);
    if (d[10] != 0 || d[11] != 0 || d[12] > 1)
        return fail(why, whylen, "png: IHDR compression/filter/interlace method %u/%u/%u is not valid", d[10], d[11], d[12]);
    return 0;
}

int validate_png(const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if (p == NULL || n < 8 || memcmp(p, png_signature, 8) != 0)
        return fail(why, whylen, "png: bad signature");
    size_t off = 8;
    unsigned chunks = 0;
    unsigned colour = 0;
    bool seen_plte = false;
    enum { IDAT_NONE, IDAT_IN_RUN, IDAT_DONE } idat = IDAT_NONE;
    unsigned char zlib_header[2];
    size_t zlib_have = 0;
    char q[QUOTE_MAX + 4];
    /* Each chunk advances off by at least 12 bytes. */
    for (;; chunks++) {
        if (off == n)
            return fail(why, whylen, "png: missing IEND (body ends after %u chunks)", chunks);
        if (n - off < 12)
            return fail(why, whylen, "png: truncated chunk at byte %zu", off);
        uint32_t len = get_be32(p + off);
        const unsigned char *type = p + off + 4, *data = p + off + 8;
        if (len > 0x7fffffffu)
            return fail(why, whylen, "png: chunk length %u at byte %zu is over 2^31-1", len, off);
        if ((uint64_t)len > (uint64_t)(n - off - 12))
            return fail(why, whylen, "png: chunk '%s' at byte %zu runs past the end (truncated)",
                        quote_bytes(q, sizeof q, type, 4), off);
        if (!png_is_letter(type[0]) || !png_is_letter(type[1]) || !png_is_letter(type[2]) || !png_is_letter(type[3]))
            return fail(why, whylen, "png: chunk type '%s' at byte %zu is not four letters",
                        quote_bytes(q, sizeof q, type, 4), off);
        if (crc32_of(type, 4 + (size_t)len) != get_be32(data + len))
            return fail(why, whylen, "png: bad CRC in chunk '%s' at byte %zu", quote_bytes(q, sizeof q, type, 4), off);
        if (chunks == 0 && !png_type_is(type, "IHDR"))
            return fail(why, whylen, "png: first chunk is '%s', not IHDR", quote_bytes(q, sizeof q, type, 4));
        if (idat == IDAT_IN_RUN && !png_type_is(type, "IDAT"))
            idat = IDAT_DONE;
        if (png_type_is(type, "IHDR")) {
            if (chunks != 0)
                return fail(why, whylen, "png: a second IHDR at byte %zu", off);
            if (png_check_ihdr(data, len, why, whylen) != 0)
                return -1;
            colour = data[9];
        } else if (png_type_is(type, "PLTE")) {
            if (seen_plte || idat != IDAT_NONE)
                return fail(why, whylen, "png: PLTE repeated or after IDAT");
            if (colour == 0 || colour == 4)
                return fail(why, whylen, "png: PLTE with colour type %u", colour);
            if (len == 0 || len % 3 != 0 || len > 768)
                return fail(why, whylen, "png: PLTE length %u is not 3..768 and a multiple of 3", len);
            seen_plte = true;
        } else if (png_type_is(type, "IDAT")) {
            if (idat == IDAT_DONE)
                return fail(why, whylen, "png: IDAT chunks are not consecutive");
            idat = IDAT_IN_RUN;
            for (uint32_t k = 0; k < len && zlib_have < 2; k++)
                zlib_header[zlib_have++] = data[k];
        } else if (png_type_is(type, "IEND")) {
            if (len != 0)
                return fail(why, whylen, "png: IEND length %u, not 0", len);
            if (idat == IDAT_NONE)
                return fail(why, whylen, "png: no IDAT chunk");
            if (colour == 3 && !seen_plte)
                return fail(why, whylen, "png: colour type 3 without PLTE");
            if (zlib_have < 2 || (zlib_header[0] & 0x0f) != 8 || (zlib_header[0] >> 4) > 7 ||
                (zlib_header[1] & 0x20) != 0 || ((unsigned)zlib_header[0] << 8 | zlib_header[1]) % 31 != 0)
                return fail(why, whylen, "png: image data does not start with a valid zlib header");
            off += 12;
            if (off != n)
                return fail(why, whylen, "png: %zu bytes after IEND", n - off);
            return 0;
        } else if (type[0] >= 'A' && type[0] <= 'Z') {
            return fail(why, whylen, "png: unknown critical chunk '%s'", quote_bytes(q, sizeof q, type, 4));
        }
        off += 12 + (size_t)len;
    }
}

/* ------------------------------------------------------------------ dispatch */

int validate_body(const char *kind, uint64_t min_bytes, const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if ((uint64_t)n < min_bytes)
        return fail(why, whylen, "empty or too small: %zu bytes < %llu", n, (unsigned long long)min_bytes);
    if (kind == NULL || strcmp(kind, "none") == 0)
        return 0;
    if (strcmp(kind, "glb") == 0)
        return validate_glb(p, n, why, whylen);
    if (strcmp(kind, "ply") == 0)
        return validate_ply(p, n, why, whylen);
    if (strcmp(kind, "png") == 0)
        return validate_png(p, n, why, whylen);
    if (strcmp(kind, "json") == 0)
        return validate_json(p, n, why, whylen);
    char q[QUOTE_MAX + 4];
    return fail(why, whylen, "unknown validator '%s'", quote_bytes(q, sizeof q, (const unsigned char *)kind, strlen(kind)));
}
