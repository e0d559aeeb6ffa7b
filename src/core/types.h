/*
 * types: forward declarations of the daemon's runtime objects, so that a header can name
 * a pointer to one without including the header that defines it.
 *
 *   core_t      what every module shares: loop, clock, config, registry (core/core.h)
 *   vramd_t     the composition root: listener, signals, lifecycle (daemon/vramd.h)
 *   model_t     runtime of one configured model: queue, instances, state (core/model.h)
 *   instance_t  one worker: a supervised process or an external server (core/model.h)
 *   conn_t      one client connection (net/conn.h)
 *   request_t   one request, owned by its conn while the client is there (core/request.h)
 *   upstream_t  one connection from vramd to a worker instance (path/proxy.c)
 */
#ifndef VRAMD_CORE_TYPES_H
#define VRAMD_CORE_TYPES_H

typedef struct core core_t;
typedef struct vramd vramd_t;
typedef struct model model_t;
typedef struct instance instance_t;
typedef struct conn conn_t;
typedef struct request request_t;
typedef struct upstream upstream_t;

#endif
