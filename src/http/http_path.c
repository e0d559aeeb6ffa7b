/*
 * http_path: dot segments in a request target's path, a query component's percent-decoding
 * (see http_path.h). Pure.
 */
#include "http/http_path.h"

#include <ctype.h>

#include "common/hex.h"

/* At p[0..n): the length of a separator ('/', '\', "%2f", "%5c"), or 0. */
static size_t separator_len(const char *p, size_t n)
{
    if (p[0] == '/' || p[0] == '\\')
        return 1;
    if (n >= 3 && p[0] == '%' &&
        ((p[1] == '2' && tolower((unsigned char)p[2]) == 'f') || (p[1] == '5' && tolower((unsigned char)p[2]) == 'c')))
        return 3;
    return 0;
}

/* At p[0..n): the length of one dot ('.' or "%2e"), or 0. */
static size_t dot_len(const char *p, size_t n)
{
    if (p[0] == '.')
        return 1;
    if (n >= 3 && p[0] == '%' && p[1] == '2' && tolower((unsigned char)p[2]) == 'e')
        return 3;
    return 0;
}

bool http_path_has_dot_segment(const char *target, size_t len)
{
    size_t end = 0;
    while (end < len && target[end] != '?' && target[end] != '#')
        end++;
    size_t i = 0;
    while (i < end) {
        /* a segment starts here: count its dots until a separator or the end */
        unsigned dots = 0;
        bool other = false;
        while (i < end) {
            size_t s = separator_len(target + i, end - i);
            if (s) {
                i += s;
                break;
            }
            size_t d = dot_len(target + i, end - i);
            if (d) {
                dots++;
                i += d;
            } else {
                other = true;
                i++;
            }
        }
        if (!other && (dots == 1 || dots == 2))
            return true;
    }
    return false;
}

int http_query_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '+') {
            ch = ' ';
        } else if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            ch = (char)(hi * 16 + lo);
            i += 2;
        }
        if (ch == '\0' || o + 1 >= cap)
            return -1;
        out[o++] = ch;
    }
    out[o] = '\0';
    return 0;
}
