#include <stdio.h>
#include "jobs/jstore.h"
jstore_t *jstore_pg_open(struct uv_loop_s *loop, const jstore_pg_config_t *cfg, const jstore_events_t *ev,
                         char *err, size_t errlen)
{
    (void)loop; (void)cfg; (void)ev;
    snprintf(err, errlen, "not yet");
    return NULL;
}
