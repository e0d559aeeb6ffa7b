/*
 * outputs: the files a simulated generation returns, valid or deliberately broken.
 *
 *  - GLB: glTF 2.0 binary. 12-byte header ("glTF", version 2, total length), a JSON chunk
 *    padded with spaces to 4 bytes, a BIN chunk padded with zeros. The content is a real
 *    mesh (a wavy grid): one buffer, two bufferViews, a POSITION accessor with exact
 *    min/max and an index accessor, one mesh, node and scene. Khronos' gltf-validator
 *    reports no errors on it.
 *  - PLY: binary_little_endian, a gaussian-splat-like vertex element (x y z, f_dc_0..2,
 *    opacity, scale_0..2, rot_0..3: 14 floats), header count = body length / 56.
 *  - PNG: 8-bit RGB, IHDR, one IDAT (zlib stream of stored deflate blocks + adler32), IEND,
 *    every chunk CRC correct.
 *  - JSON: an object describing the result ({"success": true, ...}).
 *
 * Size: about base_bytes x scale (the request's memory factor), so that requests with
 * bigger parameters give bigger files; bounded to [a minimal valid file, 256 MiB].
 *
 * Corruption: variant 0 is a valid file; variants 1..sw_output_corrupt_variants(kind) each
 * break it in one way a validator must catch (truncated body, wrong length field, bad
 * magic, bad CRC, unparsable JSON chunk, accessor outside its buffer, header count larger
 * than the data, empty body...). sw_output_corrupt_name() names a variant for logs.
 *
 * Return convention: 0 ok, -1 when the output buffer's maximum was reached.
 */
#ifndef VRAMD_SIM_WORKER_OUTPUTS_H
#define VRAMD_SIM_WORKER_OUTPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "flags.h"

typedef struct sw_output_meta {
    const char *model;       /* model name */
    uint64_t seed;           /* makes the content differ between requests */
    double generation_s;     /* simulated seconds, for JSON outputs */
    int degrade_level;       /* echoed in JSON outputs (worker_export) */
    const char *params_json; /* the request parameters as a JSON object text, or NULL */
} sw_output_meta_t;

typedef struct sw_output_info {
    const char *content_type;
    uint64_t elements; /* vertices (GLB), gaussians (PLY), pixels (PNG), 0 (JSON) */
} sw_output_info_t;

int sw_output_render(enum sw_output_kind kind, double scale, uint64_t base_bytes, unsigned variant,
                     const sw_output_meta_t *meta, buf_t *out, sw_output_info_t *info);
unsigned sw_output_corrupt_variants(enum sw_output_kind kind);
const char *sw_output_corrupt_name(enum sw_output_kind kind, unsigned variant);
const char *sw_output_kind_name(enum sw_output_kind kind);

#endif
