/*
 * test_page: the embedded status page and its headers (obs/page.h), and the SHA-256 that
 * its Content-Security-Policy is built from (common/sha256.h).
 * Covers the FIPS 180-4 test vectors (empty, one block, the 56-byte message that needs a
 * second padding block, a million bytes) and block-boundary lengths; that the page is
 * embedded whole (doctype first, closing tag last, small enough for one response buffer),
 * has exactly one style and one script element and loads nothing from elsewhere; and that
 * the CSP names exactly the hashes of those two elements and nothing looser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "obs/page.h"

static void expect_hex(const char *msg, size_t len, const char *want)
{
    uint8_t d[SHA256_BYTES];
    char hex[2 * SHA256_BYTES + 1];
    sha256(msg, len, d);
    for (int i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcmp(hex, want) != 0)
        fail_msg("sha256 of %zu bytes = %s, wanted %s", len, hex, want);
}

static void test_sha256_fips_vectors(void **state)
{
    (void)state;
    expect_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m56 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect_hex(m56, strlen(m56), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m112 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                       "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    expect_hex(m112, strlen(m112), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    size_t n = 1000000;
    char *million = malloc(n);
    assert_non_null(million);
    memset(million, 'a', n);
    expect_hex(million, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

static void test_sha256_block_boundaries(void **state)
{
    (void)state;
    /* 55 bytes: padding fits in one block; 64: a whole extra block of padding */
    char buf[64];
    memset(buf, 'a', sizeof buf);
    expect_hex(buf, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    expect_hex(buf, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

static void test_sha256_base64(void **state)
{
    (void)state;
    char b64[SHA256_BASE64_SIZE];
    sha256_base64("", 0, b64);
    assert_string_equal(b64, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
    sha256_base64("abc", 3, b64);
    assert_string_equal(b64, "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
}

static size_t count(const char *hay, size_t len, const char *needle)
{
    size_t n = 0, nl = strlen(needle);
    for (const char *p = hay; (p = memmem(p, len - (size_t)(p - hay), needle, nl)) != NULL; p += nl)
        n++;
    return n;
}

static void test_page_embedded_whole(void **state)
{
    (void)state;
    size_t len = 0;
    const char *html = page_html(&len);
    assert_true(len > 1000);
    /* conn_respond builds a response in one buffer of at most 64 KiB, headers included */
    assert_true(len < 48 * 1024);
    assert_memory_equal(html, "<!doctype html>", 15);
    assert_int_equal(html[len], '\0'); /* the NUL after the page */
    const char *end = "</html>\n";
    assert_memory_equal(html + len - strlen(end), end, strlen(end));
    assert_int_equal(strlen(html), len); /* no NUL inside */
}

static void test_page_self_contained(void **state)
{
    (void)state;
    size_t len = 0;
    const char *html = page_html(&len);
    assert_int_equal(count(html, len, "<style"), 1);
    assert_int_equal(count(html, len, "<script"), 1);
    assert_int_equal(count(html, len, "src="), 0);
    assert_int_equal(count(html, len, "http:"), 0);
    assert_int_equal(count(html, len, "https:"), 0);
    assert_int_equal(count(html, len, "@import"), 0);
    assert_int_equal(count(html, len, "url("), 0);
    assert_int_equal(count(html, len, "href=\"data:,\""), count(html, len, "href="));
    assert_int_equal(count(html, len, "fetch(\"v1/status\""), 1);
}

/* The hash of the text between open and close, as the CSP source it must appear as. */
static void source_of(const char *html, size_t len, const char *open, const char *close, char *out,
                      size_t cap)
{
    const char *a = strstr(html, open);
    assert_non_null(a);
    a += strlen(open);
    const char *b = strstr(a, close);
    assert_non_null(b);
    char b64[SHA256_BASE64_SIZE];
    sha256_base64(a, (size_t)(b - a), b64);
    snprintf(out, cap, "'sha256-%s'", b64);
    (void)len;
}

static void test_page_headers(void **state)
{
    (void)state;
    size_t len = 0;
    const char *html = page_html(&len);
    const char *h = page_headers();
    assert_ptr_equal(h, page_headers()); /* computed once */
    assert_non_null(strstr(h, "Cache-Control: no-cache\r\n"));
    assert_non_null(strstr(h, "X-Content-Type-Options: nosniff\r\n"));
    const char *csp = strstr(h, "Content-Security-Policy: default-src 'none'; ");
    assert_non_null(csp);
    char style[80], script[80], want[256];
    source_of(html, len, "<style>", "</style>", style, sizeof style);
    source_of(html, len, "<script>", "</script>", script, sizeof script);
    snprintf(want, sizeof want, "style-src %s; script-src %s; connect-src 'self'; ", style, script);
    if (!strstr(csp, want))
        fail_msg("CSP %s lacks %s", csp, want);
    assert_null(strstr(h, "unsafe"));
    assert_null(strstr(h, "*"));
    assert_int_equal(count(h, strlen(h), "\r\n"), 4);
    size_t hl = strlen(h);
    assert_memory_equal(h + hl - 2, "\r\n", 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_fips_vectors),
        cmocka_unit_test(test_sha256_block_boundaries),
        cmocka_unit_test(test_sha256_base64),
        cmocka_unit_test(test_page_embedded_whole),
        cmocka_unit_test(test_page_self_contained),
        cmocka_unit_test(test_page_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
