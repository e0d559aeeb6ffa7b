/*
 * park_evict: the scheduler's evict action: room made by the cheapest tier an idle
 * instance has (a park tier, its unload hook, a stop).
 */
#ifndef VRAMD_WORKERS_PARK_EVICT_H
#define VRAMD_WORKERS_PARK_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* Make room by the cheapest tier the model has and the host affords (workers/park.c): its
 * sleep hook (parked), else a checkpoint by the CUDA driver (parked), else the unload hook,
 * else stop the process; a parked instance goes to the next tier. */
void instance_evict(instance_t *inst, const char *why);

/* A request took one of inst's slots (path/dispatch.c): its keep_alive stops (armed again
 * once it is idle, model_arm_idle_timers). */
void instance_keep_alive_stop(instance_t *inst);

#endif
