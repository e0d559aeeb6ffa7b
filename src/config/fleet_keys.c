/*
 * fleet_keys: the `fleet:` section (several hosts behind HAProxy, SPEC section 7):
 * agent_listen (HAProxy's agent-check, fleet/agent.h), its read bounds, and host_name (the
 * host label of /metrics).
 *
 * Invariants: agent_listen is off (NULL host) or host:port with an IP address or localhost
 * (stored as 127.0.0.1), never the address vramd's own `listen` uses; agent_wait <=
 * agent_timeout; host_name is 1 to 64 of A-Z a-z 0-9 . _ - (a hostname, safe as a label
 * value and in a log line), defaulting to this machine's hostname.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_int.h"

#define HOST_NAME_MAX_LEN 64

static int fp_agent_listen(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    free(cfg->fleet.agent_host);
    cfg->fleet.agent_host = NULL;
    cfg->fleet.agent_port = 0;
    if (ydoc_is_null(v) || (v->type == YAML_SCALAR_NODE && strcmp(ydoc_scalar_text(v), "off") == 0))
        return 0;
    return cfg_parse_listen_address(c, v, "agent_listen", "host:port like 127.0.0.1:9800, or off",
                                    "0.0.0.0:9800 or [::]:9800 (or off)", &cfg->fleet.agent_host,
                                    &cfg->fleet.agent_port);
}

static int fp_host_name(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, v, "a host name like gpu-node-1") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    size_t len = strlen(s);
    if (len == 0 || len > HOST_NAME_MAX_LEN ||
        !cfg_all_chars_in(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"))
        return ydoc_fail(c, v, "expected 1 to %d of A-Z a-z 0-9 . _ - (a host name), got %s", HOST_NAME_MAX_LEN,
                         ydoc_describe(v, d, sizeof d));
    return cfg_set_string(c, v, field);
}

static const field_spec_t fleet_fields[] = {
    {"agent_listen", fp_agent_listen, 0, 0, 0, NULL},
    {"agent_wait", cfg_fp_duration, offsetof(config_t, fleet.agent_wait_ms), 1, 0, NULL},
    {"agent_timeout", cfg_fp_duration, offsetof(config_t, fleet.agent_timeout_ms), 10, 0, NULL},
    {"agent_max_connections", cfg_fp_unsigned, offsetof(config_t, fleet.agent_max_connections), 1, 10000, NULL},
    {"host_name", fp_host_name, offsetof(config_t, fleet.host_name), 0, 0, NULL},
};
const section_t cfg_fleet_section = SECTION(fleet_fields);

int cfg_check_fleet(ctx_t *c, config_t *cfg, yaml_node_t *root)
{
    yaml_node_t *fleet = ydoc_find_value(c, root, "fleet");
    if (cfg->fleet.agent_host && cfg->fleet.agent_port == cfg->listen_port &&
        (strcmp(cfg->fleet.agent_host, cfg->listen_host) == 0 || !strcmp(cfg->fleet.agent_host, "0.0.0.0") ||
         !strcmp(cfg->listen_host, "0.0.0.0") || !strcmp(cfg->fleet.agent_host, "::") ||
         !strcmp(cfg->listen_host, "::"))) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "fleet.agent_listen");
        return ydoc_fail(c, ydoc_find_value(c, fleet, "agent_listen"),
                         "%s:%d is the address of listen; the agent needs a port of its own", cfg->fleet.agent_host,
                         cfg->fleet.agent_port);
    }
    if (cfg->fleet.agent_wait_ms > cfg->fleet.agent_timeout_ms) {
        ydoc_path_reset(c);
        ydoc_path_append(c, "fleet.agent_wait");
        yaml_node_t *n = ydoc_find_value(c, fleet, "agent_wait");
        return ydoc_fail(c, n ? n : ydoc_find_value(c, fleet, "agent_timeout"),
                         "agent_wait (%llu ms) is longer than agent_timeout (%llu ms)",
                         (unsigned long long)cfg->fleet.agent_wait_ms, (unsigned long long)cfg->fleet.agent_timeout_ms);
    }
    return 0;
}
