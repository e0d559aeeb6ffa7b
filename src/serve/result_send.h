/*
 * result_send: stream a stored job result from its file to a client connection, without
 * holding the file in memory and without flooding a slow client.
 *
 * The response head (200, Content-Type, Content-Length) is written at once; the body
 * follows in 64 KiB pieces read with pread, written only while the connection's write
 * backlog is under CONN_BACKLOG_MAX; when it is over, the send asks the connection to tell
 * it once the client has read enough (conn_want_drained). A HEAD request gets the head only.
 *
 * Ownership and safety: the send owns the fd (closed when it ends) and, while it runs, the
 * request's answer: its ops are cancel (client gone, drain timeout: the send ends at once)
 * and drained. A failed write means the send was already ended by cancel: it stops there.
 * When the last byte is written the send ends and calls conn_request_done.
 * Return convention: 0 started (the request is answered by the send), -1 nothing was
 * written (the fd is closed; the caller answers with an error).
 */
#ifndef VRAMD_SERVE_RESULT_SEND_H
#define VRAMD_SERVE_RESULT_SEND_H

#include <stdint.h>

#include "core/types.h"

int result_send_start(conn_t *c, request_t *r, int fd, uint64_t size, const char *content_type);

#endif
