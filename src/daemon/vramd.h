/*
 * vramd: the composition root. It builds the core, creates the model runtimes, wires the
 * layers together (the connections' request handler, the scheduler's actions, the core's
 * requeue hook, who listens to which core event) and runs the lifecycle: start, listen,
 * signals, reload, drain, stop. Nothing calls up into it: what the rest needs from it goes
 * through the function pointers and listeners it registers at start.
 *
 * Lifecycle: vramd_init (config loaded, stale workers killed, listener bound) -> vramd_run
 * (loop) -> drain (SIGTERM, SIGINT or POST /v1/admin/drain: stop admitting, finish queued
 * and in-flight requests within limits.drain_timeout, stop workers) -> loop ends -> exit 0.
 * Reload (SIGHUP or POST /v1/admin/reload) parses a new config and swaps it in only when it
 * is valid and changes nothing that only a restart applies (listen and gpu.* are refused,
 * and admin_token_file stays required while the bound address is not loopback);
 * models keep their runtime (queue, instances) across a reload by name.
 * Invariant: core.cfg is always a fully validated config.
 */
#ifndef VRAMD_DAEMON_VRAMD_H
#define VRAMD_DAEMON_VRAMD_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/core.h"
#include "proc/cgroup.h"

struct vramd {
    core_t core;             /* what the modules share */
    char *config_path;
    uv_tcp_t listener;
    uv_signal_t sig_hup, sig_term, sig_int;
    uv_timer_t drain_timer;
    bool stopped;            /* every worker gone, uv_stop called (once) */
    int exit_code;
    char bound_host[64];     /* the listener's address as bound at start (reloads never re-bind) */
    int bound_port;
    int state_lock_fd;       /* state_dir/vramd.lock, flocked for this process's life (proc/state_lock.h) */
    int guard_fd;            /* write end of the guard's pipe: closed only by this process's end */
    cgroup_tree_t cgroups;   /* the workers' cgroup subtree, opened at start (core.cgroups points here) */
};

int vramd_init(vramd_t *d, uv_loop_t *loop, const char *config_path, char *err, size_t errlen);
int vramd_run(vramd_t *d);
/* Parse the config file again and swap it in; err gets the message on failure. */
int vramd_reload(vramd_t *d, char *err, size_t errlen);
void vramd_drain(vramd_t *d, const char *why);

#endif
