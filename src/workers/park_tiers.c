/*
 * park_tiers: the ONE ordered table of park tiers (park_tier.h has the ops and their calling
 * convention) and the lookups every walk of it uses: park.c's choice of a tier and its
 * fallback, park_cost.c's cost of an eviction, the names status shows.
 *
 * Invariant: row t is the tier whose enum park_tier value is t (its ops' `tier` says so), in
 * walk order: cheapest first (a wake keeps the process's own allocator, the shim copies what
 * it allocated through pinned buffers at the link's speed, a checkpoint copies every byte
 * through the driver's slower path). Reads only the table and what each tier's can() reads.
 * Calls the tiers' files (park_sleep.c, park_shim.c, park_checkpoint.c); called by park_cost.c, park_host.c,
 * park.c and status.
 */
#include "workers/park_tier.h"

static const park_tier_ops_t *const park_tiers[PARK_TIER_COUNT] = {
    [PARK_SLEEP] = &park_tier_sleep,
    [PARK_SHIM] = &park_tier_shim,
    [PARK_CHECKPOINT] = &park_tier_checkpoint,
};

const park_tier_ops_t *park_tier_ops(enum park_tier t)
{
    return (unsigned)t < PARK_TIER_COUNT ? park_tiers[t] : NULL;
}

enum park_tier park_tier_first(const instance_t *inst, enum park_tier from)
{
    for (unsigned t = (unsigned)from; t < PARK_TIER_COUNT; t++)
        if (park_tiers[t]->can(inst))
            return (enum park_tier)t;
    return PARK_NONE;
}

const char *park_tier_name(enum park_tier t)
{
    const park_tier_ops_t *ops = park_tier_ops(t);
    return ops ? ops->name : "none";
}

const char *instance_tier_name(const instance_t *in)
{
    const park_tier_ops_t *ops = park_tier_ops(in->park.park_tier);
    switch (in->life.state) {
    case INST_PARKING:
    case INST_PARKED:
    case INST_RESUMING:
        return ops ? ops->parked_as : "parked";
    case INST_UNLOADING:
    case INST_UNLOADED:
    case INST_RELOADING:
        return "unloaded";
    default:
        return "resident";
    }
}
