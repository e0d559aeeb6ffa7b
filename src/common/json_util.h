/*
 * json_util: the pieces of cJSON_Utils that Debian's libcjson-dev does not ship, written
 * for vramd and tested against the RFCs' own examples.
 *
 *  - RFC 7386 JSON Merge Patch: json_merge_patch(target, patch) returns the patched
 *    document (target is consumed or returned; patch is not modified). A null in the patch
 *    removes the member; a non-object patch replaces the target.
 *  - RFC 6901 JSON Pointer: json_pointer_get(doc, "/a/b~1c/0") returns the node or NULL
 *    (the pointer is not valid, or nothing is there). "" is the whole document. Array
 *    indexes are decimal without leading zeros; "-" is never found.
 *  - json_equal: deep structural equality (numbers compared as doubles, object members
 *    in any order).
 */
#ifndef VRAMD_COMMON_JSON_UTIL_H
#define VRAMD_COMMON_JSON_UTIL_H

#include <stdbool.h>
#include <cjson/cJSON.h>

cJSON *json_merge_patch(cJSON *target, const cJSON *patch);
cJSON *json_pointer_get(const cJSON *doc, const char *pointer);
bool json_pointer_valid(const char *pointer);
bool json_equal(const cJSON *a, const cJSON *b);

#endif
