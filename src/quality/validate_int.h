/*
 * validate_int: what the validators of src/quality/validate*.c share, and nothing else; only
 * those files include it. The public contract is in validate.h.
 *
 *   validate.c        validate_body (dispatch) and CRC-32
 *   validate_json.c   validate_json and the JSON syntax checker (also used by GLB)
 *   validate_glb.c    validate_glb
 *   validate_ply.c    validate_ply
 *   validate_png.c    validate_png
 *
 * Safety invariants, kept by every validator (inputs are hostile):
 *  - Every read is at an offset already proven inside [0, n). A length read from the
 *    body is compared with what remains (n - off) before it is added to an offset, and
 *    sums and products of body-supplied numbers use checked arithmetic (add_u64/mul_u64),
 *    so no length field can make an offset wrap.
 *  - Every loop advances by at least one byte of input, or is bounded by a constant.
 *  - Reasons are written only through fail and quote body bytes only through quote_bytes
 *    (printable ASCII, at most QUOTE_MAX bytes).
 *  - No global mutable state except the CRC tables in validate.c, built once under
 *    pthread_once.
 *  - On 0, why is left untouched. why may be NULL or whylen 0 (nothing is written then).
 *
 * The small helpers below are static inline, so each validator has its own copy and
 * nothing here is a library symbol; the shared functions are named validate_*.
 */
#ifndef VRAMD_QUALITY_VALIDATE_INT_H
#define VRAMD_QUALITY_VALIDATE_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define QUOTE_MAX 24 /* body bytes quoted in a reason at most */

/* ------------------------------------------------------------------ small helpers */

/* Formats a reason into why (when there is room) and returns -1. */
__attribute__((format(printf, 3, 4))) static inline int fail(char *why, size_t whylen, const char *fmt, ...)
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
static inline const char *quote_bytes(char *dst, size_t cap, const unsigned char *s, size_t len)
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

static inline bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint32_t get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* ------------------------------------------------------------------ CRC-32 (validate.c) */

/* CRC-32 of p[0..n) (ISO 3309 / PNG / zlib): validate_crc32("123456789") == 0xCBF43926. */
uint32_t validate_crc32(const unsigned char *p, size_t n);

/* ------------------------------------------------------------------ JSON syntax (validate_json.c) */

typedef struct json_scan {
    size_t pos;       /* byte offset of the error */
    const char *what; /* static text of the error, NULL when valid */
    uint64_t values;  /* values seen (scalars and containers) */
} json_scan_t;

/* Checks that p[0..n) is exactly one JSON value with optional surrounding whitespace.
 * Returns true when valid; otherwise s->what and s->pos say what and where. */
bool validate_json_scan(const unsigned char *p, size_t n, json_scan_t *s);
/* Writes "<prefix><what> at byte <pos>" plus the byte found there, or "(end of data)"; returns -1. */
int validate_json_fail(char *why, size_t whylen, const char *prefix, const unsigned char *p, size_t n,
                       const json_scan_t *s, size_t shift);

#endif
