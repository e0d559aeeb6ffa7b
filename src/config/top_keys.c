/*
 * top_keys: the top-level keys (listen, admin_token_file, allowed_hosts, state_dir, log, gpu, limits,
 * jobs, host_memory, cgroup, defaults, models) and their tables; cfg_top_section is the root table.
 *
 * Invariants: listen is host:port with an IP address or localhost (stored as 127.0.0.1);
 * gpu.devices is all or a list of distinct indexes and/or UUIDs; `defaults:` and `models:`
 * are only remembered here (ctx_t.defaults_node, models_node) and parsed after the whole
 * top level (cfg_parse_models), so their place in the file does not matter.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config/config_int.h"

int cfg_parse_listen_address(ctx_t *c, yaml_node_t *v, const char *key, const char *want, const char *examples,
                             char **host_out, int *port_out)
{
    char d[DESCRIBE_MAX], host[300];
    int port = 0;
    if (ydoc_need_scalar(c, v, want) != 0)
        return -1;
    if (cfg_split_host_port(ydoc_scalar_text(v), true, 0, host, sizeof host, &port) != 0)
        return ydoc_fail(c, v, "expected host:port like %s, got %s", examples, ydoc_describe(v, d, sizeof d));
    struct in_addr a4;
    bool bracketed = ydoc_scalar_text(v)[0] == '[';
    const char *stored = host;
    if (strcmp(host, "localhost") == 0)
        stored = "127.0.0.1";
    else if (!bracketed && inet_pton(AF_INET, host, &a4) != 1)
        return ydoc_fail(c, v, "the %s host must be an IP address or localhost, got %s", key,
                         ydoc_describe(v, d, sizeof d));
    char *copy = ydoc_dup_or_fail(c, v, stored);
    if (copy == NULL)
        return -1;
    free(*host_out);
    *host_out = copy;
    *port_out = port;
    return 0;
}

static int fp_listen(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    return cfg_parse_listen_address(c, v, "listen", "host:port like 127.0.0.1:8800",
                                    "127.0.0.1:8800 or [::1]:8800", &cfg->listen_host, &cfg->listen_port);
}

static int fp_log_format(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"json", "text", NULL};
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(int *)field = log_format_parse(names[choice]);
    return 0;
}

static int fp_log_level(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"debug", "info", "warn", "error", NULL};
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(int *)field = log_level_parse(names[choice]);
    return 0;
}

/* gpu.devices: all, or a list of indexes and/or UUID strings. */
static int fp_devices(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    free(cfg->gpu.devices);
    cfg_free_argv(cfg->gpu.device_uuids, cfg->gpu.n_device_uuids);
    cfg->gpu.devices = NULL;
    cfg->gpu.device_uuids = NULL;
    cfg->gpu.n_devices = cfg->gpu.n_device_uuids = 0;
    if (ydoc_is_null(v) || (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "all") == 0))
        return 0;
    if (ydoc_need_sequence(c, v, "all or a list of GPU indexes / UUIDs", 1, GPUS_MAX) != 0)
        return -1;
    size_t n = ydoc_sequence_size(v);
    cfg->gpu.devices = calloc(n, sizeof *cfg->gpu.devices);
    cfg->gpu.device_uuids = calloc(n + 1, sizeof *cfg->gpu.device_uuids);
    if (cfg->gpu.devices == NULL || cfg->gpu.device_uuids == NULL)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = ydoc_sequence_item(c, v, i);
        size_t saved = ydoc_path_push_index(c, i);
        int rc = ydoc_need_scalar(c, item, "a GPU index or UUID");
        const char *s = rc == 0 ? ydoc_scalar_text(item) : "";
        if (rc == 0 && cfg_all_chars_in(s, "0123456789")) {
            uint64_t index;
            rc = cfg_parse_integer(c, item, 0, 1023, &index);
            for (size_t j = 0; rc == 0 && j < cfg->gpu.n_devices; j++)
                if (cfg->gpu.devices[j] == (int)index)
                    rc = ydoc_fail(c, item, "GPU %d is listed twice", (int)index);
            if (rc == 0)
                cfg->gpu.devices[cfg->gpu.n_devices++] = (int)index;
        } else if (rc == 0) {
            for (const char *p = s; rc == 0 && *p; p++)
                if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                    rc = ydoc_fail(c, item, "a GPU UUID may not contain spaces or control characters");
            for (size_t j = 0; rc == 0 && j < cfg->gpu.n_device_uuids; j++)
                if (strcmp(cfg->gpu.device_uuids[j], s) == 0)
                    rc = ydoc_fail(c, item, "GPU %s is listed twice", s);
            if (rc == 0) {
                char *uuid = ydoc_dup_or_fail(c, item, s);
                if (uuid == NULL)
                    rc = -1;
                else
                    cfg->gpu.device_uuids[cfg->gpu.n_device_uuids++] = uuid;
            }
        }
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    if (cfg->gpu.n_devices == 0) {
        free(cfg->gpu.devices);
        cfg->gpu.devices = NULL;
    }
    if (cfg->gpu.n_device_uuids == 0) {
        free(cfg->gpu.device_uuids);
        cfg->gpu.device_uuids = NULL;
    }
    return 0;
}

static int fp_foreign_usage(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"measure", "ignore", NULL};
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 0;
    return 0;
}

/* gpu.driver_limits: auto | off */
static int fp_driver_limits(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"off", "auto", NULL};
    (void)spec;
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 1;
    return 0;
}

/* gpu.checkpoint_storage: auto | driver */
static int fp_checkpoint_storage(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"driver", "auto", NULL};
    (void)spec;
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(bool *)field = choice == 1;
    return 0;
}

static int fp_defaults(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (!ydoc_is_null(v) && ydoc_need_mapping(c, v, "a mapping of model keys") != 0)
        return -1;
    c->defaults_node = ydoc_is_null(v) ? NULL : v;
    return 0;
}

static int fp_models(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    c->models_node = v;
    return 0;
}

static const field_spec_t log_fields[] = {
    {"format", fp_log_format, offsetof(config_t, log_format), 0, 0, NULL},
    {"level", fp_log_level, offsetof(config_t, log_level), 0, 0, NULL},
};

/* gpu.stale_after: auto (0 here, resolved by cfg_check_top) or a duration */
static int fp_stale_after(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "auto") == 0) {
        *(uint64_t *)field = 0;
        return 0;
    }
    return cfg_fp_duration(c, v, field, spec);
}

static const field_spec_t gpu_fields[] = {
    {"nvml_library", cfg_fp_string, offsetof(config_t, gpu.nvml_library), 0, 0, NULL},
    {"cuda_library", cfg_fp_string, offsetof(config_t, gpu.cuda_library), 0, 0, NULL},
    {"devices", fp_devices, 0, 0, 0, NULL},
    {"headroom", cfg_fp_size, offsetof(config_t, gpu.headroom), 0, 0, NULL},
    {"poll", cfg_fp_duration, offsetof(config_t, gpu.poll_ms), 1, 0, NULL},
    {"stale_after", fp_stale_after, offsetof(config_t, gpu.stale_after_ms), 1, 0, NULL},
    {"foreign_usage", fp_foreign_usage, offsetof(config_t, gpu.foreign_measure), 0, 0, NULL},
    {"driver_limits", fp_driver_limits, offsetof(config_t, gpu.driver_limits), 0, 0, NULL},
    {"checkpoint_storage", fp_checkpoint_storage, offsetof(config_t, gpu.custom_storage), 0, 0, NULL},
    {"idle_model", cfg_fp_idle_model, 0, 0, 0, NULL}, /* turn_keys.c; checked with the models */
    {"idle_model_after", cfg_fp_duration, offsetof(config_t, gpu.idle_model_after_ms), 1000, 0, NULL},
};

/* limits.per_client.key: address | token | header:NAME */
static int fp_client_key(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "address, token or header:NAME") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (strcmp(s, "address") == 0 || strcmp(s, "token") == 0) {
        cfg->per_client.key = s[0] == 'a' ? 0 : 1;
        return 0;
    }
    const char *name = strncmp(s, "header:", 7) == 0 ? s + 7 : NULL;
    if (name == NULL || name[0] == '\0' || strlen(name) > 64 ||
        !cfg_all_chars_in(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"))
        return ydoc_fail(c, v, "expected address, token or header:NAME (a header name like X-Client-Id), got %s",
                         ydoc_describe(v, d, sizeof d));
    char *copy = ydoc_dup_or_fail(c, v, name);
    if (copy == NULL)
        return -1;
    free(cfg->per_client.header);
    cfg->per_client.header = copy;
    cfg->per_client.key = 2;
    return 0;
}

static const field_spec_t per_client_fields[] = {
    {"key", fp_client_key, 0, 0, 0, NULL},
    {"max_queued", cfg_fp_unsigned, offsetof(config_t, per_client.max_queued), 1, 1000000, NULL},
    {"max_in_flight", cfg_fp_unsigned, offsetof(config_t, per_client.max_in_flight), 1, 1000000, NULL},
    {"max_clients", cfg_fp_unsigned, offsetof(config_t, per_client.max_clients), 16, 1000000, NULL},
};
static const section_t per_client_section = SECTION(per_client_fields);

/* limits.per_client: a mapping turns the limits on (null: off) */
static int fp_per_client(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    cfg->per_client.on = !ydoc_is_null(v);
    return cfg_apply_mapping(c, v, &per_client_section, cfg);
}

/* limits.memory_budget, host_memory.budget: auto or a size (at least 1MiB) */
static int fp_memory_budget(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    if (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "auto") == 0) {
        *(uint64_t *)field = 0;
        return 0;
    }
    return cfg_parse_size(c, v, 1ULL << 20, field);
}

static const field_spec_t limits_fields[] = {
    {"max_body", cfg_fp_size, offsetof(config_t, limits.max_body), 1, 0, NULL},
    {"max_header", cfg_fp_size, offsetof(config_t, limits.max_header), 1024, 0, NULL},
    {"max_header_count", cfg_fp_unsigned, offsetof(config_t, limits.max_header_count), 1, 10000, NULL},
    {"max_connections", cfg_fp_unsigned, offsetof(config_t, limits.max_connections), 1, 1000000, NULL},
    {"metrics_cache", cfg_fp_duration, offsetof(config_t, limits.metrics_cache_ms), 0, 60000, NULL},
    {"header_timeout", cfg_fp_duration, offsetof(config_t, limits.header_timeout_ms), 1, 0, NULL},
    {"queue_max", cfg_fp_unsigned, offsetof(config_t, limits.queue_max), 1, 10000000, NULL},
    {"drain_timeout", cfg_fp_duration, offsetof(config_t, limits.drain_timeout_ms), 0, 0, NULL},
    {"send_timeout", cfg_fp_duration, offsetof(config_t, limits.send_timeout_ms), 1, 0, NULL},
    {"body_timeout", cfg_fp_duration, offsetof(config_t, limits.body_timeout_ms), 1, 0, NULL},
    {"reserved_connections", cfg_fp_unsigned, offsetof(config_t, limits.reserved_connections), 0, 10000, NULL},
    {"worker_log_lines", cfg_fp_unsigned, offsetof(config_t, limits.worker_log_lines), 0, 100000, NULL},
    {"worker_log_bytes", cfg_fp_size, offsetof(config_t, limits.worker_log_bytes), 0, 0, NULL},
    {"upgrade_idle_timeout", cfg_fp_duration, offsetof(config_t, limits.upgrade_idle_timeout_ms), 1, 0, NULL},
    {"upgrades_per_client", cfg_fp_unsigned, offsetof(config_t, limits.upgrades_per_client), 1, 100000, NULL},
    {"upgrades_max", cfg_fp_unsigned, offsetof(config_t, limits.upgrades_max), 1, 1000000, NULL},
    {"shim_connections_max", cfg_fp_unsigned, offsetof(config_t, limits.shim_conns_max), 1, 1000000, NULL},
    {"shim_connections_per_process", cfg_fp_unsigned, offsetof(config_t, limits.shim_conns_per_proc), 1,
     100000, NULL},
    {"shim_hello_timeout", cfg_fp_duration, offsetof(config_t, limits.shim_hello_ms), 1, 0, NULL},
    {"per_client", fp_per_client, 0, 0, 0, NULL},
    {"memory_budget", fp_memory_budget, offsetof(config_t, memory_budget), 0, 0, NULL},
};

/* jobs.backend: sqlite | postgres */
static int fp_jobs_backend(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "sqlite or postgres") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (strcmp(s, "sqlite") == 0 || strcmp(s, "postgres") == 0) {
        *(unsigned *)field = s[0] == 's' ? JOBS_BACKEND_SQLITE : JOBS_BACKEND_POSTGRES;
        return 0;
    }
    return ydoc_fail(c, v, "expected sqlite or postgres, got %s", ydoc_describe(v, d, sizeof d));
}

static const field_spec_t jobs_pg_fields[] = {
    {"url", cfg_fp_string, offsetof(config_t, jobs.pg.url), 0, 0, NULL},
    {"host_id", cfg_fp_string_opt, offsetof(config_t, jobs.pg.host_id), 0, 0, NULL},
    {"lease", cfg_fp_duration, offsetof(config_t, jobs.pg.lease_ms), 300, 0, NULL},
    {"aging", cfg_fp_duration, offsetof(config_t, jobs.pg.aging_ms), 1, 0, NULL},
    {"max_result_bytes", cfg_fp_size, offsetof(config_t, jobs.pg.max_result_bytes), 1, 1ULL << 30, NULL},
    {"timeout", cfg_fp_duration, offsetof(config_t, jobs.pg.timeout_ms), 100, 0, NULL},
};
static const section_t jobs_pg_section = SECTION(jobs_pg_fields);

static const field_spec_t jobs_fields[] = {
    {"backend", fp_jobs_backend, offsetof(config_t, jobs.backend), 0, 0, NULL},
    {"postgres", cfg_fp_section, 0, 0, 0, &jobs_pg_section},
    {"results_max_bytes", cfg_fp_size, offsetof(config_t, jobs.results_max_bytes), 0, 0, NULL},
    {"results_ttl", cfg_fp_duration, offsetof(config_t, jobs.results_ttl_ms), 1, 0, NULL},
    {"min_free_disk", cfg_fp_size, offsetof(config_t, jobs.min_free_disk), 0, 0, NULL},
    {"max_attempts", cfg_fp_unsigned, offsetof(config_t, jobs.max_attempts), 1, 100, NULL},
    {"max_active", cfg_fp_unsigned, offsetof(config_t, jobs.max_active), 1, 10000000, NULL},
    {"records_ttl", cfg_fp_duration, offsetof(config_t, jobs.records_ttl_ms), 1000, 0, NULL},
};

static const field_spec_t host_memory_fields[] = {
    {"budget", fp_memory_budget, offsetof(config_t, host_memory.budget), 0, 0, NULL}, /* auto or a size */
    {"reserve", cfg_fp_size, offsetof(config_t, host_memory.reserve), 0, 0, NULL},
};

/* cgroup.mode: auto | v2 | v1 | subreaper | off (kept as its name) */
static int fp_cgroup_mode(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"auto", "v2", "v1", "subreaper", "off", NULL};
    return cfg_set_choice_name(c, v, names, (char **)field);
}

/* cgroup.path: auto (NULL) or an absolute directory */
static int fp_cgroup_path(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "auto or an absolute directory") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    free(*(char **)field);
    *(char **)field = NULL;
    if (strcmp(s, "auto") == 0)
        return 0;
    if (s[0] != '/' || strstr(s, "/../") || strlen(s) >= 256)
        return ydoc_fail(c, v, "expected auto or an absolute directory in a cgroup mount, got %s",
                         ydoc_describe(v, d, sizeof d));
    *(char **)field = ydoc_dup_or_fail(c, v, s);
    return *(char **)field ? 0 : -1;
}

static const field_spec_t cgroup_fields[] = {
    {"mode", fp_cgroup_mode, offsetof(config_t, cgroup.mode), 0, 0, NULL},
    {"path", fp_cgroup_path, offsetof(config_t, cgroup.path), 0, 0, NULL},
};

static const section_t cgroup_section = SECTION(cgroup_fields);
static const section_t log_section = SECTION(log_fields);
static const section_t host_memory_section = SECTION(host_memory_fields);
static const section_t gpu_section = SECTION(gpu_fields);
static const section_t limits_section = SECTION(limits_fields);
static const section_t jobs_section = SECTION(jobs_fields);

static const field_spec_t top_fields[] = {
    {"listen", fp_listen, 0, 0, 0, NULL},
    {"admin_token_file", cfg_fp_string_opt, offsetof(config_t, admin_token_file), 0, 0, NULL},
    {"allowed_hosts", cfg_fp_allowed_hosts, 0, 0, 0, NULL},
    {"state_dir", cfg_fp_string, offsetof(config_t, state_dir), 0, 0, NULL},
    {"log", cfg_fp_section, 0, 0, 0, &log_section},
    {"gpu", cfg_fp_section, 0, 0, 0, &gpu_section},
    {"limits", cfg_fp_section, 0, 0, 0, &limits_section},
    {"jobs", cfg_fp_section, 0, 0, 0, &jobs_section},
    {"fleet", cfg_fp_section, 0, 0, 0, &cfg_fleet_section},
    {"host_memory", cfg_fp_section, 0, 0, 0, &host_memory_section},
    {"cgroup", cfg_fp_section, 0, 0, 0, &cgroup_section},
    {"defaults", fp_defaults, 0, 0, 0, NULL},
    {"models", fp_models, 0, 0, 0, NULL},
};
const section_t cfg_top_section = SECTION(top_fields);
