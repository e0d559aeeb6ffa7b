/*
 * vramctl: the command-line client of vramd. This file holds main: the help texts, the
 * command table, and the dispatch to the commands (cli_status.c, cli_ps.c, cli_queue.c, cli_logs.c,
 * cli_admin.c,
 * cli_jobs.c);
 * the global options (which may appear anywhere on the line) and their defaults from the
 * environment are parsed by cli_common.c. Calls go one way: main -> commands -> cli_call.c
 * -> cli_http.c -> cli_common.c. Exit codes are listed in cli.h and in the help text.
 */
#include <errno.h>
#include <string.h>

#include "cli/cli.h"
#include "core/core.h"

static const char usage_text[] =
    "usage: vramctl [OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "vramctl talks to vramd, the GPU-memory gatekeeper, over its HTTP API.\n"
    "\n"
    "Commands:\n"
    "  status                 GPUs with memory bars, models, queues, recent events\n"
    "  top                    the status view, refreshed every second (q or Ctrl-C quits)\n"
    "  ps                     one line per worker instance: state, GPU, GiB, keep-alive, pid\n"
    "  queue [MODEL]          the waiting requests per GPU: position, expected start and end\n"
    "  logs MODEL             a model's recent worker output (-f follows)\n"
    "  load MODEL             load a model now (answers when it is ready)\n"
    "  unload MODEL           unload a model now (answers when its memory is back)\n"
    "  pin MODEL              load a model and keep it: never evicted nor idled out\n"
    "  unpin MODEL            back to its configured keep_alive\n"
    "  restart MODEL          graceful restart: in-flight finish, queued wait (answers when ready)\n"
    "  drain                  stop admitting, finish what runs, then vramd exits 0\n"
    "  reload                 make vramd re-read its config file (a bad one is refused)\n"
    "  jobs SUBCOMMAND        durable jobs: submit, get, wait, result, cancel, list\n"
    "  check-config FILE      validate a config file here (no daemon needed)\n"
    "\n"
    "Options (before or after the command):\n"
    "  --url URL              vramd's address (default $VRAMD_URL, else " CLI_DEFAULT_URL ");\n"
    "                         status takes it more than once: several hosts together\n"
    "  --token TOKEN          admin bearer token (default $VRAMD_TOKEN)\n"
    "  --token-file FILE      read the token from FILE (default $VRAMD_TOKEN_FILE)\n"
    "  --json                 print JSON (vramd's answer) instead of text\n"
    "  --timeout DURATION     bound on each request to vramd (default 10s; load/unload/pin/\n"
    "                         restart 5m)\n"
    "  -h, --help             this help; vramctl COMMAND --help: a command's usage, example\n"
    "  --version              vramctl's version\n"
    "\n"
    "Environment:\n"
    "  VRAMD_URL, VRAMD_TOKEN, VRAMD_TOKEN_FILE   defaults of --url, --token, --token-file\n"
    "  NO_COLOR               set and non-empty: no colours\n"
    "  COLUMNS                the width of status and top when stdout is not a terminal\n"
    "\n"
    "Example:\n"
    "  VRAMD_URL=http://gpu1:8800 vramctl status\n"
    "\n"
    "Exit codes:\n"
    "  0  ok\n"
    "  1  vramd answered an error (its code and message are printed), or the config is invalid\n"
    "  2  usage error\n"
    "  3  cannot reach vramd (not running, wrong --url, no answer within --timeout)\n"
    "  4  the job ended failed or cancelled (jobs wait, jobs submit --wait)\n"
    "  5  timed out waiting (jobs wait --timeout)\n";

static const struct command_help {
    const char *name;
    const char *text;
} command_helps[] = {
    {"status",
     "usage: vramctl status [--events N] [--json]\n"
     "\n"
     "One view of vramd: each GPU with a memory bar stacked by owner (each model's resident\n"
     "memory, requests running, foreign processes, headroom, free; GiB), the models (state,\n"
     "instances, pids, GPU, requests in flight, queue depth, oldest wait) and the last N events\n"
     "(default 5). Colours when stdout is a terminal and NO_COLOR is unset.\n"
     "--json prints GET /v1/status unchanged (pretty).\n"
     "\n"
     "Example:\n"
     "  vramctl status --events 10\n"
     "  vramctl status --json | jq '.gpus[] | {index, free_to_admit}'\n"
     "  vramctl status --url http://gpu1:8800 --url http://gpu2:8800\n"},
    {"top",
     "usage: vramctl top [--interval DURATION] [-n N] [--events N]\n"
     "\n"
     "The status view, refreshed every --interval (default 1s), full screen. q or Ctrl-C quits\n"
     "and restores the terminal. -n N: stop after N refreshes. When stdout is not a terminal,\n"
     "one frame per interval is printed, without escape codes.\n"
     "\n"
     "Example:\n"
     "  vramctl top --interval 2s\n"},
    {"ps",
     "usage: vramctl ps [--json]\n"
     "\n"
     "One line per worker instance, from GET /v1/status: MODEL, instance ID, STATE, GPU, GIB\n"
     "(measured by NVML / reserved by vramd), IN_FLIGHT requests, the model's QUEUE depth,\n"
     "KEEP_ALIVE (\"in 9m58s\" while an idle instance counts down, \"pinned\", or - while busy),\n"
     "PID. A model without instances gets one line with ID -. --json: the rows as a JSON array.\n"
     "\n"
     "Example:\n"
     "  vramctl ps --json\n"},
    {"queue",
     "usage: vramctl queue [MODEL] [--limit N] [--json]\n"
     "\n"
     "The waiting requests, from GET /v1/queue: per GPU a table of MODEL, request ID (\"job\"\n"
     "for a job's attempt unless --token shows it), POS (its place in its model's queue), WAITED,\n"
     "START IN and DONE IN (expected, from the learned load and run times), WAITING FOR (slot,\n"
     "memory, load, swap, bound); then per model how many wait and when a new request would\n"
     "start. MODEL: that model alone. --limit N: at most N requests listed per model (default\n"
     "100, at most 1000). --json: vramd's answer.\n"
     "\n"
     "Example:\n"
     "  vramctl queue trellis\n"},
    {"logs",
     "usage: vramctl logs MODEL [-n N] [-f [--for DURATION]] [--timestamps] [--json]\n"
     "\n"
     "GET /v1/models/MODEL/logs (admin token when vramd has one): the last N lines (default\n"
     "100) its workers wrote on stdout and stderr, from vramd's per-model ring\n"
     "(limits.worker_log_lines). -f: then poll every second for new lines, each printed once,\n"
     "until Ctrl-C (or --for DURATION). --timestamps: the UTC time and stream before each line.\n"
     "--json: each answer as vramd's JSON.\n"
     "\n"
     "Example:\n"
     "  vramctl logs trellis -n 50 -f --timestamps\n"},
    {"load",
     "usage: vramctl load MODEL [--json]\n"
     "\n"
     "POST /v1/models/MODEL/load (admin): start the model now, evicting idle ones if needed.\n"
     "Answers when it is ready (--timeout, default 5m). Prints \"MODEL: STATE (N instances)\".\n"
     "\n"
     "Example:\n"
     "  vramctl load trellis --timeout 10m --token-file /etc/vramd/admin-token\n"},
    {"unload",
     "usage: vramctl unload MODEL [--json]\n"
     "\n"
     "POST /v1/models/MODEL/unload (admin): stop the model's instances (or call an external\n"
     "server's unload hook). Answers when its memory is back (--timeout, default 5m).\n"
     "\n"
     "Example:\n"
     "  vramctl unload trellis\n"},
    {"pin",
     "usage: vramctl pin MODEL [--json]\n"
     "\n"
     "POST /v1/models/MODEL/pin (admin): load the model (evicting idle ones if needed) and keep\n"
     "it: never evicted for another model, never stopped by keep_alive, until unpin. Answers\n"
     "when it is ready (--timeout, default 5m). The pin survives a config reload, not a restart\n"
     "of vramd. Prints \"MODEL: STATE (N instances), pinned by admin\" (or \"by config\").\n"
     "\n"
     "Example:\n"
     "  vramctl pin sd35\n"},
    {"unpin",
     "usage: vramctl unpin MODEL [--json]\n"
     "\n"
     "POST /v1/models/MODEL/unpin (admin): the model goes back to its configured keep_alive\n"
     "(its countdown starts when idle) and may be evicted again. A model pinned by its config\n"
     "(keep_alive: forever) is refused: 409 pinned_by_config (exit 1).\n"
     "\n"
     "Example:\n"
     "  vramctl unpin sd35\n"},
    {"restart",
     "usage: vramctl restart MODEL [--json]\n"
     "\n"
     "POST /v1/models/MODEL/restart (admin): graceful restart of a supervised model. Its\n"
     "instances take no new request; requests in flight finish (then stop_timeout bounds the\n"
     "stop); requests queued meanwhile wait and are served by the new instance. Answers when\n"
     "the new instance is ready (--timeout, default 5m). An external server (url:) is refused:\n"
     "409 not_supervised.\n"
     "\n"
     "Example:\n"
     "  vramctl restart trellis\n"},
    {"drain",
     "usage: vramctl drain [--wait] [--json]\n"
     "\n"
     "POST /v1/admin/drain (admin): vramd stops admitting, finishes the requests in flight,\n"
     "then exits 0. --wait: return only once vramd has stopped answering (bounded by\n"
     "--timeout, default 2m here).\n"
     "\n"
     "Example:\n"
     "  vramctl drain --wait --timeout 5m\n"},
    {"reload",
     "usage: vramctl reload [--json]\n"
     "\n"
     "POST /v1/admin/reload (admin): vramd re-reads its config file. A bad file is refused\n"
     "with its error (exit 1) and the running config stays.\n"
     "\n"
     "Example:\n"
     "  vramctl reload   # after editing the file vramd was started with\n"},
    {"check-config",
     "usage: vramctl check-config [--strict] FILE [--json]\n"
     "\n"
     "Validate a vramd config file here, with the same parser and messages as\n"
     "`vramd --check-config` (file:line:col: key.path: problem). Exit 0 when valid, 1 when not.\n"
     "Warnings (legal but likely mistakes: a program not in PATH, no {port}, no memory:, ...)\n"
     "go to stderr and do not fail the check; --strict makes them errors (exit 1).\n"
     "\n"
     "Example:\n"
     "  vramctl check-config --strict /etc/vramd/vramd.yaml\n"},
    {"jobs",
     "usage: vramctl jobs submit MODEL [--path /p] [--method POST] [--body FILE|-]\n"
     "                          [--json-body JSON] [--header 'K: V']... [--priority 0-9]\n"
     "                          [--deadline 10m] [--wait [--wait-timeout D]] [-o FILE]\n"
     "       vramctl jobs get ID\n"
     "       vramctl jobs wait ID [--timeout 10m]\n"
     "       vramctl jobs result ID [-o FILE]\n"
     "       vramctl jobs cancel ID\n"
     "       vramctl jobs list [--state S] [--model M] [--limit N] [--cursor C]\n"
     "\n"
     "Durable jobs (POST /v1/jobs): vramd journals the request, runs it when it fits, and\n"
     "keeps the worker's answer until it is fetched or expires.\n"
     "  submit   prints the job id (--json: vramd's answer). --body sends a file's bytes\n"
     "           (- for stdin) as they are; --json-body sends a JSON document. --wait waits\n"
     "           for the end (exit as jobs wait); -o FILE also waits and saves the result.\n"
     "  get      the job's state, attempts, timestamps, GPU, error.\n"
     "  wait     polls until the job is final: exit 0 succeeded, 4 failed or cancelled,\n"
     "           5 still not final after --timeout (default 10m).\n"
     "  result   the worker's answer body, to stdout or -o FILE (exit 1 while not done).\n"
     "  cancel   cancel a queued or running job.\n"
     "  list     a table of jobs (newest first; the admin token when one is configured).\n"
     "\n"
     "Example:\n"
     "  id=$(vramctl jobs submit trellis --path /generate --json-body '{\"seed\": 1}')\n"
     "  vramctl jobs wait \"$id\" && vramctl jobs result \"$id\" -o out.glb\n"},
};

static void print_command_help(const char *name)
{
    for (size_t i = 0; i < sizeof command_helps / sizeof command_helps[0]; i++)
        if (strcmp(command_helps[i].name, name) == 0) {
            fputs(command_helps[i].text, stdout);
            fputs("\nGlobal options: --url, --token, --token-file, --json, --timeout (see vramctl --help).\n", stdout);
            return;
        }
    fputs(usage_text, stdout);
}

static bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    }
    return false;
}

static const struct command {
    const char *name;
    int (*run)(cli_opts_t *o, int argc, char **argv);
} commands[] = {
    {"status", cli_cmd_status},     {"top", cli_cmd_top},       {"ps", cli_cmd_ps},
    {"queue", cli_cmd_queue},
    {"logs", cli_cmd_logs},         {"load", cli_cmd_model_admin},
    {"unload", cli_cmd_model_admin}, {"pin", cli_cmd_model_admin}, {"unpin", cli_cmd_model_admin},
    {"restart", cli_cmd_model_admin}, {"drain", cli_cmd_drain},  {"reload", cli_cmd_reload},
    {"jobs", cli_cmd_jobs},         {"check-config", cli_cmd_check_config},
};

int main(int argc, char **argv)
{
    static cli_opts_t g_opts;
    if (cli_opts_init(&g_opts) != 0)
        return CLI_EXIT_USAGE;

    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
            printf("vramctl %s\n", VRAMD_VERSION);
            return CLI_OK;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return CLI_OK;
        }
        int rc = cli_global_option(&g_opts, argc, argv, &i);
        if (rc < 0)
            return CLI_EXIT_USAGE;
        if (rc == 0)
            return cli_usage_error(NULL, "unknown option %s", argv[i]);
    }
    if (i >= argc) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[i], "help") == 0) {
        if (i + 1 < argc)
            print_command_help(argv[i + 1]);
        else
            fputs(usage_text, stdout);
        return CLI_OK;
    }
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        if (strcmp(commands[k].name, argv[i]) != 0)
            continue;
        if (wants_help(argc - i, argv + i)) {
            print_command_help(commands[k].name);
            return CLI_OK;
        }
        int rc = commands[k].run(&g_opts, argc - i, argv + i);
        if (fflush(stdout) != 0 && rc == CLI_OK) {
            fprintf(stderr, "vramctl: writing the output: %s\n", strerror(errno));
            return CLI_EXIT_ERROR;
        }
        return rc;
    }
    return cli_usage_error(NULL, "unknown command \"%s\"", argv[i]);
}
