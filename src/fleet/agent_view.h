/*
 * agent_view: what HAProxy's agent-check is told, read from the daemon at the moment of
 * the check: the ledger (free memory to admit, what a request and a load need, whether a
 * load would have to evict), the model's instances (ready with free slots, starting,
 * parked), its queue, draining, NVML and the model's failed state. It only reads: no
 * eviction, no claim, no start (sched_place_dry). The line itself is agent_line's.
 *
 * down reasons, first that applies: gpu_unavailable (NVML failing and the model, or for
 * the host some model, needs a GPU), model_failed, cannot_fit (the model can never fit on
 * this host's GPUs), unknown_model (not in this host's config), all_models_failed (host).
 * maxconn: a model's slots (instances x concurrency) plus its queue_max; the host's
 * limits.queue_max plus every model's slots, at most limits.max_connections.
 * Loop thread only.
 */
#ifndef VRAMD_FLEET_AGENT_VIEW_H
#define VRAMD_FLEET_AGENT_VIEW_H

#include "core/core.h"
#include "fleet/agent_line.h"

/* Figures for one request (host or model); never fails (a bad name is down). */
void agent_view(core_t *core, const agent_req_t *req, agent_figures_t *out);

#endif
