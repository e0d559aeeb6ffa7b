/*
 * http_auth: does a request carry the admin bearer token? Pure (no I/O, no state); the
 * comparison takes the same time whatever the token's first difference.
 */
#ifndef VRAMD_HTTP_HTTP_AUTH_H
#define VRAMD_HTTP_HTTP_AUTH_H

#include <stdbool.h>

#include "http/http1.h"

/* "Authorization: Bearer TOKEN" in the head equals token; true when token is NULL (none
 * configured). */
bool http_bearer_ok(const char *token, const char *head, const http1_msg_t *msg);

#endif
