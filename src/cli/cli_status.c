/*
 * cli_status: `vramctl status` (one view of GET /v1/status) and `vramctl top` (the same
 * view refreshed in a terminal).
 *
 * top on a terminal: alternate screen, cursor hidden, keys read without echo (termios,
 * ICANON and ECHO off); `q` or Ctrl-C (SIGINT), SIGTERM and SIGHUP end it, and the
 * terminal is restored on every way out (one restore function, also run after a signal,
 * since the handlers only set a flag). Each frame is rendered into memory first and
 * written with one write, so the screen does not flicker. When vramd cannot be reached the
 * frame says so and top keeps trying.
 * With -n N the last frame is printed again on the normal screen after the terminal is
 * given back, so that it stays visible.
 * top into a pipe or file: one frame per interval, plain text, no escape codes; it stops
 * (exit 3) when vramd cannot be reached.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/time.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_render.h"

#define FRAME_MAX (4u << 20)
#define DEFAULT_EVENTS 5

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int terminal_width(void)
{
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
        return ws.ws_col;
    const char *cols = getenv("COLUMNS");
    long n = cols ? strtol(cols, NULL, 10) : 0;
    if (n >= 40 && n <= 1000)
        return (int)n;
    return 100;
}

typedef struct view_args {
    const char *command; /* status or top */
    int events;
    uint64_t interval_ms;
    long iterations; /* top -n; 0 = until quit */
} view_args_t;

static int view_events(void *ctx, const char *v)
{
    view_args_t *va = ctx;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 0 || n > 100)
        return cli_usage_error(va->command, "--events: expected a number 0-100, got \"%s\"", v);
    va->events = (int)n;
    return CLI_OK;
}

static int view_interval(void *ctx, const char *v)
{
    view_args_t *va = ctx;
    if (cli_parse_duration(va->command, "--interval", v, &va->interval_ms) != 0)
        return CLI_EXIT_USAGE;
    if (va->interval_ms < 100)
        return cli_usage_error(va->command, "--interval: at least 100ms");
    return CLI_OK;
}

static int view_iterations(void *ctx, const char *v)
{
    view_args_t *va = ctx;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 1)
        return cli_usage_error(va->command, "-n: expected a number of refreshes (1 or more), got \"%s\"", v);
    va->iterations = n;
    return CLI_OK;
}

static int parse_view_args(cli_opts_t *o, int argc, char **argv, view_args_t *va, bool top)
{
    va->command = argv[0];
    va->events = DEFAULT_EVENTS;
    va->interval_ms = 1000;
    va->iterations = 0;
    static const cli_option_t opts[] = {
        {.name = "--events", .parse = view_events},
        {.name = "--interval", .parse = view_interval}, /* top's alone, as the next */
        {.name = "-n", .alias = "--iterations", .parse = view_iterations},
    };
    cli_command_line_t c = {.help = argv[0], .what = argv[0], .options = opts, .n_options = top ? 3 : 1, .ctx = va};
    return cli_parse_command(o, argc, argv, &c);
}

/* Renders one view into frame. 0, or the exit code of a failed fetch (message in msg). */
static int render_view(cli_opts_t *o, const view_args_t *va, bool color, buf_t *frame, char *msg, size_t msgcap)
{
    cli_response_t resp;
    int rc = cli_call_quiet(o, "GET", "/v1/status", &resp, msg, msgcap);
    if (rc)
        return rc;
    cJSON *j = cJSON_ParseWithLength(resp.body, resp.body_len);
    cli_response_free(&resp);
    if (!j) {
        snprintf(msg, msgcap, "vramd's /v1/status answer is not JSON");
        return CLI_EXIT_ERROR;
    }
    cli_view_opts_t v = {.color = color, .width = terminal_width(), .url = o->url, .wall_ms = wall_ms(),
                         .max_events = va->events};
    cli_render_status(frame, j, &v);
    cJSON_Delete(j);
    return CLI_OK;
}

int cli_cmd_status(cli_opts_t *o, int argc, char **argv)
{
    view_args_t va;
    int rc = parse_view_args(o, argc, argv, &va, false);
    if (rc)
        return rc;
    if (o->n_urls > 1)
        return cli_status_fleet(o, o->color, terminal_width());
    if (o->json) {
        cli_response_t resp;
        rc = cli_call(o, "GET", "/v1/status", NULL, &resp);
        if (rc)
            return rc;
        cli_print_body_json(&resp);
        cli_response_free(&resp);
        return CLI_OK;
    }
    buf_t frame;
    buf_init(&frame, FRAME_MAX);
    char msg[1024];
    rc = render_view(o, &va, o->color, &frame, msg, sizeof msg);
    if (rc)
        fprintf(stderr, "vramctl: %s\n", msg);
    else
        fwrite(frame.data, 1, frame.len, stdout);
    buf_free(&frame);
    return rc;
}

/* --- top ------------------------------------------------------------------------------ */

static volatile sig_atomic_t g_resized = 0;
static struct termios g_saved_termios;
static bool g_termios_saved = false;
static bool g_screen_taken = false;
static bool g_read_keys = false; /* stdin is the terminal, in cbreak mode */

static void on_stop_signal(int sig)
{
    (void)sig;
    g_cli_stop = 1;
}

static void on_winch(int sig)
{
    (void)sig;
    g_resized = 1;
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void terminal_restore(void)
{
    if (g_screen_taken) {
        static const char leave[] = "\x1b[0m\x1b[?25h\x1b[?1049l";
        write_all(leave, sizeof leave - 1);
        g_screen_taken = false;
    }
    if (g_termios_saved) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
        g_termios_saved = false;
    }
}

static void terminal_take(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: poll() returns EINTR at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
        g_termios_saved = true;
        g_read_keys = true;
        struct termios raw = g_saved_termios;
        raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    static const char enter[] = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
    write_all(enter, sizeof enter - 1);
    g_screen_taken = true;
}

/* Writes a frame at the top of the screen: each line cleared to its end, then the rest. */
static int paint(const buf_t *frame)
{
    buf_t screen;
    buf_init(&screen, FRAME_MAX * 2);
    int rc = buf_append_str(&screen, "\x1b[H");
    const char *p = frame->data ? frame->data : "";
    const char *end = p + frame->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        rc |= buf_append(&screen, p, n);
        rc |= buf_append_str(&screen, nl ? "\x1b[K\n" : "\x1b[K");
        p += n + (nl ? 1 : 0);
    }
    rc |= buf_append_str(&screen, "\x1b[J");
    write_all(screen.data, screen.len);
    buf_free(&screen);
    return rc;
}

/* Waits up to ms for a key; returns true when the user asked to quit. */
static bool wait_for_quit(uint64_t ms)
{
    struct timeval start, now;
    gettimeofday(&start, NULL);
    for (;;) {
        if (g_cli_stop)
            return true;
        gettimeofday(&now, NULL);
        int64_t elapsed = (int64_t)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_usec - start.tv_usec) / 1000;
        if (elapsed >= (int64_t)ms || g_resized)
            return false;
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = poll(&pfd, g_read_keys ? 1 : 0, (int)((int64_t)ms - elapsed));
        if (n > 0 && (pfd.revents & POLLIN)) {
            char keys[64];
            ssize_t got = read(STDIN_FILENO, keys, sizeof keys);
            if (got == 0)
                g_read_keys = false; /* stdin closed: no more keys */
            for (ssize_t k = 0; k < got; k++)
                if (keys[k] == 'q' || keys[k] == 'Q' || keys[k] == 3 /* Ctrl-C without ISIG */)
                    return true;
        } else if (n > 0) {
            g_read_keys = false; /* POLLHUP/POLLERR: keep refreshing, stop reading keys */
        }
    }
}

static int top_tty(cli_opts_t *o, const view_args_t *va)
{
    buf_t frame;
    buf_init(&frame, FRAME_MAX);
    terminal_take();
    bool counted_out = false;
    for (long n = 1;; n++) {
        g_resized = 0;
        buf_reset(&frame);
        char msg[1024];
        if (render_view(o, va, o->color, &frame, msg, sizeof msg) != 0) {
            buf_reset(&frame);
            buf_printf(&frame, "vramctl top: %s\n\nretrying every %llums; q quits\n", msg,
                       (unsigned long long)va->interval_ms);
        }
        paint(&frame);
        if (va->iterations && n >= va->iterations) {
            counted_out = true;
            break;
        }
        if (g_cli_stop || wait_for_quit(va->interval_ms))
            break;
    }
    terminal_restore();
    if (counted_out) /* top -n N: the last frame stays on the normal screen */
        write_all(frame.data, frame.len);
    buf_free(&frame);
    return CLI_OK;
}

static int top_plain(cli_opts_t *o, const view_args_t *va)
{
    buf_t frame;
    buf_init(&frame, FRAME_MAX);
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    int rc = CLI_OK;
    for (long n = 1;; n++) {
        buf_reset(&frame);
        char msg[1024];
        rc = render_view(o, va, false, &frame, msg, sizeof msg);
        if (rc) {
            fprintf(stderr, "vramctl: %s\n", msg);
            break;
        }
        fwrite(frame.data, 1, frame.len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        if (g_cli_stop || (va->iterations && n >= va->iterations))
            break;
        struct timespec pause = {.tv_sec = (time_t)(va->interval_ms / 1000),
                                 .tv_nsec = (long)(va->interval_ms % 1000) * 1000000};
        if (nanosleep(&pause, NULL) != 0 && g_cli_stop)
            break;
    }
    buf_free(&frame);
    return rc;
}

int cli_cmd_top(cli_opts_t *o, int argc, char **argv)
{
    view_args_t va;
    int rc = parse_view_args(o, argc, argv, &va, true);
    if (rc)
        return rc;
    if (o->json)
        return cli_usage_error(argv[0], "top has no --json (use vramctl status --json)");
    if (isatty(STDOUT_FILENO))
        return top_tty(o, &va);
    return top_plain(o, &va);
}
