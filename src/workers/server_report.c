/*
 * server_report: what a model server itself says of the model an entry serves, read from its
 * health answer (model_config_t.report, set by the preset): Ollama's GET /api/ps gives each
 * loaded model's size_vram; llama.cpp's router GET /models gives each model's status (no
 * bytes: a "loaded" or "loading" model counts at its memory.resident). The figure is
 * inst->life.server_vram (status: server_vram_bytes); for an external server (url:), which may
 * hold several entries' models in one process, it is the instance's measured memory
 * (sched_snapshot.c) and a model the server does not list is unloaded (instance.c).
 *
 * It also says what the answer said of the model (enum server_said): instance.c takes a
 * llama.cpp router's model as ready only once "loaded", and a failed load as a failed check.
 *
 * Invariants: an answer that is not the documented shape leaves the figure as it was; a
 * model the answer does not list is 0; names match exactly, or NAME matches Ollama's
 * NAME:latest. Pure parsing: calls nothing else of the supervisor.
 */
#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "workers/supervisor_int.h"

/* Whether a name the server gives is the served model's (Ollama: NAME means NAME:latest). */
static bool served_name_is(const char *name, const char *want)
{
    size_t n = strlen(want);
    return strcmp(name, want) == 0 ||
           (!strchr(want, ':') && strncmp(name, want, n) == 0 && strcmp(name + n, ":latest") == 0);
}

/* What a llama.cpp router's status object {"value", "failed"} says. */
static enum server_said llamacpp_status(const cJSON *status)
{
    const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(status, "value"));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(status, "failed")))
        return SERVER_SAID_FAILED;
    if (st && strcmp(st, "loaded") == 0)
        return SERVER_SAID_LOADED;
    return st && strcmp(st, "loading") == 0 ? SERVER_SAID_LOADING : SERVER_SAID_ABSENT;
}

/* The server's own word on the served model, from its health answer (model_config_t.report):
 * Ollama's GET /api/ps {"models":[{"name","size_vram",...}]}: that size_vram; llama.cpp
 * router's GET /models {"data":[{"id","status":{"value","failed"}}]}: memory.resident while
 * the model is "loaded" or "loading" (the router gives no bytes); a model not listed (as
 * loaded): 0. Sets inst->life.server_vram; a body that is not that shape leaves it unchanged. */
enum server_said server_report_note(instance_t *inst, const char *body, size_t len)
{
    enum server_said said = SERVER_SAID_NOTHING;
    const model_config_t *mc = inst->model->cfg;
    bool ollama = mc->report == MODEL_REPORT_OLLAMA_PS;
    cJSON *doc = cJSON_ParseWithLength(body, len);
    cJSON *models = cJSON_GetObjectItemCaseSensitive(doc, ollama ? "models" : "data");
    if (cJSON_IsArray(models)) {
        said = SERVER_SAID_ABSENT;
        const char *want = mc->served_model ? mc->served_model : inst->model->name;
        int64_t vram = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, models) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, ollama ? "name" : "id"));
            if (!name || !served_name_is(name, want))
                continue;
            if (ollama) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "size_vram");
                if (cJSON_IsNumber(v) && v->valuedouble >= 0)
                    vram = (int64_t)v->valuedouble;
                said = SERVER_SAID_LOADED;
            } else {
                said = llamacpp_status(cJSON_GetObjectItemCaseSensitive(it, "status"));
                if (said == SERVER_SAID_LOADED || said == SERVER_SAID_LOADING)
                    vram = (int64_t)mc->memory.resident;
            }
        }
        inst->life.server_vram = vram;
        inst->life.server_vram_ms = core_now();
    }
    cJSON_Delete(doc);
    return said;
}
