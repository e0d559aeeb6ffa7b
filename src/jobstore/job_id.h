/*
 * job_id: job identifiers. An id is 128 bits from the kernel's CSPRNG (getrandom(2)),
 * written as exactly 32 lowercase hex characters. Ids are unguessable (knowing one id
 * tells nothing about another), and they are the only thing result file names are made
 * of, so a strict validator is the single gate between client input and the filesystem:
 * a string that passes job_id_valid contains no '/', '.', '%', NUL or anything else that
 * could name a path outside the result store.
 *
 * Thread-safe (no state). Return convention: job_id_generate 0 = ok, -1 = the kernel gave
 * no randomness (errno set; practically never).
 */
#ifndef VRAMD_JOBSTORE_JOB_ID_H
#define VRAMD_JOBSTORE_JOB_ID_H

#include <stdbool.h>
#include <stddef.h>

#define JOB_ID_LEN 32          /* hex characters, without the NUL */
#define JOB_ID_SIZE (JOB_ID_LEN + 1)

/* Write a new id and its NUL into out[JOB_ID_SIZE]. */
int job_id_generate(char out[JOB_ID_SIZE]);
/* true only for a NUL-terminated string of exactly 32 characters in [0-9a-f]. NULL -> false. */
bool job_id_valid(const char *s);
/* The same for a (pointer, length) slice, e.g. a path segment not NUL-terminated. */
bool job_id_valid_n(const char *s, size_t len);

#endif
