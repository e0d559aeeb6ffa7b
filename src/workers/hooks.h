/*
 * hooks: the worker hook calls the scheduler asks for (its clear_cache action). Every hook
 * call goes through hooks.c; the others are internal (supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_HOOKS_H
#define VRAMD_WORKERS_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* The scheduler asks an idle READY instance for its allocator cache (actions.clear_cache):
 * its clear_cache hook, as every hook is called (instance_call_hook: body, timeout, logged,
 * counted), then an NVML reading at once after the answer. Notes last_clear_cache_ms. False
 * when it was not asked: no hook, not READY, a hook call in flight, hooks held back after
 * vramd's own shortage, or the call could not be made. */
bool instance_clear_cache(instance_t *inst);

#endif
