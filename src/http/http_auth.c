/* http_auth: the admin bearer token check, the cross-origin check, the Host allow-list.
 * See http_auth.h. */
#include "http/http_auth.h"

#include <arpa/inet.h>
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

/* v[0..n) is an IP literal: a dotted IPv4 address, or an IPv6 address in brackets. */
static bool ip_literal(const char *v, size_t n)
{
    char tmp[INET6_ADDRSTRLEN + 2];
    unsigned char addr[16];
    if (n >= sizeof tmp)
        return false;
    if (n >= 2 && v[0] == '[' && v[n - 1] == ']') {
        memcpy(tmp, v + 1, n - 2);
        tmp[n - 2] = '\0';
        return inet_pton(AF_INET6, tmp, addr) == 1;
    }
    memcpy(tmp, v, n);
    tmp[n] = '\0';
    return inet_pton(AF_INET, tmp, addr) == 1;
}

/* v[0..n) ends with "." suffix (case-insensitive), with at least one character before. */
static bool ends_with_label(const char *v, size_t n, const char *suffix)
{
    size_t sl = strlen(suffix);
    return n > sl + 1 && v[n - sl - 1] == '.' && strncasecmp(v + n - sl, suffix, sl) == 0;
}

static bool name_listed(const char *v, size_t n, char *const *names, size_t n_names)
{
    for (size_t i = 0; i < n_names; i++) {
        const char *e = names[i];
        if (e[0] == '*' && e[1] == '.' ? ends_with_label(v, n, e + 2) : span_is(v, n, e))
            return true;
    }
    return false;
}

bool http_host_allowed(const char *head, const http1_msg_t *msg, char *const *names, size_t n_names)
{
    const http1_header_t *h = http1_find_header(head, msg, "Host");
    if (!h)
        return true;
    const char *v = head + h->value.off;
    size_t n = h->value.len;
    /* the port: after the last ':' when what follows is digits (a bracketed IPv6 ends in ']') */
    size_t colon = n;
    while (colon > 0 && v[colon - 1] >= '0' && v[colon - 1] <= '9')
        colon--;
    if (colon > 0 && v[colon - 1] == ':')
        n = colon - 1;
    if (n == 0)
        return true; /* "Host:" or "Host: :8800": no name at all, so none a page could rebind */
    if (ip_literal(v, n))
        return true;
    if (v[n - 1] == '.')
        n--; /* "localhost." and "name." are the names without their root dot */
    return span_is(v, n, "localhost") || ends_with_label(v, n, "localhost") || name_listed(v, n, names, n_names);
}
