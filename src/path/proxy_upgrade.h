/*
 * proxy_upgrade: protocol upgrades (WebSocket) passed through to a worker, for models whose
 * config lists them (`upgrade: [websocket]`). See proxy_upgrade.c for the rules.
 */
#ifndef VRAMD_PATH_PROXY_UPGRADE_H
#define VRAMD_PATH_PROXY_UPGRADE_H

#include <stddef.h>
#include <stdint.h>

#include "core/types.h"

/* r is a GET with Connection: upgrade and an Upgrade header, routed to m (net/conn.c has
 * refused every other upgrade): refused (400 upgrade_not_allowed, 503, 429), or forwarded to
 * a ready instance of m; the worker's 101 turns the connection into a tunnel, any other
 * answer goes back as a normal response (Connection: close). */
void proxy_upgrade_admit(conn_t *c, request_t *r, model_t *m, size_t strip_len);

/* Upgraded connections open now (the worker answered 101), and opened since start. */
unsigned proxy_upgrade_open(void);
uint64_t proxy_upgrade_opened_total(void);

/* Subscribes to CORE_EV_INSTANCE_DOWN / _GONE: a worker that stops closes its tunnels. */
void proxy_upgrade_init(core_t *core);

#endif
