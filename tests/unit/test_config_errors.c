/*
 * test_config_errors: how the YAML configuration parser reports errors (src/config/yaml_doc.c,
 * yaml_json.c, fields.c and the key tables).
 *
 * Covers: each kind of error with its exact "file:line:col: key.path: message" text
 * (unknown keys at several depths, duplicate keys, wrong types, bad values, out-of-range
 * numbers, cmd/url mistakes, YAML syntax errors, nesting and empty files); bounds against
 * YAML alias bombs; the bound on models (at it, and one past it); an error buffer too small
 * for the message.
 * Run: make build/tests/test_config_errors && build/tests/test_config_errors (and with make SAN=1).
 */

#include "config_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* memory.size_field: a JSON pointer or a list of one to four. */
static void test_error_size_field(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {size_field: resolution}\n",
                 "test.yaml:4:26: models.a.memory.size_field: expected a JSON pointer like /resolution "
                 "(RFC 6901, starting with /), got \"resolution\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {size_field: [/a, /b, /c, /d, /e]}\n",
                 "test.yaml:4:26: models.a.memory.size_field: expected a JSON pointer like /resolution, "
                 "or a list of 1 to 4 of them");
    expect_error("models:\n  a:\n    cmd: [x]\n    memory: {size_field: [/a, {b: 1}]}\n",
                 "test.yaml:4:31: models.a.memory.size_field[1]: expected a JSON pointer like /resolution, got a mapping");
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
                 "test.yaml:6:7: models.a.health.intervall: unknown key \"intervall\" (did you mean \"interval\"?)");
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
                 "test.yaml:3:3: defaults.keepalive: unknown key \"keepalive\" (did you mean \"keep_alive\"?)");
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
                 "test.yaml:2:3: models.a: needs cmd (a server vramd starts), container (one it runs in a container) or url (a server already running)");
    expect_error("models:\n  a:\n", /* a model with nothing at all */
                 "test.yaml:2:3: models.a: needs cmd (a server vramd starts), container (one it runs in a container) or url (a server already running)");
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
    expect_error("listen: 127.0.0.1:8800\nmodels:\n", "test.yaml:2:8: models: at least one model is required");
    /* an explicit empty mapping is a config that serves nothing until models are added
     * (the Debian package's /etc/vramd/vramd.yaml) */
    config_t *c = parse_ok("listen: 127.0.0.1:8800\nmodels: {}\n");
    assert_int_equal(c->n_models, 0);
    assert_null(config_find_model(c, "a"));
    config_unref(c);
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

/* n external models ("models:\n  m0: {url: ...}\n..."), malloc'ed. */
static char *models_yaml(unsigned n)
{
    size_t cap = 16 + (size_t)n * 48;
    char *s = malloc(cap);
    assert_non_null(s);
    size_t used = (size_t)snprintf(s, cap, "models:\n");
    for (unsigned i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, cap - used, "  m%u: {url: \"http://127.0.0.1:9\"}\n", i);
    return s;
}

/* docs/config.md's bound on models (1,024, the YAML reader's bound on one mapping): at the
 * bound the file loads; one past it is refused naming models, not "too many keys". */
static void test_models_bound(void **state)
{
    (void)state;
    char err[512];
    char *yaml = models_yaml(1024);
    config_t *c = config_parse(yaml, strlen(yaml), "t.yaml", err, sizeof err);
    assert_non_null(c);
    assert_int_equal(c->n_models, 1024);
    config_unref(c);
    free(yaml);
    yaml = models_yaml(1025);
    assert_null(config_parse(yaml, strlen(yaml), "t.yaml", err, sizeof err));
    assert_string_equal(err, "t.yaml:2:3: models: too many models (1025, at most 1024)");
    free(yaml);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_size_like_spec),
        cmocka_unit_test(test_error_unknown_keys),
        cmocka_unit_test(test_error_size_field),
        cmocka_unit_test(test_error_duplicate_keys),
        cmocka_unit_test(test_error_wrong_types),
        cmocka_unit_test(test_error_bad_values),
        cmocka_unit_test(test_error_cmd_url),
        cmocka_unit_test(test_error_yaml_syntax),
        cmocka_unit_test(test_yaml_alias_bounds),
        cmocka_unit_test(test_models_bound),
        cmocka_unit_test(test_error_buffer_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
