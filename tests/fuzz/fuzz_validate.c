/*
 * fuzz_validate: libFuzzer entry for the output validators (src/quality/validate*.c).
 *
 * Every input goes through every validator (glb, ply, png, json; each is linear in the
 * input, so running all four keeps one corpus useful to all of them) and validate_body.
 * For each it checks:
 *   1. the answer is 0 or -1, the same with a roomy, a 4-byte and no reason buffer (the
 *      verdict never depends on the reason), a -1 always leaves a non-empty NUL-terminated
 *      reason inside the buffer, and a 0 leaves the buffer untouched;
 *   2. what a valid answer implies: a valid GLB starts with "glTF", is a multiple of 4 long
 *      and its header length is the input length; a valid PNG ends with the standard IEND
 *      chunk; a valid PLY starts with "ply"; and a proper prefix of a valid GLB or PNG (cut
 *      at a point derived from the data) is invalid;
 *   3. a valid JSON body is accepted by cJSON too (cJSON is the laxer parser), except where
 *      the two are known to differ: \u escapes (cJSON refuses lone surrogates);
 *   4. validate_body applies min_bytes (derived from the data) before anything else.
 * Random mutations almost never keep a PNG's chunk CRCs or a GLB's total length right, which
 * would hide everything behind those checks from the fuzzer; so each input that looks like
 * a PNG or a GLB is also checked a second time, as a copy with its CRCs recomputed (by this
 * file's own bitwise CRC) and its GLB header length set to the input length.
 * Any failed check aborts, which libFuzzer (or the replay main) reports as a crash.
 * No global state: the same input always does the same work.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "quality/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_validate: check failed at line %d: %s\n", __LINE__, #cond); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

typedef int (*validator_fn)(const unsigned char *p, size_t n, char *why, size_t whylen);

#define WHY_LEN 160
#define UNTOUCHED 0x5a

/* Runs v three ways and checks they agree; returns the verdict. */
static int run_validator(validator_fn v, const uint8_t *data, size_t size)
{
    char why[WHY_LEN];
    memset(why, UNTOUCHED, sizeof why);
    int rc = v(data, size, why, sizeof why);
    CHECK(rc == 0 || rc == -1);
    if (rc == -1) {
        CHECK(memchr(why, '\0', sizeof why) != NULL);
        CHECK(why[0] != '\0');
    } else {
        for (size_t i = 0; i < sizeof why; i++)
            CHECK(why[i] == UNTOUCHED);
    }
    char tiny[8];
    memset(tiny, UNTOUCHED, sizeof tiny);
    CHECK(v(data, size, tiny, 4) == rc);
    for (size_t i = 4; i < sizeof tiny; i++)
        CHECK(tiny[i] == UNTOUCHED);
    if (rc == -1)
        CHECK(memchr(tiny, '\0', 4) != NULL);
    CHECK(v(data, size, NULL, 0) == rc);
    return rc;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint32_t bitwise_crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* Rewrites every whole chunk's CRC of a PNG in place; returns 1 when it is a PNG. */
static int fix_png_crcs(uint8_t *p, size_t n)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 8 || memcmp(p, sig, 8) != 0)
        return 0;
    size_t off = 8;
    while (n - off >= 12) {
        uint32_t len = be32(p + off);
        if (len > n - off - 12)
            break;
        uint32_t crc = bitwise_crc32(p + off + 4, 4 + (size_t)len);
        for (int k = 0; k < 4; k++)
            p[off + 8 + len + k] = (uint8_t)(crc >> (24 - 8 * k));
        off += 12 + (size_t)len;
    }
    return 1;
}

/* Checks a PNG and a GLB verdict and what a valid one implies. */
static void check_png_and_glb(const uint8_t *data, size_t size, size_t cut, int *glb_out, int *png_out)
{
    int glb = run_validator(validate_glb, data, size);
    if (glb == 0) {
        CHECK(size >= 20 && size % 4 == 0 && memcmp(data, "glTF", 4) == 0 && le32(data + 8) == size);
        CHECK(validate_glb(data, cut, NULL, 0) == -1);
    }
    int png = run_validator(validate_png, data, size);
    if (png == 0) {
        static const uint8_t iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
        CHECK(size >= 8 + 25 + 12 + 12 && memcmp(data + size - 12, iend, 12) == 0);
        CHECK(validate_png(data, cut, NULL, 0) == -1);
    }
    if (glb_out)
        *glb_out = glb;
    if (png_out)
        *png_out = png;
}

/* True when the input holds a "\u" escape. */
static int json_differs_from_cjson(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == '\\' && data[i + 1] == 'u')
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ULL;
    size_t cut = size ? (size_t)(h % size) : 0; /* a proper prefix length */

    int glb, png;
    check_png_and_glb(data, size, cut, &glb, &png);
    if (size >= 12 && (memcmp(data, "glTF", 4) == 0 || data[0] == 0x89)) {
        uint8_t *fixed = malloc(size);
        CHECK(fixed != NULL);
        memcpy(fixed, data, size);
        if (!fix_png_crcs(fixed, size) && size <= UINT32_MAX)
            put_le32(fixed + 8, (uint32_t)size);
        check_png_and_glb(fixed, size, cut, NULL, NULL);
        free(fixed);
    }

    int ply = run_validator(validate_ply, data, size);
    if (ply == 0)
        CHECK(size >= 4 && memcmp(data, "ply", 3) == 0);

    int json = run_validator(validate_json, data, size);
    if (json == 0 && !json_differs_from_cjson(data, size)) {
        char *copy = malloc(size + 1);
        CHECK(copy != NULL);
        memcpy(copy, data, size);
        copy[size] = '\0';
        cJSON *root = cJSON_ParseWithLength(copy, size);
        CHECK(root != NULL);
        cJSON_Delete(root);
        free(copy);
    }

    /* validate_body: the kind's verdict, after min_bytes. */
    uint64_t min_bytes = size ? (uint64_t)data[0] * 4 : 0;
    static const char *kinds[] = {"glb", "ply", "png", "json", "none"};
    int verdicts[] = {glb, ply, png, json, 0};
    for (size_t k = 0; k < 5; k++) {
        char why[WHY_LEN];
        int rc = validate_body(kinds[k], min_bytes, data, size, why, sizeof why);
        if ((uint64_t)size < min_bytes)
            CHECK(rc == -1 && strncmp(why, "empty or too small", 18) == 0);
        else
            CHECK(rc == verdicts[k]);
    }
    return 0;
}
