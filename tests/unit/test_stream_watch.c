/*
 * test_stream_watch: reading a streamed answer as it passes (src/quality/stream_watch.c) and
 * the OOM rule for an error event in it (degrade_error_is_oom).
 *
 * Kinds from Content-Type (parameters, case, whitespace; JSON and octet-stream are none);
 * an OpenAI-dialect SSE stream with and without `data: [DONE]`; the three error forms
 * (`event: error` + data, `data: {"error":..}`, llama-server's `error:` line); CRLF lines;
 * every split of a stream across two feeds (an event split anywhere is still read); a
 * last line without its newline; a data line longer than STREAM_LINE_MAX (its start kept,
 * an error still seen, the next line read whole); NDJSON with "done" (Ollama) and with an
 * error line; a RAW stream is not read; a dialect without a last event is never incomplete;
 * degrade_error_is_oom with the default and a configured body_matches.
 * Run: make build/tests/test_stream_watch && build/tests/test_stream_watch (and SAN=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quality/degrade.h"
#include "quality/stream_watch.h"

static const char OPENAI[] =
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";

static stream_watch_t *watch_of(enum stream_kind k)
{
    stream_watch_t *w = malloc(sizeof *w);
    assert_non_null(w);
    stream_watch_init(w, k);
    return w;
}

static void feed(stream_watch_t *w, const char *s)
{
    stream_watch_feed(w, s, strlen(s));
}

static void test_kinds(void **state)
{
    (void)state;
    static const char *const sse[] = {"text/event-stream", "Text/Event-Stream; charset=utf-8", " text/event-stream "};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(stream_kind_of(sse[i], strlen(sse[i])), STREAM_SSE);
    assert_int_equal(stream_kind_of("application/x-ndjson", 20), STREAM_NDJSON);
    assert_int_equal(stream_kind_of("application/jsonl; x=y", 22), STREAM_NDJSON);
    assert_int_equal(stream_kind_of("application/json", 16), STREAM_NONE);
    assert_int_equal(stream_kind_of("text/event-streamx", 18), STREAM_NONE);
    assert_int_equal(stream_kind_of("application/octet-stream", 24), STREAM_NONE);
    assert_int_equal(stream_kind_of(NULL, 0), STREAM_NONE);
    /* not NUL-terminated: only len bytes count */
    assert_int_equal(stream_kind_of("text/event-streamXYZ", 17), STREAM_SSE);
}

static void test_openai_done_and_missing(void **state)
{
    (void)state;
    stream_watch_t *w = watch_of(STREAM_SSE);
    feed(w, OPENAI);
    feed(w, "data: [DONE]\n\n");
    stream_watch_end(w);
    assert_true(w->expects_done);
    assert_true(w->saw_done);
    assert_false(w->saw_error);
    assert_false(stream_watch_incomplete(w));

    stream_watch_init(w, STREAM_SSE);
    feed(w, OPENAI);
    stream_watch_end(w);
    assert_true(stream_watch_incomplete(w));

    /* llama-server's own /completion stream: no "object", no [DONE]: never incomplete */
    stream_watch_init(w, STREAM_SSE);
    feed(w, "data: {\"content\":\"a\",\"stop\":false}\n\ndata: {\"content\":\"\",\"stop\":true}\n\n");
    stream_watch_end(w);
    assert_false(stream_watch_incomplete(w));
    free(w);
}

static void check_error(const char *tail, const char *want_in_text)
{
    stream_watch_t *w = watch_of(STREAM_SSE);
    feed(w, OPENAI);
    feed(w, tail);
    stream_watch_end(w);
    assert_true(w->saw_error);
    assert_false(stream_watch_incomplete(w)); /* an error explains the missing [DONE] */
    assert_non_null(memmem(w->error, w->error_len, want_in_text, strlen(want_in_text)));
    assert_true(degrade_error_is_oom(NULL, w->error, w->error_len));
    free(w);
}

static void test_error_forms(void **state)
{
    (void)state;
    check_error("event: error\ndata: {\"error\":{\"message\":\"CUDA out of memory\"}}\n\n", "CUDA out of memory");
    check_error("data: {\"error\": {\"message\": \"CUDA out of memory. Tried\"}}\n\n", "Tried");
    check_error("error: {\"code\":500,\"message\":\"out of memory\"}\n\n", "\"code\":500");
    check_error("event: error\r\ndata: out of memory\r\n\r\n", "out of memory"); /* CRLF lines */
    /* an event named otherwise is not an error; the field ends with its event */
    stream_watch_t *w = watch_of(STREAM_SSE);
    feed(w, "event: ping\ndata: out of memory\n\nevent: error\n\ndata: {\"x\":1}\n\n");
    stream_watch_end(w);
    assert_false(w->saw_error);
    /* "error" as a value, or nested, is not an error member */
    stream_watch_init(w, STREAM_SSE);
    feed(w, "data: {\"finish_reason\":\"error\",\"choices\":[{\"error\":1}]}\n\n");
    stream_watch_end(w);
    assert_false(w->saw_error);
    free(w);
}

/* The same stream cut at every byte into two feeds reads the same. */
static void test_every_split(void **state)
{
    (void)state;
    char s[1024];
    snprintf(s, sizeof s, "%sevent: error\r\ndata: {\"error\":\"CUDA out of memory\"}\r\n\r\n", OPENAI);
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut++) {
        stream_watch_t *w = watch_of(STREAM_SSE);
        stream_watch_feed(w, s, cut);
        stream_watch_feed(w, s + cut, n - cut);
        stream_watch_end(w);
        assert_true(w->expects_done);
        assert_true(w->saw_error);
        assert_int_equal(w->error_len, strlen("{\"error\":\"CUDA out of memory\"}"));
        free(w);
    }
}

static void test_last_line_without_newline(void **state)
{
    (void)state;
    stream_watch_t *w = watch_of(STREAM_SSE);
    feed(w, OPENAI);
    feed(w, "data: [DONE]");
    assert_false(w->saw_done);
    stream_watch_end(w);
    assert_true(w->saw_done);
    free(w);
}

static void test_long_lines_are_bounded(void **state)
{
    (void)state;
    size_t big = STREAM_LINE_MAX * 3;
    char *line = malloc(big + 64);
    assert_non_null(line);
    /* a long ordinary event: kept up to the bound, skipped after, the next line read whole */
    int n = snprintf(line, 64, "data: {\"object\":\"chat.completion.chunk\",\"c\":\"");
    memset(line + n, 'x', big);
    strcpy(line + n + big, "\"}\n\n");
    stream_watch_t *w = watch_of(STREAM_SSE);
    feed(w, line);
    assert_int_equal(w->line_len, 0);
    assert_false(w->saw_error);
    feed(w, "data: [DONE]\n\n");
    stream_watch_end(w);
    assert_true(w->saw_done);
    /* a long error data event: seen from its start, its text bounded */
    n = snprintf(line, 64, "data: {\"error\": \"out of memory ");
    memset(line + n, 'y', big);
    strcpy(line + n + big, "\"}\n\n");
    stream_watch_init(w, STREAM_SSE);
    for (size_t off = 0, len = strlen(line); off < len; off += 1000) /* in pieces */
        stream_watch_feed(w, line + off, len - off < 1000 ? len - off : 1000);
    stream_watch_end(w);
    assert_true(w->saw_error);
    assert_int_equal(w->error_len, STREAM_ERROR_MAX);
    assert_true(degrade_error_is_oom(NULL, w->error, w->error_len));
    free(line);
    free(w);
}

static void test_ndjson(void **state)
{
    (void)state;
    stream_watch_t *w = watch_of(STREAM_NDJSON);
    feed(w, "{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n{\"model\":\"m\",\"response\":\"b\",\"done\":false}\n");
    stream_watch_end(w);
    assert_true(stream_watch_incomplete(w));
    stream_watch_init(w, STREAM_NDJSON);
    feed(w, "{\"response\":\"a\",\"done\":false}\n{\"response\":\"\",\"done\":true,\"eval_count\":2}\n");
    stream_watch_end(w);
    assert_false(stream_watch_incomplete(w));
    assert_true(w->saw_done);
    stream_watch_init(w, STREAM_NDJSON);
    feed(w, "{\"response\":\"a\",\"done\":false}\n{\"error\":\"model requires more system memory\"}\n");
    stream_watch_end(w);
    assert_true(w->saw_error);
    assert_false(degrade_error_is_oom(NULL, w->error, w->error_len)); /* default: "out of memory" */
    config_detect_t d = {.body_matches = "out of memory|requires more system memory"};
    assert_true(degrade_error_is_oom(&d, w->error, w->error_len));
    /* Ollama's /api/pull: status lines, no "done": never incomplete */
    stream_watch_init(w, STREAM_NDJSON);
    feed(w, "{\"status\":\"pulling\"}\n{\"status\":\"success\"}\n");
    stream_watch_end(w);
    assert_false(stream_watch_incomplete(w));
    free(w);
}

static void test_raw_not_read(void **state)
{
    (void)state;
    stream_watch_t *w = watch_of(STREAM_RAW);
    feed(w, "data: {\"error\":\"out of memory\"}\n\n");
    stream_watch_end(w);
    assert_false(w->saw_error);
    assert_int_equal(w->line_len, 0);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_openai_done_and_missing),
        cmocka_unit_test(test_error_forms),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_last_line_without_newline),
        cmocka_unit_test(test_long_lines_are_bounded),
        cmocka_unit_test(test_ndjson),
        cmocka_unit_test(test_raw_not_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
