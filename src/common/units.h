/*
 * units: sizes and durations as written in the config and in headers.
 *
 * Sizes: a plain number of bytes ("1048576"), or a number (integer or decimal) with a unit:
 * B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024); K/M/G/T are taken as
 * the binary units (what people mean for GPU memory). "1.5GiB" -> 1610612736.
 * Durations: a number with ms, s, m, h (decimals allowed: "1.5s"); a bare number is seconds.
 * Both reject signs, empty strings, trailing garbage, overflow and NaN.
 * Return convention: 0 and *out set on success, -1 on a bad value (*out untouched).
 * units_sat_add: a sum of sizes that saturates at UINT64_MAX instead of wrapping, for sizes a
 * peer sent (a CUDA shim's ask, its grant page): a size near 2^64 must read as huge, never small.
 */
#ifndef VRAMD_COMMON_UNITS_H
#define VRAMD_COMMON_UNITS_H

#include <stddef.h>
#include <stdint.h>

int units_parse_size(const char *s, uint64_t *out);
int units_parse_duration_ms(const char *s, uint64_t *out);
/* "24GiB", "1.5GiB", "512MiB", "123B": the shortest exact-ish binary rendering. */
void units_format_size(uint64_t bytes, char *out, size_t cap);
/* "250ms", "30s", "10m", "2h", "1.5s". */
void units_format_duration(uint64_t ms, char *out, size_t cap);
static inline uint64_t units_sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

#endif
