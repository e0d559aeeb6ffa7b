/*
 * stream_watch: what a streamed answer says about itself, read as its bytes pass (nothing
 * held back, nothing changed): an error event in it, and whether it ended with the last
 * event its dialect sends. Pure: bytes in, flags out; no I/O, no allocation.
 *
 * Kinds of stream (stream_kind_of, from the answer's Content-Type):
 *   SSE     text/event-stream. Lines; a blank line ends an event. Recognised:
 *           `event: error` (its `data:` lines are the error), llama-server's `error: {...}`
 *           line, a `data:` JSON object with a top-level "error" member (vLLM, SGLang and
 *           OpenAI's in-stream error), `data: [DONE]` (the OpenAI dialect's last event).
 *           A `data:` object whose "object" is "chat.completion*" or "text_completion" is the
 *           OpenAI dialect: such a stream is expected to end with `data: [DONE]`.
 *   NDJSON  application/x-ndjson, application/jsonl (Ollama): one JSON object a line; a
 *           top-level "error" member is an error line; a "done" member makes the stream
 *           expect a line with "done": true as its last.
 *   RAW     anything else (chunked or until-close bodies of other types): not read.
 * Bounds: one line is kept up to STREAM_LINE_MAX bytes (the carry-over between two reads;
 * a line split across reads is joined there); the rest of a longer line is skipped, and
 * such a line is still read from its kept start (an error event's text, `{"error"`). The
 * error text kept is the first STREAM_ERROR_MAX bytes of the first error seen.
 */
#ifndef VRAMD_QUALITY_STREAM_WATCH_H
#define VRAMD_QUALITY_STREAM_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#define STREAM_LINE_MAX 4096
#define STREAM_ERROR_MAX 2048

enum stream_kind { STREAM_NONE = 0, STREAM_SSE, STREAM_NDJSON, STREAM_RAW };

typedef struct stream_watch {
    enum stream_kind kind;
    bool in_error_event; /* SSE: inside an `event: error` */
    bool line_over;      /* the line being read outgrew STREAM_LINE_MAX */
    bool saw_error;      /* an error event or line */
    bool saw_done;       /* the dialect's last event */
    bool expects_done;   /* the stream showed a dialect that ends with a last event */
    size_t line_len;
    size_t error_len;
    char line[STREAM_LINE_MAX];
    char error[STREAM_ERROR_MAX];
} stream_watch_t;

/* The kind of stream an answer's Content-Type names (ctype need not be NUL-terminated;
 * NULL or len 0: no type). STREAM_NONE when it names none of SSE/NDJSON: the caller
 * decides from the framing whether the answer is a RAW stream or a whole one. */
enum stream_kind stream_kind_of(const char *ctype, size_t len);
const char *stream_kind_name(enum stream_kind k);
/* Start watching one answer of this kind (STREAM_NONE: not watched). */
void stream_watch_init(stream_watch_t *w, enum stream_kind kind);
/* Body bytes as they pass (the payload, chunk framing removed). */
void stream_watch_feed(stream_watch_t *w, const char *data, size_t len);
/* The body ended: a last line without its newline is read. */
void stream_watch_end(stream_watch_t *w);
/* Ended without the last event its dialect sends (and without an error event). */
bool stream_watch_incomplete(const stream_watch_t *w);

#endif
