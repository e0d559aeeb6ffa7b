/*
 * http_path: dot segments in a request target's path (see http_path.h). Pure.
 */
#include "http/http_path.h"

#include <ctype.h>

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
