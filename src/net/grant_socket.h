/*
 * grant_socket: the Unix stream socket the CUDA shims of vramd's workers ask for memory on
 * (gpu/shim_abi.h: fixed 64-byte messages). This module is transport only: it accepts,
 * frames, validates, and hands each HELLO and ASK up through the handlers its owner gave
 * grant_socket_listen (gate/shim_grants.c, the one owner); the answers come back through
 * grant_conn_answer. It knows nothing of instances.
 *
 * Rules: the first message of a connection must be HELLO, every later one ASK, and at most
 * one ASK waits for its answer per connection (a shim asks from one thread at a time). A
 * connection that began with HELLO_CONTROL is a control connection instead: vramd sends a
 * command (grant_conn_command, one at a time) and the only message the shim may send is that
 * command's answer (PARK_DONE .. RESTORE_FAILED, the same seq), handed up by `control`; a
 * message that breaks a rule, or is not valid (shim_msg_valid), closes the connection with
 * `malformed` set. The peer's pid comes from SO_PEERCRED (a host pid). Bounds (limits): at
 * most max_conns connections open in all and per_peer per peer pid (more are accepted and
 * closed at once, counted), and a connection without its HELLO hello_timeout_ms after its
 * accept is closed (counted; not malformed: no worker is blamed for it).
 * Lifetime: a grant_conn_t lives until its closed handler ran (the module frees it after);
 * its owner must not use it after that. grant_socket_close closes every connection
 * (closed handlers run) and the listener; the socket file is removed.
 * Return convention: 0 ok, -1 error (err says why).
 */
#ifndef VRAMD_NET_GRANT_SOCKET_H
#define VRAMD_NET_GRANT_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "gpu/shim_abi.h"

typedef struct grant_socket grant_socket_t;
typedef struct grant_conn grant_conn_t;

typedef struct grant_socket_handlers {
    /* A HELLO: the owner the connection belongs to from now on (HELLO_OK is sent), or NULL
     * to close it (counted as malformed: a token or slot that is not the sender's). */
    void *(*hello)(void *ctx, grant_conn_t *c, const shim_msg_t *m, pid_t peer_pid);
    /* An ASK on a connection whose hello returned owner; answer with grant_conn_answer. */
    void (*ask)(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m);
    /* The answer to a command on a control connection. */
    void (*control)(void *ctx, grant_conn_t *c, void *owner, const shim_msg_t *m);
    /* The connection is gone (the peer closed it, a malformed message, or close_conn/close).
     * owner: what hello returned (NULL before a HELLO). */
    void (*closed)(void *ctx, grant_conn_t *c, void *owner, bool malformed);
} grant_socket_handlers_t;

typedef struct grant_socket_stats {
    uint64_t accepted, refused_full, refused_peer, hello_timeouts, malformed, asks, answers;
    unsigned open;
} grant_socket_stats_t;

typedef struct grant_socket_limits {
    unsigned max_conns;        /* connections open at once, in all (0 is taken as 1) */
    unsigned per_peer;         /* ... per peer pid (0 is taken as 1) */
    uint64_t hello_timeout_ms; /* a connection's HELLO must come within this of its accept */
} grant_socket_limits_t;

grant_socket_t *grant_socket_listen(uv_loop_t *loop, const char *path, const grant_socket_limits_t *lim,
                                    const grant_socket_handlers_t *h, void *ctx, char *err, size_t errlen);
void grant_socket_close(grant_socket_t *s);
const char *grant_socket_path(const grant_socket_t *s);
void grant_socket_stats(const grant_socket_t *s, grant_socket_stats_t *out);

/* Answer the ASK that waits (GRANT or REFUSE, its seq); -1 when none waits or the
 * connection is closing. */
int grant_conn_answer(grant_conn_t *c, const shim_msg_t *m);
/* Send a command (PARK, RESTORE; m->seq is echoed by its answer) on a control connection;
 * -1 when it is not one, is closing, or a command waits there already. */
int grant_conn_command(grant_conn_t *c, const shim_msg_t *m);
/* Did the connection begin with HELLO_CONTROL? */
bool grant_conn_is_control(const grant_conn_t *c);
/* Close one connection (its closed handler follows, malformed false). */
void grant_conn_close(grant_conn_t *c);
pid_t grant_conn_pid(const grant_conn_t *c);
/* The slot its HELLO named (aux), SHIM_PAGE_PROCS before a HELLO. */
unsigned grant_conn_slot(const grant_conn_t *c);

#endif
