/*
 * json_util: RFC 7386 merge patch, RFC 6901 pointer lookup, deep equality over cJSON.
 *
 * Invariants: json_merge_patch never modifies `patch` (it copies what it takes) and keeps
 * the target's member order (a replaced member stays in place, a new one is appended).
 * json_pointer_get never allocates; it returns a node inside `doc`.
 * Return conventions are those of json_util.h.
 */
#include "common/json_util.h"

#include <string.h>

/* RFC 7386 section 2, applied member by member. */
cJSON *json_merge_patch(cJSON *target, const cJSON *patch)
{
    if (patch == NULL)
        return target;
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return cJSON_Duplicate(patch, 1);
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
        if (target == NULL)
            return NULL;
    }
    for (const cJSON *member = patch->child; member != NULL; member = member->next) {
        if (member->string == NULL)
            continue;
        cJSON *existing = cJSON_GetObjectItemCaseSensitive(target, member->string);
        if (cJSON_IsNull(member)) {
            if (existing != NULL)
                cJSON_Delete(cJSON_DetachItemViaPointer(target, existing));
            continue;
        }
        if (existing != NULL && cJSON_IsObject(existing) && cJSON_IsObject(member)) {
            json_merge_patch(existing, member); /* merged in place: same pointer back */
            continue;
        }
        cJSON *value = json_merge_patch(NULL, member);
        if (value == NULL)
            continue; /* out of memory: leave this member as it was */
        if (existing != NULL) {
            if (!cJSON_ReplaceItemInObjectCaseSensitive(target, member->string, value))
                cJSON_Delete(value);
        } else {
            cJSON_AddItemToObject(target, member->string, value);
        }
    }
    return target;
}

bool json_pointer_valid(const char *pointer)
{
    if (pointer == NULL)
        return false;
    if (pointer[0] == '\0')
        return true;
    if (pointer[0] != '/')
        return false;
    for (const char *p = pointer; *p != '\0'; p++)
        if (*p == '~' && p[1] != '0' && p[1] != '1')
            return false;
    return true;
}

/* Whether `name` equals the reference token (token_len bytes, "~0" = '~', "~1" = '/'),
 * compared without copying so that names of any length work. */
static bool token_matches(const char *name, const char *token, size_t token_len)
{
    size_t i = 0;
    for (; i < token_len; i++, name++) {
        char c = token[i];
        if (c == '~') {
            c = token[i + 1] == '0' ? '~' : '/';
            i++;
        }
        if (*name != c)
            return false;
    }
    return *name == '\0';
}

/* "0" or [1-9][0-9]*, fitting in an int; -1 otherwise. */
static long array_index(const char *token, size_t len)
{
    if (len == 0 || len > 9)
        return -1;
    if (token[0] == '0' && len > 1)
        return -1;
    long value = 0;
    for (size_t i = 0; i < len; i++) {
        if (token[i] < '0' || token[i] > '9')
            return -1;
        value = value * 10 + (token[i] - '0');
    }
    return value;
}

cJSON *json_pointer_get(const cJSON *doc, const char *pointer)
{
    if (doc == NULL || !json_pointer_valid(pointer))
        return NULL;
    const cJSON *node = doc;
    const char *p = pointer;
    while (*p == '/') {
        const char *token = p + 1;
        const char *end = strchr(token, '/');
        size_t token_len = end ? (size_t)(end - token) : strlen(token);
        p = token + token_len;
        if (cJSON_IsObject(node)) {
            const cJSON *child = NULL;
            for (child = node->child; child != NULL; child = child->next)
                if (child->string != NULL && token_matches(child->string, token, token_len))
                    break;
            node = child;
        } else if (cJSON_IsArray(node)) {
            long index = array_index(token, token_len);
            if (index < 0)
                return NULL;
            node = cJSON_GetArrayItem(node, (int)index);
        } else {
            return NULL;
        }
        if (node == NULL)
            return NULL;
    }
    return (cJSON *)node;
}

static bool object_equal(const cJSON *a, const cJSON *b)
{
    int count_a = cJSON_GetArraySize(a), count_b = cJSON_GetArraySize(b);
    if (count_a != count_b)
        return false;
    for (const cJSON *member = a->child; member != NULL; member = member->next) {
        if (member->string == NULL)
            return false;
        const cJSON *other = cJSON_GetObjectItemCaseSensitive(b, member->string);
        if (other == NULL || !json_equal(member, other))
            return false;
    }
    return true;
}

static bool array_equal(const cJSON *a, const cJSON *b)
{
    const cJSON *x = a->child, *y = b->child;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        if (!json_equal(x, y))
            return false;
    return x == NULL && y == NULL;
}

bool json_equal(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (cJSON_IsNull(a) || cJSON_IsNull(b))
        return cJSON_IsNull(a) && cJSON_IsNull(b);
    if (cJSON_IsBool(a) || cJSON_IsBool(b))
        return cJSON_IsBool(a) && cJSON_IsBool(b) && cJSON_IsTrue(a) == cJSON_IsTrue(b);
    if (cJSON_IsNumber(a) || cJSON_IsNumber(b))
        return cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a) || cJSON_IsString(b))
        return cJSON_IsString(a) && cJSON_IsString(b) && a->valuestring != NULL &&
               b->valuestring != NULL && strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsArray(a) || cJSON_IsArray(b))
        return cJSON_IsArray(a) && cJSON_IsArray(b) && array_equal(a, b);
    if (cJSON_IsObject(a) || cJSON_IsObject(b))
        return cJSON_IsObject(a) && cJSON_IsObject(b) && object_equal(a, b);
    if (cJSON_IsRaw(a) && cJSON_IsRaw(b))
        return a->valuestring != NULL && b->valuestring != NULL && strcmp(a->valuestring, b->valuestring) == 0;
    return false;
}
