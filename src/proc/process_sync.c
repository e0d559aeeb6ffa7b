/*
 * process_sync: run a short command to its end, synchronously, bounded in time: for what
 * must finish before vramd serves (removing the containers a previous run left). Not for
 * the loop's steady state: it blocks the calling thread up to timeout_ms.
 *
 * The child gets the environment process_env_build makes (vramd's, minus its own private
 * variables, plus env), stdin /dev/null, stdout and stderr into out (at most outlen - 1
 * bytes kept, the rest read and dropped), and a process group of its own, which is
 * SIGKILLed when the time is up. Return: 0 with *status the exit status (-1 killed by a
 * signal, -2 timed out), or -1 with err when it could not be started.
 */
#include "proc/process.h"
#include "proc/process_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static _Noreturn void sync_child(char *const argv[], char **envp, int out_w)
{
    setpgid(0, 0);
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0)
        _exit(127);
    if (close_range(3, ~0U, 0) != 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(argv[0], argv, envp);
    _exit(127);
}

int process_run_sync(char *const argv[], const config_kv_t *env, size_t n_env, uint64_t timeout_ms, char *out,
                     size_t outlen, int *status, char *err, size_t errlen)
{
    if (outlen > 0)
        out[0] = '\0';
    *status = -1;
    char **envp = process_env_build(env, n_env);
    int fds[2];
    if (!envp || pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "%s", envp ? strerror(errno) : "out of memory");
        process_env_free(envp, process_env_owned_count(env, n_env));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0)
        sync_child(argv, envp, fds[1]);
    int fork_errno = errno;
    close(fds[1]);
    process_env_free(envp, process_env_owned_count(env, n_env));
    if (pid < 0) {
        close(fds[0]);
        snprintf(err, errlen, "fork: %s", strerror(fork_errno));
        return -1;
    }
    uint64_t deadline = now_ms() + timeout_ms;
    size_t got = 0;
    bool timed_out = false;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline) {
            timed_out = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int n = poll(&pfd, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            timed_out = n == 0;
            break;
        }
        char buf[4096];
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* EOF: the command (and whoever it left holding stdout) is done */
        size_t keep = outlen > got + 1 ? outlen - got - 1 : 0;
        keep = keep < (size_t)r ? keep : (size_t)r;
        memcpy(out + got, buf, keep);
        got += keep;
        if (outlen > 0)
            out[got] = '\0';
    }
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    *status = timed_out ? -2 : WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    return 0;
}
