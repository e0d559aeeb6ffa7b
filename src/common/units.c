/*
 * units: parse and format sizes (bytes) and durations (milliseconds).
 *
 * Grammar (no whitespace anywhere, no sign, no exponent):
 *   number   = digits [ "." digits ]
 *   size     = digits                      (bytes)
 *            | number unit                 unit: B KB MB GB TB (10^3n), KiB MiB GiB TiB / K M G T (2^10n),
 *                                          matched case-insensitively; "B" takes no decimals
 *   duration = number [ "ms" | "s" | "m" | "h" ]   (no unit = seconds)
 * Decimal values are computed exactly in 128-bit integers and rounded to the nearest byte
 * or millisecond; a result above UINT64_MAX is an overflow. At most 18 decimal digits
 * after the point are significant (more are accepted and ignored).
 * Return convention (see units.h): 0 and *out set on success, -1 on a bad value, *out untouched.
 */
#include "common/units.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef unsigned __int128 u128;

#define FRACTION_DIGITS_MAX 18

typedef struct parsed_number {
    uint64_t whole;
    uint64_t fraction;       /* the first `fraction_digits` digits after the point */
    uint64_t fraction_scale; /* 10^fraction_digits (1 when there is no point) */
    bool has_point;
    const char *rest; /* first character after the number */
} parsed_number_t;

/* Reads `digits [ "." digits ]` from s. -1 when no digits, a dangling point, or overflow. */
static int parse_number(const char *s, parsed_number_t *n)
{
    memset(n, 0, sizeof *n);
    n->fraction_scale = 1;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        unsigned digit = (unsigned)(*p - '0');
        if (n->whole > (UINT64_MAX - digit) / 10)
            return -1;
        n->whole = n->whole * 10 + digit;
        p++;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        n->has_point = true;
        int kept = 0;
        while (*p >= '0' && *p <= '9') {
            if (kept < FRACTION_DIGITS_MAX) {
                n->fraction = n->fraction * 10 + (uint64_t)(*p - '0');
                n->fraction_scale *= 10;
                kept++;
            }
            p++;
        }
    }
    n->rest = p;
    return 0;
}

/* value = (whole + fraction/scale) * multiplier, rounded to nearest; -1 on overflow. */
static int scale_number(const parsed_number_t *n, uint64_t multiplier, uint64_t *out)
{
    u128 whole = (u128)n->whole * multiplier;
    u128 frac = ((u128)n->fraction * multiplier + n->fraction_scale / 2) / n->fraction_scale;
    u128 total = whole + frac;
    if (total > (u128)UINT64_MAX)
        return -1;
    *out = (uint64_t)total;
    return 0;
}

typedef struct unit {
    const char *name;
    uint64_t multiplier;
} unit_t;

static const unit_t size_units[] = {
    {"B", 1},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"K", 1ULL << 10},
    {"M", 1ULL << 20},
    {"G", 1ULL << 30},
    {"T", 1ULL << 40},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
};

int units_parse_size(const char *s, uint64_t *out)
{
    parsed_number_t n;
    if (s == NULL || parse_number(s, &n) != 0)
        return -1;
    uint64_t multiplier = 0;
    if (*n.rest == '\0') {
        multiplier = 1;
        if (n.has_point)
            return -1; /* a fraction of a byte */
    } else {
        for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++) {
            if (strcasecmp(n.rest, size_units[i].name) == 0) {
                multiplier = size_units[i].multiplier;
                break;
            }
        }
        if (multiplier == 0 || (multiplier == 1 && n.has_point))
            return -1;
    }
    uint64_t value;
    if (scale_number(&n, multiplier, &value) != 0)
        return -1;
    *out = value;
    return 0;
}

int units_parse_duration_ms(const char *s, uint64_t *out)
{
    parsed_number_t n;
    if (s == NULL || parse_number(s, &n) != 0)
        return -1;
    uint64_t multiplier;
    if (*n.rest == '\0' || strcmp(n.rest, "s") == 0)
        multiplier = 1000;
    else if (strcmp(n.rest, "ms") == 0)
        multiplier = 1;
    else if (strcmp(n.rest, "m") == 0)
        multiplier = 60ULL * 1000;
    else if (strcmp(n.rest, "h") == 0)
        multiplier = 3600ULL * 1000;
    else
        return -1;
    uint64_t value;
    if (scale_number(&n, multiplier, &value) != 0)
        return -1;
    *out = value;
    return 0;
}

/*
 * Writes value/unit with up to two decimals, trailing zeros removed ("1.5", "953.67").
 * Rounds to the nearest hundredth.
 */
static void format_scaled(uint64_t value, uint64_t unit, const char *suffix, char *out, size_t cap)
{
    u128 hundredths = ((u128)value * 100 + unit / 2) / unit;
    uint64_t whole = (uint64_t)(hundredths / 100);
    unsigned frac = (unsigned)(hundredths % 100);
    if (frac == 0)
        snprintf(out, cap, "%llu%s", (unsigned long long)whole, suffix);
    else if (frac % 10 == 0)
        snprintf(out, cap, "%llu.%u%s", (unsigned long long)whole, frac / 10, suffix);
    else
        snprintf(out, cap, "%llu.%02u%s", (unsigned long long)whole, frac, suffix);
}

static bool exact_in_hundredths(uint64_t value, uint64_t unit)
{
    return ((u128)value * 100) % unit == 0;
}

/*
 * Picks, from the largest unit down, the first one in which the value is exact with at
 * most two decimals and reads as fewer than 10000 units; when none is, the largest unit
 * not above the value, rounded to two decimals.
 */
static void format_with_units(uint64_t value, const unit_t *units, size_t n_units, char *out, size_t cap)
{
    if (cap == 0)
        return;
    const unit_t *largest = NULL;
    for (size_t i = 0; i < n_units; i++) {
        const unit_t *u = &units[i];
        if (value < u->multiplier)
            continue;
        if (largest == NULL)
            largest = u;
        if (value / u->multiplier < 10000 && exact_in_hundredths(value, u->multiplier)) {
            format_scaled(value, u->multiplier, u->name, out, cap);
            return;
        }
    }
    if (largest == NULL)
        largest = &units[n_units - 1];
    format_scaled(value, largest->multiplier, largest->name, out, cap);
}

void units_format_size(uint64_t bytes, char *out, size_t cap)
{
    static const unit_t binary_units[] = {
        {"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}, {"B", 1},
    };
    format_with_units(bytes, binary_units, sizeof binary_units / sizeof binary_units[0], out, cap);
}

void units_format_duration(uint64_t ms, char *out, size_t cap)
{
    static const unit_t duration_units[] = {
        {"h", 3600ULL * 1000}, {"m", 60ULL * 1000}, {"s", 1000}, {"ms", 1},
    };
    if (ms == 0) {
        if (cap > 0)
            snprintf(out, cap, "0s");
        return;
    }
    format_with_units(ms, duration_units, sizeof duration_units / sizeof duration_units[0], out, cap);
}
