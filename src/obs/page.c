/*
 * page: the status page embedded in the binary, and its headers. See page.h.
 *
 * Embedding: the assembler's .incbin directive copies src/obs/page.html into .rodata,
 * between the symbols vramd_page_html_start and vramd_page_html_end, and stores the length
 * in vramd_page_html_size. The path is relative to the directory the compiler runs in,
 * which is the repository root for every build (Makefile and fuzz builds alike). The
 * Makefile lists page.html as a prerequisite of page.o, so editing the page rebuilds it.
 * A trailing NUL byte follows the page (not counted), so the bytes also read as a C string.
 *
 * CSP: the header names the SHA-256 of the text between the page's <style> and </style>
 * tags and between its <script> and </script> tags (what a browser hashes for an inline
 * element). Should the page lack one of them, that source is left out, so the browser
 * blocks it and the page test fails loudly rather than the policy being loosened.
 */
#include "obs/page.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/sha256.h"

__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".globl vramd_page_html_start\n"
        ".hidden vramd_page_html_start\n"
        "vramd_page_html_start:\n"
        ".incbin \"src/obs/page.html\"\n"
        ".globl vramd_page_html_end\n"
        ".hidden vramd_page_html_end\n"
        "vramd_page_html_end:\n"
        ".byte 0\n"
        ".balign 8\n"
        ".globl vramd_page_html_size\n"
        ".hidden vramd_page_html_size\n"
        "vramd_page_html_size:\n"
        ".8byte vramd_page_html_end - vramd_page_html_start\n"
        ".popsection\n");

extern const char vramd_page_html_start[];
extern const uint64_t vramd_page_html_size;

const char *page_html(size_t *len)
{
    *len = (size_t)vramd_page_html_size;
    return vramd_page_html_start;
}

/* The text between open and close tags, found in the page; NULL when absent. */
static const char *element_text(const char *html, size_t len, const char *open, const char *close,
                                size_t *text_len)
{
    const char *start = memmem(html, len, open, strlen(open));
    if (!start)
        return NULL;
    start += strlen(open);
    const char *end = memmem(start, len - (size_t)(start - html), close, strlen(close));
    if (!end)
        return NULL;
    *text_len = (size_t)(end - start);
    return start;
}

/* Append " 'sha256-...'" for the element's text to out (or nothing when it is missing). */
static void hash_source(char *out, size_t cap, const char *html, size_t len, const char *open,
                        const char *close)
{
    size_t n = 0;
    const char *text = element_text(html, len, open, close, &n);
    if (!text)
        return;
    char b64[SHA256_BASE64_SIZE];
    sha256_base64(text, n, b64);
    size_t used = strlen(out);
    snprintf(out + used, cap - used, " 'sha256-%s'", b64);
}

const char *page_headers(void)
{
    static char g_headers[1024];
    if (g_headers[0])
        return g_headers;
    size_t len;
    const char *html = page_html(&len);
    char style[128] = "", script[128] = "";
    hash_source(style, sizeof style, html, len, "<style>", "</style>");
    hash_source(script, sizeof script, html, len, "<script>", "</script>");
    snprintf(g_headers, sizeof g_headers,
             "Cache-Control: no-cache\r\n"
             "Content-Security-Policy: default-src 'none'; style-src%s; script-src%s; "
             "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
             "frame-ancestors 'none'\r\n"
             "X-Content-Type-Options: nosniff\r\n"
             "Referrer-Policy: no-referrer\r\n",
             style[0] ? style : " 'none'", script[0] ? script : " 'none'");
    return g_headers;
}
