/*
 * router: model routes, then the JSON "model" field (a model's name, alias, or served_model).
 * See router.h. An alias_of entry (config.h) is a name or route served by whichever of its
 * models is loaded or cheapest to bring (alias_target); a body naming it is renamed to the
 * chosen model's name for its server. A path with a dot
 * segment ("." or "..", also percent-encoded) is refused with 400 before either: it never
 * reaches a worker (http/http_path.h says which paths), nor is a path that is one of the
 * model's memory levers (its sleep, wake, unload or reload hook, or what its preset names):
 * 403 hook_path. A model with pin_model (llama.cpp's router) is reached only with its
 * served_model: a body's "model" that is absent or names the entry is set to it, another
 * name (body or `model=` query) is 400 wrong_model (pin_refused).
 */
#include "path/router.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/model.h"
#include "core/request.h"
#include "http/http_path.h"
#include "net/conn.h"
#include "common/log.h"
#include "path/dispatch.h"
#include "sched/scheduler.h"

static bool model_member(const char *s, size_t len, size_t *open, size_t *vstart, size_t *vend);
static bool splice_body(request_t *r, size_t from, size_t to, const char *text);

/* The length of route (normalised: ends with '/') when it is a prefix of path (the path
 * itself without the '/', or followed by a query), else 0. */
static size_t route_match(const char *route, const char *path, size_t len)
{
    size_t rl = strlen(route);
    bool match = (len >= rl && memcmp(path, route, rl) == 0) || (len == rl - 1 && memcmp(path, route, rl - 1) == 0) ||
                 (len > rl - 1 && memcmp(path, route, rl - 1) == 0 && path[rl - 1] == '?');
    return match ? rl : 0;
}

model_t *router_find_model_by_path(core_t *d, const char *path, size_t len, size_t *prefix_len)
{
    model_t *best = NULL;
    size_t best_len = 0;
    list_foreach(it, &d->models) {
        model_t *m = list_entry(it, model_t, link);
        if (!m->cfg->route || m->removed)
            continue;
        size_t rl = route_match(m->cfg->route, path, len);
        if (rl > best_len) {
            best = m;
            best_len = rl;
        }
    }
    if (prefix_len)
        *prefix_len = best_len ? best_len - 1 : 0;
    return best;
}

/* ---- alias_of entries: a name served by whichever of several models ----------------- */

/* The alias_of entry whose route is the longest prefix of path, longer than `longer_than`
 * (the best model route's length); NULL when none. */
static const config_alias_of_t *alias_by_path(const config_t *cfg, const char *path, size_t len, size_t longer_than,
                                              size_t *prefix_len)
{
    const config_alias_of_t *best = NULL;
    size_t best_len = longer_than;
    for (size_t i = 0; i < cfg->n_alias_ofs; i++) {
        const config_alias_of_t *a = &cfg->alias_ofs[i];
        size_t rl = a->route ? route_match(a->route, path, len) : 0;
        if (rl > best_len) {
            best = a;
            best_len = rl;
        }
    }
    if (best && prefix_len)
        *prefix_len = best_len - 1;
    return best;
}

model_t *router_alias_target(core_t *d, const config_alias_of_t *a)
{
    model_t *best = NULL, *any = NULL;
    uint64_t best_eta = 0;
    for (size_t i = 0; i < a->n_targets; i++) {
        model_t *m = model_find(d, a->targets[i]);
        if (!m || m->removed)
            continue;
        if (!any)
            any = m;
        if (m->failed)
            continue;
        uint64_t eta = sched_queue_eta_ms(m);
        if (!best || eta < best_eta) {
            best = m;
            best_eta = eta;
        }
    }
    return best ? best : any;
}

/* The alias's target for a request (logged at debug level). */
static model_t *alias_target(core_t *d, const config_alias_of_t *a)
{
    model_t *m = router_alias_target(d, a);
    if (m)
        log_event(LOG_DEBUG, "alias_routed", "alias=%s model=%s", a->name, m->name);
    return m;
}

/* A JSON body's "model" that names the alias is set to the chosen model's own name for its
 * server (served_model, else its name), the rest byte for byte; false: over limits.max_body. */
static bool alias_rename(request_t *r, const model_t *m)
{
    size_t open = 0, vs = 0, ve = 0;
    if (!r->body.len || !model_member(r->body.data, r->body.len, &open, &vs, &ve))
        return true;
    char quoted[200];
    snprintf(quoted, sizeof quoted, "\"%s\"", m->cfg->served_model ? m->cfg->served_model : m->name);
    return splice_body(r, vs, ve, quoted);
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

/* ---------------------------------------------------------------------------------------
 * pin_model (config.h): a model whose server would load any model a request names
 * (llama.cpp's router) is reached only with its served_model.
 */

/* The end of the JSON value at s[i] (a document cJSON accepted): one past its last byte.
 * Strings skip their escapes; arrays and objects count their depth (no recursion). */
static size_t json_value_end(const char *s, size_t len, size_t i)
{
    size_t depth = 0;
    bool in_str = false;
    for (; i < len; i++) {
        char ch = s[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
            if (!in_str && depth == 0)
                return i + 1;
            continue;
        }
        if (ch == '"')
            in_str = true;
        else if (ch == '{' || ch == '[')
            depth++;
        else if (ch == '}' || ch == ']') {
            if (depth == 0)
                return i; /* the enclosing object's end: a scalar ended */
            if (--depth == 0)
                return i + 1;
        } else if (depth == 0 && (ch == ',' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'))
            return i;
    }
    return len;
}

/* The span of the top-level "model" member's value in a JSON object text (cJSON accepted
 * it); false when there is none. *open is one past the object's '{'. */
static bool model_member(const char *s, size_t len, size_t *open, size_t *vstart, size_t *vend)
{
    size_t i = strspn(s, " \t\r\n");
    if (i >= len || s[i] != '{')
        return false;
    *open = ++i;
    while (i < len) {
        i += strspn(s + i, " \t\r\n,");
        if (i >= len || s[i] != '"')
            return false;
        size_t kend = json_value_end(s, len, i);
        bool is_model = kend - i == 7 && memcmp(s + i, "\"model\"", 7) == 0;
        i = kend + strspn(s + kend, " \t\r\n");
        if (i >= len || s[i] != ':')
            return false;
        i += 1 + strspn(s + i + 1, " \t\r\n");
        size_t vs = i;
        i = json_value_end(s, len, i);
        if (is_model) {
            *vstart = vs;
            *vend = i;
            return true;
        }
    }
    return false;
}

/* Replace r's body bytes [from, to) with text; false when out of memory or over max_body. */
static bool splice_body(request_t *r, size_t from, size_t to, const char *text)
{
    buf_t out;
    buf_init(&out, r->body.max);
    size_t tl = strlen(text);
    bool ok = buf_append(&out, r->body.data, from) == 0 && buf_append(&out, text, tl) == 0 &&
              buf_append(&out, r->body.data + to, r->body.len - to) == 0;
    if (ok) {
        buf_reset(&r->body);
        ok = buf_append(&r->body, out.data, out.len) == 0;
    }
    buf_free(&out);
    return ok;
}

/* The value of the query's `model=` parameter (raw), copied into out; false when none. */
static bool query_model(const char *path, size_t qpos, size_t len, char *out, size_t cap)
{
    for (size_t i = qpos + 1; i < len; i++) {
        if ((i == qpos + 1 || path[i - 1] == '&') && len - i > 6 && memcmp(path + i, "model=", 6) == 0) {
            size_t vl = strcspn(path + i + 6, "&");
            vl = vl < len - i - 6 ? vl : len - i - 6;
            snprintf(out, cap, "%.*s", (int)vl, path + i + 6);
            return true;
        }
    }
    return false;
}

static void refuse_wrong_model(conn_t *c, const model_t *m, const char *named)
{
    conn_respond_error(c, 400, "wrong_model", m->name, -1, false,
                       "model %s serves only \"%s\" (its served_model), which this request names as \"%s\": name "
                       "%s or \"%s\", or use the route of the model you want",
                       m->name, m->cfg->served_model, named, m->name, m->cfg->served_model);
}

/* pin_model: a `model=` query naming another model, or a JSON body's "model" naming another
 * model, is refused 400 wrong_model; a body's "model" that is absent or names this entry
 * (its name, an alias) is set to served_model, the rest of the body byte for byte as sent.
 * A body that is not a JSON object is forwarded as it is. true: answered (refused). */
static bool pin_refused(conn_t *c, request_t *r, model_t *m, const char *path, size_t qpos)
{
    const model_config_t *mc = m->cfg;
    if (!mc->pin_model || !mc->served_model)
        return false;
    char named[160];
    if (query_model(path, qpos, r->msg.target.len, named, sizeof named) && strcmp(named, mc->served_model) != 0) {
        refuse_wrong_model(c, m, named);
        return true;
    }
    cJSON *doc = r->body.len ? cJSON_ParseWithLength(r->body.data, r->body.len) : NULL;
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return false;
    }
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(doc, "model");
    snprintf(named, sizeof named, "%s", cJSON_IsString(mv) ? mv->valuestring : "");
    bool present = mv != NULL;
    cJSON_Delete(doc);
    if (present && strcmp(named, mc->served_model) == 0)
        return false;
    if (present && (!named[0] || model_find(c->core, named) != m)) {
        refuse_wrong_model(c, m, named[0] ? named : "(not a name)");
        return true;
    }
    char quoted[sizeof named + 4];
    size_t open = 0, vs = 0, ve = 0;
    bool found = model_member(r->body.data, r->body.len, &open, &vs, &ve);
    bool ok = found ? (snprintf(quoted, sizeof quoted, "\"%s\"", mc->served_model), splice_body(r, vs, ve, quoted))
                    : (snprintf(quoted, sizeof quoted, "\"model\":\"%s\"%s", mc->served_model,
                                r->body.data[open + strspn(r->body.data + open, " \t\r\n")] == '}' ? "" : ","),
                       splice_body(r, open, open, quoted));
    if (!ok) {
        conn_respond_error(c, 413, "body_too_large", m->name, -1, false,
                           "the body with its \"model\" set to %s is over limits.max_body", mc->served_model);
        return true;
    }
    return false;
}

bool router_head_refused(conn_t *c, request_t *r)
{
    const char *path;
    size_t qpos = path_of(r, &path);
    if (refused_dot_segment(c, path, r->msg.target.len))
        return true;
    size_t prefix = 0;
    model_t *m = router_find_model_by_path(c->core, path, r->msg.target.len, &prefix);
    const config_alias_of_t *alias = alias_by_path(c->core->cfg, path, r->msg.target.len, m ? prefix + 1 : 0, &prefix);
    if (alias)
        m = alias_target(c->core, alias);
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
    const config_alias_of_t *alias = alias_by_path(d->cfg, path, plen, m ? prefix + 1 : 0, &prefix);
    if (alias && (m = alias_target(d, alias)) != NULL) {
        if (!refused_hook_path(c, m, path, qpos, prefix) && !pin_refused(c, r, m, path, qpos))
            dispatch_admit(c, r, m, alias->strip ? prefix : 0);
        return;
    }
    if (m) {
        if (!refused_hook_path(c, m, path, qpos, prefix) && !pin_refused(c, r, m, path, qpos))
            dispatch_admit(c, r, m, prefix);
        return;
    }
    if (body_may_name_model(r, path, qpos)) {
        bool bad_json;
        char name[128];
        m = model_from_body(c, r, &bad_json, name, sizeof name);
        const config_alias_of_t *named = !m && name[0] ? config_find_alias_of(d->cfg, name) : NULL;
        if (named && (m = alias_target(d, named)) != NULL && !alias_rename(r, m)) {
            conn_respond_error(c, 413, "body_too_large", m->name, -1, false,
                               "the body with its \"model\" set to %s is over limits.max_body", m->name);
            return;
        }
        if (m) {
            if (!refused_hook_path(c, m, path, qpos, 0) && !pin_refused(c, r, m, path, qpos))
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
