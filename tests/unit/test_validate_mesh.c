/*
 * test_validate_mesh: the GLB and PLY validators (src/quality/validate_glb.c,
 * src/quality/validate_ply.c).
 *
 * Every file here is built by hand in the test (a one-triangle GLB, ascii and binary PLYs),
 * checked valid, then broken one way at a time and checked invalid with a reason that names
 * the fault. The PNG and JSON validators, validate_body and the simulated worker's outputs
 * are in test_validate.c.
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
