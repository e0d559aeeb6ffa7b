/*
 * http_auth: does a request carry the admin bearer token, does it come from a browser page
 * of another origin, does its Host name one of vramd's names? Pure (no I/O, no state); the token comparison takes the same time
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
/* The Host header (its port, if any, ignored) names something a DNS-rebinding page cannot
 * stand behind: an IP literal (dotted IPv4, bracketed IPv6), localhost or a name under
 * .localhost (a trailing root dot ignored), or one of names[0..n_names) (case-insensitive;
 * "*.example.com" matches any name under example.com, not example.com itself). A request
 * with no Host, or an empty one, names nothing a page could rebind: true. */
bool http_host_allowed(const char *head, const http1_msg_t *msg, char *const *names, size_t n_names);

#endif
