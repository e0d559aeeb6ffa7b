/*
 * test_config_presets: what `preset: vllm | sglang` does to a model's server side
 * (src/config/presets.c, cfg_preset_finish and cfg_preset_problems) and the warnings it gives.
 *
 * Covers: vllm sets env VLLM_SERVER_DEV_MODE=1 (a model's own env value wins, null removes
 * it; a container: block gets it as -e); `--gpu-memory-utilization {mem_fraction}` (sglang:
 * `--mem-fraction-static {mem_fraction}`) appended to cmd only when memory.resident is set and
 * cmd lacks the flag (in any spelling: `--flag V`, `--flag=V`, underscores), never for an
 * external server; {mem_fraction} without memory.resident is an error naming cmd; the
 * warnings: the sleep tier in use without --enable-sleep-mode (vllm) or --enable-memory-saver
 * (sglang), naming models.X.cmd; none with park_keep_alive: 0; dev mode turned off in env,
 * naming models.X.env; a preset model without memory: says "not memory-gated" and how the
 * fraction follows.
 * Run: make build/tests/test_config_presets && build/tests/test_config_presets
 */

#include "config_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_of(const model_config_t *m, const char *key)
{
    for (size_t i = 0; i < m->n_env; i++)
        if (strcmp(m->env[i].key, key) == 0)
            return m->env[i].value ? m->env[i].value : "(null)";
    return NULL;
}

/* cmd joined by spaces */
static void joined(const model_config_t *m, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < m->n_cmd; i++) {
        strncat(out, m->cmd[i], cap - strlen(out) - 1);
        if (i + 1 < m->n_cmd)
            strncat(out, " ", cap - strlen(out) - 1);
    }
}

#define VLLM_CMD "    cmd: [sh, -c, \"exec vllm serve m --port {port}\", --enable-sleep-mode]\n"

static void test_vllm_env_and_fraction(void **state)
{
    (void)state;
    char cmd[1024];
    config_t *c = parse_ok("models:\n  a:\n    preset: vllm\n" VLLM_CMD "    memory: {resident: 24GiB}\n");
    assert_string_equal(env_of(&c->models[0], "VLLM_SERVER_DEV_MODE"), "1");
    joined(&c->models[0], cmd, sizeof cmd);
    assert_string_equal(cmd, "sh -c exec vllm serve m --port {port} --enable-sleep-mode "
                             "--gpu-memory-utilization {mem_fraction}");
    assert_int_equal(c->n_warnings, 0);
    config_unref(c);
    /* the user's own value wins, in each spelling; nothing appended */
    static const char *const own[] = {"--gpu-memory-utilization, \"0.5\"", "--gpu-memory-utilization=0.5",
                                      "--gpu_memory_utilization, \"0.5\""};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, "models:\n  a:\n    preset: vllm\n    cmd: [sh, -c, \"x {port}\", "
                 "--enable-sleep-mode, %s]\n    memory: {resident: 24GiB}\n", own[i]);
        c = parse_ok(yaml);
        joined(&c->models[0], cmd, sizeof cmd);
        assert_null(strstr(cmd, "{mem_fraction}"));
        config_unref(c);
    }
    /* no memory.resident: nothing to derive it from, vLLM's own default stays */
    c = parse_ok("models:\n  a:\n    preset: vllm\n" VLLM_CMD "    memory: {per_request: 1GiB}\n");
    joined(&c->models[0], cmd, sizeof cmd);
    assert_null(strstr(cmd, "--gpu-memory-utilization"));
    config_unref(c);
    /* an external server: no cmd to change */
    c = parse_ok("models:\n  a:\n    preset: vllm\n    url: http://127.0.0.1:9\n    memory: {resident: 24GiB}\n");
    assert_null(c->models[0].cmd);
    config_unref(c);
    /* env overlays key by key: the user's value wins, null removes it */
    c = parse_ok("models:\n  a:\n    preset: vllm\n" VLLM_CMD "    memory: {resident: 1GiB}\n"
                 "    env: {VLLM_SERVER_DEV_MODE: \"1\", HF_HOME: /srv/hf}\n");
    assert_string_equal(env_of(&c->models[0], "VLLM_SERVER_DEV_MODE"), "1");
    assert_string_equal(env_of(&c->models[0], "HF_HOME"), "/srv/hf");
    config_unref(c);
    /* a preset that is not vllm sets no dev mode */
    c = parse_ok("models:\n  a:\n    preset: sglang\n    cmd: [sh, -c, \"x {port}\", --enable-memory-saver]\n"
                 "    memory: {resident: 20GiB}\n");
    assert_null(env_of(&c->models[0], "VLLM_SERVER_DEV_MODE"));
    joined(&c->models[0], cmd, sizeof cmd);
    assert_string_equal(cmd, "sh -c x {port} --enable-memory-saver --mem-fraction-static {mem_fraction}");
    assert_int_equal(c->n_warnings, 0);
    config_unref(c);
}

static void test_container_block(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a:\n    preset: vllm\n    container:\n      engine: podman\n"
                           "      image: vllm/vllm-openai\n      ports: [\"{port}:8000\"]\n"
                           "      command: [--model, m, --enable-sleep-mode]\n    memory: {resident: 24GiB}\n");
    const model_config_t *m = &c->models[0];
    bool env = false, flag = false;
    for (size_t i = 0; i < m->container.n_env; i++)
        env = env || (strcmp(m->container.env[i].key, "VLLM_SERVER_DEV_MODE") == 0 &&
                      strcmp(m->container.env[i].value, "1") == 0);
    for (size_t i = 0; i + 1 < m->n_cmd; i++)
        flag = flag || (strcmp(m->cmd[i], "--gpu-memory-utilization") == 0 &&
                        strcmp(m->cmd[i + 1], "{mem_fraction}") == 0);
    assert_true(env);
    assert_true(flag);
    bool dev_env = false;
    for (size_t i = 0; i < m->n_cmd; i++)
        dev_env = dev_env || strcmp(m->cmd[i], "VLLM_SERVER_DEV_MODE=1") == 0;
    assert_true(dev_env); /* -e VLLM_SERVER_DEV_MODE=1 in the built command */
    config_unref(c);
}

static void test_mem_fraction_needs_resident(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [sh, -c, \"x {port}\", --f, \"{mem_fraction}\"]\n",
                 "test.yaml:3:10: models.a.cmd: {mem_fraction} is the model's memory.resident over its GPU's "
                 "memory: set memory.resident");
    config_t *c = parse_ok("models:\n  a:\n    cmd: [sh, -c, \"x {port}\", --f, \"{mem_fraction}\"]\n"
                           "    memory: {resident: 1GiB}\n");
    config_unref(c);
}

static void test_sleep_flag_warnings(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a:\n    preset: vllm\n    cmd: [sh, -c, \"x {port}\"]\n"
                           "    memory: {resident: 1GiB}\n");
    assert_int_equal(c->n_warnings, 1);
    assert_string_equal(c->warnings[0].key, "models.a.cmd");
    assert_string_equal(c->warnings[0].text,
                        "test.yaml:4:10: warning: models.a.cmd: preset vllm uses the sleep tier (sleep: "
                        "/sleep?level=1) but cmd lacks --enable-sleep-mode: vLLM cannot sleep without it (the sleep "
                        "hook fails, and parking falls to the next tier); add --enable-sleep-mode to cmd, or set "
                        "park_keep_alive: 0 to not park");
    config_unref(c);
    /* not parking: no sleep tier, no warning */
    c = parse_ok("models:\n  a:\n    preset: vllm\n    cmd: [sh, -c, \"x {port}\"]\n"
                 "    memory: {resident: 1GiB}\n    park_keep_alive: 0\n");
    assert_int_equal(c->n_warnings, 0);
    config_unref(c);
    /* sglang */
    c = parse_ok("models:\n  s:\n    preset: sglang\n    cmd: [sh, -c, \"x {port}\"]\n"
                 "    memory: {resident: 1GiB}\n");
    assert_int_equal(c->n_warnings, 1);
    assert_string_equal(c->warnings[0].key, "models.s.cmd");
    assert_non_null(strstr(c->warnings[0].message, "cmd lacks --enable-memory-saver: SGLang refuses to "
                                                    "release memory without it"));
    config_unref(c);
    /* dev mode off in env */
    c = parse_ok("models:\n  a:\n    preset: vllm\n" VLLM_CMD "    memory: {resident: 1GiB}\n"
                 "    env: {VLLM_SERVER_DEV_MODE: null}\n");
    assert_int_equal(c->n_warnings, 1);
    assert_string_equal(c->warnings[0].text,
                        "test.yaml:6:10: warning: models.a.env: preset vllm uses the sleep tier but the worker's "
                        "environment has VLLM_SERVER_DEV_MODE=(unset): vllm serves /sleep?level=1 (and /wake_up, "
                        "/is_sleeping) only with VLLM_SERVER_DEV_MODE=1, else 404");
    config_unref(c);
}

static void test_not_memory_gated_preset(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a:\n    preset: vllm\n" VLLM_CMD);
    assert_int_equal(c->n_warnings, 1);
    assert_string_equal(c->warnings[0].text,
                        "test.yaml:3:5: warning: models.a: not memory-gated: no memory.resident nor "
                        "memory.per_request, so its requests are admitted without reserving GPU memory (and preset "
                        "vllm takes the fraction of the card its cmd gives, by default most of it: set "
                        "memory.resident and the fraction follows)");
    config_unref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_env_and_fraction),
        cmocka_unit_test(test_container_block),
        cmocka_unit_test(test_mem_fraction_needs_resident),
        cmocka_unit_test(test_sleep_flag_warnings),
        cmocka_unit_test(test_not_memory_gated_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
