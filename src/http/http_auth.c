/* http_auth: the admin bearer token check, the cross-origin check. See http_auth.h. */
#include "http/http_auth.h"

#include <string.h>
#include <strings.h>

bool http_bearer_ok(const char *token, const char *head, const http1_msg_t *msg)
{
    if (!token)
        return true;
    const http1_header_t *h = http1_find_header(head, msg, "Authorization");
    if (!h)
        return false;
    const char *v = head + h->value.off;
    size_t vl = h->value.len;
    if (vl < 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    vl -= 7;
    size_t tl = strlen(token);
    /* constant-time over the token's length */
    unsigned diff = (unsigned)(vl ^ tl);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)token[i] ^ (unsigned char)(i < vl ? v[i] : 0);
    return diff == 0;
}

static bool span_is(const char *v, size_t n, const char *s)
{
    return n == strlen(s) && strncasecmp(v, s, n) == 0;
}

bool http_cross_origin(const char *head, const http1_msg_t *msg)
{
    const http1_header_t *site = http1_find_header(head, msg, "Sec-Fetch-Site");
    if (site)
        return !span_is(head + site->value.off, site->value.len, "same-origin") &&
               !span_is(head + site->value.off, site->value.len, "none");
    const http1_header_t *o = http1_find_header(head, msg, "Origin");
    if (!o)
        return false;
    const char *v = head + o->value.off;
    size_t n = o->value.len, i = 0;
    while (i + 3 <= n && memcmp(v + i, "://", 3) != 0)
        i++;
    if (i + 3 > n)
        return true; /* "null" (a sandboxed or file: page), or not an origin */
    const http1_header_t *host = http1_find_header(head, msg, "Host");
    return !host || n - i - 3 != host->value.len || strncasecmp(v + i + 3, head + host->value.off, host->value.len) != 0;
}
