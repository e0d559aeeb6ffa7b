/*
 * park: what the park tiers share, as the scheduler sees it: the end of a verified reclaim
 * (the scheduler's reclaimed action). The rest of park.c is internal (supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_PARK_H
#define VRAMD_WORKERS_PARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* The scheduler saw the instance's memory come back (ok) or gave up waiting (!ok). */
void instance_reclaimed(instance_t *inst, bool ok);

#endif
