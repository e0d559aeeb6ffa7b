/*
 * cli: what the parts of vramctl (the command-line client of vramd) share: the global
 * options, the exit codes, and the helpers every command uses to talk to vramd and to
 * report what happened.
 *
 * Exit codes (scripts rely on them; docs/vramctl.md lists them too):
 *   0  ok
 *   1  vramd answered an error (its code and message are printed), or a local check failed
 *      (check-config)
 *   2  usage error (unknown command or option, missing or bad argument)
 *   3  cannot reach vramd (connection refused, name not resolved, no answer in --timeout)
 *   4  the job ended failed or cancelled (jobs wait, jobs submit --wait)
 *   5  timed out waiting (jobs wait --timeout)
 *
 * Return convention: a command returns one of these exit codes; helpers that can fail
 * return 0 on success and an exit code (> 0) after printing why on stderr.
 */
#ifndef VRAMD_CLI_CLI_H
#define VRAMD_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

enum cli_exit {
    CLI_OK = 0,
    CLI_EXIT_ERROR = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_UNREACHABLE = 3,
    CLI_EXIT_JOB_FAILED = 4,
    CLI_EXIT_TIMEOUT = 5,
};

#define CLI_DEFAULT_URL "http://127.0.0.1:8800"
#define CLI_DEFAULT_TIMEOUT_MS 10000
#define CLI_MAX_TOKEN 4096

#define CLI_MAX_URLS 64 /* --url given more than once (status: several hosts) */

typedef struct cli_opts {
    const char *url;      /* --url (the last one given), $VRAMD_URL, or CLI_DEFAULT_URL */
    const char *urls[CLI_MAX_URLS]; /* every --url given, in order (status shows them all) */
    size_t n_urls;
    char token[CLI_MAX_TOKEN]; /* --token, --token-file, $VRAMD_TOKEN, $VRAMD_TOKEN_FILE; "" = none */
    bool json;            /* --json: print vramd's JSON instead of a table or a line */
    uint64_t timeout_ms;  /* --timeout: bound on one HTTP exchange with vramd */
    bool timeout_set;     /* --timeout was given (commands that wait long pick their own default) */
    bool color;           /* stdout is a TTY and NO_COLOR is unset */
} cli_opts_t;

/* Set by SIGINT/SIGTERM handlers that `top` installs; blocking I/O gives up when it is set.
 * Defined in cli_common.c. */
extern volatile sig_atomic_t g_cli_stop;

/* The response of one HTTP exchange (cli_http.c). */
typedef struct cli_response {
    int status;
    char content_type[128];
    char *body; /* NUL-terminated; NULL when the body went to a sink */
    size_t body_len;
} cli_response_t;

/*
 * cli_common.c: the helpers below call nothing else in src/cli, so any file may use them.
 *
 * cli_opts_init fills o with the defaults: --url from $VRAMD_URL, the token from
 * $VRAMD_TOKEN or $VRAMD_TOKEN_FILE, colour when stdout is a TTY and NO_COLOR is unset;
 * -1 after printing why (a token too long, a token file that cannot be read).
 */
int cli_opts_init(cli_opts_t *o);
/*
 * Global options. cli_global_option looks at argv[*i]; when it is a global option it
 * consumes it (and its value, advancing *i) and returns 1; 0 when it is not one; -1 after
 * printing a usage error (a missing or bad value).
 */
int cli_global_option(cli_opts_t *o, int argc, char **argv, int *i);
/* "--name=value" or "--name value": returns the value and advances *i, or NULL (not this
 * option). *bad is set when the option matched but its value is missing. */
const char *cli_option_value(int argc, char **argv, int *i, const char *name, bool *bad);
int cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * A command's own options, one row each (cli_parse_command). A flag when neither value nor
 * parse is set (*flag = true); else the option takes a value ("--name v" or "--name=v"):
 * stored in *value, flag (when set) made true, and parse (when set) called with it, which
 * returns 0 or an exit code after printing why.
 */
typedef struct cli_option {
    const char *name;  /* "--lines" */
    const char *alias; /* "-n", or NULL */
    bool *flag;
    const char **value;
    int (*parse)(void *ctx, const char *value);
} cli_option_t;
/* A command's line: its options, its positional arguments (at most max_args, into args[];
 * n_args says how many came), how its usage errors name it. */
typedef struct cli_command_line {
    const char *help; /* the command "(see vramctl HELP --help)" names */
    const char *what; /* how messages name it: "logs", "jobs list" */
    const cli_option_t *options;
    size_t n_options;
    void *ctx; /* for parse */
    const char **args;
    size_t max_args;
    size_t n_args;
} cli_command_line_t;
/*
 * Parses argv[1..] into the command's options, the global options (cli_global_option) and
 * its arguments, in that order for each word: CLI_OK, or CLI_EXIT_USAGE (or parse's code)
 * after the message: an option without its value, an unknown option (a word starting with
 * '-'; "-" alone is an argument when the command takes any), an argument past max_args.
 */
int cli_parse_command(cli_opts_t *o, int argc, char **argv, cli_command_line_t *c);
/* Parse "10m"/"30s"/"250ms" (-1 with a usage message naming the option on a bad value). */
int cli_parse_duration(const char *command, const char *option, const char *value, uint64_t *ms);
/* Percent-encode s for one path segment or query value into out (cap bytes); -1 if too long. */
int cli_url_escape(const char *s, char *out, size_t cap);

/*
 * One request to vramd and its error handling: on a transport failure prints the
 * "cannot connect" message and returns CLI_EXIT_UNREACHABLE; on a non-2xx answer prints
 * "vramctl: vramd answered STATUS CODE: MESSAGE" (and, with --json, the error JSON on
 * stdout) and returns CLI_EXIT_ERROR; on 2xx returns CLI_OK with resp filled (free with
 * cli_response_free). After an error resp holds no body (nothing to free).
 * json_body (may be NULL) is sent as application/json.
 */
int cli_call(const cli_opts_t *o, const char *method, const char *path, const char *json_body,
             cli_response_t *resp);
/* The same, 2xx bodies streamed to sink (nothing kept in resp->body). */
int cli_call_to(const cli_opts_t *o, const char *method, const char *path, FILE *sink,
                cli_response_t *resp);
/* The same as cli_call without a body, the message going to msg instead of stderr. */
int cli_call_quiet(const cli_opts_t *o, const char *method, const char *path, cli_response_t *resp, char *msg,
                   size_t msgcap);
void cli_response_free(cli_response_t *r);
/* cli_call and cli_parse_json together (the request every reading command makes): CLI_OK
 * with *doc the parsed answer (free with cJSON_Delete), else the exit code after the
 * message (a non-JSON answer: CLI_EXIT_ERROR) and *doc NULL. The response is freed. */
int cli_call_json(const cli_opts_t *o, const char *method, const char *path, const char *json_body, cJSON **doc);
/* Parse a JSON body; prints a message and returns NULL when it is not JSON. */
cJSON *cli_parse_json(const cli_response_t *r);
/* Print a JSON document pretty, with a newline, on stdout. */
void cli_print_json(const cJSON *j);
/* Print a (JSON) body pretty when it parses, else as it is. */
void cli_print_body_json(const cli_response_t *r);

/* Commands (each returns an exit code). argv[0] is the command name. */
int cli_cmd_status(cli_opts_t *o, int argc, char **argv);
/* status with several --url (cli_fleet.c): every host together; 3 when one is unreachable. */
int cli_status_fleet(cli_opts_t *o, bool color, int width);
int cli_cmd_top(cli_opts_t *o, int argc, char **argv);
int cli_cmd_ps(cli_opts_t *o, int argc, char **argv); /* cli_ps.c */
int cli_cmd_queue(cli_opts_t *o, int argc, char **argv); /* cli_queue.c */
int cli_cmd_logs(cli_opts_t *o, int argc, char **argv); /* cli_logs.c */
int cli_cmd_jobs(cli_opts_t *o, int argc, char **argv);
int cli_cmd_model_admin(cli_opts_t *o, int argc, char **argv); /* load | unload */
int cli_cmd_drain(cli_opts_t *o, int argc, char **argv);
int cli_cmd_reload(cli_opts_t *o, int argc, char **argv);
int cli_cmd_check_config(cli_opts_t *o, int argc, char **argv);

#endif
