/*
 * test_validate: the built-in output validators (src/quality/validate.c).
 *
 * Every file here is built by hand in the test (a one-triangle GLB, ascii and binary PLYs,
 * a 1x1 PNG with a stored-deflate IDAT whose CRCs and Adler-32 the test computes with its
 * own bit-by-bit code), checked valid, then broken one way at a time and checked invalid
 * with a reason that names the fault. The simulated worker's renderer (sim/worker/outputs.c,
 * included below) is run over every output kind and corruption variant: variant 0 must
 * pass and every other variant must fail, at several sizes.
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

/* The simulated worker's renderer, compiled into this test (its functions are static or
 * sw_-prefixed, so nothing collides). */
#include "../../sim/worker/outputs.c"

#define WHY_LEN 256
#define MAX_FILE 32768

typedef struct file {
    unsigned char data[MAX_FILE];
    size_t len;
} file_t;

/* ------------------------------------------------------------------ helpers */

static void t_le32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static void t_be32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (24 - 8 * k));
}

static void append(file_t *f, const void *p, size_t n)
{
    assert_true(f->len + n <= MAX_FILE);
    memcpy(f->data + f->len, p, n);
    f->len += n;
}

static void append_str(file_t *f, const char *s)
{
    append(f, s, strlen(s));
}

/* Bit-by-bit CRC-32, independent of the table-driven one under test. */
static uint32_t t_crc32(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* Asserts validate_<kind> says invalid with a reason containing `expect`. */
#define assert_invalid(fn, f, expect)                                                        \
    do {                                                                                     \
        char why_[WHY_LEN] = "";                                                             \
        int rc_ = fn((f)->data, (f)->len, why_, sizeof why_);                                \
        if (rc_ != -1 || strstr(why_, (expect)) == NULL)                                     \
            fail_msg("%s: rc %d, reason \"%s\", wanted -1 with \"%s\"", #fn, rc_, why_, (expect)); \
    } while (0)

#define assert_valid(fn, f)                                                                  \
    do {                                                                                     \
        char why_[WHY_LEN] = "";                                                             \
        int rc_ = fn((f)->data, (f)->len, why_, sizeof why_);                                \
        if (rc_ != 0)                                                                        \
            fail_msg("%s: rc %d, reason \"%s\", wanted valid", #fn, rc_, why_);              \
    } while (0)

/* ------------------------------------------------------------------ GLB */

/* One triangle: 3 float VEC3 positions (36 bytes) then 3 ushort indices (6 bytes);
 * buffer byteLength 42, BIN chunk padded to 44. */
#define TRIANGLE_JSON_HEAD                                                                         \
    "{\"asset\":{\"version\":\"2.0\",\"generator\":\"tests\"},\"scene\":0,\"scenes\":[{\"nodes\":[0]}]," \
    "\"nodes\":[{\"mesh\":0}],\"meshes\":[{\"primitives\":[{\"attributes\":{\"POSITION\":0},\"indices\":1}]}],"
#define TRIANGLE_BUFFERS "\"buffers\":[{\"byteLength\":42}],"
#define TRIANGLE_VIEWS                                                                               \
    "\"bufferViews\":[{\"buffer\":0,\"byteOffset\":0,\"byteLength\":36,\"target\":34962},"          \
    "{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6,\"target\":34963}],"
#define TRIANGLE_ACCESSORS                                                                           \
    "\"accessors\":[{\"bufferView\":0,\"componentType\":5126,\"count\":3,\"type\":\"VEC3\","       \
    "\"min\":[0,0,0],\"max\":[1,1,0]},{\"bufferView\":1,\"componentType\":5123,\"count\":3,\"type\":\"SCALAR\"}]}"
#define TRIANGLE_JSON TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS TRIANGLE_VIEWS TRIANGLE_ACCESSORS

typedef struct glb_options {
    bool no_json_padding; /* JSON chunk length = the JSON's own length */
    bool no_bin_padding;  /* BIN chunk length = bin_len */
    bool no_bin;          /* no BIN chunk at all */
    size_t trailing;      /* zero bytes after the last chunk, counted in the header */
} glb_options_t;

static void triangle_bin(unsigned char *bin)
{
    const float pos[9] = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    memset(bin, 0, 42);
    for (int k = 0; k < 9; k++) {
        uint32_t u;
        memcpy(&u, &pos[k], 4);
        t_le32(bin + 4 * k, u);
    }
    const uint16_t idx[3] = {0, 1, 2};
    for (int k = 0; k < 3; k++) {
        bin[36 + 2 * k] = (unsigned char)idx[k];
        bin[37 + 2 * k] = (unsigned char)(idx[k] >> 8);
    }
}

static void build_glb(file_t *f, const char *json, const unsigned char *bin, size_t bin_len, const glb_options_t *o)
{
    static const glb_options_t defaults = {0};
    if (o == NULL)
        o = &defaults;
    unsigned char w[12];
    f->len = 0;
    append(f, "glTF", 4);
    t_le32(w, 2);
    append(f, w, 4);
    append(f, w, 4); /* total length, set at the end */
    size_t jl = strlen(json), jchunk = o->no_json_padding ? jl : (jl + 3) & ~(size_t)3;
    t_le32(w, (uint32_t)jchunk);
    append(f, w, 4);
    append(f, "JSON", 4);
    append(f, json, jl);
    for (size_t i = jl; i < jchunk; i++)
        append(f, " ", 1);
    if (!o->no_bin) {
        size_t bchunk = o->no_bin_padding ? bin_len : (bin_len + 3) & ~(size_t)3;
        t_le32(w, (uint32_t)bchunk);
        append(f, w, 4);
        append(f, "BIN\0", 4);
        append(f, bin, bin_len);
        for (size_t i = bin_len; i < bchunk; i++)
            append(f, "\0", 1);
    }
    for (size_t i = 0; i < o->trailing; i++)
        append(f, "\0", 1);
    t_le32(f->data + 8, (uint32_t)f->len);
}

static void build_triangle_with(file_t *f, const char *json, const glb_options_t *o)
{
    unsigned char bin[42];
    triangle_bin(bin);
    build_glb(f, json, bin, sizeof bin, o);
}

static void test_glb_valid_triangle(void **state)
{
    (void)state;
    file_t f;
    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    assert_int_equal(f.len % 4, 0);
    assert_valid(validate_glb, &f);
    char why[8] = "keep";
    assert_int_equal(validate_body("glb", 100, f.data, f.len, why, sizeof why), 0);
    assert_string_equal(why, "keep"); /* untouched on success */
}

static void test_glb_header_faults(void **state)
{
    (void)state;
    file_t f;
    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    f.data[0] = 'x';
    assert_invalid(validate_glb, &f, "bad magic");

    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    t_le32(f.data + 4, 1);
    assert_invalid(validate_glb, &f, "version 1");

    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    t_le32(f.data + 8, (uint32_t)f.len + 4);
    assert_invalid(validate_glb, &f, "length mismatch");

    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    f.len -= 8; /* truncated: the header still says the full length */
    assert_invalid(validate_glb, &f, "length mismatch");

    f.len = 11;
    assert_invalid(validate_glb, &f, "12-byte header");
    f.len = 12;
    t_le32(f.data + 8, 12);
    assert_invalid(validate_glb, &f, "no JSON chunk");
}

static void test_glb_chunk_faults(void **state)
{
    (void)state;
    file_t f;
    /* TRIANGLE_JSON's length is not a multiple of 4, so unpadded it is misaligned. */
    assert_true(strlen(TRIANGLE_JSON) % 4 != 0);
    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.no_json_padding = true});
    assert_invalid(validate_glb, &f, "chunk 0 (JSON) length");
    assert_invalid(validate_glb, &f, "not a multiple of 4");

    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.no_bin_padding = true});
    assert_invalid(validate_glb, &f, "chunk 1 (BIN) length 42 is not a multiple of 4");

    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.trailing = 4});
    assert_invalid(validate_glb, &f, "4 trailing bytes");

    /* A chunk length that runs past the end, the header length kept consistent. */
    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    size_t bin_at = f.len - 44 - 8;
    t_le32(f.data + bin_at, 0xFFFFFFF0u);
    assert_invalid(validate_glb, &f, "runs past the end");

    /* BIN first. */
    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    memcpy(f.data + 16, "BIN\0", 4);
    assert_invalid(validate_glb, &f, "first chunk is not JSON");

    /* Buffer 0 without uri and no BIN chunk. */
    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.no_bin = true});
    assert_invalid(validate_glb, &f, "no BIN chunk");

    /* BIN as chunk 2. */
    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.trailing = 8});
    memcpy(f.data + f.len - 4, "BIN\0", 4);
    assert_invalid(validate_glb, &f, "BIN chunk is chunk 2");

    /* An unknown chunk after BIN is allowed; a second JSON chunk is not. */
    build_triangle_with(&f, TRIANGLE_JSON, &(glb_options_t){.trailing = 8});
    memcpy(f.data + f.len - 4, "XTRA", 4);
    assert_valid(validate_glb, &f);
    memcpy(f.data + f.len - 4, "JSON", 4);
    assert_invalid(validate_glb, &f, "second JSON chunk");
}

static void test_glb_json_faults(void **state)
{
    (void)state;
    file_t f;
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.0\"},}", NULL);
    assert_invalid(validate_glb, &f, "JSON chunk does not parse");

    build_triangle_with(&f, "[1,2,3]", NULL);
    assert_invalid(validate_glb, &f, "not an object");

    build_triangle_with(&f, "{\"asset\":{\"generator\":\"x\"}}", NULL);
    assert_invalid(validate_glb, &f, "asset.version is missing");

    build_triangle_with(&f, "{\"scene\":0}", NULL);
    assert_invalid(validate_glb, &f, "no \"asset\"");

    build_triangle_with(&f, "{\"asset\":{\"version\":\"1.0\"}}", NULL);
    assert_invalid(validate_glb, &f, "is not 2.x");
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.\"}}", NULL);
    assert_invalid(validate_glb, &f, "is not 2.x");
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.1\"}}", NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.0\"},\"buffers\":{}}", NULL);
    assert_invalid(validate_glb, &f, "\"buffers\" is not an array");
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.0\"},\"buffers\":[{\"byteLength\":42,\"uri\":7}]}", NULL);
    assert_invalid(validate_glb, &f, "buffer 0 uri is not a string");
    /* Valid JSON that cJSON refuses (a lone surrogate escape). */
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.0\"},\"x\":\"\\ud800\"}", NULL);
    assert_invalid(validate_glb, &f, "could not be loaded");

    /* NUL padding instead of spaces. */
    build_triangle_with(&f, TRIANGLE_JSON, NULL);
    size_t jl = strlen(TRIANGLE_JSON);
    f.data[20 + jl] = '\0';
    assert_invalid(validate_glb, &f, "JSON chunk does not parse");

    /* The smallest valid document: no buffers at all, no BIN. */
    build_triangle_with(&f, "{\"asset\":{\"version\":\"2.0\"}}", &(glb_options_t){.no_bin = true});
    assert_valid(validate_glb, &f);
}

static void test_glb_buffer_view_faults(void **state)
{
    (void)state;
    file_t f;
    /* bufferView 1 = 36..44, past the 42-byte buffer. */
    build_triangle_with(&f,
        TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":8}],"
        TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "bufferView 1 (offset 36 + length 8) is past the end of buffer 0");

    /* A buffer bigger than the BIN chunk. */
    build_triangle_with(&f, TRIANGLE_JSON_HEAD "\"buffers\":[{\"byteLength\":48}]," TRIANGLE_VIEWS TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "exceeds the BIN chunk");

    /* A huge offset must not wrap. */
    build_triangle_with(&f,
        TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36},{\"buffer\":0,\"byteOffset\":9007199254740990,\"byteLength\":6}],"
        TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "past the end of buffer 0");

    build_triangle_with(&f,
        TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":1,\"byteLength\":36},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "bufferView 0 names no existing buffer");

    build_triangle_with(&f,
        TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36,\"byteStride\":6},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "byteStride");

    build_triangle_with(&f,
        TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":-36},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "bufferView 0 has no valid byteLength");

    /* A second buffer with uri (external bytes) is fine; one without uri is not. */
    build_triangle_with(&f, TRIANGLE_JSON_HEAD "\"buffers\":[{\"byteLength\":42},{\"byteLength\":10,\"uri\":\"x.bin\"}],"
                        TRIANGLE_VIEWS TRIANGLE_ACCESSORS, NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, TRIANGLE_JSON_HEAD "\"buffers\":[{\"byteLength\":42},{\"byteLength\":10}],"
                        TRIANGLE_VIEWS TRIANGLE_ACCESSORS, NULL);
    assert_invalid(validate_glb, &f, "buffer 1 has no uri");
}

#define VIEWS_AND(acc) TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS TRIANGLE_VIEWS "\"accessors\":[" acc "]}"
#define INDEX_ACCESSOR ",{\"bufferView\":1,\"componentType\":5123,\"count\":3,\"type\":\"SCALAR\"}"

static void test_glb_accessor_faults(void **state)
{
    (void)state;
    file_t f;
    /* 4 VEC3 floats = 48 bytes > the 36-byte bufferView. */
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5126,\"count\":4,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "accessor 0 data");
    assert_invalid(validate_glb, &f, "past the end of bufferView 0 (36 bytes)");

    /* Offset 4 + 3 x 12 = 40 > 36. */
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"byteOffset\":4,\"componentType\":5126,\"count\":3,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "past the end of bufferView 0");

    /* A count near 2^53 must not wrap the multiplication. */
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5126,\"count\":9007199254740992,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "past the end of bufferView 0");

    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5127,\"count\":3,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "componentType");

    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5126,\"count\":3,\"type\":\"VEC5\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "type is not");

    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5126,\"count\":0,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "no valid count");

    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":7,\"componentType\":5126,\"count\":3,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "no existing bufferView");

    /* A float accessor at offset 2 is misaligned. */
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"byteOffset\":2,\"componentType\":5126,\"count\":2,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "not a multiple of its component size");

    /* MAT3 of bytes: columns padded to 4 -> 12 bytes per element; 3 of them fill 36 exactly,
     * so does an accessor without bufferView (zeros), and a mesh naming a missing accessor fails. */
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5121,\"count\":3,\"type\":\"MAT3\"}" INDEX_ACCESSOR), NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, VIEWS_AND("{\"bufferView\":0,\"componentType\":5121,\"count\":4,\"type\":\"MAT3\"}" INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "past the end of bufferView 0");
    build_triangle_with(&f, VIEWS_AND("{\"componentType\":5126,\"count\":3,\"type\":\"VEC3\"}" INDEX_ACCESSOR), NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, VIEWS_AND("{\"componentType\":5126,\"count\":3,\"type\":\"VEC3\"}"), NULL);
    assert_invalid(validate_glb, &f, "mesh 0 indices names no existing accessor");

    /* Sparse: 2 ushort indices at 36 (4 bytes) fit; 4 do not (8 > 6). */
    build_triangle_with(&f, VIEWS_AND("{\"componentType\":5126,\"count\":3,\"type\":\"VEC3\",\"sparse\":{\"count\":2,"
                                      "\"indices\":{\"bufferView\":1,\"componentType\":5123},\"values\":{\"bufferView\":0}}}"
                                      INDEX_ACCESSOR), NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, VIEWS_AND("{\"componentType\":5126,\"count\":4,\"type\":\"VEC3\",\"sparse\":{\"count\":4,"
                                      "\"indices\":{\"bufferView\":1,\"componentType\":5123},\"values\":{\"bufferView\":0}}}"
                                      INDEX_ACCESSOR), NULL);
    assert_invalid(validate_glb, &f, "sparse indices");
}

static void test_glb_stride(void **state)
{
    (void)state;
    file_t f;
    /* Interleaved: stride 12 over a 36-byte view, VEC2 floats (8 bytes): offset 4 + 2 x 12 + 8 = 36 fits;
     * offset 8 does not. */
    build_triangle_with(&f, TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36,\"byteStride\":12},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        "\"accessors\":[{\"bufferView\":0,\"byteOffset\":4,\"componentType\":5126,\"count\":3,\"type\":\"VEC2\"}" INDEX_ACCESSOR "]}", NULL);
    assert_valid(validate_glb, &f);
    build_triangle_with(&f, TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36,\"byteStride\":12},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        "\"accessors\":[{\"bufferView\":0,\"byteOffset\":8,\"componentType\":5126,\"count\":3,\"type\":\"VEC2\"}" INDEX_ACCESSOR "]}", NULL);
    assert_invalid(validate_glb, &f, "stride 12");
    /* Stride smaller than the element. */
    build_triangle_with(&f, TRIANGLE_JSON_HEAD TRIANGLE_BUFFERS
        "\"bufferViews\":[{\"buffer\":0,\"byteLength\":36,\"byteStride\":8},{\"buffer\":0,\"byteOffset\":36,\"byteLength\":6}],"
        "\"accessors\":[{\"bufferView\":0,\"componentType\":5126,\"count\":3,\"type\":\"VEC3\"}" INDEX_ACCESSOR "]}", NULL);
    assert_invalid(validate_glb, &f, "larger than its byteStride");
}

/* A JSON chunk of more than a million values is refused before cJSON builds a tree of it. */
static void test_glb_json_value_cap(void **state)
{
    (void)state;
    const char *head = "{\"asset\":{\"version\":\"2.0\"},\"x\":[";
    size_t zeros = 1000000, json_len = strlen(head) + 2 * zeros + 1; /* "0," x n, "0]}" */
    size_t chunk = (json_len + 3) & ~(size_t)3, total = 20 + chunk;
    unsigned char *g = malloc(total);
    assert_non_null(g);
    memcpy(g, "glTF", 4);
    t_le32(g + 4, 2);
    t_le32(g + 8, (uint32_t)total);
    t_le32(g + 12, (uint32_t)chunk);
    memcpy(g + 16, "JSON", 4);
    unsigned char *j = g + 20;
    memcpy(j, head, strlen(head));
    j += strlen(head);
    for (size_t k = 0; k < zeros; k++, j += 2)
        memcpy(j, k + 1 < zeros ? "0," : "0]", 2);
    *j++ = '}';
    while (j < g + total)
        *j++ = ' ';
    char why[WHY_LEN];
    assert_int_equal(validate_glb(g, total, why, sizeof why), -1);
    assert_non_null(strstr(why, "more than 1000000 values"));
    /* The same with 999990 zeros fits under the cap and is valid. */
    memcpy(g + 20 + strlen(head) + 2 * 999990 - 2, "0]}", 3);
    memset(g + 20 + strlen(head) + 2 * 999990 + 1, ' ', total - (20 + strlen(head) + 2 * 999990 + 1));
    assert_int_equal(validate_glb(g, total, why, sizeof why), 0);
    free(g);
}

/* ------------------------------------------------------------------ PLY */

#define PLY_ASCII_TRIANGLE                                                                       \
    "ply\nformat ascii 1.0\ncomment made by hand\nobj_info test\nelement vertex 3\n"             \
    "property float x\nproperty float y\nproperty float z\n"                                     \
    "element face 1\nproperty list uchar int vertex_indices\nend_header\n"

static void ply_text(file_t *f, const char *s)
{
    f->len = 0;
    append_str(f, s);
}

static void test_ply_ascii(void **state)
{
    (void)state;
    file_t f;
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0.5 -2e-3\n0 1 nan\n3 0 1 2\n");
    assert_valid(validate_ply, &f);
    /* CRLF line ends, blank lines, no final newline. */
    ply_text(&f, "ply\r\nformat ascii 1.0\r\nelement vertex 2\r\nproperty float x\r\nend_header\r\n1\r\n\r\n  2  ");
    assert_valid(validate_ply, &f);

    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n");
    assert_invalid(validate_ply, &f, "ascii body has 3 data lines, header declares 4 (count mismatch)"); /* short */
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n3 0 1 2\n");
    assert_invalid(validate_ply, &f, "element 'vertex' row 2 has more values"); /* a vertex line missing */
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n3 0 1 2\n");
    assert_invalid(validate_ply, &f, "count mismatch"); /* long: an extra face */
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0\n0 1 0\n3 0 1 2\n");
    assert_invalid(validate_ply, &f, "element 'vertex' row 1 has fewer values");
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0 7\n0 1 0\n3 0 1 2\n");
    assert_invalid(validate_ply, &f, "element 'vertex' row 1 has more values");
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 x\n0 1 0\n3 0 1 2\n");
    assert_invalid(validate_ply, &f, "not a number");
    /* List rows: the count says how many values follow. */
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n4 0 1 2\n");
    assert_invalid(validate_ply, &f, "element 'face' row 0 has fewer values");
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n2 0 1 2\n");
    assert_invalid(validate_ply, &f, "element 'face' row 0 has more values");
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n-1\n");
    assert_invalid(validate_ply, &f, "list count is not a non-negative integer");
    ply_text(&f, PLY_ASCII_TRIANGLE "0 0 0\n1 0 0\n0 1 0\n18446744073709551615 1\n");
    assert_invalid(validate_ply, &f, "fewer values");
}

/* Vertex element of 3 floats x 3, then a face element with a uchar-count int list. */
static void ply_binary(file_t *f, bool big_endian, unsigned face_count, size_t extra)
{
    f->len = 0;
    append_str(f, big_endian ? "ply\nformat binary_big_endian 1.0\n" : "ply\nformat binary_little_endian 1.0\n");
    append_str(f, "element vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
                  "element face 1\nproperty list uchar int vertex_indices\nend_header\n");
    const float pos[9] = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    for (int k = 0; k < 9; k++) {
        uint32_t u;
        unsigned char b[4];
        memcpy(&u, &pos[k], 4);
        if (big_endian)
            t_be32(b, u);
        else
            t_le32(b, u);
        append(f, b, 4);
    }
    unsigned char c = (unsigned char)face_count;
    append(f, &c, 1);
    for (unsigned k = 0; k < 3; k++) {
        unsigned char b[4];
        if (big_endian)
            t_be32(b, k);
        else
            t_le32(b, k);
        append(f, b, 4);
    }
    for (size_t k = 0; k < extra; k++)
        append(f, "\0", 1);
}

static void test_ply_binary(void **state)
{
    (void)state;
    file_t f;
    ply_binary(&f, false, 3, 0);
    assert_valid(validate_ply, &f);
    ply_binary(&f, true, 3, 0);
    assert_valid(validate_ply, &f);

    ply_binary(&f, false, 3, 0);
    f.len -= 1;
    assert_invalid(validate_ply, &f, "body too short: element 'face' row 0 of 1 is cut");
    ply_binary(&f, false, 3, 5);
    assert_invalid(validate_ply, &f, "body too long: 5 bytes");
    /* List counts decide the row length: 2 items leave 4 bytes over, 4 items run short. */
    ply_binary(&f, false, 2, 0);
    assert_invalid(validate_ply, &f, "body too long: 4 bytes");
    ply_binary(&f, false, 4, 0);
    assert_invalid(validate_ply, &f, "body too short");

    /* Fixed-size element, short and long. */
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty double x\nend_header\n");
    append(&f, "0123456789abcdef", 16);
    assert_valid(validate_ply, &f);
    f.len -= 1;
    assert_invalid(validate_ply, &f, "body too short: element 'vertex' needs 2 x 8 bytes, 15 left");
    f.len += 2;
    assert_invalid(validate_ply, &f, "body too long: 1 bytes");

    /* A count whose product with the row size overflows 64 bits. */
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement vertex 4611686018427387904\nproperty double x\nend_header\n");
    assert_invalid(validate_ply, &f, "body too short");

    /* Negative list count with a signed count type. */
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement face 1\nproperty list char int v\nend_header\n\xff");
    assert_invalid(validate_ply, &f, "negative list count");
    /* Element without properties takes no bytes. */
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement nothing 5\nend_header\n");
    assert_valid(validate_ply, &f);
}

static void test_ply_header_faults(void **state)
{
    (void)state;
    file_t f;
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\n");
    assert_invalid(validate_ply, &f, "missing end_header");
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement vertex 0\nproperty float x\nend_header");
    assert_invalid(validate_ply, &f, "not followed by a newline");
    ply_text(&f, "ply\nformat binary_middle_endian 1.0\nelement vertex 0\nend_header\n");
    assert_invalid(validate_ply, &f, "unknown format 'binary_middle_endian'");
    ply_text(&f, "ply\nformat ascii 2.0\nend_header\n");
    assert_invalid(validate_ply, &f, "format version '2.0'");
    ply_text(&f, "plx\nformat ascii 1.0\nend_header\n");
    assert_invalid(validate_ply, &f, "first line is not \"ply\"");
    ply_text(&f, "ply\nelement vertex 1\nformat ascii 1.0\nend_header\n");
    assert_invalid(validate_ply, &f, "element before the format line");
    ply_text(&f, "ply\nformat ascii 1.0\nproperty float x\nend_header\n");
    assert_invalid(validate_ply, &f, "property before any element");
    ply_text(&f, "ply\nformat ascii 1.0\nelement vertex 1\nproperty float16 x\nend_header\n0\n");
    assert_invalid(validate_ply, &f, "unknown property type 'float16'");
    ply_text(&f, "ply\nformat ascii 1.0\nelement face 1\nproperty list float int v\nend_header\n0\n");
    assert_invalid(validate_ply, &f, "list count type 'float'");
    ply_text(&f, "ply\nformat ascii 1.0\nelement vertex 1x\nproperty float x\nend_header\n0\n");
    assert_invalid(validate_ply, &f, "count '1x' is not a number");
    ply_text(&f, "ply\nformat ascii 1.0\nelement vertex 99999999999999999999\nend_header\n");
    assert_invalid(validate_ply, &f, "is not a number");
    ply_text(&f, "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nbogus line\nend_header\n0\n");
    assert_invalid(validate_ply, &f, "unknown header line 'bogus'");
    ply_text(&f, "ply\nend_header\n");
    assert_invalid(validate_ply, &f, "missing format line");
    ply_text(&f, "ply\nformat ascii 1.0\nformat ascii 1.0\nend_header\n");
    assert_invalid(validate_ply, &f, "a second format line");

    /* The header's tables are bounded: 64 elements, 1024 properties. */
    ply_text(&f, "ply\nformat binary_little_endian 1.0\n");
    for (int k = 0; k < 64; k++)
        append_str(&f, "element e 0\n");
    append_str(&f, "end_header\n");
    assert_valid(validate_ply, &f);
    f.len -= strlen("end_header\n");
    append_str(&f, "element e 0\nend_header\n");
    assert_invalid(validate_ply, &f, "more than 64 elements");
    ply_text(&f, "ply\nformat binary_little_endian 1.0\nelement vertex 0\n");
    for (int k = 0; k < 1025; k++)
        append_str(&f, "property uchar p\n");
    append_str(&f, "end_header\n");
    assert_invalid(validate_ply, &f, "more than 1024 properties");
    f.len = 0;
    assert_invalid(validate_ply, &f, "empty body");
}

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

static void test_png_ihdr_and_chunks(void **state)
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

    /* PLTE faults, IEND with data, interlace method 2. */
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
    ihdr[9] = 2;
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    t_png_chunk(&f, "IDAT", z, (uint32_t)zlen);
    t_png_chunk(&f, "IEND", z, 1);
    assert_invalid(validate_png, &f, "IEND length 1");
    ihdr[12] = 2;
    f.len = 0;
    append(&f, sig, 8);
    t_png_chunk(&f, "IHDR", ihdr, 13);
    assert_invalid(validate_png, &f, "interlace method 0/0/2");
    ihdr[12] = 0;

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
        cmocka_unit_test(test_glb_valid_triangle),
        cmocka_unit_test(test_glb_header_faults),
        cmocka_unit_test(test_glb_chunk_faults),
        cmocka_unit_test(test_glb_json_faults),
        cmocka_unit_test(test_glb_buffer_view_faults),
        cmocka_unit_test(test_glb_accessor_faults),
        cmocka_unit_test(test_glb_stride),
        cmocka_unit_test(test_glb_json_value_cap),
        cmocka_unit_test(test_ply_ascii),
        cmocka_unit_test(test_ply_binary),
        cmocka_unit_test(test_ply_header_faults),
        cmocka_unit_test(test_png_valid),
        cmocka_unit_test(test_png_faults),
        cmocka_unit_test(test_png_ihdr_and_chunks),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_body_min_bytes_and_kinds),
        cmocka_unit_test(test_simworker_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
