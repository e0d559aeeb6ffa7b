/*
 * cli_common: the helpers every part of vramctl shares and that call nothing else in
 * src/cli: the stop flag, usage errors, option values and durations, the global options
 * (--url, --token, --token-file, --json, --timeout) and their defaults from the
 * environment, a command's line parsed by its table of options (cli_parse_command), and
 * percent-encoding. Declared in cli.h. The lowest file of vramctl: main
 * (vramctl.c) calls the commands (cli_status.c, cli_admin.c, cli_jobs.c), which call
 * cli_call.c, which calls cli_http.c; any of them may call this file, and it calls none.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/units.h"

volatile sig_atomic_t g_cli_stop = 0;

int cli_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vramctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (command)
        fprintf(stderr, "\n(see vramctl %s --help)\n", command);
    else
        fputs("\n(see vramctl --help)\n", stderr);
    return CLI_EXIT_USAGE;
}

const char *cli_option_value(int argc, char **argv, int *i, const char *name, bool *bad)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *bad = true;
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

/* argv[*i] as one of c's options: *matched, and CLI_OK or the exit code of its error. */
static int command_option(const cli_command_line_t *c, int argc, char **argv, int *i, bool *matched)
{
    bool bad = false;
    for (size_t k = 0; k < c->n_options; k++) {
        const cli_option_t *op = &c->options[k];
        if (!op->value && !op->parse) { /* a flag */
            if (strcmp(argv[*i], op->name) != 0 && !(op->alias && strcmp(argv[*i], op->alias) == 0))
                continue;
            *op->flag = true;
            *matched = true;
            return CLI_OK;
        }
        const char *v = cli_option_value(argc, argv, i, op->name, &bad);
        if (!v && op->alias)
            v = cli_option_value(argc, argv, i, op->alias, &bad);
        if (!v)
            continue;
        *matched = true;
        if (op->value)
            *op->value = v;
        if (op->flag)
            *op->flag = true;
        return op->parse ? op->parse(c->ctx, v) : CLI_OK;
    }
    return bad ? cli_usage_error(c->help, "%s needs a value", argv[*i]) : CLI_OK;
}

int cli_parse_command(cli_opts_t *o, int argc, char **argv, cli_command_line_t *c)
{
    c->n_args = 0;
    for (int i = 1; i < argc; i++) {
        bool matched = false;
        int rc = command_option(c, argc, argv, &i, &matched);
        if (rc != CLI_OK)
            return rc;
        if (matched)
            continue;
        int g = cli_global_option(o, argc, argv, &i);
        if (g < 0)
            return CLI_EXIT_USAGE;
        if (g > 0)
            continue;
        const char *a = argv[i];
        if (a[0] == '-' && (a[1] != '\0' || c->max_args == 0))
            return cli_usage_error(c->help, "%s: unknown option %s", c->what, a);
        if (c->n_args >= c->max_args)
            return cli_usage_error(c->help, "%s: unexpected argument \"%s\"", c->what, a);
        c->args[c->n_args++] = a;
    }
    return CLI_OK;
}

int cli_parse_duration(const char *command, const char *option, const char *value, uint64_t *ms)
{
    if (units_parse_duration_ms(value, ms) != 0) {
        cli_usage_error(command, "%s: expected a duration like 30s, 10m or 250ms, got \"%s\"", option, value);
        return -1;
    }
    return 0;
}

static int read_token_file(cli_opts_t *o, const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vramctl: %s %s: %s\n", what, path, strerror(errno));
        return -1;
    }
    size_t n = fread(o->token, 1, sizeof o->token - 1, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    if (more) {
        fprintf(stderr, "vramctl: %s %s: longer than %d bytes\n", what, path, CLI_MAX_TOKEN - 1);
        return -1;
    }
    o->token[n] = '\0';
    while (n > 0 && isspace((unsigned char)o->token[n - 1]))
        o->token[--n] = '\0';
    return 0;
}

static int set_token(cli_opts_t *o, const char *token)
{
    if (strlen(token) >= sizeof o->token) {
        fprintf(stderr, "vramctl: the token is longer than %d bytes\n", CLI_MAX_TOKEN - 1);
        return -1;
    }
    snprintf(o->token, sizeof o->token, "%s", token);
    return 0;
}

int cli_global_option(cli_opts_t *o, int argc, char **argv, int *i)
{
    bool bad = false;
    const char *a = argv[*i];
    const char *v;
    if (strcmp(a, "--json") == 0) {
        o->json = true;
        return 1;
    }
    if ((v = cli_option_value(argc, argv, i, "--url", &bad))) {
        if (o->n_urls >= CLI_MAX_URLS) {
            cli_usage_error(NULL, "--url given more than %d times", CLI_MAX_URLS);
            return -1;
        }
        o->urls[o->n_urls++] = v;
        o->url = v;
        return 1;
    }
    if ((v = cli_option_value(argc, argv, i, "--token-file", &bad)))
        return read_token_file(o, v, "--token-file") == 0 ? 1 : -1;
    if ((v = cli_option_value(argc, argv, i, "--token", &bad)))
        return set_token(o, v) == 0 ? 1 : -1;
    if ((v = cli_option_value(argc, argv, i, "--timeout", &bad))) {
        if (cli_parse_duration(NULL, "--timeout", v, &o->timeout_ms) != 0)
            return -1;
        if (o->timeout_ms == 0) {
            cli_usage_error(NULL, "--timeout must be more than 0");
            return -1;
        }
        o->timeout_set = true;
        return 1;
    }
    if (bad) {
        cli_usage_error(NULL, "%s needs a value", a);
        return -1;
    }
    return 0;
}

int cli_url_escape(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~';
        if (n + (plain ? 1 : 3) + 1 > cap)
            return -1;
        if (plain) {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    if (cap == 0)
        return -1;
    out[n] = '\0';
    return 0;
}

int cli_opts_init(cli_opts_t *o)
{
    const char *env_url = getenv("VRAMD_URL");
    o->url = env_url && env_url[0] ? env_url : CLI_DEFAULT_URL;
    o->n_urls = 0;
    o->timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    const char *no_color = getenv("NO_COLOR");
    o->color = isatty(STDOUT_FILENO) && !(no_color && no_color[0]);
    const char *env_token = getenv("VRAMD_TOKEN");
    const char *env_token_file = getenv("VRAMD_TOKEN_FILE");
    if (env_token && env_token[0]) {
        if (set_token(o, env_token) != 0)
            return -1;
    } else if (env_token_file && env_token_file[0] && read_token_file(o, env_token_file, "VRAMD_TOKEN_FILE") != 0) {
        return -1;
    }
    return 0;
}
