/*
 * http1_chunked: the incremental decoder of chunked bodies (RFC 9112 7.1). The contract is
 * in http1.h (http1_chunked_init / http1_chunked_feed); this comment says how.
 *
 * A byte-level state machine (enum chunk_state, kept in http1_chunked_t.state between
 * feeds). http1_chunked_feed walks the input; each state has one step function that looks
 * at one byte and moves to the next state, or names the error. Payload is the exception:
 * in CHUNK_DATA the whole run of payload bytes in the input is handed to the callback at
 * once, as a span of the caller's input (never copied).
 *
 * Invariants:
 *   - the result (answer, bytes consumed, payload, error code, position and text) depends
 *     only on the bytes, never on how they are split across feeds;
 *   - a chunk size is hex without sign or whitespace, at most CHUNK_MAX_SIZE_DIGITS digits,
 *     and never above HTTP1_MAX_CONTENT_LENGTH (2^53);
 *   - the chunk extension may hold any VCHAR/SP/HTAB/obs-text (its grammar is not checked)
 *     and counts against max_ext; the trailer section counts every byte, its final CRLF
 *     included, against max_trailer;
 *   - once it fails, the state remembers the error code (CHUNK_FAILED + code) and every
 *     later feed fails the same way; after the last chunk and its trailers (CHUNK_DONE) a
 *     feed consumes nothing and answers HTTP1_OK.
 */
#include "http/http1_internal.h"

#include <string.h>

#include "common/hex.h"

#define CHUNK_DEFAULT_MAX_EXT 4096
#define CHUNK_DEFAULT_MAX_TRAILER 16384
/* 2^53 needs 14 hex digits; a few leading zeros are allowed, an endless run of them is not. */
#define CHUNK_MAX_SIZE_DIGITS 16

enum chunk_state {
    CHUNK_SIZE_START = 0, /* first hex digit of a chunk size (zero so a zeroed struct works) */
    CHUNK_SIZE,           /* more hex digits, ';' or CR */
    CHUNK_EXT,            /* chunk extension up to CR */
    CHUNK_SIZE_LF,        /* LF ending the size line */
    CHUNK_DATA,           /* payload */
    CHUNK_DATA_CR,        /* CR after the payload */
    CHUNK_DATA_LF,        /* LF after the payload */
    CHUNK_TRAILER_START,  /* start of a trailer line, or CR of the final empty line */
    CHUNK_TRAILER_NAME,   /* trailer field name up to ':' */
    CHUNK_TRAILER_VALUE,  /* trailer field value up to CR */
    CHUNK_TRAILER_LF,     /* LF ending a trailer line */
    CHUNK_FINAL_LF,       /* LF of the final empty line */
    CHUNK_DONE,           /* body complete */
    CHUNK_FAILED = 100,   /* CHUNK_FAILED + errcode: failed earlier */
};

/* What a step found wrong with its byte: what == NULL when nothing. */
typedef struct chunk_err {
    http1_errcode_t code;
    const char *what;
} chunk_err_t;

static const chunk_err_t STEP_OK = {HTTP1_E_NONE, NULL};

static chunk_err_t step_error(http1_errcode_t code, const char *what)
{
    chunk_err_t e = {code, what};
    return e;
}

void http1_chunked_init(http1_chunked_t *d, size_t max_trailer)
{
    memset(d, 0, sizeof *d);
    d->state = CHUNK_SIZE_START;
    d->max_ext = CHUNK_DEFAULT_MAX_EXT;
    d->max_trailer = max_trailer ? max_trailer : CHUNK_DEFAULT_MAX_TRAILER;
}

/* ------------------------------------------------------------------ the size line */

static chunk_err_t step_size_start(http1_chunked_t *d, unsigned char c)
{
    int h = hex_value(c);
    if (h < 0)
        return step_error(HTTP1_E_BAD_CHUNK_SIZE, "chunk size does not start with a hex digit");
    d->remaining = (uint64_t)h;
    d->size_digits = 1;
    d->ext_len = 0;
    d->state = CHUNK_SIZE;
    return STEP_OK;
}

static chunk_err_t step_size(http1_chunked_t *d, unsigned char c)
{
    int h = hex_value(c);
    if (h >= 0) {
        if (d->size_digits >= CHUNK_MAX_SIZE_DIGITS ||
            d->remaining > (HTTP1_MAX_CONTENT_LENGTH - (uint64_t)h) / 16)
            return step_error(HTTP1_E_BAD_CHUNK_SIZE, "chunk size too large");
        d->remaining = d->remaining * 16 + (uint64_t)h;
        d->size_digits++;
    } else if (c == ';') {
        d->state = CHUNK_EXT;
    } else if (c == '\r') {
        d->state = CHUNK_SIZE_LF;
    } else {
        return step_error(HTTP1_E_BAD_CHUNK_SIZE,
                          "chunk size followed by something other than ';' or CRLF");
    }
    return STEP_OK;
}

static chunk_err_t step_ext(http1_chunked_t *d, unsigned char c)
{
    size_t max_ext = d->max_ext ? d->max_ext : CHUNK_DEFAULT_MAX_EXT;
    if (c == '\r')
        d->state = CHUNK_SIZE_LF;
    else if (!is_field_char(c))
        return step_error(HTTP1_E_BAD_CHUNK_EXT, "control byte in chunk extension");
    else if (++d->ext_len > max_ext)
        return step_error(HTTP1_E_BAD_CHUNK_EXT, "chunk extension too long");
    return STEP_OK;
}

static chunk_err_t step_size_lf(http1_chunked_t *d, unsigned char c)
{
    if (c != '\n')
        return step_error(HTTP1_E_BAD_CHUNK_SIZE, "CR without LF after chunk size");
    if (d->remaining == 0) {
        d->trailer_len = 0;
        d->state = CHUNK_TRAILER_START;
    } else {
        d->state = CHUNK_DATA;
    }
    return STEP_OK;
}

/* ------------------------------------------------------------------ payload and its CRLF */

/* CHUNK_DATA: hand over what the input holds of the current chunk; returns the bytes used. */
static size_t feed_data(http1_chunked_t *d, const char *in, size_t avail, http1_data_cb on_data,
                        void *ctx)
{
    size_t n = d->remaining < avail ? (size_t)d->remaining : avail;
    if (on_data)
        on_data(ctx, in, n);
    d->remaining -= n;
    d->total += n;
    if (d->remaining == 0)
        d->state = CHUNK_DATA_CR;
    return n;
}

static chunk_err_t step_data_cr(http1_chunked_t *d, unsigned char c)
{
    if (c != '\r')
        return step_error(HTTP1_E_BAD_CHUNK_END, "chunk data not followed by CRLF");
    d->state = CHUNK_DATA_LF;
    return STEP_OK;
}

static chunk_err_t step_data_lf(http1_chunked_t *d, unsigned char c)
{
    if (c != '\n')
        return step_error(HTTP1_E_BAD_CHUNK_END, "chunk data not followed by CRLF");
    d->state = CHUNK_SIZE_START;
    return STEP_OK;
}

/* ------------------------------------------------------------------ the trailer section */

static chunk_err_t step_trailer_start(http1_chunked_t *d, unsigned char c)
{
    if (c == '\r')
        d->state = CHUNK_FINAL_LF;
    else if (is_tchar(c))
        d->state = CHUNK_TRAILER_NAME;
    else
        return step_error(HTTP1_E_BAD_TRAILER, is_ows(c)
                                                   ? "line folding (obs-fold) in trailer"
                                                   : "trailer line does not start with a field name");
    return STEP_OK;
}

static chunk_err_t step_trailer_name(http1_chunked_t *d, unsigned char c)
{
    if (c == ':')
        d->state = CHUNK_TRAILER_VALUE;
    else if (!is_tchar(c))
        return step_error(HTTP1_E_BAD_TRAILER, "trailer field name is not a token");
    return STEP_OK;
}

static chunk_err_t step_trailer_value(http1_chunked_t *d, unsigned char c)
{
    if (c == '\r')
        d->state = CHUNK_TRAILER_LF;
    else if (!is_field_char(c))
        return step_error(HTTP1_E_BAD_TRAILER, "control byte in a trailer value");
    return STEP_OK;
}

static chunk_err_t step_trailer_lf(http1_chunked_t *d, unsigned char c)
{
    if (c != '\n')
        return step_error(HTTP1_E_BAD_TRAILER, "CR without LF in trailer");
    d->state = CHUNK_TRAILER_START;
    return STEP_OK;
}

static chunk_err_t step_final_lf(http1_chunked_t *d, unsigned char c)
{
    if (c != '\n')
        return step_error(HTTP1_E_BAD_TRAILER, "CR without LF ending the body");
    d->state = CHUNK_DONE;
    return STEP_OK;
}

/* ------------------------------------------------------------------ the walk */

/* One byte in any state but CHUNK_DATA (fed by runs) and the final ones (never stepped). */
static chunk_err_t step(http1_chunked_t *d, unsigned char c)
{
    switch (d->state) {
    case CHUNK_SIZE_START: return step_size_start(d, c);
    case CHUNK_SIZE: return step_size(d, c);
    case CHUNK_EXT: return step_ext(d, c);
    case CHUNK_SIZE_LF: return step_size_lf(d, c);
    case CHUNK_DATA_CR: return step_data_cr(d, c);
    case CHUNK_DATA_LF: return step_data_lf(d, c);
    case CHUNK_TRAILER_START: return step_trailer_start(d, c);
    case CHUNK_TRAILER_NAME: return step_trailer_name(d, c);
    case CHUNK_TRAILER_VALUE: return step_trailer_value(d, c);
    case CHUNK_TRAILER_LF: return step_trailer_lf(d, c);
    case CHUNK_FINAL_LF: return step_final_lf(d, c);
    default: return step_error(HTTP1_E_BAD_CHUNK_SIZE, "corrupt chunked decoder state");
    }
}

static int chunk_fail(http1_chunked_t *d, http1_errcode_t code, size_t pos, const char *what,
                      size_t *consumed, http1_error_t *err)
{
    d->state = CHUNK_FAILED + (int)code;
    *consumed = pos;
    return fail(err, code, pos, what);
}

int http1_chunked_feed(http1_chunked_t *d, const char *in, size_t len, size_t *consumed,
                       http1_data_cb on_data, void *ctx, http1_error_t *err)
{
    size_t max_trailer = d->max_trailer ? d->max_trailer : CHUNK_DEFAULT_MAX_TRAILER;
    size_t i = 0;

    if (d->state == CHUNK_DONE) {
        *consumed = 0;
        return HTTP1_OK;
    }
    if (d->state >= CHUNK_FAILED) {
        *consumed = 0;
        return fail(err, (http1_errcode_t)(d->state - CHUNK_FAILED), 0,
                    "chunked body already failed");
    }
    while (i < len) {
        if (d->state == CHUNK_DATA) {
            i += feed_data(d, in + i, len - i, on_data, ctx);
            continue;
        }
        if (d->state >= CHUNK_TRAILER_START && d->state <= CHUNK_FINAL_LF &&
            ++d->trailer_len > max_trailer)
            return chunk_fail(d, HTTP1_E_TRAILER_TOO_LARGE, i, "trailer section too large",
                              consumed, err);
        chunk_err_t e = step(d, (unsigned char)in[i]);
        if (e.what != NULL)
            return chunk_fail(d, e.code, i, e.what, consumed, err);
        i++;
        if (d->state == CHUNK_DONE) {
            *consumed = i;
            return HTTP1_OK;
        }
    }
    *consumed = len;
    return HTTP1_NEED_MORE;
}
