/*
 * degrade_int: what the two halves of the degrade module share; only degrade_detect.c and
 * degrade_rewrite.c include it. The public contract is in degrade.h.
 *
 *   degrade_detect.c    degrade_is_oom, and what a JSON body is (degrade_parse_json_body)
 *   degrade_rewrite.c   degrade_rewrite: JSON merge patch, form-urlencoded, multipart
 *
 * Both halves are pure functions over buffers: no I/O, no global state, nothing kept
 * between calls.
 */
#ifndef VRAMD_QUALITY_DEGRADE_INT_H
#define VRAMD_QUALITY_DEGRADE_INT_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Parses the body as one JSON value with only whitespace around it and no NUL byte; NULL
 * otherwise (also for a NULL or empty body). The caller owns the tree. */
cJSON *degrade_parse_json_body(const char *body, size_t len);

#endif
