/*
 * sched_status: the scheduler's part of /v1/status, one object per GPU: NVML's figures, the
 * ledger (capacity, reserved by kind, claimed, asked, free to admit, every entry), the turn
 * figures (its claim, swaps by reason and their seconds: sched_turn.c) and its idle model
 * (sched_idle_model.c). Reads only. Calls down into the other sched files. Loop thread only.
 */
#include "sched/scheduler.h"

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/request.h"
#include "sched/scheduler_int.h"

void sched_status_json(void *gpus_array)
{
    cJSON *arr = gpus_array;
    ledger_t *l = &sched_state.ledger;
    for (size_t pos = 0; pos < l->n_gpus; pos++) {
        const ledger_gpu_t *g = &l->gpus[pos];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", g->index);
        const gpu_device_t *dev = NULL;
        if (sched_state.snap)
            for (size_t k = 0; k < sched_state.snap->n_devices; k++)
                if (sched_state.snap->devices[k].index == g->index)
                    dev = &sched_state.snap->devices[k];
        cJSON_AddStringToObject(o, "uuid", dev ? dev->uuid : "");
        cJSON_AddStringToObject(o, "name", dev ? dev->name : "");
        cJSON_AddNumberToObject(o, "total", (double)g->total);
        cJSON_AddNumberToObject(o, "used", dev ? (double)dev->used : 0);
        cJSON_AddNumberToObject(o, "foreign", (double)g->foreign);
        cJSON_AddNumberToObject(o, "headroom", (double)g->headroom);
        cJSON_AddNumberToObject(o, "capacity", (double)ledger_capacity(l, pos));
        cJSON_AddNumberToObject(o, "reserved", (double)g->reserved);
        cJSON_AddNumberToObject(o, "reserved_resident", (double)ledger_sum_kind(l, pos, LEDGER_RESIDENT));
        cJSON_AddNumberToObject(o, "reserved_requests", (double)ledger_sum_kind(l, pos, LEDGER_REQUEST));
        cJSON_AddNumberToObject(o, "claimed", (double)g->claimed);
        cJSON_AddNumberToObject(o, "asked", (double)g->asked); /* waiting CUDA-shim asks (gate/shim_grants.c) */
        cJSON_AddNumberToObject(o, "free_to_admit", (double)ledger_free(l, pos));
        cJSON_AddNumberToObject(o, "utilization", dev ? dev->util_gpu : 0);
        cJSON_AddNumberToObject(o, "snapshot_age_ms", (double)sched_snapshot_age_ms());
        cJSON_AddBoolToObject(o, "stale", sched_gpu_stale());
        sched_turn_status_json(pos, o);
        sched_idle_model_status_json(pos, o);
        cJSON *entries = cJSON_AddArrayToObject(o, "ledger");
        list_foreach(it, &g->entries) {
            const ledger_entry_t *e = list_entry(it, ledger_entry_t, link);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "owner", e->owner ? e->owner : "");
            cJSON_AddStringToObject(j, "kind", e->kind == LEDGER_RESIDENT ? "resident" : "request");
            cJSON_AddNumberToObject(j, "bytes", (double)e->bytes);
            if (e->kind == LEDGER_REQUEST) {
                const request_t *r = (const request_t *)((const char *)e - offsetof(request_t, mem));
                cJSON_AddStringToObject(j, "request_id", r->id);
            }
            cJSON_AddItemToArray(entries, j);
        }
        cJSON_AddItemToArray(arr, o);
    }
}
