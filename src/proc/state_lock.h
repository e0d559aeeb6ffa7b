/*
 * state_lock: one vramd per state directory.
 *
 * Everything under state_dir (the workers' pid files, the cgroup subtree named after it,
 * jobs.db, results, the shim socket and grant pages) belongs to one running vramd. A second
 * vramd started on the same state_dir (an operator's `vramd --config /etc/vramd/vramd.yaml`
 * by hand while the service runs) must touch none of it: before this lock it killed the
 * running daemon's workers as "stale", then failed on the port, or ran beside it on another
 * port and removed its cgroup subtree when it stopped.
 *
 * state_lock_take opens state_dir/vramd.lock and takes an flock on it without waiting; the
 * holder writes its pid into the file. The lock lives as long as the descriptor (O_CLOEXEC:
 * no worker inherits it; the guard closes it after its fork), so a vramd that died, however
 * it died, holds nothing once its last thread has exited: a restart right after a kill -9
 * takes it then (a holder whose pid is gone or a zombie is waited for, up to 2 s).
 * Return convention: 0 taken (*fd kept open for the process's life); -1 with err, and
 * *holder the running vramd's pid when another holds it (0 when unknown or another error).
 */
#ifndef VRAMD_PROC_STATE_LOCK_H
#define VRAMD_PROC_STATE_LOCK_H

#include <stddef.h>
#include <sys/types.h>

int state_lock_take(const char *state_dir, int *fd, pid_t *holder, char *err, size_t errlen);

#endif
