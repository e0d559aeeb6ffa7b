/* job_submitter: a job's submitter captured, stored and read back. See job_submitter.h. */
#include "jobstore/job_submitter.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

static bool peer_ok(const char *p, size_t len)
{
    if (len == 0 || len >= JOB_SUBMITTER_PEER_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!p[i] || !strchr("0123456789abcdefABCDEF.:[]", p[i]))
            return false;
    return true;
}

static bool value_ok(const char *v, size_t len)
{
    if (len == 0 || len >= JOB_SUBMITTER_VALUE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
            return false;
    return true;
}

static bool header_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len >= JOB_SUBMITTER_HEADER_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)n[i] <= 0x20 || (unsigned char)n[i] >= 0x7f || n[i] == ':')
            return false;
    return true;
}

void job_submitter_capture(job_submitter_t *s, const char *peer, const char *header_name, const char *head,
                           const http1_msg_t *msg)
{
    memset(s, 0, sizeof *s);
    if (peer && peer_ok(peer, strlen(peer)))
        snprintf(s->peer, sizeof s->peer, "%s", peer);
    if (!header_name || !header_name_ok(header_name) || !head || !msg)
        return;
    const http1_header_t *h = http1_find_header(head, msg, header_name);
    if (!h || !value_ok(head + h->value.off, h->value.len))
        return;
    snprintf(s->header, sizeof s->header, "%s", header_name);
    memcpy(s->value, head + h->value.off, h->value.len);
    s->value[h->value.len] = '\0';
}

static bool key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n >= JOB_SUBMITTER_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'z') || k[i] == '#'))
            return false;
    return true;
}

int job_submitter_set_key(job_submitter_t *s, const char *key)
{
    s->key[0] = '\0';
    if (!key || !key_ok(key))
        return -1;
    snprintf(s->key, sizeof s->key, "%s", key);
    return 0;
}

char *job_submitter_to_json(const job_submitter_t *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "peer", s->peer);
    if (s->header[0]) {
        cJSON_AddStringToObject(o, "header", s->header);
        cJSON_AddStringToObject(o, "value", s->value);
    }
    if (s->key[0])
        cJSON_AddStringToObject(o, "key", s->key);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

int job_submitter_from_json(const char *json, job_submitter_t *s)
{
    memset(s, 0, sizeof *s);
    if (!json)
        return 0;
    cJSON *o = cJSON_Parse(json);
    const cJSON *peer = cJSON_GetObjectItemCaseSensitive(o, "peer");
    const cJSON *header = cJSON_GetObjectItemCaseSensitive(o, "header");
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(o, "value");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(o, "key");
    bool ok = cJSON_IsObject(o) && cJSON_IsString(peer) &&
              (peer->valuestring[0] == '\0' || peer_ok(peer->valuestring, strlen(peer->valuestring)));
    bool has_header = header != NULL || value != NULL;
    if (ok && has_header)
        ok = cJSON_IsString(header) && cJSON_IsString(value) && header_name_ok(header->valuestring) &&
             value_ok(value->valuestring, strlen(value->valuestring));
    if (ok && key)
        ok = cJSON_IsString(key) && key_ok(key->valuestring);
    if (ok) {
        if (key)
            snprintf(s->key, sizeof s->key, "%s", key->valuestring);
        snprintf(s->peer, sizeof s->peer, "%s", peer->valuestring);
        if (has_header) {
            snprintf(s->header, sizeof s->header, "%s", header->valuestring);
            snprintf(s->value, sizeof s->value, "%s", value->valuestring);
        }
    }
    cJSON_Delete(o);
    return ok ? 0 : -1;
}
