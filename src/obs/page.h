/*
 * page: the live status page served at GET / (src/obs/page.html, embedded in the vramd
 * binary at build time; see page.c), and the response headers it is served with.
 *
 * The page is one self-contained HTML file with exactly one style element and one script
 * element and no external resource; it polls GET v1/status every second. Its
 * Content-Security-Policy allows nothing but those two elements (by their SHA-256, computed
 * here from the embedded bytes, so the header always matches the file it was built from)
 * and fetches from its own origin.
 * Both functions return static memory that lives as long as the process.
 */
#ifndef VRAMD_OBS_PAGE_H
#define VRAMD_OBS_PAGE_H

#include <stddef.h>

/* The page's bytes (not NUL-terminated as far as len is concerned) and their length. */
const char *page_html(size_t *len);
/* The extra header lines for the page, each ending in CRLF: Cache-Control: no-cache,
 * Content-Security-Policy, X-Content-Type-Options, Referrer-Policy. Computed on the first
 * call (the daemon is single-threaded). */
const char *page_headers(void);

#endif
