/*
 * http_path: does a request target's path hold a dot segment, and a query component's
 * percent-decoding. Pure (bytes in, an answer out). vramd refuses such a path (400) instead of normalizing it: a worker must never see
 * "..", and a path that would climb out of a model's route prefix has no safe meaning.
 */
#ifndef VRAMD_HTTP_HTTP_PATH_H
#define VRAMD_HTTP_HTTP_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* True when the path of target[0..len) (up to the first '?' or '#') has a segment that is
 * "." or ".." (RFC 3986 3.3), each dot literal or percent-encoded ("%2e", any case), with
 * segments separated by '/' and also by what a server may decode or read as one: "%2f",
 * "\" and "%5c" (any case). So "/a/../b", "/a/%2e%2E/b", "/a/..%2fb", "/a\..\b" and "/a/."
 * are dot paths; "/a/..b", "/a/b..", "/a/.b", "/a/...", "/a/%2e%2e%2e" and "/a?x=/../" are
 * not. */
bool http_path_has_dot_segment(const char *target, size_t len);

/* Percent-decode a query component s[0..n) ('+' is a space) into out (NUL-terminated).
 * -1 on a bad escape, a decoded NUL, or when out (cap bytes) is too small. */
int http_query_decode(const char *s, size_t n, char *out, size_t cap);

#endif
