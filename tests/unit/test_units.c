/*
 * test_units: sizes and durations as the config and headers write them.
 * Covers valid forms (integers, decimals, every unit), invalid ones (signs, spaces,
 * exponents, unknown units, empty, overflow), that *out is untouched on error, and the
 * formatting helpers (including that exact values format back to what parses).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common/units.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define TiB (1ULL << 40)

static void expect_size(const char *s, uint64_t want)
{
    uint64_t got = 0xdeadbeef;
    if (units_parse_size(s, &got) != 0)
        fail_msg("units_parse_size(\"%s\") failed, wanted %llu", s, (unsigned long long)want);
    if (got != want)
        fail_msg("units_parse_size(\"%s\") = %llu, wanted %llu", s, (unsigned long long)got,
                 (unsigned long long)want);
}

static void expect_bad_size(const char *s)
{
    uint64_t got = 777;
    if (units_parse_size(s, &got) != -1)
        fail_msg("units_parse_size(\"%s\") accepted (%llu), wanted -1", s, (unsigned long long)got);
    assert_int_equal(got, 777); /* untouched */
}

static void expect_duration(const char *s, uint64_t want)
{
    uint64_t got = 0xdeadbeef;
    if (units_parse_duration_ms(s, &got) != 0)
        fail_msg("units_parse_duration_ms(\"%s\") failed, wanted %llu", s, (unsigned long long)want);
    if (got != want)
        fail_msg("units_parse_duration_ms(\"%s\") = %llu, wanted %llu", s, (unsigned long long)got,
                 (unsigned long long)want);
}

static void expect_bad_duration(const char *s)
{
    uint64_t got = 777;
    if (units_parse_duration_ms(s, &got) != -1)
        fail_msg("units_parse_duration_ms(\"%s\") accepted (%llu), wanted -1", s, (unsigned long long)got);
    assert_int_equal(got, 777);
}

static void test_size_plain_bytes(void **state)
{
    (void)state;
    expect_size("0", 0);
    expect_size("1", 1);
    expect_size("1048576", 1048576);
    expect_size("18446744073709551615", UINT64_MAX);
    expect_size("123B", 123);
}

static void test_size_binary_units(void **state)
{
    (void)state;
    expect_size("512MiB", 512 * MiB);
    expect_size("24GiB", 24 * GiB);
    expect_size("1.5GiB", 1610612736ULL);
    expect_size("11.5GiB", 11 * GiB + GiB / 2);
    expect_size("16KiB", 16 * KiB);
    expect_size("2TiB", 2 * TiB);
    expect_size("1K", KiB);
    expect_size("3M", 3 * MiB);
    expect_size("6G", 6 * GiB);
    expect_size("1T", TiB);
    expect_size("6gib", 6 * GiB); /* units are case-insensitive */
    expect_size("0.5KiB", 512);
    expect_size("0GiB", 0);
}

static void test_size_decimal_units(void **state)
{
    (void)state;
    expect_size("1KB", 1000);
    expect_size("1MB", 1000000);
    expect_size("2GB", 2000000000ULL);
    expect_size("1TB", 1000000000000ULL);
    expect_size("1.5GB", 1500000000ULL);
    expect_size("0.001KB", 1);
    expect_size("0.0004KB", 0);  /* 0.4 bytes rounds to 0 */
    expect_size("0.0005KB", 1);  /* 0.5 rounds up */
}

static void test_size_invalid(void **state)
{
    (void)state;
    expect_bad_size("");
    expect_bad_size("12 gigs");
    expect_bad_size("12 GiB"); /* no space between number and unit */
    expect_bad_size(" 12GiB");
    expect_bad_size("12GiB ");
    expect_bad_size("-1");
    expect_bad_size("+1");
    expect_bad_size("-1GiB");
    expect_bad_size("1e3");
    expect_bad_size("1e3B");
    expect_bad_size("GiB");
    expect_bad_size("1.5");   /* a fraction of a byte */
    expect_bad_size("1.5B");
    expect_bad_size("1.GiB");
    expect_bad_size(".5GiB");
    expect_bad_size("1..5GiB");
    expect_bad_size("12PiB");
    expect_bad_size("12Gib5");
    expect_bad_size("nan");
    expect_bad_size("NaN");
    expect_bad_size("inf");
    expect_bad_size("0x10");
    expect_bad_size("18446744073709551616"); /* UINT64_MAX + 1 */
    expect_bad_size("99999999999999999999999");
    expect_bad_size("16777216TiB");          /* 2^64 bytes */
    assert_int_equal(units_parse_size(NULL, &(uint64_t){0}), -1);
}

static void test_size_near_overflow(void **state)
{
    (void)state;
    expect_size("16777215TiB", 16777215ULL * TiB); /* 2^64 - 2^40 */
}

static void test_duration_valid(void **state)
{
    (void)state;
    expect_duration("250ms", 250);
    expect_duration("30s", 30000);
    expect_duration("10m", 600000);
    expect_duration("2h", 7200000);
    expect_duration("1.5s", 1500);
    expect_duration("0.5m", 30000);
    expect_duration("1.25h", 4500000);
    expect_duration("0", 0);
    expect_duration("0s", 0);
    expect_duration("5", 5000); /* a bare number is seconds */
    expect_duration("2.5", 2500);
    expect_duration("0.0004s", 0);
    expect_duration("0.0005s", 1);
    expect_duration("18446744073709551615ms", UINT64_MAX);
}

static void test_duration_invalid(void **state)
{
    (void)state;
    expect_bad_duration("");
    expect_bad_duration("-1s");
    expect_bad_duration("+1s");
    expect_bad_duration("1e3");
    expect_bad_duration("1e3s");
    expect_bad_duration("10 m");
    expect_bad_duration("10min");
    expect_bad_duration("10M"); /* durations are lower case */
    expect_bad_duration("1d");
    expect_bad_duration("s");
    expect_bad_duration("1.s");
    expect_bad_duration(".5s");
    expect_bad_duration("soon");
    expect_bad_duration("nan");
    expect_bad_duration("18446744073709551616ms");
    expect_bad_duration("18446744073709551615s");
    expect_bad_duration("5124095576030432h"); /* * 3600000 > UINT64_MAX */
    assert_int_equal(units_parse_duration_ms(NULL, &(uint64_t){0}), -1);
}

static void expect_format_size(uint64_t bytes, const char *want)
{
    char out[64];
    units_format_size(bytes, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("units_format_size(%llu) = \"%s\", wanted \"%s\"", (unsigned long long)bytes, out, want);
}

static void expect_format_duration(uint64_t ms, const char *want)
{
    char out[64];
    units_format_duration(ms, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("units_format_duration(%llu) = \"%s\", wanted \"%s\"", (unsigned long long)ms, out, want);
}

static void test_format_size(void **state)
{
    (void)state;
    expect_format_size(0, "0B");
    expect_format_size(123, "123B");
    expect_format_size(24 * GiB, "24GiB");
    expect_format_size(1610612736ULL, "1.5GiB");
    expect_format_size(512 * MiB, "512MiB");
    expect_format_size(1025 * MiB, "1025MiB"); /* exact in MiB beats a rounded GiB */
    expect_format_size(GiB + GiB / 4, "1.25GiB");
    expect_format_size(1000000000ULL, "953.67MiB"); /* not exact anywhere: rounded */
    expect_format_size(2 * TiB, "2TiB");
    expect_format_size(UINT64_MAX, "16777216TiB");
}

static void test_format_duration(void **state)
{
    (void)state;
    expect_format_duration(0, "0s");
    expect_format_duration(250, "250ms");
    expect_format_duration(30000, "30s");
    expect_format_duration(600000, "10m");
    expect_format_duration(7200000, "2h");
    expect_format_duration(1500, "1.5s");
    expect_format_duration(61000, "61s");
    expect_format_duration(1234, "1234ms");
}

static void test_format_truncates(void **state)
{
    (void)state;
    char out[4];
    memset(out, 'x', sizeof out);
    units_format_size(24 * GiB, out, sizeof out);
    assert_string_equal(out, "24G");
    units_format_duration(7200000, out, 0); /* cap 0 writes nothing */
    assert_string_equal(out, "24G");
}

static void test_round_trip(void **state)
{
    (void)state;
    const uint64_t sizes[] = {0, 1, 999, KiB, 1536, 512 * MiB, 24 * GiB, 1610612736ULL, 3 * TiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char out[64];
        uint64_t back = 0;
        units_format_size(sizes[i], out, sizeof out);
        assert_int_equal(units_parse_size(out, &back), 0);
        assert_int_equal(back, sizes[i]);
    }
    const uint64_t durations[] = {0, 1, 250, 1500, 30000, 90000, 600000, 7200000, 5400000};
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        char out[64];
        uint64_t back = 0;
        units_format_duration(durations[i], out, sizeof out);
        assert_int_equal(units_parse_duration_ms(out, &back), 0);
        assert_int_equal(back, durations[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_plain_bytes),
        cmocka_unit_test(test_size_binary_units),
        cmocka_unit_test(test_size_decimal_units),
        cmocka_unit_test(test_size_invalid),
        cmocka_unit_test(test_size_near_overflow),
        cmocka_unit_test(test_duration_valid),
        cmocka_unit_test(test_duration_invalid),
        cmocka_unit_test(test_format_size),
        cmocka_unit_test(test_format_duration),
        cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
