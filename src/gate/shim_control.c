/*
 * shim_control: the control connections of the shims (shim_control.h).
 */
#include "gate/shim_control.h"

#include <stdlib.h>

#include "core/model.h"
#include "gpu/shim_page.h"
#include "gate/shim_grants_int.h"

bool shim_control_hello(shim_inst_t *si, grant_conn_t *c, unsigned slot)
{
    if (slot >= SHIM_PAGE_PROCS || si->ctl[slot])
        return false;
    si->ctl[slot] = c;
    si->ctl_done[slot] = NULL;
    si->conns++;
    return true;
}

static unsigned slot_of(const shim_inst_t *si, const grant_conn_t *c)
{
    for (unsigned s = 0; s < SHIM_PAGE_PROCS; s++)
        if (si->ctl[s] == c)
            return s;
    return SHIM_PAGE_PROCS;
}

void shim_control_closed(shim_inst_t *si, grant_conn_t *c)
{
    unsigned slot = slot_of(si, c);
    if (slot == SHIM_PAGE_PROCS)
        return;
    shim_control_done_fn done = si->ctl_done[slot];
    pid_t pid = si->page ? shim_page_slot_pid(si->page, slot) : 0;
    si->ctl[slot] = NULL;
    si->ctl_done[slot] = NULL;
    si->conns--;
    if (done && si->inst)
        done(si->inst, pid, NULL);
}

void shim_control_answer(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m)
{
    (void)ctx;
    shim_inst_t *si = owner;
    unsigned slot = si ? slot_of(si, c) : SHIM_PAGE_PROCS;
    if (slot == SHIM_PAGE_PROCS)
        return;
    shim_control_done_fn done = si->ctl_done[slot];
    si->ctl_done[slot] = NULL;
    pid_t pid = si->page ? shim_page_slot_pid(si->page, slot) : 0;
    if (done && si->inst)
        done(si->inst, pid, m);
}

size_t shim_control_pids(const instance_t *inst, pid_t *pids, size_t cap)
{
    const shim_inst_t *si = inst->gate.shim;
    size_t n = 0;
    if (!si || !si->page)
        return 0;
    for (unsigned s = 0; s < SHIM_PAGE_PROCS && n < cap; s++)
        if (si->ctl[s]) {
            pid_t pid = shim_page_slot_pid(si->page, s);
            if (pid > 0)
                pids[n++] = pid;
        }
    return n;
}

int shim_control_command(instance_t *inst, pid_t pid, enum shim_msg_type cmd, shim_control_done_fn done)
{
    shim_inst_t *si = inst->gate.shim;
    if (!si || !si->page || pid <= 0)
        return -1;
    for (unsigned s = 0; s < SHIM_PAGE_PROCS; s++) {
        if (!si->ctl[s] || si->ctl_done[s] || shim_page_slot_pid(si->page, s) != pid)
            continue;
        shim_msg_t m;
        shim_msg_init(&m, cmd);
        m.seq = ++si->ctl_seq;
        if (grant_conn_command(si->ctl[s], &m) != 0)
            return -1;
        si->ctl_done[s] = done;
        return 0;
    }
    return -1;
}
