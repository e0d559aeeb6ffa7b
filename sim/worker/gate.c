/*
 * gate: see gate.h. The poll is cheap (one uncontended shared mutex, no /proc reads), so a
 * 5 ms period costs nothing measurable and bounds how long a lock waits for the worker.
 */
#include "gate.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "worker.h"

static void resume(sw_worker_t *w)
{
    log_event(LOG_INFO, "gpu_resumed", "model=%s deferred=%u", w->f.name, w->n_deferred);
    sw_jobs_resume(w);
    sw_model_resume(w);
    /* Handle the held admin requests in arrival order; one may be held again if a new lock
     * came meanwhile (sw_gate_defer keeps it). */
    unsigned n = w->n_deferred;
    sw_http_req_t *held[SW_GATE_DEFERRED];
    memcpy(held, w->deferred, n * sizeof held[0]);
    w->n_deferred = 0;
    for (unsigned i = 0; i < n; i++)
        w->gate_redo(held[i], w);
}

static void on_gate_timer(uv_timer_t *t)
{
    sw_worker_t *w = t->data;
    uint32_t seq = 0;
    int hold = simgpu_gate_poll(w->mem.gpu, &seq);
    if (hold < 0)
        return;
    if (hold && !w->gpu_held) {
        sw_jobs_hold(w);
        w->holds++;
        log_event(LOG_INFO, "gpu_held", "model=%s running=%u waiting=%u", w->f.name, w->n_running,
                  w->n_waiting);
    }
    if (hold && seq && seq != w->gate_acked) {
        simgpu_gate_ack(w->mem.gpu, seq);
        w->gate_acked = seq;
    }
    if (!hold && w->gpu_held)
        resume(w);
}

void sw_gate_start(sw_worker_t *w, sw_gate_redo_fn redo)
{
    w->gate_redo = redo;
    if (simgpu_gate_register(w->mem.gpu) < 0)
        log_event(LOG_WARN, "gate_unavailable", "model=%s error=%s", w->f.name,
                  "the simulated GPU's park table is full: checkpoint locks will not wait for this worker");
    uv_timer_init(w->loop, &w->gate_timer);
    w->gate_timer.data = w;
    uv_timer_start(&w->gate_timer, on_gate_timer, SW_GATE_POLL_MS, SW_GATE_POLL_MS);
}

bool sw_gate_defer(sw_worker_t *w, sw_http_req_t *r)
{
    if (!w->gpu_held)
        return false;
    if (w->n_deferred >= SW_GATE_DEFERRED) {
        sw_respond_json(r, 503, NULL, "{\"status\": \"error\", \"error\": \"GPU locked: too many requests waiting\"}");
        return true;
    }
    w->deferred[w->n_deferred++] = r;
    return true;
}
