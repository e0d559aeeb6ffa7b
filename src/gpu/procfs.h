/*
 * procfs: the few facts about processes that vramd reads from /proc to attribute GPU
 * memory to the workers it manages.
 *   procfs_pgid(pid)         process group of pid, or -1
 *   procfs_listener(port)    pid of a process listening on 127.0.0.1/::/0.0.0.0 TCP port,
 *                            or 0 when none is visible (another PID namespace, no
 *                            permission): found through /proc/net/tcp{,6} inodes and
 *                            /proc/<pid>/fd links. It scans every process: call it rarely.
 *   procfs_port_owned(port, pgid)
 *                            is the process listening on the port in process group pgid?
 *                            1 yes, 0 no (another process has it), -1 cannot tell (nothing
 *                            listening that this namespace shows, or no permission). Looks
 *                            at the group leader's (pid == pgid) descriptors first, and scans
 *                            every process only when the leader does not hold the socket.
 */
#ifndef VRAMD_GPU_PROCFS_H
#define VRAMD_GPU_PROCFS_H

#include <stddef.h>
#include <sys/types.h>

pid_t procfs_pgid(pid_t pid);
/* Has pid exited (gone, or a zombie not yet reaped)? */
int procfs_is_dead(pid_t pid);
pid_t procfs_listener(int port);
/* The process's name (/proc/PID/comm, at most 15 characters), into out: 0, or -1. */
int procfs_comm(pid_t pid, char *out, size_t outlen);
int procfs_port_owned(int port, pid_t pgid);

#endif
