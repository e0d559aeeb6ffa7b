/*
 * test_config_park: the parking keys (issue 13): host_memory, gpu.cuda_library (and its
 * VRAMD_CUDA_LIBRARY override), the sleep/wake hooks, hook bodies, checkpoint, and presets
 * (src/config/presets.c): what each fills, and that every key set by hand (in the model or
 * in `defaults:`) overrides it.
 */
#include "config_test.h"

#include <stdio.h>
#include <stdlib.h>

static void test_park_defaults(void **state)
{
    (void)state;
    unsetenv("VRAMD_CUDA_LIBRARY");
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->host_memory.budget, 0);
    assert_int_equal(c->host_memory.reserve, 2 * GiB);
    assert_string_equal(c->gpu.cuda_library, "libcuda.so.1");
    const model_config_t *m = &c->models[0];
    assert_false(m->sleep.set);
    assert_false(m->wake.set);
    assert_int_equal(m->sleep.timeout_ms, 30000);
    assert_int_equal(m->wake.timeout_ms, 60000);
    assert_null(m->unload.body);
    assert_false(m->checkpoint);
    assert_int_equal(m->park_keep_alive_ms, 30 * 60 * 1000);
    assert_int_equal(m->preset, PRESET_NONE);
    assert_null(m->route);
    assert_false(m->degrade.set);
    config_unref(c);
}

static void test_host_memory(void **state)
{
    (void)state;
    config_t *c = parse_ok("host_memory: {budget: 64GiB, reserve: 4GiB}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->host_memory.budget, 64 * GiB);
    assert_int_equal(c->host_memory.reserve, 4 * GiB);
    config_unref(c);
    c = parse_ok("host_memory: {budget: auto, reserve: 0}\nmodels: {a: {cmd: [x]}}\n");
    assert_int_equal(c->host_memory.budget, 0);
    assert_int_equal(c->host_memory.reserve, 0);
    config_unref(c);
    expect_error("host_memory: {budget: 1GiB}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:23: host_memory.budget: 1073741824 bytes is not more than host_memory.reserve "
                 "(2147483648): nothing could ever be parked");
    expect_error("host_memory: {budget: 12 gigs}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:23: host_memory.budget: expected a size like 12GiB, got \"12 gigs\"");
    expect_error("host_memory: {reserv: 1GiB}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:15: host_memory.reserv: unknown key \"reserv\" (did you mean \"reserve\"?)");
}

static void test_cuda_library(void **state)
{
    (void)state;
    unsetenv("VRAMD_CUDA_LIBRARY");
    config_t *c = parse_ok("gpu: {cuda_library: /opt/libcuda-sim.so}\nmodels: {a: {cmd: [x]}}\n");
    assert_string_equal(c->gpu.cuda_library, "/opt/libcuda-sim.so");
    config_unref(c);
    setenv("VRAMD_CUDA_LIBRARY", "/env/libcuda.so", 1);
    c = parse_ok("gpu: {cuda_library: /opt/libcuda-sim.so}\nmodels: {a: {cmd: [x]}}\n");
    assert_string_equal(c->gpu.cuda_library, "/env/libcuda.so");
    config_unref(c);
    setenv("VRAMD_CUDA_LIBRARY", "", 1); /* empty: no override */
    c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_string_equal(c->gpu.cuda_library, "libcuda.so.1");
    config_unref(c);
    unsetenv("VRAMD_CUDA_LIBRARY");
}

static void test_sleep_wake_hooks(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  a:\n"
                           "    url: http://127.0.0.1:9000\n"
                           "    sleep: {path: \"/sleep?level=1\", timeout: 5s}\n"
                           "    wake: {method: PUT, path: /wake_up, body: {tags: [weights], n: 2}}\n"
                           "    unload: {path: /free, body: {unload_models: true, free_memory: true}}\n"
                           "    checkpoint: true\n");
    const model_config_t *m = &c->models[0];
    assert_true(m->sleep.set);
    assert_string_equal(m->sleep.path, "/sleep?level=1");
    assert_string_equal(m->sleep.method, "POST");
    assert_int_equal(m->sleep.timeout_ms, 5000);
    assert_null(m->sleep.body);
    assert_string_equal(m->wake.method, "PUT");
    assert_string_equal(m->wake.body, "{\"tags\":[\"weights\"],\"n\":2}");
    assert_int_equal(m->wake.timeout_ms, 60000);
    assert_string_equal(m->unload.body, "{\"unload_models\":true,\"free_memory\":true}");
    assert_true(m->checkpoint);
    config_unref(c);
    /* a body from defaults is removed with null */
    c = parse_ok("defaults: {unload: {path: /u, body: {x: 1}}}\n"
                 "models: {a: {cmd: [x], unload: {body: null}}}\n");
    assert_true(c->models[0].unload.set);
    assert_null(c->models[0].unload.body);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    sleep: {path: /sleep}\n",
                 "test.yaml:4:12: models.a.sleep: sleep and wake go together: a parked server is brought back by "
                 "its wake hook (set both, or neither)");
    expect_error("models:\n  a:\n    cmd: [x]\n    sleep: {timeout: 1s}\n    wake: {path: /w}\n",
                 "test.yaml:4:12: models.a.sleep: path is required (like /unload_models/)");
    expect_error("models:\n  a:\n    cmd: [x]\n    checkpoint: yes\n",
                 "test.yaml:4:17: models.a.checkpoint: expected true or false, got \"yes\"");
}

static void test_park_keep_alive(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {park_keep_alive: forever}\n"
                           "models: {a: {cmd: [x]}, b: {cmd: [x], park_keep_alive: 0}, c: {cmd: [x], park_keep_alive: 90s}}\n");
    assert_true(c->models[0].park_keep_alive_ms == CONFIG_FOREVER);
    assert_int_equal(c->models[1].park_keep_alive_ms, 0);
    assert_int_equal(c->models[2].park_keep_alive_ms, 90000);
    config_unref(c);
    expect_error("models:\n  a:\n    cmd: [x]\n    park_keep_alive: soon\n",
                 "test.yaml:4:22: models.a.park_keep_alive: expected a duration like 10m, 0 or forever, got \"soon\"");
}

static void test_preset_fills(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  llm: {url: \"http://127.0.0.1:8000\", preset: vllm}\n"
                           "  sg: {url: \"http://127.0.0.1:8001\", preset: sglang}\n"
                           "  comfy: {url: \"http://127.0.0.1:8188\", preset: comfyui}\n"
                           "  llama: {cmd: [llama-server, -m, a.gguf, --port, \"{port}\"], preset: llamacpp}\n"
                           "  ol: {url: \"http://127.0.0.1:11434\", preset: ollama}\n");
    const model_config_t *llm = config_find_model(c, "llm");
    assert_int_equal(llm->preset, PRESET_VLLM);
    assert_string_equal(config_preset_name(llm->preset), "vllm");
    assert_string_equal(llm->route, "/llm/");
    assert_string_equal(llm->health.path, "/health");
    assert_string_equal(llm->sleep.path, "/sleep?level=1");
    assert_string_equal(llm->sleep.method, "POST");
    assert_string_equal(llm->wake.path, "/wake_up");
    assert_false(llm->unload.set);
    assert_true(llm->degrade.set);
    assert_string_equal(llm->degrade.detect.body_matches, "out of memory");
    const model_config_t *sg = config_find_model(c, "sg");
    assert_string_equal(sg->sleep.path, "/release_memory_occupation");
    assert_string_equal(sg->sleep.body, "{}");
    assert_string_equal(sg->wake.path, "/resume_memory_occupation");
    const model_config_t *comfy = config_find_model(c, "comfy");
    assert_string_equal(comfy->health.path, "/system_stats");
    assert_false(comfy->sleep.set);
    assert_true(comfy->unload.set);
    assert_string_equal(comfy->unload.path, "/free");
    assert_string_equal(comfy->unload.body, "{\"unload_models\":true,\"free_memory\":true}");
    assert_false(comfy->reload.set);
    assert_true(comfy->prompt_hold); /* ComfyUI's own queue (path/prompt_hold.c) */
    assert_int_equal(comfy->prompt_poll_ms, 250);
    assert_int_equal(comfy->prompt_hold_timeout_ms, 0);
    assert_false(llm->prompt_hold);
    const model_config_t *llama = config_find_model(c, "llama");
    assert_string_equal(llama->health.path, "/health");
    assert_false(llama->sleep.set || llama->unload.set);
    assert_string_equal(llama->degrade.detect.body_matches, "out of memory|failed to allocate");
    const model_config_t *ol = config_find_model(c, "ol");
    assert_string_equal(ol->health.path, "/api/ps");
    assert_string_equal(ol->route, "/ol/");
    config_unref(c);
}

/* Ollama: hooks name the served model ({served_model}, filled per call), env for the worker;
 * llama.cpp: router hooks only in router mode (--models-dir / --models-preset, or url: with
 * served_model); a hand-set hook or env key wins. */
static const char *env_of(const model_config_t *m, const char *key)
{
    for (size_t i = 0; i < m->n_env; i++)
        if (strcmp(m->env[i].key, key) == 0)
            return m->env[i].value;
    return NULL;
}

static void test_preset_llamacpp_ollama(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  ol: {cmd: [ollama, serve], preset: ollama, served_model: \"qwen3:8b\",\n"
                           "       env: {OLLAMA_MAX_LOADED_MODELS: \"2\"}}\n"
                           "  single: {cmd: [llama-server, -m, a.gguf, --port, \"{port}\"], preset: llamacpp}\n"
                           "  router: {cmd: [llama-server, --models-dir, /m, --port, \"{port}\"], preset: llamacpp,\n"
                           "           served_model: qwen}\n"
                           "  ext: {url: \"http://127.0.0.1:8080\", preset: llamacpp, served_model: qwen,\n"
                           "        unload: {path: /mine}}\n");
    const model_config_t *ol = config_find_model(c, "ol");
    assert_string_equal(ol->served_model, "qwen3:8b");
    assert_string_equal(ol->unload.path, "/api/generate");
    assert_string_equal(ol->unload.body, "{\"model\":\"{served_model}\",\"keep_alive\":0}");
    assert_string_equal(ol->reload.body, "{\"model\":\"{served_model}\",\"keep_alive\":-1}");
    assert_string_equal(env_of(ol, "OLLAMA_HOST"), "127.0.0.1:{port}");
    assert_string_equal(env_of(ol, "OLLAMA_KEEP_ALIVE"), "-1");
    assert_string_equal(env_of(ol, "OLLAMA_MAX_LOADED_MODELS"), "2"); /* the model's own env wins */
    const model_config_t *single = config_find_model(c, "single");
    assert_false(single->unload.set || single->reload.set);
    const model_config_t *router = config_find_model(c, "router");
    assert_string_equal(router->unload.path, "/models/unload");
    assert_string_equal(router->reload.path, "/models/load");
    assert_string_equal(router->reload.body, "{\"model\":\"{served_model}\"}");
    assert_string_equal(router->health.path, "/models");
    assert_int_equal(router->report, MODEL_REPORT_LLAMACPP_MODELS);
    assert_string_equal(single->health.path, "/health");
    assert_int_equal(single->report, MODEL_REPORT_NONE);
    assert_int_equal(ol->report, MODEL_REPORT_OLLAMA_PS);
    const model_config_t *ext = config_find_model(c, "ext");
    assert_string_equal(ext->unload.path, "/mine");
    assert_string_equal(ext->reload.path, "/models/load");
    config_unref(c);
    expect_error_named("test.yaml", "models: {a: {cmd: [x], served_model: \"a b\"}}\n",
                       "test.yaml:1:38: models.a.served_model: a served model name is 1 to 128 of "
                       "A-Z a-z 0-9 . _ - : / @, got \"a b\"");
}

static void test_preset_overrides(void **state)
{
    (void)state;
    /* the model's own keys win; sections overlay key by key */
    config_t *c = parse_ok("models:\n"
                           "  llm:\n"
                           "    url: http://127.0.0.1:8000\n"
                           "    preset: vllm\n"
                           "    route: /chat/\n"
                           "    health: {interval: 1s}\n"
                           "    sleep: {path: \"/sleep?level=2\"}\n"
                           "    degrade: {detect: {body_matches: \"CUDA error\"}}\n");
    const model_config_t *m = &c->models[0];
    assert_string_equal(m->route, "/chat/");
    assert_string_equal(m->health.path, "/health");
    assert_int_equal(m->health.interval_ms, 1000);
    assert_string_equal(m->sleep.path, "/sleep?level=2");
    assert_string_equal(m->wake.path, "/wake_up");
    assert_string_equal(m->degrade.detect.body_matches, "CUDA error");
    config_unref(c);
    /* a preset in defaults applies to every model; defaults' hand keys beat the preset; a
     * model's own preset beats the one in defaults; preset: null turns it off */
    c = parse_ok("defaults: {preset: vllm, health: {path: /hz}}\n"
                 "models:\n"
                 "  a: {url: \"http://127.0.0.1:8000\"}\n"
                 "  b: {url: \"http://127.0.0.1:8001\", preset: comfyui}\n"
                 "  c: {url: \"http://127.0.0.1:8002\", preset: null}\n");
    const model_config_t *a = config_find_model(c, "a");
    assert_int_equal(a->preset, PRESET_VLLM);
    assert_string_equal(a->health.path, "/hz");
    assert_string_equal(a->route, "/a/");
    assert_true(a->sleep.set);
    const model_config_t *b = config_find_model(c, "b");
    assert_int_equal(b->preset, PRESET_COMFYUI);
    assert_string_equal(b->health.path, "/hz");
    assert_false(b->sleep.set);
    assert_string_equal(b->unload.path, "/free");
    assert_true(b->prompt_hold);
    const model_config_t *cc = config_find_model(c, "c");
    assert_int_equal(cc->preset, PRESET_NONE);
    assert_false(cc->sleep.set);
    assert_null(cc->route);
    config_unref(c);
    /* route: null drops the preset's route; removing the preset's sleep leaves its wake alone */
    c = parse_ok("models: {a: {url: \"http://127.0.0.1:8000\", preset: vllm, route: null}}\n");
    assert_null(c->models[0].route);
    config_unref(c);
    expect_error("models:\n  a:\n    url: http://127.0.0.1:8000\n    preset: vllm\n    sleep: null\n",
                 "test.yaml:5:12: models.a.sleep: sleep and wake go together: a parked server is brought back by "
                 "its wake hook (set both, or neither)");
    expect_error("models:\n  a:\n    url: http://127.0.0.1:8000\n    preset: vllm\n    wake: {timeout: 1s}\n"
                 "    sleep: ~\n",
                 "test.yaml:6:12: models.a.sleep: sleep and wake go together: a parked server is brought back by "
                 "its wake hook (set both, or neither)");
    expect_error("models:\n  a:\n    url: http://127.0.0.1:8000\n    preset: tgi\n",
                 "test.yaml:4:13: models.a.preset: expected one of vllm, sglang, comfyui, llamacpp, ollama, got "
                 "\"tgi\"");
    expect_error("defaults: {preset: [vllm]}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: defaults.preset: expected one of vllm, sglang, comfyui, llamacpp, ollama, got a "
                 "list");
    /* the hold turned off by hand; its poll and bound */
    c = parse_ok("models: {a: {url: \"http://127.0.0.1:8188\", preset: comfyui, prompt_hold: false,"
                 " prompt_poll: 50ms, prompt_hold_timeout: 1m}}\n");
    assert_false(c->models[0].prompt_hold);
    assert_int_equal(c->models[0].prompt_poll_ms, 50);
    assert_int_equal(c->models[0].prompt_hold_timeout_ms, 60000);
    config_unref(c);
    expect_error("models: {a: {url: \"http://127.0.0.1:8188\", preset: comfyui, prompt_poll: 1ms}}\n",
                 "test.yaml:1:74: models.a.prompt_poll: must be at least 10ms, got \"1ms\"");
    /* a preset's route clashes like any other */
    expect_error("models:\n  a: {url: \"http://127.0.0.1:8000\", preset: vllm}\n  b: {cmd: [x], route: /a/}\n",
                 "test.yaml:3:24: models.b.route: route /a/ is already used by model \"a\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_park_defaults),   cmocka_unit_test(test_host_memory),
        cmocka_unit_test(test_cuda_library),    cmocka_unit_test(test_sleep_wake_hooks),
        cmocka_unit_test(test_preset_fills),    cmocka_unit_test(test_preset_overrides),
        cmocka_unit_test(test_preset_llamacpp_ollama),
        cmocka_unit_test(test_park_keep_alive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
