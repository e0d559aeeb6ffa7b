/*
 * oom_message: reads PyTorch's out-of-memory wording (see oom_message.h). One left-to-right
 * pass over the text: every "<number> <unit>" is a size token, named by the words right
 * before or after it. Linear in the text, bounded by OOM_MESSAGE_SCAN.
 */
#include "quality/oom_message.h"

#include <stdbool.h>
#include <string.h>

#define SIZE_MAX_BYTES (1ULL << 50)

typedef struct size_token {
    uint64_t bytes;
    size_t start, end; /* [start, end) of "<number> <unit>" in the text */
} size_token_t;

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static bool follows(const char *t, size_t len, size_t at, const char *word)
{
    size_t n = strlen(word);
    return at <= len && len - at >= n && memcmp(t + at, word, n) == 0;
}

static bool precedes(const char *t, size_t at, const char *word)
{
    size_t n = strlen(word);
    return at >= n && memcmp(t + at - n, word, n) == 0;
}

/* A unit word at t[at..]: its multiplier and length, 0 when none. */
static uint64_t unit_at(const char *t, size_t len, size_t at, size_t *ulen)
{
    static const struct {
        const char *word;
        uint64_t mul;
    } units[] = {{"bytes", 1}, {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},
                 {"TiB", 1ULL << 40}, {"B", 1}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].word);
        if (follows(t, len, at, units[i].word) && (at + n == len || !is_word(t[at + n]))) {
            *ulen = n;
            return units[i].mul;
        }
    }
    return 0;
}

/* A size token starting at t[i] (a digit not inside a word or number): parsed into *tok. */
static bool parse_size(const char *t, size_t len, size_t i, size_token_t *tok)
{
    uint64_t whole = 0, frac = 0, frac_div = 1;
    size_t p = i;
    while (p < len && is_digit(t[p]) && whole < SIZE_MAX_BYTES)
        whole = whole * 10 + (uint64_t)(t[p++] - '0');
    if (p < len && is_digit(t[p]))
        return false; /* too long a number */
    if (p + 1 < len && t[p] == '.' && is_digit(t[p + 1])) {
        p++;
        while (p < len && is_digit(t[p])) {
            if (frac_div < 1000000) {
                frac = frac * 10 + (uint64_t)(t[p] - '0');
                frac_div *= 10;
            }
            p++;
        }
    }
    if (p < len && t[p] == ' ')
        p++;
    size_t ulen = 0;
    uint64_t mul = unit_at(t, len, p, &ulen);
    if (!mul || whole >= SIZE_MAX_BYTES / mul)
        return false;
    tok->bytes = whole * mul + frac * mul / frac_div;
    tok->start = i;
    tok->end = p + ulen;
    return true;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t oom_message_need(const char *text, size_t len)
{
    if (!text)
        return 0;
    if (len > OOM_MESSAGE_SCAN)
        len = OOM_MESSAGE_SCAN;
    uint64_t tried = 0, held = 0;
    bool have_tried = false;
    size_t i = 0;
    while (i < len) {
        size_token_t tok;
        bool starts = is_digit(text[i]) && (i == 0 || (!is_word(text[i - 1]) && text[i - 1] != '.'));
        if (!starts || !parse_size(text, len, i, &tok)) {
            i++;
            continue;
        }
        if (precedes(text, tok.start, "Tried to allocate ")) {
            if (!have_tried)
                tried = tok.bytes;
            have_tried = true;
        } else if (follows(text, len, tok.end, " already allocated") ||
                   follows(text, len, tok.end, " reserved in total by PyTorch") ||
                   (precedes(text, tok.start, "this process has ") && follows(text, len, tok.end, " memory in use"))) {
            if (tok.bytes > held)
                held = tok.bytes;
        }
        i = tok.end > i ? tok.end : i + 1;
    }
    return have_tried ? sat_add(tried, held) : 0;
}
