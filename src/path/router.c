/*
 * router: model routes, then the JSON "model" field (a model's name, alias, or served_model).
 * See router.h. A path with a dot
 * segment ("." or "..", also percent-encoded) is refused with 400 before either: it never
 * reaches a worker (http/http_path.h says which paths), nor is a path that is one of the
 * model's memory levers (its sleep, wake, unload or reload hook, or what its preset names):
 * 403 hook_path.
 */
#include "path/router.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/model.h"
#include "core/request.h"
#include "http/http_path.h"
#include "net/conn.h"
#include "path/dispatch.h"

model_t *router_find_model_by_path(core_t *d, const char *path, size_t len, size_t *prefix_len)
{
    model_t *best = NULL;
    size_t best_len = 0;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        const char *route = m->cfg->route;
        if (!route || m->removed)
            continue;
        size_t rl = strlen(route); /* ends with '/' */
        bool match = (len >= rl && memcmp(path, route, rl) == 0) ||
                     (len == rl - 1 && memcmp(path, route, rl - 1) == 0) ||
                     (len > rl - 1 && memcmp(path, route, rl - 1) == 0 && path[rl - 1] == '?');
        if (match && rl > best_len) {
            best = m;
            best_len = rl;
        }
    }
    if (prefix_len)
        *prefix_len = best_len ? best_len - 1 : 0;
    return best;
}

/* The model whose served_model is name (the server's own name for it, "qwen3:8b"): the first
 * in the config's order; NULL when none. */
static model_t *model_by_served_name(core_t *d, const char *name)
{
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (!m->removed && m->cfg->served_model && strcmp(m->cfg->served_model, name) == 0)
            return m;
    }
    return NULL;
}

/* The model named by a JSON body's "model" member, for POST /v1/...: a model's name or alias,
 * else its served_model. */
static model_t *model_from_body(conn_t *c, request_t *r, bool *bad_json, char *name, size_t cap)
{
    *bad_json = false;
    name[0] = '\0';
    if (r->body.len == 0)
        return NULL;
    cJSON *doc = cJSON_ParseWithLength(r->body.data, r->body.len);
    if (!doc) {
        *bad_json = true;
        return NULL;
    }
    model_t *m = NULL;
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (cJSON_IsString(mv) && mv->valuestring) {
        snprintf(name, cap, "%s", mv->valuestring);
        m = model_find(c->core, mv->valuestring);
        if (!m)
            m = model_by_served_name(c->core, mv->valuestring);
    }
    cJSON_Delete(doc);
    return m;
}

/* The length of r's path without its query; *path the target's first byte. */
static size_t path_of(const request_t *r, const char **path)
{
    *path = r->head + r->msg.target.off;
    size_t qpos = 0;
    while (qpos < r->msg.target.len && (*path)[qpos] != '?')
        qpos++;
    return qpos;
}

/* A POST under /v1/ may name its model in its JSON body. */
static bool body_may_name_model(const request_t *r, const char *path, size_t qpos)
{
    return http1_span_eq(r->head, r->msg.method, "POST") && qpos >= 4 && memcmp(path, "/v1/", 4) == 0;
}

/* A path with a dot segment is answered 400 and never forwarded (http/http_path.h). */
static bool refused_dot_segment(conn_t *c, const char *path, size_t len)
{
    if (!http_path_has_dot_segment(path, len))
        return false;
    conn_respond_error(c, 400, "bad_request", NULL, -1, false,
                       "request path has a dot segment (\".\" or \"..\", also as %%2e): refused, never forwarded");
    return true;
}

/* a's path part (to '?') equals b's, b percent-decoded as a server would, trailing '/'
 * ignored on both ("/sleep", "/sleep/" and "/sl%65ep" are one path). */
static bool same_path(const char *a, const char *b, size_t blen)
{
    size_t alen = strcspn(a, "?");
    while (alen > 1 && a[alen - 1] == '/')
        alen--;
    while (blen > 1 && b[blen - 1] == '/')
        blen--;
    size_t i = 0, j = 0;
    while (i < alen && j < blen) {
        int ch = (unsigned char)b[j];
        if (ch == '%' && j + 2 < blen && isxdigit((unsigned char)b[j + 1]) &&
            isxdigit((unsigned char)b[j + 2])) {
            char hex[3] = {b[j + 1], b[j + 2], '\0'};
            ch = (int)strtol(hex, NULL, 16);
            j += 3;
        } else {
            j++;
        }
        if ((unsigned char)a[i++] != ch)
            return false;
    }
    return i == alen && j == blen;
}

/* The path the worker would see is one of the model's memory hooks (sleep, wake, unload,
 * reload: vramd's own levers, which a client pulling would make vramd's book wrong) or a
 * path its preset names (config_preset_denied_paths): 403 hook_path, never forwarded.
 * A hook with a body is not refused by its path: its path may serve requests too (Ollama
 * unloads through /api/generate with keep_alive 0); presets name the dedicated ones.
 * clear_cache is not refused: a client emptying the cache only gives memory back. */
static bool refused_hook_path(conn_t *c, const model_t *m, const char *path, size_t qpos, size_t prefix)
{
    const model_config_t *mc = m->cfg;
    size_t skip = mc->strip && prefix <= qpos ? prefix : 0;
    const char *fwd = path + skip;
    size_t flen = qpos - skip;
    if (flen == 0) {
        fwd = "/";
        flen = 1;
    }
    const config_hook_t *hooks[] = {&mc->sleep, &mc->wake, &mc->unload, &mc->reload};
    const char *hit = NULL;
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0] && !hit; i++)
        if (hooks[i]->set && hooks[i]->path && !hooks[i]->body && same_path(hooks[i]->path, fwd, flen))
            hit = hooks[i]->path;
    for (const char *const *d = config_preset_denied_paths(mc->preset); *d && !hit; d++)
        if (same_path(*d, fwd, flen))
            hit = *d;
    if (!hit)
        return false;
    conn_respond_error(c, 403, "hook_path", m->name, -1, false,
                       "%.*s is a memory lever of model %s (%s) that only vramd pulls: a client calling it would "
                       "change the GPU memory behind vramd's book; use the admin routes (load, unload, pin)",
                       (int)(flen > 200 ? 200 : flen), fwd, m->name, hit);
    return true;
}

static void refuse_unknown(conn_t *c, const char *path, size_t qpos)
{
    conn_respond_error(c, 404, "unknown_model", NULL, -1, false, "no model serves %.*s",
                       (int)(qpos > 200 ? 200 : qpos), path);
}

bool router_head_refused(conn_t *c, request_t *r)
{
    const char *path;
    size_t qpos = path_of(r, &path);
    if (refused_dot_segment(c, path, r->msg.target.len))
        return true;
    size_t prefix = 0;
    model_t *m = router_find_model_by_path(c->core, path, r->msg.target.len, &prefix);
    if (m && refused_hook_path(c, m, path, qpos, prefix))
        return true;
    if (m)
        return dispatch_head_refused(c, r, m);
    if (body_may_name_model(r, path, qpos))
        return dispatch_head_refused(c, r, NULL);
    refuse_unknown(c, path, qpos);
    return true;
}

void router_route(conn_t *c, request_t *r)
{
    core_t *d = c->core;
    const char *path;
    size_t qpos = path_of(r, &path);
    size_t plen = r->msg.target.len;
    if (refused_dot_segment(c, path, plen))
        return;
    size_t prefix = 0;
    model_t *m = router_find_model_by_path(d, path, plen, &prefix);
    if (m) {
        if (!refused_hook_path(c, m, path, qpos, prefix))
            dispatch_admit(c, r, m, prefix);
        return;
    }
    if (body_may_name_model(r, path, qpos)) {
        bool bad_json;
        char name[128];
        m = model_from_body(c, r, &bad_json, name, sizeof name);
        if (m) {
            if (!refused_hook_path(c, m, path, qpos, 0))
                dispatch_admit(c, r, m, 0);
            return;
        }
        if (bad_json) {
            conn_respond_error(c, 400, "bad_request", NULL, -1, false, "request body is not valid JSON");
            return;
        }
        if (name[0]) {
            conn_respond_error(c, 404, "unknown_model", name, -1, false, "no model named \"%s\"", name);
            return;
        }
    }
    refuse_unknown(c, path, qpos);
}
