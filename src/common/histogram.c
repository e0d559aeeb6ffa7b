/* histogram: fixed-bucket cumulative histograms. See histogram.h. */
#include "common/histogram.h"

#include <math.h>
#include <string.h>

const double HISTOGRAM_DURATION_BOUNDS[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600};
const size_t HISTOGRAM_DURATION_N = sizeof HISTOGRAM_DURATION_BOUNDS / sizeof HISTOGRAM_DURATION_BOUNDS[0];
const double HISTOGRAM_WAIT_BOUNDS[] = {0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
const size_t HISTOGRAM_WAIT_N = sizeof HISTOGRAM_WAIT_BOUNDS / sizeof HISTOGRAM_WAIT_BOUNDS[0];

int histogram_init(histogram_t *h, const double *bounds, size_t n)
{
    memset(h, 0, sizeof *h);
    if (n > HISTOGRAM_MAX_BOUNDS || (n > 0 && !bounds))
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return -1;
    }
    if (n)
        memcpy(h->bounds, bounds, n * sizeof *bounds);
    h->n_bounds = n;
    return 0;
}

void histogram_observe(histogram_t *h, double value)
{
    if (isnan(value))
        return;
    if (value < 0)
        value = 0;
    /* the first bound >= value; n_bounds (the +Inf bucket) when none is */
    size_t lo = 0, hi = h->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->bounds[mid] >= value)
            hi = mid;
        else
            lo = mid + 1;
    }
    h->counts[lo]++;
    h->count++;
    h->sum += value;
}

uint64_t histogram_cumulative(const histogram_t *h, size_t i)
{
    if (i >= h->n_bounds)
        return h->count;
    uint64_t total = 0;
    for (size_t k = 0; k <= i; k++)
        total += h->counts[k];
    return total;
}
