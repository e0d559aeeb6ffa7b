/*
 * validate_png: the PNG validator: signature, then one pass over the chunks (length,
 * type, CRC-32, and the ordering rules for IHDR, PLTE, IDAT and IEND).
 *
 * Invariants: every chunk is proven inside the body (length <= what remains after its
 * 12 bytes of framing) before its CRC is computed or its data read, and each chunk
 * advances the offset by at least 12 bytes. The shared safety invariants are in
 * validate_int.h.
 *
 * Choices the header leaves open: chunk lengths <= 2^31-1, chunk types four ASCII
 * letters, unknown critical chunks invalid, PLTE required for colour type 3 and refused
 * for 0 and 4, IDAT chunks consecutive, the zlib header of the image data valid (no
 * preset dictionary). The deflate data itself is not inflated.
 */
#include "quality/validate.h"
#include "quality/validate_int.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ CRC-32 (PNG, zlib) */

/* Slicing-by-8 over the reflected polynomial 0xEDB88320; tables built once. */
static uint32_t g_crc_tables[8][256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        g_crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            g_crc_tables[t][i] = (g_crc_tables[t - 1][i] >> 8) ^ g_crc_tables[0][g_crc_tables[t - 1][i] & 0xff];
}

/* CRC-32 of p[0..n) (ISO 3309 / PNG / zlib): validate_crc32("123456789") == 0xCBF43926. */
uint32_t validate_crc32(const unsigned char *p, size_t n)
{
    pthread_once(&g_crc_once, crc_build_tables);
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ get_le32(p), hi = get_le32(p + 4);
        c = g_crc_tables[7][lo & 0xff] ^ g_crc_tables[6][(lo >> 8) & 0xff] ^
            g_crc_tables[5][(lo >> 16) & 0xff] ^ g_crc_tables[4][lo >> 24] ^
            g_crc_tables[3][hi & 0xff] ^ g_crc_tables[2][(hi >> 8) & 0xff] ^
            g_crc_tables[1][(hi >> 16) & 0xff] ^ g_crc_tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = g_crc_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}



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
        if (validate_crc32(type, 4 + (size_t)len) != get_be32(data + len))
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
