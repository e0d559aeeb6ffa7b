/*
 * test_config_turns: the keys of models that take turns on a card (issue 35, SPEC section 9,
 * src/config/turn_keys.c): max_wait and evicts (per model and in `defaults:`), `alias_of:`
 * entries of models: (kept out of config->models, their targets resolved and checked,
 * their names, aliases and routes in the models' namespace), gpu.idle_model in its three
 * forms and gpu.idle_model_after; each bad form's error with file:line:col and key path;
 * and that an entry's source_hash (what a reload compares) follows the new keys and only
 * its own text.
 */
#include "config_test.h"

#include <stdio.h>
#include <stdlib.h>

#define M "    cmd: [x]\n    memory: {resident: 1GiB}\n" /* a model's body that books memory */

static const model_config_t *model(const config_t *c, const char *name)
{
    const model_config_t *m = config_find_model(c, name);
    if (m == NULL)
        fail_msg("no model %s", name);
    return m;
}

static void test_defaults(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_int_equal(c->models[0].max_wait_ms, 0);
    assert_int_equal(c->models[0].evicts, CFG_EVICTS_ANY);
    assert_int_equal(c->n_alias_ofs, 0);
    assert_int_equal(c->gpu.n_idle_models, 0);
    assert_int_equal(c->gpu.idle_model_after_ms, 30000);
    char summary[64];
    config_summary(c, summary, sizeof summary);
    assert_string_equal(summary, "1 models");
    config_unref(c);
}

static void test_max_wait(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {max_wait: 90s}\n"
                           "models:\n"
                           "  a: {cmd: [x]}\n"
                           "  b: {cmd: [x], max_wait: 2m}\n"
                           "  c: {cmd: [x], max_wait: auto}\n"
                           "  d: {cmd: [x], max_wait: 1s}\n"
                           "  e: {cmd: [x], max_wait: 24h}\n");
    assert_int_equal(model(c, "a")->max_wait_ms, 90000);
    assert_int_equal(model(c, "b")->max_wait_ms, 120000);
    assert_int_equal(model(c, "c")->max_wait_ms, 0);
    assert_int_equal(model(c, "d")->max_wait_ms, 1000);
    assert_int_equal(model(c, "e")->max_wait_ms, 24ULL * 3600 * 1000);
    config_unref(c);
    expect_error("models:\n  a: {cmd: [x], max_wait: 500ms}\n",
                 "test.yaml:2:27: models.a.max_wait: must be from 1s to 24h (or auto), got \"500ms\"");
    expect_error("models:\n  a: {cmd: [x], max_wait: 25h}\n",
                 "test.yaml:2:27: models.a.max_wait: must be from 1s to 24h (or auto), got \"25h\"");
    expect_error("models:\n  a: {cmd: [x], max_wait: 0}\n",
                 "test.yaml:2:27: models.a.max_wait: must be from 1s to 24h (or auto), got \"0\"");
    expect_error("models:\n  a: {cmd: [x], max_wait: soon}\n",
                 "test.yaml:2:27: models.a.max_wait: expected auto or a duration like 2m, got \"soon\"");
    expect_error("models:\n  a: {cmd: [x], max_wait: forever}\n",
                 "test.yaml:2:27: models.a.max_wait: expected auto or a duration like 2m, got \"forever\"");
    expect_error("models:\n  a: {cmd: [x], max_wait: [1s]}\n",
                 "test.yaml:2:27: models.a.max_wait: expected auto or a duration like 2m, got a list");
    expect_error("defaults: {max_wait: 10ms}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:22: defaults.max_wait: must be from 1s to 24h (or auto), got \"10ms\"");
}

static void test_max_wait_bare_number_warns(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n  a: {cmd: [/bin/sh, \"{port}\"], memory: {resident: 1GiB}, max_wait: 3600}\n");
    assert_int_equal(c->models[0].max_wait_ms, 3600 * 1000);
    bool found = false;
    for (size_t i = 0; i < c->n_warnings; i++)
        found = found || strcmp(c->warnings[i].key, "models.a.max_wait") == 0;
    assert_true(found);
    config_unref(c);
}

static void test_evicts(void **state)
{
    (void)state;
    config_t *c = parse_ok("defaults: {evicts: idle_only}\n"
                           "models:\n"
                           "  a: {cmd: [x]}\n"
                           "  b: {cmd: [x], evicts: any}\n"
                           "  c: {cmd: [x], evicts: idle_only}\n");
    assert_int_equal(model(c, "a")->evicts, CFG_EVICTS_IDLE_ONLY);
    assert_int_equal(model(c, "b")->evicts, CFG_EVICTS_ANY);
    assert_int_equal(model(c, "c")->evicts, CFG_EVICTS_IDLE_ONLY);
    config_unref(c);
    expect_error("models:\n  a: {cmd: [x], evicts: never}\n",
                 "test.yaml:2:25: models.a.evicts: expected any or idle_only, got \"never\"");
    expect_error("defaults: {evicts: idle}\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:20: defaults.evicts: expected any or idle_only, got \"idle\"");
}

static const char *const alias_yaml = "defaults: {strip: false}\n"
                                      "models:\n"
                                      "  qwen-7b:\n" M "    aliases: [qwen]\n"
                                      "  chat-any:\n"
                                      "    alias_of: [qwen, llama-8b]\n"
                                      "    route: chat\n"
                                      "    aliases: [chat, gpt-4o]\n"
                                      "  llama-8b:\n" M
                                      "  solo:\n"
                                      "    alias_of: [llama-8b]\n"
                                      "    strip: true\n";

static void test_alias_of(void **state)
{
    (void)state;
    config_t *c = parse_ok(alias_yaml);
    assert_int_equal(c->n_models, 2);
    assert_string_equal(c->models[0].name, "qwen-7b");
    assert_string_equal(c->models[1].name, "llama-8b");
    assert_int_equal(c->n_alias_ofs, 2);
    const config_alias_of_t *a = &c->alias_ofs[0];
    assert_string_equal(a->name, "chat-any");
    assert_int_equal(a->n_targets, 2);
    assert_string_equal(a->targets[0], "qwen-7b"); /* the alias in the file, resolved */
    assert_string_equal(a->targets[1], "llama-8b");
    assert_string_equal(a->route, "/chat/");
    assert_false(a->strip); /* from defaults: */
    assert_int_equal(a->n_aliases, 2);
    assert_string_equal(a->aliases[1], "gpt-4o");
    assert_non_null(a->where);
    assert_string_equal(a->where, "test.yaml:7:3");
    assert_true(c->alias_ofs[1].strip);
    assert_null(c->alias_ofs[1].route);
    assert_ptr_equal(config_find_alias_of(c, "chat-any"), a);
    assert_ptr_equal(config_find_alias_of(c, "gpt-4o"), a);
    assert_ptr_equal(config_find_alias_of(c, "solo"), &c->alias_ofs[1]);
    assert_null(config_find_alias_of(c, "qwen-7b"));
    assert_null(config_find_model(c, "chat-any"));
    assert_null(config_find_model(c, "chat"));
    assert_ptr_equal(config_find_model(c, "qwen"), &c->models[0]);
    char summary[64];
    config_summary(c, summary, sizeof summary);
    assert_string_equal(summary, "2 models, 2 alias_of entries");
    config_unref(c);
    c = parse_ok("models:\n  a:\n" M "  b: {alias_of: [a]}\n");
    config_summary(c, summary, sizeof summary);
    assert_string_equal(summary, "1 models, 1 alias_of entry");
    config_unref(c);
}

static void test_alias_of_errors(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n" M "  b:\n    alias_of: [a]\n    cmd: [y]\n",
                 "test.yaml:7:5: models.b.cmd: \"cmd\" is not allowed here: alias_of entries take only route, "
                 "strip and aliases (the models it names carry the rest)");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a], max_wait: 2m}\n",
                 "test.yaml:5:22: models.b.max_wait: \"max_wait\" is not allowed here: alias_of entries take only "
                 "route, strip and aliases (the models it names carry the rest)");
    expect_error("models:\n  a:\n" M "  b: {alias_of: []}\n",
                 "test.yaml:5:17: models.b.alias_of: expected a list of 1 to 16 model names like "
                 "[qwen-7b, llama-8b], got an empty list");
    expect_error("models:\n  a:\n" M "  b: {alias_of: a}\n",
                 "test.yaml:5:17: models.b.alias_of: expected a list of 1 to 16 model names like "
                 "[qwen-7b, llama-8b], got \"a\"");
    expect_error("models:\n  a:\n" M "  b: {alias_of: ~}\n",
                 "test.yaml:5:17: models.b.alias_of: expected a list of 1 to 16 model names like "
                 "[qwen-7b, llama-8b], got null");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]}\n",
                 "test.yaml:5:17: models.b.alias_of: too many entries (17, at most 16)");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a, nope]}\n",
                 "test.yaml:5:21: models.b.alias_of[1]: no model \"nope\" (alias_of names a model of this "
                 "file, by its name or an alias)");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [c]}\n  c: {alias_of: [a]}\n",
                 "test.yaml:5:18: models.b.alias_of[0]: \"c\" is an alias_of entry: alias_of names models that "
                 "have a server of their own");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a, b]}\n",
                 "test.yaml:5:21: models.b.alias_of[1]: an alias_of entry cannot name itself");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a, bee], aliases: [bee]}\n",
                 "test.yaml:5:21: models.b.alias_of[1]: an alias_of entry cannot name itself");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a, a]}\n",
                 "test.yaml:5:21: models.b.alias_of[1]: model \"a\" is listed twice (alias_of[0] names it too)");
    expect_error("models:\n  a:\n" M "    aliases: [ay]\n  b: {alias_of: [a, ay]}\n",
                 "test.yaml:6:21: models.b.alias_of[1]: \"ay\" is model \"a\", which alias_of[0] names too");
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a], route: [x]}\n",
                 "test.yaml:5:29: models.b.route: expected a path prefix like /trellis/, got a list");
    /* the namespace of names, aliases and routes is shared with the models */
    expect_error("models:\n  a:\n" M "  b: {alias_of: [a], aliases: [a]}\n",
                 "test.yaml:5:32: models.b.aliases[0]: alias \"a\" is the name of model \"a\"");
    expect_error("models:\n  a:\n" M "    aliases: [b]\n  b: {alias_of: [a]}\n",
                 "test.yaml:5:15: models.a.aliases[0]: alias \"b\" is the name of alias_of entry \"b\"");
    expect_error("models:\n  b: {alias_of: [a], aliases: [x]}\n  a:\n" M "    aliases: [x]\n",
                 "test.yaml:6:15: models.a.aliases[0]: alias \"x\" is already an alias of alias_of entry \"b\"");
    expect_error("models:\n  a:\n" M "    route: /r/\n  b: {alias_of: [a], route: /r}\n",
                 "test.yaml:6:29: models.b.route: route /r/ is already used by model \"a\"");
    expect_error("models:\n  b: {alias_of: [a], route: /r}\n  a:\n" M "    route: r\n",
                 "test.yaml:6:12: models.a.route: route /r/ is already used by alias_of entry \"b\"");
    /* alias_of is no model key: not in defaults: */
    expect_error("defaults: {alias_of: [a]}\nmodels:\n  a:\n" M,
                 "test.yaml:1:12: defaults.alias_of: unknown key \"alias_of\"");
}

static void test_idle_model_forms(void **state)
{
    (void)state;
    const char *models = "models:\n"
                         "  qwen-7b:\n" M "    aliases: [qwen]\n"
                         "  embed:\n" M "    gpus: [1]\n"
                         "  any: {alias_of: [qwen-7b, embed]}\n";
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "gpu: {idle_model: qwen, idle_model_after: 45s}\n%s", models);
    config_t *c = parse_ok(yaml);
    assert_int_equal(c->gpu.n_idle_models, 1);
    assert_int_equal(c->gpu.idle_models[0].gpu, -1);
    assert_string_equal(c->gpu.idle_models[0].model, "qwen-7b"); /* the alias resolved */
    assert_int_equal(c->gpu.idle_model_after_ms, 45000);
    config_unref(c);
    snprintf(yaml, sizeof yaml, "gpu: {idle_model: [qwen-7b, embed, ~, null, qwen-7b]}\n%s", models);
    c = parse_ok(yaml);
    assert_int_equal(c->gpu.n_idle_models, 3);
    assert_int_equal(c->gpu.idle_models[0].gpu, 0);
    assert_string_equal(c->gpu.idle_models[0].model, "qwen-7b");
    assert_int_equal(c->gpu.idle_models[1].gpu, 1);
    assert_string_equal(c->gpu.idle_models[1].model, "embed");
    assert_int_equal(c->gpu.idle_models[2].gpu, 4);
    config_unref(c);
    snprintf(yaml, sizeof yaml, "gpu:\n  idle_model:\n    1: embed\n    3: qwen\n    0: ~\n%s", models);
    c = parse_ok(yaml);
    assert_int_equal(c->gpu.n_idle_models, 2);
    assert_int_equal(c->gpu.idle_models[0].gpu, 1);
    assert_string_equal(c->gpu.idle_models[0].model, "embed");
    assert_int_equal(c->gpu.idle_models[1].gpu, 3);
    assert_string_equal(c->gpu.idle_models[1].model, "qwen-7b");
    config_unref(c);
    snprintf(yaml, sizeof yaml, "gpu: {idle_model: ~}\n%s", models);
    c = parse_ok(yaml);
    assert_int_equal(c->gpu.n_idle_models, 0);
    config_unref(c);
    /* a model that only learns its per-request memory still books GPU memory */
    c = parse_ok("gpu: {idle_model: a}\nmodels:\n  a: {cmd: [x], memory: {learn: true}}\n");
    assert_string_equal(c->gpu.idle_models[0].model, "a");
    config_unref(c);
}

static void test_idle_model_errors(void **state)
{
    (void)state;
    const char *tail = "models:\n"
                       "  a:\n" M "    gpus: [0]\n"
                       "  free: {cmd: [x]}\n"
                       "  any: {alias_of: [a]}\n";
    static const struct {
        const char *gpu, *error;
    } cases[] = {
        {"gpu: {idle_model: nope}\n",
         "test.yaml:1:19: gpu.idle_model: no model \"nope\" (gpu.idle_model names a model of this file, by its "
         "name or an alias)"},
        {"gpu: {idle_model: any}\n",
         "test.yaml:1:19: gpu.idle_model: \"any\" is an alias_of entry: gpu.idle_model names models that have a "
         "server of their own"},
        {"gpu: {idle_model: free}\n",
         "test.yaml:1:19: gpu.idle_model: model \"free\" uses no GPU memory (no memory.resident nor "
         "memory.per_request): there is nothing to bring back onto the card"},
        {"gpu: {idle_model: [a, a]}\n",
         "test.yaml:1:23: gpu.idle_model[1]: model \"a\" may not use GPU 1 (its gpus: list leaves it out)"},
        {"gpu: {idle_model: {2: a}}\n",
         "test.yaml:1:23: gpu.idle_model.2: model \"a\" may not use GPU 2 (its gpus: list leaves it out)"},
        {"gpu: {devices: [1], idle_model: [~, ~, free]}\n",
         "test.yaml:1:40: gpu.idle_model[2]: model \"free\" uses no GPU memory (no memory.resident nor "
         "memory.per_request): there is nothing to bring back onto the card"},
        {"gpu: {devices: [1], idle_model: [a]}\n",
         "test.yaml:1:34: gpu.idle_model[0]: GPU 0 is not among gpu.devices"},
        {"gpu: {idle_model: {0: a, 00: a}}\n",
         "test.yaml:1:30: gpu.idle_model.00: GPU 0 is given twice"},
        {"gpu: {idle_model: {gpu0: a}}\n",
         "test.yaml:1:20: gpu.idle_model.gpu0: expected an integer from 0 to 1023, got \"gpu0\""},
        {"gpu: {idle_model: {1024: a}}\n",
         "test.yaml:1:20: gpu.idle_model.1024: expected an integer from 0 to 1023, got \"1024\""},
        {"gpu: {idle_model: [[a]]}\n",
         "test.yaml:1:20: gpu.idle_model[0]: expected a model name, got a list"},
        {"gpu: {idle_model: {0: \"\"}}\n",
         "test.yaml:1:23: gpu.idle_model.0: a model name must not be empty"},
        {"gpu: {idle_model_after: 500ms}\n",
         "test.yaml:1:25: gpu.idle_model_after: must be at least 1000ms, got \"500ms\""},
        {"gpu: {idle_model_after: 25h}\n",
         "test.yaml:1:25: gpu.idle_model_after: must be at most 24h"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml, "%s%s", cases[i].gpu, tail);
        expect_error(yaml, cases[i].error);
    }
}

/* An entry's source_hash is what a reload compares (a failed model whose entry changed is
 * tried again): a changed max_wait or evicts, in the entry or in defaults:, changes it. */
static void test_reload_hash_follows_the_keys(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "models:\n  a: {cmd: [x]}\n  b: {cmd: [x]}\n",
        "models:\n  a: {cmd: [x], max_wait: 2m}\n  b: {cmd: [x]}\n",
        "models:\n  a: {cmd: [x], max_wait: 3m}\n  b: {cmd: [x]}\n",
        "models:\n  a: {cmd: [x], max_wait: 3m, evicts: idle_only}\n  b: {cmd: [x]}\n",
        "defaults: {evicts: idle_only}\nmodels:\n  a: {cmd: [x], max_wait: 3m, evicts: idle_only}\n  b: {cmd: [x]}\n",
    };
    uint64_t a[5], b[5];
    for (size_t i = 0; i < 5; i++) {
        config_t *c = parse_ok(texts[i]);
        a[i] = model(c, "a")->source_hash;
        b[i] = model(c, "b")->source_hash;
        config_unref(c);
    }
    for (size_t i = 1; i < 5; i++)
        assert_int_not_equal(a[i], a[i - 1]);
    assert_int_equal(b[0], b[1]); /* only a's entry changed */
    assert_int_equal(b[1], b[3]);
    assert_int_not_equal(b[3], b[4]); /* defaults: is part of every entry's hash */
    config_unref(NULL);
}

/* What follows an entry in the file is not part of it: a block-style model written last,
 * then followed by an appended alias_of entry (or a model, a comment, a top-level key), keeps
 * its source_hash, so a reload that adds an entry does not retry a failed model whose entry
 * is unchanged. Failed before: a block mapping's end is where the next token begins, and the
 * next entry's indentation was hashed with it. */
static void test_reload_hash_ignores_what_follows(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "models:\n  a:\n    cmd: [x]\n    gpus:\n      - 0\n",
        "models:\n  a:\n    cmd: [x]\n    gpus:\n      - 0\n  b:\n    alias_of: [a]\n",
        "models:\n  a:\n    cmd: [x]\n    gpus:\n      - 0\n# the end\nlog: {level: info}\n",
        "models:\n  a:\n    cmd: [x]\n    gpus:\n      - 0\n  c: {cmd: [y]}\n",
    };
    uint64_t h[4];
    for (size_t i = 0; i < 4; i++) {
        config_t *c = parse_ok(texts[i]);
        h[i] = model(c, "a")->source_hash;
        config_unref(c);
    }
    for (size_t i = 1; i < 4; i++)
        assert_int_equal(h[i], h[0]);
    config_t *c = parse_ok("models:\n  a:\n    cmd: [x]\n    gpus:\n      - 1\n"); /* its own text changed */
    assert_int_not_equal(model(c, "a")->source_hash, h[0]);
    config_unref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_max_wait),
        cmocka_unit_test(test_max_wait_bare_number_warns),
        cmocka_unit_test(test_evicts),
        cmocka_unit_test(test_alias_of),
        cmocka_unit_test(test_alias_of_errors),
        cmocka_unit_test(test_idle_model_forms),
        cmocka_unit_test(test_idle_model_errors),
        cmocka_unit_test(test_reload_hash_follows_the_keys),
        cmocka_unit_test(test_reload_hash_ignores_what_follows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
