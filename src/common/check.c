/* check: where a failed BUG_ON / CHECK_IF is reported (see check.h). */
#include "common/check.h"

#include <stdlib.h>

#include "common/log.h"

void check_failed(const char *what, const char *cond, const char *file, int line, bool fatal)
{
    log_event(LOG_ERROR, "invariant_failed", "kind=%s cond=%s file=%s line=%d fatal=%B", what, cond, file, line,
              fatal);
    if (fatal)
        abort();
}
