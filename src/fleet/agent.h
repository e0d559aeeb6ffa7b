/*
 * agent: vramd's HAProxy agent-check listener (fleet.agent_listen), on the event loop.
 *
 * HAProxy connects (every agent-inter), optionally sends its `agent-send` string, reads
 * one line and closes. vramd reads at most AGENT_REQ_MAX bytes; the request is complete at
 * the first LF or CR, at the client's FIN, when that many bytes arrived, or when
 * fleet.agent_wait passed without a byte (since the connect, or the last byte): so a
 * server line without agent-send gets the host's answer after agent_wait, and an
 * agent-send without "\n" is answered too. The answer (fleet/agent_line.h) is computed
 * from the ledger at that moment (fleet/agent_view.h), written, and the connection closed.
 * After the answer vramd sends FIN and waits for the peer to close, reading and dropping
 * what it still sends (a lingering close: unread bytes would turn the close into a reset).
 * Bounds: a connection lives at most fleet.agent_timeout whatever the peer does (then it
 * is closed, answered or not); at most fleet.agent_max_connections are open at once (more
 * are accepted and closed at once, counted). A bad agent-send is answered
 * `0% maxconn:1 ready down #bad agent-send: ...` (visible on HAProxy's stats page).
 *
 * The listener is bound at start (vramd_init) and stays open while vramd drains, so that
 * HAProxy hears "drain" until the process ends; a reload never re-binds it.
 * Ownership: each connection is malloc'ed at accept and freed in the close callback of
 * the last of its two handles (socket, timer); fleet_agent_stop closes the listener and
 * every open connection (before the loop's final walk). Loop thread only.
 */
#ifndef VRAMD_FLEET_AGENT_H
#define VRAMD_FLEET_AGENT_H

#include <stdint.h>

#include "core/core.h"

/* Counters for /metrics. */
typedef struct fleet_agent_stats {
    uint64_t checks_host, checks_model;  /* answered, by target */
    uint64_t bad_requests;               /* answered down #bad agent-send */
    uint64_t refused;                    /* over agent_max_connections */
    uint64_t timed_out;                  /* closed by agent_timeout before the answer was written */
} fleet_agent_stats_t;

/* Bind cfg->fleet.agent_host:agent_port (nothing when agent_listen is off). 0, or -1 with
 * a message in err. */
int fleet_agent_start(core_t *core, char *err, size_t errlen);
/* Close the listener and every connection (their memory is freed by the loop). */
void fleet_agent_stop(void);
/* The counters since start. */
const fleet_agent_stats_t *fleet_agent_stats(void);

#endif
