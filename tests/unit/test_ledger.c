/* Unit tests for policy/ledger: capacity, reserve/release, foreign, claims, invariants. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy/ledger.h"

#define GiB (1024ULL * 1024 * 1024)
#define MiB (1024ULL * 1024)

static void test_capacity_and_fit(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 24 * GiB, 512 * MiB);
    assert_int_equal(l.n_gpus, 1);
    assert_int_equal(ledger_capacity(&l, 0), 24 * GiB - 512 * MiB);
    ledger_entry_t res, req1, req2;
    ledger_entry_init(&res);
    ledger_entry_init(&req1);
    ledger_entry_init(&req2);
    assert_int_equal(ledger_reserve(&l, 0, &res, LEDGER_RESIDENT, 6 * GiB, "trellis", &res), 0);
    assert_int_equal(ledger_reserve(&l, 0, &req1, LEDGER_REQUEST, 11 * GiB + 512 * MiB, "trellis", &req1), 0);
    /* a second 11.5 GiB request does not fit: 6 + 11.5 + 11.5 > 23.5 */
    assert_int_equal(ledger_reserve(&l, 0, &req2, LEDGER_REQUEST, 11 * GiB + 512 * MiB, "trellis", &req2), -1);
    assert_int_equal(req2.gpu, -1);
    assert_int_equal(ledger_free(&l, 0), 6 * GiB);
    ledger_release(&l, &req1);
    ledger_release(&l, &req1); /* harmless twice */
    assert_int_equal(ledger_reserve(&l, 0, &req2, LEDGER_REQUEST, 11 * GiB + 512 * MiB, "trellis", &req2), 0);
    ledger_release(&l, &req2);
    /* back to residents only */
    assert_int_equal(l.gpus[0].reserved, ledger_sum_kind(&l, 0, LEDGER_RESIDENT));
    assert_int_equal(l.gpus[0].reserved, 6 * GiB);
    char why[128];
    assert_int_equal(ledger_check(&l, why, sizeof why), 0);
}

static void test_foreign_shrinks_capacity(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 8 * GiB, 0);
    ledger_set_foreign(&l, 0, 3 * GiB);
    assert_int_equal(ledger_capacity(&l, 0), 5 * GiB);
    ledger_entry_t e;
    ledger_entry_init(&e);
    assert_int_equal(ledger_reserve(&l, 0, &e, LEDGER_REQUEST, 6 * GiB, "x", &e), -1);
    ledger_set_foreign(&l, 0, 20 * GiB); /* more than total: capacity 0, never negative */
    assert_int_equal(ledger_capacity(&l, 0), 0);
    assert_int_equal(ledger_free(&l, 0), 0);
}

static void test_claims_hold_memory_for_their_holder(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 10 * GiB, 0);
    int big, small;
    assert_int_equal(ledger_claim(&l, 0, 8 * GiB, &big), 0);
    assert_int_equal(ledger_claim(&l, 0, 1 * GiB, &small), -1); /* one claim per GPU */
    ledger_entry_t e;
    ledger_entry_init(&e);
    /* others see only 2 GiB */
    assert_false(ledger_fits(&l, 0, 3 * GiB, &small));
    assert_true(ledger_fits(&l, 0, 2 * GiB, &small));
    /* the claimant sees all of it */
    assert_true(ledger_fits(&l, 0, 8 * GiB, &big));
    assert_int_equal(ledger_reserve(&l, 0, &e, LEDGER_REQUEST, 8 * GiB, "big", &big), 0);
    ledger_unclaim(&l, &big);
    assert_int_equal(l.gpus[0].claimed, 0);
    assert_int_equal(ledger_free(&l, 0), 2 * GiB);
}

/* Work older than the claimant's oldest request may use claimed memory (FIFO), never
 * more than the capacity left. */
static void test_reserve_ahead_of_claim(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 10 * GiB, 0);
    int big, older;
    assert_int_equal(ledger_claim(&l, 0, 8 * GiB, &big), 0);
    ledger_entry_t a, b;
    ledger_entry_init(&a);
    ledger_entry_init(&b);
    assert_int_equal(ledger_reserve(&l, 0, &a, LEDGER_REQUEST, 3 * GiB, "older", &older), -1);
    assert_int_equal(ledger_reserve_ahead_of_claim(&l, 0, &a, LEDGER_REQUEST, 3 * GiB, "older", &older), 0);
    assert_int_equal(ledger_reserve_ahead_of_claim(&l, 0, &b, LEDGER_REQUEST, 8 * GiB, "older", &older), -1);
    assert_int_equal(ledger_reserve_ahead_of_claim(&l, 0, &b, LEDGER_REQUEST, 7 * GiB, "older", &older), 0);
    assert_int_equal(ledger_free_for(&l, 0, &big), 0);
    char why[200];
    assert_int_equal(ledger_check(&l, why, sizeof why), 0);
    ledger_release(&l, &a);
    ledger_release(&l, &b);
    ledger_unclaim(&l, &big);
    assert_int_equal(ledger_free(&l, 0), 10 * GiB);
}

static void test_resize_force_and_check(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 10 * GiB, 0);
    ledger_set_gpu(&l, 1, 1, 10 * GiB, 0);
    assert_int_equal(l.n_gpus, 2);
    ledger_entry_t a, b;
    ledger_entry_init(&a);
    ledger_entry_init(&b);
    assert_int_equal(ledger_reserve(&l, 1, &a, LEDGER_RESIDENT, 4 * GiB, "a", &a), 0);
    ledger_resize(&l, &a, 7 * GiB); /* measured more than declared */
    assert_int_equal(l.gpus[1].reserved, 7 * GiB);
    ledger_force(&l, 1, &b, LEDGER_RESIDENT, 5 * GiB, "b", &b); /* over capacity: reality */
    assert_int_equal(l.gpus[1].reserved, 12 * GiB);
    assert_int_equal(ledger_free(&l, 1), 0);
    char why[128];
    assert_int_equal(ledger_check(&l, why, sizeof why), 0);
    /* corrupt the book: check notices */
    l.gpus[1].reserved += 1;
    assert_int_equal(ledger_check(&l, why, sizeof why), -1);
    l.gpus[1].reserved -= 1;
    ledger_release(&l, &a);
    ledger_release(&l, &b);
    assert_int_equal(l.gpus[1].reserved, 0);
    assert_int_equal(l.gpus[0].reserved, 0);
}

static void test_bad_positions(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_entry_t e;
    ledger_entry_init(&e);
    assert_int_equal(ledger_reserve(&l, 0, &e, LEDGER_REQUEST, 1, "x", &e), -1);
    assert_int_equal(ledger_capacity(&l, 3), 0);
    assert_int_equal(ledger_claim(&l, 5, 1, &e), -1);
    ledger_release(&l, &e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity_and_fit),
        cmocka_unit_test(test_foreign_shrinks_capacity),
        cmocka_unit_test(test_claims_hold_memory_for_their_holder),
        cmocka_unit_test(test_reserve_ahead_of_claim),
        cmocka_unit_test(test_resize_force_and_check),
        cmocka_unit_test(test_bad_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
