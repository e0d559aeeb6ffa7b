/* Unit tests for policy/queue: priority then arrival, limits, removal, aging. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy/queue.h"

static void test_priority_then_arrival(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 10, 0);
    queue_entry_t e[5];
    int prio[5] = {5, 9, 5, 0, 9};
    for (int i = 0; i < 5; i++) {
        queue_entry_init(&e[i]);
        assert_int_equal(queue_push(&q, &e[i], prio[i], 100 + (uint64_t)i), 0);
    }
    assert_int_equal(q.depth, 5);
    /* 9s in arrival order, then 5s, then 0 */
    queue_entry_t *want[5] = {&e[1], &e[4], &e[0], &e[2], &e[3]};
    for (int i = 0; i < 5; i++)
        assert_ptr_equal(queue_pop(&q, 200), want[i]);
    assert_null(queue_pop(&q, 200));
    assert_int_equal(q.depth, 0);
}

static void test_limit_and_double_push(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 2, 0);
    queue_entry_t a, b, c;
    queue_entry_init(&a);
    queue_entry_init(&b);
    queue_entry_init(&c);
    assert_int_equal(queue_push(&q, &a, 1, 0), 0);
    assert_int_equal(queue_push(&q, &a, 1, 0), -1); /* already queued */
    assert_int_equal(queue_push(&q, &b, 1, 0), 0);
    assert_int_equal(queue_push(&q, &c, 1, 0), -1); /* full */
    assert_false(queue_contains(&c));
    assert_int_equal(q.depth, 2);
}

static void test_remove_middle_and_oldest(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 10, 0);
    queue_entry_t a, b, c;
    queue_entry_init(&a);
    queue_entry_init(&b);
    queue_entry_init(&c);
    queue_push(&q, &a, 3, 10);
    queue_push(&q, &b, 7, 20);
    queue_push(&q, &c, 3, 30);
    assert_int_equal(queue_oldest_ms(&q), 10);
    queue_remove(&q, &a);
    queue_remove(&q, &a); /* harmless twice */
    assert_int_equal(q.depth, 2);
    assert_int_equal(queue_oldest_ms(&q), 20);
    size_t depths[QUEUE_PRIORITIES];
    queue_depths(&q, depths);
    assert_int_equal(depths[3], 1);
    assert_int_equal(depths[7], 1);
    assert_ptr_equal(queue_pop(&q, 40), &b);
    assert_ptr_equal(queue_pop(&q, 40), &c);
    assert_int_equal(queue_oldest_ms(&q), 0);
}

static void test_aging_lets_old_low_priority_through(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 10, 1000); /* one priority level per second waited */
    queue_entry_t old_low, new_high;
    queue_entry_init(&old_low);
    queue_entry_init(&new_high);
    queue_push(&q, &old_low, 0, 0);
    queue_push(&q, &new_high, 9, 9500);
    /* at t=9.5s the old one has aged to 9: tie, the higher base priority wins */
    assert_ptr_equal(queue_peek(&q, 9500), &new_high);
    /* at t=10.4s it has aged to 10, the newer one only to 9 (both age) */
    assert_ptr_equal(queue_peek(&q, 10400), &old_low);
}

static void test_out_of_range_priority_clamped(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 10, 0);
    queue_entry_t a, b;
    queue_entry_init(&a);
    queue_entry_init(&b);
    queue_push(&q, &a, -4, 0);
    queue_push(&q, &b, 42, 1);
    assert_int_equal(a.priority, 0);
    assert_int_equal(b.priority, 9);
    assert_ptr_equal(queue_pop(&q, 2), &b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_then_arrival),
        cmocka_unit_test(test_limit_and_double_push),
        cmocka_unit_test(test_remove_middle_and_oldest),
        cmocka_unit_test(test_aging_lets_old_low_priority_through),
        cmocka_unit_test(test_out_of_range_priority_clamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
