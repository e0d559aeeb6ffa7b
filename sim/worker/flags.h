/*
 * flags: simworker's command line, parsed into one immutable sw_flags_t.
 *
 * One simworker process describes one model server: how much GPU memory it takes at load
 * and per request, how long each takes, how those scale with request parameters, and how
 * it misbehaves (caching, leaks, unload residue, hangs, crashes, random failures, corrupt
 * outputs). The full table is in sw_flags_usage() and sim/worker/README.md.
 *
 * Every size is bytes, every duration is *simulated* milliseconds (the server applies
 * SIMGPU_TIMESCALE when it schedules). Every list has a fixed maximum (SW_MAX_*).
 * Return convention: sw_flags_parse returns 0 ok, 1 when --help was asked (usage printed),
 * -1 on a bad flag (err says which and why).
 */
#ifndef VRAMD_SIM_WORKER_FLAGS_H
#define VRAMD_SIM_WORKER_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SW_MAX_SCALE_RULES 8
#define SW_MAX_PATHS 8
#define SW_PARAM_NAME_MAX 64
#define SW_PATH_MAX 256

/* cost x (value / base) ^ exp, value read from request parameter `param`. */
typedef struct sw_scale_rule {
    char param[SW_PARAM_NAME_MAX];
    double base;
    double exp;
} sw_scale_rule_t;

enum sw_cache_mode { SW_CACHE_KEEP = 0, SW_CACHE_RELEASE = 1 };
enum sw_oom_style { SW_OOM_HTTP500 = 0, SW_OOM_JSON200 = 1 };
/* how an error inside a streamed chat answer is written: `event: error` + data (SSE's own),
 * a data event {"error": ...} (vLLM, SGLang, OpenAI), an `error: {...}` line (llama-server) */
enum sw_stream_error { SW_SERR_EVENT = 0, SW_SERR_DATA, SW_SERR_LLAMACPP };
enum sw_output_kind { SW_OUT_JSON = 0, SW_OUT_GLB, SW_OUT_PLY, SW_OUT_PNG };

typedef struct sw_flags {
    char host[64];
    int port;
    char name[128];
    char simgpu[128]; /* "" = $SIMGPU */

    uint64_t context;     /* CUDA-context-like overhead, allocated at start */
    uint64_t data_chunk;  /* --data-chunk: driver allocations at most this large, with data (0: off) */
    uint64_t resident;    /* model weights, allocated during load */
    uint64_t load_ms;     /* simulated */
    uint64_t unload_ms;   /* simulated time /unload_models/ takes */
    uint64_t per_request; /* extra bytes at the peak of one request (factor 1) */
    uint64_t run_ms;      /* one request alone, factor 1 */
    double run_jitter;    /* run time x uniform(1 - j, 1 + j) */
    double contention;    /* k requests at once each run 1 + (k - 1) * contention times slower */
    sw_scale_rule_t mem_scale[SW_MAX_SCALE_RULES];
    size_t n_mem_scale;
    sw_scale_rule_t time_scale[SW_MAX_SCALE_RULES];
    size_t n_time_scale;

    enum sw_cache_mode cache;
    uint64_t leak;           /* per successful request, never freed */
    uint64_t unload_residue; /* held after /unload_models/ */
    uint64_t sleep_ms;       /* simulated time /sleep takes (weights copied to host memory) */
    uint64_t wake_ms;        /* simulated time /wake_up takes (weights copied back) */
    uint64_t sleep_residue;  /* held after /sleep besides the context (vLLM leaves 1-7 GiB) */
    int64_t hang_after;      /* -1 = never; else request number hang_after + 1 hangs */
    int64_t crash_after;     /* -1 = never; else request number crash_after + 1 crashes */
    double fail_prob;
    uint64_t seed;
    enum sw_oom_style oom_style;
    unsigned stream_oom_at;          /* 0 = never; else chunk N of every stream is an OOM error event */
    enum sw_stream_error stream_error_style;

    enum sw_output_kind output;
    uint64_t output_size;   /* approximate output bytes at memory factor 1 */
    uint64_t corrupt_every; /* 0 = never */

    bool lock;
    bool cuda_proc_address;  /* driver entry points through cuGetProcAddress_v2 */
    double size_from_free;   /* 0 = off; else the share of cuMemGetInfo's total taken at start */
    char global_lock[SW_PATH_MAX];
    unsigned concurrency; /* requests run at once without --lock (others wait) */
    unsigned queue_max;   /* requests waiting inside the worker; beyond -> 503 */
    char paths[SW_MAX_PATHS][SW_PATH_MAX]; /* extra POST paths that act like /generate */
    size_t n_paths;

    uint64_t max_body;          /* request body bound */
    uint64_t keepalive_ms;      /* idle keep-alive connections closed after this (real ms) */
    int log_format;             /* enum log_format */
} sw_flags_t;

int sw_flags_parse(int argc, char **argv, sw_flags_t *f, char *err, size_t errlen);
void sw_flags_usage(FILE *out);
/* "resolution:1024:2" -> rule. 0 ok, -1 bad. */
int sw_scale_rule_parse(const char *spec, sw_scale_rule_t *out);

#endif
