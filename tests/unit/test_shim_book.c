/* Unit tests for the CUDA shim's bookkeeping (shim/shim_book.c, compiled in here: the shim is
 * its own library, not part of libvramd.a): add and take give back exactly what was booked,
 * pointers and handles are apart, a key is there once, a full table refuses without losing
 * the books, tombstones are compacted, and the invariants hold through a long random run. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>

#include "../../shim/shim_book.c"

static shim_book_t g_book;

static void test_add_take(void **state)
{
    (void)state;
    shim_book_t *b = &g_book;
    shim_book_init(b);
    assert_true(shim_book_add(b, SHIM_KIND_PTR, 0x7f0000000000ull, 1 << 20));
    assert_true(shim_book_add(b, SHIM_KIND_HANDLE, 0x7f0000000000ull, 2 << 20)); /* same value, a handle */
    assert_false(shim_book_add(b, SHIM_KIND_PTR, 0x7f0000000000ull, 5));          /* there already */
    assert_int_equal(b->bytes, 3 << 20);
    uint64_t n = 0;
    assert_true(shim_book_take(b, SHIM_KIND_PTR, 0x7f0000000000ull, &n));
    assert_int_equal(n, 1 << 20);
    assert_false(shim_book_take(b, SHIM_KIND_PTR, 0x7f0000000000ull, &n)); /* a second free: unknown */
    assert_false(shim_book_take(b, SHIM_KIND_PTR, 0x1234, &n));             /* never booked */
    assert_true(shim_book_take(b, SHIM_KIND_HANDLE, 0x7f0000000000ull, &n));
    assert_int_equal(n, 2 << 20);
    assert_int_equal(b->bytes, 0);
    assert_int_equal(shim_book_check(b), 0);
}

static void test_full_table_refuses(void **state)
{
    (void)state;
    shim_book_t *b = &g_book;
    shim_book_init(b);
    uint64_t added = 0;
    for (uint64_t k = 1; k <= SHIM_BOOK_CAP; k++)
        if (shim_book_add(b, SHIM_KIND_PTR, k << 20, 1))
            added++;
    assert_int_equal(added, SHIM_BOOK_CAP * 3 / 4); /* bounded at three quarters */
    assert_int_equal(b->bytes, added);
    assert_false(shim_book_add(b, SHIM_KIND_PTR, 0xdead0000ull, 1));
    uint64_t n;
    for (uint64_t k = 1; k <= added; k++)
        assert_true(shim_book_take(b, SHIM_KIND_PTR, k << 20, &n));
    assert_int_equal(b->bytes, 0);
    assert_int_equal(shim_book_check(b), 0);
    /* the tombstones are compacted away as new entries come */
    for (uint64_t k = 1; k <= 1000; k++)
        assert_true(shim_book_add(b, SHIM_KIND_PTR, k << 21, 2));
    assert_true(b->dead <= SHIM_BOOK_CAP / 4);
    assert_int_equal(shim_book_check(b), 0);
}

static void test_random_run(void **state)
{
    (void)state;
    shim_book_t *b = &g_book;
    shim_book_init(b);
    static uint64_t keys[4096], sizes[4096];
    unsigned n = 0;
    uint64_t sum = 0, rng = 42;
    for (int step = 0; step < 200000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (n < 4096 && ((rng >> 33) % 3 != 0 || n == 0)) {
            uint64_t key = (rng >> 12) | 1, size = (rng >> 40) + 1;
            if (shim_book_add(b, SHIM_KIND_PTR, key, size)) {
                keys[n] = key;
                sizes[n++] = size;
                sum += size;
            }
        } else {
            unsigned i = (unsigned)((rng >> 20) % n);
            uint64_t got = 0;
            assert_true(shim_book_take(b, SHIM_KIND_PTR, keys[i], &got));
            assert_int_equal(got, sizes[i]);
            sum -= got;
            keys[i] = keys[--n];
            sizes[i] = sizes[n];
        }
        assert_int_equal(b->bytes, sum);
    }
    assert_int_equal(shim_book_check(b), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_take),
        cmocka_unit_test(test_full_table_refuses),
        cmocka_unit_test(test_random_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
