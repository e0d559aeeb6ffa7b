/*
 * worker_cmds: the containers a previous run left, removed at start. The stop commands
 * and placeholders are internal (supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_WORKER_CMDS_H
#define VRAMD_WORKERS_WORKER_CMDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* At start, before any worker: remove every container that a previous run of this daemon
 * left (label vramd.owner=<its subtree name>), for each container model's engine and env,
 * synchronously, each command bounded. Returns how many were removed. */
size_t supervisor_sweep_containers(const config_t *cfg);

#endif
