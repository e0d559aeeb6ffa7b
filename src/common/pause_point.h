/*
 * pause_point: named points where a process stops itself (SIGSTOP) when the environment
 * variable VRAMD_PAUSE_AT names them (a comma-separated list), so an end-to-end test can
 * hold vramd, or its guard, at an exact point of a race and let it go on with SIGCONT
 * (tests/faults/test_restart_races.py). Unset, a pause point is one getenv.
 *
 * Each point logs the event "paused_at" (point, pid) before it stops. Points in use:
 *   cgroup_opened   vramd at start: the cgroup subtree opened, its owner lock not yet taken
 *   guard_locked    the guard of a vramd that died: the owner lock taken, nothing swept yet
 * Invariant: callable in a single-threaded child after fork (getenv, write, raise).
 */
#ifndef VRAMD_COMMON_PAUSE_POINT_H
#define VRAMD_COMMON_PAUSE_POINT_H

void pause_point(const char *name);

#endif
