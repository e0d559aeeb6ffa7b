/* Unit tests for policy/placer: best fit; the eviction set (priority first, then the least
 * expected delay, then the fewest bytes), exact and greedy; the GPU choice; wait; never. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "policy/placer.h"

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

/* A GPU of 24 GiB whose memory is all held by the candidates' resident entries. */
static void fill(ledger_t *l, ledger_entry_t *e, int *owners, placer_candidate_t *c, size_t n)
{
    ledger_init(l);
    ledger_set_gpu(l, 0, 0, 24 * GiB, 0);
    for (size_t i = 0; i < n; i++) {
        c[i].instance = &owners[i];
        ledger_entry_init(&e[i]);
        ledger_force(l, c[i].gpu_pos, &e[i], LEDGER_RESIDENT, c[i].bytes, "m", &owners[i]);
    }
}

static void test_expected_delay(void **state)
{
    (void)state;
    placer_candidate_t c = {.return_cost_ms = 40000, .gap_ms = 0, .keep_alive_left_ms = 600000};
    assert_true(placer_expected_delay_ms(&c) == 0.0); /* never asked for */
    c.gap_ms = 60000;                                  /* one a minute, 10 minutes of keep-alive left */
    assert_true(placer_expected_delay_ms(&c) > 39990 && placer_expected_delay_ms(&c) < 40000);
    c.keep_alive_left_ms = 0; /* would be freed now anyway */
    assert_true(placer_expected_delay_ms(&c) == 0.0);
    c.queued = 2; /* two waiting: both pay the whole return */
    assert_true(placer_expected_delay_ms(&c) == 80000.0);
    c.return_cost_ms = 0; /* never timed: the default */
    c.queued = 1;
    assert_true(placer_expected_delay_ms(&c) == (double)PLACER_UNKNOWN_RETURN_MS);
    c.return_cost_ms = 4000;
    c.way_out_ms = 21000; /* a park's copy out: the waiting request pays it whatever comes next */
    assert_true(placer_expected_delay_ms(&c) == 25000.0);
    c.queued = 0;
    c.keep_alive_left_ms = 0;
    assert_true(placer_expected_delay_ms(&c) == 21000.0);
}

/* Two victims that would come back equally fast: the one whose memory leaves at once (a
 * stop) goes before the one a slow park would make the waiting request wait for. */
static void test_way_out_counts(void **state)
{
    (void)state;
    ledger_t l;
    ledger_entry_t e[2];
    int o[2];
    placer_candidate_t c[2] = {
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 10, .return_cost_ms = 10000, .way_out_ms = 20000, .gap_ms = 60000, .keep_alive_left_ms = 600000},
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 90, .return_cost_ms = 10000, .way_out_ms = 0, .gap_ms = 60000, .keep_alive_left_ms = 600000},
    };
    fill(&l, e, o, c, 2);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 12 * GiB, NULL, c, 2, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 1);
    assert_int_equal(p.evict[0], 1); /* LRU alone would take 0 */
}

static void test_priority_before_cost(void **state)
{
    (void)state;
    ledger_t l;
    ledger_entry_t e[3];
    int o[3];
    /* the low-priority model is busy and slow to reload, the others idle for long: it still goes
     * first, as long as it frees enough */
    placer_candidate_t c[3] = {
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 2, .return_cost_ms = 90000, .gap_ms = 1000, .keep_alive_left_ms = 600000},
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .return_cost_ms = 1000, .gap_ms = 0, .keep_alive_left_ms = 600000},
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .return_cost_ms = 1000, .gap_ms = 0, .keep_alive_left_ms = 600000},
    };
    fill(&l, e, o, c, 3);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 8 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 1);
    assert_int_equal(p.evict[0], 0);
    /* 16 GiB: priority 2 alone is not enough, so a priority-5 model must go; below that cap
     * the expected delay decides: the two idle priority-5 models cost nothing, the busy one
     * 90 s, so they go and it stays */
    assert_int_equal(placer_choose(&l, all, 16 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 2);
    assert_true((p.evict[0] == 1 && p.evict[1] == 2) || (p.evict[0] == 2 && p.evict[1] == 1));
}

static void test_least_expected_delay_wins(void **state)
{
    (void)state;
    ledger_t l;
    ledger_entry_t e[3];
    int o[3];
    placer_candidate_t c[3] = {
        /* used every 2 s, 40 s to reload */
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 10, .return_cost_ms = 40000, .gap_ms = 2000, .keep_alive_left_ms = 600000},
        /* used once an hour: its keep-alive will likely run out first */
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 90, .return_cost_ms = 40000, .gap_ms = 3600000, .keep_alive_left_ms = 600000},
        /* busy, but back in 100 ms (a parked tier) */
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 50, .return_cost_ms = 100, .gap_ms = 2000, .keep_alive_left_ms = 600000},
    };
    fill(&l, e, o, c, 3);
    placer_plan_t p;
    /* LRU would take 0 (used longest ago); the cheapest wait is 2 (100 ms), then 1 */
    assert_int_equal(placer_choose(&l, all, 8 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 1);
    assert_int_equal(p.evict[0], 2);
    assert_int_equal(placer_choose(&l, all, 16 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 2);
    assert_true((p.evict[0] == 1 && p.evict[1] == 2) || (p.evict[0] == 2 && p.evict[1] == 1));
}

static void test_frees_only_what_is_needed(void **state)
{
    (void)state;
    ledger_t l;
    ledger_entry_t e[3];
    int o[3];
    /* the old rule took the least recently used first (4 GiB) and then still needed the
     * 12 GiB one: two evictions where one was enough */
    placer_candidate_t c[3] = {
        {.gpu_pos = 0, .bytes = 4 * GiB, .priority = 5, .last_used_ms = 1, .return_cost_ms = 20000, .gap_ms = 600000, .keep_alive_left_ms = 300000},
        {.gpu_pos = 0, .bytes = 12 * GiB, .priority = 5, .last_used_ms = 9, .return_cost_ms = 20000, .gap_ms = 600000, .keep_alive_left_ms = 300000},
        {.gpu_pos = 0, .bytes = 8 * GiB, .priority = 5, .last_used_ms = 5, .return_cost_ms = 20000, .gap_ms = 0, .keep_alive_left_ms = 300000},
    };
    fill(&l, e, o, c, 3);
    placer_plan_t p;
    assert_int_equal(placer_choose(&l, all, 10 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 1);
    assert_int_equal(p.evict[0], 1);
    /* equal cost (none was ever asked for): the fewest bytes that suffice */
    c[0].gap_ms = c[1].gap_ms = 0;
    assert_int_equal(placer_choose(&l, all, 6 * GiB, NULL, c, 3, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 1);
    assert_int_equal(p.evict[0], 2);
}

static void test_many_candidates_greedy(void **state)
{
    (void)state;
    enum { N = 20 };
    ledger_t l;
    ledger_entry_t e[N];
    int o[N];
    placer_candidate_t c[N];
    memset(c, 0, sizeof c);
    for (int i = 0; i < N; i++) {
        c[i].gpu_pos = 0;
        c[i].bytes = GiB;
        c[i].priority = 5;
        c[i].return_cost_ms = 1000 * (uint64_t)(N - i); /* later ones are cheaper */
        c[i].gap_ms = 1000;
        c[i].keep_alive_left_ms = 600000;
        c[i].last_used_ms = (uint64_t)i;
    }
    c[3].bytes = 4 * GiB; /* one bigger and dearer per byte: not needed */
    c[3].return_cost_ms = 100000;
    fill(&l, e, o, c, N);
    placer_plan_t p;
    /* 23 GiB held: 1 free, 5 missing */
    assert_int_equal(placer_choose(&l, all, 6 * GiB, NULL, c, N, &p), PLACER_EVICT);
    assert_int_equal(p.n_evict, 5);
    for (size_t k = 0; k < p.n_evict; k++)
        assert_true(p.evict[k] >= N - 5); /* the five cheapest */
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
        cmocka_unit_test(test_expected_delay),
        cmocka_unit_test(test_way_out_counts),
        cmocka_unit_test(test_priority_before_cost),
        cmocka_unit_test(test_least_expected_delay_wins),
        cmocka_unit_test(test_frees_only_what_is_needed),
        cmocka_unit_test(test_many_candidates_greedy),
        cmocka_unit_test(test_wait_when_busy_memory_blocks),
        cmocka_unit_test(test_prefers_gpu_with_cheaper_plan),
        cmocka_unit_test(test_claim_of_another_blocks_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
