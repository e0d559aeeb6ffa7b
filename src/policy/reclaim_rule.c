/* reclaim_rule: when a live process's reclaim is settled. See reclaim_rule.h. */
#include "policy/reclaim_rule.h"

void reclaim_watch_init(reclaim_watch_t *w)
{
    w->last = UINT64_MAX;
    w->stable = 0;
}

bool reclaim_settled(reclaim_watch_t *w, uint64_t booked, uint64_t keep, uint64_t measured, bool *by_keep)
{
    if (by_keep)
        *by_keep = false;
    if (measured <= w->last && w->last - measured <= booked / 100)
        w->stable++;
    else
        w->stable = 0;
    w->last = measured;
    if (measured > booked / 2)
        return false; /* too little back yet: wait (bounded by stop_timeout by the caller) */
    if (measured <= booked / 10)
        return true;
    if (keep && measured <= keep + RECLAIM_KEEP_SLACK + booked / 100) {
        if (by_keep)
            *by_keep = true;
        return true;
    }
    return w->stable >= RECLAIM_STABLE_READINGS;
}

uint64_t reclaim_keep_from_start(uint64_t keep, uint64_t measured)
{
    if (measured == 0)
        return keep;
    return keep == 0 || measured < keep ? measured : keep;
}
