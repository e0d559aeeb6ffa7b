/*
 * prompt_hold: ComfyUI answers POST /prompt at once ({"prompt_id": ..., "number": ...}) and
 * runs the GPU work later on its own queue. For a model with `prompt_hold: true` (preset
 * comfyui) a /prompt request answered 200 with a prompt_id keeps its instance slot and its
 * memory reservation after the answer went to the client, until GET /history/{prompt_id}
 * shows the prompt done (polled every prompt_poll), the instance goes down, the worker stops
 * answering, or prompt_hold_timeout (default: response_timeout) passes. Then it releases
 * both exactly once. A prompt that ended with status_str "error" and an out-of-memory
 * exception_message counts as an OOM of its model (sched_note_oom, event "oom"); it cannot be
 * retried (its 200 is already the client's).
 */
#ifndef VRAMD_PATH_PROMPT_HOLD_H
#define VRAMD_PATH_PROMPT_HOLD_H

#include <stdbool.h>

#include "core/types.h"

/* Listen to the core's events (once, at start): an instance going down ends its holds. */
void prompt_hold_init(core_t *core);
/* Called where the proxy would release r's slot on inst: true when the answer is a queued
 * ComfyUI prompt, the slot and reservation now belong to a hold (the caller must neither
 * release them nor call instance_request_done); false: nothing changed. */
bool prompt_hold_take(request_t *r, instance_t *inst);

#endif
