/*
 * config_int: what the files of src/config/ share, and nothing outside src/config/
 * includes: the key-table types (field_spec_t, section_t), the bounds of the schema, and
 * the functions one file defines for another, each named cfg_* (the YAML document helpers
 * are ydoc_*, yaml_doc.h).
 *
 * Invariants: every table entry's parser has field_parser_t's shape and returns 0, or -1
 * after ydoc_fail(); whatever a parser leaves behind, on success or error, can be freed
 * by cfg_model_free()/cfg_config_free(); every list and count is bounded below.
 */
#ifndef VRAMD_CONFIG_CONFIG_INT_H
#define VRAMD_CONFIG_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "config/config.h"
#include "config/yaml_doc.h"

#define CONFIG_FILE_MAX (4u << 20)   /* bytes of YAML */
#define TOKEN_FILE_MAX 4096          /* bytes in admin_token_file */
/* models in one file: the same bound as any YAML mapping (MAPPING_PAIRS_MAX), checked first so
 * that the error names models; also what keeps the alias check (quadratic in aliases) and
 * the daemon's per-request scans of its models short */
#define MODELS_MAX 1024
_Static_assert(MODELS_MAX <= MAPPING_PAIRS_MAX, "models: is a mapping: MAPPING_PAIRS_MAX bounds it first");
#define MODEL_NAME_MAX 128
#define ALIASES_MAX 64
#define ARGV_MAX 256                 /* cmd: words */
#define ENV_MAX 256
#define GPUS_MAX 64
#define STATUSES_MAX 64
#define LADDER_MAX 32
#define JSON_DEPTH_MAX 64
#define JSON_VALUES_MAX 100000       /* values converted from YAML to JSON, whole config */

struct field_spec;
/* Parses `value` into the field at `field`; 0 or -1 (after ydoc_fail()). */
typedef int (*field_parser_t)(ctx_t *c, yaml_node_t *value, void *field, const struct field_spec *spec);

typedef struct field_spec {
    const char *key;
    field_parser_t parse;
    size_t offset;       /* of the field within the struct the table describes */
    uint64_t min, max;   /* bounds for numbers; min doubles as the default of a hook timeout */
    const void *extra;   /* a section's table (section_t) */
} field_spec_t;

typedef struct section {
    const field_spec_t *fields;
    size_t n_fields;
} section_t;

#define SECTION(table) {table, sizeof table / sizeof table[0]}

/* yaml_json.c */
bool cfg_all_chars_in(const char *s, const char *set);
cJSON *cfg_yaml_to_json(ctx_t *c, yaml_node_t *n, int depth);

/* container_keys.c: container: and stop_cmd:, and the cmd of a container worker */
int cfg_fp_container(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
int cfg_fp_stop_cmd(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
void cfg_container_free(config_container_t *k);
/* After the model's keys: build cmd from container:, or recognise `docker|podman run` in cmd.
 * 0, or -1 with the reason in why. */
int cfg_container_finish(model_config_t *m, char *why, size_t whylen);

/* fields.c: the table walk, one parser per value kind, and lists of words */
void cfg_free_argv(char **argv, size_t n);
int cfg_parse_argv(ctx_t *c, yaml_node_t *v, char ***argv, size_t *n_argv);
int cfg_apply_mapping(ctx_t *c, yaml_node_t *map, const section_t *section, void *base);
int cfg_set_string(ctx_t *c, yaml_node_t *v, char **field);
int cfg_parse_integer(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t max, uint64_t *out);
int cfg_parse_size(ctx_t *c, yaml_node_t *v, uint64_t min, uint64_t *out);
int cfg_parse_choice(ctx_t *c, yaml_node_t *v, const char *const *names, int *out);
/* One of names, kept as its name (a copy replaces *field). */
int cfg_set_choice_name(ctx_t *c, yaml_node_t *v, const char *const *names, char **field);
int cfg_fp_section(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_string(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_string_opt(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_http_path(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_bool(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_unsigned(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_int(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_u64(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_size(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_duration(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
/* route: (models and alias_of entries): a path prefix normalised to "/a/b/"; null removes it */
int cfg_fp_route(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
/* aliases: (models and alias_of entries): a list of names without spaces; null = none */
int cfg_parse_aliases(ctx_t *c, yaml_node_t *v, char ***aliases, size_t *n_aliases);
/* A YAML sequence of min..max scalars, each checked by check (0, or -1 with its error
 * reported), into *out (NULL-terminated; the old list freed and replaced only on success);
 * what: the list as its error describes it ("a list of names"). */
typedef int (*cfg_item_check_fn)(ctx_t *c, yaml_node_t *item);
int cfg_parse_string_list(ctx_t *c, yaml_node_t *v, const char *what, size_t min, size_t max,
                          cfg_item_check_fn check, char ***out, size_t *n_out);

/* host_keys.c: allowed_hosts */
#define ALLOWED_HOSTS_MAX 64
int cfg_fp_allowed_hosts(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
void cfg_allowed_hosts_free(config_t *cfg);

/* model_keys.c */
/* A listening address (listen, fleet.agent_listen): "host:port" with an IP address or
 * localhost (stored as 127.0.0.1); *host_out (freed first) and *port_out set on success.
 * Errors name the key: want for a non-scalar, examples for a bad one. 0 ok, -1 error recorded. */
int cfg_parse_listen_address(ctx_t *c, yaml_node_t *v, const char *key, const char *want, const char *examples,
                             char **host_out, int *port_out);
int cfg_split_host_port(const char *s, bool port_required, int default_port, char *host, size_t host_cap,
                        int *port);
int cfg_parse_models(ctx_t *c, config_t *cfg, yaml_node_t *root);

/* turn_keys.c: the keys of models that take turns on a card (max_wait, evicts, alias_of
 * entries, gpu.idle_model) */
#define ALIAS_OF_TARGETS_MAX 16
int cfg_fp_max_wait(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
int cfg_fp_evicts(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
/* gpu.idle_model (the field is the config_t): its shape only; cfg_check_turns checks the models */
int cfg_fp_idle_model(ctx_t *c, yaml_node_t *v, void *field, const struct field_spec *spec);
/* Is this models: entry's value an alias_of entry (a mapping with an alias_of: key)? */
bool cfg_is_alias_of_entry(ctx_t *c, const yaml_node_t *v);
/* An alias_of entry's own keys (a zeroed or freeable a; freeable on any return); its targets
 * are kept as written until cfg_check_turns resolves them. */
int cfg_parse_alias_of(ctx_t *c, config_alias_of_t *a, yaml_node_t *k, yaml_node_t *v);
void cfg_alias_of_free(config_alias_of_t *a);
/* After every model is built: alias_of targets and gpu.idle_model resolved to real models
 * and checked. 0 or -1 after ydoc_fail. */
int cfg_check_turns(ctx_t *c, config_t *cfg, yaml_node_t *root);

/* quality_keys.c */
int cfg_fp_degrade(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_validate(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
int cfg_fp_retry(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
void cfg_degrade_free(config_degrade_t *deg);
void cfg_validate_reset(config_validate_t *val);

/* presets.c */
/* The preset a model names (its own `preset:`, else the one in `defaults:`); PRESET_NONE when
 * none or not a known name (the key's parser reports that, with its place). */
enum config_preset cfg_preset_of(ctx_t *c, yaml_node_t *model_node);
/* Fill what preset p documents into m (built-in values only so far); 0 or -1 (out of memory). */
int cfg_apply_preset(ctx_t *c, model_config_t *m, enum config_preset p, yaml_node_t *where);
int cfg_fp_preset(ctx_t *c, yaml_node_t *v, void *field, const field_spec_t *spec);
/* After the model's own keys, before cfg_check_model: llama.cpp's router hooks, the preset's
 * server flags (the memory
 * fraction appended to cmd or a container's command, its env in a container: block); a cmd
 * with {mem_fraction} and no memory.resident is an error. 0 or -1 after ydoc_fail. */
int cfg_preset_finish(ctx_t *c, model_config_t *m, yaml_node_t *where);
/* What a preset's server needs and the model's cmd or env lacks (sleep mode flag, dev mode
 * env): at most cap, each naming the model key it is about; how many were written. */
typedef struct cfg_preset_problem {
    const char *key; /* "cmd", "env", "container", "container.env" */
    char message[400];
} cfg_preset_problem_t;
size_t cfg_preset_problems(const model_config_t *m, cfg_preset_problem_t *out, size_t cap);
/* Is flag ("--name") among words (as "--name", "--name=V", or with underscores)? */
bool cfg_words_have_flag(char *const *words, size_t n, const char *flag);

/* top_keys.c */
extern const section_t cfg_top_section;

/* fleet_keys.c */
extern const section_t cfg_fleet_section;
int cfg_check_fleet(ctx_t *c, config_t *cfg, yaml_node_t *root);

/* defaults.c */
int cfg_model_init_builtin(model_config_t *m);
void cfg_model_free(model_config_t *m);
config_t *cfg_config_new_builtin(void);
void cfg_config_free(config_t *cfg);

/* check.c */
int cfg_check_model(ctx_t *c, model_config_t *m, yaml_node_t *key_node, yaml_node_t *model_node);
/* One models: entry for the namespace check (a model or an alias_of entry), in file order. */
typedef struct cfg_entry {
    const char *name;
    const char *route;
    char *const *aliases;
    size_t n_aliases;
    yaml_node_t *where; /* its mapping, or its key when it has none */
    bool alias_of;
} cfg_entry_t;
/* Names and aliases of every entry are one namespace; routes are unique. */
int cfg_check_names_and_routes(ctx_t *c, const cfg_entry_t *entries, size_t n);
int cfg_check_top(ctx_t *c, config_t *cfg, yaml_node_t *root);
int cfg_check_jobs(ctx_t *c, config_t *cfg, yaml_node_t *root);
/* Where a model key was last set: the model's own mapping, else `defaults:`, else the model
 * itself; sets the key path to match. */
yaml_node_t *cfg_model_key_node(ctx_t *c, const char *model, yaml_node_t *model_node, const char *key);

/* warnings.c */
/* The warnings pass (after every check, the document alive): fills cfg->warnings; 0, or -1
 * after ydoc_fail() (out of memory). */
int cfg_collect_warnings(ctx_t *c, config_t *cfg, yaml_node_t *root);

#endif
