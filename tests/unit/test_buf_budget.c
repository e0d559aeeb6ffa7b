/* Unit tests for common/buf's budgets: capacity charged on growth, refusal past the limit
 * (the buffer fails as over budget), exact reservations, and the bytes given back by free,
 * failure, steal and adopt; a buffer with no budget is unchanged. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/buf.h"

static void test_charged_and_released(void **state)
{
    (void)state;
    buf_budget_t bb = {.limit = 10000};
    buf_t a, b;
    buf_init(&a, 100000);
    buf_init(&b, 100000);
    buf_set_budget(&a, &bb);
    buf_set_budget(&b, &bb);
    assert_int_equal(buf_append(&a, "hello", 5), 0);
    assert_int_equal(bb.used, a.cap);
    assert_int_equal(buf_reserve_exact(&b, 3000), 0);
    assert_int_equal(b.cap, 3001);
    assert_int_equal(bb.used, a.cap + b.cap);
    buf_free(&a);
    assert_int_equal(bb.used, 3001);
    size_t len;
    char *p = buf_steal(&b, &len);
    assert_int_equal(bb.used, 0);
    buf_adopt(&b, p, len, 3001);
    assert_int_equal(bb.used, 3001);
    assert_true(bb.peak >= 3001);
    buf_free(&b);
    assert_int_equal(bb.used, 0);
    assert_int_equal(bb.refused, 0);
}

static void test_refused_past_the_limit(void **state)
{
    (void)state;
    buf_budget_t bb = {.limit = 4096};
    buf_t a, b;
    buf_init(&a, 1 << 20);
    buf_init(&b, 1 << 20);
    buf_set_budget(&a, &bb);
    buf_set_budget(&b, &bb);
    assert_int_equal(buf_reserve_exact(&a, 3000), 0);
    assert_int_equal(buf_reserve_exact(&b, 2000), -1);
    assert_true(buf_over_budget(&b));
    assert_int_equal(bb.refused, 1);
    assert_int_equal(bb.used, 3001);
    buf_reset(&b);
    assert_false(buf_over_budget(&b));
    assert_int_equal(buf_append(&b, "x", 1), 0); /* 256 bytes: fits */
    /* growing a by doubling past the limit fails it and gives its bytes back */
    char chunk[1000] = {0};
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        rc = buf_append(&a, chunk, sizeof chunk);
    assert_int_equal(rc, -1);
    assert_true(buf_over_budget(&a));
    assert_int_equal(bb.used, b.cap);
    buf_free(&a);
    buf_free(&b);
    assert_int_equal(bb.used, 0);
    assert_true(bb.peak <= bb.limit);
}

static void test_no_budget_and_max(void **state)
{
    (void)state;
    buf_t a;
    buf_init(&a, 10);
    assert_int_equal(buf_append(&a, "0123456789", 10), 0);
    assert_int_equal(buf_append(&a, "x", 1), -1);
    assert_true(buf_failed(&a));
    assert_false(buf_over_budget(&a)); /* over max, not over a budget */
    buf_free(&a);
    assert_int_equal(buf_budget_fits(NULL, 1u << 30), 1);
    buf_budget_t unlimited = {0};
    assert_int_equal(buf_budget_fits(&unlimited, 1u << 30), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_charged_and_released),
        cmocka_unit_test(test_refused_past_the_limit),
        cmocka_unit_test(test_no_budget_and_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
