/* Unit tests for common/histogram: bucket choice (le semantics), cumulative counts, sum and
 * count, bounds checking, the default bucket sets. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/histogram.h"

static void test_le_semantics_and_cumulative(void **state)
{
    (void)state;
    static const double b[] = {0.1, 1, 10};
    histogram_t h;
    assert_int_equal(histogram_init(&h, b, 3), 0);
    histogram_observe(&h, 0.05); /* <= 0.1 */
    histogram_observe(&h, 0.1);  /* exactly on a bound: counts in that bucket */
    histogram_observe(&h, 0.5);  /* <= 1 */
    histogram_observe(&h, 10);   /* <= 10 */
    histogram_observe(&h, 11);   /* +Inf only */
    histogram_observe(&h, 1e9);  /* +Inf only */
    assert_int_equal(h.counts[0], 2);
    assert_int_equal(h.counts[1], 1);
    assert_int_equal(h.counts[2], 1);
    assert_int_equal(h.counts[3], 2);
    assert_int_equal(histogram_cumulative(&h, 0), 2);
    assert_int_equal(histogram_cumulative(&h, 1), 3);
    assert_int_equal(histogram_cumulative(&h, 2), 4);
    assert_int_equal(histogram_cumulative(&h, 3), 6);
    assert_int_equal(histogram_cumulative(&h, 99), 6);
    assert_int_equal(h.count, 6);
    assert_true(fabs(h.sum - (0.05 + 0.1 + 0.5 + 10 + 11 + 1e9)) < 1e-3);
}

static void test_nan_ignored_negative_is_zero(void **state)
{
    (void)state;
    static const double b[] = {0.5, 2};
    histogram_t h;
    assert_int_equal(histogram_init(&h, b, 2), 0);
    histogram_observe(&h, NAN);
    assert_int_equal(h.count, 0);
    histogram_observe(&h, -3);
    assert_int_equal(h.count, 1);
    assert_int_equal(h.counts[0], 1);
    assert_true(h.sum == 0.0);
}

static void test_bad_bounds_refused(void **state)
{
    (void)state;
    histogram_t h;
    static const double not_increasing[] = {1, 1, 2};
    assert_int_equal(histogram_init(&h, not_increasing, 3), -1);
    static const double decreasing[] = {2, 1};
    assert_int_equal(histogram_init(&h, decreasing, 2), -1);
    static const double inf[] = {1, INFINITY};
    assert_int_equal(histogram_init(&h, inf, 2), -1);
    double many[HISTOGRAM_MAX_BOUNDS + 1];
    for (size_t i = 0; i < HISTOGRAM_MAX_BOUNDS + 1; i++)
        many[i] = (double)i + 1;
    assert_int_equal(histogram_init(&h, many, HISTOGRAM_MAX_BOUNDS + 1), -1);
    assert_int_equal(h.n_bounds, 0);
    assert_int_equal(histogram_init(&h, many, HISTOGRAM_MAX_BOUNDS), 0);
    /* no bounds at all: everything is in +Inf */
    assert_int_equal(histogram_init(&h, NULL, 0), 0);
    histogram_observe(&h, 3);
    assert_int_equal(histogram_cumulative(&h, 0), 1);
}

static void test_every_bucket_reachable(void **state)
{
    (void)state;
    /* one observation just under each bound, one over the last: each bucket gets exactly one,
     * and the cumulative count at bucket i is i + 1 */
    const double *sets[2] = {HISTOGRAM_DURATION_BOUNDS, HISTOGRAM_WAIT_BOUNDS};
    size_t ns[2] = {HISTOGRAM_DURATION_N, HISTOGRAM_WAIT_N};
    for (int s = 0; s < 2; s++) {
        histogram_t h;
        assert_int_equal(histogram_init(&h, sets[s], ns[s]), 0);
        assert_true(ns[s] >= 10 && ns[s] <= HISTOGRAM_MAX_BOUNDS);
        for (size_t i = 0; i < ns[s]; i++)
            histogram_observe(&h, sets[s][i] * 0.999);
        histogram_observe(&h, sets[s][ns[s] - 1] * 2);
        for (size_t i = 0; i <= ns[s]; i++) {
            assert_int_equal(h.counts[i], 1);
            assert_int_equal(histogram_cumulative(&h, i), i + 1);
        }
    }
    /* seconds-long GPU work: the duration buckets reach at least 10 minutes */
    assert_true(HISTOGRAM_DURATION_BOUNDS[HISTOGRAM_DURATION_N - 1] >= 600);
    assert_true(HISTOGRAM_WAIT_BOUNDS[0] <= 0.01);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_le_semantics_and_cumulative),
        cmocka_unit_test(test_nan_ignored_negative_is_zero),
        cmocka_unit_test(test_bad_bounds_refused),
        cmocka_unit_test(test_every_bucket_reachable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
