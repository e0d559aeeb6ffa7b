/*
 * histogram: a fixed-bucket histogram in Prometheus's sense (cumulative `le` buckets, a
 * sum and a count), for the latency metrics of obs/metrics.c.
 *
 * The bucket bounds are chosen once (histogram_init) and never change: a bounded number
 * (at most HISTOGRAM_MAX_BOUNDS) of finite upper bounds in strictly increasing order, plus
 * the implicit +Inf bucket. Each observation lands in the first bucket whose bound is >= the
 * value (Prometheus's `le`, "less than or equal"), found by binary search.
 *
 * Invariants: count == the sum of every bucket's own count (the +Inf one included);
 * histogram_cumulative(h, n_bounds) == count; cumulative counts never decrease with the
 * bucket index. NaN observations are ignored; negative ones are recorded as 0 (durations
 * measured on a monotonic clock are never negative; this only guards the sum).
 * Pure: no allocation, no I/O, no global state.
 */
#ifndef VRAMD_COMMON_HISTOGRAM_H
#define VRAMD_COMMON_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#define HISTOGRAM_MAX_BOUNDS 24

typedef struct histogram {
    double bounds[HISTOGRAM_MAX_BOUNDS];     /* finite upper bounds, strictly increasing */
    size_t n_bounds;
    uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1]; /* per bucket, not cumulative; [n_bounds] = +Inf */
    double sum;
    uint64_t count;
} histogram_t;

/* Bounds for request durations (seconds-long GPU work: 50 ms .. 10 min). */
extern const double HISTOGRAM_DURATION_BOUNDS[];
extern const size_t HISTOGRAM_DURATION_N;
/* Bounds for queue waits (5 ms .. 5 min: most waits are short, the tail is long). */
extern const double HISTOGRAM_WAIT_BOUNDS[];
extern const size_t HISTOGRAM_WAIT_N;

/* Empty histogram with these bounds. -1 (h left empty with no bounds) when n is over
 * HISTOGRAM_MAX_BOUNDS or the bounds are not finite and strictly increasing. */
int histogram_init(histogram_t *h, const double *bounds, size_t n);
void histogram_observe(histogram_t *h, double value);
/* Observations <= bounds[i] (i < n_bounds), or all of them (i >= n_bounds: the +Inf bucket). */
uint64_t histogram_cumulative(const histogram_t *h, size_t i);

#endif
