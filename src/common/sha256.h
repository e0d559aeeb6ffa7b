/*
 * sha256: SHA-256 (FIPS 180-4) of a byte string, and its base64 form as used in a
 * Content-Security-Policy source ('sha256-<base64>'). Pure functions: no I/O, no allocation.
 * Used once per process for the status page's CSP hashes, so clarity beats speed here.
 */
#ifndef VRAMD_COMMON_SHA256_H
#define VRAMD_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32
/* base64 of 32 bytes: 44 characters, plus the terminating NUL */
#define SHA256_BASE64_SIZE 45

void sha256(const void *data, size_t len, uint8_t out[SHA256_BYTES]);
/* The digest of data in standard base64 (with '=' padding), NUL-terminated. */
void sha256_base64(const void *data, size_t len, char out[SHA256_BASE64_SIZE]);

#endif
