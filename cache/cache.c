/*
 * cache.c - slot arena, unit table and farthest-next-use eviction.
 * The arena is mmap'd once; slots are never freed back to the system, so
 * resident memory is bounded by the arena size however long the job runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache.h"

struct ps_cache {
    uint8_t *arena;
    uint64_t arena_bytes;
    uint64_t slot_size;
    uint32_t nslots;
    uint64_t nunits;
    int32_t *unit_slot;     /* nunits: slot or -1 */
    uint8_t *unit_state;    /* nunits */
    uint32_t *unit_refs;    /* nunits */
    int64_t *slot_unit;     /* nslots: unit or -1 */
    uint32_t *free_slots;   /* stack */
    uint32_t nfree;
    struct ps_cache_stats st;
};

int ps_cache_create(uint64_t nunits, uint64_t slot_size, uint32_t nslots, struct ps_cache **out)
{
    struct ps_cache *c;

    *out = NULL;
    if (!slot_size || slot_size % 4096 || !nslots || nunits > (1ull << 40))
        return -EINVAL;
    if (slot_size > UINT64_MAX / nslots)
        return -EINVAL;
    c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->slot_size = slot_size;
    c->nslots = nslots;
    c->nunits = nunits;
    c->arena_bytes = slot_size * nslots;
    c->arena = mmap(NULL, c->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    if (c->arena == MAP_FAILED) {
        c->arena = NULL;
        goto err;
    }
    c->unit_slot = malloc((nunits ? nunits : 1) * sizeof *c->unit_slot);
    c->unit_state = calloc(nunits ? nunits : 1, 1);
    c->unit_refs = calloc(nunits ? nunits : 1, sizeof *c->unit_refs);
    c->slot_unit = malloc(nslots * sizeof *c->slot_unit);
    c->free_slots = malloc(nslots * sizeof *c->free_slots);
    if (!c->unit_slot || !c->unit_state || !c->unit_refs || !c->slot_unit || !c->free_slots)
        goto err;
    for (uint64_t u = 0; u < nunits; u++)
        c->unit_slot[u] = -1;
    for (uint32_t s = 0; s < nslots; s++) {
        c->slot_unit[s] = -1;
        c->free_slots[s] = nslots - 1 - s; /* pop order 0, 1, 2, ... */
    }
    c->nfree = nslots;
    *out = c;
    return 0;
err:
    ps_cache_destroy(c);
    return -ENOMEM;
}

void ps_cache_destroy(struct ps_cache *c)
{
    if (!c)
        return;
    if (c->arena)
        munmap(c->arena, c->arena_bytes);
    free(c->unit_slot);
    free(c->unit_state);
    free(c->unit_refs);
    free(c->slot_unit);
    free(c->free_slots);
    free(c);
}

void *ps_cache_arena(const struct ps_cache *c) { return c->arena; }
uint64_t ps_cache_arena_bytes(const struct ps_cache *c) { return c->arena_bytes; }
uint32_t ps_cache_nslots(const struct ps_cache *c) { return c->nslots; }
uint64_t ps_cache_slot_size(const struct ps_cache *c) { return c->slot_size; }

uint64_t ps_cache_table_bytes(const struct ps_cache *c)
{
    return c->nunits * (sizeof(int32_t) + 1 + sizeof(uint32_t)) +
           c->nslots * (sizeof(int64_t) + sizeof(uint32_t));
}

int ps_cache_state(const struct ps_cache *c, uint64_t unit) { return c->unit_state[unit]; }
void ps_cache_set_state(struct ps_cache *c, uint64_t unit, int state) { c->unit_state[unit] = (uint8_t)state; }

void *ps_cache_data(const struct ps_cache *c, uint64_t unit)
{
    int32_t s = c->unit_slot[unit];
    return s < 0 ? NULL : c->arena + (uint64_t)s * c->slot_size;
}

uint32_t ps_cache_refs(const struct ps_cache *c, uint64_t unit) { return c->unit_refs[unit]; }
void ps_cache_ref(struct ps_cache *c, uint64_t unit) { c->unit_refs[unit]++; }

uint32_t ps_cache_unref(struct ps_cache *c, uint64_t unit)
{
    if (c->unit_refs[unit])
        c->unit_refs[unit]--;
    return c->unit_refs[unit];
}

static void give_slot(struct ps_cache *c, uint64_t unit, uint32_t s)
{
    c->slot_unit[s] = (int64_t)unit;
    c->unit_slot[unit] = (int32_t)s;
    c->unit_state[unit] = PS_UNIT_QUEUED;
}

int ps_cache_acquire(struct ps_cache *c, uint64_t unit, ps_next_use_fn next_use, void *ctx,
                     uint64_t min_victim_use)
{
    int64_t victim = -1;
    uint64_t best = 0;

    if (c->unit_slot[unit] >= 0)
        return 0;
    if (c->nfree) {
        give_slot(c, unit, c->free_slots[--c->nfree]);
        return 0;
    }
    /* Belady: among unreferenced resident units, the one needed last. A
     * linear scan: slots number in the hundreds (pages) to a few thousand
     * (samples), and eviction happens once per read. */
    for (uint32_t s = 0; s < c->nslots; s++) {
        int64_t u = c->slot_unit[s];
        uint64_t nu;
        if (u < 0 || c->unit_refs[u] || c->unit_state[u] != PS_UNIT_READY)
            continue;
        nu = next_use(ctx, (uint64_t)u);
        if (nu < min_victim_use)
            continue;
        if (victim < 0 || nu > best) {
            victim = s;
            best = nu;
            if (nu == PS_NO_USE)
                break;
        }
    }
    if (victim < 0)
        return -EBUSY;
    {
        uint64_t old = (uint64_t)c->slot_unit[victim];
        c->unit_slot[old] = -1;
        c->unit_state[old] = PS_UNIT_ABSENT;
        c->st.evictions++;
    }
    give_slot(c, unit, (uint32_t)victim);
    return 0;
}

void ps_cache_drop(struct ps_cache *c, uint64_t unit)
{
    int32_t s = c->unit_slot[unit];
    if (s < 0)
        return;
    c->slot_unit[s] = -1;
    c->unit_slot[unit] = -1;
    c->unit_state[unit] = PS_UNIT_ABSENT;
    c->free_slots[c->nfree++] = (uint32_t)s;
}

void ps_cache_count(struct ps_cache *c, int hit)
{
    if (hit)
        c->st.hits++;
    else
        c->st.misses++;
}

void ps_cache_stats(const struct ps_cache *c, struct ps_cache_stats *s) { *s = c->st; }

uint32_t ps_cache_resident(const struct ps_cache *c) { return c->nslots - c->nfree; }
