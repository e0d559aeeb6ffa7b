/*
 * worker: the state of one simulated model server, shared by its parts.
 *
 *   model.c   the model's life: LOADING -> READY -> UNLOADING -> UNLOADED -> LOADING ...
 *             (start-up load, /unload_models/, /reload_models/), with memory taken and
 *             given back in steps the way a real load/unload does.
 *   jobs.c    requests that run on the GPU (/generate, chat completions): waiting line,
 *             --lock / --global-lock / --concurrency, per-request memory ramp, simulated
 *             progress shared between concurrent requests, OOM / failure / hang / crash,
 *             outputs and SSE streams.
 *   routes.c  the HTTP endpoints, dispatching to the two above.
 *   gate.c    the simulated CUDA lock: GPU work held while the process is locked or
 *             checkpointed (gate.h), /health answering all along.
 *   respond.c JSON answers and escaping, below all of the above (they call down only:
 *             routes -> gate, model, jobs; gate -> model, jobs; model -> jobs).
 *
 * Model states: LOADING (health 503 {"status":"loading"}), READY (200 ok), UNLOADING and
 * UNLOADED (200 {"status":"unloading"|"unloaded"}; generation answers 503 "models unloaded").
 * /sleep and /wake_up (vLLM sleep mode) are an unload and a load with their own times and
 * residue (w->asleep between them).
 * Invariant: at most one admin operation (load / unload) is in progress (w->admin_req holds
 * the HTTP request it must answer, NULL for the start-up load).
 *
 * Time: every duration in flags is simulated; real ms = simulated ms x w->timescale.
 */
#ifndef VRAMD_SIM_WORKER_WORKER_H
#define VRAMD_SIM_WORKER_WORKER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/list.h"
#include "flags.h"
#include "gate.h"
#include "glock.h"
#include "gpumem.h"
#include "httpd.h"

enum sw_model_state { SW_LOADING = 0, SW_READY, SW_UNLOADING, SW_UNLOADED };

typedef struct sw_worker {
    uv_loop_t *loop;
    sw_flags_t f;
    sw_gpumem_t mem;
    sw_httpd_t *httpd;
    int port;
    double timescale;
    uint64_t rng; /* xorshift state, from --seed */

    /* model.c */
    enum sw_model_state state;
    uv_timer_t model_timer;
    int load_step;          /* 0..SW_LOAD_STEPS while loading */
    uint64_t load_from;     /* resident bytes when this load began */
    double admin_started;   /* real ms (hrtime) when the admin operation began */
    uint64_t admin_mem_before;
    sw_http_req_t *admin_req; /* the reload/unload request to answer; NULL at start-up */
    uint64_t loads, unloads;
    bool asleep;            /* unloaded by /sleep (vLLM sleep mode): /wake_up loads in wake_ms */
    bool sized;             /* --size-from-free: the cache was taken (once, after the first load) */
    uint64_t op_ms;         /* simulated length of the load or unload under way */
    uint64_t sleeps, wakes;

    /* jobs.c */
    list_t waiting; /* sw_job_t, FIFO */
    list_t running;
    unsigned n_waiting, n_running;
    bool locking; /* the head of the waiting line is acquiring the global lock */
    sw_glock_t glock;
    uv_timer_t job_timer;
    bool in_tick, tick_again;
    unsigned utilization_set;
    uint64_t started, completed, ooms, failures, outputs;

    /* gate.c */
    uv_timer_t gate_timer;
    sw_gate_redo_fn gate_redo; /* held requests handled on resume (sw_routes_handle) */
    bool gpu_held;       /* locked/checkpointed: no GPU work advances or starts */
    uint32_t gate_acked; /* the last lock request acknowledged */
    sw_http_req_t *deferred[SW_GATE_DEFERRED]; /* admin requests held until resumed */
    unsigned n_deferred;
    bool model_deferred; /* a load/unload step fell due while held */
    uint64_t holds;

    bool stopping; /* SIGTERM: finish what runs, then exit */
    bool closing;  /* idle while stopping: own handles closed; uv_run returns when the
                    * last connection has written its answer and closed */
    uv_signal_t sigterm, sigint;
} sw_worker_t;

/* model.c */
void sw_model_init(sw_worker_t *w);
void sw_model_start_load(sw_worker_t *w, sw_http_req_t *admin_req);
void sw_model_start_unload(sw_worker_t *w, sw_http_req_t *admin_req);
/* vLLM's sleep mode: an unload that takes --sleep-time and keeps --sleep-residue; the wake
 * is a load that takes --wake-time (the weights come from host memory, not disk). */
void sw_model_start_sleep(sw_worker_t *w, sw_http_req_t *admin_req);
void sw_model_start_wake(sw_worker_t *w, sw_http_req_t *admin_req);
const char *sw_model_state_name(enum sw_model_state s);
/* The GPU work resumes: run the load/unload step that fell due while held. */
void sw_model_resume(sw_worker_t *w);

/* jobs.c */
void sw_jobs_init(sw_worker_t *w);
/* kind: 0 generate, 1 chat completion (streams when the body says "stream": true). */
void sw_jobs_submit(sw_worker_t *w, sw_http_req_t *req, int kind);
/* Called when the model becomes ready again, or anything else that may let jobs start. */
void sw_jobs_kick(sw_worker_t *w);
/* gate.c: stop / resume GPU work (requests advance to now first; held time is not progress). */
void sw_jobs_hold(sw_worker_t *w);
void sw_jobs_resume(sw_worker_t *w);
double sw_now_ms(void); /* monotonic real ms */
uint64_t sw_rand(sw_worker_t *w);
double sw_rand01(sw_worker_t *w);
/* When stopping and nothing runs or waits: close the worker's own handles, so that the
 * loop ends once the answers already queued have been written (main then returns 0). */
void sw_maybe_exit(sw_worker_t *w);

/* routes.c */
void sw_routes_handle(sw_http_req_t *req, void *ctx);

/* respond.c */
/* Answers a JSON body built with printf-style formatting. */
void sw_respond_json(sw_http_req_t *req, int status, const char *extra_headers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* s JSON-escaped (no quotes) into out; returns out. */
const char *sw_jesc(const char *s, char *out, size_t cap);

#endif
