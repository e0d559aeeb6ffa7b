/*
 * job_state: names of job and result states (see job_state.h for the state diagram).
 * Invariant: the name tables are indexed by the enums and have exactly *_COUNT entries.
 */
#include "jobstore/job_state.h"

#include <stddef.h>
#include <string.h>

static const char *const state_names[JOB_STATE_COUNT] = {
    [JOB_QUEUED] = "queued",
    [JOB_RUNNING] = "running",
    [JOB_SUCCEEDED] = "succeeded",
    [JOB_FAILED] = "failed",
    [JOB_CANCELLED] = "cancelled",
};

static const char *const result_state_names[JOB_RESULT_STATE_COUNT] = {
    [JOB_RESULT_NONE] = "none",
    [JOB_RESULT_STORED] = "stored",
    [JOB_RESULT_REMOVED] = "removed",
};

const char *job_state_name(enum job_state s)
{
    if ((int)s < 0 || s >= JOB_STATE_COUNT)
        return "unknown";
    return state_names[s];
}

int job_state_parse(const char *s)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i < JOB_STATE_COUNT; i++) {
        if (strcmp(s, state_names[i]) == 0)
            return i;
    }
    return -1;
}

bool job_state_is_final(enum job_state s)
{
    return s == JOB_SUCCEEDED || s == JOB_FAILED || s == JOB_CANCELLED;
}

const char *job_result_state_name(enum job_result_state s)
{
    if ((int)s < 0 || s >= JOB_RESULT_STATE_COUNT)
        return "unknown";
    return result_state_names[s];
}

int job_result_state_parse(const char *s)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i < JOB_RESULT_STATE_COUNT; i++) {
        if (strcmp(s, result_state_names[i]) == 0)
            return i;
    }
    return -1;
}
