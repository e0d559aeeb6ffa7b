/*
 * conn_int: the parts of a client connection (net/conn.c) kept in their own files, each
 * used by conn.c only and calling nothing in it (no cycle): conn_request.c builds a request
 * from a parsed head, asks the head handler about it, and words a refusal; conn_watch.c reads what the kernel knows of a
 * socket (is the peer gone? did the client take answer bytes?); conn_state.c checks and
 * logs state changes. Not for use outside src/net/conn*.c.
 */
#ifndef VRAMD_NET_CONN_INT_H
#define VRAMD_NET_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/request.h"
#include "net/conn.h"
#include "http/http1.h"

/* conn_request.c ---------------------------------------------------------------------- */

/* A request object for a parsed head at the start of c->in (its bytes and the n_headers
 * slots of hdrs copied out); NULL when out of memory. */
request_t *conn_request_new(conn_t *c, const http1_msg_t *msg, const http1_header_t *hdrs);
/* Expect: 100-continue: the handlers' on_head looks at c->req's head before any of its body
 * is read (conn.h). A refusal is answered with Connection: close and the connection closes
 * without reading the body (a lingering close discards what the client sends meanwhile).
 * True when refused: the request has ended. */
bool conn_refused_on_head(conn_t *c);
/* The status and vramd error code for a head the parser refused: 431 header_too_large,
 * 414 uri_too_long, 501 not_implemented, 505 / 400 bad_request. */
int conn_refusal_status(const http1_error_t *e, const char **code);
/* vramd's error body {"error":{"code","message"[,"model"][,"retry_after_s"][,"stage"]}} into
 * out (cap bytes, always terminated); its length. stage: a literal, or NULL for none. */
int conn_error_body(char *out, size_t cap, const char *code, const char *model, int retry_after_s,
                    const char *stage, const char *msg);

/* conn_state.c ------------------------------------------------------------------------ */

/* Change c's state (a no-op when it is already s): an illegal transition is a bug
 * (CHECK_IF); the change is logged at debug level with the caller's line. */
void conn_set_state_at(conn_t *c, enum conn_state s, int line);
#define conn_set_state(c, s) conn_set_state_at((c), (s), __LINE__)

/* conn_watch.c ------------------------------------------------------------------------ */

/* The peer has sent FIN or RST (TCP state CLOSE_WAIT or CLOSE), seen without reading the
 * socket, so a client whose reading is paused is still seen leaving. false when unknown. */
bool conn_peer_closed(const uv_tcp_t *tcp);

/* Before queueing len more bytes on tcp at now_ms. */
void conn_send_queued(conn_send_watch_t *w, const uv_tcp_t *tcp, size_t len, uint64_t now_ms);
/* How long (ms) answer bytes have waited on tcp with no progress as of now_ms; 0 when none
 * wait or some were taken since the last check (which then counts as progress). */
uint64_t conn_send_stalled_ms(conn_send_watch_t *w, const uv_tcp_t *tcp, uint64_t now_ms);
/* Answer bytes queued on tcp that the kernel has not taken yet. */
size_t conn_send_waiting(const uv_tcp_t *tcp);

#define CONN_PAUSED_CHECK_MS 250 /* how often a paused connection's socket is asked whether its peer left */

/* When the watch timer should look next (ms from now_ms): every CONN_PAUSED_CHECK_MS while
 * reading is paused; while answer bytes wait, at the send_timeout deadline but at least every
 * quarter of it; UINT64_MAX when neither applies. */
uint64_t conn_watch_next_ms(const conn_t *c, uint64_t now_ms);
/* At the connection cap: the oldest connection in a lingering close (answered, FIN sent,
 * waiting for the client's), whose slot a new client may take; NULL when none. */
conn_t *conn_oldest_lingering(core_t *core);
/* "ip:port" or "[ip6]:port" of the peer into out; left as it was when unknown. */
void conn_peer_name(uv_tcp_t *tcp, char *out, size_t cap);

#endif
