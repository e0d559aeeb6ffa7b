/*
 * validate_test_util: what the validator tests (test_validate.c, test_validate_mesh.c)
 * share: a fixed-size file being built, byte-order writers, the test's own bit-by-bit
 * CRC-32 (independent of the table-driven one under test), and the assert_valid /
 * assert_invalid macros. The functions are static and marked unused (not inline, so the
 * compiler treats them as it did when they lived in the test file), so a test that uses
 * only part of them builds without unused-function warnings. Include it after cmocka.h.
 */
#ifndef VRAMD_TESTS_VALIDATE_TEST_UTIL_H
#define VRAMD_TESTS_VALIDATE_TEST_UTIL_H

#include <stdint.h>
#include <string.h>

#define WHY_LEN 256
#define MAX_FILE 32768

typedef struct file {
    unsigned char data[MAX_FILE];
    size_t len;
} file_t;

/* ------------------------------------------------------------------ helpers */

__attribute__((unused)) static void t_le32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

__attribute__((unused)) static void t_be32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (24 - 8 * k));
}

__attribute__((unused)) static void append(file_t *f, const void *p, size_t n)
{
    assert_true(f->len + n <= MAX_FILE);
    memcpy(f->data + f->len, p, n);
    f->len += n;
}

__attribute__((unused)) static void append_str(file_t *f, const char *s)
{
    append(f, s, strlen(s));
}

/* Bit-by-bit CRC-32, independent of the table-driven one under test. */
__attribute__((unused)) static uint32_t t_crc32(const unsigned char *p, size_t n)
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

#endif
