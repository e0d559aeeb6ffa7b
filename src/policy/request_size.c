/* request_size: a request's declared input size from its JSON body. See request_size.h. */
#include "policy/request_size.h"

#include <math.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "common/json_util.h"

/* A node's value as a whole number >= 0, or -1. */
static double node_number(const cJSON *n)
{
    double v = -1;
    if (cJSON_IsNumber(n)) {
        v = n->valuedouble;
    } else if (cJSON_IsString(n) && n->valuestring && n->valuestring[0]) {
        char *end = NULL;
        v = strtod(n->valuestring, &end);
        if (end == NULL || *end != '\0')
            v = -1;
    }
    if (!isfinite(v) || v < 0)
        return -1;
    return floor(v);
}

uint64_t request_size_of(const char *body, size_t len, char *const *pointers, size_t n_pointers)
{
    if (n_pointers == 0 || body == NULL || len == 0 || len > REQUEST_SIZE_MAX_BODY)
        return 0;
    cJSON *doc = cJSON_ParseWithLength(body, len);
    if (doc == NULL)
        return 0;
    double product = 1;
    for (size_t i = 0; i < n_pointers && i < REQUEST_SIZE_MAX_FIELDS; i++) {
        double v = node_number(json_pointer_get(doc, pointers[i]));
        if (v < 0) {
            product = 0;
            break;
        }
        product *= v;
    }
    cJSON_Delete(doc);
    if (product >= 18446744073709551615.0)
        return UINT64_MAX;
    return (uint64_t)product;
}
