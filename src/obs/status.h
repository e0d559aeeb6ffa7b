/*
 * status: renders what vramd is doing as JSON, for GET /v1/status and GET /v1/models.
 * Pure readers of the daemon's state; each returns a malloc'ed string (NULL when out of
 * memory) that the caller frees.
 */
#ifndef VRAMD_OBS_STATUS_H
#define VRAMD_OBS_STATUS_H

#include "core/types.h"

char *status_render(core_t *d);
char *status_models_list(core_t *d);
/* The answer of an admin load or unload: {"model", "state", "instances"}; a model whose
 * instance is parked (nothing serving, its process up) has that instance's state ("parked")
 * and a "tier" ("sleeping", "checkpointed"), not "stopped". */
char *status_model_brief(model_t *m);
/* The answer of a reload that was applied: {"reloaded": true, "failed": [...]}, each model
 * still FAILED after it (its config did not change) with "model", "reason", "output" (its
 * worker's last lines) and "retry" (what retries it). */
char *status_reload_answer(core_t *d);

#endif
