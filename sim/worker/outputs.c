/*
 * outputs: GLB / PLY / PNG / JSON rendering and their corrupt variants. See outputs.h.
 * Everything is written little-endian by hand (the formats say so), independent of the
 * host's byte order. No compression library: PNG uses stored deflate blocks.
 */
#include "outputs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_OUTPUT_BYTES (256ull * 1024 * 1024)

/* ---- little helpers ---------------------------------------------------------------- */

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int append_le32(buf_t *b, uint32_t v)
{
    unsigned char p[4];
    put_le32(p, v);
    return buf_append(b, p, 4);
}

static int append_f32(buf_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return append_le32(b, u);
}

static uint32_t crc_table[256];
static int crc_ready;

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    if (!crc_ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
        crc_ready = 1;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* Deterministic pseudo-random stream (splitmix64) for output contents. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double target_bytes(double scale, uint64_t base)
{
    double t = (double)base * scale;
    if (!(t > 0))
        t = 0;
    if (t > (double)MAX_OUTPUT_BYTES)
        t = (double)MAX_OUTPUT_BYTES;
    return t;
}

/* ---- GLB ---------------------------------------------------------------------------- */

enum { GLB_OK = 0, GLB_TRUNCATED, GLB_BAD_LENGTH, GLB_BAD_MAGIC, GLB_BAD_JSON, GLB_ACCESSOR_OUTSIDE, GLB_EMPTY, GLB_N };
static const char *glb_variant_names[GLB_N] = {"valid", "truncated", "bad_total_length", "bad_magic",
                                               "unparsable_json_chunk", "accessor_outside_buffer", "empty"};

static int render_glb(double scale, uint64_t base, unsigned variant, const sw_output_meta_t *m,
                      buf_t *out, sw_output_info_t *info)
{
    if (variant == GLB_EMPTY) {
        info->elements = 0;
        return 0;
    }
    /* ~36 bytes per vertex: 12 of position, ~24 of indices. */
    uint64_t n = (uint64_t)sqrt(target_bytes(scale, base) / 36.0);
    if (n < 2)
        n = 2;
    if (n > 2700)
        n = 2700;
    uint64_t nv = n * n, ni = 6 * (n - 1) * (n - 1);
    uint64_t pos_len = 12 * nv, idx_len = 4 * ni, bin_len = pos_len + idx_len;
    float mn[3] = {INFINITY, INFINITY, INFINITY}, mx[3] = {-INFINITY, -INFINITY, -INFINITY};
    double phase = (double)(m->seed % 1000) / 159.0;

    /* BIN chunk contents first, into a scratch buffer. */
    buf_t bin;
    buf_init(&bin, bin_len + 16);
    if (buf_reserve(&bin, bin_len) != 0) {
        buf_free(&bin);
        return -1;
    }
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t c = 0; c < n; c++) {
            float p[3];
            p[0] = (float)((double)c / (double)(n - 1) - 0.5);
            p[2] = (float)((double)r / (double)(n - 1) - 0.5);
            p[1] = (float)(0.1 * sin(6.0 * p[0] + phase) * cos(6.0 * p[2]));
            for (int k = 0; k < 3; k++) {
                if (p[k] < mn[k])
                    mn[k] = p[k];
                if (p[k] > mx[k])
                    mx[k] = p[k];
                append_f32(&bin, p[k]);
            }
        }
    for (uint64_t r = 0; r + 1 < n; r++)
        for (uint64_t c = 0; c + 1 < n; c++) {
            uint32_t a = (uint32_t)(r * n + c), b = a + 1, d = (uint32_t)(a + n), e = d + 1;
            uint32_t tri[6] = {a, d, b, b, d, e};
            for (int k = 0; k < 6; k++)
                append_le32(&bin, tri[k]);
        }

    char json[2048];
    uint64_t idx_count = variant == GLB_ACCESSOR_OUTSIDE ? ni + 4096 : ni;
    int jl = snprintf(json, sizeof(json),
        "{\"asset\":{\"version\":\"2.0\",\"generator\":\"simworker (%s)\"},"
        "\"scene\":0,\"scenes\":[{\"nodes\":[0]}],"
        "\"nodes\":[{\"mesh\":0,\"name\":\"generated\"}],"
        "\"meshes\":[{\"primitives\":[{\"attributes\":{\"POSITION\":0},\"indices\":1,\"mode\":4}]}],"
        "\"buffers\":[{\"byteLength\":%llu}],"
        "\"bufferViews\":[{\"buffer\":0,\"byteOffset\":0,\"byteLength\":%llu,\"target\":34962},"
        "{\"buffer\":0,\"byteOffset\":%llu,\"byteLength\":%llu,\"target\":34963}],"
        "\"accessors\":[{\"bufferView\":0,\"componentType\":5126,\"count\":%llu,\"type\":\"VEC3\","
        "\"min\":[%.9g,%.9g,%.9g],\"max\":[%.9g,%.9g,%.9g]},"
        "{\"bufferView\":1,\"componentType\":5125,\"count\":%llu,\"type\":\"SCALAR\"}]}",
        m->model ? m->model : "sim", (unsigned long long)bin_len, (unsigned long long)pos_len,
        (unsigned long long)pos_len, (unsigned long long)idx_len, (unsigned long long)nv,
        (double)mn[0], (double)mn[1], (double)mn[2], (double)mx[0], (double)mx[1], (double)mx[2],
        (unsigned long long)idx_count);
    if (jl < 0 || (size_t)jl >= sizeof(json)) {
        buf_free(&bin);
        return -1;
    }
    if (variant == GLB_BAD_JSON)
        json[0] = '#';
    uint32_t json_chunk = (uint32_t)((jl + 3) & ~3);
    uint64_t total = 12 + 8 + json_chunk + 8 + bin_len;
    unsigned char hdr[12];
    memcpy(hdr, variant == GLB_BAD_MAGIC ? "glTX" : "glTF", 4);
    put_le32(hdr + 4, 2);
    put_le32(hdr + 8, (uint32_t)(variant == GLB_BAD_LENGTH ? total + 100 : total));
    int rc = buf_reserve(out, (size_t)total);
    rc |= buf_append(out, hdr, 12);
    rc |= append_le32(out, json_chunk);
    rc |= buf_append(out, "JSON", 4);
    rc |= buf_append(out, json, (size_t)jl);
    for (int i = jl; i < (int)json_chunk; i++)
        rc |= buf_append(out, " ", 1);
    rc |= append_le32(out, (uint32_t)bin_len);
    rc |= buf_append(out, "BIN\0", 4);
    rc |= buf_append(out, bin.data, bin.len);
    buf_free(&bin);
    if (rc != 0)
        return -1;
    if (variant == GLB_TRUNCATED)
        out->len = out->len * 6 / 10;
    info->elements = nv;
    return 0;
}

/* ---- PLY ---------------------------------------------------------------------------- */

enum { PLY_OK = 0, PLY_TRUNCATED, PLY_COUNT_TOO_LARGE, PLY_BAD_MAGIC, PLY_EMPTY, PLY_N };
static const char *ply_variant_names[PLY_N] = {"valid", "truncated", "count_larger_than_data", "bad_magic", "empty"};

#define PLY_FLOATS 14

static int render_ply(double scale, uint64_t base, unsigned variant, const sw_output_meta_t *m,
                      buf_t *out, sw_output_info_t *info)
{
    if (variant == PLY_EMPTY) {
        info->elements = 0;
        return 0;
    }
    uint64_t n = (uint64_t)(target_bytes(scale, base) / (4.0 * PLY_FLOATS));
    if (n < 1)
        n = 1;
    static const char *props[PLY_FLOATS] = {"x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
                                            "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"};
    int rc = buf_reserve(out, (size_t)(n * 4 * PLY_FLOATS + 512));
    rc |= buf_printf(out, "%s\nformat binary_little_endian 1.0\ncomment simworker %s\nelement vertex %llu\n",
                     variant == PLY_BAD_MAGIC ? "plx" : "ply", m->model ? m->model : "sim",
                     (unsigned long long)(variant == PLY_COUNT_TOO_LARGE ? n + n / 10 + 1 : n));
    for (int i = 0; i < PLY_FLOATS; i++)
        rc |= buf_printf(out, "property float %s\n", props[i]);
    rc |= buf_append_str(out, "end_header\n");
    if (rc != 0)
        return -1;
    uint64_t st = m->seed * 7919 + 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = mix64(&st);
        float u = (float)((r & 0xffff) / 65535.0), v = (float)(((r >> 16) & 0xffff) / 65535.0);
        float w = (float)(((r >> 32) & 0xffff) / 65535.0);
        float f[PLY_FLOATS] = {u - 0.5f, v - 0.5f, w - 0.5f, u, v, w, 2.0f, -4.6f, -4.6f, -4.6f,
                               1.0f, 0.0f, 0.0f, 0.0f};
        for (int k = 0; k < PLY_FLOATS; k++)
            if (append_f32(out, f[k]) != 0)
                return -1;
    }
    if (variant == PLY_TRUNCATED)
        out->len -= (size_t)(n * 4 * PLY_FLOATS / 2 + 1);
    info->elements = n;
    return 0;
}

/* ---- PNG ---------------------------------------------------------------------------- */

enum { PNG_OK = 0, PNG_TRUNCATED, PNG_BAD_CRC, PNG_BAD_SIGNATURE, PNG_EMPTY, PNG_N };
static const char *png_variant_names[PNG_N] = {"valid", "truncated", "bad_crc", "bad_signature", "empty"};

/* Appends a chunk: length, type, data, CRC over type + data. */
static int png_chunk(buf_t *out, const char *type, const unsigned char *data, size_t len, int bad_crc)
{
    unsigned char h[8];
    put_be32(h, (uint32_t)len);
    memcpy(h + 4, type, 4);
    uint32_t crc = crc32_update(0, h + 4, 4);
    crc = crc32_update(crc, data, len);
    if (bad_crc)
        crc ^= 0xdeadbeef;
    unsigned char c[4];
    put_be32(c, crc);
    int rc = buf_append(out, h, 8);
    if (len)
        rc |= buf_append(out, data, len);
    rc |= buf_append(out, c, 4);
    return rc;
}

static int render_png(double scale, uint64_t base, unsigned variant, const sw_output_meta_t *m,
                      buf_t *out, sw_output_info_t *info)
{
    if (variant == PNG_EMPTY) {
        info->elements = 0;
        return 0;
    }
    uint64_t side = (uint64_t)sqrt(target_bytes(scale, base) / 3.0);
    if (side < 1)
        side = 1;
    if (side > 8192)
        side = 8192;
    uint64_t row = 1 + 3 * side, raw_len = row * side;
    /* zlib stream: 2-byte header, stored blocks of <= 65535 bytes (5-byte headers), adler32. */
    uint64_t nblocks = (raw_len + 65534) / 65535;
    uint64_t z_len = 2 + raw_len + 5 * nblocks + 4;
    buf_t z;
    buf_init(&z, z_len + 16);
    if (buf_reserve(&z, z_len) != 0) {
        buf_free(&z);
        return -1;
    }
    /* Raw scanlines (filter byte 0 then RGB), generated block by block. */
    unsigned char hdr2[2] = {0x78, 0x01};
    buf_append(&z, hdr2, 2);
    uint32_t a1 = 1, a2 = 0;
    uint64_t pos = 0;
    unsigned char chunk[65535];
    while (pos < raw_len) {
        uint64_t take = raw_len - pos < 65535 ? raw_len - pos : 65535;
        for (uint64_t i = 0; i < take; i++) {
            uint64_t p = pos + i, y = p / row, x = p % row;
            unsigned char v;
            if (x == 0) {
                v = 0;
            } else {
                uint64_t px = (x - 1) / 3, ch = (x - 1) % 3;
                v = (unsigned char)(ch == 0 ? (px * 255 / side) : ch == 1 ? (y * 255 / side) : (m->seed * 37) & 0xff);
            }
            chunk[i] = v;
            a1 = (a1 + v) % 65521;
            a2 = (a2 + a1) % 65521;
        }
        unsigned char bh[5];
        bh[0] = (pos + take == raw_len) ? 1 : 0; /* BFINAL, BTYPE=00 (stored) */
        bh[1] = (unsigned char)(take & 0xff);
        bh[2] = (unsigned char)(take >> 8);
        bh[3] = (unsigned char)(~take & 0xff);
        bh[4] = (unsigned char)((~take >> 8) & 0xff);
        buf_append(&z, bh, 5);
        buf_append(&z, chunk, (size_t)take);
        pos += take;
    }
    unsigned char ad[4];
    put_be32(ad, (a2 << 16) | a1);
    buf_append(&z, ad, 4);

    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char bad_sig[8];
    memcpy(bad_sig, sig, 8);
    bad_sig[1] = 'X';
    unsigned char ihdr[13];
    put_be32(ihdr, (uint32_t)side);
    put_be32(ihdr + 4, (uint32_t)side);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type RGB */
    ihdr[10] = 0; /* compression */
    ihdr[11] = 0; /* filter */
    ihdr[12] = 0; /* interlace */
    int rc = buf_reserve(out, (size_t)(z.len + 64));
    rc |= buf_append(out, variant == PNG_BAD_SIGNATURE ? bad_sig : sig, 8);
    rc |= png_chunk(out, "IHDR", ihdr, 13, 0);
    rc |= png_chunk(out, "IDAT", (const unsigned char *)z.data, z.len, variant == PNG_BAD_CRC);
    rc |= png_chunk(out, "IEND", NULL, 0, 0);
    buf_free(&z);
    if (rc != 0)
        return -1;
    if (variant == PNG_TRUNCATED)
        out->len = out->len / 2;
    info->elements = side * side;
    return 0;
}

/* ---- JSON --------------------------------------------------------------------------- */

enum { JSON_OK = 0, JSON_TRUNCATED, JSON_NOT_JSON, JSON_EMPTY, JSON_N };
static const char *json_variant_names[JSON_N] = {"valid", "truncated", "not_json", "empty"};

static int render_json(unsigned variant, const sw_output_meta_t *m, buf_t *out, sw_output_info_t *info)
{
    info->elements = 0;
    if (variant == JSON_EMPTY)
        return 0;
    if (variant == JSON_NOT_JSON)
        return buf_append_str(out, "<html><body>Internal Server Error</body></html>");
    /* A validator-like score that depends on the seed, stable per request. */
    uint64_t s = m->seed;
    double score = 0.5 + (double)(mix64(&s) % 5000) / 10000.0;
    int rc = buf_printf(out,
        "{\"success\": true, \"model\": \"%s\", \"seed\": %llu, \"generation_time\": %.3f, "
        "\"score\": %.4f, \"params\": %s, \"worker_export\": {\"oom_quality_degradation_level\": %d}}",
        m->model ? m->model : "sim", (unsigned long long)m->seed, m->generation_s, score,
        m->params_json ? m->params_json : "{}", m->degrade_level);
    if (rc != 0)
        return -1;
    if (variant == JSON_TRUNCATED)
        out->len = out->len / 2;
    return 0;
}

/* ---- dispatch ----------------------------------------------------------------------- */

unsigned sw_output_corrupt_variants(enum sw_output_kind kind)
{
    switch (kind) {
    case SW_OUT_GLB: return GLB_N - 1;
    case SW_OUT_PLY: return PLY_N - 1;
    case SW_OUT_PNG: return PNG_N - 1;
    case SW_OUT_JSON: return JSON_N - 1;
    }
    return 0;
}

const char *sw_output_corrupt_name(enum sw_output_kind kind, unsigned variant)
{
    switch (kind) {
    case SW_OUT_GLB: return variant < GLB_N ? glb_variant_names[variant] : "?";
    case SW_OUT_PLY: return variant < PLY_N ? ply_variant_names[variant] : "?";
    case SW_OUT_PNG: return variant < PNG_N ? png_variant_names[variant] : "?";
    case SW_OUT_JSON: return variant < JSON_N ? json_variant_names[variant] : "?";
    }
    return "?";
}

const char *sw_output_kind_name(enum sw_output_kind kind)
{
    static const char *names[] = {"json", "glb", "ply", "png"};
    return (unsigned)kind < 4 ? names[kind] : "?";
}

int sw_output_render(enum sw_output_kind kind, double scale, uint64_t base_bytes, unsigned variant,
                     const sw_output_meta_t *meta, buf_t *out, sw_output_info_t *info)
{
    info->elements = 0;
    if (variant > sw_output_corrupt_variants(kind))
        variant = 0;
    switch (kind) {
    case SW_OUT_GLB:
        info->content_type = "model/gltf-binary";
        return render_glb(scale, base_bytes, variant, meta, out, info);
    case SW_OUT_PLY:
        info->content_type = "application/octet-stream";
        return render_ply(scale, base_bytes, variant, meta, out, info);
    case SW_OUT_PNG:
        info->content_type = "image/png";
        return render_png(scale, base_bytes, variant, meta, out, info);
    case SW_OUT_JSON:
        info->content_type = "application/json";
        return render_json(variant, meta, out, info);
    }
    return -1;
}
