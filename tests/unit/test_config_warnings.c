/*
 * test_config_warnings: the warnings pass (src/config/warnings.c) and the "did you mean"
 * of unknown keys (fields.c).
 *
 * Covers: each warning with its exact "file:line:col: warning: key.path: message" text, its
 * model and key: a program not in PATH, not found relative to cwd, not executable; a word
 * of cmd holding a command line (and the words that are not: an option's value, sh -c's
 * script); no {port} (env counts); no memory:; keep_alive: forever with hooks; a large per_request without clear_cache; bare numbers
 * for sizes and durations (in a model and in defaults:, and gpu.headroom); a clean config
 * has none; unknown keys with and without a close known key.
 * Run: make build/tests/test_config_warnings && build/tests/test_config_warnings
 */

#include "config_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parses yaml (must load) and checks it warns exactly the texts given (NULL-terminated). */
static void expect_warnings(const char *yaml, const char *const *texts)
{
    config_t *c = parse_ok(yaml);
    size_t n = 0;
    while (texts[n] != NULL)
        n++;
    for (size_t i = 0; i < c->n_warnings; i++)
        print_message("warning %zu: %s\n", i, c->warnings[i].text);
    assert_int_equal(c->n_warnings, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(c->warnings[i].text, texts[i]);
    config_unref(c);
}

#define NONE ((const char *const[]){NULL})
#define MEM "    memory: {resident: 1GiB}\n"

static void test_clean_config_has_none(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    cmd: [sh, -c, \"exec server --port {port}\"]\n" MEM, NONE);
    expect_warnings("models:\n  a:\n    cmd: [/bin/sh, x.py, --prompt, \"a cat on a mat\"]\n"
                    "    env: {LISTEN: \"127.0.0.1:{port}\"}\n" MEM,
                    NONE);
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {per_request: learn}\n", NONE);
}

static void test_program_not_found(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a:\n    cmd: [no-such-program-vramd, \"{port}\"]\n" MEM);
    assert_int_equal(c->n_warnings, 1);
    assert_string_equal(c->warnings[0].text, "test.yaml:3:10: warning: models.a.cmd: program "
                                             "\"no-such-program-vramd\" not found in PATH: the worker would fail "
                                             "to start");
    assert_string_equal(c->warnings[0].model, "a");
    assert_string_equal(c->warnings[0].key, "models.a.cmd");
    assert_string_equal(c->warnings[0].where, "test.yaml:3:10");
    config_unref(c);
    /* set in defaults: the key path says so */
    expect_warnings("defaults:\n  cmd: [no-such-program-vramd, \"{port}\"]\nmodels:\n  a:\n" MEM,
                    (const char *const[]){"test.yaml:2:8: warning: defaults.cmd: program \"no-such-program-vramd\" "
                                          "not found in PATH: the worker would fail to start",
                                          NULL});
}

static void test_program_relative_and_not_executable(void **state)
{
    (void)state;
    char dir[] = "/tmp/vramd-warn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[64], yaml[512], want[512];
    snprintf(file, sizeof file, "%s/serve.sh", dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(yaml, sizeof yaml, "models:\n  a:\n    cmd: [./serve.sh, \"{port}\"]\n    cwd: %s\n" MEM, dir);
    snprintf(want, sizeof want, "test.yaml:3:10: warning: models.a.cmd: program %s/./serve.sh is not an "
                                "executable file: the worker would fail to start", dir);
    expect_warnings(yaml, (const char *const[]){want, NULL});
    chmod(file, 0755);
    expect_warnings(yaml, NONE);
    snprintf(yaml, sizeof yaml, "models:\n  a:\n    cmd: [./missing.sh, \"{port}\"]\n    cwd: %s\n" MEM, dir);
    snprintf(want, sizeof want, "test.yaml:3:10: warning: models.a.cmd: program %s/./missing.sh not found: "
                                "the worker would fail to start", dir);
    expect_warnings(yaml, (const char *const[]){want, NULL});
    unlink(file);
    rmdir(dir);
}

static void test_command_line_in_one_word(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    cmd: [\"python3 serve.py\", --port, \"{port}\"]\n" MEM,
                    (const char *const[]){"test.yaml:3:11: warning: models.a.cmd[0]: \"python3 serve.py\" is one "
                                          "word holding a command line: cmd is a list of words, one per argument "
                                          "(like [python3, serve.py]); no shell splits it",
                                          NULL});
    expect_warnings("models:\n  a:\n    cmd: [sh, \"serve.py --port {port}\"]\n" MEM,
                    (const char *const[]){"test.yaml:3:15: warning: models.a.cmd[1]: \"serve.py --port {port}\" is "
                                          "one word holding a command line: cmd is a list of words, one per "
                                          "argument (like [python3, serve.py]); no shell splits it",
                                          NULL});
}

static void test_no_port(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    cmd: [sh, serve.sh]\n" MEM,
                    (const char *const[]){"test.yaml:3:10: warning: models.a.cmd: no {port} in cmd or env: vramd "
                                          "chooses the worker's port and sets $PORT to it; the worker must listen "
                                          "there (use {port}, or read $PORT)",
                                          NULL});
    expect_warnings("models:\n  a:\n    cmd: [sh, serve.sh]\n    env: {APP_PORT: \"{port}\"}\n" MEM, NONE);
}

static void test_not_memory_gated(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n",
                    (const char *const[]){"test.yaml:3:5: warning: models.a: not memory-gated: no memory.resident "
                                          "nor memory.per_request, so its requests are admitted without reserving "
                                          "GPU memory",
                                          NULL});
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 0}\n",
                    (const char *const[]){"test.yaml:4:13: warning: models.a.memory: not memory-gated: no "
                                          "memory.resident nor memory.per_request, so its requests are admitted "
                                          "without reserving GPU memory",
                                          NULL});
    /* from defaults: gated */
    expect_warnings("defaults: {memory: {per_request: 512MiB}}\nmodels:\n  a:\n    url: http://127.0.0.1:9\n", NONE);
}

static void test_pinned_with_hooks(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n" MEM "    keep_alive: forever\n"
                    "    unload: {path: /unload}\n",
                    (const char *const[]){"test.yaml:5:17: warning: models.a.keep_alive: keep_alive: forever pins "
                                          "the model (never evicted), so its unload hook is never used",
                                          NULL});
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n" MEM "    keep_alive: forever\n", NONE);
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n" MEM "    keep_alive: 10m\n"
                    "    unload: {path: /unload}\n",
                    NONE);
}

static void test_large_per_request_without_clear_cache(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 1GiB, per_request: 8GiB}\n",
                    (const char *const[]){"test.yaml:4:13: warning: models.a.memory: memory.per_request is 8GiB and "
                                          "there is no clear_cache hook: a PyTorch server keeps a finished request's "
                                          "memory in its cache, so NVML shows it used and vramd cannot take it back "
                                          "for another model short of stopping or parking this one; add clear_cache: "
                                          "{path: ...} calling torch.cuda.empty_cache()",
                                          NULL});
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 1GiB, per_request: 8GiB}\n"
                    "    clear_cache: {path: /clear_cache}\n",
                    NONE);
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 1GiB, per_request: 1000MiB}\n",
                    NONE);
    /* a preset's server handles its own cache */
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    preset: comfyui\n"
                    "    memory: {resident: 1GiB, per_request: 8GiB}\n",
                    NONE);
}

static void test_served_model_missing(void **state)
{
    (void)state;
    expect_warnings("models:\n  qwen:\n    url: http://127.0.0.1:11434\n    preset: ollama\n" MEM,
                    (const char *const[]){"test.yaml:3:5: warning: models.qwen: preset ollama without served_model: "
                                          "vramd names this model \"qwen\" to the server (the \"model\" of its load "
                                          "and unload calls); set served_model to the name the server knows it by "
                                          "(like qwen3:8b)",
                                          NULL});
    expect_warnings("models:\n  qwen:\n    url: http://127.0.0.1:11434\n    preset: ollama\n"
                    "    served_model: \"qwen3:8b\"\n" MEM,
                    NONE);
    /* llama.cpp with one model (-m): no load/unload calls name it */
    expect_warnings("models:\n  q:\n    cmd: [/bin/sh, -m, q.gguf, --port, \"{port}\"]\n    preset: llamacpp\n" MEM,
                    NONE);
}

static void test_bare_numbers(void **state)
{
    (void)state;
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 6000}\n",
                    (const char *const[]){"test.yaml:4:24: warning: models.a.memory.resident: a bare number is "
                                          "bytes: 6000 is 6000 bytes; write a unit (like 6000MiB) if more was meant",
                                          NULL});
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n" MEM "    deadline: 30000\n",
                    (const char *const[]){"test.yaml:5:15: warning: models.a.deadline: a bare number is seconds: "
                                          "30000 is 500m (8.3 hours); write 30000ms if milliseconds were meant, "
                                          "or a unit (like 500m) to say so",
                                          NULL});
    /* in defaults: once, not once per model */
    expect_warnings("defaults: {health: {timeout: 5000}}\nmodels:\n  a:\n    url: http://127.0.0.1:9\n" MEM
                    "  b:\n    url: http://127.0.0.1:8\n" MEM,
                    (const char *const[]){"test.yaml:1:30: warning: defaults.health.timeout: a bare number is "
                                          "seconds: 5000 is 5000s (1.4 hours); write 5000ms if milliseconds were "
                                          "meant, or a unit (like 5000s) to say so",
                                          NULL});
    expect_warnings("gpu: {headroom: 512}\nmodels:\n  a:\n    url: http://127.0.0.1:9\n" MEM,
                    (const char *const[]){"test.yaml:1:17: warning: gpu.headroom: a bare number is bytes: 512 is "
                                          "512 bytes; write a unit (like 512MiB) if more was meant",
                                          NULL});
    /* units, small bare durations, large bare sizes: fine */
    expect_warnings("models:\n  a:\n    url: http://127.0.0.1:9\n    memory: {resident: 6442450944}\n"
                    "    deadline: 30\n    keep_alive: 3600s\n",
                    NONE);
}

static void test_did_you_mean(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    url: http://127.0.0.1:9\n    memroy: {resident: 1GiB}\n",
                 "test.yaml:4:5: models.a.memroy: unknown key \"memroy\" (did you mean \"memory\"?)");
    expect_error("models:\n  a:\n    cmdd: [x]\n", "test.yaml:3:5: models.a.cmdd: unknown key \"cmdd\" (did you mean \"cmd\"?)");
    expect_error("models:\n  a:\n    url: http://127.0.0.1:9\n    frobnicate: 1\n",
                 "test.yaml:4:5: models.a.frobnicate: unknown key \"frobnicate\"");
    /* short keys: one edit at most ("foo" is not "log") */
    expect_error("foo: 1\nmodels: {a: {cmd: [x]}}\n", "test.yaml:1:1: foo: unknown key \"foo\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_config_has_none),
        cmocka_unit_test(test_program_not_found),
        cmocka_unit_test(test_program_relative_and_not_executable),
        cmocka_unit_test(test_command_line_in_one_word),
        cmocka_unit_test(test_no_port),
        cmocka_unit_test(test_not_memory_gated),
        cmocka_unit_test(test_pinned_with_hooks),
        cmocka_unit_test(test_large_per_request_without_clear_cache),
        cmocka_unit_test(test_served_model_missing),
        cmocka_unit_test(test_bare_numbers),
        cmocka_unit_test(test_did_you_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
