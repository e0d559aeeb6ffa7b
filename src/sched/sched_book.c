/*
 * sched_book: the booking verbs, the only way a module outside sched/ changes the GPU
 * ledger (policy/ledger.h). Every other module reads the ledger through sched_ledger(),
 * which is const; what it may book is one named verb here, so that each kind of entry
 * (scheduler.h "Who holds what") has one writer and a booking bug has one place to start.
 * `make lint` (mk/lint_ledger.py) fails a ledger write anywhere else outside sched/.
 *
 * The verbs only carry out what their caller decided (the supervisor that a worker never
 * ran, the shim grants that an ask is granted, the prompt hold that a slot stays booked):
 * each is one or two ledger calls on an entry the caller's object embeds, and keeps the
 * ledger's own rules (releasing an unlinked entry is harmless, resizing one does nothing).
 */
#include "core/request.h"
#include "sched/scheduler_int.h"

void sched_instance_init(instance_t *inst)
{
    inst->memory.gpu = -1;
    inst->memory.gpu_pos = -1;
    ledger_entry_init(&inst->memory.mem);
    ledger_entry_init(&inst->memory.grant_extra);
}

void sched_book_release(instance_t *inst) { ledger_release(&sched_state.ledger, &inst->memory.mem); }

void sched_book_resize(instance_t *inst, uint64_t bytes) { ledger_resize(&sched_state.ledger, &inst->memory.mem, bytes); }

void sched_book_request_release(request_t *r) { ledger_release(&sched_state.ledger, &r->mem); }

void sched_book_grant(instance_t *inst, uint64_t bytes)
{
    if (inst->memory.gpu_pos < 0 || bytes == 0)
        return;
    ledger_t *l = &sched_state.ledger;
    if (inst->memory.grant_extra.gpu >= 0)
        ledger_resize(l, &inst->memory.grant_extra, inst->memory.grant_extra.bytes + bytes);
    else
        ledger_force(l, (size_t)inst->memory.gpu_pos, &inst->memory.grant_extra, LEDGER_REQUEST, bytes, inst->model->name, inst);
}

void sched_book_grant_settle(instance_t *inst)
{
    ledger_t *l = &sched_state.ledger;
    if (inst->memory.grant_extra.gpu < 0)
        return;
    if (inst->memory.mem.gpu >= 0)
        ledger_resize(l, &inst->memory.mem, inst->memory.mem.bytes + inst->memory.grant_extra.bytes);
    ledger_release(l, &inst->memory.grant_extra);
}

void sched_book_grant_drop(instance_t *inst) { ledger_release(&sched_state.ledger, &inst->memory.grant_extra); }

void sched_book_asks(const uint64_t per_gpu[LEDGER_MAX_GPUS])
{
    ledger_t *l = &sched_state.ledger;
    for (size_t p = 0; p < l->n_gpus; p++)
        ledger_set_asked(l, p, per_gpu[p]);
}

void sched_book_hold(request_t *r, request_t *shadow)
{
    if (r->mem.gpu < 0)
        return;
    ledger_t *l = &sched_state.ledger;
    int pos = r->mem.gpu;
    uint64_t bytes = r->mem.bytes;
    const char *owner = r->mem.owner;
    ledger_release(l, &r->mem);
    ledger_force(l, (size_t)pos, &shadow->mem, LEDGER_REQUEST, bytes, owner, shadow);
}
