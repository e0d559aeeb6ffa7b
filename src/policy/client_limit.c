/* client_limit: per-client accounting table and request keys. See client_limit.h. */
#include "policy/client_limit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/sha256.h"

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

int client_table_init(client_table_t *t, unsigned max_clients)
{
    memset(t, 0, sizeof *t);
    list_init(&t->idle);
    if (max_clients == 0 || max_clients > CLIENTS_MAX_LIMIT)
        return -1;
    unsigned nb = 16;
    while (nb < 2 * max_clients)
        nb *= 2;
    t->recs = calloc(max_clients, sizeof *t->recs);
    t->buckets = malloc(nb * sizeof *t->buckets);
    if (!t->recs || !t->buckets) {
        client_table_free(t);
        return -1;
    }
    for (unsigned i = 0; i < nb; i++)
        t->buckets[i] = -1;
    t->cap = max_clients;
    t->n_buckets = nb;
    return 0;
}

void client_table_free(client_table_t *t)
{
    free(t->recs);
    free(t->buckets);
    t->recs = NULL;
    t->buckets = NULL;
    t->cap = t->n = 0;
    list_init(&t->idle);
}

static client_rec_t *find(const client_table_t *t, const char *key, uint64_t h)
{
    for (int32_t i = t->buckets[h & (t->n_buckets - 1)]; i >= 0; i = t->recs[i].next)
        if (t->recs[i].hash == h && strcmp(t->recs[i].key, key) == 0)
            return &t->recs[i];
    return NULL;
}

static void unhash(client_table_t *t, client_rec_t *rec)
{
    int32_t idx = (int32_t)(rec - t->recs);
    int32_t *link = &t->buckets[rec->hash & (t->n_buckets - 1)];
    while (*link >= 0 && *link != idx)
        link = &t->recs[*link].next;
    if (*link == idx)
        *link = rec->next;
}

/* A record for a new key: an unused one, else the least recently idle one, else NULL. */
static client_rec_t *take_record(client_table_t *t)
{
    if (t->n < t->cap)
        return &t->recs[t->n++];
    list_t *lru = list_first(&t->idle);
    if (!lru)
        return NULL;
    client_rec_t *rec = list_entry(lru, client_rec_t, idle);
    list_remove(&rec->idle);
    unhash(t, rec);
    t->evicted++;
    return rec;
}

client_rec_t *client_get(client_table_t *t, const char *key, uint64_t now_ms)
{
    if (!t->recs)
        return NULL;
    uint64_t h = fnv1a(key);
    client_rec_t *rec = find(t, key, h);
    if (!rec) {
        rec = take_record(t);
        if (!rec)
            return NULL;
        memset(rec, 0, sizeof *rec);
        snprintf(rec->key, sizeof rec->key, "%s", key);
        rec->hash = h;
        rec->used = true;
        queue_flow_init(&rec->flow);
        list_init(&rec->idle);
        uint32_t b = (uint32_t)(h & (t->n_buckets - 1));
        rec->next = t->buckets[b];
        t->buckets[b] = (int32_t)(rec - t->recs);
        list_insert_tail(&t->idle, &rec->idle);
    }
    rec->last_ms = now_ms;
    return rec;
}

const client_rec_t *client_peek(const client_table_t *t, const char *key)
{
    return t->recs ? find(t, key, fnv1a(key)) : NULL;
}

bool client_has_room(const client_table_t *t)
{
    return t->recs && (t->n < t->cap || !list_empty(&t->idle));
}

void client_touch(client_table_t *t, client_rec_t *rec)
{
    list_remove(&rec->idle);
    if (rec->queued == 0 && rec->in_flight == 0)
        list_insert_tail(&t->idle, &rec->idle);
}

unsigned client_count(const client_table_t *t) { return t->n; }

unsigned client_busy_count(const client_table_t *t)
{
    unsigned idle = 0;
    list_foreach(it, &t->idle) idle++;
    return t->n - idle;
}

/* "<prefix>#<16 hex digits of sha256(v)>" */
static void digest_key(const char *prefix, const char *v, size_t len, char out[CLIENT_KEY_MAX])
{
    uint8_t d[SHA256_BYTES];
    sha256(v, len, d);
    int n = snprintf(out, CLIENT_KEY_MAX, "%s#", prefix);
    for (int i = 0; i < 8 && n > 0 && n + 2 < CLIENT_KEY_MAX; i++)
        n += snprintf(out + n, CLIENT_KEY_MAX - (size_t)n, "%02x", d[i]);
}

static bool printable(const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] >= 0x7f)
            return false;
    return true;
}

static void address_key(const char *peer, char out[CLIENT_KEY_MAX])
{
    const char *colon = strrchr(peer, ':');
    size_t len = colon ? (size_t)(colon - peer) : strlen(peer);
    if (len >= 2 && peer[0] == '[' && peer[len - 1] == ']') {
        peer++;
        len -= 2;
    }
    snprintf(out, CLIENT_KEY_MAX, "addr:%.*s", (int)len, peer);
}

void client_key(enum client_key_kind kind, const char *header, const char *head, const http1_msg_t *msg,
                const char *peer, char out[CLIENT_KEY_MAX])
{
    const char *name = kind == CLIENT_KEY_TOKEN ? "Authorization" : header;
    const http1_header_t *h = kind != CLIENT_KEY_ADDRESS && name ? http1_find_header(head, msg, name) : NULL;
    if (!h || h->value.len == 0) {
        address_key(peer, out);
        return;
    }
    const char *v = head + h->value.off;
    size_t len = h->value.len;
    if (kind == CLIENT_KEY_TOKEN) {
        if (len <= 7 || strncasecmp(v, "Bearer ", 7) != 0) {
            address_key(peer, out);
            return;
        }
        digest_key("token", v + 7, len - 7, out);
        return;
    }
    if (len <= 64 && printable(v, len))
        snprintf(out, CLIENT_KEY_MAX, "hdr:%.*s", (int)len, v);
    else
        digest_key("hdr", v, len, out);
}
