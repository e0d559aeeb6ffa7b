/*
 * test_config_top: the top-level keys of the YAML configuration, loading it from a file,
 * and the checks over the whole configuration (src/config/top_keys.c, check.c, config.c).
 *
 * Covers: listen and the loopback rule; the admin token file (relative, absolute, empty,
 * missing); config_load of a missing file; state_dir resolved against the file's
 * directory; names, aliases and their collisions; gpu.devices and a model's gpus; the
 * VRAMD_NVML_LIBRARY override; the jobs section and its cross-checks; gpu.stale_after (auto
 * from gpu.poll with its 1 s floor, explicit values, the bounds); a model's upgrade list and
 * the upgrade limits (defaults, values, refusals).
 * Run: make build/tests/test_config_top && build/tests/test_config_top (and with make SAN=1).
 */

#include "config_test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
                 "test.yaml:2:3: jobs.max_attempt: unknown key \"max_attempt\" (did you mean \"max_attempts\"?)");
}

/* jobs.backend and jobs.postgres.* (defaults, values, the url it needs, bounds). */
static void test_jobs_backend(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.backend, JOBS_BACKEND_SQLITE);
    assert_null(c->jobs.pg.url);
    assert_null(c->jobs.pg.host_id);
    assert_int_equal(c->jobs.pg.lease_ms, 30000);
    assert_int_equal(c->jobs.pg.aging_ms, 60000);
    assert_int_equal(c->jobs.pg.max_result_bytes, 256 * MiB);
    assert_int_equal(c->jobs.pg.timeout_ms, 10000);
    config_unref(c);

    c = parse_ok("jobs:\n  backend: postgres\n  postgres:\n    url: \"host=db dbname=vramd password=x\"\n"
                 "    host_id: gpu-3\n    lease: 10s\n    aging: 2m\n    max_result_bytes: 1GiB\n"
                 "    timeout: 2500ms\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.backend, JOBS_BACKEND_POSTGRES);
    assert_string_equal(c->jobs.pg.url, "host=db dbname=vramd password=x");
    assert_string_equal(c->jobs.pg.host_id, "gpu-3");
    assert_int_equal(c->jobs.pg.lease_ms, 10000);
    assert_int_equal(c->jobs.pg.aging_ms, 120000);
    assert_int_equal(c->jobs.pg.max_result_bytes, GiB);
    assert_int_equal(c->jobs.pg.timeout_ms, 2500);
    config_unref(c);

    /* a url alone does not switch the backend */
    c = parse_ok("jobs: {postgres: {url: \"host=db\"}}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->jobs.backend, JOBS_BACKEND_SQLITE);
    config_unref(c);

    expect_error("jobs:\n  backend: postgres\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:12: jobs.postgres.url: jobs.backend postgres needs jobs.postgres.url (a libpq connection"
                 " string)");
    expect_error("jobs:\n  backend: mysql\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:12: jobs.backend: expected sqlite or postgres, got \"mysql\"");
    expect_error("jobs:\n  postgres:\n    url: \"\"\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:10: jobs.postgres.url: must not be empty");
    expect_error("jobs:\n  postgres:\n    lease: 100ms\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:12: jobs.postgres.lease: must be at least 300ms, got \"100ms\"");
    expect_error("jobs:\n  postgres:\n    timeout: 50ms\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:14: jobs.postgres.timeout: must be at least 100ms, got \"50ms\"");
    expect_error("jobs:\n  postgres:\n    max_result_bytes: 2GiB\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:23: jobs.postgres.max_result_bytes: must be at most 1GiB (PostgreSQL's largest bytea"
                 " value)");
    expect_error("jobs:\n  postgres:\n    uri: x\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:3:5: jobs.postgres.uri: unknown key \"uri\" (did you mean \"url\"?)");
}

/* limits.send_timeout, body_timeout (idle bounds of a client, at most 1h) and
 * reserved_connections (0..10000). */
static void test_gpu_stale_after(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->gpu.stale_after_ms, 1000); /* 5 x 100ms is under the 1 s floor */
    config_unref(c);
    c = parse_ok("gpu: {poll: 500ms}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->gpu.stale_after_ms, 2500);
    config_unref(c);
    c = parse_ok("gpu: {poll: 500ms, stale_after: auto}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->gpu.stale_after_ms, 2500);
    config_unref(c);
    c = parse_ok("gpu: {poll: 50ms, stale_after: 300ms}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->gpu.stale_after_ms, 300);
    config_unref(c);
    c = parse_ok("gpu: {poll: 20m}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->gpu.stale_after_ms, 3600 * 1000); /* auto is capped at an hour too */
    config_unref(c);
    expect_error("gpu: {poll: 100ms, stale_after: 150ms}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:33: gpu.stale_after: 150 ms is outside 200 ms (2 x gpu.poll) .. 3600000 ms");
    expect_error("gpu: {stale_after: 2h}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: gpu.stale_after: 7200000 ms is outside 200 ms (2 x gpu.poll) .. 3600000 ms");
    expect_error("gpu: {stale_after: soon}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: gpu.stale_after: expected a duration like 30s, got \"soon\"");
}

static void test_upgrades(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->models[0].upgrade, 0); /* no upgrade unless listed */
    assert_int_equal(c->limits.upgrade_idle_timeout_ms, 600000);
    assert_int_equal(c->limits.upgrades_per_client, 16);
    assert_int_equal(c->limits.upgrades_max, 1024);
    config_unref(c);
    c = parse_ok("limits: {upgrade_idle_timeout: 30s, upgrades_per_client: 2, upgrades_max: 5}\n"
                 "models: {a: {cmd: [x], upgrade: [websocket]}, b: {cmd: [x], upgrade: websocket},"
                 " c: {cmd: [x], upgrade: []}}\n");
    assert_int_equal(c->limits.upgrade_idle_timeout_ms, 30000);
    assert_int_equal(c->limits.upgrades_per_client, 2);
    assert_int_equal(c->limits.upgrades_max, 5);
    assert_int_equal(c->models[0].upgrade, CFG_UPGRADE_WEBSOCKET);
    assert_int_equal(c->models[1].upgrade, CFG_UPGRADE_WEBSOCKET);
    assert_int_equal(c->models[2].upgrade, 0);
    config_unref(c);
    expect_error("models: {a: {cmd: [x], upgrade: [h2c]}}\n",
                 "test.yaml:1:34: models.a.upgrade: expected one of websocket, got \"h2c\"");
    expect_error("limits: {upgrades_max: 0}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:24: limits.upgrades_max: expected an integer from 1 to 1000000, got \"0\"");
}

static void test_client_limits(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->limits.send_timeout_ms, 60000);
    assert_int_equal(c->limits.body_timeout_ms, 60000);
    assert_int_equal(c->limits.reserved_connections, 16);
    config_unref(c);
    c = parse_ok("limits: {send_timeout: 1h, body_timeout: 250ms, reserved_connections: 0}\n"
                 "models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->limits.send_timeout_ms, 3600000);
    assert_int_equal(c->limits.body_timeout_ms, 250);
    assert_int_equal(c->limits.reserved_connections, 0);
    config_unref(c);
    expect_error("limits:\n  send_timeout: 61m\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: limits.send_timeout: must be at most 1h (a client stall, not a total)");
    expect_error("limits:\n  body_timeout: 2h\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: limits.body_timeout: must be at most 1h (a client stall, not a total)");
    expect_error("limits:\n  body_timeout: 0s\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:17: limits.body_timeout: must be at least 1ms, got \"0s\"");
    expect_error("limits:\n  reserved_connections: 10001\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:2:25: limits.reserved_connections: expected an integer from 0 to 10000, got \"10001\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_admin_token_file),
        cmocka_unit_test(test_config_load_missing_file),
        cmocka_unit_test(test_state_dir_resolution),
        cmocka_unit_test(test_alias_collisions),
        cmocka_unit_test(test_gpus_and_devices),
        cmocka_unit_test(test_nvml_env_override),
        cmocka_unit_test(test_jobs_section),
        cmocka_unit_test(test_jobs_backend),
        cmocka_unit_test(test_client_limits),
        cmocka_unit_test(test_gpu_stale_after),
        cmocka_unit_test(test_upgrades),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
