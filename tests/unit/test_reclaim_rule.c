/* Unit tests for policy/reclaim_rule: a live process's verified reclaim (unload or sleep
 * hook, checkpoint) ends at the first reading that shows it down to what the process is
 * known to keep (its CUDA context), not after three still readings; what is kept is learned
 * from the start; a driver that releases late is still waited for; never settled while
 * more than half is held. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policy/reclaim_rule.h"

#define GiB (1024ULL * 1024 * 1024)
#define MiB (1024ULL * 1024)

/* bench/parking's 1 GiB sleep: 1.3 GiB booked, the 300 MiB context stays (22 %). */
static void test_down_to_the_context_ends_at_the_first_reading(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    uint64_t booked = GiB + 300 * MiB;
    bool by_keep = false;
    assert_true(reclaim_settled(&w, booked, 300 * MiB, 300 * MiB, &by_keep));
    assert_true(by_keep);
    /* a few MiB of noise above the context still counts as the context */
    reclaim_watch_init(&w);
    assert_true(reclaim_settled(&w, booked, 300 * MiB, 310 * MiB, NULL));
}

/* The same with nothing known: the old rule, three still readings (the guard). */
static void test_without_keep_it_waits_for_three_still_readings(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    uint64_t booked = GiB + 300 * MiB;
    bool by_keep = true;
    assert_false(reclaim_settled(&w, booked, 0, 300 * MiB, &by_keep));
    assert_false(by_keep);
    assert_false(reclaim_settled(&w, booked, 0, 300 * MiB, NULL));
    assert_false(reclaim_settled(&w, booked, 0, 300 * MiB, NULL));
    assert_true(reclaim_settled(&w, booked, 0, 300 * MiB, &by_keep));
    assert_false(by_keep);
}

/* A driver that releases late: a process known to keep 1.2 GiB (a large context and
 * workspace) of a 10 GiB booking; at 2 GiB the reading is not taken as the end; the usage
 * still falling resets the count; it ends at the first reading down to what it keeps. */
static void test_late_release_above_keep_is_waited_for(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    uint64_t booked = 10 * GiB, keep = GiB + 200 * MiB;
    assert_false(reclaim_settled(&w, booked, keep, 9 * GiB, NULL)); /* not half yet */
    assert_false(reclaim_settled(&w, booked, keep, 4 * GiB, NULL));
    assert_false(reclaim_settled(&w, booked, keep, 2 * GiB, NULL));
    assert_false(reclaim_settled(&w, booked, keep, GiB + 512 * MiB, NULL));
    bool by_keep = false;
    assert_true(reclaim_settled(&w, booked, keep, keep, &by_keep));
    assert_true(by_keep);
}

/* Residue above the context (vLLM keeps GiBs after a sleep): three still readings, as before. */
static void test_residue_above_keep_settles_when_still(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    uint64_t booked = 8 * GiB;
    for (int i = 0; i < 3; i++)
        assert_false(reclaim_settled(&w, booked, 300 * MiB, 3 * GiB, NULL));
    assert_true(reclaim_settled(&w, booked, 300 * MiB, 3 * GiB, NULL));
}

/* Never settled with more than half held, whatever is known to be kept (a keep measured
 * while the weights were already loading is no licence to stop waiting). */
static void test_never_with_more_than_half_held(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    uint64_t booked = 4 * GiB;
    for (int i = 0; i < 10; i++)
        assert_false(reclaim_settled(&w, booked, 3 * GiB, 3 * GiB, NULL));
    assert_true(reclaim_settled(&w, booked, 3 * GiB, 2 * GiB, NULL));
}

/* Little left: at once, with or without a keep. */
static void test_little_left_at_once(void **state)
{
    (void)state;
    reclaim_watch_t w;
    reclaim_watch_init(&w);
    assert_true(reclaim_settled(&w, 8 * GiB, 0, 300 * MiB, NULL));
    reclaim_watch_init(&w);
    assert_true(reclaim_settled(&w, 8 * GiB, 0, 0, NULL));
}

/* What a process keeps, from its start: the least nonzero reading. */
static void test_keep_from_start(void **state)
{
    (void)state;
    uint64_t keep = 0;
    keep = reclaim_keep_from_start(keep, 0); /* not on the GPU yet */
    assert_int_equal(keep, 0);
    keep = reclaim_keep_from_start(keep, 300 * MiB);
    keep = reclaim_keep_from_start(keep, 2 * GiB); /* loading */
    keep = reclaim_keep_from_start(keep, 0);
    assert_int_equal(keep, 300 * MiB);
    keep = reclaim_keep_from_start(keep, 250 * MiB);
    assert_int_equal(keep, 250 * MiB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_down_to_the_context_ends_at_the_first_reading),
        cmocka_unit_test(test_without_keep_it_waits_for_three_still_readings),
        cmocka_unit_test(test_late_release_above_keep_is_waited_for),
        cmocka_unit_test(test_residue_above_keep_settles_when_still),
        cmocka_unit_test(test_never_with_more_than_half_held),
        cmocka_unit_test(test_little_left_at_once),
        cmocka_unit_test(test_keep_from_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
