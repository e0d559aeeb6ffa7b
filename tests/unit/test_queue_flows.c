/* Unit tests for policy/queue's fair order between flows (clients): round-robin between the
 * flows of one priority, arrival order within a flow, removal keeping or passing the turn,
 * retries joining their flow by arrival, the peek filter, and priorities above flows. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy/queue.h"

#define N 12

static void push(queue_t *q, queue_entry_t *e, queue_flow_t *f, int prio, uint64_t t)
{
    queue_entry_init(e);
    e->flow = f;
    assert_int_equal(queue_push(q, e, prio, t), 0);
}

static void test_round_robin_between_flows(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa, fb;
    queue_flow_init(&fa);
    queue_flow_init(&fb);
    queue_entry_t a[N], b[3];
    for (int i = 0; i < N; i++)
        push(&q, &a[i], &fa, 5, (uint64_t)i);
    for (int i = 0; i < 3; i++)
        push(&q, &b[i], &fb, 5, 100 + (uint64_t)i);
    /* a0 b0 a1 b1 a2 b2 a3 a4 ... */
    queue_entry_t *want[] = {&a[0], &b[0], &a[1], &b[1], &a[2], &b[2], &a[3], &a[4]};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_ptr_equal(queue_pop(&q, 1000), want[i]);
    assert_int_equal(q.depth, N - 5);
    assert_true(queue_flow_idle(&fb));
    assert_false(queue_flow_idle(&fa));
    while (queue_pop(&q, 1000))
        ;
    assert_true(queue_flow_idle(&fa));
    assert_int_equal(q.depth, 0);
}

static void test_no_flow_is_fifo(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa;
    queue_flow_init(&fa);
    queue_entry_t a[3], x[2];
    push(&q, &a[0], &fa, 5, 0);
    push(&q, &x[0], NULL, 5, 1);
    push(&q, &a[1], &fa, 5, 2);
    push(&q, &x[1], NULL, 5, 3);
    push(&q, &a[2], &fa, 5, 4);
    /* heads: a0 x0 x1; a's followers wait behind a0 and go to the back when it is served */
    queue_entry_t *want[] = {&a[0], &x[0], &x[1], &a[1], &a[2]};
    for (size_t i = 0; i < 5; i++)
        assert_ptr_equal(queue_pop(&q, 10), want[i]);
}

static void test_remove_keeps_turn(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa, fb;
    queue_flow_init(&fa);
    queue_flow_init(&fb);
    queue_entry_t a[3], b[2];
    push(&q, &b[0], &fb, 5, 0);
    push(&q, &a[0], &fa, 5, 1);
    push(&q, &a[1], &fa, 5, 2);
    push(&q, &a[2], &fa, 5, 3);
    push(&q, &b[1], &fb, 5, 4);
    queue_remove(&q, &a[0]); /* cancelled: a1 takes its place (before b's next turn) */
    queue_remove(&q, &a[2]); /* a follower: just gone */
    assert_int_equal(q.depth, 3);
    queue_entry_t *want[] = {&b[0], &a[1], &b[1]};
    for (size_t i = 0; i < 3; i++)
        assert_ptr_equal(queue_pop(&q, 10), want[i]);
    assert_true(queue_flow_idle(&fa) && queue_flow_idle(&fb));
    queue_remove(&q, &a[0]); /* harmless twice */
    assert_int_equal(q.depth, 0);
}

static void test_retry_joins_flow_by_arrival(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa;
    queue_flow_init(&fa);
    queue_entry_t a[3];
    push(&q, &a[0], &fa, 5, 10);
    push(&q, &a[1], &fa, 5, 20);
    push(&q, &a[2], &fa, 5, 30);
    assert_ptr_equal(queue_pop(&q, 100), &a[0]);
    assert_ptr_equal(queue_pop(&q, 100), &a[1]);
    queue_push_again(&q, &a[0], 5, 10); /* older than the head a2: becomes the head */
    queue_push_again(&q, &a[1], 5, 20); /* between a0 and a2 */
    assert_int_equal(q.depth, 3);
    assert_int_equal(queue_oldest_ms(&q), 10);
    assert_ptr_equal(queue_pop(&q, 100), &a[0]);
    assert_ptr_equal(queue_pop(&q, 100), &a[1]);
    assert_ptr_equal(queue_pop(&q, 100), &a[2]);
    assert_true(queue_flow_idle(&fa));
}

static bool not_flow(const queue_entry_t *e, void *ctx) { return e->flow != ctx; }

static void test_filter_skips_a_flow(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa, fb;
    queue_flow_init(&fa);
    queue_flow_init(&fb);
    queue_entry_t a[2], b[1], hi;
    push(&q, &a[0], &fa, 5, 0);
    push(&q, &a[1], &fa, 5, 1);
    push(&q, &b[0], &fb, 5, 2);
    push(&q, &hi, &fa, 8, 3);
    /* fa is at its cap: its priority-8 head and its priority-5 head are both skipped */
    assert_ptr_equal(queue_peek_if(&q, 10, not_flow, &fa), &b[0]);
    assert_ptr_equal(queue_peek_if(&q, 10, not_flow, &fb), &hi);
    queue_take(&q, &b[0]);
    assert_null(queue_peek_if(&q, 10, not_flow, &fa));
    assert_ptr_equal(queue_peek(&q, 10), &hi);
}

static void test_priorities_above_flows(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, 100, 0);
    queue_flow_t fa, fb;
    queue_flow_init(&fa);
    queue_flow_init(&fb);
    queue_entry_t a[2], b[2];
    push(&q, &a[0], &fa, 2, 0);
    push(&q, &a[1], &fa, 9, 1);
    push(&q, &b[0], &fb, 9, 2);
    push(&q, &b[1], &fb, 2, 3);
    /* one flow has a head per priority */
    queue_entry_t *want[] = {&a[1], &b[0], &a[0], &b[1]};
    for (size_t i = 0; i < 4; i++)
        assert_ptr_equal(queue_pop(&q, 10), want[i]);
    assert_true(queue_flow_idle(&fa) && queue_flow_idle(&fb));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_robin_between_flows),
        cmocka_unit_test(test_no_flow_is_fifo),
        cmocka_unit_test(test_remove_keeps_turn),
        cmocka_unit_test(test_retry_joins_flow_by_arrival),
        cmocka_unit_test(test_filter_skips_a_flow),
        cmocka_unit_test(test_priorities_above_flows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
