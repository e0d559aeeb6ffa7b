/*
 * defaults: the built-in defaults of a model and of the whole configuration, and freeing
 * both.
 *
 * Invariants: the values here are the ones SPEC section 2 and config.h document; an
 * initialised struct is freeable even when an allocation failed (init returns -1 or NULL
 * then), and freeing accepts any state a parse may leave.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "config/config_int.h"

static void hook_init(config_hook_t *hook, uint64_t timeout_ms)
{
    hook->set = false;
    hook->method = strdup("POST");
    hook->path = NULL;
    hook->body = NULL;
    hook->nothing_to_do = NULL;
    hook->timeout_ms = timeout_ms;
}

/* The built-in model; returns -1 when out of memory (the model is still freeable). */
int cfg_model_init_builtin(model_config_t *m)
{
    memset(m, 0, sizeof *m);
    m->strip = true;
    m->health.path = strdup("/health");
    m->health.interval_ms = 5000;
    m->health.timeout_ms = 2000;
    m->health.failures = 3;
    m->startup_timeout_ms = 5 * 60 * 1000;
    m->stop_timeout_ms = 10 * 1000;
    m->concurrency = 1;
    m->instances = 1;
    m->queue_max = 64;
    m->deadline_ms = 60 * 1000;
    m->priority = 5;
    m->keep_alive_ms = 10 * 60 * 1000;
    m->park_keep_alive_ms = 30 * 60 * 1000;
    hook_init(&m->unload, 30000);
    hook_init(&m->reload, 60000);
    hook_init(&m->clear_cache, 30000);
    hook_init(&m->sleep, 30000);
    hook_init(&m->wake, 60000);
    m->degrade.when = DEGRADE_ON_OOM;
    m->validate.kind = VALIDATE_NONE;
    m->validate.timeout_ms = 30000;
    m->retry_safe = false;
    m->response_timeout_ms = 10 * 60 * 1000; /* seconds-to-minutes GPU work; docs/config.md */
    m->memory.cancelled_hold_auto = true;     /* a Python server runs a request whose client left */
    m->prompt_poll_ms = 250; /* path/prompt_hold.c: ComfyUI's /history poll */
    m->cuda_shim = CUDA_SHIM_OFF; /* off until the real-GPU suite passed with PyTorch (docs/shim.md) */
    m->grant_wait_ms = 5000;
    m->max_wait_ms = 0;          /* auto: max(60 s, 6 x its learned load or wake time), by the scheduler */
    m->evicts = CFG_EVICTS_ANY;
    m->retry_budget.percent = 20;
    m->retry_budget.min = 3;
    m->container.cgroup_parent = -1;             /* auto: podman yes, docker no */
    m->outlier.base_ejection_ms = 30 * 1000;     /* Envoy's base_ejection_time */
    m->outlier.max_ejection_ms = 5 * 60 * 1000;  /* Envoy's max_ejection_time */
    bool ok = m->health.path && m->unload.method && m->reload.method && m->clear_cache.method && m->sleep.method &&
              m->wake.method;
    return ok ? 0 : -1;
}

void cfg_model_free(model_config_t *m)
{
    free(m->name);
    free(m->memory_at);
    free(m->route);
    cfg_free_argv(m->aliases, m->n_aliases);
    cfg_free_argv(m->cmd, m->n_cmd);
    cfg_free_argv(m->stop_cmd, m->n_stop_cmd);
    cfg_container_free(&m->container);
    for (size_t i = 0; i < m->n_env; i++) {
        free(m->env[i].key);
        free(m->env[i].value);
    }
    free(m->env);
    free(m->cwd);
    free(m->served_model);
    free(m->url);
    free(m->url_host);
    free(m->health.path);
    free(m->gpus);
    config_hook_t *hooks[] = {&m->unload, &m->reload, &m->clear_cache, &m->sleep, &m->wake};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        free(hooks[i]->method);
        free(hooks[i]->path);
        free(hooks[i]->body);
        free(hooks[i]->nothing_to_do);
    }
    for (size_t i = 0; i < m->memory.n_size_fields; i++)
        free(m->memory.size_fields[i]);
    cfg_degrade_free(&m->degrade);
    cfg_validate_reset(&m->validate);
}

void cfg_config_free(config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n_models; i++)
        cfg_model_free(&cfg->models[i]);
    free(cfg->models);
    for (size_t i = 0; i < cfg->n_alias_ofs; i++)
        cfg_alias_of_free(&cfg->alias_ofs[i]);
    free(cfg->alias_ofs);
    for (size_t i = 0; i < cfg->gpu.n_idle_models; i++)
        free(cfg->gpu.idle_models[i].model);
    free(cfg->gpu.idle_models);
    for (size_t i = 0; i < cfg->n_warnings; i++) {
        free(cfg->warnings[i].model);
        free(cfg->warnings[i].key);
        free(cfg->warnings[i].message);
        free(cfg->warnings[i].where);
        free(cfg->warnings[i].text);
    }
    free(cfg->warnings);
    free(cfg->path);
    free(cfg->listen_host);
    free(cfg->admin_token_file);
    free(cfg->admin_token);
    cfg_allowed_hosts_free(cfg);
    free(cfg->state_dir);
    free(cfg->cgroup.mode);
    free(cfg->cgroup.path);
    free(cfg->jobs.pg.url);
    free(cfg->jobs.pg.host_id);
    free(cfg->gpu.nvml_library);
    free(cfg->gpu.cuda_library);
    free(cfg->gpu.devices);
    cfg_free_argv(cfg->gpu.device_uuids, cfg->gpu.n_device_uuids);
    free(cfg->per_client.header);
    free(cfg->fleet.agent_host);
    free(cfg->fleet.host_name);
    free(cfg);
}

/* The default host_name: this machine's hostname, cut at the first character a label
 * value here may not hold (a dot keeps the short name), "localhost" when there is none. */
static char *default_host_name(void)
{
    char buf[256] = "";
    if (gethostname(buf, sizeof buf - 1) != 0)
        buf[0] = '\0';
    buf[sizeof buf - 1] = '\0';
    size_t n = 0;
    while (n < 64 && buf[n] &&
           strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", buf[n]))
        n++;
    buf[n] = '\0';
    return strdup(n ? buf : "localhost");
}

config_t *cfg_config_new_builtin(void)
{
    config_t *cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    cfg->refs = 1;
    cfg->listen_host = strdup("127.0.0.1");
    cfg->listen_port = 8800;
    cfg->state_dir = strdup("./var");
    cfg->log_format = LOG_FORMAT_JSON;
    cfg->log_level = LOG_INFO;
    cfg->gpu.nvml_library = strdup("libnvidia-ml.so.1");
    cfg->gpu.cuda_library = strdup("libcuda.so.1");
    cfg->gpu.headroom = 512ULL << 20;
    cfg->gpu.poll_ms = 100;
    cfg->gpu.custom_storage = true; /* only where the driver has it (CUDA 13.4) */
    cfg->gpu.driver_limits = false; /* off until vramd books what a worker still runs for clients that left (docs/shim.md) */
    cfg->gpu.foreign_measure = true;
    cfg->gpu.idle_model_after_ms = 30 * 1000; /* no idle model unless gpu.idle_model */
    cfg->limits.max_body = 64ULL << 20;
    cfg->limits.max_header = 16ULL << 10;
    cfg->limits.max_header_count = 100;
    cfg->limits.max_connections = 20000;
    cfg->limits.metrics_cache_ms = 1000;
    cfg->limits.header_timeout_ms = 10 * 1000;
    cfg->limits.queue_max = 1024;
    cfg->limits.drain_timeout_ms = 60 * 1000;
    cfg->limits.send_timeout_ms = 60 * 1000;
    cfg->limits.body_timeout_ms = 60 * 1000;
    cfg->limits.reserved_connections = 16;
    cfg->limits.worker_log_lines = 1000;
    cfg->limits.worker_log_bytes = 1ULL << 20;
    cfg->limits.upgrade_idle_timeout_ms = 10 * 60 * 1000;
    cfg->limits.upgrades_per_client = 16;
    cfg->limits.upgrades_max = 1024;
    cfg->limits.shim_conns_max = 4096;
    cfg->limits.shim_conns_per_proc = 16;
    cfg->limits.shim_hello_ms = 5000;
    cfg->jobs.results_max_bytes = 20ULL << 30;
    cfg->jobs.results_ttl_ms = 24ULL * 3600 * 1000;
    cfg->jobs.min_free_disk = 2ULL << 30;
    cfg->jobs.max_attempts = 3;
    cfg->jobs.max_active = 64;
    cfg->jobs.records_ttl_ms = 7ULL * 24 * 3600 * 1000;
    cfg->jobs.pg.lease_ms = 30000;
    cfg->jobs.pg.aging_ms = 60000;
    cfg->jobs.pg.max_result_bytes = 256ULL << 20;
    cfg->jobs.pg.timeout_ms = 10000;
    cfg->per_client.max_queued = 32;
    cfg->per_client.max_in_flight = 8;
    cfg->per_client.max_clients = 4096;
    cfg->fleet.agent_wait_ms = 100;
    cfg->fleet.agent_timeout_ms = 2000;
    cfg->fleet.agent_max_connections = 64;
    cfg->fleet.host_name = default_host_name();
    cfg->host_memory.budget = 0; /* auto */
    cfg->host_memory.reserve = 2ULL << 30;
    cfg->cgroup.mode = strdup("auto");
    if (cfg->listen_host == NULL || cfg->state_dir == NULL || cfg->cgroup.mode == NULL || cfg->gpu.nvml_library == NULL ||
        cfg->gpu.cuda_library == NULL || cfg->fleet.host_name == NULL) {
        cfg_config_free(cfg);
        return NULL;
    }
    return cfg;
}
