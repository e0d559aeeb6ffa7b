/*
 * park_cost: what evicting an idle instance costs, tier by tier (the scheduler's
 * return_cost_ms, way_out_ms and evict_leaves actions).
 */
#ifndef VRAMD_WORKERS_PARK_COST_H
#define VRAMD_WORKERS_PARK_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* What instance_evict(inst) would cost to come back from, in ms: the learned wake time when
 * it would sleep (1 s until measured), the learned restore time when it would be
 * checkpointed (bytes at 10 GB/s until measured), else the learned load time. For the scheduler's
 * cost-aware eviction (a candidate's return cost); reads the host's free memory. A park tier
 * is taken only when it pays (park_cost.c): way out + way back < the learned load time. */
uint64_t instance_return_cost_ms(const instance_t *inst);
/* How long instance_evict(inst) would take to free its memory, in ms: a park tier's learned
 * way out (0 until measured), 0 for an unload or a stop. */
uint64_t instance_way_out_ms(const instance_t *inst);
/* What an eviction of inst now (or its park under way) would leave on its GPU: the tier's
 * leaves() (a shim park keeps the CUDA context), 0 for the others and a stop. */
uint64_t instance_evict_leaves(const instance_t *inst);

#endif
