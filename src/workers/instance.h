/*
 * instance: one instance's life as the rest of vramd sees it: whether it takes a request,
 * a request done on it (outliers), recycling, a hung or suspect worker, its identity
 * refreshed, every instance of a model drained. Its start, health checks, exit and free
 * are internal (supervisor_int.h).
 */
#ifndef VRAMD_WORKERS_INSTANCE_H
#define VRAMD_WORKERS_INSTANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* Drain: stop every instance (after in-flight), no restarts. */
void model_stop_all(model_t *m, const char *reason);
/* An instance finished one request (slot released by the proxy). worker_broken: the
 * exchange showed a broken worker (connection failure, reset, timeout, malformed answer,
 * 502/504 from it); INSTANCE_OUTLIER_IN_ROW of them in a row eject the instance for
 * the model's outlier.base_ejection_time x its ejections (at most outlier.max_ejection_time),
 * unless it is the model's last healthy instance. */
#define INSTANCE_OUTLIER_IN_ROW 5
void instance_request_done(instance_t *inst, bool worker_broken);
/* The same for a request that ended for vramd's own shortage (EMFILE ...): neither a
 * broken nor a sound exchange, so the run of failures is left as it was. */
void instance_request_done_local(instance_t *inst);
/* May the instance take a new request now (READY, not stopping, suspect nor ejected)? */
bool instance_usable(const instance_t *inst, uint64_t now);
/* Replace the instance: stop it once its in-flight requests are done (recycling: after
 * N requests, memory growth, OOM with recycle.on_oom). */
void instance_recycle(instance_t *inst, const char *why);
/* A request's worker went silent (response_timeout, recycle.hang_timeout): a supervised
 * worker gets SIGABRT (a core dump for the operator), then SIGKILL after stop_timeout; its
 * exit counts as a failure (RESTART_HANG) and a replacement starts on demand. An external
 * server is marked DOWN (its health check brings it back). */
void instance_kill_hung(instance_t *inst, const char *why);
/* The instance's connection broke without an answer: no new requests until its next health
 * check (started now) passes; a dead worker's exit is reaped meanwhile. */
void instance_mark_suspect(instance_t *inst, const char *why);
/* Refresh who the instance is (proc/attrib.h's attrib_refresh: an external server's listener
 * that went away is looked up again on its port, logged as external_pid); the scheduler
 * asks before it attributes a snapshot. Scans /proc: called every few seconds at most. */
void instance_refresh_identity(instance_t *inst);

#endif
