/*
 * http1_internal: the byte classes and the error helper that the HTTP/1.x head parser
 * (http1.c) and the chunked body decoder (http1_chunked.c) share. Not for use outside
 * src/http/http1*.c. Pure functions over one byte (RFC 9110 5.6.2 and 5.5), no state.
 */
#ifndef VRAMD_HTTP_HTTP1_INTERNAL_H
#define VRAMD_HTTP_HTTP1_INTERNAL_H

#include "http/http1.h"

/* tchar: a byte of a token (field names, methods, transfer codings). */
static inline bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return true;
    default:
        return false;
    }
}

static inline bool is_ows(unsigned char c) { return c == ' ' || c == '\t'; }

/* VCHAR, SP, HTAB and obs-text: every byte but the CTLs other than HTAB, and DEL. */
static inline bool is_field_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

/* Fill *err (may be NULL) and return HTTP1_ERROR. */
static inline int fail(http1_error_t *err, http1_errcode_t code, size_t pos, const char *what)
{
    if (err) {
        err->code = code;
        err->pos = pos;
        err->what = what;
    }
    return HTTP1_ERROR;
}

#endif
