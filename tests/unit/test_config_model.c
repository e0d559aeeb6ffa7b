/*
 * test_config_model: the model keys of the YAML configuration (src/config/model_keys.c,
 * quality_keys.c, defaults.c) when they parse.
 *
 * Covers: the SPEC section 2 example with every value it sets; built-in defaults;
 * `defaults:` overlay (per key in nested sections, whole lists); null removing optional
 * settings; url parsing; routes; keep_alive forever/0; per_request learn; degrade/validate
 * forms and their YAML -> JSON typing; quoted and plain scalars; refcounting;
 * memory.cancelled_hold (auto by default, a duration, 0, bounded; off in the presets of
 * servers that abort a request whose connection closed, auto for comfyui).
 * Run: make build/tests/test_config_model && build/tests/test_config_model (and with make SAN=1).
 */

#include "config_test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static const char *spec_example =
    "listen: 127.0.0.1:8800          # client and admin API (HTTP/1.1)\n"
    "admin_token_file: null          # bearer token for admin routes; required when listen is not loopback\n"
    "state_dir: ./var                # job journal (SQLite), results, pid files\n"
    "log: { format: json, level: info }   # json | text\n"
    "gpu:\n"
    "  nvml_library: libnvidia-ml.so.1\n"
    "  devices: all                  # or a list of indexes / UUIDs\n"
    "  headroom: 512MiB              # per GPU, never handed out\n"
    "  poll: 100ms                   # NVML polling while anything is loading, unloading or running\n"
    "  foreign_usage: measure        # measure: memory held by processes vramd does not manage is subtracted from capacity\n"
    "limits:\n"
    "  max_body: 64MiB\n"
    "  max_header: 16KiB\n"
    "  max_connections: 20000\n"
    "  header_timeout: 10s\n"
    "  queue_max: 1024               # all models together\n"
    "jobs:\n"
    "  results_max_bytes: 20GiB\n"
    "  results_ttl: 24h\n"
    "  min_free_disk: 2GiB           # below this, new jobs are refused with 507\n"
    "defaults:                       # any model key below may appear here\n"
    "  queue_max: 64\n"
    "  deadline: 60s\n"
    "  keep_alive: 10m\n"
    "models:\n"
    "  trellis:\n"
    "    route: /trellis/            # requests under this path go to this model (prefix removed unless strip: false)\n"
    "    aliases: [trellis-1]        # names accepted in a JSON body \"model\" field (OpenAI-style routing)\n"
    "    cmd: [python3, serve.py, --port, \"{port}\"]   # supervised: vramd starts and stops it\n"
    "    env: { PYTORCH_CUDA_ALLOC_CONF: \"expandable_segments:True\" }\n"
    "    cwd: /srv/trellis\n"
    "    # url: http://127.0.0.1:10006   # instead of cmd: a server vramd does not start (external)\n"
    "    health: { path: /health, interval: 5s, timeout: 2s, failures: 3 }\n"
    "    startup_timeout: 5m\n"
    "    stop_timeout: 10s           # SIGTERM, then SIGKILL to the whole process group\n"
    "    gpus: any                   # or [0] / [0, 1]; one instance lives on one GPU\n"
    "    memory:\n"
    "      resident: 6GiB            # held while loaded\n"
    "      per_request: 11.5GiB      # extra peak while one request runs; \"learn\" = start from the declared value, then learn from NVML\n"
    "    concurrency: 1              # requests in flight per instance\n"
    "    instances: 1                # most instances at once\n"
    "    queue_max: 16\n"
    "    deadline: 30s\n"
    "    priority: 5                 # 0..9, higher first\n"
    "    keep_alive: 10m             # idle this long -> unload; 0 = unload after each request; forever = pinned\n"
    "    unload: { method: POST, path: /unload_models/ }   # external servers: how to ask for memory back\n"
    "    reload: { method: POST, path: /reload_models/ }\n"
    "    clear_cache: { method: POST, path: /clear_cache/ }  # optional: called after a request when memory is short\n"
    "    recycle:\n"
    "      after_requests: 500\n"
    "      max_growth: 2GiB          # restart when the instance holds this much more than after its load\n"
    "      hang_timeout: 120s        # a request running longer than this is a hang: kill, restart, answer 504\n"
    "    degrade:                    # see section 5\n"
    "      detect: { status: [500, 507], body_matches: \"out of memory\", json: { path: /success, equals: false } }\n"
    "      ladder:\n"
    "        - { set: { steps: 12 } }\n"
    "        - { set: { pipeline_type: \"512\" }, per_request: 6GiB }\n"
    "        - { set: { resolution: 384 }, per_request: 4GiB }\n"
    "      when: on_oom              # on_oom | to_fit (also start at the first level that fits now when waiting would miss the deadline)\n"
    "    validate: { kind: glb, min_bytes: 1000 }   # glb | ply | png | json | none; or { cmd: [...] }\n";

/* test_spec_example, in steps: the top-level keys, the model keys, the quality keys. */
static void check_spec_top(const config_t *c)
{
    assert_int_equal(c->refs, 1);
    assert_string_equal(c->path, "test.yaml");
    assert_string_equal(c->listen_host, "127.0.0.1");
    assert_int_equal(c->listen_port, 8800);
    assert_null(c->admin_token_file);
    assert_null(c->admin_token);
    assert_string_equal(c->state_dir, "./var"); /* relative to "test.yaml"'s directory, "." */
    assert_int_equal(c->log_format, LOG_FORMAT_JSON);
    assert_int_equal(c->log_level, LOG_INFO);
    assert_string_equal(c->gpu.nvml_library, "libnvidia-ml.so.1");
    assert_null(c->gpu.devices);
    assert_int_equal(c->gpu.n_devices, 0);
    assert_null(c->gpu.device_uuids);
    assert_int_equal(c->gpu.headroom, 512 * MiB);
    assert_int_equal(c->gpu.poll_ms, 100);
    assert_true(c->gpu.foreign_measure);
    assert_int_equal(c->limits.max_body, 64 * MiB);
    assert_int_equal(c->limits.max_header, 16 * KiB);
    assert_int_equal(c->limits.max_header_count, 100);
    assert_int_equal(c->limits.max_connections, 20000);
    assert_int_equal(c->limits.header_timeout_ms, 10000);
    assert_int_equal(c->limits.queue_max, 1024);
    assert_int_equal(c->limits.drain_timeout_ms, 60000);
    assert_int_equal(c->jobs.results_max_bytes, 20 * GiB);
    assert_int_equal(c->jobs.results_ttl_ms, 24ULL * 3600 * 1000);
    assert_int_equal(c->jobs.min_free_disk, 2 * GiB);
}

static void check_spec_model(const model_config_t *m)
{
    assert_string_equal(m->route, "/trellis/");
    assert_true(m->strip);
    assert_int_equal(m->n_aliases, 1);
    assert_string_equal(m->aliases[0], "trellis-1");
    assert_int_equal(m->n_cmd, 4);
    assert_string_equal(m->cmd[0], "python3");
    assert_string_equal(m->cmd[1], "serve.py");
    assert_string_equal(m->cmd[2], "--port");
    assert_string_equal(m->cmd[3], "{port}");
    assert_null(m->cmd[4]);
    assert_int_equal(m->n_env, 1);
    assert_string_equal(m->env[0].key, "PYTORCH_CUDA_ALLOC_CONF");
    assert_string_equal(m->env[0].value, "expandable_segments:True");
    assert_string_equal(m->cwd, "/srv/trellis");
    assert_null(m->url);
    assert_null(m->url_host);
    assert_string_equal(m->health.path, "/health");
    assert_int_equal(m->health.interval_ms, 5000);
    assert_int_equal(m->health.timeout_ms, 2000);
    assert_int_equal(m->health.failures, 3);
    assert_int_equal(m->startup_timeout_ms, 300000);
    assert_int_equal(m->stop_timeout_ms, 10000);
    assert_null(m->gpus);
    assert_int_equal(m->n_gpus, 0);
    assert_int_equal(m->memory.resident, 6 * GiB);
    assert_int_equal(m->memory.per_request, 11 * GiB + GiB / 2);
    assert_false(m->memory.learn);
    assert_int_equal(m->concurrency, 1);
    assert_int_equal(m->instances, 1);
    assert_int_equal(m->queue_max, 16);
    assert_int_equal(m->deadline_ms, 30000);
    assert_int_equal(m->priority, 5);
    assert_int_equal(m->keep_alive_ms, 600000);
    assert_true(m->unload.set);
    assert_string_equal(m->unload.method, "POST");
    assert_string_equal(m->unload.path, "/unload_models/");
    assert_int_equal(m->unload.timeout_ms, 30000);
    assert_true(m->reload.set);
    assert_string_equal(m->reload.path, "/reload_models/");
    assert_int_equal(m->reload.timeout_ms, 60000);
    assert_true(m->clear_cache.set);
    assert_string_equal(m->clear_cache.path, "/clear_cache/");
    assert_int_equal(m->clear_cache.timeout_ms, 30000);
    assert_int_equal(m->recycle.after_requests, 500);
    assert_int_equal(m->recycle.max_growth, 2 * GiB);
    assert_int_equal(m->recycle.hang_timeout_ms, 120000);
    assert_false(m->recycle.on_oom);
}

static void check_spec_quality(const model_config_t *m)
{
    assert_true(m->degrade.set);
    assert_int_equal(m->degrade.detect.n_statuses, 2);
    assert_int_equal(m->degrade.detect.statuses[0], 500);
    assert_int_equal(m->degrade.detect.statuses[1], 507);
    assert_string_equal(m->degrade.detect.body_matches, "out of memory");
    assert_string_equal(m->degrade.detect.json_path, "/success");
    assert_true(cJSON_IsFalse(m->degrade.detect.json_equals));
    assert_null(m->degrade.detect.header);
    assert_int_equal(m->degrade.n_ladder, 3);
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(m->degrade.ladder[0].set, "steps");
    assert_true(cJSON_IsNumber(steps));
    assert_int_equal(steps->valueint, 12);
    assert_false(m->degrade.ladder[0].has_per_request);
    assert_int_equal(m->degrade.ladder[0].per_request, 0);
    const cJSON *pipeline = cJSON_GetObjectItemCaseSensitive(m->degrade.ladder[1].set, "pipeline_type");
    assert_true(cJSON_IsString(pipeline)); /* quoted "512" stays a string */
    assert_string_equal(pipeline->valuestring, "512");
    assert_true(m->degrade.ladder[1].has_per_request);
    assert_int_equal(m->degrade.ladder[1].per_request, 6 * GiB);
    const cJSON *resolution = cJSON_GetObjectItemCaseSensitive(m->degrade.ladder[2].set, "resolution");
    assert_true(cJSON_IsNumber(resolution));
    assert_int_equal(resolution->valueint, 384);
    assert_int_equal(m->degrade.ladder[2].per_request, 4 * GiB);
    assert_int_equal(m->degrade.when, DEGRADE_ON_OOM);
    assert_int_equal(m->validate.kind, VALIDATE_GLB);
    assert_int_equal(m->validate.min_bytes, 1000);
    assert_null(m->validate.cmd);
    assert_false(m->retry_safe);
}

static void test_spec_example(void **state)
{
    (void)state;
    unsetenv("VRAMD_NVML_LIBRARY");
    config_t *c = parse_ok(spec_example);
    check_spec_top(c);

    assert_int_equal(c->n_models, 1);
    const model_config_t *m = &c->models[0];
    assert_string_equal(m->name, "trellis");
    check_spec_model(m);
    check_spec_quality(m);

    assert_ptr_equal(config_find_model(c, "trellis"), m);
    assert_ptr_equal(config_find_model(c, "trellis-1"), m);
    assert_null(config_find_model(c, "trellis-2"));
    assert_null(config_find_model(c, "Trellis"));
    config_unref(c);
}

static void test_builtin_defaults(void **state)
{
    (void)state;
    unsetenv("VRAMD_NVML_LIBRARY");
    config_t *c = parse_ok("models:\n  m:\n    cmd: [./serve]\n");
    assert_string_equal(c->listen_host, "127.0.0.1");
    assert_int_equal(c->listen_port, 8800);
    assert_string_equal(c->state_dir, "./var");
    assert_int_equal(c->log_format, LOG_FORMAT_JSON);
    assert_int_equal(c->log_level, LOG_INFO);
    assert_string_equal(c->gpu.nvml_library, "libnvidia-ml.so.1");
    assert_int_equal(c->gpu.headroom, 512 * MiB);
    assert_int_equal(c->gpu.poll_ms, 100);
    assert_true(c->gpu.foreign_measure);
    assert_int_equal(c->limits.max_body, 64 * MiB);
    assert_int_equal(c->limits.max_header, 16 * KiB);
    assert_int_equal(c->limits.max_header_count, 100);
    assert_int_equal(c->limits.max_connections, 20000);
    assert_int_equal(c->limits.header_timeout_ms, 10000);
    assert_int_equal(c->limits.queue_max, 1024);
    assert_int_equal(c->limits.drain_timeout_ms, 60000);
    assert_int_equal(c->jobs.results_max_bytes, 20 * GiB);
    assert_int_equal(c->jobs.results_ttl_ms, 86400000);
    assert_int_equal(c->jobs.min_free_disk, 2 * GiB);
    const model_config_t *m = &c->models[0];
    assert_null(m->route);
    assert_true(m->strip);
    assert_int_equal(m->n_aliases, 0);
    assert_int_equal(m->n_env, 0);
    assert_null(m->cwd);
    assert_string_equal(m->health.path, "/health");
    assert_int_equal(m->health.interval_ms, 5000);
    assert_int_equal(m->health.timeout_ms, 2000);
    assert_int_equal(m->health.failures, 3);
    assert_int_equal(m->startup_timeout_ms, 300000);
    assert_int_equal(m->stop_timeout_ms, 10000);
    assert_null(m->gpus);
    assert_int_equal(m->memory.resident, 0);
    assert_int_equal(m->memory.per_request, 0);
    assert_false(m->memory.learn);
    assert_int_equal(m->concurrency, 1);
    assert_int_equal(m->instances, 1);
    assert_int_equal(m->queue_max, 64);
    assert_int_equal(m->deadline_ms, 60000);
    assert_int_equal(m->priority, 5);
    assert_int_equal(m->keep_alive_ms, 600000);
    assert_false(m->unload.set);
    assert_string_equal(m->unload.method, "POST");
    assert_null(m->unload.path);
    assert_int_equal(m->unload.timeout_ms, 30000);
    assert_false(m->reload.set);
    assert_int_equal(m->reload.timeout_ms, 60000);
    assert_false(m->clear_cache.set);
    assert_int_equal(m->recycle.after_requests, 0);
    assert_int_equal(m->recycle.max_growth, 0);
    assert_int_equal(m->recycle.hang_timeout_ms, 0);
    assert_false(m->recycle.on_oom);
    assert_false(m->degrade.set);
    assert_int_equal(m->degrade.n_ladder, 0);
    assert_int_equal(m->validate.kind, VALIDATE_NONE);
    assert_int_equal(m->validate.timeout_ms, 30000);
    assert_false(m->retry_safe);
    config_unref(c);
}

static void test_defaults_overlay(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults:\n"
                           "  queue_max: 8\n"
                           "  priority: 2\n"
                           "  health: { interval: 1s, failures: 5 }\n"
                           "  memory: { resident: 1GiB, per_request: 2GiB }\n"
                           "  env: { A: one, B: two }\n"
                           "  aliases: [shared-alias]\n"
                           "  recycle: { after_requests: 10 }\n"
                           "  cmd: [simworker, --port, \"{port}\"]\n"
                           "models:\n"
                           "  a:\n"
                           "    aliases: [a1]\n"
                           "    health: { timeout: 9s }\n"
                           "    memory: { per_request: 3GiB }\n"
                           "    env: { B: bee, C: sea, A: null }\n"
                           "    recycle: { on_oom: true }\n"
                           "  b:\n"
                           "    queue_max: 99\n"
                           "    aliases: []\n"
                           "    cmd: [other]\n");
    assert_int_equal(c->n_models, 2);
    const model_config_t *a = config_find_model(c, "a");
    const model_config_t *b = config_find_model(c, "b");
    assert_non_null(a);
    assert_non_null(b);
    /* a: scalars from defaults, nested sections overlaid key by key, lists replaced. */
    assert_int_equal(a->queue_max, 8);
    assert_int_equal(a->priority, 2);
    assert_string_equal(a->health.path, "/health");
    assert_int_equal(a->health.interval_ms, 1000);
    assert_int_equal(a->health.timeout_ms, 9000);
    assert_int_equal(a->health.failures, 5);
    assert_int_equal(a->memory.resident, GiB);
    assert_int_equal(a->memory.per_request, 3 * GiB);
    assert_int_equal(a->n_aliases, 1);
    assert_string_equal(a->aliases[0], "a1");
    assert_int_equal(a->recycle.after_requests, 10);
    assert_true(a->recycle.on_oom);
    assert_int_equal(a->n_cmd, 3);
    assert_string_equal(a->cmd[0], "simworker");
    /* env: overlaid per variable; null is kept as {A, NULL}: the worker must not inherit A. */
    assert_int_equal(a->n_env, 3);
    const char *b_value = NULL, *c_value = NULL;
    bool a_unset = false;
    for (size_t i = 0; i < a->n_env; i++) {
        if (strcmp(a->env[i].key, "B") == 0)
            b_value = a->env[i].value;
        if (strcmp(a->env[i].key, "C") == 0)
            c_value = a->env[i].value;
        if (strcmp(a->env[i].key, "A") == 0)
            a_unset = a->env[i].value == NULL;
    }
    assert_true(a_unset);
    assert_string_equal(b_value, "bee");
    assert_string_equal(c_value, "sea");
    /* b: its own scalars and lists win; the rest from defaults, then built-ins. */
    assert_int_equal(b->queue_max, 99);
    assert_int_equal(b->priority, 2);
    assert_int_equal(b->n_aliases, 0);
    assert_int_equal(b->n_cmd, 1);
    assert_string_equal(b->cmd[0], "other");
    assert_int_equal(b->n_env, 2);
    assert_int_equal(b->health.timeout_ms, 2000);
    assert_int_equal(b->memory.per_request, 2 * GiB);
    assert_int_equal(b->deadline_ms, 60000);
    config_unref(c);
}

static void test_null_removes_inherited(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults:\n"
                           "  cmd: [simworker]\n"
                           "  route: /shared/\n"
                           "  degrade: { ladder: [ { set: { steps: 4 } } ] }\n"
                           "  unload: { path: /unload }\n"
                           "models:\n"
                           "  ext:\n"
                           "    cmd: null\n"
                           "    route: ~\n"
                           "    url: http://127.0.0.1:9000\n"
                           "    degrade:\n"
                           "    unload: null\n");
    const model_config_t *m = &c->models[0];
    assert_null(m->cmd);
    assert_int_equal(m->n_cmd, 0);
    assert_null(m->route);
    assert_string_equal(m->url, "http://127.0.0.1:9000");
    assert_false(m->degrade.set);
    assert_int_equal(m->degrade.n_ladder, 0);
    assert_false(m->unload.set);
    assert_null(m->unload.path);
    assert_string_equal(m->unload.method, "POST");
    config_unref(c);
}

static void test_url_parsing(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  a: {url: \"http://127.0.0.1:10006/\"}\n"
                           "  b: {url: \"http://[::1]:9000\"}\n"
                           "  c: {url: \"http://gpu-box.local\"}\n");
    assert_string_equal(c->models[0].url, "http://127.0.0.1:10006");
    assert_string_equal(c->models[0].url_host, "127.0.0.1");
    assert_int_equal(c->models[0].url_port, 10006);
    assert_null(c->models[0].cmd);
    assert_string_equal(c->models[1].url, "http://[::1]:9000");
    assert_string_equal(c->models[1].url_host, "::1");
    assert_int_equal(c->models[1].url_port, 9000);
    assert_string_equal(c->models[2].url_host, "gpu-box.local");
    assert_int_equal(c->models[2].url_port, 80);
    config_unref(c);
}

static void test_routes(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  a: {cmd: [x], route: trellis}\n"
                           "  b: {cmd: [x], route: /hunyuan}\n"
                           "  c: {cmd: [x], route: \"//v1//chat/\"}\n"
                           "  d: {cmd: [x], route: /}\n"
                           "  e: {cmd: [x], route: /e/, strip: false}\n");
    assert_string_equal(c->models[0].route, "/trellis/");
    assert_string_equal(c->models[1].route, "/hunyuan/");
    assert_string_equal(c->models[2].route, "/v1/chat/");
    assert_string_equal(c->models[3].route, "/");
    assert_string_equal(c->models[4].route, "/e/");
    assert_false(c->models[4].strip);
    assert_true(c->models[0].strip);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    route: /x\n  b:\n    cmd: [y]\n    route: x/\n",
                 "test.yaml:7:12: models.b.route: route /x/ is already used by model \"a\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    route: /a b/\n",
                 "test.yaml:4:12: models.a.route: a route may not contain spaces, control characters, '?' or '#', got \"/a b/\"");
}

static void test_keep_alive(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  pinned: {cmd: [x], keep_alive: forever}\n"
                           "  zero: {cmd: [x], keep_alive: 0}\n"
                           "  zero_s: {cmd: [x], keep_alive: 0s}\n"
                           "  five: {cmd: [x], keep_alive: 5m}\n"
                           "  bare: {cmd: [x], keep_alive: 90}\n");
    assert_true(config_find_model(c, "pinned")->keep_alive_ms == CONFIG_FOREVER);
    assert_int_equal(config_find_model(c, "zero")->keep_alive_ms, 0);
    assert_int_equal(config_find_model(c, "zero_s")->keep_alive_ms, 0);
    assert_int_equal(config_find_model(c, "five")->keep_alive_ms, 300000);
    assert_int_equal(config_find_model(c, "bare")->keep_alive_ms, 90000);
    config_unref(c);
}

/* outlier: base and max ejection time, defaults 30s and 5m, overlaid key by key, bounded. */
static void test_outlier(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {outlier: {max_ejection_time: 10m}}\n"
                           "models:\n"
                           "  plain: {cmd: [x], outlier: null}\n"
                           "  short: {cmd: [x], outlier: {base_ejection_time: 500ms}}\n");
    const model_config_t *m = config_find_model(c, "short");
    assert_int_equal(m->outlier.base_ejection_ms, 500);
    assert_int_equal(m->outlier.max_ejection_ms, 600000);
    config_unref(c);
    c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(config_find_model(c, "a")->outlier.base_ejection_ms, 30000);
    assert_int_equal(config_find_model(c, "a")->outlier.max_ejection_ms, 300000);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    outlier: {base_ejection_time: 10ms}\n",
                 "test.yaml:4:35: models.a.outlier.base_ejection_time: must be at least 100ms, got \"10ms\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    outlier: {base_ejection_time: 2h, max_ejection_time: 3h}\n",
                 "test.yaml:4:35: models.a.outlier.base_ejection_time: must be at most 1h");
    expect_error("models:\n  a:\n    cmd: [x]\n    outlier: {base_ejection_time: 1m, max_ejection_time: 30s}\n",
                 "test.yaml:4:58: models.a.outlier.max_ejection_time: must be at least base_ejection_time");
    expect_error("models:\n  a:\n    cmd: [x]\n    outlier: {max_ejection: 1m}\n",
                 "test.yaml:4:15: models.a.outlier.max_ejection: unknown key \"max_ejection\"");
}

/* max_client_deadline: unset is 0 (the model's deadline caps X-Vramd-Deadline); a
 * duration, also from defaults:; not a duration: refused. */
static void test_max_client_deadline(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {max_client_deadline: 10m}\n"
                           "models:\n"
                           "  a: {cmd: [x]}\n"
                           "  b: {cmd: [x], deadline: 5s, max_client_deadline: 30s}\n");
    assert_int_equal(config_find_model(c, "a")->max_client_deadline_ms, 600000);
    assert_int_equal(config_find_model(c, "b")->max_client_deadline_ms, 30000);
    assert_int_equal(config_find_model(c, "b")->deadline_ms, 5000);
    config_unref(c);
    c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(config_find_model(c, "a")->max_client_deadline_ms, 0);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    max_client_deadline: soon\n",
                 "test.yaml:4:26: models.a.max_client_deadline: expected a duration like 30s, got \"soon\"");
}

/* total_deadline: unset is 0 (no end-to-end bound); a duration, also from defaults:; 0
 * allowed (off); not a duration: refused naming the key. */
static void test_total_deadline(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {total_deadline: 2m}\n"
                           "models:\n"
                           "  a: {cmd: [x]}\n"
                           "  b: {cmd: [x], total_deadline: 45s}\n"
                           "  c: {cmd: [x], total_deadline: 0}\n");
    assert_int_equal(config_find_model(c, "a")->total_deadline_ms, 120000);
    assert_int_equal(config_find_model(c, "b")->total_deadline_ms, 45000);
    assert_int_equal(config_find_model(c, "c")->total_deadline_ms, 0);
    config_unref(c);
    c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(config_find_model(c, "a")->total_deadline_ms, 0);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    total_deadline: soon\n",
                 "test.yaml:4:21: models.a.total_deadline: expected a duration like 30s, got \"soon\"");
}

static void test_per_request_learn(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults:\n"
                           "  memory: {per_request: 4GiB}\n"
                           "models:\n"
                           "  a: {cmd: [x], memory: {per_request: learn}}\n"
                           "  b: {cmd: [x], memory: {per_request: 2GiB, learn: true}}\n"
                           "  c: {cmd: [x]}\n"
                           "  d: {cmd: [x], memory: {per_request: \"learn\", resident: 1073741824}}\n");
    const model_config_t *a = config_find_model(c, "a");
    assert_true(a->memory.learn);
    assert_int_equal(a->memory.per_request, 4 * GiB); /* the declared start comes from defaults */
    const model_config_t *b = config_find_model(c, "b");
    assert_true(b->memory.learn);
    assert_int_equal(b->memory.per_request, 2 * GiB);
    const model_config_t *m = config_find_model(c, "c");
    assert_false(m->memory.learn);
    assert_int_equal(m->memory.per_request, 4 * GiB);
    const model_config_t *d = config_find_model(c, "d");
    assert_true(d->memory.learn);
    assert_int_equal(d->memory.resident, GiB); /* a plain integer is bytes */
    config_unref(c);
}

static void test_degrade_and_validate_forms(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  a:\n"
                           "    cmd: [x]\n"
                           "    degrade:\n"
                           "      detect: {status: 500, header: X-Oom}\n"
                           "      ladder:\n"
                           "        - set: {i: 1, s: \"1\", t: true, q: 'true', n: null, f: 1.5, h: 0x10,\n"
                           "                l: [1, two], o: {deep: -3}, e: '', neg: -2e3}\n"
                           "        - per_request: 1GiB\n"
                           "      when: to_fit\n"
                           "    validate: png\n"
                           "    retry: safe\n"
                           "  b:\n"
                           "    cmd: [x]\n"
                           "    validate: {cmd: [check.sh, \"{file}\"], timeout: 5s, json: {path: /ok, equals: [1, a]}}\n"
                           "  c:\n"
                           "    cmd: [x]\n"
                           "    validate: {kind: json, min_bytes: 2KiB}\n");
    const model_config_t *a = &c->models[0];
    assert_int_equal(a->degrade.detect.n_statuses, 1);
    assert_int_equal(a->degrade.detect.statuses[0], 500);
    assert_string_equal(a->degrade.detect.header, "X-Oom");
    assert_null(a->degrade.detect.body_matches);
    assert_int_equal(a->degrade.when, DEGRADE_TO_FIT);
    assert_int_equal(a->degrade.n_ladder, 2);
    const cJSON *set = a->degrade.ladder[0].set;
    char *printed = cJSON_PrintUnformatted(set);
    assert_string_equal(printed, "{\"i\":1,\"s\":\"1\",\"t\":true,\"q\":\"true\",\"n\":null,\"f\":1.5,\"h\":16,"
                                 "\"l\":[1,\"two\"],\"o\":{\"deep\":-3},\"e\":\"\",\"neg\":-2000}");
    free(printed);
    /* A level with only per_request has an empty `set` object, never NULL. */
    assert_true(cJSON_IsObject(a->degrade.ladder[1].set));
    assert_null(a->degrade.ladder[1].set->child);
    assert_int_equal(a->degrade.ladder[1].per_request, GiB);
    assert_int_equal(a->validate.kind, VALIDATE_PNG);
    assert_true(a->retry_safe);
    const model_config_t *b = &c->models[1];
    assert_int_equal(b->validate.kind, VALIDATE_CMD);
    assert_int_equal(b->validate.n_cmd, 2);
    assert_string_equal(b->validate.cmd[0], "check.sh");
    assert_string_equal(b->validate.cmd[1], "{file}");
    assert_null(b->validate.cmd[2]);
    assert_int_equal(b->validate.timeout_ms, 5000);
    assert_string_equal(b->validate.json_path, "/ok");
    printed = cJSON_PrintUnformatted(b->validate.json_equals);
    assert_string_equal(printed, "[1,\"a\"]");
    free(printed);
    const model_config_t *m = &c->models[2];
    assert_int_equal(m->validate.kind, VALIDATE_JSON);
    assert_int_equal(m->validate.min_bytes, 2048);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    validate: {kind: glb, cmd: [check]}\n",
                 "test.yaml:4:32: models.a.validate.cmd: cmd is only used with kind: cmd (or without kind)");
    expect_error("models:\n  a:\n    cmd: [x]\n    validate: cmd\n",
                 "test.yaml:4:15: models.a.validate: kind cmd needs cmd: [program, args...]");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {detect: {json: {path: /success}}}\n",
                 "test.yaml:4:30: models.a.degrade.detect.json: equals is required (the value that the pointer must hold)");
}

static void test_quoted_and_plain_scalars(void **state)
{
    (void)state;
    /* Typed keys accept quoted values; the string "null" quoted is not null. */
    config_t *c = parse_ok("models:\n"
                           "  a:\n"
                           "    cmd: [x, 8000, true]\n"
                           "    priority: \"7\"\n"
                           "    cwd: \"null\"\n"
                           "    env: {N: 4, T: true}\n");
    const model_config_t *m = &c->models[0];
    assert_string_equal(m->cmd[1], "8000");
    assert_string_equal(m->cmd[2], "true");
    assert_int_equal(m->priority, 7);
    assert_string_equal(m->cwd, "null");
    assert_int_equal(m->n_env, 2);
    assert_string_equal(m->env[0].value, "4");
    config_unref(c);
}

static void test_refcount(void **state)
{
    (void)state;
    config_t *c = parse_ok(spec_example);
    assert_ptr_equal(config_ref(c), c);
    assert_int_equal(c->refs, 2);
    config_unref(c);
    assert_int_equal(c->refs, 1);
    assert_string_equal(c->models[0].name, "trellis"); /* still alive */
    config_unref(c);                                   /* freed: ASan would report a leak otherwise */
    assert_null(config_ref(NULL));
    config_unref(NULL);
}

static void test_cancelled_hold(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a:\n    cmd: [x]\n  b:\n    cmd: [x]\n    memory: {cancelled_hold: 90s}\n"
                           "  c:\n    cmd: [x]\n    memory: {cancelled_hold: 0}\n"
                           "  d:\n    preset: llamacpp\n    cmd: [x, \"{port}\"]\n    memory: {resident: 1GiB}\n"
                           "  e:\n    preset: comfyui\n    cmd: [x, \"{port}\"]\n"
                           "  f:\n    preset: ollama\n    cmd: [x]\n    memory: {cancelled_hold: auto}\n");
    assert_true(c->models[0].memory.cancelled_hold_auto);
    assert_false(c->models[1].memory.cancelled_hold_auto);
    assert_int_equal(c->models[1].memory.cancelled_hold_ms, 90000);
    assert_false(c->models[2].memory.cancelled_hold_auto);
    assert_int_equal(c->models[2].memory.cancelled_hold_ms, 0);
    /* the preset's off survives the model's own memory: section (overlaid key by key) */
    assert_false(c->models[3].memory.cancelled_hold_auto);
    assert_int_equal(c->models[3].memory.cancelled_hold_ms, 0);
    assert_true(c->models[4].memory.cancelled_hold_auto);
    assert_true(c->models[5].memory.cancelled_hold_auto); /* the model's own key wins */
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {cancelled_hold: 2h}\n",
                 "test.yaml:4:30: models.a.memory.cancelled_hold: at most 1h (or auto)");
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {cancelled_hold: soon}\n",
                 "test.yaml:4:30: models.a.memory.cancelled_hold: expected auto or a duration like 90s, got \"soon\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_defaults_overlay),
        cmocka_unit_test(test_null_removes_inherited),
        cmocka_unit_test(test_url_parsing),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_outlier),
        cmocka_unit_test(test_max_client_deadline),
        cmocka_unit_test(test_total_deadline),
        cmocka_unit_test(test_per_request_learn),
        cmocka_unit_test(test_degrade_and_validate_forms),
        cmocka_unit_test(test_quoted_and_plain_scalars),
        cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_cancelled_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
