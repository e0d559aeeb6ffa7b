/*
 * validate: structural checks of a worker's output before the client sees it.
 * Pure functions over a complete body (bytes in, verdict + reason out); no I/O.
 *
 *   glb   glTF 2.0 binary: 12-byte header (magic "glTF", version 2, total length == body
 *         length), chunk 0 JSON (length multiple of 4, padded with spaces, parses as a JSON
 *         object with "asset": {"version": "2.0"}), optional chunk 1 BIN (length multiple of
 *         4), no bytes after the last chunk; bufferViews inside their buffers (buffer 0 is the
 *         BIN chunk when it has no uri), accessors inside their bufferViews (byteOffset +
 *         (count-1)*stride + element size <= byteLength), componentType/type valid.
 *   ply   header grammar ("ply", "format ascii|binary_little_endian|binary_big_endian 1.0",
 *         element/property/comment/obj_info lines, "end_header"); binary: body length ==
 *         sum over elements of count x row size (list properties walked row by row); ascii:
 *         the number of non-empty data lines == total element count, each with the right
 *         number of tokens for fixed-size elements.
 *   png   8-byte signature, IHDR first (length 13, width/height > 0, valid bit depth and
 *         colour type), every chunk's CRC-32 correct, IDAT present, IEND last with length 0,
 *         nothing after it.
 *   json  the body parses as JSON (any value).
 * All: min_bytes checked first ("empty or too small: 0 bytes < 1000").
 * Return convention: 0 = valid, -1 = invalid with a short reason in why (never NULL on -1).
 */
#ifndef VRAMD_QUALITY_VALIDATE_H
#define VRAMD_QUALITY_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

int validate_glb(const unsigned char *p, size_t n, char *why, size_t whylen);
int validate_ply(const unsigned char *p, size_t n, char *why, size_t whylen);
int validate_png(const unsigned char *p, size_t n, char *why, size_t whylen);
int validate_json(const unsigned char *p, size_t n, char *why, size_t whylen);
/* kind: "glb" | "ply" | "png" | "json" | "none"; min_bytes 0 = no minimum. */
int validate_body(const char *kind, uint64_t min_bytes, const unsigned char *p, size_t n, char *why, size_t whylen);

#endif
