/*
 * client_limit: per-client accounting for limits.per_client (pure: no loop, no daemon state).
 *
 * A client is named by a key string built from its request (client_key): its bearer token
 * (as a digest: the token itself is never kept), its peer address, or the value of a named
 * header; a request without the token or header is keyed by its address. A table of at most
 * max_clients records counts each client's queued and in-flight requests and holds its
 * queue flow (policy/queue.h: the fair order between clients). Records whose counts are both
 * 0 are idle and sit on an LRU list: when the table is full, the least recently idle record
 * is reused; when every record is busy, client_get refuses (NULL). Nothing is ever
 * allocated after client_table_init.
 *
 * Invariants: n <= cap; a record is on the idle list <=> queued == 0 && in_flight == 0 (after
 * client_touch); an idle record's flow is idle (its requests left the queues first); a key
 * is in the table at most once. Lookup is O(1) on average (hashed, chained by index).
 * Return convention: client_table_init gives 0, or -1 when out of memory.
 */
#ifndef VRAMD_POLICY_CLIENT_LIMIT_H
#define VRAMD_POLICY_CLIENT_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"
#include "http/http1.h"
#include "policy/queue.h"

#define CLIENT_KEY_MAX 96
#define CLIENTS_MAX_LIMIT 1000000 /* the largest limits.per_client.max_clients */

enum client_key_kind { CLIENT_KEY_ADDRESS = 0, CLIENT_KEY_TOKEN, CLIENT_KEY_HEADER };

typedef struct client_rec {
    char key[CLIENT_KEY_MAX];
    uint64_t hash;
    unsigned queued;    /* admitted, waiting in a model queue */
    unsigned in_flight; /* dispatched to a worker, not yet ended or requeued */
    uint64_t last_ms;   /* last admission */
    queue_flow_t flow;
    list_t idle;        /* in the table's LRU list while idle */
    int32_t next;       /* hash chain (record index), -1 = end */
    bool used;
} client_rec_t;

typedef struct client_table {
    client_rec_t *recs;
    unsigned cap, n;
    int32_t *buckets;   /* n_buckets heads (record index), -1 = empty */
    unsigned n_buckets; /* a power of two, >= 2 cap */
    list_t idle;        /* idle records, least recently idle first */
    uint64_t evicted;   /* idle records reused for another client */
} client_table_t;

int client_table_init(client_table_t *t, unsigned max_clients);
void client_table_free(client_table_t *t);
/* The record of key (created, reusing the least recently idle one when full), or NULL when
 * the table is full of busy clients. */
client_rec_t *client_get(client_table_t *t, const char *key, uint64_t now_ms);
/* Without changing the table: the record of key, or NULL when it has none. */
const client_rec_t *client_peek(const client_table_t *t, const char *key);
/* Would client_get find a record for a key the table does not hold (one unused or idle)? */
bool client_has_room(const client_table_t *t);
/* After a count changed: an idle record goes to the back of the LRU list, a busy one off it. */
void client_touch(client_table_t *t, client_rec_t *rec);
/* Records in use (busy or idle) and busy ones. */
unsigned client_count(const client_table_t *t);
unsigned client_busy_count(const client_table_t *t);

/* The key of a request: "token:<digest>", "addr:<ip>" or "hdr:<value>" ("hdr#<digest>" for a
 * long or unprintable value); header names the header for CLIENT_KEY_HEADER. peer is
 * "ip:port" or "[ip]:port" (conn_t.peer). */
void client_key(enum client_key_kind kind, const char *header, const char *head, const http1_msg_t *msg,
                const char *peer, char out[CLIENT_KEY_MAX]);

#endif
