/*
 * container_keys: a model's `container:` block and `stop_cmd:`, and the cmd a container
 * worker runs with (cfg_container_finish).
 *
 * A container: block builds the model's cmd:
 *   ENGINE run --rm [--replace] --name NAME --label vramd.owner={owner} --label vramd.model=MODEL
 *       [--cgroup-parent={cgroup}] -e CUDA_VISIBLE_DEVICES={gpu} -e VRAMD_MODEL=MODEL -e PORT={port}
 *       [-e K=V ...] [-p P ...] [--network N] [-v V ...] [GPU flags] ARGS... IMAGE COMMAND...
 * (--replace for podman only; GPU flags: docker --gpus, podman --device nvidia.com/gpu=...
 * through CDI; none with gpus: none). A cmd of its own that is `docker run ...` or
 * `podman run ...` is recognised as a container too: vramd adds --name vramd-{name} when it
 * has none, and the owner label, so that it can stop and find it (and for podman
 * --cgroup-parent={cgroup} when the cmd has no --cgroup-parent, as a block does). The placeholders are
 * filled per instance by the supervisor (workers/instance.c): {port}, {gpu}, {name} (the
 * model's name, or NAME-ID when it may run more than one instance), {model}, {owner} (the
 * daemon's cgroup subtree name), {cgroup} (the instance's cgroup path; an argument
 * `--cgroup-parent={cgroup}` is dropped when there is none), and for stop_cmd {pid}.
 *
 * Invariants: container and cmd, and container and url, are exclusive; engine and image are
 * required; every list is bounded (ARGV_MAX words, ENV_MAX variables); the built cmd stays
 * within ARGV_MAX words; on error the model stays freeable.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config_int.h"

/* ---------------------------------------------------------------------------------------
 * Parsing
 */

static int fp_words(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char ***argv = field;
    size_t *n = (size_t *)((char *)field + spec->min); /* the count sits spec->min bytes after */
    if (ydoc_is_null(v)) {
        cfg_free_argv(*argv, *n);
        *argv = NULL;
        *n = 0;
        return 0;
    }
    char **words = NULL;
    size_t nw = 0;
    if (cfg_parse_argv(c, v, &words, &nw) != 0)
        return -1;
    cfg_free_argv(*argv, *n);
    *argv = words;
    *n = nw;
    return 0;
}

static int fp_engine(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"podman", "docker", NULL};
    return cfg_set_choice_name(c, v, names, (char **)field);
}

/* gpus: all | none | a list of indexes ("0,1") | null (the instance's GPU) */
static int fp_container_gpus(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    char d[DESCRIBE_MAX];
    if (ydoc_is_null(v)) {
        free(*(char **)field);
        *(char **)field = NULL;
        return 0;
    }
    if (ydoc_need_scalar(c, v, "all, none or GPU indexes like 0,1") != 0)
        return -1;
    const char *s = ydoc_scalar_text(v);
    if (strcmp(s, "all") != 0 && strcmp(s, "none") != 0 && (!*s || !cfg_all_chars_in(s, "0123456789,")))
        return ydoc_fail(c, v, "expected all, none or GPU indexes like 0,1, got %s", ydoc_describe(v, d, sizeof d));
    return cfg_set_string(c, v, (char **)field);
}

static int fp_cgroup_parent(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    static const char *const names[] = {"auto", "true", "false", NULL};
    int choice;
    if (cfg_parse_choice(c, v, names, &choice) != 0)
        return -1;
    *(int *)field = choice == 0 ? -1 : choice == 1 ? 1 : 0;
    return 0;
}

static int fp_container_env(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_container_t *k = field;
    if (!ydoc_is_null(v) &&
        (ydoc_need_mapping(c, v, "a mapping of variable names to values") != 0 || ydoc_check_mapping(c, v) != 0))
        return -1;
    for (size_t i = 0; i < k->n_env; i++) {
        free(k->env[i].key);
        free(k->env[i].value);
    }
    free(k->env);
    k->env = NULL;
    k->n_env = 0;
    size_t n = ydoc_is_null(v) ? 0 : ydoc_mapping_size(v);
    if (n > ENV_MAX)
        return ydoc_fail(c, v, "at most %d variables", ENV_MAX);
    if (n == 0)
        return 0;
    k->env = calloc(n, sizeof *k->env);
    if (!k->env)
        return ydoc_fail(c, v, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *key = ydoc_pair_key(c, v, i), *val = ydoc_pair_value(c, v, i);
        size_t saved = ydoc_path_push_key(c, ydoc_scalar_text(key));
        int rc = ydoc_need_scalar(c, val, "a string");
        if (rc == 0 && !cfg_all_chars_in(ydoc_scalar_text(key),
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"))
            rc = ydoc_fail(c, key, "an environment variable name is letters, digits and _");
        if (rc == 0) {
            k->env[k->n_env].key = ydoc_dup_or_fail(c, key, ydoc_scalar_text(key));
            k->env[k->n_env].value = ydoc_dup_or_fail(c, val, ydoc_scalar_text(val));
            k->n_env++;
            rc = k->env[k->n_env - 1].key && k->env[k->n_env - 1].value ? 0 : -1;
        }
        ydoc_path_pop(c, saved);
        if (rc != 0)
            return -1;
    }
    return 0;
}

#define WORDS(field, count) fp_words, offsetof(config_container_t, field), \
    offsetof(config_container_t, count) - offsetof(config_container_t, field)

static const field_spec_t container_fields[] = {
    {"engine", fp_engine, offsetof(config_container_t, engine), 0, 0, NULL},
    {"image", cfg_fp_string, offsetof(config_container_t, image), 0, 0, NULL},
    {"name", cfg_fp_string, offsetof(config_container_t, name), 0, 0, NULL},
    {"gpus", fp_container_gpus, offsetof(config_container_t, gpus), 0, 0, NULL},
    {"ports", WORDS(ports, n_ports), 0, NULL},
    {"network", cfg_fp_string_opt, offsetof(config_container_t, network), 0, 0, NULL},
    {"volumes", WORDS(volumes, n_volumes), 0, NULL},
    {"env", fp_container_env, 0, 0, 0, NULL},
    {"args", WORDS(args, n_args), 0, NULL},
    {"command", WORDS(command, n_command), 0, NULL},
    {"cgroup_parent", fp_cgroup_parent, offsetof(config_container_t, cgroup_parent), 0, 0, NULL},
};
static const section_t container_section = SECTION(container_fields);

int cfg_fp_container(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    config_container_t *k = field;
    if (ydoc_is_null(v)) {
        cfg_container_free(k);
        return 0;
    }
    if (ydoc_need_mapping(c, v, "a mapping like {engine: podman, image: NAME}") != 0)
        return -1;
    k->set = true;
    return cfg_apply_mapping(c, v, &container_section, k);
}

int cfg_fp_stop_cmd(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec)
{
    model_config_t *m = field;
    cfg_free_argv(m->stop_cmd, m->n_stop_cmd);
    m->stop_cmd = NULL;
    m->n_stop_cmd = 0;
    if (ydoc_is_null(v))
        return 0;
    return cfg_parse_argv(c, v, &m->stop_cmd, &m->n_stop_cmd);
}

void cfg_container_free(config_container_t *k)
{
    free(k->engine);
    free(k->image);
    free(k->name);
    free(k->gpus);
    cfg_free_argv(k->ports, k->n_ports);
    free(k->network);
    cfg_free_argv(k->volumes, k->n_volumes);
    for (size_t i = 0; i < k->n_env; i++) {
        free(k->env[i].key);
        free(k->env[i].value);
    }
    free(k->env);
    cfg_free_argv(k->args, k->n_args);
    cfg_free_argv(k->command, k->n_command);
    memset(k, 0, sizeof *k);
    k->cgroup_parent = -1;
}

/* ---------------------------------------------------------------------------------------
 * The cmd
 */

typedef struct words {
    char **w;
    size_t n;
    bool failed; /* out of memory, or past ARGV_MAX */
} words_t;

static void add(words_t *a, const char *s)
{
    if (a->failed)
        return;
    if (a->n + 1 >= ARGV_MAX) {
        a->failed = true;
        return;
    }
    a->w[a->n] = strdup(s);
    if (!a->w[a->n])
        a->failed = true;
    else
        a->n++;
}

static void add2(words_t *a, const char *flag, const char *value)
{
    add(a, flag);
    add(a, value);
}

static void add_env(words_t *a, const char *key, const char *value)
{
    size_t len = strlen(key) + strlen(value) + 2;
    char *kv = malloc(len);
    if (!kv) {
        a->failed = true;
        return;
    }
    snprintf(kv, len, "%s=%s", key, value);
    add2(a, "-e", kv);
    free(kv);
}

/* The engine's basename: "docker", "podman" or NULL. */
static const char *engine_kind(const char *prog)
{
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    if (strcmp(base, "docker") == 0 || strcmp(base, "podman") == 0)
        return base;
    return NULL;
}

static void add_gpus(words_t *a, const config_container_t *k, bool docker)
{
    const char *g = k->gpus ? k->gpus : "{gpu}";
    if (strcmp(g, "none") == 0)
        return;
    char buf[160];
    if (docker) {
        if (strcmp(g, "all") == 0)
            snprintf(buf, sizeof buf, "all");
        else
            snprintf(buf, sizeof buf, "\"device=%s\"", g);
        add2(a, "--gpus", buf);
        return;
    }
    /* podman: CDI names, one --device per GPU */
    const char *p = g;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof buf, "nvidia.com/gpu=%.*s", (int)l, p);
        add2(a, "--device", buf);
        p = e ? e + 1 : p + l;
    }
}

/* The cmd of a container: block. */
static int build_block_cmd(const char *model, config_container_t *k, char ***cmd_out, size_t *n_out)
{
    words_t a = {calloc(ARGV_MAX, sizeof(char *)), 0, false};
    if (!a.w)
        return -1;
    bool docker = strcmp(engine_kind(k->engine), "docker") == 0;
    char label[MODEL_NAME_MAX + 32];
    add2(&a, k->engine, "run");
    add(&a, "--rm");
    if (!docker)
        add(&a, "--replace");
    add2(&a, "--name", k->name);
    add2(&a, "--label", "vramd.owner={owner}");
    snprintf(label, sizeof label, "vramd.model=%s", model);
    add2(&a, "--label", label);
    if (k->cgroup_parent == 1 || (k->cgroup_parent == -1 && !docker))
        add(&a, "--cgroup-parent={cgroup}");
    add_env(&a, "VRAMD_MODEL", model);
    add_env(&a, "PORT", "{port}");
    if (!k->gpus || strcmp(k->gpus, "none") != 0)
        add_env(&a, "CUDA_VISIBLE_DEVICES", k->gpus && strcmp(k->gpus, "all") != 0 ? k->gpus : "{gpu}");
    for (size_t i = 0; i < k->n_env; i++)
        add_env(&a, k->env[i].key, k->env[i].value);
    for (size_t i = 0; i < k->n_ports; i++)
        add2(&a, "-p", k->ports[i]);
    if (k->network)
        add2(&a, "--network", k->network);
    for (size_t i = 0; i < k->n_volumes; i++)
        add2(&a, "-v", k->volumes[i]);
    add_gpus(&a, k, docker);
    for (size_t i = 0; i < k->n_args; i++)
        add(&a, k->args[i]);
    add(&a, k->image);
    for (size_t i = 0; i < k->n_command; i++)
        add(&a, k->command[i]);
    if (a.failed) {
        cfg_free_argv(a.w, a.n);
        return -1;
    }
    *cmd_out = a.w;
    *n_out = a.n;
    return 0;
}

/* A cmd that is `ENGINE run ...`: note the container and its name; add --name and the owner
 * label after `run` when missing. */
static int adopt_run_cmd(model_config_t *m)
{
    config_container_t *k = &m->container;
    const char *name = NULL;
    bool has_owner = false, has_parent = false;
    for (size_t i = 2; i < m->n_cmd; i++) {
        /* the first --name is run's: one after the image is the server's own flag */
        if (!name && strcmp(m->cmd[i], "--name") == 0 && i + 1 < m->n_cmd)
            name = m->cmd[i + 1];
        else if (!name && strncmp(m->cmd[i], "--name=", 7) == 0)
            name = m->cmd[i] + 7;
        has_owner = has_owner || strstr(m->cmd[i], "vramd.owner=") != NULL;
        has_parent = has_parent || strncmp(m->cmd[i], "--cgroup-parent", 15) == 0;
    }
    /* podman's processes go under the instance's cgroup, as with a container: block */
    bool add_parent = !has_parent && strcmp(engine_kind(m->cmd[0]), "podman") == 0;
    size_t extra = (name ? 0 : 2) + (has_owner ? 0 : 2) + (add_parent ? 1 : 0);
    if (m->n_cmd + extra + 1 > ARGV_MAX)
        return -1;
    char **cmd = calloc(m->n_cmd + extra + 1, sizeof *cmd);
    if (!cmd)
        return -1;
    size_t n = 0;
    cmd[n++] = m->cmd[0];
    cmd[n++] = m->cmd[1];
    if (!name) {
        cmd[n++] = strdup("--name");
        cmd[n++] = strdup("vramd-{name}");
    }
    if (!has_owner) {
        cmd[n++] = strdup("--label");
        cmd[n++] = strdup("vramd.owner={owner}");
    }
    if (add_parent)
        cmd[n++] = strdup("--cgroup-parent={cgroup}");
    for (size_t i = 2; i < m->n_cmd; i++)
        cmd[n++] = m->cmd[i];
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok = ok && cmd[i];
    k->engine = strdup(m->cmd[0]);
    k->name = strdup(name ? name : "vramd-{name}");
    if (!ok || !k->engine || !k->name) {
        for (size_t i = 2; i < 2 + extra; i++)
            free(cmd[i]);
        free(cmd);
        return -1;
    }
    free(m->cmd); /* the words moved to cmd */
    m->cmd = cmd;
    m->n_cmd = n;
    k->set = true;
    k->from_cmd = true;
    return 0;
}

int cfg_container_finish(model_config_t *m, char *why, size_t whylen)
{
    config_container_t *k = &m->container;
    if (k->set && !k->from_cmd) {
        if (m->cmd || m->url) {
            snprintf(why, whylen, "container and %s cannot both be set (container: builds the command)",
                     m->cmd ? "cmd" : "url");
            return -1;
        }
        if (!k->engine || !k->image) {
            snprintf(why, whylen, "container needs engine (podman or docker) and image");
            return -1;
        }
        if (!k->name && !(k->name = strdup("vramd-{name}"))) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        if (build_block_cmd(m->name, k, &m->cmd, &m->n_cmd) != 0) {
            snprintf(why, whylen, "container: the command is too long (at most %d words)", ARGV_MAX);
            return -1;
        }
        return 0;
    }
    if (!k->set && m->cmd && m->n_cmd >= 2 && engine_kind(m->cmd[0]) && strcmp(m->cmd[1], "run") == 0 &&
        adopt_run_cmd(m) != 0) {
        snprintf(why, whylen, "cmd: the command is too long (at most %d words)", ARGV_MAX);
        return -1;
    }
    return 0;
}
