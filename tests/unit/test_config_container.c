/*
 * test_config_container: a model's `container:` block, `stop_cmd:` and the `cgroup:`
 * section (src/config/container_keys.c, top_keys.c, check.c).
 *
 * Covers: the cmd a podman block builds, word for word (--replace, name, owner label,
 * --cgroup-parent placeholder, env, ports, network, volumes, CDI GPU devices, args, image,
 * command); docker's (no --replace, no --cgroup-parent, --gpus); a plain `podman run` cmd
 * adopted (--name and the owner label added; a given --name kept); stop_cmd; the errors:
 * container with cmd or url, a block without image, a bad engine, bad gpus; cgroup.mode
 * and cgroup.path values and errors.
 * Run: make build/tests/test_config_container && build/tests/test_config_container.
 */

#include "config_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model's cmd joined with single spaces. */
static void joined(const model_config_t *m, char *out, size_t outlen)
{
    out[0] = '\0';
    for (size_t i = 0; i < m->n_cmd; i++) {
        strncat(out, m->cmd[i], outlen - strlen(out) - 1);
        if (i + 1 < m->n_cmd)
            strncat(out, " ", outlen - strlen(out) - 1);
    }
}

static void test_podman_block(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  t:\n"
                           "    container:\n"
                           "      engine: podman\n"
                           "      image: trellis2:latest\n"
                           "      ports: [\"{port}:8000\"]\n"
                           "      network: bridge\n"
                           "      volumes: [/srv/w:/w:ro]\n"
                           "      env: { HF_HOME: /w }\n"
                           "      args: [--shm-size, 8g]\n"
                           "      command: [python3, serve.py]\n");
    const model_config_t *m = &c->models[0];
    char cmd[4096];
    joined(m, cmd, sizeof cmd);
    assert_string_equal(cmd, "podman run --rm --replace --name vramd-{name} --label vramd.owner={owner} "
                             "--label vramd.model=t --cgroup-parent={cgroup} -e VRAMD_MODEL=t -e PORT={port} "
                             "-e CUDA_VISIBLE_DEVICES={gpu} -e HF_HOME=/w -p {port}:8000 --network bridge "
                             "-v /srv/w:/w:ro --device nvidia.com/gpu={gpu} --shm-size 8g trellis2:latest "
                             "python3 serve.py");
    assert_true(m->container.set);
    assert_false(m->container.from_cmd);
    assert_string_equal(m->container.engine, "podman");
    assert_string_equal(m->container.name, "vramd-{name}");
    config_unref(c);
}

static void test_docker_block_and_gpus(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  t:\n"
                           "    container: { engine: docker, image: img, name: my-t, gpus: \"0,1\" }\n"
                           "  n:\n"
                           "    container: { engine: podman, image: img, gpus: none, cgroup_parent: false }\n"
                           "  a:\n"
                           "    container: { engine: podman, image: img, gpus: all }\n");
    char cmd[4096];
    joined(&c->models[0], cmd, sizeof cmd);
    assert_string_equal(cmd, "docker run --rm --name my-t --label vramd.owner={owner} --label vramd.model=t "
                             "-e VRAMD_MODEL=t -e PORT={port} -e CUDA_VISIBLE_DEVICES=0,1 "
                             "--gpus \"device=0,1\" img");
    joined(&c->models[1], cmd, sizeof cmd);
    assert_string_equal(cmd, "podman run --rm --replace --name vramd-{name} --label vramd.owner={owner} "
                             "--label vramd.model=n -e VRAMD_MODEL=n -e PORT={port} img");
    joined(&c->models[2], cmd, sizeof cmd);
    assert_string_equal(cmd, "podman run --rm --replace --name vramd-{name} --label vramd.owner={owner} "
                             "--label vramd.model=a --cgroup-parent={cgroup} -e VRAMD_MODEL=a -e PORT={port} "
                             "-e CUDA_VISIBLE_DEVICES={gpu} --device nvidia.com/gpu=all img");
    config_unref(c);
}

static void test_run_cmd_adopted(void **state)
{
    (void)state;
    config_t *c = parse_ok("models:\n"
                           "  a:\n"
                           "    cmd: [docker, run, -p, \"{port}:80\", nginx]\n"
                           "  b:\n"
                           "    cmd: [/usr/bin/podman, run, --name, mine, img]\n"
                           "    stop_cmd: [podman, stop, -t, \"10\", mine]\n"
                           "  c:\n"
                           "    cmd: [docker, ps]\n");
    char cmd[4096];
    joined(&c->models[0], cmd, sizeof cmd);
    assert_string_equal(cmd, "docker run --name vramd-{name} --label vramd.owner={owner} -p {port}:80 nginx");
    assert_true(c->models[0].container.set);
    assert_true(c->models[0].container.from_cmd);
    assert_string_equal(c->models[0].container.name, "vramd-{name}");
    joined(&c->models[1], cmd, sizeof cmd);
    assert_string_equal(cmd, "/usr/bin/podman run --label vramd.owner={owner} --cgroup-parent={cgroup} --name mine img");
    assert_string_equal(c->models[1].container.name, "mine");
    assert_int_equal(c->models[1].n_stop_cmd, 5);
    assert_string_equal(c->models[1].stop_cmd[4], "mine");
    assert_false(c->models[2].container.set); /* not `run`: a plain command */
    config_unref(c);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("models:\n  a:\n    cmd: [x]\n    container: { engine: podman, image: i }\n",
                 "test.yaml:4:16: models.a.container: container and cmd cannot both be set "
                 "(container: builds the command)");
    expect_error("models:\n  a:\n    container: { engine: podman }\n",
                 "test.yaml:3:16: models.a.container: container needs engine (podman or docker) and image");
    expect_error("models:\n  a:\n    container: { engine: lxc, image: i }\n",
                 "test.yaml:3:26: models.a.container.engine: expected podman or docker, got \"lxc\"");
    expect_error("models:\n  a:\n    container: { engine: podman, image: i, gpus: some }\n",
                 "test.yaml:3:50: models.a.container.gpus: expected all, none or GPU indexes like 0,1, got "
                 "\"some\"");
    expect_error("models:\n  a:\n    cmd: [x]\n    stop_cmd: []\n",
                 "test.yaml:4:15: models.a.stop_cmd: expected a list of words like [python3, serve.py], got an "
                 "empty list");
}

static void test_cgroup_section(void **state)
{
    (void)state;
    config_t *c = parse_ok("models: {a: {cmd: [x]}}\n");
    assert_string_equal(c->cgroup.mode, "auto");
    assert_null(c->cgroup.path);
    config_unref(c);
    c = parse_ok("cgroup: { mode: v1, path: /sys/fs/cgroup/pids/vramd }\nmodels: {a: {cmd: [x]}}\n");
    assert_string_equal(c->cgroup.mode, "v1");
    assert_string_equal(c->cgroup.path, "/sys/fs/cgroup/pids/vramd");
    config_unref(c);
    expect_error("cgroup: { mode: v3 }\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:17: cgroup.mode: expected one of auto, v2, v1, subreaper, off, got \"v3\"");
    expect_error("cgroup: { path: relative/dir }\nmodels: {a: {cmd: [x]}}\n",
                 "test.yaml:1:17: cgroup.path: expected auto or an absolute directory in a cgroup mount, got "
                 "\"relative/dir\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_podman_block),
        cmocka_unit_test(test_docker_block_and_gpus),
        cmocka_unit_test(test_run_cmd_adopted),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cgroup_section),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
