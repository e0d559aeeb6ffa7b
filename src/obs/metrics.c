/* metrics: the Prometheus exposition of GET /metrics. See metrics.h and docs/metrics.md. */
#include "obs/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/histogram.h"
#include "core/core.h"
#include "fleet/agent.h"
#include "gate/driver_limit.h"
#include "gate/shim_grants.h"
#include "jobs/jobs.h"
#include "jobstore/job_state.h"
#include "path/proxy_upgrade.h"
#include "sched/scheduler.h"
#include "workers/host_book.h"
#include "workers/model_state.h"

#define METRICS_PIECE_MAX 1024 /* the longest single append (a # HELP line) is well under this */

/* ---- text format helpers -------------------------------------------------------------- */

static void family(buf_t *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \\, \" and \n escaped (the only escapes the format has). */
static void label_value(buf_t *b, const char *s)
{
    const char *p = s ? s : "";
    while (*p) {
        size_t run = strcspn(p, "\\\"\n");
        buf_append(b, p, run);
        p += run;
        if (*p == '\\')
            buf_append(b, "\\\\", 2);
        else if (*p == '"')
            buf_append(b, "\\\"", 2);
        else if (*p == '\n')
            buf_append(b, "\\n", 2);
        if (*p)
            p++;
    }
}

/* name{k1="v1",k2="v2",k3="v3"}: labels up to the first NULL key, no trailing space. */
static void series3(buf_t *b, const char *name, const char *k1, const char *v1, const char *k2, const char *v2,
                    const char *k3, const char *v3)
{
    buf_append_str(b, name);
    if (!k1)
        return;
    buf_printf(b, "{%s=\"", k1);
    label_value(b, v1);
    if (k2) {
        buf_printf(b, "\",%s=\"", k2);
        label_value(b, v2);
        if (k3) {
            buf_printf(b, "\",%s=\"", k3);
            label_value(b, v3);
        }
    }
    buf_append_str(b, "\"}");
}

/* name{k1="v1",k2="v2"}: up to two labels (k1 or k2 may be NULL). */
static void series(buf_t *b, const char *name, const char *k1, const char *v1, const char *k2, const char *v2)
{
    series3(b, name, k1, v1, k2, v2, NULL, NULL);
}

static void sample_u64(buf_t *b, const char *name, const char *k1, const char *v1, const char *k2, const char *v2,
                       uint64_t value)
{
    series(b, name, k1, v1, k2, v2);
    buf_printf(b, " %llu\n", (unsigned long long)value);
}

/* The shortest of %.15g / %.17g that reads back as the same double. */
static void format_double(char *out, size_t cap, double v)
{
    snprintf(out, cap, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, cap, "%.17g", v);
}

static void sample_double(buf_t *b, const char *name, const char *k1, const char *v1, double value)
{
    char num[40];
    format_double(num, sizeof num, value);
    series(b, name, k1, v1, NULL, NULL);
    buf_printf(b, " %s\n", num);
}

/* One model's histogram: _bucket for each bound and +Inf, then _sum and _count. */
static void histogram_samples(buf_t *b, const char *name, const char *model, const histogram_t *h)
{
    char metric[96], le[40];
    snprintf(metric, sizeof metric, "%s_bucket", name);
    for (size_t i = 0; i <= h->n_bounds; i++) {
        if (i < h->n_bounds)
            format_double(le, sizeof le, h->bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        sample_u64(b, metric, "model", model, "le", le, histogram_cumulative(h, i));
    }
    snprintf(metric, sizeof metric, "%s_sum", name);
    sample_double(b, metric, "model", model, h->sum);
    snprintf(metric, sizeof metric, "%s_count", name);
    sample_u64(b, metric, "model", model, NULL, NULL, h->count);
}

/* ---- families ------------------------------------------------------------------------- */

static void daemon_metrics(buf_t *b, core_t *d)
{
    family(b, "vramd_build_info", "gauge", "Always 1; the version label says which vramd runs.");
    sample_u64(b, "vramd_build_info", "version", VRAMD_VERSION, NULL, NULL, 1);
    family(b, "vramd_start_time_seconds", "gauge", "When vramd started, in seconds since the Unix epoch.");
    sample_double(b, "vramd_start_time_seconds", NULL, NULL, (double)d->started_wall_ms / 1000.0);
    family(b, "vramd_ready", "gauge", "1 when vramd admits requests (config loaded, not draining), else 0.");
    sample_u64(b, "vramd_ready", NULL, NULL, NULL, NULL, d->ready && !d->draining ? 1 : 0);
    family(b, "vramd_draining", "gauge", "1 while vramd drains (finishing in-flight requests before it exits).");
    sample_u64(b, "vramd_draining", NULL, NULL, NULL, NULL, d->draining ? 1 : 0);
    family(b, "vramd_connections", "gauge", "Client connections open now.");
    sample_u64(b, "vramd_connections", NULL, NULL, NULL, NULL, d->n_conns);
    family(b, "vramd_http_requests_total", "counter",
           "HTTP requests received (all routes, vramd's own included), since vramd started.");
    sample_u64(b, "vramd_http_requests_total", NULL, NULL, NULL, NULL, d->requests_total);
    family(b, "vramd_queued", "gauge", "Requests waiting in the queues of all models together.");
    sample_u64(b, "vramd_queued", NULL, NULL, NULL, NULL, core_queued_total(d));
}

/* One unlabelled counter or gauge. */
static void single(buf_t *b, const char *name, const char *type, const char *help, uint64_t v)
{
    family(b, name, type, help);
    sample_u64(b, name, NULL, NULL, NULL, NULL, v);
}

/* Client timeouts, the connection reserve, and vramd's own shortages (core_count). */
static void guard_metrics(buf_t *b, core_t *d)
{
    family(b, "vramd_client_timeouts_total", "counter",
           "Client connections ended by a timeout, by kind: header (408, limits.header_timeout), body (408, "
           "limits.body_timeout), send (closed, limits.send_timeout: the client read nothing).");
    static const enum core_counter timeouts[] = {CORE_CNT_HEADER_TIMEOUT, CORE_CNT_BODY_TIMEOUT, CORE_CNT_SEND_TIMEOUT};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++)
        sample_u64(b, "vramd_client_timeouts_total", "kind", core_counter_name(timeouts[i]), NULL, NULL,
                   d->counts[timeouts[i]]);
    single(b, "vramd_reserve_connections", "gauge",
           "Connections open now on the reserve (past limits.max_connections, limits.reserved_connections).",
           d->n_reserve_conns);
    single(b, "vramd_reserve_connections_total", "counter", "Connections accepted onto the reserve.",
           d->counts[CORE_CNT_RESERVE_ACCEPTED]);
    single(b, "vramd_reserve_refused_total", "counter",
           "Requests on a reserve connection for a route other than health, status, metrics and admin "
           "(503 overloaded).",
           d->counts[CORE_CNT_RESERVE_REFUSED]);
    single(b, "vramd_upgraded_connections", "gauge",
           "Upgraded connections (WebSocket tunnels to a worker, upgrade: [websocket]) open now.", proxy_upgrade_open());
    single(b, "vramd_upgraded_connections_total", "counter", "Upgraded connections opened (the worker answered 101).",
           proxy_upgrade_opened_total());
    single(b, "vramd_connections_refused_total", "counter",
           "Connections closed at accept: max_connections and the reserve were both full.",
           d->counts[CORE_CNT_CONN_REFUSED]);
    family(b, "vramd_local_resource_exhausted_total", "counter",
           "Calls vramd could not make for want of its own descriptors or memory (EMFILE, ENFILE, ENOBUFS, "
           "ENOMEM), not counted against any worker, by call: proxy (503 local_resource_exhausted), health, hook.");
    static const enum core_counter local[] = {CORE_CNT_LOCAL_PROXY, CORE_CNT_LOCAL_HEALTH, CORE_CNT_LOCAL_HOOK};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        sample_u64(b, "vramd_local_resource_exhausted_total", "call", core_counter_name(local[i]), NULL, NULL,
                   d->counts[local[i]]);
    single(b, "vramd_gate_fail_open_total", "counter",
           "Requests sent on past their worker's driver-limit gate because vramd was out of memory to hold them "
           "(fail open; log event driver_limit_gate_skipped).",
           d->counts[CORE_CNT_GATE_FAIL_OPEN]);
}

static void gpu_metrics(buf_t *b)
{
    family(b, "vramd_nvml_up", "gauge", "1 when NVML answered and GPU figures are current, else 0.");
    sample_u64(b, "vramd_nvml_up", NULL, NULL, NULL, NULL, sched_gpu_ok() && !sched_gpu_stale() ? 1 : 0);
    size_t n = sched_gpu_count();
    sched_gpu_figures_t *f = calloc(n ? n : 1, sizeof *f);
    if (!f)
        return;
    char (*idx)[16] = calloc(n ? n : 1, sizeof *idx);
    if (!idx) {
        free(f);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sched_gpu_figures(i, &f[i]);
        snprintf(idx[i], sizeof idx[i], "%d", f[i].index);
    }
    family(b, "vramd_gpu_info", "gauge", "Always 1 per GPU vramd manages; uuid and name as NVML reports them.");
    for (size_t i = 0; i < n; i++) {
        buf_append_str(b, "vramd_gpu_info{gpu=\"");
        label_value(b, idx[i]);
        buf_append_str(b, "\",uuid=\"");
        label_value(b, f[i].uuid);
        buf_append_str(b, "\",name=\"");
        label_value(b, f[i].name);
        buf_append_str(b, "\"} 1\n");
    }
    static const struct {
        const char *name;
        const char *help;
        size_t offset;
    } figures[] = {
        {"vramd_gpu_memory_total_bytes", "GPU memory in total, as NVML reports it.",
         offsetof(sched_gpu_figures_t, total)},
        {"vramd_gpu_memory_used_bytes", "GPU memory in use by any process, as NVML reports it.",
         offsetof(sched_gpu_figures_t, used)},
        {"vramd_gpu_memory_reserved_bytes",
         "GPU memory reserved in vramd's ledger: resident reservations of loaded instances plus "
         "per-request reservations of running requests.",
         offsetof(sched_gpu_figures_t, reserved)},
        {"vramd_gpu_memory_foreign_bytes", "GPU memory held by processes vramd does not manage.",
         offsetof(sched_gpu_figures_t, foreign)},
        {"vramd_gpu_memory_headroom_bytes", "GPU memory never handed out (gpu.headroom).",
         offsetof(sched_gpu_figures_t, headroom)},
        {"vramd_gpu_memory_capacity_bytes", "GPU memory vramd may hand out: total - headroom - foreign.",
         offsetof(sched_gpu_figures_t, capacity)},
        {"vramd_gpu_memory_free_to_admit_bytes", "Capacity not reserved (nor claimed by a starving request) now.",
         offsetof(sched_gpu_figures_t, free_to_admit)},
    };
    for (size_t k = 0; k < sizeof figures / sizeof figures[0]; k++) {
        family(b, figures[k].name, "gauge", figures[k].help);
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&f[i] + figures[k].offset, sizeof v);
            sample_u64(b, figures[k].name, "gpu", idx[i], NULL, NULL, v);
        }
    }
    family(b, "vramd_gpu_snapshot_age_seconds", "gauge",
           "Age of the last good NVML snapshot the figures come from (its read's start).");
    for (size_t i = 0; i < n; i++)
        sample_double(b, "vramd_gpu_snapshot_age_seconds", "gpu", idx[i], (double)f[i].age_ms / 1000.0);
    family(b, "vramd_gpu_stale", "gauge",
           "1 while the snapshot is older than gpu.stale_after: readiness 503, new memory not admitted.");
    for (size_t i = 0; i < n; i++)
        sample_u64(b, "vramd_gpu_stale", "gpu", idx[i], NULL, NULL, f[i].stale ? 1 : 0);
    free(idx);
    free(f);
}

/* Models that take turns on a card (sched/sched_turn.c): swaps per GPU and reason, the
 * seconds they took; and the visible queue's expected wait of a new request per model
 * (sched/sched_queue.c). */
static void turn_metrics(buf_t *b, core_t *d)
{
    size_t n = sched_gpu_count();
    const ledger_t *l = sched_ledger();
    uint64_t counts[SCHED_SWAP_REASON_COUNT], ms[LEDGER_MAX_GPUS] = {0};
    char idx[16];
    family(b, "vramd_swaps_total", "counter",
           "Swaps: a model took the card from models with work or idle ones, by reason (idle, bound, deadline, "
           "priority, memory).");
    for (size_t pos = 0; l && pos < n && pos < LEDGER_MAX_GPUS; pos++) {
        if (!sched_swap_figures(pos, counts, &ms[pos]))
            continue;
        snprintf(idx, sizeof idx, "%d", l->gpus[pos].index);
        for (int r = SCHED_SWAP_NONE + 1; r < SCHED_SWAP_REASON_COUNT; r++)
            sample_u64(b, "vramd_swaps_total", "gpu", idx, "reason", sched_swap_reason_name((enum sched_swap_reason)r),
                       counts[r]);
    }
    family(b, "vramd_swap_seconds_total", "counter",
           "Seconds the swaps took, from the first eviction for the newcomer to the newcomer ready.");
    for (size_t pos = 0; l && pos < n && pos < LEDGER_MAX_GPUS; pos++) {
        snprintf(idx, sizeof idx, "%d", l->gpus[pos].index);
        sample_double(b, "vramd_swap_seconds_total", "gpu", idx, (double)ms[pos] / 1000.0);
    }
    family(b, "vramd_queue_eta_seconds", "gauge",
           "Expected wait of a new request before it starts: its model's queue and its turn on the card, from the "
           "learned times (0 until they are learned; GET /v1/queue eta_new_ms).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        sample_double(b, "vramd_queue_eta_seconds", "model", m->name, (double)sched_queue_eta_ms(m) / 1000.0);
    }
}

/* A per-model family whose value is one uint64_t read by `get`. */
typedef uint64_t (*model_value_fn)(const model_t *m);

static uint64_t v_queue_depth(const model_t *m) { return m->queue.depth; }
static uint64_t v_in_flight(const model_t *m) { return m->in_flight; }
static uint64_t v_instances(const model_t *m) { return m->n_instances; }
static uint64_t v_loads(const model_t *m) { return m->loads_total; }
static uint64_t v_oom(const model_t *m) { return m->oom_total; }
static uint64_t v_cancelled_holds(const model_t *m) { return m->cancelled_holds; }
static uint64_t v_deadline_rejections(const model_t *m) { return m->deadline_rejections; }
static uint64_t v_invalid(const model_t *m) { return m->invalid_total; }
static uint64_t v_retry_budget(const model_t *m) { return m->retry_budget_refusals; }
static uint64_t v_ejections(const model_t *m) { return m->ejections_total; }
static uint64_t v_estimate(const model_t *m) { return sched_request_estimate_max(m); }
static uint64_t v_parked(const model_t *m) { return host_book_parked_by(m->name); }
static uint64_t v_parks(const model_t *m) { return m->parks_total; }
static uint64_t v_wakes(const model_t *m) { return m->wakes_total; }
static uint64_t v_park_refusals(const model_t *m) { return m->park_refusals; }
static uint64_t v_checkpoints(const model_t *m) { return m->park_stats[PARK_CHECKPOINT].parks; }
static uint64_t v_restores(const model_t *m) { return m->park_stats[PARK_CHECKPOINT].returns; }
static uint64_t v_checkpoint_failures(const model_t *m) { return m->checkpoint_failures; }

static void model_family(buf_t *b, core_t *d, const char *name, const char *type, const char *help,
                         model_value_fn get)
{
    family(b, name, type, help);
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        sample_u64(b, name, "model", m->name, NULL, NULL, get(m));
    }
}

/* How the model's requests ended and how long they took and waited. */
static void request_families(buf_t *b, core_t *d)
{
    family(b, "vramd_requests_total", "counter",
           "Requests routed to the model that ended, by outcome: ok (2xx/3xx answer delivered), "
           "client_error/server_error (worker 4xx/5xx), cancelled (client left), or vramd's error code.");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        bool ok_seen = false;
        for (unsigned i = 0; i < m->n_outcomes; i++)
            ok_seen = ok_seen || strcmp(m->outcomes[i].name, "ok") == 0;
        if (!ok_seen)
            sample_u64(b, "vramd_requests_total", "model", m->name, "outcome", "ok", 0);
        for (unsigned i = 0; i < m->n_outcomes; i++)
            sample_u64(b, "vramd_requests_total", "model", m->name, "outcome", m->outcomes[i].name,
                       m->outcomes[i].n);
    }

    family(b, "vramd_request_duration_seconds", "histogram",
           "Time from a request's arrival to its end (queue wait, runs, retries, validation), "
           "for requests admitted to the model's queue, whatever their outcome.");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        histogram_samples(b, "vramd_request_duration_seconds", m->name, &m->duration_hist);
    }
    family(b, "vramd_queue_wait_seconds", "histogram",
           "Time a request waited in the model's queue before its first dispatch to a worker "
           "(or before it left the queue unserved).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        histogram_samples(b, "vramd_queue_wait_seconds", m->name, &m->queue_wait_hist);
    }
}

static bool hook_configured(const model_t *m, enum hook_kind k)
{
    const model_config_t *c = m->cfg;
    const config_hook_t *h[HOOK_KINDS] = {&c->clear_cache, &c->unload, &c->reload, &c->sleep, &c->wake};
    return h[k]->set;
}

/* vramd_hook_calls_total{model,hook,outcome}: every outcome of each hook a model has (or had
 * calls of, before a reload took the hook away). */
static void hook_calls_family(buf_t *b, core_t *d)
{
    family(b, "vramd_hook_calls_total", "counter",
           "Calls of the model's hooks (clear_cache, unload, reload, sleep, wake), by how they ended: ok (2xx), "
           "http_error (another answer), failed (no valid answer, or not made), timeout, local_shortage "
           "(vramd's own descriptors or memory ran out).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        for (int k = 0; k < HOOK_KINDS; k++) {
            uint64_t any = 0;
            for (int o = 0; o < HOOK_OUTCOMES; o++)
                any += m->hook_calls[k][o];
            if (!any && !hook_configured(m, (enum hook_kind)k))
                continue;
            for (int o = 0; o < HOOK_OUTCOMES; o++) {
                series3(b, "vramd_hook_calls_total", "model", m->name, "hook", hook_kind_name((enum hook_kind)k),
                        "outcome", hook_outcome_name((enum hook_outcome)o));
                buf_printf(b, " %llu\n", (unsigned long long)m->hook_calls[k][o]);
            }
        }
    }
}

/* vramd_deadline_expiries_total{model,stage}: deadlines that passed, queued or running. */
static void deadline_expiries_family(buf_t *b, core_t *d)
{
    family(b, "vramd_deadline_expiries_total", "counter",
           "Requests whose deadline passed (504 deadline_exceeded, or a streamed answer cut), by stage: "
           "queued (the queue deadline or the total deadline, before a worker ran it) or running "
           "(the total deadline, while a worker ran it).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        sample_u64(b, "vramd_deadline_expiries_total", "model", m->name, "stage", "queued", m->deadline_expiries[0]);
        sample_u64(b, "vramd_deadline_expiries_total", "model", m->name, "stage", "running", m->deadline_expiries[1]);
    }
}

/* The CUDA shims (gate/shim_grants.h), per instance of a model that has one. */
static void shim_families(buf_t *b, const core_t *d)
{
    static const struct {
        const char *name, *type, *help;
    } fams[] = {
        {"vramd_shim_live_bytes", "gauge", "Device bytes the worker's processes hold through the CUDA shim now."},
        {"vramd_shim_grant_bytes", "gauge", "What the worker may allocate without asking vramd (its booking less its CUDA context)."},
        {"vramd_shim_context_bytes", "gauge", "NVML's bytes for the worker beyond the shim's (CUDA context), learned while idle."},
        {"vramd_shim_asks_total", "counter", "Allocations past the grant that asked vramd."},
        {"vramd_shim_waits_total", "counter", "Asks that vramd held before granting them."},
        {"vramd_shim_refusals_total", "counter", "Asks refused: CUDA_ERROR_OUT_OF_MEMORY in that worker alone."},
        {"vramd_shim_mismatches_total", "counter", "Readings where the shim counted more than NVML showed (beyond 64 MiB)."},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        family(b, fams[f].name, fams[f].type, fams[f].help);
        list_foreach(it, &d->models) {
            const model_t *m = list_entry(it, model_t, link);
            list_foreach(ii, &m->instances) {
                const instance_t *in = list_entry(ii, instance_t, link);
                shim_figures_t fig;
                if (!shim_grants_figures(in, &fig))
                    continue;
                uint64_t v[] = {fig.live, fig.grant, fig.context, fig.asks, fig.waited, fig.refused, fig.mismatches};
                char id[16];
                snprintf(id, sizeof id, "%u", in->id);
                sample_u64(b, fams[f].name, "model", m->name, "instance", id, v[f]);
            }
        }
    }
}

/* The driver's per-cgroup limits (gate/driver_limit.h). */
static void driver_limit_families(buf_t *b, const core_t *d)
{
    family(b, "vramd_driver_limit_bytes", "gauge",
           "The driver's hard limit on the worker's cgroup now (nvmlDeviceSetMemoryLimits_v1; 0: none set yet).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        list_foreach(ii, &m->instances) {
            const instance_t *in = list_entry(ii, instance_t, link);
            driver_limit_figures_t fig;
            if (!driver_limit_figures(in, &fig))
                continue;
            char id[16];
            snprintf(id, sizeof id, "%u", in->id);
            sample_u64(b, "vramd_driver_limit_bytes", "model", m->name, "instance", id, fig.limit);
        }
    }
    driver_limit_totals_t t;
    driver_limit_totals(&t);
    family(b, "vramd_driver_limit_calls_total", "counter",
           "Driver limit calls by result: set (raised or lowered), reset (cleared at the worker's exit), failed.");
    sample_u64(b, "vramd_driver_limit_calls_total", "result", "set", NULL, NULL, t.sets - t.resets);
    sample_u64(b, "vramd_driver_limit_calls_total", "result", "reset", NULL, NULL, t.resets);
    sample_u64(b, "vramd_driver_limit_calls_total", "result", "failed", NULL, NULL, t.failures);
    family(b, "vramd_driver_limit_held_requests_total", "counter",
           "Requests held before reaching their worker until its driver limit was raised for them.");
    sample_u64(b, "vramd_driver_limit_held_requests_total", NULL, NULL, NULL, NULL, t.held_requests);
}

static void model_metrics(buf_t *b, core_t *d)
{
    model_family(b, d, "vramd_queue_depth", "gauge", "Requests waiting in the model's queue.", v_queue_depth);
    model_family(b, d, "vramd_in_flight", "gauge", "Requests of the model running on a worker now.", v_in_flight);
    model_family(b, d, "vramd_model_instances", "gauge", "Worker instances of the model, in any state.", v_instances);

    family(b, "vramd_model_state", "gauge", "1 for the model's current state, 0 for the others.");
    static const enum model_state states[] = {MODEL_STOPPED,  MODEL_STARTING,  MODEL_READY,
                                              MODEL_DRAINING, MODEL_UNLOADING, MODEL_FAILED};
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        enum model_state now = model_state(m);
        for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
            sample_u64(b, "vramd_model_state", "model", m->name, "state", model_state_name(states[i]),
                       states[i] == now ? 1 : 0);
    }

    model_family(b, d, "vramd_model_per_request_estimate_bytes", "gauge",
                 "The model's per-request memory estimate now (declared, learned, raised by OOMs).", v_estimate);

    request_families(b, d);

    model_family(b, d, "vramd_model_loads_total", "counter",
                 "Times an instance of the model became loaded (first health check passed after a start or a reload hook).",
                 v_loads);
    family(b, "vramd_model_unloads_total", "counter", "Times an instance of the model was unloaded or stopped on purpose, by reason.");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        for (int r = 0; r < UNLOAD_REASONS; r++)
            sample_u64(b, "vramd_model_unloads_total", "model", m->name, "reason",
                       unload_reason_name((enum unload_reason)r), m->unloads_by_reason[r]);
    }
    hook_calls_family(b, d);
    model_family(b, d, "vramd_oom_total", "counter", "Worker answers recognised as out of memory (degrade.detect).",
                 v_oom);
    model_family(b, d, "vramd_cancelled_holds_total", "counter",
                 "Requests let go of while the worker ran them whose memory was held back (memory.cancelled_hold).",
                 v_cancelled_holds);
    family(b, "vramd_degraded_total", "counter", "Requests run at a degradation ladder level, by the level (1 = first ladder entry).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        size_t top = m->cfg->degrade.n_ladder;
        for (size_t l = top + 1; l < MODEL_DEGRADE_LEVELS; l++)
            if (m->degraded_by_level[l])
                top = l; /* a level the config no longer has, counted before a reload */
        if (top >= MODEL_DEGRADE_LEVELS)
            top = MODEL_DEGRADE_LEVELS - 1;
        for (size_t l = 1; l <= top; l++) {
            char level[16];
            snprintf(level, sizeof level, "%zu", l);
            sample_u64(b, "vramd_degraded_total", "model", m->name, "level", level, m->degraded_by_level[l]);
        }
    }
    shim_families(b, d);
    driver_limit_families(b, d);
    family(b, "vramd_worker_restarts_total", "counter",
           "Worker restarts, by reason: failures (crash, start_failed, startup_timeout, hang, unhealthy, "
           "reload_failed, park_failed) and planned recycles (recycle).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        for (int r = 0; r < RESTART_REASONS; r++)
            sample_u64(b, "vramd_worker_restarts_total", "model", m->name, "reason",
                       restart_reason_name((enum restart_reason)r), m->restarts_by_reason[r]);
    }
    model_family(b, d, "vramd_deadline_rejections_total", "counter",
                 "Requests refused at once because their predicted start was past their deadline "
                 "(503 deadline_unmeetable).",
                 v_deadline_rejections);
    deadline_expiries_family(b, d);
    model_family(b, d, "vramd_invalid_outputs_total", "counter", "Worker outputs that failed validation.",
                 v_invalid);
    model_family(b, d, "vramd_retry_budget_exhausted_total", "counter",
                 "Retries (after an OOM or an invalid output) refused by the model's retry_budget "
                 "(503 retry_budget_exhausted).",
                 v_retry_budget);
    model_family(b, d, "vramd_worker_ejections_total", "counter",
                 "Outlier ejections of the model's instances (broken exchanges in a row).", v_ejections);
}

/* Per instance: out of rotation as suspect or ejected. */
static void instance_metrics(buf_t *b, core_t *d)
{
    static const struct {
        const char *name, *help;
    } fams[] = {
        {"vramd_instance_suspect", "1 while the instance is suspect (its connection broke; no new requests until "
                                   "a health check passes), else 0."},
        {"vramd_instance_ejected", "1 while the instance is ejected as an outlier, else 0."},
        {"vramd_instance_ejected_until_seconds", "When the instance's ejection ends, in seconds since the Unix "
                                                 "epoch; 0 when not ejected."},
        {"vramd_instance_ejections", "Times the instance was ejected (the next ejection lasts 30 s x this + 1)."},
    };
    uint64_t now = core_now();
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        family(b, fams[k].name, "gauge", fams[k].help);
        list_foreach(it, &d->models) {
            const model_t *m = list_entry(it, model_t, link);
            list_foreach(ii, &m->instances) {
                const instance_t *in = list_entry(ii, instance_t, link);
                char id[16];
                snprintf(id, sizeof id, "%u", in->id);
                bool ejected = in->life.ejected_until_ms > now;
                if (k == 2) {
                    double until = ejected ? (double)(d->started_wall_ms + (in->life.ejected_until_ms - d->started_ms)) / 1000.0 : 0;
                    series(b, fams[k].name, "model", m->name, "instance", id);
                    char num[40];
                    format_double(num, sizeof num, until);
                    buf_printf(b, " %s\n", num);
                    continue;
                }
                uint64_t v = k == 0 ? in->life.suspect : k == 1 ? ejected : in->life.ejections;
                sample_u64(b, fams[k].name, "model", m->name, "instance", id, v);
            }
        }
    }
}

static void job_metrics(buf_t *b, core_t *d)
{
    uint64_t counts[JOB_STATE_COUNT] = {0};
    bool available = jobs_count_by_state(d, counts) == 0;
    family(b, "vramd_jobs_available", "gauge", "1 when the job journal is open (async jobs work), else 0.");
    sample_u64(b, "vramd_jobs_available", NULL, NULL, NULL, NULL, available ? 1 : 0);
    family(b, "vramd_jobs", "gauge", "Async jobs in the journal, by state (all five states always present).");
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        sample_u64(b, "vramd_jobs", "state", job_state_name((enum job_state)s), NULL, NULL,
                   available ? counts[s] : 0);
}

/* A fleet's view: which host this is, the agent-check counters, and per model the three
 * gauges the Kubernetes Gateway API Inference Extension's model-server protocol reads
 * (queued: vramd_queue_depth, running: vramd_in_flight, and the KV-cache-like fraction). */
static void fleet_metrics(buf_t *b, core_t *d)
{
    family(b, "vramd_host_info", "gauge", "Always 1; host_name is fleet.host_name (this host in a fleet).");
    sample_u64(b, "vramd_host_info", "host_name", d->cfg->fleet.host_name, NULL, NULL, 1);
    family(b, "vramd_model_memory_reserved_ratio", "gauge",
           "How full (0..1) the GPU memory the model's requests may use is: running requests' reservations "
           "over those plus the memory free to admit beside its instances (its KV-cache utilization).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        sample_double(b, "vramd_model_memory_reserved_ratio", "model", m->name, sched_model_reserved_ratio(m));
    }
    family(b, "vramd_model_memory_bytes", "gauge",
           "GPU memory the ledger books for the model now: its instances' resident entries and its running "
           "requests' reservations (GPU memory by owner; foreign use is vramd_gpu_memory_foreign_bytes).");
    list_foreach(it, &d->models) {
        const model_t *m = list_entry(it, model_t, link);
        uint64_t bytes = 0;
        list_foreach(ii, &m->instances) {
            const instance_t *in = list_entry(ii, instance_t, link);
            bytes += (in->memory.mem.gpu >= 0 ? in->memory.mem.bytes : 0) + in->memory.running_reserved +
                     (in->memory.grant_extra.gpu >= 0 ? in->memory.grant_extra.bytes : 0);
        }
        sample_u64(b, "vramd_model_memory_bytes", "model", m->name, NULL, NULL, bytes);
    }
    const fleet_agent_stats_t *a = fleet_agent_stats();
    family(b, "vramd_agent_checks_total", "counter",
           "HAProxy agent checks answered (fleet.agent_listen), by what they asked about: host or model.");
    sample_u64(b, "vramd_agent_checks_total", "target", "host", NULL, NULL, a->checks_host);
    sample_u64(b, "vramd_agent_checks_total", "target", "model", NULL, NULL, a->checks_model);
    family(b, "vramd_agent_errors_total", "counter",
           "Agent connections that got no ordinary answer, by why: bad_request (answered down #bad agent-send), "
           "refused (over fleet.agent_max_connections), timeout (fleet.agent_timeout before the answer).");
    sample_u64(b, "vramd_agent_errors_total", "reason", "bad_request", NULL, NULL, a->bad_requests);
    sample_u64(b, "vramd_agent_errors_total", "reason", "refused", NULL, NULL, a->refused);
    sample_u64(b, "vramd_agent_errors_total", "reason", "timeout", NULL, NULL, a->timed_out);
}

/* host_memory: the budget for parked instances and what each model holds there */
static void host_memory_metrics(buf_t *b, core_t *d)
{
    const host_ledger_t *h = host_book(d->cfg);
    family(b, "vramd_host_memory_budget_bytes", "gauge",
           "Host memory parked instances may hold (host_memory.budget, or its auto figure).");
    sample_u64(b, "vramd_host_memory_budget_bytes", NULL, NULL, NULL, NULL, h->budget);
    family(b, "vramd_host_memory_reserve_bytes", "gauge", "Host memory parking never uses (host_memory.reserve).");
    sample_u64(b, "vramd_host_memory_reserve_bytes", NULL, NULL, NULL, NULL, h->reserve);
    model_family(b, d, "vramd_host_memory_parked_bytes", "gauge",
                 "Host memory the model's parked instances hold (what left the GPU when they slept).", v_parked);
    model_family(b, d, "vramd_model_parks_total", "counter", "Times an instance of the model was parked (sleep or checkpoint tier).",
                 v_parks);
    model_family(b, d, "vramd_model_wakes_total", "counter",
                 "Times a parked instance of the model was brought back (wake, memory back on the GPU).", v_wakes);
    model_family(b, d, "vramd_model_park_refusals_total", "counter",
                 "Parks of the model skipped because the host could not afford them (budget, MemAvailable, cgroup).",
                 v_park_refusals);
    model_family(b, d, "vramd_model_checkpoints_total", "counter",
                 "Times an instance of the model was parked by the CUDA driver's checkpoint (checkpoint tier).",
                 v_checkpoints);
    model_family(b, d, "vramd_model_restores_total", "counter",
                 "Times a checkpointed instance of the model was restored (memory back on the GPU).", v_restores);
    model_family(b, d, "vramd_model_checkpoint_failures_total", "counter",
                 "Checkpoints or restores of the model that failed (the instance stopped, or its server marked failed).",
                 v_checkpoint_failures);
}

static char *render(core_t *d, size_t *len)
{
    buf_t b;
    buf_init(&b, METRICS_MAX_BYTES);
    if (buf_reserve(&b, 64 * 1024) != 0)
        return NULL;
    daemon_metrics(&b, d);
    guard_metrics(&b, d);
    gpu_metrics(&b);
    turn_metrics(&b, d);
    model_metrics(&b, d);
    instance_metrics(&b, d);
    job_metrics(&b, d);
    fleet_metrics(&b, d);
    host_memory_metrics(&b, d);
    /* Every single append is under METRICS_PIECE_MAX bytes, so one that did not fit left
     * the buffer within that distance of the limit: better no answer than a truncated one. */
    if (b.len + METRICS_PIECE_MAX > METRICS_MAX_BYTES) {
        buf_free(&b);
        return NULL;
    }
    size_t n = 0;
    char *out = buf_steal(&b, &n);
    if (len)
        *len = n;
    return out;
}

/* The last exposition built, kept for limits.metrics_cache (see metrics.h). */
static struct {
    char *text;
    size_t len;
    uint64_t built_ms;  /* loop time it was built at */
    uint64_t cost_us;   /* what building it took */
} metrics_state;

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

char *metrics_render(core_t *d, size_t *len)
{
    uint64_t now = core_now();
    uint64_t keep = d->cfg->limits.metrics_cache_ms;
    uint64_t by_cost = metrics_state.cost_us / 100; /* 10 x the build time, in ms */
    if (by_cost < keep)
        keep = by_cost;
    if (metrics_state.text && keep && now - metrics_state.built_ms < keep) {
        char *copy = malloc(metrics_state.len ? metrics_state.len : 1);
        if (copy) {
            memcpy(copy, metrics_state.text, metrics_state.len);
            if (len)
                *len = metrics_state.len;
        }
        return copy;
    }
    uint64_t t0 = mono_us();
    size_t n = 0;
    char *text = render(d, &n);
    if (text == NULL)
        return NULL;
    free(metrics_state.text);
    metrics_state.text = NULL;
    char *copy = d->cfg->limits.metrics_cache_ms ? malloc(n ? n : 1) : NULL;
    if (copy) {
        memcpy(copy, text, n);
        metrics_state.text = copy;
        metrics_state.len = n;
        metrics_state.built_ms = now;
        metrics_state.cost_us = mono_us() - t0;
    }
    if (len)
        *len = n;
    return text;
}

void metrics_forget(void)
{
    free(metrics_state.text);
    memset(&metrics_state, 0, sizeof metrics_state);
}
