/*
 * test_preset_table: the preset table's columns (src/config/presets.c, config/presets.h) and
 * what each fills into a model.
 *
 * Covers: every row's name is the `preset:` value that picks it, and the choice's error lists
 * the rows' names; the "none" row (and a value out of range) fills nothing; each column lands
 * in the model: aborts_on_close (cancelled_hold off), prompt_hold, upgrade, report, stream
 * framing, denied paths (config_preset_denied_paths), sleep_confirm, fraction_flag,
 * served_model_example (the warning names it); the llama.cpp row's router mode gives its
 * hooks and health path only where its `detect` says so.
 * Run: make build/tests/test_preset_table && build/tests/test_preset_table
 */

#include "config_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/presets.h"

static void test_names_pick_rows(void **state)
{
    (void)state;
    for (int p = PRESET_NONE + 1; p < PRESET_COUNT; p++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "models:\n  a: {url: \"http://127.0.0.1:9\", preset: %s, served_model: s}\n",
                 config_preset(p)->name);
        config_t *c = parse_ok(yaml);
        assert_int_equal(c->models[0].preset, p);
        assert_string_equal(config_preset_name(c->models[0].preset), config_preset(p)->name);
        assert_string_equal(c->models[0].route, "/a/");
        config_unref(c);
    }
    assert_string_equal(config_preset_name(PRESET_NONE), "none");
    assert_ptr_equal(config_preset((enum config_preset)PRESET_COUNT), config_preset(PRESET_NONE));
    assert_ptr_equal(config_preset((enum config_preset)-1), config_preset(PRESET_NONE));
    assert_null(config_preset_denied_paths(PRESET_NONE)[0]);
    assert_null(config_preset_fraction_flag(PRESET_NONE));
}

static void test_none_fills_nothing(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a: {url: \"http://127.0.0.1:9\", preset: null}\n");
    const model_config_t *m = &c->models[0];
    assert_int_equal(m->preset, PRESET_NONE);
    assert_false(m->unload.set || m->reload.set || m->sleep.set || m->wake.set);
    assert_false(m->degrade.set);
    assert_false(m->prompt_hold);
    assert_int_equal(m->report, MODEL_REPORT_NONE);
    assert_int_equal(m->stream_framing, STREAM_FRAMING_NONE);
    assert_true(m->memory.cancelled_hold_auto);
    config_unref(c);
}

static void test_columns_land(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  v: {url: \"http://127.0.0.1:9\", preset: vllm}\n"
                           "  s: {url: \"http://127.0.0.1:9\", preset: sglang}\n"
                           "  c: {url: \"http://127.0.0.1:9\", preset: comfyui}\n"
                           "  l: {cmd: [llama-server, -m, a.gguf, --port, \"{port}\"], preset: llamacpp}\n"
                           "  o: {url: \"http://127.0.0.1:9\", preset: ollama, served_model: \"q:8b\"}\n");
    const model_config_t *v = config_find_model(c, "v"), *s = config_find_model(c, "s"),
                         *cu = config_find_model(c, "c"), *l = config_find_model(c, "l"),
                         *o = config_find_model(c, "o");
    /* stream framing */
    assert_int_equal(v->stream_framing, STREAM_FRAMING_SSE);
    assert_int_equal(s->stream_framing, STREAM_FRAMING_SSE);
    assert_int_equal(cu->stream_framing, STREAM_FRAMING_NONE);
    assert_int_equal(l->stream_framing, STREAM_FRAMING_SSE);
    assert_int_equal(o->stream_framing, STREAM_FRAMING_NDJSON);
    /* aborts_on_close: cancelled_hold off for all but comfyui */
    assert_false(v->memory.cancelled_hold_auto || s->memory.cancelled_hold_auto || l->memory.cancelled_hold_auto ||
                 o->memory.cancelled_hold_auto);
    assert_true(cu->memory.cancelled_hold_auto);
    /* prompt_hold and upgrade: comfyui's */
    assert_true(cu->prompt_hold);
    assert_true(cu->upgrade & CFG_UPGRADE_WEBSOCKET);
    assert_false(v->prompt_hold || o->prompt_hold);
    assert_false(v->upgrade & CFG_UPGRADE_WEBSOCKET);
    /* report */
    assert_int_equal(o->report, MODEL_REPORT_OLLAMA_PS);
    assert_int_equal(v->report, MODEL_REPORT_NONE);
    assert_int_equal(l->report, MODEL_REPORT_NONE); /* single-model: /health */
    /* sleep confirmation: vLLM's alone */
    assert_string_equal(config_preset(v->preset)->sleep_confirm, "/is_sleeping");
    assert_null(config_preset(s->preset)->sleep_confirm);
    /* denied paths */
    assert_string_equal(config_preset_denied_paths(v->preset)[0], "/sleep");
    assert_string_equal(config_preset_denied_paths(s->preset)[0], "/release_memory_occupation");
    assert_string_equal(config_preset_denied_paths(l->preset)[0], "/models/load");
    assert_null(config_preset_denied_paths(cu->preset)[0]);
    assert_null(config_preset_denied_paths(o->preset)[0]);
    /* fraction flags */
    assert_string_equal(config_preset_fraction_flag(v->preset), "--gpu-memory-utilization");
    assert_string_equal(config_preset_fraction_flag(s->preset), "--mem-fraction-static");
    assert_null(config_preset_fraction_flag(l->preset));
    /* every row but none manages its own cache: no clear_cache warning */
    for (int p = PRESET_NONE + 1; p < PRESET_COUNT; p++)
        assert_true(config_preset(p)->manages_cache);
    assert_false(config_preset(PRESET_NONE)->manages_cache);
    config_unref(c);
}

/* The text of c's first warning holding needle; NULL when none does. */
static const char *warning_with(const config_t *c, const char *needle)
{
    for (size_t i = 0; i < c->n_warnings; i++)
        if (strstr(c->warnings[i].text, needle))
            return c->warnings[i].text;
    return NULL;
}

/* The row's mode (llama.cpp's router) applies only where detect says so; the warning for a
 * missing served_model gives the mode's example name, or the row's. */
static void test_mode_and_served_model_example(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  r: {cmd: [llama-server, --models-dir, /m, --port, \"{port}\"], preset: llamacpp}\n"
                           "  o: {url: \"http://127.0.0.1:9\", preset: ollama}\n");
    const model_config_t *r = config_find_model(c, "r");
    assert_non_null(config_preset_mode(r));
    assert_string_equal(config_preset_mode(r)->name, "router");
    assert_string_equal(r->unload.path, "/models/unload");
    assert_string_equal(r->health.path, "/models");
    assert_int_equal(r->report, MODEL_REPORT_LLAMACPP_MODELS);
    assert_null(config_preset_mode(config_find_model(c, "o")));
    assert_non_null(warning_with(c, "preset llamacpp without served_model: vramd names this model \"r\""));
    assert_non_null(strstr(warning_with(c, "preset llamacpp without"), "(like qwen3-8b-q4_k_m)"));
    assert_non_null(strstr(warning_with(c, "preset ollama without served_model"), "(like qwen3:8b)"));
    config_unref(c);
}

/* llama.cpp: a server given no model is a router (whatever its flags, also from its env); one
 * given a model (-m, -hf, ... or LLAMA_ARG_MODEL, also inside a `sh -c` word) is not. */
static void test_llamacpp_router_detected(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  bare: {cmd: [llama-server, --port, \"{port}\"], preset: llamacpp, served_model: a}\n"
                           "  envdir: {cmd: [llama-server, --port, \"{port}\"], preset: llamacpp, served_model: a,\n"
                           "           env: {LLAMA_ARG_MODELS_DIR: /m}}\n"
                           "  envmodel: {cmd: [llama-server, --port, \"{port}\"], preset: llamacpp,\n"
                           "             env: {LLAMA_ARG_MODEL: /m/a.gguf}}\n"
                           "  shm: {cmd: [sh, -c, \"exec llama-server -m /m/a.gguf --port {port}\"], preset: llamacpp}\n"
                           "  eq: {cmd: [llama-server, \"--model=/m/a.gguf\", --port, \"{port}\"], preset: llamacpp}\n"
                           "  hf: {cmd: [llama-server, -hf, org/x, --port, \"{port}\"], preset: llamacpp}\n"
                           "  dir: {cmd: [llama-server, --models-dir, /m, --port, \"{port}\"], preset: llamacpp,\n"
                           "        served_model: a}\n");
    const char *routers[] = {"bare", "envdir", "dir"}, *singles[] = {"envmodel", "shm", "eq", "hf"};
    for (size_t i = 0; i < 3; i++) {
        const model_config_t *m = config_find_model(c, routers[i]);
        assert_non_null(config_preset_mode(m));
        assert_string_equal(m->unload.path, "/models/unload");
        assert_string_equal(m->unload.nothing_to_do, "model is not running");
        assert_string_equal(m->reload.nothing_to_do, "model is already running");
        assert_string_equal(m->health.path, "/models");
        assert_true(m->pin_model);
    }
    for (size_t i = 0; i < 4; i++) {
        const model_config_t *m = config_find_model(c, singles[i]);
        assert_null(config_preset_mode(m));
        assert_false(m->unload.set || m->pin_model);
        assert_string_equal(m->health.path, "/health");
    }
    config_unref(c);
}

/* The server's slots are the entry's concurrency unless set by hand; pin_model given by hand
 * wins; a hook's own nothing_to_do is read (null removes it). */
static void test_llamacpp_slots_and_hand_keys(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  np: {cmd: [llama-server, -m, a, -np, \"2\"], preset: llamacpp}\n"
                           "  par: {cmd: [llama-server, -m, a, \"--parallel=3\"], preset: llamacpp}\n"
                           "  none: {cmd: [llama-server, -m, a], preset: llamacpp}\n"
                           "  auto: {cmd: [llama-server, -m, a, -np, \"-1\"], preset: llamacpp}\n"
                           "  env: {cmd: [llama-server, -m, a], preset: llamacpp, env: {LLAMA_ARG_N_PARALLEL: \"5\"}}\n"
                           "  hand: {cmd: [llama-server, -m, a, -np, \"2\"], preset: llamacpp, concurrency: 7}\n"
                           "  ext: {url: \"http://127.0.0.1:9\", preset: llamacpp}\n"
                           "  r: {cmd: [llama-server, --port, \"{port}\"], preset: llamacpp, served_model: a,\n"
                           "      pin_model: false, unload: {path: /models/unload, nothing_to_do: null}}\n"
                           "  h: {url: \"http://127.0.0.1:9\", unload: {path: /u, nothing_to_do: gone}}\n");
    assert_int_equal(config_find_model(c, "np")->concurrency, 2);
    assert_int_equal(config_find_model(c, "par")->concurrency, 3);
    assert_int_equal(config_find_model(c, "none")->concurrency, 4);
    assert_int_equal(config_find_model(c, "auto")->concurrency, 4);
    assert_int_equal(config_find_model(c, "env")->concurrency, 5);
    assert_int_equal(config_find_model(c, "hand")->concurrency, 7);
    assert_int_equal(config_find_model(c, "ext")->concurrency, 1); /* a url: server's slots are not known */
    const model_config_t *r = config_find_model(c, "r");
    assert_false(r->pin_model);
    assert_null(r->unload.nothing_to_do);
    assert_string_equal(r->reload.nothing_to_do, "model is already running");
    assert_string_equal(config_find_model(c, "h")->unload.nothing_to_do, "gone");
    config_unref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_pick_rows),
        cmocka_unit_test(test_none_fills_nothing),
        cmocka_unit_test(test_columns_land),
        cmocka_unit_test(test_mode_and_served_model_example),
        cmocka_unit_test(test_llamacpp_router_detected),
        cmocka_unit_test(test_llamacpp_slots_and_hand_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
