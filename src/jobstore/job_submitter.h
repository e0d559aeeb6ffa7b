/*
 * job_submitter: who submitted a job, as limits.per_client needs it to count the job's
 * attempts as that client's requests (docs/jobs.md "Per-client limits").
 *
 * Captured at POST /v1/jobs (job_submitter_capture): the submitting connection's peer
 * ("ip:port") and, when limits.per_client is keyed by a header, that header's name and
 * value in the submit request. Stored with the job as a small JSON object (the journal's
 * `client` column): {"peer":"...","header":"...","value":"..."}; header and value only when
 * captured; under `key: token`, the client key the submit's bearer token gives ("token#" and
 * 16 hex digits of its SHA-256: policy/client_limit.c), {"key": "..."}. The token itself is
 * never stored.
 *
 * Invariants: peer is at most JOB_SUBMITTER_PEER_MAX - 1 characters of [0-9a-fA-F.:[]];
 * value is at most JOB_SUBMITTER_VALUE_MAX - 1 bytes without CR, LF or NUL (a longer one is
 * not captured); parsing refuses anything else, so what it gives may go into a head as is.
 * Return convention: 0 ok, -1 not valid (or out of memory).
 */
#ifndef VRAMD_JOBSTORE_JOB_SUBMITTER_H
#define VRAMD_JOBSTORE_JOB_SUBMITTER_H

#include "http/http1.h"

#define JOB_SUBMITTER_PEER_MAX 64
#define JOB_SUBMITTER_HEADER_MAX 128
#define JOB_SUBMITTER_VALUE_MAX 1024
#define JOB_SUBMITTER_KEY_MAX 64

typedef struct job_submitter {
    char peer[JOB_SUBMITTER_PEER_MAX];     /* "" = unknown */
    char header[JOB_SUBMITTER_HEADER_MAX]; /* "" = none captured */
    char value[JOB_SUBMITTER_VALUE_MAX];
    char key[JOB_SUBMITTER_KEY_MAX];       /* "" = none: the client key under key: token */
} job_submitter_t;

/* From the submit request: peer (conn_t.peer); header_name (limits.per_client's header, NULL
 * when it is not keyed by one) looked up in head/msg. */
void job_submitter_capture(job_submitter_t *s, const char *peer, const char *header_name, const char *head,
                           const http1_msg_t *msg);
/* Sets the client key (a token digest key, "token#<hex>"): 0, or -1 (left empty) when it is
 * not one (only [0-9a-z#], 1..JOB_SUBMITTER_KEY_MAX-1 characters). */
int job_submitter_set_key(job_submitter_t *s, const char *key);
/* The JSON text to store (malloc'd), or NULL when out of memory. */
char *job_submitter_to_json(const job_submitter_t *s);
/* Back from the stored text (NULL: unknown submitter, *s empty, 0). -1 when it is not what
 * job_submitter_to_json writes (*s empty then too). */
int job_submitter_from_json(const char *json, job_submitter_t *s);

#endif
