/*
 * degrade: recognising an out-of-memory answer, and rewriting a request for a lower level
 * of the degradation ladder. Pure functions over buffers; no I/O.
 *
 * Detection (degrade_is_oom): the configured rules are of two kinds.
 *   Signals: detect.statuses (status in the list), detect.json_path + json_equals (the
 *   RFC 6901 pointer in the JSON body equals the value), detect.header (that response
 *   header is present). Qualifier: detect.body_matches (POSIX ERE, case-insensitive).
 *   An answer is an OOM when at least one configured signal matches AND, if body_matches
 *   is configured, the body matches it too. With no signal configured the signal is
 *   "status >= 500, or a JSON body whose /success is false"; with no rule configured at
 *   all, body_matches defaults to "out of memory". So the SPEC's example
 *   {status: [500, 507], body_matches: "out of memory", json: {path: /success, equals: false}}
 *   reads: a 500/507 or a success:false answer whose text says "out of memory".
 *   body_matches looks at the first 64 KiB of the body only (NUL bytes read as spaces);
 *   the JSON signal parses the whole body, which must be one JSON value.
 *   An error event inside a streamed answer (degrade_error_is_oom) is an OOM when
 *   body_matches (or its default) matches the event's text: the stream's status and
 *   headers, a success's, are no signal.
 *
 * Rewriting (degrade_rewrite): level 0 is the request as sent; level k >= 1 applies
 * ladder[k-1].set to the body:
 *   - application/json (or a body that parses as a JSON object): RFC 7386 merge patch;
 *   - application/x-www-form-urlencoded: each key of `set` replaces that field's value
 *     (added when absent), values URL-encoded, other fields and their order untouched;
 *   - multipart/form-data (boundary from the content type): each key of `set` replaces the
 *     matching plain form field's value (a part with name="key" and no filename), or a new
 *     part is appended before the closing boundary; file parts are never changed;
 *   - anything else: cannot be rewritten (-1 with a reason).
 *   `set` values that are strings are used as-is; numbers/booleans are rendered as JSON
 *   renders them ("12", "true"). In forms and multipart bodies a null value removes the
 *   field/part (as in a merge patch), and every field/part with the name gets the value;
 *   a key naming only a file part changes nothing (no text field is added beside it).
 * Return convention: 0 ok / 1 yes; -1 error with a reason in why. Output buffers are
 * malloc'ed and owned by the caller.
 */
#ifndef VRAMD_QUALITY_DEGRADE_H
#define VRAMD_QUALITY_DEGRADE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "config/config.h"

/* headers: "Name: value\r\n" lines of the response head (may be NULL). */
bool degrade_is_oom(const config_detect_t *detect, int status, const char *headers, size_t headers_len,
                    const char *body, size_t body_len);
/* content_type may be NULL. On success *out / *out_len hold the new body. */
/* A configured status or header signal matches this head (what can be known before the
 * body): the answer may be an OOM. */
bool degrade_head_signal(const config_detect_t *detect, int status, const char *headers, size_t headers_len);
/* The text of an error event inside a streamed answer (status and headers were a success's):
 * an OOM when detect.body_matches matches it ("out of memory" when not configured). */
bool degrade_error_is_oom(const config_detect_t *detect, const char *text, size_t len);
int degrade_rewrite(const cJSON *set, const char *content_type, const char *body, size_t body_len, char **out,
                    size_t *out_len, char *why, size_t whylen);

#endif
