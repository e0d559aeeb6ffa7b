/*
 * check: two levels of assertions for the invariants written in the headers (HAProxy's
 * BUG_ON and CHECK_IF).
 *
 *   BUG_ON(cond)   the state is corrupt and going on would make it worse: log and abort,
 *                  in every build.
 *   CHECK_IF(cond) something that should not happen and that vramd survives: log once per
 *                  site (with file and line) and go on; abort in debug builds (VRAMD_DEBUG,
 *                  the sanitizer build that the tests run), so tests catch it.
 * Both evaluate cond once and return nothing.
 */
#ifndef VRAMD_COMMON_CHECK_H
#define VRAMD_COMMON_CHECK_H

#include <stdbool.h>

void check_failed(const char *what, const char *cond, const char *file, int line, bool fatal);

#define BUG_ON(cond)                                                      \
    do {                                                                  \
        if (cond)                                                         \
            check_failed("bug", #cond, __FILE__, __LINE__, true);         \
    } while (0)

#ifdef VRAMD_DEBUG
#define CHECK_FATAL true
#else
#define CHECK_FATAL false
#endif

#define CHECK_IF(cond)                                                    \
    do {                                                                  \
        static bool check_reported_;                                      \
        if ((cond) && !check_reported_) {                                 \
            check_reported_ = !CHECK_FATAL;                               \
            check_failed("check", #cond, __FILE__, __LINE__, CHECK_FATAL); \
        }                                                                 \
    } while (0)

#endif
