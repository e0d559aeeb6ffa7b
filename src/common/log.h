/*
 * log: structured event log, one line per event, JSON (default) or text, to stderr or a fd.
 *
 * Fields are written as "key=%spec" pairs separated by spaces, so one call reads like the
 * line it writes and still produces typed JSON:
 *
 *     log_event(LOG_INFO, "worker_started", "model=%s pid=%d port=%d", name, pid, port);
 *  -> {"ts":"2026-11-22T06:53:14.123Z","level":"info","event":"worker_started","model":"trellis","pid":4242,"port":40001}
 *
 * Supported specs: %s (string, JSON-escaped; NULL -> null), %.*s (an int length, then the
 * string: a span of a buffer, such as a header's value; at most 511 bytes of it are
 * written), %d %u %ld %lu %lld %llu %zu
 * (numbers), %f (double), %B (int as true/false), %J (a pre-rendered JSON value, inserted
 * verbatim). Anything else in the format is a programming error and is written as a
 * "log_format_error" field rather than crashing.
 * Invariant: a log line is written with one write(2) call, so lines from different
 * processes sharing the fd never interleave (lines are capped at LOG_LINE_MAX bytes).
 */
#ifndef VRAMD_COMMON_LOG_H
#define VRAMD_COMMON_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };
enum log_format { LOG_FORMAT_JSON = 0, LOG_FORMAT_TEXT = 1 };

#define LOG_LINE_MAX 16384

void log_configure(enum log_format format, enum log_level min_level, int fd);
bool log_enabled(enum log_level level);
void log_event(enum log_level level, const char *event, const char *fields, ...);
void log_eventv(enum log_level level, const char *event, const char *fields, va_list ap);
/* Parse "debug|info|warn|error" / "json|text"; -1 when unknown. */
int log_level_parse(const char *s);
int log_format_parse(const char *s);
const char *log_level_name(enum log_level level);
/* Append s JSON-escaped (without quotes) into out (size cap); returns bytes written. */
size_t log_json_escape(char *out, size_t cap, const char *s, size_t len);

#endif
