/* Unit tests for policy/client_limit: keys (token digest, address, header, fallbacks), the
 * bounded table (lookup, LRU reuse of idle records, refusal when all are busy, peeking without
 * a change). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "policy/client_limit.h"

static void key_of(const char *head, enum client_key_kind kind, const char *header, const char *peer,
                   char out[CLIENT_KEY_MAX])
{
    http1_msg_t msg;
    http1_header_t hdrs[16];
    size_t scan = 0;
    http1_error_t err;
    http1_limits_t lim = {4096, 16};
    assert_int_equal(http1_parse_request(head, strlen(head), &lim, &msg, hdrs, &scan, &err), HTTP1_OK);
    msg.headers = hdrs;
    client_key(kind, header, head, &msg, peer, out);
}

static void test_keys(void **state)
{
    (void)state;
    char k[CLIENT_KEY_MAX], k2[CLIENT_KEY_MAX];
    const char *with = "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nX-Client-Id: team-a\r\n\r\n";
    const char *without = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    key_of(with, CLIENT_KEY_ADDRESS, NULL, "10.0.0.7:5511", k);
    assert_string_equal(k, "addr:10.0.0.7");
    key_of(with, CLIENT_KEY_ADDRESS, NULL, "[::1]:80", k);
    assert_string_equal(k, "addr:::1");
    key_of(with, CLIENT_KEY_TOKEN, NULL, "10.0.0.7:5511", k);
    assert_memory_equal(k, "token#", 6);
    assert_null(strstr(k, "s3cret")); /* the token itself is never kept */
    key_of("GET / HTTP/1.1\r\nHost: y\r\nAuthorization: Bearer s3cret\r\n\r\n", CLIENT_KEY_TOKEN, NULL, "1.2.3.4:1", k2);
    assert_string_equal(k, k2); /* the same token from elsewhere: the same client */
    key_of(without, CLIENT_KEY_TOKEN, NULL, "10.0.0.7:1", k);
    assert_string_equal(k, "addr:10.0.0.7");
    key_of(with, CLIENT_KEY_HEADER, "x-client-id", "10.0.0.7:1", k);
    assert_string_equal(k, "hdr:team-a");
    key_of(without, CLIENT_KEY_HEADER, "X-Client-Id", "10.0.0.8:1", k);
    assert_string_equal(k, "addr:10.0.0.8");
    char longhead[400];
    snprintf(longhead, sizeof longhead, "GET / HTTP/1.1\r\nHost: y\r\nX-Client-Id: %0100d\r\n\r\n", 7);
    key_of(longhead, CLIENT_KEY_HEADER, "X-Client-Id", "1.1.1.1:1", k);
    assert_memory_equal(k, "hdr#", 4);
    assert_true(strlen(k) < CLIENT_KEY_MAX);
}

static void test_table_lookup_and_lru(void **state)
{
    (void)state;
    client_table_t t;
    assert_int_equal(client_table_init(&t, 2), 0);
    client_rec_t *a = client_get(&t, "a", 1);
    client_rec_t *b = client_get(&t, "b", 2);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_equal(client_get(&t, "a", 3), a);
    assert_int_equal(client_count(&t), 2);
    assert_int_equal(client_busy_count(&t), 0);
    a->queued = 1;
    client_touch(&t, a);
    assert_int_equal(client_busy_count(&t), 1);
    /* full: "c" reuses the only idle record, b's */
    client_rec_t *c = client_get(&t, "c", 4);
    assert_ptr_equal(c, b);
    assert_string_equal(c->key, "c");
    assert_int_equal(t.evicted, 1);
    c->in_flight = 1;
    client_touch(&t, c);
    /* every record busy: refused, and the busy ones keep their keys */
    assert_null(client_get(&t, "d", 5));
    assert_ptr_equal(client_get(&t, "a", 6), a);
    assert_ptr_equal(client_get(&t, "c", 6), c);
    a->queued = 0;
    client_touch(&t, a);
    assert_ptr_equal(client_get(&t, "d", 7), a); /* a went idle: reused */
    client_table_free(&t);
}

/* client_peek and client_has_room answer what client_get would do, changing nothing. */
static void test_peek_changes_nothing(void **state)
{
    (void)state;
    client_table_t t;
    assert_int_equal(client_table_init(&t, 2), 0);
    assert_null(client_peek(&t, "a"));
    assert_true(client_has_room(&t));
    assert_int_equal(client_count(&t), 0); /* peeking made no record */
    client_rec_t *a = client_get(&t, "a", 1);
    client_rec_t *b = client_get(&t, "b", 2);
    assert_ptr_equal(client_peek(&t, "a"), a);
    assert_true(client_has_room(&t)); /* full, but both idle: one would be reused */
    a->queued = 1;
    client_touch(&t, a);
    b->in_flight = 1;
    client_touch(&t, b);
    assert_false(client_has_room(&t)); /* every record busy: client_get refuses a new key */
    assert_null(client_get(&t, "c", 3));
    assert_null(client_peek(&t, "c"));
    assert_ptr_equal(client_peek(&t, "b"), b);
    assert_int_equal(t.evicted, 0);
    client_table_free(&t);
    assert_null(client_peek(&t, "a"));
    assert_false(client_has_room(&t));
}

static void test_many_keys_stay_findable(void **state)
{
    (void)state;
    client_table_t t;
    assert_int_equal(client_table_init(&t, 100), 0);
    char key[32];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 300; i++) {
            snprintf(key, sizeof key, "k%d", i);
            client_rec_t *r = client_get(&t, key, (uint64_t)i);
            assert_non_null(r);
            assert_string_equal(r->key, key);
            assert_ptr_equal(client_get(&t, key, (uint64_t)i), r);
        }
    }
    assert_int_equal(client_count(&t), 100);
    client_table_free(&t);
    assert_int_equal(client_table_init(&t, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_table_lookup_and_lru),
        cmocka_unit_test(test_peek_changes_nothing),
        cmocka_unit_test(test_many_keys_stay_findable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
