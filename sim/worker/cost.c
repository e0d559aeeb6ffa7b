/*
 * cost: request parameters (JSON / urlencoded / multipart) and cost factors. See cost.h.
 */
#include "cost.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/hex.h"

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

/* Adds name=value (both cut to their bounds); silently drops params beyond the maximum. */
static void params_add(sw_params_t *p, const char *name, size_t nlen, const char *value,
                       size_t vlen, int is_file)
{
    if (p->n >= SW_MAX_PARAMS || nlen == 0)
        return;
    sw_param_t *it = &p->items[p->n++];
    if (nlen >= sizeof(it->name))
        nlen = sizeof(it->name) - 1;
    if (vlen >= sizeof(it->value))
        vlen = sizeof(it->value) - 1;
    memcpy(it->name, name, nlen);
    it->name[nlen] = 0;
    if (value)
        memcpy(it->value, value, vlen);
    it->value[value ? vlen : 0] = 0;
    it->is_file = is_file;
}

/* Does content type ct (may be NULL) have media type mt (case-insensitive)? */
static int media_is(const char *ct, const char *mt)
{
    if (!ct)
        return 0;
    while (*ct == ' ')
        ct++;
    size_t n = strlen(mt);
    return strncasecmp(ct, mt, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

static int parse_json(const char *body, size_t len, sw_params_t *out, char *err, size_t errlen)
{
    cJSON *doc = cJSON_ParseWithLength(body, len);
    if (!doc) {
        set_err(err, errlen, "JSON decode error");
        return -1;
    }
    out->is_json = 1;
    if (cJSON_IsObject(doc)) {
        cJSON *it;
        cJSON_ArrayForEach(it, doc)
        {
            char num[64];
            const char *v = NULL;
            if (cJSON_IsString(it)) {
                v = it->valuestring;
            } else if (cJSON_IsNumber(it)) {
                snprintf(num, sizeof(num), "%.17g", it->valuedouble);
                v = num;
            } else if (cJSON_IsBool(it)) {
                v = cJSON_IsTrue(it) ? "true" : "false";
            } else {
                continue; /* objects, arrays, null: present but not scalar parameters */
            }
            params_add(out, it->string, strlen(it->string), v, strlen(v), 0);
        }
    }
    cJSON_Delete(doc);
    return 0;
}

/* Percent-decodes s[0..n) into out (cap), '+' -> ' '. Returns the decoded length. */
static size_t url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        if (s[i] == '+') {
            out[o++] = ' ';
        } else if (s[i] == '%' && i + 2 < n && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            out[o++] = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = 0;
    return o;
}

static void parse_urlencoded(const char *body, size_t len, sw_params_t *out)
{
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && body[j] != '&')
            j++;
        const char *eq = memchr(body + i, '=', j - i);
        char name[SW_PARAM_NAME_MAX], value[SW_PARAM_VALUE_MAX];
        size_t nl = url_decode(body + i, (size_t)((eq ? eq : body + j) - (body + i)), name, sizeof(name));
        size_t vl = eq ? url_decode(eq + 1, (size_t)(body + j - eq - 1), value, sizeof(value)) : 0;
        if (!eq)
            value[0] = 0;
        params_add(out, name, nl, value, vl, 0);
        i = j + 1;
    }
}

/* Finds a parameter ("boundary=", "name=", "filename=") in a header value; copies it
 * unquoted into out. Returns 0 found, -1 not. */
static int header_param(const char *v, size_t vlen, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl <= vlen; i++) {
        if (strncasecmp(v + i, key, kl) != 0)
            continue;
        if (i > 0 && v[i - 1] != ' ' && v[i - 1] != ';' && v[i - 1] != '\t')
            continue;
        size_t j = i + kl, o = 0;
        if (j < vlen && v[j] == '"') {
            j++;
            while (j < vlen && v[j] != '"' && o + 1 < cap)
                out[o++] = v[j++];
        } else {
            while (j < vlen && v[j] != ';' && v[j] != ' ' && o + 1 < cap)
                out[o++] = v[j++];
        }
        out[o] = 0;
        return 0;
    }
    return -1;
}

static const char *memfind(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
    if (nlen == 0 || hlen < nlen)
        return NULL;
    return memmem(hay, hlen, needle, nlen);
}

static int parse_multipart(const char *ct, const char *body, size_t len, sw_params_t *out,
                           char *err, size_t errlen)
{
    char boundary[128];
    if (header_param(ct, strlen(ct), "boundary=", boundary, sizeof(boundary)) != 0 || !boundary[0]) {
        set_err(err, errlen, "multipart body without a boundary");
        return -1;
    }
    char delim[160];
    int dl = snprintf(delim, sizeof(delim), "--%s", boundary);
    const char *p = memfind(body, len, delim, (size_t)dl);
    if (!p) {
        set_err(err, errlen, "multipart body without its boundary");
        return -1;
    }
    const char *end = body + len;
    for (;;) {
        p += dl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0; /* closing delimiter */
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            set_err(err, errlen, "malformed multipart delimiter");
            return -1;
        }
        p += 2;
        const char *hend = memfind(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend) {
            set_err(err, errlen, "multipart part without headers end");
            return -1;
        }
        char name[SW_PARAM_NAME_MAX] = "", filename[256] = "";
        int has_filename = 0;
        for (const char *line = p; line < hend;) {
            const char *le = memfind(line, (size_t)(hend + 2 - line), "\r\n", 2);
            if (!le)
                le = hend;
            size_t ll = (size_t)(le - line);
            if (ll > 20 && strncasecmp(line, "content-disposition:", 20) == 0) {
                header_param(line + 20, ll - 20, "name=", name, sizeof(name));
                has_filename = header_param(line + 20, ll - 20, "filename=", filename, sizeof(filename)) == 0;
            }
            line = le + 2;
        }
        const char *data = hend + 4;
        char ndelim[168];
        int nl = snprintf(ndelim, sizeof(ndelim), "\r\n%s", delim);
        const char *next = memfind(data, (size_t)(end - data), ndelim, (size_t)nl);
        if (!next) {
            set_err(err, errlen, "multipart part without a closing boundary");
            return -1;
        }
        if (name[0])
            params_add(out, name, strlen(name), has_filename ? filename : data,
                       has_filename ? strlen(filename) : (size_t)(next - data), has_filename);
        p = next + 2;
    }
}

int sw_params_parse(const char *content_type, const char *body, size_t len, sw_params_t *out,
                    char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (len == 0)
        return 0;
    if (media_is(content_type, "application/json") || (!content_type && body[0] == '{'))
        return parse_json(body, len, out, err, errlen);
    if (media_is(content_type, "application/x-www-form-urlencoded")) {
        parse_urlencoded(body, len, out);
        return 0;
    }
    if (media_is(content_type, "multipart/form-data"))
        return parse_multipart(content_type, body, len, out, err, errlen);
    if (body[0] == '{')
        return parse_json(body, len, out, err, errlen);
    return 0;
}

const char *sw_params_get(const sw_params_t *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->items[i].name, name) == 0)
            return p->items[i].value;
    return NULL;
}

int sw_params_number(const sw_params_t *p, const char *name, double *out)
{
    const char *v = sw_params_get(p, name);
    if (!v || !*v)
        return -1;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    while (end && isspace((unsigned char)*end))
        end++;
    if (errno || end == v || *end || !isfinite(d))
        return -1;
    *out = d;
    return 0;
}

double sw_cost_factor(const sw_scale_rule_t *rules, size_t n, const sw_params_t *p)
{
    double f = 1.0;
    for (size_t i = 0; i < n; i++) {
        double v;
        if (sw_params_number(p, rules[i].param, &v) != 0 || v <= 0)
            continue;
        f *= pow(v / rules[i].base, rules[i].exp);
    }
    if (!isfinite(f) || f > 1e6)
        f = 1e6;
    if (f < 1e-6)
        f = 1e-6;
    return f;
}
