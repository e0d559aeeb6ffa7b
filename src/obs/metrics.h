/*
 * metrics: GET /metrics, what vramd is doing in Prometheus's text exposition format 0.0.4.
 *
 * A pure reader of the daemon's state (like obs/status.c): GPU figures from the scheduler
 * (the same numbers /v1/status shows), per-model counters and histograms kept on model_t
 * (workers/supervisor.h), daemon-wide gauges from core_t, job counts from the journal.
 * The families, their labels and label values are listed in docs/metrics.md.
 *
 * Invariants of the output: every family has one # HELP and one # TYPE line, written once,
 * before its samples, and its samples are contiguous; counters end in _total; histograms
 * have cumulative _bucket{le=...} series ending with le="+Inf" (== _count), then _sum and
 * _count; label values are escaped (\\, \", \n); the set of label values is bounded (GPUs,
 * configured models, fixed reason/state/level lists, at most MODEL_OUTCOMES_MAX outcomes
 * per model), so the output is bounded too (METRICS_MAX_BYTES).
 */
#ifndef VRAMD_OBS_METRICS_H
#define VRAMD_OBS_METRICS_H

#include <stddef.h>

#include "core/types.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_MAX_BYTES (32u * 1024 * 1024)

/* The whole exposition, malloc'ed (the caller frees it), its length in *len; NULL when out
 * of memory or over METRICS_MAX_BYTES. The cost of scrapes is bounded: the last exposition
 * is kept and served again (a copy) while it is younger than the smaller of
 * limits.metrics_cache and 10 x the time building it took, so many scrapers of a large
 * config cannot hold the loop (docs/config.md metrics_cache); with a small config (a build
 * of a few hundred microseconds) a scrape is fresh within milliseconds. Loop thread only. */
char *metrics_render(core_t *d, size_t *len);
/* Drop the kept exposition (at shutdown). */
void metrics_forget(void);

#endif
