/*
 * types: forward declarations of the daemon's runtime objects, so that modules can point
 * at each other without including each other's headers.
 *
 *   vramd_t     the daemon: loop, current config, models, listener, counters (daemon/vramd.h)
 *   model_t     runtime of one configured model: queue, instances, state (workers/supervisor.h)
 *   instance_t  one worker: a supervised process or an external server (workers/supervisor.h)
 *   conn_t      one client connection (net/conn.h)
 *   request_t   one proxied request, owned by its conn while the client is there (net/conn.h)
 *   upstream_t  one connection from vramd to a worker instance (net/proxy.h)
 */
#ifndef VRAMD_DAEMON_TYPES_H
#define VRAMD_DAEMON_TYPES_H

typedef struct vramd vramd_t;
typedef struct model model_t;
typedef struct instance instance_t;
typedef struct conn conn_t;
typedef struct request request_t;
typedef struct upstream upstream_t;

#endif
