/*
 * model_state: the names of the workers' states and reasons, a model's derived state
 * (supervisor.h says how it is derived), and the per-model counters the request path notes
 * (degraded, outcomes). The one instance state setter is internal (supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_MODEL_STATE_H
#define VRAMD_WORKERS_MODEL_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

enum model_state model_state(const model_t *m);
const char *model_state_name(enum model_state s);
const char *instance_state_name(enum instance_state s);
bool model_has_live_instances(const model_t *m);
/* Metrics: a request of m was degraded to ladder `level` (degraded_total too). */
void model_note_degraded(model_t *m, unsigned level);
/* Metrics: one request of m ended with this outcome (copied; over MODEL_OUTCOMES_MAX
 * distinct names, into "other"). */
void model_note_outcome(model_t *m, const char *outcome);
const char *unload_reason_name(enum unload_reason r);
const char *restart_reason_name(enum restart_reason r);
const char *hook_kind_name(enum hook_kind k);
const char *hook_outcome_name(enum hook_outcome o);
/* How a hook call that ended with this status (an http_call_cb's) went; past_deadline: it
 * ended at or after the deadline its timeout set (a status -1 then is the timeout). */
enum hook_outcome hook_outcome_of(int status, bool past_deadline);

#endif
