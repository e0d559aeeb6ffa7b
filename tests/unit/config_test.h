/*
 * config_test: helpers shared by the test_config_*.c unit tests. parse_ok() parses a YAML
 * string that must load (the test fails with the error otherwise); expect_error() and
 * expect_error_named() parse one that must fail with exactly the given
 * "file:line:col: key.path: message". KiB, MiB, GiB for expected sizes.
 */
#ifndef VRAMD_TESTS_UNIT_CONFIG_TEST_H
#define VRAMD_TESTS_UNIT_CONFIG_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "config/config.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static inline config_t *parse_ok(const char *yaml)
{
    char err[CONFIG_ERR_MAX] = "";
    config_t *c = config_parse(yaml, strlen(yaml), "test.yaml", err, sizeof err);
    if (c == NULL)
        fail_msg("config did not parse: %s\n--- yaml ---\n%s", err, yaml);
    return c;
}

static inline void expect_error_named(const char *name, const char *yaml, const char *expected)
{
    char err[CONFIG_ERR_MAX] = "";
    config_t *c = config_parse(yaml, strlen(yaml), name, err, sizeof err);
    if (c != NULL) {
        config_unref(c);
        fail_msg("config parsed, wanted error: %s\n--- yaml ---\n%s", expected, yaml);
    }
    if (strcmp(err, expected) != 0)
        fail_msg("wrong error\n  got:    %s\n  wanted: %s\n--- yaml ---\n%s", err, expected, yaml);
}

static inline void expect_error(const char *yaml, const char *expected)
{
    expect_error_named("test.yaml", yaml, expected);
}

#endif
