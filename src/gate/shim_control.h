/*
 * shim_control: vramd's side of the shims' control connections (gpu/shim_abi.h): a process
 * whose allocations are parkable opens one, and the shim park tier (park_shim.c) commands it
 * (PARK, RESTORE) through this module. Transport of commands and answers only: what a park
 * means for the instance is park_shim.c's.
 *
 * Rules: one control connection per slot of an instance's page (its pid checked on HELLO);
 * one command waits per connection; its done callback runs exactly once, later, from the
 * loop: with the answer, or with NULL when the connection closed first (the process died or
 * its shim gave up). No callback runs for an instance whose shim state was dropped
 * (shim_grants_free) meanwhile.
 * Return convention: 0 ok, -1 error.
 */
#ifndef VRAMD_GATE_SHIM_CONTROL_H
#define VRAMD_GATE_SHIM_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/types.h"
#include "gpu/shim_abi.h"

typedef void (*shim_control_done_fn)(instance_t *inst, pid_t pid, const shim_msg_t *answer);

/* The pids of inst's processes that have a control connection (at most cap). */
size_t shim_control_pids(const instance_t *inst, pid_t *pids, size_t cap);
/* Send cmd (SHIM_MSG_PARK or SHIM_MSG_RESTORE) to pid's control connection; done follows. -1
 * when pid has none, or a command waits there already. */
int shim_control_command(instance_t *inst, pid_t pid, enum shim_msg_type cmd, shim_control_done_fn done);

#endif
