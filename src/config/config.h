/*
 * config: the YAML configuration file, parsed into one immutable struct.
 *
 * config_load() reads a file and returns a fully validated config_t or NULL with an error
 * message naming file:line:col and the key path, e.g.
 *   vramd.yaml:12:20: models.trellis.memory.per_request: expected a size like 12GiB, got "12 gigs"
 * Unknown keys, wrong types and bad values are errors. Nothing in a config_t changes after
 * config_load returns: a reload builds a new one and swaps it in (config_ref/unref keep the
 * old one alive while something still points into it).
 *
 * Every key of SPEC section 2 is parsed and kept here, even those that later modules use.
 * `defaults:` may hold any model key; each model starts from the built-in defaults,
 * overlaid with `defaults:`, overlaid with its own keys.
 *
 * Units: sizes are bytes (uint64_t), durations are milliseconds (uint64_t). A duration
 * of "forever" (keep_alive only) is CONFIG_FOREVER; keep_alive 0 = unload after each request.
 */
#ifndef VRAMD_CONFIG_CONFIG_H
#define VRAMD_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define CONFIG_FOREVER UINT64_MAX
#define CONFIG_ERR_MAX 16384 /* room for YDOC_ERRORS_SHOWN lines of errors */

enum config_jobs_backend { JOBS_BACKEND_SQLITE = 0, JOBS_BACKEND_POSTGRES = 1 };

typedef struct config_kv {
    char *key;
    char *value;
} config_kv_t;

typedef struct config_hook { /* an HTTP call to an external/supervised server */
    bool set;
    char *method; /* default "POST" */
    char *path;
    char *body;          /* JSON text sent with the call (Content-Type: application/json), or NULL */
    uint64_t timeout_ms; /* default 30s for unload/clear_cache/sleep, 60s for reload/wake */
    /* nothing_to_do: text in a non-2xx answer's body that means there was nothing to do (the
     * model already unloaded, already loaded): the call counts as done; NULL = none */
    char *nothing_to_do;
} config_hook_t;

/* preset: hooks, health path, route and OOM detection filled from what a server documents
 * (config/presets.c); every key set by hand overrides them. */
enum config_preset {
    PRESET_NONE = 0,
    PRESET_VLLM,
    PRESET_SGLANG,
    PRESET_COMFYUI,
    PRESET_LLAMACPP,
    PRESET_OLLAMA,
    PRESET_COUNT
};

/* How a model's server frames a streamed answer (set by its preset, config/presets.c). */
enum config_stream_framing {
    STREAM_FRAMING_NONE = 0, /* no streamed answers, or the framing is not known */
    STREAM_FRAMING_SSE,      /* text/event-stream: `data: {...}` events, OpenAI's `data: [DONE]` last */
    STREAM_FRAMING_NDJSON,   /* application/x-ndjson: one JSON object a line, `"done": true` last */
};

typedef struct config_health {
    char *path;           /* default "/health" */
    uint64_t interval_ms; /* default 5s */
    uint64_t timeout_ms;  /* default 2s */
    unsigned failures;    /* default 3 */
} config_health_t;

typedef struct config_memory {
    uint64_t resident;    /* bytes held while loaded; default 0 */
    uint64_t per_request; /* extra peak bytes per running request; default 0 */
    bool learn;           /* per_request: learn (declared value, if any, is the start) */
    /* size_field: RFC 6901 pointers into a JSON body whose product is the request's input
     * size (resolution, image count, max tokens); estimates are learned per size class */
    char *size_fields[4];
    size_t n_size_fields;
    /* cancelled_hold: how long a request whose client left after the worker had it keeps
     * its memory from being lent to the instance's next requests (the worker may still be
     * running it), counted from its dispatch (at least half of it from the let-go); auto
     * (default): twice the model's learned run time (CANCELLED_HOLD_UNLEARNED_MS before one
     * is learned); 0: off (servers that abort a request whose connection closed: the vllm,
     * sglang, llamacpp and ollama presets) */
    bool cancelled_hold_auto;
    uint64_t cancelled_hold_ms;
} config_memory_t;

typedef struct config_recycle {
    uint64_t after_requests; /* 0 = never */
    uint64_t max_growth;     /* bytes; 0 = never */
    uint64_t hang_timeout_ms; /* 0 = never */
    bool on_oom;
} config_recycle_t;

typedef struct config_detect {
    int *statuses; /* HTTP statuses that mean OOM */
    size_t n_statuses;
    char *body_matches; /* POSIX extended regex (case-insensitive), or NULL */
    char *json_path;    /* RFC 6901 pointer, or NULL */
    cJSON *json_equals; /* value the pointer must equal */
    char *header;       /* a response header whose presence means OOM, or NULL */
} config_detect_t;

typedef struct config_level {
    cJSON *set;           /* object merged into the request (JSON merge patch / form fields) */
    uint64_t per_request; /* 0 = inherit the model's */
    bool has_per_request;
} config_level_t;

enum config_degrade_when { DEGRADE_ON_OOM = 0, DEGRADE_TO_FIT = 1 };

typedef struct config_degrade {
    bool set; /* degrade: present */
    config_detect_t detect;
    config_level_t *ladder;
    size_t n_ladder;
    enum config_degrade_when when;
} config_degrade_t;

enum config_validate_kind {
    VALIDATE_NONE = 0,
    VALIDATE_GLB,
    VALIDATE_PLY,
    VALIDATE_PNG,
    VALIDATE_JSON,
    VALIDATE_CMD,
};

typedef struct config_validate {
    enum config_validate_kind kind;
    uint64_t min_bytes;
    char **cmd; /* NULL-terminated argv when kind == VALIDATE_CMD */
    size_t n_cmd;
    uint64_t timeout_ms; /* for cmd; default 30s */
    char *json_path;     /* optional: JSON pointer that must NOT equal json_equals (false success) */
    cJSON *json_equals;
} config_validate_t;

typedef struct config_retry_budget {
    unsigned percent; /* of the requests queued or running (all models) that may be retries; default 20 */
    unsigned min;     /* retries always allowed at once, whatever the percentage gives; default 3 */
} config_retry_budget_t;

/* outlier: how long an instance is ejected after broken exchanges in a row (Envoy's
 * outlier_detection): base_ejection_time x its ejections, at most max_ejection_time. */
typedef struct config_outlier {
    uint64_t base_ejection_ms; /* default 30s; 100ms..1h */
    uint64_t max_ejection_ms;  /* default 5m; base_ejection_time..1h */
} config_outlier_t;

/* container: a worker that runs in a container (config/container_keys.c builds its cmd) */
typedef struct config_container {
    bool set;          /* a container: block, or a cmd recognised as `docker|podman run ...` */
    bool from_cmd;     /* recognised in cmd (no block) */
    char *engine;      /* the engine program: podman | docker (or cmd's argv[0]) */
    char *image;
    char *name;        /* the container's name template; default "vramd-{name}" */
    char *gpus;        /* NULL = the instance's GPU; "all"; "none"; or "0,1" */
    char **ports;      /* -p values */
    size_t n_ports;
    char *network;
    char **volumes;    /* -v values */
    size_t n_volumes;
    config_kv_t *env;  /* -e NAME=VALUE */
    size_t n_env;
    char **args;       /* extra `run` arguments, before the image */
    size_t n_args;
    char **command;    /* after the image */
    size_t n_command;
    int cgroup_parent; /* -1 auto (podman yes, docker no), 0 no, 1 yes: --cgroup-parent={cgroup} */
} config_container_t;

#define CFG_UPGRADE_WEBSOCKET 1u /* upgrade: [websocket] */

typedef struct model_config {
    char *name;
    char *route; /* path prefix, normalised to start and end with '/'; NULL = no route */
    bool strip;  /* remove the route prefix before forwarding (default true) */
    unsigned upgrade; /* protocol upgrades passed through (CFG_UPGRADE_* bits; default none) */
    char **aliases;
    size_t n_aliases;
    char **cmd; /* NULL-terminated argv (with "{port}" / "{gpu}" placeholders); NULL if external */
    size_t n_cmd;
    char **stop_cmd; /* run to stop an instance (same placeholders, and {pid}); NULL = signals only */
    size_t n_stop_cmd;
    config_container_t container;
    config_kv_t *env; /* values may hold {port}, {gpu}, {model}, {name}, {served_model} */
    size_t n_env;
    char *cwd;
    /* served_model: the name the server itself knows this model by (an Ollama model such as
     * llama3.2:1b, a llama.cpp router model); NULL = the entry's name. {served_model} in cmd,
     * env and hook bodies. */
    char *served_model;
    char *url; /* external server base URL "http://host:port" (no path); NULL if supervised */
    char *url_host;
    int url_port;
    config_health_t health;
    uint64_t startup_timeout_ms; /* default 5m */
    uint64_t stop_timeout_ms;    /* default 10s */
    int *gpus; /* NULL = any */
    size_t n_gpus;
    config_memory_t memory;
    unsigned concurrency; /* default 1 */
    unsigned instances;   /* default 1 */
    unsigned queue_max;   /* default 64 */
    uint64_t deadline_ms; /* default 60s */
    uint64_t max_client_deadline_ms; /* the longest X-Vramd-Deadline honoured; 0 = deadline_ms */
    uint64_t total_deadline_ms; /* end to end, arrival to the answer's last byte; 0 = none (default) */
    int priority;         /* 0..9, default 5 */
    uint64_t keep_alive_ms; /* default 10m; CONFIG_FOREVER = pinned */
    /* max_wait: the longest a request waits while other models hold the card before its
     * model's turn comes (it then claims the card; the holder finishes what it had queued);
     * 1 s .. 24 h (config/turn_keys.c) */
    uint64_t max_wait_ms; /* 0 = auto (the scheduler derives it from learned load times) */
    /* evicts: idle_only: its loads and wakes take only idle memory: never evict (or hold
     * back) a model with requests running or queued, and never claim the card */
    enum config_evicts { CFG_EVICTS_ANY = 0, CFG_EVICTS_IDLE_ONLY } evicts; /* default any */
    config_hook_t unload, reload, clear_cache;
    config_hook_t sleep, wake; /* eviction tier: the server parks its weights in host memory and back */
    bool checkpoint;           /* eviction tier: the CUDA driver parks the instance's processes */
    uint64_t park_keep_alive_ms; /* default 30m: a parked instance is stopped after this long parked;
                                  * CONFIG_FOREVER = kept parked; 0 = never parked (park tiers off) */
    enum config_preset preset; /* PRESET_NONE unless `preset:` */
    /* what the server itself says of the served model, from its health answers (set by the
     * preset): Ollama's GET /api/ps (size_vram), llama.cpp router's GET /models (status);
     * an external (url:) such server may hold several entries' models in one process, and
     * each entry is then measured by it (sched_snapshot.c) */
    enum config_model_report { MODEL_REPORT_NONE = 0, MODEL_REPORT_OLLAMA_PS, MODEL_REPORT_LLAMACPP_MODELS } report;
    enum config_stream_framing stream_framing; /* its streamed answers' framing (the preset's) */
    config_recycle_t recycle;
    config_degrade_t degrade;
    config_validate_t validate;
    bool retry_safe; /* retry: safe */
    uint64_t response_timeout_ms; /* request sent -> the worker's answer head; default 10m; 0 = never */
    config_retry_budget_t retry_budget; /* retries of this model's requests (OOM ladder, invalid output) */
    config_outlier_t outlier;           /* ejection time after broken exchanges */
    /* ComfyUI's own queue (path/prompt_hold.c): a POST /prompt answered 200 with a prompt_id
     * keeps its slot and reservation until GET /history/{prompt_id} shows it done */
    bool prompt_hold;              /* preset comfyui: true */
    /* pin_model: requests reach only served_model (path/router.c): a JSON body's "model" that
     * is absent or names this entry is set to served_model, one naming another model is
     * refused 400 wrong_model, as is a `model=` query naming another; default off (on for
     * llama.cpp's router mode) */
    bool pin_model;
    uint64_t prompt_poll_ms;       /* default 250 ms, at least 10 ms */
    uint64_t prompt_hold_timeout_ms; /* bound on one hold; 0 = response_timeout (then 10m when that is 0) */
    /* vramd in the allocation path (gate/shim_grants.c): libvramd-cuda.so LD_PRELOADed
     * into the worker; auto: where the shim library and a CUDA driver library are found */
    enum config_cuda_shim { CUDA_SHIM_OFF = 0, CUDA_SHIM_AUTO, CUDA_SHIM_REQUIRED } cuda_shim; /* default off */
    uint64_t grant_wait_ms; /* an allocation past the grant waits at most this long for room; default 5s */
    bool shim_park; /* park tier through the shim (workers/park_shim.c), tried before checkpoint; needs cuda_shim */
    /* FNV-1a of the text of its entry (name and value) and of `defaults:`, as written in the
     * file: a reload tells an entry that changed by it (a failed model is then tried again,
     * workers/supervisor.c). What an alias in it refers to elsewhere in the file is not
     * part of it, nor is what follows its last value (the next entry, a comment). */
    uint64_t source_hash;
    char *memory_at; /* "FILE:LINE:COL" of its memory: key (else of its entry), for check-config's fit errors */
} model_config_t;

/* An `alias_of:` entry of models: (config/turn_keys.c): a name with no server of its own,
 * served by whichever of its targets is loaded or cheapest to bring. Not in config->models
 * (config_find_model never returns one): config_find_alias_of finds it. */
typedef struct config_alias_of {
    char *name;
    char *route; /* normalised like a model's route; NULL = none */
    bool strip;  /* default true (or defaults: strip) */
    char **aliases;
    size_t n_aliases;
    char **targets; /* the real models' names (an alias in the file is resolved), 1..16, distinct */
    size_t n_targets;
    char *where; /* "FILE:LINE:COL" of its entry */
} config_alias_of_t;

/* gpu.idle_model: the model brought back when a card falls idle */
typedef struct config_idle_model {
    int gpu; /* -1 = every GPU (the model's gpus: narrow it) */
    char *model; /* a real model's name (an alias in the file is resolved) */
} config_idle_model_t;

/* A warning of the warnings pass (config/warnings.c): legal, but likely a mistake.
 * `vramd --check-config --strict` treats them as errors. */
typedef struct config_warning {
    char *model;   /* NULL for a top-level key */
    char *key;     /* key path, like models.trellis.cmd */
    char *message;
    char *where;   /* "FILE:LINE:COL" */
    char *text;    /* "FILE:LINE:COL: warning: key.path: message" */
} config_warning_t;

typedef struct config {
    int refs;
    char *path;
    char *listen_host; /* default "127.0.0.1" */
    int listen_port;   /* default 8800 */
    char *admin_token_file;
    char *admin_token; /* file contents, trimmed; NULL when no file */
    /* allowed_hosts (config/host_keys.c): the Host names vramd answers besides localhost,
     * *.localhost and IP literals (http_host_allowed), against DNS rebinding. Checked on
     * every route when listed (even empty) or when there is no admin token. */
    struct {
        char **names; /* host names, or "*.domain" */
        size_t n;
        bool listed; /* the key is set (not absent, not null) */
    } allowed_hosts;
    char *state_dir;   /* default "./var" */
    int log_format;    /* enum log_format */
    int log_level;     /* enum log_level */
    struct {
        char *nvml_library; /* default "libnvidia-ml.so.1"; VRAMD_NVML_LIBRARY overrides */
        char *cuda_library; /* default "libcuda.so.1"; VRAMD_CUDA_LIBRARY overrides (start-only) */
        int *devices;       /* NULL = all */
        size_t n_devices;
        char **device_uuids; /* devices given by UUID */
        size_t n_device_uuids;
        uint64_t headroom; /* default 512MiB */
        uint64_t poll_ms;  /* default 100ms */
        /* gpu.stale_after: a snapshot older than this is stale (readiness 503, admission of
         * new memory waits). auto (the default) = 5 x poll_ms, at least 1s; resolved by the
         * checks, so never 0 in a loaded config. */
        uint64_t stale_after_ms;
        bool foreign_measure; /* foreign_usage: measure (default) | ignore */
        /* driver_limits: auto (the driver's per-cgroup limit on each supervised worker with
         * a cgroup v2 leaf, where the driver has them) | off (default) */
        bool driver_limits;
        /* checkpoint_storage: auto (the driver's custom storage where it has it: the
         * checkpoint tier copies through vramd's pinned pool, gpu/cuda_storage.h; default)
         * | driver (the driver's own copy) */
        bool custom_storage;
        /* idle_model: by GPU (one entry with gpu -1 for a scalar); at most one per GPU */
        config_idle_model_t *idle_models;
        size_t n_idle_models;
        /* idle_model_after: how long a card must have had no request queued or running
         * before its idle model is brought back; default 30s, 1s .. 24h */
        uint64_t idle_model_after_ms;
    } gpu;
    struct {
        uint64_t max_body;       /* default 64MiB */
        uint64_t max_header;     /* default 16KiB */
        unsigned max_header_count; /* default 100 */
        unsigned max_connections;  /* default 20000 */
        uint64_t metrics_cache_ms; /* default 1s: a /metrics exposition is reused for up to
                                    * min(this, 10 x its build time); 0 = always rebuilt */
        uint64_t header_timeout_ms; /* default 10s */
        unsigned queue_max;        /* default 1024 */
        uint64_t drain_timeout_ms; /* default 60s: in-flight bound on SIGTERM/drain */
        uint64_t send_timeout_ms;  /* default 60s: answer bytes pending with no write progress
                                      this long -> the client is closed (nginx send_timeout) */
        uint64_t body_timeout_ms;  /* default 60s: no request body bytes this long -> 408
                                      (nginx client_body_timeout) */
        unsigned reserved_connections; /* default 16: accepted past max_connections, for
                                          health, status, metrics and admin routes only */
        unsigned worker_log_lines; /* default 1000 (0..100000): worker output lines kept per
                                      model for GET /v1/models/NAME/logs; 0 keeps none */
        uint64_t worker_log_bytes; /* default 1MiB: the same ring's bound in bytes */
        uint64_t upgrade_idle_timeout_ms; /* default 10m: an upgraded connection with no bytes
                                             either way this long is closed */
        unsigned upgrades_per_client; /* default 16: open upgraded connections per client address */
        unsigned upgrades_max;        /* default 1024: open upgraded connections in all */
        /* the CUDA shims' grant socket (read at start): connections open in all (default
         * 4096), per peer process (default 16), and how long one may stay without its HELLO
         * (default 5s) */
        unsigned shim_conns_max;      /* shim_connections_max */
        unsigned shim_conns_per_proc; /* shim_connections_per_process */
        uint64_t shim_hello_ms;       /* shim_hello_timeout */
    } limits;
    struct {
        uint64_t results_max_bytes; /* default 20GiB */
        uint64_t results_ttl_ms;    /* default 24h */
        uint64_t min_free_disk;     /* default 2GiB */
        unsigned max_attempts;      /* default 3 (1..100): attempts a job may start before it fails */
        unsigned max_active;        /* default 64 (1..limits.queue_max; the default is clamped to it):
                                       jobs handed to the model queues at once, all models together */
        uint64_t records_ttl_ms;    /* default 7d: finished job records are kept this long;
                                       must be >= results_ttl */
        unsigned backend;           /* JOBS_BACKEND_SQLITE (default) or JOBS_BACKEND_POSTGRES */
        struct {
            char *url;                 /* jobs.postgres.url: libpq connection string or URI
                                          (required with backend postgres; never logged) */
            char *host_id;             /* NULL = "<hostname>:<listen port>" */
            uint64_t lease_ms;         /* default 30s: a claim lasts this long unless renewed */
            uint64_t aging_ms;         /* default 60s: a queued job gains one priority step per this */
            uint64_t max_result_bytes; /* default 256MiB: results kept in PostgreSQL up to this */
            uint64_t timeout_ms;       /* default 10s: the connection silent this long while an
                                          answer is awaited (or while connecting): reconnect */
        } pg;
    } jobs;
    model_config_t *models;
    size_t n_models;
    config_alias_of_t *alias_ofs; /* models: entries with alias_of (no server of their own) */
    size_t n_alias_ofs;
    /* limits.per_client (absent or null: off): caps per client and a fair order between
     * clients (policy/client_limit.h, path/dispatch.c) */
    struct {
        bool on;
        int key;                /* 0 address (default), 1 token, 2 header (enum client_key_kind) */
        char *header;           /* key: header:NAME */
        unsigned max_queued;    /* default 32 (1..1000000): requests waiting in queues */
        unsigned max_in_flight; /* default 8 (1..1000000): requests on workers */
        unsigned max_clients;   /* default 4096 (16..1000000): clients tracked (start-only) */
    } per_client;
    /* limits.memory_budget: bytes vramd may hold for requests (bodies, the ladder's copy,
     * held answers); 0 = auto (core/mem_budget.c: a quarter of what the host or cgroup has
     * available at start, at least limits.max_body) */
    uint64_t memory_budget;
    /* fleet: several hosts behind HAProxy (SPEC section 7; fleet/agent.h, docs/fleet.md) */
    struct {
        char *agent_host;       /* agent_listen: NULL = off (default) */
        int agent_port;
        uint64_t agent_wait_ms; /* default 100ms: quiet time after the last agent-send byte
                                   (or the connect) before the line counts as complete */
        uint64_t agent_timeout_ms; /* default 2s: a whole agent connection, answer included
                                      (HAProxy's agent-inter default) */
        unsigned agent_max_connections; /* default 64: agent connections open at once */
        char *host_name;        /* default: this machine's hostname (the /metrics host label) */
    } fleet;
    /* host_memory: where parked GPU memory (sleep, checkpoint) lives; workers/park.c books it */
    struct {
        uint64_t budget;  /* bytes that parked instances may hold; 0 = auto (half of min(MemAvailable,
                             cgroup room) at start) */
        uint64_t reserve; /* default 2GiB: host memory never used for parking */
    } host_memory;
    /* cgroup: a cgroup per worker instance (proc/cgroup.h); read at start only (a reload
     * that changes it is refused: it needs a restart) */
    struct {
        char *mode; /* auto (default) | v2 | v1 | subreaper | off */
        char *path; /* NULL = auto: under vramd's own cgroup; else the delegated subtree dir */
    } cgroup;
    config_warning_t *warnings; /* the warnings pass's findings (at most 256) */
    size_t n_warnings;
} config_t;

/* Parse and validate. On failure returns NULL and writes every error into err
 * (CONFIG_ERR_MAX bytes), one "file:line:col: key.path: message" line each (no newline after
 * the last): each key and each model is checked on its own; the checks across keys run once
 * every key parsed; a YAML syntax error is the only error (no document past it); over
 * YDOC_ERRORS_SHOWN (50), a last line "file: and N more errors (the first 50 are shown)". */
config_t *config_load(const char *path, char *err, size_t errlen);
/* The same from a string (for tests); name is used in messages in place of the path. */
config_t *config_parse(const char *text, size_t len, const char *name, char *err, size_t errlen);
config_t *config_ref(config_t *c);
void config_unref(config_t *c);

/* "vllm", "sglang", ... ("none" for PRESET_NONE). */
const char *config_preset_name(enum config_preset p);
/* The flag a preset's server takes its GPU memory fraction from ("--gpu-memory-utilization"
 * for vllm, "--mem-fraction-static" for sglang); NULL for the others. */
const char *config_preset_fraction_flag(enum config_preset p);
/* Paths of a preset's server that change its GPU memory behind vramd's back (vLLM's dev-mode
 * routes, SGLang's memory release): clients may not call them through vramd. A NULL-ended
 * list, empty for PRESET_NONE. */
const char *const *config_preset_denied_paths(enum config_preset p);

const model_config_t *config_find_model(const config_t *c, const char *name_or_alias);
/* The alias_of entry named name_or_alias (its name, else one of its aliases); NULL if none. */
const config_alias_of_t *config_find_alias_of(const config_t *c, const char *name_or_alias);
/* "3 models" or "3 models, 1 alias_of entry": what --check-config's ok line counts. */
void config_summary(const config_t *c, char *out, size_t cap);

/* One GPU's size for config_fit_errors: its index (as gpus: and gpu.devices name it) and total bytes. */
typedef struct config_gpu_size {
    int index;
    uint64_t total;
} config_gpu_size_t;
/* config/fit.c: every model that fits none of the GPUs it may use among gpus[0..n_gpus)
 * (resident + its smallest per-request reservation within total - gpu.headroom: the
 * daemon's cannot_fit rule), each reported to emit as one "FILE:LINE:COL: key: message"
 * line. Returns how many. */
size_t config_fit_errors(const config_t *c, const config_gpu_size_t *gpus, size_t n_gpus,
                         void (*emit)(void *ctx, const char *line), void *ctx);
/* A loopback listen host (127.0.0.0/8, ::1, "localhost"): the admin token may be absent. */
bool config_host_is_loopback(const char *host);

#endif
