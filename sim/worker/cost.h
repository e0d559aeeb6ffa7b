/*
 * cost: what one request costs, from its parameters.
 *
 * Request parameters are read from the body the way the real servers take them: the
 * top-level members of a JSON object (application/json, or any body that starts with '{'),
 * urlencoded form fields (application/x-www-form-urlencoded), and the non-file fields of a
 * multipart/form-data body (file parts are named but their value is not kept). Values are
 * kept as strings (JSON numbers printed with %.17g, booleans as true/false); at most
 * SW_MAX_PARAMS of them, each name and value bounded (longer ones are cut).
 *
 * A cost factor is the product over the rules of (value / base) ^ exp for the rules whose
 * parameter is present and numeric and > 0; a missing parameter contributes 1. The factor
 * is clamped to [1e-6, 1e6] so that no input can ask for absurd memory or time.
 *
 * Return convention: sw_params_parse returns 0 ok (also for an empty or unknown body),
 * -1 when the body claims a format it does not follow (bad JSON, bad multipart), with err.
 */
#ifndef VRAMD_SIM_WORKER_COST_H
#define VRAMD_SIM_WORKER_COST_H

#include <stddef.h>

#include "flags.h"

#define SW_MAX_PARAMS 64
#define SW_PARAM_VALUE_MAX 256

typedef struct sw_param {
    char name[SW_PARAM_NAME_MAX];
    char value[SW_PARAM_VALUE_MAX];
    int is_file; /* multipart part with a filename */
} sw_param_t;

typedef struct sw_params {
    sw_param_t items[SW_MAX_PARAMS];
    size_t n;
    int is_json; /* the body was a JSON object */
} sw_params_t;

int sw_params_parse(const char *content_type, const char *body, size_t len, sw_params_t *out,
                    char *err, size_t errlen);
/* Value of a parameter, or NULL. */
const char *sw_params_get(const sw_params_t *p, const char *name);
/* Numeric value when present and a finite number; returns 0 ok, -1 otherwise. */
int sw_params_number(const sw_params_t *p, const char *name, double *out);
double sw_cost_factor(const sw_scale_rule_t *rules, size_t n, const sw_params_t *p);

#endif
