/* Unit tests for sched/placer: best fit, eviction order and choice, wait, never. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sched/placer.h"

#define GiB (1024ULL * 1024 * 1024)

static bool all[LEDGER_MAX_GPUS] = {true, true, true, true, true, true, true, true,
                                    true, true, true, true, true, true, true, true};

static void two_gpus(ledger_t *l, uint64_t t0, uint64_t t1)
{
    ledger_init(l);
    ledger_set_gpu(l, 0, 0, t0, 0);
    ledger_set_gpu(l, 1, 1, t1, 0);
}

static void test_best_fit_picks_smallest_hole(void **state)
{
    (void)state;
    ledger_t l;
    two_gpus(&l, 80 * GiB, 24 * GiB);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 10 * GiB, NULL, NULL, 0, &p), PLACER_FITS);
    assert_int_equal(p.gpu_pos, 1); /* 24 GiB card: the tighter fit keeps the 80 GiB hole */
    assert_int_equal(placer_choose(&l, all, 30 * GiB, NULL, NULL, 0, &p), PLACER_FITS);
    assert_int_equal(p.gpu_pos, 0);
}

static void test_never_when_bigger_than_any_gpu(void **state)
{
    (void)state;
    ledger_t l;
    two_gpus(&l, 24 * GiB, 24 * GiB);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 30 * GiB, NULL, NULL, 0, &p), PLACER_NEVER);
    bool only1[LEDGER_MAX_GPUS] = {false, true};
    ledger_set_gpu(&l, 0, 0, 80 * GiB, 0);
    assert_int_equal(placer_choose(&l, only1, 30 * GiB, NULL, NULL, 0, &p), PLACER_NEVER);
    assert_int_equal(placer_choose(&l, all, 30 * GiB, NULL, NULL, 0, &p), PLACER_FITS);
}

static void test_eviction_order_priority_then_lru_then_cost(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 24 * GiB, 0);
    ledger_entry_t e[4];
    int owners[4];
    placer_candidate_t c[4] = {
        {.instance = &owners[0], .gpu_pos = 0, .bytes = 6 * GiB, .priority = 5, .last_used_ms = 100, .reload_cost_ms = 10},
        {.instance = &owners[1], .gpu_pos = 0, .bytes = 6 * GiB, .priority = 2, .last_used_ms = 900, .reload_cost_ms = 10},
        {.instance = &owners[2], .gpu_pos = 0, .bytes = 6 * GiB, .priority = 5, .last_used_ms = 50, .reload_cost_ms = 99},
        {.instance = &owners[3], .gpu_pos = 0, .bytes = 6 * GiB, .priority = 5, .last_used_ms = 50, .reload_cost_ms = 1},
    };
    for (int i = 0; i < 4; i++) {
        ledger_entry_init(&e[i]);
        assert_int_equal(ledger_reserve(&l, 0, &e[i], LEDGER_RESIDENT, 6 * GiB, "m", &owners[i]), 0);
    }
    placer_plan_t p;
    /* need 12 GiB: two evictions; the low-priority one first, then among priority 5 the
     * least recently used, and of two equally old the cheaper to reload */
    assert_int_equal(placer_choose(&l, all, 12 * GiB, NULL, c, 4, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 2);
    assert_int_equal(p.evict[0], 1);
    assert_int_equal(p.evict[1], 3);
    /* need 18 GiB: three */
    assert_int_equal(placer_choose(&l, all, 18 * GiB, NULL, c, 4, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 3);
    assert_int_equal(p.evict[2], 2);
}

static void test_wait_when_busy_memory_blocks(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 24 * GiB, 0);
    ledger_entry_t running;
    ledger_entry_init(&running);
    assert_int_equal(ledger_reserve(&l, 0, &running, LEDGER_REQUEST, 20 * GiB, "busy", &running), 0);
    placer_plan_t p;
    /* nothing evictable: a running request holds the memory */
    assert_int_equal(placer_choose(&l, all, 10 * GiB, NULL, NULL, 0, &p), PLACER_WAIT);
}

static void test_prefers_gpu_with_cheaper_plan(void **state)
{
    (void)state;
    ledger_t l;
    two_gpus(&l, 24 * GiB, 24 * GiB);
    ledger_entry_t e[3];
    int o[3];
    placer_candidate_t c[3] = {
        {.instance = &o[0], .gpu_pos = 0, .bytes = 20 * GiB, .priority = 8, .last_used_ms = 1},
        {.instance = &o[1], .gpu_pos = 1, .bytes = 10 * GiB, .priority = 3, .last_used_ms = 5},
        {.instance = &o[2], .gpu_pos = 1, .bytes = 10 * GiB, .priority = 3, .last_used_ms = 6},
    };
    for (int i = 0; i < 3; i++) {
        ledger_entry_init(&e[i]);
        ledger_force(&l, c[i].gpu_pos, &e[i], LEDGER_RESIDENT, c[i].bytes, "m", &o[i]);
    }
    placer_plan_t p;
    /* 16 GiB: GPU 0 needs the priority-8 model out; GPU 1 two priority-3 ones: lower
     * highest-priority wins over fewer evictions */
    assert_int_equal(placer_choose(&l, all, 16 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.gpu_pos, 1);
    assert_int_equal(p.n_evict, 2);
}

static void test_claim_of_another_blocks_fit(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l);
    ledger_set_gpu(&l, 0, 0, 24 * GiB, 0);
    int big, small;
    assert_int_equal(ledger_claim(&l, 0, 20 * GiB, &big), 0);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 10 * GiB, &small, NULL, 0, &p), PLACER_WAIT);
    assert_int_equal(placer_choose(&l, all, 10 * GiB, &big, NULL, 0, &p), PLACER_FITS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_fit_picks_smallest_hole),
        cmocka_unit_test(test_never_when_bigger_than_any_gpu),
        cmocka_unit_test(test_eviction_order_priority_then_lru_then_cost),
        cmocka_unit_test(test_wait_when_busy_memory_blocks),
        cmocka_unit_test(test_prefers_gpu_with_cheaper_plan),
        cmocka_unit_test(test_claim_of_another_blocks_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
