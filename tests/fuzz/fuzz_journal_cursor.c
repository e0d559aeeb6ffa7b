/*
 * fuzz_journal_cursor: libFuzzer entry for the list cursor's text form
 * (src/jobstore/journal_cursor.c), which GET /v1/jobs?cursor= feeds with client bytes.
 *
 * For each input it:
 *   1. parses it as a C string (a copy of exactly its bytes plus a NUL, so ASan sees any read
 *      past the end; bytes after an embedded NUL are not part of the text) and checks the
 *      answer against an independent oracle: accepted exactly when the text is [1-9][0-9]*
 *      with a value <= INT64_MAX (compared as digit strings, no arithmetic shared with the
 *      parser); an accepted cursor is valid with seq >= 1 and formats back to exactly the
 *      text; a refused one leaves the cursor zeroed;
 *   2. reads the first 8 bytes as a seq and checks the other direction: a valid cursor with
 *      seq >= 1 formats to text that parses back to the same seq; seq <= 0 (never given by
 *      the journal) formats to text that parse refuses; an invalid cursor formats to "";
 *   3. formats into a buffer of a size taken from the data (1..JOURNAL_CURSOR_TEXT_MAX,
 *      exactly that size on the heap): the result is a NUL-terminated prefix of the full
 *      text, never longer than the buffer.
 * Any broken promise aborts. No global state. Replayed over tests/fuzz/corpus/journal_cursor.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobstore/journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_journal_cursor: check failed at line %d: %s\n", __LINE__, #cond); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The oracle: canonical decimal 1..INT64_MAX, by the digits alone. */
static bool oracle_accepts(const char *text)
{
    static const char max[] = "9223372036854775807";
    size_t n = strlen(text);
    if (n == 0 || n > sizeof max - 1 || text[0] < '1' || text[0] > '9')
        return false;
    for (size_t i = 0; i < n; i++)
        if (text[i] < '0' || text[i] > '9')
            return false;
    return n < sizeof max - 1 || strcmp(text, max) <= 0;
}

static void check_parse(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';

    journal_cursor_t c;
    memset(&c, 0xa5, sizeof c); /* parse must set every field, also when it refuses */
    int rc = journal_cursor_parse(text, &c);
    CHECK(rc == 0 || rc == -1);
    CHECK((rc == 0) == oracle_accepts(text));
    if (rc == 0) {
        char back[JOURNAL_CURSOR_TEXT_MAX];
        CHECK(c.valid && c.seq >= 1);
        journal_cursor_format(&c, back, sizeof back);
        CHECK(strcmp(back, text) == 0);
    } else {
        CHECK(!c.valid && c.seq == 0);
    }
    free(text);
}

static void check_format(const uint8_t *data, size_t size)
{
    journal_cursor_t c = {.valid = true, .seq = 0};
    char text[JOURNAL_CURSOR_TEXT_MAX], full[JOURNAL_CURSOR_TEXT_MAX];
    uint64_t raw = 0;

    memcpy(&raw, data, size < sizeof raw ? size : sizeof raw);
    memcpy(&c.seq, &raw, sizeof c.seq);
    journal_cursor_format(&c, text, sizeof text);
    snprintf(full, sizeof full, "%" PRId64, c.seq);
    CHECK(strcmp(text, full) == 0);
    journal_cursor_t back;
    if (c.seq >= 1) {
        CHECK(journal_cursor_parse(text, &back) == 0 && back.valid && back.seq == c.seq);
    } else {
        CHECK(journal_cursor_parse(text, &back) == -1);
    }

    /* a short buffer: a NUL-terminated prefix, exactly the buffer's size on the heap */
    size_t outlen = 1 + (size > 8 ? data[8] : 0) % JOURNAL_CURSOR_TEXT_MAX;
    char *small = malloc(outlen);
    CHECK(small != NULL);
    journal_cursor_format(&c, small, outlen);
    size_t n = strnlen(small, outlen);
    CHECK(n < outlen && strncmp(small, full, n) == 0 && (n == strlen(full) || n == outlen - 1));
    c.valid = false; /* an invalid cursor: "" whatever its seq */
    journal_cursor_format(&c, small, outlen);
    CHECK(small[0] == '\0');
    free(small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_parse(data, size);
    check_format(data, size);
    return 0;
}
