/*
 * test_config: the YAML configuration parser.
 *
 * Covers: the SPEC section 2 example with every value it sets; built-in defaults;
 * `defaults:` overlay (per key in nested sections, whole lists); each kind of error with
 * its exact "file:line:col: key.path: message" text (unknown keys at several depths,
 * duplicate keys, wrong types, bad values, out-of-range numbers, YAML syntax errors);
 * listen/loopback and the admin token file; names, aliases, routes; keep_alive forever/0;
 * per_request learn; url parsing; degrade/validate forms and their YAML -> JSON typing;
 * null removing optional settings; bounds against YAML alias bombs; refcounting.
 * Run: make build/tests/test_config && build/tests/test_config (and with make SAN=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "config/config.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static config_t *parse_ok(const char *yaml)
{
    char err[CONFIG_ERR_MAX] = "";
    config_t *c = config_parse(yaml, strlen(yaml), "test.yaml", err, sizeof err);
    if (c == NULL)
        fail_msg("config did not parse: %s\n--- yaml ---\n%s", err, yaml);
    return c;
}

static void expect_error_named(const char *name, const char *yaml, const char *expected)
{
    char err[CONFIG_ERR_MAX] = "";
    config_t *c = config_parse(yaml, strlen(yaml), name, err, sizeof err);
    if (c != NULL) {
        config_unref(c);
        fail_msg("config parsed, wanted error: %s\n--- yaml ---\n%s", expected, yaml);
    }
    if (strcmp(err, expected) != 0)
        fail_msg("wrong error\n  got:    %s\n  wanted: %s\n--- yaml ---\n%s", err, expected, yaml);
}

static void expect_error(const char *yaml, const char *expected)
{
    expect_error_named("test.yaml", yaml, expected);
}

/* ---------------------------------------------------------------------------------- */

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

static void test_spec_example(void **state)
{
    (void)state;
    unsetenv("VRAMD_NVML_LIBRARY");
    config_t *c = parse_ok(spec_example);
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

    assert_int_equal(c->n_models, 1);
    const model_config_t *m = &c->models[0];
    assert_string_equal(m->name, "trellis");
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

/* ---------------------------------------------------------------------------------- */

static void test_error_size_like_spec(void **state)
{
    (void)state;
    expect_error_named("vramd.yaml",
                       "listen: 127.0.0.1:8800\n"           /* 1 */
                       "log: {format: text, level: debug}\n" /* 2 */
                       "gpu:\n"                             /* 3 */
                       "  headroom: 1GiB\n"                 /* 4 */
                       "limits:\n"                          /* 5 */
                       "  max_body: 1MiB\n"                 /* 6 */
                       "models:\n"                          /* 7 */
                       "  trellis:\n"                       /* 8 */
                       "    cmd: [python3, serve.py]\n"     /* 9 */
                       "    route: /trellis/\n"             /* 10 */
                       "    memory:\n"                      /* 11 */
                       "      per_request: 12 gigs\n",      /* 12, value at column 20 */
                       "vramd.yaml:12:20: models.trellis.memory.per_request: expected a size like 12GiB, got \"12 gigs\"");
}

static void test_error_unknown_keys(void **state)
{
    (void)state;
    expect_error("foo: 1\nmodels: {a: {cmd: [x]}}\n", "test.yaml:1:1: foo: unknown key \"foo\"");
    expect_error("gpu:\n  headroom: 1GiB\n  bogus: 1\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:3: gpu.bogus: unknown key \"bogus\"");
    expect_error("log:\n  format: text\n  colour: true\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:3: log.colour: unknown key \"colour\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    comand: [y]\n",
                 "test.yaml:4:5: models.a.comand: unknown key \"comand\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    health:\n      path: /h\n      intervall: 5s\n",
                 "test.yaml:6:7: models.a.health.intervall: unknown key \"intervall\"");
    expect_error("models:\n"
                 "  a:\n"
                 "    cmd: [x]\n"
                 "    degrade:\n"
                 "      detect:\n"
                 "        json:\n"
                 "          path: /ok\n"
                 "          equals: false\n"
                 "          deep: 1\n",
                 "test.yaml:9:11: models.a.degrade.detect.json.deep: unknown key \"deep\"");
    expect_error("models:\n"
                 "  a:\n"
                 "    cmd: [x]\n"
                 "    degrade:\n"
                 "      ladder:\n"
                 "        - set: {steps: 8}\n"
                 "        - set: {steps: 4}\n"
                 "          per_requests: 1GiB\n",
                 "test.yaml:8:11: models.a.degrade.ladder[1].per_requests: unknown key \"per_requests\"");
    expect_error("defaults:\n  queue_max: 3\n  keepalive: 5m\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:3: defaults.keepalive: unknown key \"keepalive\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    validate: {kind: json, size: 3}\n",
                 "test.yaml:4:28: models.a.validate.size: unknown key \"size\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    unload: {path: /u, verb: POST}\n",
                 "test.yaml:4:24: models.a.unload.verb: unknown key \"verb\"");
}

static void test_error_duplicate_keys(void **state)
{
    (void)state;
    expect_error("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:1: listen: duplicate key \"listen\"");
    expect_error("models:\n  a:\n    cmd: [x]\n  b:\n    cmd: [y]\n  a:\n    cmd: [z]\n",
                 "test.yaml:6:3: models.a: duplicate key \"a\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    memory:\n      resident: 1GiB\n      resident: 2GiB\n",
                 "test.yaml:6:7: models.a.memory.resident: duplicate key \"resident\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    env: {X: 1, Y: 2, X: 3}\n",
                 "test.yaml:4:23: models.a.env.X: duplicate key \"X\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade:\n      ladder:\n        - set: {steps: 1, steps: 2}\n",
                 "test.yaml:6:27: models.a.degrade.ladder[0].set.steps: duplicate key \"steps\"");
}

static void test_error_wrong_types(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [x]\n    health: [1, 2]\n",
                 "test.yaml:4:13: models.a.health: expected a mapping, got a list");
    expect_error("models:\n  a:\n    cmd: python3 serve.py\n",
                 "test.yaml:3:10: models.a.cmd: expected a list of words like [python3, serve.py], got \"python3 serve.py\"");
    expect_error("models:\n  a:\n    cmd: [x, [y]]\n",
                 "test.yaml:3:14: models.a.cmd[1]: expected a string, got a list");
    expect_error("models:\n  a:\n    cmd: [x]\n    priority: {high: 1}\n",
                 "test.yaml:4:15: models.a.priority: expected an integer from 0 to 9, got a mapping");
    expect_error("models:\n  a:\n    cmd: [x]\n    deadline:\n",
                 "test.yaml:4:14: models.a.deadline: expected a duration like 30s, got null");
    expect_error("gpu: [0]\nmodels: {a: {cmd: [x]}}\n", "test.yaml:1:6: gpu: expected a mapping, got a list");
    expect_error("models: [a, b]\n", "test.yaml:1:9: models: expected a mapping of model names to models, got a list");
    expect_error("- a\n- b\n",
                 "test.yaml:1:1: expected a mapping of keys (listen, gpu, models, ...) at the top level, got a list");
    expect_error("models:\n  a:\n    cmd: [x]\n    strip: yes\n",
                 "test.yaml:4:12: models.a.strip: expected true or false, got \"yes\"");
}

static void test_error_bad_values(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [x]\n    priority: 12\n",
                 "test.yaml:4:15: models.a.priority: expected an integer from 0 to 9, got \"12\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    priority: -1\n",
                 "test.yaml:4:15: models.a.priority: expected an integer from 0 to 9, got \"-1\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    concurrency: 0\n",
                 "test.yaml:4:18: models.a.concurrency: expected an integer from 1 to 1024, got \"0\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    instances: 0\n",
                 "test.yaml:4:16: models.a.instances: expected an integer from 1 to 64, got \"0\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    queue_max: 0\n",
                 "test.yaml:4:16: models.a.queue_max: expected an integer from 1 to 1000000, got \"0\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    deadline: soon\n",
                 "test.yaml:4:15: models.a.deadline: expected a duration like 30s, got \"soon\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    deadline: 0s\n",
                 "test.yaml:4:15: models.a.deadline: must be at least 1ms, got \"0s\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    keep_alive: never\n",
                 "test.yaml:4:17: models.a.keep_alive: expected a duration like 10m, 0 or forever, got \"never\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {resident: -1}\n",
                 "test.yaml:4:24: models.a.memory.resident: expected a size like 12GiB, got \"-1\"");
    expect_error("log: {format: xml}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:15: log.format: expected json or text, got \"xml\"");
    expect_error("log: {level: verbose}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:14: log.level: expected one of debug, info, warn, error, got \"verbose\"");
    expect_error("gpu: {foreign_usage: count}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:22: gpu.foreign_usage: expected measure or ignore, got \"count\"");
    expect_error("limits: {max_body: 0}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: limits.max_body: must be at least 1 bytes, got \"0\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {when: always}\n",
                 "test.yaml:4:21: models.a.degrade.when: expected on_oom or to_fit, got \"always\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    retry: always\n",
                 "test.yaml:4:12: models.a.retry: expected safe or never, got \"always\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    validate: gltf\n",
                 "test.yaml:4:15: models.a.validate: expected one of none, glb, ply, png, json, cmd, got \"gltf\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {detect: {status: [500, 700]}}\n",
                 "test.yaml:4:38: models.a.degrade.detect.status[1]: expected an integer from 100 to 599, got \"700\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {detect: {body_matches: \"(oom\"}}\n",
                 "test.yaml:4:38: models.a.degrade.detect.body_matches: not a valid regular expression "
                 "(Unmatched ( or \\(): \"(oom\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {detect: {json: {path: success, equals: false}}}\n",
                 "test.yaml:4:37: models.a.degrade.detect.json.path: expected a JSON pointer like /success, got \"success\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    health: {path: health}\n",
                 "test.yaml:4:20: models.a.health.path: expected a path starting with /, got \"health\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    unload: {method: post, path: /u}\n",
                 "test.yaml:4:22: models.a.unload.method: expected an HTTP method like POST, got \"post\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    unload: {method: POST}\n",
                 "test.yaml:4:13: models.a.unload: path is required (like /unload_models/)");
    expect_error("models:\n  a:\n    cmd: [x]\n    gpus: [0, 0]\n",
                 "test.yaml:4:15: models.a.gpus[1]: GPU 0 is listed twice");
    expect_error("models:\n  a:\n    cmd: [x]\n    gpus: all\n",
                 "test.yaml:4:11: models.a.gpus: expected any or a list of GPU indexes like [0, 1], got \"all\"");
    expect_error("models:\n  a:\n    cmd: [\"\", x]\n",
                 "test.yaml:3:11: models.a.cmd[0]: the program name must not be empty");
    expect_error("models:\n  a:\n    cmd: []\n",
                 "test.yaml:3:10: models.a.cmd: expected a list of words like [python3, serve.py], got an empty list");
    expect_error("models:\n  a:\n    cmd: [x]\n    env: {\"1X\": y}\n",
                 "test.yaml:4:11: models.a.env.1X: an environment variable name is letters, digits and _, not starting with a digit");
    expect_error("models:\n  bad/name:\n    cmd: [x]\n",
                 "test.yaml:2:3: models.bad/name: a model name is 1 to 128 of A-Z a-z 0-9 . _ -");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {ladder: [{}]}\n",
                 "test.yaml:4:24: models.a.degrade.ladder[0]: a ladder level needs set or per_request");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {ladder: [{set: [steps, 4]}]}\n",
                 "test.yaml:4:30: models.a.degrade.ladder[0].set: expected a mapping of request fields like {steps: 12}, got a list");
    expect_error("models:\n  a:\n    cmd: [x]\n    degrade: {ladder: [{set: {x: .inf}}]}\n",
                 "test.yaml:4:34: models.a.degrade.ladder[0].set.x: .inf cannot be written in JSON");
}

static void test_error_cmd_url(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    route: /a/\n",
                 "test.yaml:2:3: models.a: needs cmd (a server vramd starts) or url (a server already running)");
    expect_error("models:\n  a:\n", /* a model with nothing at all */
                 "test.yaml:2:3: models.a: needs cmd (a server vramd starts) or url (a server already running)");
    expect_error("models:\n  a:\n    cmd: [x]\n    url: http://127.0.0.1:9000\n",
                 "test.yaml:4:10: models.a.url: cmd and url cannot both be set (cmd: vramd starts the server; url: it is already running)");
    expect_error("defaults:\n  cmd: [x]\nmodels:\n  a:\n    url: http://127.0.0.1:9000\n",
                 "test.yaml:5:10: models.a.url: cmd and url cannot both be set (cmd: vramd starts the server; url: it is already running)");
    expect_error("models:\n  a:\n    url: https://127.0.0.1:9000\n",
                 "test.yaml:3:10: models.a.url: https is not supported (vramd talks plain HTTP to its workers), got \"https://127.0.0.1:9000\"");
    expect_error("models:\n  a:\n    url: http://127.0.0.1:9000/v1\n",
                 "test.yaml:3:10: models.a.url: a URL may not have a path (routes are per request), got \"http://127.0.0.1:9000/v1\"");
    expect_error("models:\n  a:\n    url: http://127.0.0.1:99999\n",
                 "test.yaml:3:10: models.a.url: expected a URL like http://127.0.0.1:10006, got \"http://127.0.0.1:99999\"");
    expect_error("models:\n  a:\n    url: 127.0.0.1:9000\n",
                 "test.yaml:3:10: models.a.url: expected a URL like http://127.0.0.1:10006, got \"127.0.0.1:9000\"");
    expect_error("models:\n  a:\n    url: http://user@h:1\n",
                 "test.yaml:3:10: models.a.url: expected a URL like http://127.0.0.1:10006, got \"http://user@h:1\"");
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

static void test_error_yaml_syntax(void **state)
{
    (void)state;
    expect_error("models:\n  a: b: c\n", "test.yaml:2:7: YAML syntax error: mapping values are not allowed in this context");
    expect_error("models:\n  a:\n    cmd: \"abc\n",
                 "test.yaml:4:1: YAML syntax error: found unexpected end of stream (while scanning a quoted scalar at line 3, column 10)");
    expect_error("models:\n\ta: {cmd: [x]}\n",
                 "test.yaml:2:1: YAML syntax error: found character that cannot start any token (while scanning for the next token at line 2, column 1)");
    expect_error("models:\n  a: *nope\n", "test.yaml:2:6: YAML syntax error: found undefined alias");
    expect_error("models:\n  a: {cmd: [\xff]}\n", "test.yaml:2:13: YAML syntax error: invalid leading UTF-8 octet");
    expect_error("models: {a: {cmd: [x]}}\n---\nmodels: {b: {cmd: [y]}}\n",
                 "test.yaml:2:1: only one YAML document is allowed in a configuration file");
    /* Deep nesting is refused before libyaml builds the document (its scanner is slow on it). */
    char deep[256];
    snprintf(deep, sizeof deep, "models: %.*s\n", 100, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                                                        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
    expect_error(deep, "test.yaml:1:72: YAML nested more than 64 levels deep");
    expect_error("", "test.yaml:1:1: the configuration is empty (at least one model is required)");
    expect_error("# just a comment\n", "test.yaml:1:1: the configuration is empty (at least one model is required)");
    expect_error("listen: 127.0.0.1:8800\n", "test.yaml:1:1: models: at least one model is required");
    expect_error("listen: 127.0.0.1:8800\nmodels: {}\n", "test.yaml:2:9: models: at least one model is required");
}

static void test_listen(void **state)
{
    (void)state;
    struct {
        const char *listen, *host;
        int port;
    } ok[] = {
        {"127.0.0.1:8800", "127.0.0.1", 8800},
        {"127.1.2.3:1", "127.1.2.3", 1},
        {"\"[::1]:9000\"", "::1", 9000},
        {"localhost:8080", "127.0.0.1", 8080},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "listen: %s\nmodels: {a: {cmd: [x]}}\n", ok[i].listen);
        config_t *c = parse_ok(yaml);
        assert_string_equal(c->listen_host, ok[i].host);
        assert_int_equal(c->listen_port, ok[i].port);
        config_unref(c);
    }
    expect_error("listen: 0.0.0.0:8800\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: 0.0.0.0 is not a loopback address, so admin_token_file is required "
                 "(admin routes would be open to the network)");
    expect_error("listen: \"[::]:8800\"\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: :: is not a loopback address, so admin_token_file is required "
                 "(admin routes would be open to the network)");
    expect_error("listen: 10.1.2.3:80\nadmin_token_file: null\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: 10.1.2.3 is not a loopback address, so admin_token_file is required "
                 "(admin routes would be open to the network)");
    expect_error("listen: 8800\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: expected host:port like 127.0.0.1:8800 or [::1]:8800, got \"8800\"");
    expect_error("listen: 127.0.0.1:0\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: expected host:port like 127.0.0.1:8800 or [::1]:8800, got \"127.0.0.1:0\"");
    expect_error("listen: example.com:80\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:9: listen: the listen host must be an IP address or localhost, got \"example.com:80\"");
}

/* A temporary directory with a config file and a token file, for config_load. */
typedef struct tmpdir {
    char path[256];
    char real[PATH_MAX]; /* realpath() wants PATH_MAX */
} tmpdir_t;

static void write_file(const char *dir, const char *name, const char *content)
{
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void tmpdir_make(tmpdir_t *t)
{
    snprintf(t->path, sizeof t->path, "/tmp/vramd-test-config-XXXXXX");
    assert_non_null(mkdtemp(t->path));
    assert_non_null(realpath(t->path, t->real));
}

static void tmpdir_remove(tmpdir_t *t, const char *const *files)
{
    for (size_t i = 0; files[i]; i++) {
        char path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", t->path, files[i]);
        unlink(path);
    }
    rmdir(t->path);
}

static void test_admin_token_file(void **state)
{
    (void)state;
    tmpdir_t t;
    tmpdir_make(&t);
    write_file(t.path, "token", "  s3cret-token\n\n");
    write_file(t.path, "empty", " \n\t\n");
    write_file(t.path, "vramd.yaml", "listen: 0.0.0.0:8800\nadmin_token_file: token\nstate_dir: state\n"
                                     "models: {a: {cmd: [x], cwd: rel/dir}}\n");
    char config_path[512], expected[PATH_MAX * 2 + 1024], err[CONFIG_ERR_MAX];
    snprintf(config_path, sizeof config_path, "%s/vramd.yaml", t.path);
    config_t *c = config_load(config_path, err, sizeof err);
    if (c == NULL)
        fail_msg("config_load: %s", err);
    assert_string_equal(c->admin_token, "s3cret-token");
    snprintf(expected, sizeof expected, "%s/token", t.real);
    assert_string_equal(c->admin_token_file, expected);
    snprintf(expected, sizeof expected, "%s/state", t.real);
    assert_string_equal(c->state_dir, expected);
    assert_string_equal(c->models[0].cwd, "rel/dir"); /* cwd is left as written */
    assert_string_equal(c->path, config_path);
    config_unref(c);

    /* An empty (whitespace-only) token file. */
    write_file(t.path, "vramd.yaml", "listen: 0.0.0.0:8800\nadmin_token_file: empty\nmodels: {a: {cmd: [x]}}\n");
    assert_null(config_load(config_path, err, sizeof err));
    snprintf(expected, sizeof expected, "%s:2:19: admin_token_file: %s/empty is empty; it must hold the admin token",
             config_path, t.real);
    assert_string_equal(err, expected);

    /* A missing token file, even with a loopback listen. */
    write_file(t.path, "vramd.yaml", "admin_token_file: missing\nmodels: {a: {cmd: [x]}}\n");
    assert_null(config_load(config_path, err, sizeof err));
    snprintf(expected, sizeof expected, "%s:1:19: admin_token_file: cannot read %s/missing: No such file or directory",
             config_path, t.real);
    assert_string_equal(err, expected);

    /* An absolute path is used as it is. */
    char yaml[PATH_MAX + 256];
    snprintf(yaml, sizeof yaml, "listen: \"[::]:8800\"\nadmin_token_file: %s/token\nmodels: {a: {cmd: [x]}}\n", t.real);
    write_file(t.path, "vramd.yaml", yaml);
    c = config_load(config_path, err, sizeof err);
    if (c == NULL)
        fail_msg("config_load: %s", err);
    assert_string_equal(c->admin_token, "s3cret-token");
    config_unref(c);

    const char *files[] = {"token", "empty", "vramd.yaml", NULL};
    tmpdir_remove(&t, files);
}

static void test_config_load_missing_file(void **state)
{
    (void)state;
    char err[CONFIG_ERR_MAX];
    assert_null(config_load("/nonexistent-dir/vramd.yaml", err, sizeof err));
    assert_string_equal(err, "/nonexistent-dir/vramd.yaml: cannot open: No such file or directory");
}

static void test_state_dir_resolution(void **state)
{
    (void)state;
    const char *yaml = "state_dir: ./data\nmodels: {a: {cmd: [x]}}\n";
    char err[CONFIG_ERR_MAX];
    config_t *c = config_parse(yaml, strlen(yaml), "/etc/vramd/vramd.yaml", err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->state_dir, "/etc/vramd/data");
    config_unref(c);
    c = config_parse("models: {a: {cmd: [x]}}", 23, "/etc/vramd/vramd.yaml", err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->state_dir, "/etc/vramd/var");
    config_unref(c);
    yaml = "state_dir: /var/lib/vramd\nmodels: {a: {cmd: [x]}}\n";
    c = config_parse(yaml, strlen(yaml), "/etc/vramd/vramd.yaml", err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->state_dir, "/var/lib/vramd");
    config_unref(c);
}

static void test_alias_collisions(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [x]\n  b:\n    cmd: [y]\n    aliases: [b1, a]\n",
                 "test.yaml:6:19: models.b.aliases[1]: alias \"a\" is the name of model \"a\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    aliases: [shared]\n  b:\n    cmd: [y]\n    aliases: [shared]\n",
                 "test.yaml:7:15: models.b.aliases[0]: alias \"shared\" is already an alias of model \"a\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    aliases: [a]\n",
                 "test.yaml:4:15: models.a.aliases[0]: alias \"a\" is the name of model \"a\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    aliases: [one, one]\n",
                 "test.yaml:4:20: models.a.aliases[1]: alias \"one\" is already an alias of model \"a\"");
    /* A model named like an earlier model's alias. */
    expect_error("models:\n  a:\n    cmd: [x]\n    aliases: [b]\n  b:\n    cmd: [y]\n",
                 "test.yaml:4:15: models.a.aliases[0]: alias \"b\" is the name of model \"b\"");
    /* An alias inherited from defaults collides between models: the error points there. */
    expect_error("defaults:\n  aliases: [common]\nmodels:\n  a: {cmd: [x]}\n  b: {cmd: [y]}\n",
                 "test.yaml:2:13: defaults.aliases[0]: alias \"common\" is already an alias of model \"a\"");
    config_t *c = parse_ok("models:\n  a:\n    cmd: [x]\n    aliases: [gpt-4o, \"org/model:tag\"]\n  b:\n    cmd: [y]\n");
    assert_ptr_equal(config_find_model(c, "gpt-4o"), &c->models[0]);
    assert_ptr_equal(config_find_model(c, "org/model:tag"), &c->models[0]);
    assert_ptr_equal(config_find_model(c, "b"), &c->models[1]);
    assert_null(config_find_model(c, ""));
    assert_null(config_find_model(c, NULL));
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

static void test_gpus_and_devices(void **state)
{
    (void)state;
    config_t *c = parse_ok("gpu:\n"
                           "  devices: [0, GPU-1234abcd-aaaa-bbbb-cccc-000000000000, 2]\n"
                           "models:\n"
                           "  a: {cmd: [x], gpus: [1, 0]}\n"
                           "  b: {cmd: [x], gpus: any}\n");
    assert_int_equal(c->gpu.n_devices, 2);
    assert_int_equal(c->gpu.devices[0], 0);
    assert_int_equal(c->gpu.devices[1], 2);
    assert_int_equal(c->gpu.n_device_uuids, 1);
    assert_string_equal(c->gpu.device_uuids[0], "GPU-1234abcd-aaaa-bbbb-cccc-000000000000");
    assert_int_equal(c->models[0].n_gpus, 2);
    assert_int_equal(c->models[0].gpus[0], 1);
    assert_int_equal(c->models[0].gpus[1], 0);
    assert_null(c->models[1].gpus);
    config_unref(c);
    c = parse_ok("gpu: {devices: [GPU-a]}\nmodels: {a: {cmd: [x]}}\n");
    assert_null(c->gpu.devices);
    assert_int_equal(c->gpu.n_device_uuids, 1);
    config_unref(c);
    expect_error("gpu: {devices: []}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:16: gpu.devices: expected all or a list of GPU indexes / UUIDs, got an empty list");
    expect_error("gpu: {devices: [1, 1]}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: gpu.devices[1]: GPU 1 is listed twice");
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

static void test_yaml_alias_bounds(void **state)
{
    (void)state;
    /* A self-referencing anchor: converting it to JSON stops at the depth limit. */
    char err[CONFIG_ERR_MAX];
    const char *cycle = "models:\n  a:\n    cmd: [x]\n    degrade: {ladder: [{set: &s {k: [*s]}}]}\n";
    assert_null(config_parse(cycle, strlen(cycle), "t.yaml", err, sizeof err));
    assert_non_null(strstr(err, "nested more than 64 levels deep"));
    /* A "billion laughs" expansion stops at the value budget. */
    const char *laughs = "defaults:\n"
                         "  degrade:\n"
                         "    ladder:\n"
                         "      - set:\n"
                         "          a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
                         "          b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "          c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                         "          d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                         "          e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                         "          f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                         "          g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
                         "models: {a: {cmd: [x]}}\n";
    assert_null(config_parse(laughs, strlen(laughs), "t.yaml", err, sizeof err));
    assert_non_null(strstr(err, "too many values"));
    /* Anchors and aliases themselves are fine. */
    config_t *c = parse_ok("defaults:\n  health: &h {interval: 2s}\nmodels:\n  a: {cmd: [x], health: *h}\n");
    assert_int_equal(c->models[0].health.interval_ms, 2000);
    config_unref(c);
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

static void test_nvml_env_override(void **state)
{
    (void)state;
    setenv("VRAMD_NVML_LIBRARY", "/opt/sim/libnvidia-ml-sim.so", 1);
    config_t *c = parse_ok("gpu: {nvml_library: libnvidia-ml.so.1}\nmodels: {a: {cmd: [x]}}\n");
    assert_string_equal(c->gpu.nvml_library, "/opt/sim/libnvidia-ml-sim.so");
    config_unref(c);
    unsetenv("VRAMD_NVML_LIBRARY");
    c = parse_ok("gpu: {nvml_library: ./libnvidia-ml-sim.so}\nmodels: {a: {cmd: [x]}}\n");
    assert_string_equal(c->gpu.nvml_library, "./libnvidia-ml-sim.so");
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

static void test_error_buffer_small(void **state)
{
    (void)state;
    char err[16];
    const char *yaml = "models:\n  a:\n    cmd: [x]\n    bogus: 1\n";
    assert_null(config_parse(yaml, strlen(yaml), "test.yaml", err, sizeof err));
    assert_int_equal(strlen(err), sizeof err - 1);
    assert_memory_equal(err, "test.yaml:4:5: m", sizeof err - 1);
    assert_null(config_parse(yaml, strlen(yaml), "test.yaml", NULL, 0));
}

/* jobs: max_attempts, max_active, records_ttl (defaults, valid values, bounds, cross-checks). */
static void test_jobs_section(void **state)
{
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.max_attempts, 3);
    assert_int_equal(c->jobs.max_active, 64);
    assert_int_equal(c->jobs.records_ttl_ms, 7ULL * 24 * 3600 * 1000);
    config_unref(c);

    c = parse_ok("jobs:\n  max_attempts: 1\n  max_active: 5\n  records_ttl: 48h\n  results_ttl: 1h\n"
                 "models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.max_attempts, 1);
    assert_int_equal(c->jobs.max_active, 5);
    assert_int_equal(c->jobs.records_ttl_ms, 2ULL * 24 * 3600 * 1000);
    config_unref(c);

    c = parse_ok("jobs: {max_attempts: 100, records_ttl: 24h}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.max_attempts, 100);
    assert_int_equal(c->jobs.records_ttl_ms, 24ULL * 3600 * 1000); /* == results_ttl default: allowed */
    config_unref(c);

    /* the default max_active follows a smaller queue_max; an explicit one must fit in it */
    c = parse_ok("limits: {queue_max: 10}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.max_active, 10);
    config_unref(c);
    c = parse_ok("limits: {queue_max: 10}\njobs: {max_active: 10}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.max_active, 10);
    config_unref(c);
    expect_error("limits: {queue_max: 10}\njobs:\n  max_active: 11\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:15: jobs.max_active: 11 is more than limits.queue_max (10)");

    expect_error("jobs:\n  max_attempts: 0\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: jobs.max_attempts: expected an integer from 1 to 100, got \"0\"");
    expect_error("jobs:\n  max_attempts: 101\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: jobs.max_attempts: expected an integer from 1 to 100, got \"101\"");
    expect_error("jobs:\n  max_attempts: three\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: jobs.max_attempts: expected an integer from 1 to 100, got \"three\"");
    expect_error("jobs:\n  max_active: 0\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:15: jobs.max_active: expected an integer from 1 to 10000000, got \"0\"");
    expect_error("jobs:\n  records_ttl: soon\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:16: jobs.records_ttl: expected a duration like 30s, got \"soon\"");
    expect_error("jobs:\n  records_ttl: 1h\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:16: jobs.records_ttl: records_ttl (1h) must be at least results_ttl (24h): "
                 "a stored result needs its job record");
    expect_error("jobs:\n  results_ttl: 200h\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:16: jobs.results_ttl: records_ttl (168h) must be at least results_ttl (200h): "
                 "a stored result needs its job record");
    expect_error("jobs:\n  results_max_bytes: 0\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:22: jobs.results_max_bytes: must be more than 0 (it bounds the store and every result)");
    expect_error("jobs:\n  max_body: 1MiB\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:3: jobs.max_body: unknown key \"max_body\"");
    expect_error("jobs:\n  max_attempt: 3\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:3: jobs.max_attempt: unknown key \"max_attempt\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_defaults_overlay),
        cmocka_unit_test(test_null_removes_inherited),
        cmocka_unit_test(test_error_size_like_spec),
        cmocka_unit_test(test_error_unknown_keys),
        cmocka_unit_test(test_error_duplicate_keys),
        cmocka_unit_test(test_error_wrong_types),
        cmocka_unit_test(test_error_bad_values),
        cmocka_unit_test(test_error_cmd_url),
        cmocka_unit_test(test_url_parsing),
        cmocka_unit_test(test_error_yaml_syntax),
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_admin_token_file),
        cmocka_unit_test(test_config_load_missing_file),
        cmocka_unit_test(test_state_dir_resolution),
        cmocka_unit_test(test_alias_collisions),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_per_request_learn),
        cmocka_unit_test(test_gpus_and_devices),
        cmocka_unit_test(test_degrade_and_validate_forms),
        cmocka_unit_test(test_yaml_alias_bounds),
        cmocka_unit_test(test_quoted_and_plain_scalars),
        cmocka_unit_test(test_nvml_env_override),
        cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_error_buffer_small),
        cmocka_unit_test(test_jobs_section),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
