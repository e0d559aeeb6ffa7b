/*
 * fuzz_config: libFuzzer entry point for the configuration parser.
 *
 * Feeds arbitrary bytes to config_parse() and checks what must hold for any input:
 * either a config comes back that satisfies the parser's promises (none or more models,
 * each with exactly one of cmd/url, routes normalised, ladder levels with a `set` object,
 * NULL-terminated argv), or NULL with a non-empty "fuzz.yaml:LINE:COL: ..." message.
 * Any broken promise aborts, so the fuzzer reports it. The config is always released
 * (leaks show under ASan). Replayed over tests/fuzz/corpus/config by replay_main.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_model(const model_config_t *m)
{
    if (m->name == NULL || m->name[0] == '\0')
        abort();
    if ((m->cmd == NULL) == (m->url == NULL))
        abort();
    if (m->cmd != NULL && (m->n_cmd == 0 || m->cmd[m->n_cmd] != NULL))
        abort();
    if (m->url != NULL && (m->url_host == NULL || m->url_port < 1 || m->url_port > 65535))
        abort();
    if (m->route != NULL) {
        size_t len = strlen(m->route);
        if (len == 0 || m->route[0] != '/' || m->route[len - 1] != '/' || strstr(m->route, "//") != NULL)
            abort();
    }
    if (m->priority < 0 || m->priority > 9 || m->concurrency < 1 || m->instances < 1 || m->queue_max < 1)
        abort();
    if (m->sleep.set != m->wake.set || (m->sleep.set && (m->sleep.path == NULL || m->wake.path == NULL)))
        abort();
    if ((unsigned)m->preset >= PRESET_COUNT)
        abort();
    const config_hook_t *hooks[] = {&m->unload, &m->reload, &m->clear_cache, &m->sleep, &m->wake};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        cJSON *body = hooks[i]->body ? cJSON_Parse(hooks[i]->body) : NULL;
        if (hooks[i]->body && body == NULL) /* a hook body is always JSON text */
            abort();
        cJSON_Delete(body);
    }
    for (size_t i = 0; i < m->degrade.n_ladder; i++)
        if (!cJSON_IsObject(m->degrade.ladder[i].set))
            abort();
    if (m->validate.kind == VALIDATE_CMD && (m->validate.n_cmd == 0 || m->validate.cmd[m->validate.n_cmd] != NULL))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[CONFIG_ERR_MAX];
    config_t *c = config_parse((const char *)data, size, "fuzz.yaml", err, sizeof err);
    if (c == NULL) {
        if (strncmp(err, "fuzz.yaml:", 10) != 0)
            abort();
        return 0;
    }
    if (c->refs != 1 || c->listen_host == NULL || c->state_dir == NULL)
        abort();
    for (size_t i = 0; i < c->n_models; i++) {
        check_model(&c->models[i]);
        if (config_find_model(c, c->models[i].name) != &c->models[i])
            abort();
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            if (config_find_model(c, c->models[i].aliases[a]) != &c->models[i])
                abort();
    }
    config_ref(c);
    config_unref(c);
    config_unref(c);
    return 0;
}
