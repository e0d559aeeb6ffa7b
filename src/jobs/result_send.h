/*
 * result_send: stream a stored job result from its file to a client connection, without
 * holding the file in memory and without flooding a slow client.
 *
 * The response head (200, Content-Type, Content-Length) is written at once; the body
 * follows in 64 KiB pieces read with pread, written only while the connection's write
 * backlog is under RESULT_SEND_BACKLOG_MAX; when it is over, the send waits for a 2 ms
 * timer tick and looks again. A HEAD request gets the head only.
 *
 * Ownership and safety: the send owns the fd (closed when it ends). It never holds a
 * dangling pointer to the request: the request's wait_link is linked into the send's own
 * anchor list, and conn.c's request_cancel (client gone, drain timeout) unlinks it, which
 * the send sees (anchor empty) before it touches the request again. When the last byte is
 * written the send unlinks itself and calls conn_request_done.
 * Return convention: 0 started (the request is answered by the send), -1 nothing was
 * written (the fd is closed; the caller answers with an error).
 */
#ifndef VRAMD_JOBS_RESULT_SEND_H
#define VRAMD_JOBS_RESULT_SEND_H

#include <stdint.h>

#include "core/types.h"

#define RESULT_SEND_BACKLOG_MAX (1024 * 1024)

int result_send_start(conn_t *c, request_t *r, int fd, uint64_t size, const char *content_type);

#endif
