/*
 * presets.h: the row type of the preset table (config/presets.c) and its one reader.
 *
 * A preset is one row of designated fields; every behaviour that differs between servers is
 * a column here, read by whoever needs it (the config loader fills a model's keys from it;
 * the request path reads `denied`; the sleep tier reads `sleep_confirm`; the warnings pass
 * reads `served_model_example` and `manages_cache`). Nothing outside presets.c tests a
 * preset's identity (PRESET_X): a new server is one row (and its test).
 *
 * A column left out of a row is NULL / 0 / false: "the preset does nothing there".
 */
#ifndef VRAMD_CONFIG_PRESETS_H
#define VRAMD_CONFIG_PRESETS_H

#include <stdbool.h>

#include "config/config.h"

/* A hook the preset fills (always POST); path NULL: the preset leaves this hook alone. */
typedef struct config_preset_hook {
    const char *path;
    const char *body; /* JSON text, may hold {served_model}, {port}, ... (workers/worker_cmds.c) */
    const char *nothing_to_do; /* text of a non-2xx answer that means "already so": done */
} config_preset_hook_t;

/* A second shape of the same server, taken when `detect` says the model's config is it
 * (llama.cpp's router mode); its columns apply after the model's keys, each only where the
 * user left the key alone (hooks not set by hand, health path still the row's, pin_model
 * not given). */
typedef struct config_preset_mode {
    const char *name;                                 /* for docs and messages: "router" */
    bool (*detect)(const model_config_t *m);          /* the model runs the server in this mode */
    const char *health;                               /* health.path, when still the row's */
    enum config_model_report report;                  /* with that health path */
    config_preset_hook_t unload, reload;              /* when not set by hand */
    const char *served_model_example;                 /* hooks name {served_model}: warn without one */
    bool pin_model;                                   /* requests reach only served_model */
} config_preset_mode_t;

typedef struct config_preset_row {
    const char *name; /* the `preset:` value */
    const char *health;
    config_preset_hook_t sleep, wake, unload, reload;
    /* GET path asked after a 2xx sleep or wake hook until the server says it is done
     * (workers/park_sleep.c): {"is_sleeping": true|false}; NULL: the 2xx is taken */
    const char *sleep_confirm;
    const char *oom_matches;   /* degrade.detect.body_matches (POSIX ERE, case-insensitive) */
    const char *env[3][2];     /* set for the worker (the model's env: overrides them) */
    /* an env variable the server's sleep routes need (set for the worker; in a container:
     * block added as -e; a warning when the sleep tier is in use without it) */
    const char *sleep_env_key, *sleep_env_value;
    const char *fraction_flag;  /* appended as FLAG {mem_fraction} when cmd lacks it */
    const char *sleep_flag;     /* cmd needs it when the sleep tier is in use (a warning) */
    const char *sleep_flag_why; /* what the server does without it */
    bool aborts_on_close;       /* aborts a request whose connection closed: memory.cancelled_hold off */
    bool prompt_hold;           /* answers at once, works later: prompt_hold on (path/prompt_hold.c) */
    unsigned upgrade;           /* CFG_UPGRADE_* bits passed through */
    enum config_model_report report; /* what its health answer says of the served model */
    enum config_stream_framing stream;
    const char *const *denied;  /* paths a client must not reach (NULL-ended; NULL: none) */
    const char *served_model_example; /* its hooks name {served_model}: warn without one, e.g. */
    bool manages_cache;         /* frees its own cache: no clear_cache warning */
    const config_preset_mode_t *mode; /* another shape of the server (NULL: none) */
    /* how many requests the server runs at once, from the model's cmd and env (its slots):
     * the model's concurrency unless set by hand; 0 or NULL: not known (left as it is) */
    unsigned (*slots)(const model_config_t *m);
} config_preset_t;

/* The row of p (the "none" row for PRESET_NONE or a value out of range). */
const config_preset_t *config_preset(enum config_preset p);
/* The mode of p that m's config is (NULL: the row as it is). */
const config_preset_mode_t *config_preset_mode(const model_config_t *m);

#endif
