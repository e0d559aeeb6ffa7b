/*
 * validate: validate_body, the dispatch from a validator's kind to its checker, and the
 * CRC-32 the PNG checker uses. The contract is in validate.h; the safety invariants that
 * every validator keeps, and the helpers they share, are in validate_int.h. Each format
 * has its own file: validate_json.c, validate_glb.c, validate_ply.c, validate_png.c.
 *
 * Choices the header leaves open:
 *  - validate_body: kind NULL is "none"; an unknown kind is invalid.
 *  - On 0, why is left untouched. why may be NULL or whylen 0 (nothing is written then).
 *
 * The CRC tables are the only global mutable state of the validators: built once under
 * pthread_once, read-only afterwards.
 */
#include "quality/validate.h"
#include "quality/validate_int.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ dispatch */

int validate_body(const char *kind, uint64_t min_bytes, const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if ((uint64_t)n < min_bytes)
        return fail(why, whylen, "empty or too small: %zu bytes < %llu", n, (unsigned long long)min_bytes);
    if (kind == NULL || strcmp(kind, "none") == 0)
        return 0;
    if (strcmp(kind, "glb") == 0)
        return validate_glb(p, n, why, whylen);
    if (strcmp(kind, "ply") == 0)
        return validate_ply(p, n, why, whylen);
    if (strcmp(kind, "png") == 0)
        return validate_png(p, n, why, whylen);
    if (strcmp(kind, "json") == 0)
        return validate_json(p, n, why, whylen);
    char q[QUOTE_MAX + 4];
    return fail(why, whylen, "unknown validator '%s'", quote_bytes(q, sizeof q, (const unsigned char *)kind, strlen(kind)));
}
