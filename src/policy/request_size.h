/*
 * request_size: the input size a request declares, read from its JSON body at the model's
 * memory.size_field pointers (RFC 6901): the product of the values found there, each a
 * non-negative number or a string holding one ("1024"). Pure: bytes in, a number out.
 *
 * 0 means "no size": no pointer configured, the body is not a JSON document, or a pointer
 * finds nothing or something that is not a number. The product saturates at UINT64_MAX.
 * Bodies over REQUEST_SIZE_MAX_BODY bytes are not parsed (0): the cost of a size must stay
 * far below the request's own.
 */
#ifndef VRAMD_POLICY_REQUEST_SIZE_H
#define VRAMD_POLICY_REQUEST_SIZE_H

#include <stddef.h>
#include <stdint.h>

#define REQUEST_SIZE_MAX_FIELDS 4
#define REQUEST_SIZE_MAX_BODY (1024u * 1024u)

uint64_t request_size_of(const char *body, size_t len, char *const *pointers, size_t n_pointers);

#endif
