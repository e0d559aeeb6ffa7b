/*
 * journal_cursor: the text form of a list cursor (journal_cursor_t), as a client sees it in
 * `next_cursor` and gives it back in `?cursor=`. Pure: no SQLite, no allocation, no state;
 * it links on its own (tests/fuzz/fuzz_journal_cursor.c).
 *
 * Invariants:
 *   - the text is the cursor's seq in decimal: no sign, no leading zero, 1..INT64_MAX;
 *   - journal_cursor_parse accepts exactly what journal_cursor_format writes for a valid
 *     cursor with seq >= 1 (text is client input: anything else is -1, and *out is left
 *     zeroed, i.e. not valid), so parse and format round-trip both ways;
 *   - format writes at most outlen bytes, NUL included, and "" for an invalid cursor.
 */
#include "jobstore/journal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void journal_cursor_format(const journal_cursor_t *c, char *out, size_t outlen)
{
    if (c == NULL || !c->valid) {
        snprintf(out, outlen, "%s", "");
        return;
    }
    snprintf(out, outlen, "%" PRId64, c->seq);
}

int journal_cursor_parse(const char *text, journal_cursor_t *out)
{
    int64_t v = 0;
    const char *p = text;

    memset(out, 0, sizeof *out);
    /* 1..INT64_MAX, canonical: a leading zero, a sign or anything after the digits is refused */
    if (text == NULL || *p < '1' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - (*p - '0')) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (*p != '\0')
        return -1;
    out->valid = true;
    out->seq = v;
    return 0;
}
