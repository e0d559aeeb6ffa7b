/* http_auth: the admin bearer token check. See http_auth.h. */
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
