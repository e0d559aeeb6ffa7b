/* pause_point: stop at a named point for a test (the contract is in pause_point.h). */
#include "common/pause_point.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

void pause_point(const char *name)
{
    const char *list = getenv("VRAMD_PAUSE_AT");
    if (!list || !*list)
        return;
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == nl && strncmp(p, name, nl) == 0) {
            log_event(LOG_WARN, "paused_at", "point=%s pid=%d", name, (int)getpid());
            raise(SIGSTOP);
            return;
        }
        if (!e)
            break;
        p = e + 1;
    }
}
