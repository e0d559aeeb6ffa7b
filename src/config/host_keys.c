/*
 * host_keys: the top-level allowed_hosts key, the Host names vramd answers besides the
 * ones no DNS-rebinding page can stand behind (localhost, *.localhost, IP literals:
 * http/http_auth.h http_host_allowed), and its freeing.
 *
 * Invariants: a set key (a list, even empty) is `listed` and turns the check on whatever
 * admin_token_file says; absent or null is not listed (the check is then on only where no
 * admin token is set: serve/api.c); each entry is a host name (letters, digits, '-', '.';
 * no port, no scheme) or "*.domain" for any name under domain, at most ALLOWED_HOSTS_MAX
 * entries of at most 253 characters; the list is replaced only once all of it is copied.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config_int.h"

#define HOST_NAME_MAX_LEN 253 /* a DNS name's longest text form */

void cfg_allowed_hosts_free(config_t *cfg)
{
    cfg_free_argv(cfg->allowed_hosts.names, cfg->allowed_hosts.n);
    cfg->allowed_hosts.names = NULL;
    cfg->allowed_hosts.n = 0;
    cfg->allowed_hosts.listed = false;
}

/* One entry: 0, or -1 after ydoc_fail naming what is wrong with it. */
static int check_host_name(ctx_t *c, yaml_node_t *item)
{
    char d[DESCRIBE_MAX];
    if (ydoc_need_scalar(c, item, "a host name like gpu-box.example.com") != 0)
        return -1;
    const char *s = ydoc_scalar_text(item);
    const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t len = strlen(name);
    if (len == 0 || len > HOST_NAME_MAX_LEN || name[0] == '.' || name[0] == '-' ||
        !cfg_all_chars_in(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-."))
        return ydoc_fail(c, item,
                         "expected a host name (letters, digits, '-' and '.'; no port or scheme) or *.domain, got %s",
                         ydoc_describe(item, d, sizeof d));
    return 0;
}

int cfg_fp_allowed_hosts(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_t *cfg = field;
    (void)spec;
    if (ydoc_is_null(v)) {
        cfg_allowed_hosts_free(cfg);
        return 0;
    }
    char **names = NULL;
    size_t n = 0;
    if (cfg_parse_string_list(c, v, "a list of host names like [gpu-box.example.com]", 0, ALLOWED_HOSTS_MAX,
                              check_host_name, &names, &n) != 0)
        return -1;
    cfg_allowed_hosts_free(cfg);
    cfg->allowed_hosts.names = names;
    cfg->allowed_hosts.n = n;
    cfg->allowed_hosts.listed = true;
    return 0;
}
