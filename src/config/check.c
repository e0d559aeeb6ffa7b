/*
 * check: the checks that need more than one key: a model's cmd xor url, hooks with a path,
 * validate kind cmd with a cmd; names and aliases as one namespace and unique routes;
 * sleep with wake; the admin token file (read, trimmed, required off loopback); state_dir
 * resolved against the config's directory; the VRAMD_NVML_LIBRARY and VRAMD_CUDA_LIBRARY
 * overrides; host_memory.budget above its reserve; jobs limits against each other;
 * gpu.stale_after resolved (auto) and bounded against gpu.poll.
 *
 * Invariants: they run after the keys are parsed, in a fixed order, and the first failing
 * one reports; an error points at the key that was last set (the model's own mapping,
 * else `defaults:`), with its key path.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/units.h"
#include "config/config_int.h"

#define STALE_AFTER_AUTO_MIN_MS 1000ULL     /* gpu.stale_after: auto is never below 1 s */
#define STALE_AFTER_MAX_MS (3600ULL * 1000) /* nor any value above an hour */

/* dir + "/" + rel for a relative path ("./" prefixes dropped); absolute paths copied. */
static char *resolve_path(const char *dir, const char *path)
{
    if (path[0] == '/' || dir == NULL || dir[0] == '\0')
        return strdup(path);
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    if (strcmp(path, ".") == 0 || path[0] == '\0')
        return strdup(dir);
    size_t dir_len = strlen(dir);
    bool has_slash = dir[dir_len - 1] == '/';
    size_t n = dir_len + 1 + strlen(path) + 1;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s%s%s", dir, has_slash ? "" : "/", path);
    return out;
}

/* Reads, trims and checks admin_token_file (resolved against the config's directory). */
static int load_admin_token(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    if (cfg->admin_token_file == NULL)
        return 0;
    yaml_node_t *node = ydoc_find_value(c, root, "admin_token_file");
    ydoc_path_reset(c);
    ydoc_path_push_key(c, "admin_token_file");
    char *resolved = resolve_path(c->dir, cfg->admin_token_file);
    if (resolved == NULL)
        return ydoc_fail(c, node, "out of memory");
    free(cfg->admin_token_file);
    cfg->admin_token_file = resolved;
    int fd = open(resolved, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ydoc_fail(c, node, "cannot read %s: %s", resolved, strerror(errno));
    char buf[TOKEN_FILE_MAX + 1];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof buf - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved_errno = errno;
            close(fd);
            return ydoc_fail(c, node, "cannot read %s: %s", resolved, strerror(saved_errno));
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof buf) {
            close(fd);
            return ydoc_fail(c, node, "%s is larger than %d bytes; it should hold just the token", resolved,
                             TOKEN_FILE_MAX);
        }
    }
    close(fd);
    size_t start = 0;
    while (start < len && isspace((unsigned char)buf[start]))
        start++;
    while (len > start && isspace((unsigned char)buf[len - 1]))
        len--;
    if (len == start)
        return ydoc_fail(c, node, "%s is empty; it must hold the admin token", resolved);
    for (size_t i = start; i < len; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            return ydoc_fail(c, node, "%s holds control characters; it must hold just the token", resolved);
    cfg->admin_token = strndup(buf + start, len - start);
    if (cfg->admin_token == NULL)
        return ydoc_fail(c, node, "out of memory");
    return 0;
}

bool config_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcmp(host, "localhost") == 0;
}

/* Where a model key was last set: the model's own mapping, else `defaults:`. Sets the path. */
yaml_node_t *cfg_model_key_node(ctx_t *c, const char *model, yaml_node_t *model_node, const char *key)
{
    ydoc_path_reset(c);
    yaml_node_t *v = ydoc_find_value(c, model_node, key);
    if (v != NULL) {
        ydoc_path_append(c, "models.%s.%s", model, key);
        return v;
    }
    v = ydoc_find_value(c, c->defaults_node, key);
    if (v != NULL) {
        ydoc_path_append(c, "defaults.%s", key);
        return v;
    }
    ydoc_path_append(c, "models.%s", model);
    return model_node;
}

#define OUTLIER_EJECTION_MAX_MS (60ULL * 60 * 1000) /* outlier.*_ejection_time: at most 1h */

/* outlier: base_ejection_time <= max_ejection_time <= 1h (an ejection of hours is an outage). */
static int check_outlier(ctx_t *c, const model_config_t *m, yaml_node_t *where)
{
    const config_outlier_t *o = &m->outlier;
    const char *key = NULL, *why = NULL;
    if (o->base_ejection_ms > OUTLIER_EJECTION_MAX_MS) {
        key = "base_ejection_time";
        why = "must be at most 1h";
    } else if (o->max_ejection_ms > OUTLIER_EJECTION_MAX_MS) {
        key = "max_ejection_time";
        why = "must be at most 1h";
    } else if (o->max_ejection_ms < o->base_ejection_ms) {
        key = "max_ejection_time";
        why = "must be at least base_ejection_time";
    }
    if (key == NULL)
        return 0;
    yaml_node_t *section = cfg_model_key_node(c, m->name, where, "outlier");
    yaml_node_t *node = ydoc_find_value(c, section, key);
    if (node != NULL)
        ydoc_path_append(c, ".%s", key);
    return ydoc_fail(c, node != NULL ? node : section, "%s", why);
}

int cfg_check_model(ctx_t *c, model_config_t *m, yaml_node_t *key_node, yaml_node_t *model_node)
{
    yaml_node_t *where = model_node && !ydoc_is_null(model_node) ? model_node : key_node;
    char why[200];
    if (cfg_container_finish(m, why, sizeof why) != 0) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, m->container.from_cmd ? "cmd" : "container");
        return ydoc_fail(c, n, "%s", why);
    }
    if (m->cmd == NULL && m->url == NULL) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "models.%s", m->name);
        return ydoc_fail(c, key_node, "needs cmd (a server vramd starts), container (one it runs in a container) "
                                      "or url (a server already running)");
    }
    if (m->cmd != NULL && m->url != NULL) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, "url");
        return ydoc_fail(c, n,
                         "cmd and url cannot both be set (cmd: vramd starts the server; url: it is already running)");
    }
    struct {
        const char *key;
        config_hook_t *hook;
    } hooks[] = {{"unload", &m->unload}, {"reload", &m->reload}, {"clear_cache", &m->clear_cache},
                 {"sleep", &m->sleep}, {"wake", &m->wake}};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (hooks[i].hook->set && hooks[i].hook->path == NULL) {
            yaml_node_t *n = cfg_model_key_node(c, m->name, where, hooks[i].key);
            return ydoc_fail(c, n, "path is required (like /unload_models/)");
        }
    }
    if (check_outlier(c, m, where) != 0)
        return -1;
    if (m->sleep.set != m->wake.set) {
        /* point at the key that removed one, else the one given, else the preset that set it */
        const char *keys[] = {m->sleep.set ? "wake" : "sleep", m->sleep.set ? "sleep" : "wake", "preset"};
        size_t k = 0;
        while (k < 2 && !ydoc_find_value(c, where, keys[k]) && !ydoc_find_value(c, c->defaults_node, keys[k]))
            k++;
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, keys[k]);
        return ydoc_fail(c, n, "sleep and wake go together: a parked server is brought back by its wake hook "
                               "(set both, or neither)");
    }
    if (m->validate.kind == VALIDATE_CMD && m->validate.n_cmd == 0) {
        yaml_node_t *n = cfg_model_key_node(c, m->name, where, "validate");
        return ydoc_fail(c, n, "kind cmd needs cmd: [program, args...]");
    }
    return 0;
}

/* Names and aliases of models and alias_of entries are one namespace; routes are unique. */
int cfg_check_names_and_routes(ctx_t *c, const cfg_entry_t *entries, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const cfg_entry_t *e = &entries[i];
        for (size_t a = 0; a < e->n_aliases; a++) {
            const char *alias = e->aliases[a];
            const char *clash = NULL, *clash_kind = NULL;
            for (size_t j = 0; j < n && clash == NULL; j++) {
                const cfg_entry_t *o = &entries[j];
                if (strcmp(o->name, alias) == 0) {
                    clash = o->name;
                    clash_kind = o->alias_of ? "the name of alias_of entry" : "the name of model";
                }
                size_t limit = j < i ? o->n_aliases : (j == i ? a : 0);
                for (size_t b = 0; b < limit && clash == NULL; b++) {
                    if (strcmp(o->aliases[b], alias) == 0) {
                        clash = o->name;
                        clash_kind = o->alias_of ? "already an alias of alias_of entry" : "already an alias of model";
                    }
                }
            }
            if (clash != NULL) {
                yaml_node_t *list = cfg_model_key_node(c, e->name, e->where, "aliases");
                yaml_node_t *item = list;
                if (list->type == YAML_SEQUENCE_NODE && a < ydoc_sequence_size(list)) {
                    item = ydoc_sequence_item(c, list, a);
                    ydoc_path_push_index(c, a);
                }
                return ydoc_fail(c, item, "alias \"%s\" is %s \"%s\"", alias, clash_kind, clash);
            }
        }
        for (size_t j = 0; e->route != NULL && j < i; j++) {
            if (entries[j].route != NULL && strcmp(entries[j].route, e->route) == 0) {
                yaml_node_t *node = cfg_model_key_node(c, e->name, e->where, "route");
                return ydoc_fail(c, node, "route %s is already used by %s \"%s\"", e->route,
                                 entries[j].alias_of ? "alias_of entry" : "model", entries[j].name);
            }
        }
    }
    return 0;
}

#define CLIENT_STALL_MAX_MS (60ULL * 60 * 1000) /* send_timeout, body_timeout: at most 1h */

/* limits.send_timeout and body_timeout bound a client's stall: a stall of hours is no bound. */
static int check_client_stall_limits(ctx_t *c, const config_t *cfg, yaml_node_t *root)
{
    static const char *const keys[] = {"send_timeout", "body_timeout"};
    const uint64_t values[] = {cfg->limits.send_timeout_ms, cfg->limits.body_timeout_ms};
    for (size_t i = 0; i < 2; i++) {
        if (values[i] <= CLIENT_STALL_MAX_MS)
            continue;
        yaml_node_t *limits = ydoc_find_value(c, root, "limits");
        ydoc_path_reset(c);
        ydoc_path_append(c, "limits.%s", keys[i]);
        return ydoc_fail(c, ydoc_find_value(c, limits, keys[i]), "must be at most 1h (a client stall, not a total)");
    }
    return 0;
}

/* gpu.stale_after: auto = 5 x poll, at least 1 s (a loaded host's hiccup of a few polls is
 * not a hung driver); an explicit value from 2 x poll (one late reading is not stale) to
 * STALE_AFTER_MAX_MS. */
static int check_stale_after(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    if (cfg->gpu.stale_after_ms == 0) {
        uint64_t five = cfg->gpu.poll_ms * 5;
        cfg->gpu.stale_after_ms = five > STALE_AFTER_AUTO_MIN_MS ? five : STALE_AFTER_AUTO_MIN_MS;
        if (cfg->gpu.stale_after_ms > STALE_AFTER_MAX_MS)
            cfg->gpu.stale_after_ms = STALE_AFTER_MAX_MS;
        return 0;
    }
    if (cfg->gpu.stale_after_ms >= 2 * cfg->gpu.poll_ms && cfg->gpu.stale_after_ms <= STALE_AFTER_MAX_MS)
        return 0;
    yaml_node_t *node = ydoc_find_value(c, ydoc_find_value(c, root, "gpu"), "stale_after");
    ydoc_path_reset(c);
    ydoc_path_append(c, "gpu.stale_after");
    return ydoc_fail(c, node ? node : root, "%llu ms is outside %llu ms (2 x gpu.poll) .. %llu ms",
                     (unsigned long long)cfg->gpu.stale_after_ms, (unsigned long long)(2 * cfg->gpu.poll_ms),
                     (unsigned long long)STALE_AFTER_MAX_MS);
}

int cfg_check_top(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    if (check_stale_after(c, cfg, root) != 0)
        return -1;
    if (check_client_stall_limits(c, cfg, root) != 0)
        return -1;
    if (load_admin_token(c, cfg, root) != 0)
        return -1;
    if (!config_host_is_loopback(cfg->listen_host) && cfg->admin_token == NULL) {
        yaml_node_t *node = ydoc_find_value(c, root, "listen");
        ydoc_path_reset(c);
        ydoc_path_push_key(c, "listen");
        return ydoc_fail(c, node ? node : root,
                         "%s is not a loopback address, so admin_token_file is required (admin routes would be open to the network)",
                         cfg->listen_host);
    }
    char *state_dir = resolve_path(c->dir, cfg->state_dir);
    if (state_dir == NULL)
        return ydoc_fail(c, root, "out of memory");
    free(cfg->state_dir);
    cfg->state_dir = state_dir;
    const char *nvml_override = getenv("VRAMD_NVML_LIBRARY");
    if (nvml_override != NULL && nvml_override[0] != '\0') {
        char *copy = strdup(nvml_override);
        if (copy == NULL)
            return ydoc_fail(c, root, "out of memory");
        free(cfg->gpu.nvml_library);
        cfg->gpu.nvml_library = copy;
    }
    const char *cuda_override = getenv("VRAMD_CUDA_LIBRARY");
    if (cuda_override != NULL && cuda_override[0] != '\0') {
        char *copy = strdup(cuda_override);
        if (copy == NULL)
            return ydoc_fail(c, root, "out of memory");
        free(cfg->gpu.cuda_library);
        cfg->gpu.cuda_library = copy;
    }
    if (cfg->host_memory.budget && cfg->host_memory.budget <= cfg->host_memory.reserve) {
        yaml_node_t *node = ydoc_find_value(c, ydoc_find_value(c, root, "host_memory"), "budget");
        ydoc_path_reset(c);
        ydoc_path_append(c, "host_memory.budget");
        return ydoc_fail(c, node ? node : root,
                         "%llu bytes is not more than host_memory.reserve (%llu): nothing could ever be parked",
                         (unsigned long long)cfg->host_memory.budget, (unsigned long long)cfg->host_memory.reserve);
    }
    if (cfg->memory_budget && cfg->memory_budget < cfg->limits.max_body) {
        yaml_node_t *node = ydoc_find_value(c, ydoc_find_value(c, root, "limits"), "memory_budget");
        ydoc_path_reset(c);
        ydoc_path_append(c, "limits.memory_budget");
        return ydoc_fail(c, node ? node : root,
                         "%llu bytes is less than limits.max_body (%llu): a body of the largest size could never be read",
                         (unsigned long long)cfg->memory_budget, (unsigned long long)cfg->limits.max_body);
    }
    return 0;
}

/* jobs: max_active within limits.queue_max (an explicit value must fit; the default is clamped),
 * records kept at least as long as their results. */
int cfg_check_jobs(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    yaml_node_t *jobs = ydoc_find_value(c, root, "jobs");
    if (cfg->jobs.max_active > cfg->limits.queue_max) {
        yaml_node_t *node = ydoc_find_value(c, jobs, "max_active");
        if (node == NULL) {
            cfg->jobs.max_active = cfg->limits.queue_max;
        } else {
            ydoc_path_reset(c);
            ydoc_path_append(c, "jobs.max_active");
            return ydoc_fail(c, node, "%u is more than limits.queue_max (%u)", cfg->jobs.max_active,
                             cfg->limits.queue_max);
        }
    }
    if (cfg->jobs.results_max_bytes == 0) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "jobs.results_max_bytes");
        return ydoc_fail(c, ydoc_find_value(c, jobs, "results_max_bytes"),
                         "must be more than 0 (it bounds the store and every result)");
    }
    if (cfg->jobs.records_ttl_ms < cfg->jobs.results_ttl_ms) {
        yaml_node_t *node = ydoc_find_value(c, jobs, "records_ttl");
        ydoc_path_reset(c);
        ydoc_path_append(c, node != NULL ? "jobs.records_ttl" : "jobs.results_ttl");
        if (node == NULL)
            node = ydoc_find_value(c, jobs, "results_ttl");
        char records[32], results[32];
        units_format_duration(cfg->jobs.records_ttl_ms, records, sizeof records);
        units_format_duration(cfg->jobs.results_ttl_ms, results, sizeof results);
        return ydoc_fail(c, node != NULL ? node : root,
                         "records_ttl (%s) must be at least results_ttl (%s): a stored result needs its job record",
                         records, results);
    }
    yaml_node_t *pg = ydoc_find_value(c, jobs, "postgres");
    if (cfg->jobs.backend == JOBS_BACKEND_POSTGRES && cfg->jobs.pg.url == NULL) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "jobs.postgres.url");
        yaml_node_t *backend = ydoc_find_value(c, jobs, "backend");
        return ydoc_fail(c, pg != NULL ? pg : (backend != NULL ? backend : root),
                         "jobs.backend postgres needs jobs.postgres.url (a libpq connection string)");
    }
    if (cfg->jobs.pg.max_result_bytes > (1ULL << 30)) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "jobs.postgres.max_result_bytes");
        return ydoc_fail(c, ydoc_find_value(c, pg, "max_result_bytes"),
                         "must be at most 1GiB (PostgreSQL's largest bytea value)");
    }
    return 0;
}
