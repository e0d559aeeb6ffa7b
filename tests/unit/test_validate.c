/*
 * test_validate: the PNG and JSON validators and validate_body (src/quality/validate.c,
 * validate_png.c, validate_json.c); GLB and PLY are in test_validate_mesh.c.
 *
 * Every PNG here is built by hand in the test (a 1x1 PNG with a stored-deflate IDAT whose
 * CRCs and Adler-32 the test computes with its own bit-by-bit code), checked valid, then
 * broken one way at a time and checked invalid with a reason that names the fault. The
 * simulated worker's renderer (sim/worker/outputs.c, included below) is run over every
 * output kind and corruption variant: variant 0 must pass and every other variant must
 * fail, at several sizes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quality/validate.h"
#include "validate_test_util.h"

/* The simulated worker's renderer, compiled into this test (its functions are static or
 * sw_-prefixed, so nothing collides). */
#include "../../sim/worker/outputs.c"

/* ------------------------------------------------------------------ PNG */

static void t_png_chunk(file_t *f, const char *type, const unsigned char *data, uint32_t len)
{
    unsigned char w[4];
    t_be32(w, len);
    append(f, w, 4);
    size_t type_at = f->len;
    append(f, type, 4);
    if (len)
        append(f, data, len);
    t_be32(w, t_crc32(f->data + type_at, 4 + len));
    append(f, w, 4);
}

/* A w x w 8-bit RGB image: one IDAT holding a zlib stream of one stored deflate block. */
static void png_idat_data(unsigned char *z, size_t *zlen, uint32_t side)
{
    size_t row = 1 + 3 * (size_t)side, raw = row * side;
    assert_true(raw < 65535 && 2 + 5 + raw + 4 <= 4096);
    size_t k = 0;
    z[k++] = 0x78;
    z[k++] = 0x01;
    z[k++] = 0x01; /* BFINAL, stored */
    z[k++] = (unsigned char)raw;
    z[k++] = (unsigned char)(raw >> 8);
    z[k++] = (unsigned char)~raw;
    z[k++] = (unsigned char)(~raw >> 8);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw; i++) {
        unsigned char v = (i % row == 0) ? 0 : (unsigned char)(i * 7);
        z[k++] = v;
        a = (a + v) % 65521;
        b = (b + a) % 65521;
    }
    t_be32(z + k, (b << 16) | a);
    *zlen = k + 4;
}

enum png_fault { T_PNG_FINE, T_PNG_IDAT_FIRST, T_PNG_NO_IEND, T_PNG_SPLIT_IDAT, T_PNG_PALETTE_NO_PLTE, T_PNG_TEXT_BETWEEN_IDAT };

static void build_png(file_t *f, uint32_t side, enum png_fault fault)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13], z[4096];
    size_t zlen;
    t_be32(ihdr, side);
    t_be32(ihdr + 4, side);
    ihdr[8] = 8;
    ihdr[9] = fault == T_PNG_PALETTE_NO_PLTE ? 3 : 2;
    ihdr[10] = ihdr[11] = ihdr[12] = 0;
    png_idat_data(z, &zlen, side);
    f->len = 0;
    append(f, sig, 8);
    if (fault == T_PNG_IDAT_FIRST)
        t_png_chunk(f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(f, "IHDR", ihdr, 13);
    t_png_chunk(f, "tEXt", (const unsigned char *)"Software\0test", 13);
    if (fault == T_PNG_SPLIT_IDAT || fault == T_PNG_TEXT_BETWEEN_IDAT) {
        t_png_chunk(f, "IDAT", z, 1); /* the zlib header split across two IDATs is fine */
        if (fault == T_PNG_TEXT_BETWEEN_IDAT)
            t_png_chunk(f, "tIME", (const unsigned char *)"\x07\xe8\x01\x01\x00\x00\x00", 7);
        t_png_chunk(f, "IDAT", z + 1, (uint32_t)zlen - 1);
    } else if (fault != T_PNG_IDAT_FIRST) {
        t_png_chunk(f, "IDAT", z, (uint32_t)zlen);
    }
    if (fault != T_PNG_NO_IEND)
        t_png_chunk(f, "IEND", NULL, 0);
}

static void test_png_valid(void **state)
{
    (void)state;
    /* The test's own CRC is the standard one. */
    assert_int_equal(t_crc32((const unsigned char *)"123456789", 9), 0xCBF43926u);
    file_t f;
    build_png(&f, 1, T_PNG_FINE);
    assert_valid(validate_png, &f);
    build_png(&f, 30, T_PNG_FINE); /* a longer IDAT: the table CRC over many 8-byte steps */
    assert_valid(validate_png, &f);
    build_png(&f, 1, T_PNG_SPLIT_IDAT);
    assert_valid(validate_png, &f);
}

static void test_png_faults(void **state)
{
    (void)state;
    file_t f;
    build_png(&f, 1, T_PNG_FINE);
    f.data[1] = 'X';
    assert_invalid(validate_png, &f, "bad signature");
    f.len = 7;
    assert_invalid(validate_png, &f, "bad signature");

    build_png(&f, 1, T_PNG_IDAT_FIRST);
    assert_invalid(validate_png, &f, "first chunk is 'IDAT', not IHDR");

    build_png(&f, 1, T_PNG_FINE);
    f.data[f.len - 12 - 1] ^= 0x01; /* the IDAT's CRC */
    assert_invalid(validate_png, &f, "bad CRC in chunk 'IDAT'");
    build_png(&f, 1, T_PNG_FINE);
    f.data[8 + 8 + 5] ^= 0x40; /* a byte of IHDR data */
    assert_invalid(validate_png, &f, "bad CRC in chunk 'IHDR'");

    build_png(&f, 1, T_PNG_NO_IEND);
    assert_invalid(validate_png, &f, "missing IEND");

    build_png(&f, 1, T_PNG_FINE);
    append(&f, "\n", 1);
    assert_invalid(validate_png, &f, "1 bytes after IEND");
    build_png(&f, 1, T_PNG_FINE);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_invalid(validate_png, &f, "12 bytes after IEND");

    build_png(&f, 1, T_PNG_FINE);
    f.len -= 20; /* truncated inside IDAT */
    assert_invalid(validate_png, &f, "truncated");
    build_png(&f, 1, T_PNG_FINE);
    f.len -= 5; /* truncated inside IEND */
    assert_invalid(validate_png, &f, "truncated chunk at byte");

    build_png(&f, 1, T_PNG_PALETTE_NO_PLTE);
    assert_invalid(validate_png, &f, "colour type 3 without PLTE");
    build_png(&f, 1, T_PNG_TEXT_BETWEEN_IDAT);
    assert_invalid(validate_png, &f, "not consecutive");
}

static void test_png_ihdr(void **state)
{
    (void)state;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0};
    unsigned char z[4096];
    size_t zlen;
    png_idat_data(z, &zlen, 1);
    file_t f;

    struct {
        unsigned char depth, colour;
        const char *expect;
    } bad[] = {{16, 3, "bit depth 16 with colour type 3"}, {4, 2, "bit depth 4 with colour type 2"},
               {8, 5, "colour type 5"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ihdr[8] = bad[k].depth;
        ihdr[9] = bad[k].colour;
        f.len = 0;
        append(&f, sig, 8);
        t_png_chunk(&f, "IHDR", ihdr, 13);
        t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
        t_png_chunk(&f, "IEND", NULL, 0);
        assert_invalid(validate_png, &f, bad[k].expect);
    }
    ihdr[8] = 8;
    ihdr[9] = 2;

    /* Zero width. */
    f.len = 0;
    append(&f, sig, 8);
    unsigned char zero_w[13];
    memcpy(zero_w, ihdr, 13);
    zero_w[3] = 0;
    t_png_chunk(&f, "IHDR", zero_w, 13);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_invalid(validate_png, &f, "IHDR size 0x1");

    /* IHDR of 12 bytes. */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 12);
    assert_invalid(validate_png, &f, "IHDR length 12");

    /* Interlace method 2. */
    ihdr[12] = 2;
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    assert_invalid(validate_png, &f, "interlace method 0/0/2");
}

static void test_png_chunk_rules(void **state)
{
    (void)state;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0};
    unsigned char z[4096];
    size_t zlen;
    png_idat_data(z, &zlen, 1);
    file_t f;

    /* No IDAT; an unknown critical chunk; a bad zlib header; an unknown ancillary chunk is fine. */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_invalid(validate_png, &f, "no IDAT");

    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "XYZW", z, 3);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_invalid(validate_png, &f, "unknown critical chunk 'XYZW'");

    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "xyzW", z, 3);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_valid(validate_png, &f);

    z[1] ^= 0x01; /* breaks the FCHECK */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", NULL, 0);
    assert_invalid(validate_png, &f, "zlib header");
    z[1] ^= 0x01;

    /* IEND with data. */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", z, 1);
    assert_invalid(validate_png, &f, "IEND length 1");

    /* A chunk type that is not letters. */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "ID\x01T", z, (uint32_t)zlen);
    assert_invalid(validate_png, &f, "chunk type 'ID?T' at byte 33 is not four letters");

    /* A chunk length over 2^31-1. */
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_be32(f.data + 8, 0x80000000u);
    assert_invalid(validate_png, &f, "over 2^31-1");
}

static void test_png_plte(void **state)
{
    (void)state;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0};
    unsigned char z[4096];
    size_t zlen;
    png_idat_data(z, &zlen, 1);
    file_t f;

    /* PLTE faults. */
    struct {
        unsigned char colour;
        uint32_t plte_len;
        bool plte_after_idat;
        const char *expect;
    } plte[] = {{0, 3, false, "PLTE with colour type 0"}, {3, 4, false, "PLTE length 4"},
                {3, 3, true, "PLTE repeated or after IDAT"}, {3, 3, false, NULL}};
    for (size_t k = 0; k < sizeof plte / sizeof plte[0]; k++) {
        ihdr[9] = plte[k].colour;
        f.len = 0;
        append(&f, sig, 8);
        t_png_chunk(&f, "IHDR", ihdr, 13);
        if (!plte[k].plte_after_idat)
            t_png_chunk(&f, "PLTE", (const unsigned char *)"\1\2\3\4\5\6", plte[k].plte_len);
        t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
        if (plte[k].plte_after_idat)
            t_png_chunk(&f, "PLTE", (const unsigned char *)"\1\2\3\4\5\6", plte[k].plte_len);
        t_png_chunk(&f, "IEND", NULL, 0);
        if (plte[k].expect)
            assert_invalid(validate_png, &f, plte[k].expect);
        else
            assert_valid(validate_png, &f);
    }
}

/* ------------------------------------------------------------------ JSON */

static int json_text(const char *s)
{
    char why[WHY_LEN];
    return validate_json((const unsigned char *)s, strlen(s), why, sizeof why);
}

static void test_json(void **state)
{
    (void)state;
    const char *valid[] = {"{}", "[]", " {\"a\": [1, -2.5e+3, 0, true, false, null, \"x\\u00e9\\n\"]}\r\n",
                           "0", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "\xef\xbb\xbf{\"bom\":1}",
                           "{\"success\": false, \"error\": \"Traceback ...\"}", "[[[[[]]]]]", "-0.0E-0"};
    for (size_t k = 0; k < sizeof valid / sizeof valid[0]; k++)
        if (json_text(valid[k]) != 0)
            fail_msg("valid JSON refused: %s", valid[k]);
    const char *invalid[] = {"", "   ", "{", "{\"a\":1,}", "[1,]", "{'a':1}", "{\"a\" 1}", "[01]", "[1.]",
                             "[.5]", "[+1]", "NaN", "tru", "\"abc", "\"a\tb\"", "\"\\x\"", "\"\\u12g4\"",
                             "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "{} {}", "[1] x",
                             "<html><body>Internal Server Error</body></html>"};
    for (size_t k = 0; k < sizeof invalid / sizeof invalid[0]; k++)
        if (json_text(invalid[k]) != -1)
            fail_msg("invalid JSON accepted: %s", invalid[k]);
    /* The NUL case above is cut by strlen; pass it with its length. */
    char why[WHY_LEN];
    assert_int_equal(validate_json((const unsigned char *)"{}\0", 3, why, sizeof why), -1);
    assert_non_null(strstr(why, "data after the JSON value at byte 2"));

    /* Nesting: 512 deep is fine, 513 is refused, without recursion either way. */
    char deep[1100];
    memset(deep, '[', 512);
    memset(deep + 512, ']', 512);
    assert_int_equal(validate_json((const unsigned char *)deep, 1024, why, sizeof why), 0);
    memset(deep, '[', 513);
    memset(deep + 513, ']', 513);
    assert_int_equal(validate_json((const unsigned char *)deep, 1026, why, sizeof why), -1);
    assert_non_null(strstr(why, "nested more than 512 deep"));

    assert_int_equal(json_text("{\"a\":1,}"), -1);
    validate_json((const unsigned char *)"{\"a\":1,}", 8, why, sizeof why);
    assert_non_null(strstr(why, "a member name is missing at byte 7"));
}

/* ------------------------------------------------------------------ validate_body */

static void test_body_min_bytes_and_kinds(void **state)
{
    (void)state;
    char why[WHY_LEN];
    assert_int_equal(validate_body("none", 1, (const unsigned char *)"", 0, why, sizeof why), -1);
    assert_string_equal(why, "empty or too small: 0 bytes < 1");
    assert_int_equal(validate_body("json", 1000, (const unsigned char *)"{}", 2, why, sizeof why), -1);
    assert_string_equal(why, "empty or too small: 2 bytes < 1000");
    assert_int_equal(validate_body("none", 0, NULL, 0, why, sizeof why), 0);
    assert_int_equal(validate_body(NULL, 2, (const unsigned char *)"ab", 2, why, sizeof why), 0);
    assert_int_equal(validate_body("json", 2, (const unsigned char *)"{}", 2, why, sizeof why), 0);
    assert_int_equal(validate_body("json", 0, (const unsigned char *)"{", 1, why, sizeof why), -1);
    assert_int_equal(validate_body("json", 0, NULL, 0, why, sizeof why), -1);
    assert_int_equal(validate_body("png", 0, (const unsigned char *)"{}", 2, why, sizeof why), -1);
    assert_int_equal(validate_body("ply", 0, (const unsigned char *)"{}", 2, why, sizeof why), -1);
    assert_int_equal(validate_body("glb", 0, (const unsigned char *)"{}", 2, why, sizeof why), -1);
    assert_int_equal(validate_body("obj", 0, (const unsigned char *)"{}", 2, why, sizeof why), -1);
    assert_string_equal(why, "unknown validator 'obj'");

    /* A small reason buffer is truncated, never overrun; NULL why is allowed. */
    char tiny[6];
    memset(tiny, 'z', sizeof tiny);
    assert_int_equal(validate_body("none", 10, (const unsigned char *)"", 0, tiny, 5), -1);
    assert_string_equal(tiny, "empt");
    assert_int_equal(tiny[5], 'z');
    assert_int_equal(validate_body("json", 0, (const unsigned char *)"[", 1, NULL, 0), -1);
    assert_int_equal(validate_body("glb", 0, (const unsigned char *)"[", 1, why, 0), -1);
}

/* ------------------------------------------------------------------ simworker outputs */

static void test_simworker_outputs(void **state)
{
    (void)state;
    static const struct {
        enum sw_output_kind kind;
        const char *validator;
    } kinds[] = {{SW_OUT_GLB, "glb"}, {SW_OUT_PLY, "ply"}, {SW_OUT_PNG, "png"}, {SW_OUT_JSON, "json"}};
    static const uint64_t sizes[] = {1, 4096, 300000};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        unsigned variants = sw_output_corrupt_variants(kinds[k].kind);
        assert_true(variants >= 3);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (unsigned v = 0; v <= variants; v++) {
                sw_output_meta_t meta = {.model = "test-model", .seed = 42 + v, .generation_s = 1.5,
                                         .degrade_level = 0, .params_json = "{\"steps\":8}"};
                sw_output_info_t info;
                buf_t out;
                buf_init(&out, 64u << 20);
                assert_int_equal(sw_output_render(kinds[k].kind, 1.0, sizes[s], v, &meta, &out, &info), 0);
                char why[WHY_LEN] = "";
                /* min_bytes 1: the "empty" variants must fail too. */
                int rc = validate_body(kinds[k].validator, 1, (const unsigned char *)out.data, out.len, why, sizeof why);
                if (v == 0 && rc != 0)
                    fail_msg("%s size %llu: valid output refused: %s", kinds[k].validator,
                             (unsigned long long)sizes[s], why);
                if (v != 0 && (rc != -1 || why[0] == '\0'))
                    fail_msg("%s size %llu: corrupt variant '%s' accepted", kinds[k].validator,
                             (unsigned long long)sizes[s], sw_output_corrupt_name(kinds[k].kind, v));
                buf_free(&out);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_valid),
        cmocka_unit_test(test_png_faults),
        cmocka_unit_test(test_png_ihdr),
        cmocka_unit_test(test_png_chunk_rules),
        cmocka_unit_test(test_png_plte),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_body_min_bytes_and_kinds),
        cmocka_unit_test(test_simworker_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
