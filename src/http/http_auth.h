/*
 * http_auth: does a request carry the admin bearer token, and does it come from a browser
 * page of another origin? Pure (no I/O, no state); the token comparison takes the same time
 * whatever the token's first difference.
 */
#ifndef VRAMD_HTTP_HTTP_AUTH_H
#define VRAMD_HTTP_HTTP_AUTH_H

#include <stdbool.h>

#include "http/http1.h"

/* "Authorization: Bearer TOKEN" in the head equals token; true when token is NULL (none
 * configured). */
bool http_bearer_ok(const char *token, const char *head, const http1_msg_t *msg);
/* A browser's request from a page of another origin (the rules of Go 1.25's
 * CrossOriginProtection): a Sec-Fetch-Site other than same-origin or none; without it, an
 * Origin whose host[:port] is not the Host header's ("null" included). A request with
 * neither header is not a browser's (curl, vramctl, a script): false. */
bool http_cross_origin(const char *head, const http1_msg_t *msg);

#endif
