/*
 * cache.h - the bounded page cache: one arena of fixed-size slots, a unit
 * table (unit = a page, or a single sample in sample mode) mapping units to
 * slots, reference counts of admitted uses, and eviction by farthest next
 * use (Belady). Not thread-safe: the loader calls it under its own lock.
 */
#ifndef PS_CACHE_H
#define PS_CACHE_H

#include <stddef.h>
#include <stdint.h>

enum ps_unit_state {
    PS_UNIT_ABSENT = 0,
    PS_UNIT_QUEUED,   /* has a slot, read not yet submitted */
    PS_UNIT_LOADING,  /* read in flight */
    PS_UNIT_READY
};

#define PS_NO_USE UINT64_MAX  /* next use unknown / never */

struct ps_cache_stats {
    uint64_t hits, misses, evictions;
};

struct ps_cache;

/**
 * Create a cache of @p nslots slots of @p slot_size bytes (a multiple of
 * 4096) for @p nunits units. The arena is one anonymous mapping: memory is
 * committed only as slots are first filled.
 * @return 0, -EINVAL, -ENOMEM.
 */
int ps_cache_create(uint64_t nunits, uint64_t slot_size, uint32_t nslots, struct ps_cache **out);
void ps_cache_destroy(struct ps_cache *c);

void *ps_cache_arena(const struct ps_cache *c);
uint64_t ps_cache_arena_bytes(const struct ps_cache *c);
uint32_t ps_cache_nslots(const struct ps_cache *c);
uint64_t ps_cache_slot_size(const struct ps_cache *c);
/** Memory of the tables (not the arena). */
uint64_t ps_cache_table_bytes(const struct ps_cache *c);

int ps_cache_state(const struct ps_cache *c, uint64_t unit);
void ps_cache_set_state(struct ps_cache *c, uint64_t unit, int state);
/** The slot's memory of a unit that has one (QUEUED, LOADING or READY), else NULL. */
void *ps_cache_data(const struct ps_cache *c, uint64_t unit);
uint32_t ps_cache_refs(const struct ps_cache *c, uint64_t unit);
void ps_cache_ref(struct ps_cache *c, uint64_t unit);
/** Drop one reference. @return the references left. */
uint32_t ps_cache_unref(struct ps_cache *c, uint64_t unit);

/* Next-use oracle: the position at which @p unit is next needed, PS_NO_USE if never. */
typedef uint64_t (*ps_next_use_fn)(void *ctx, uint64_t unit);

/**
 * Give @p unit a slot (state becomes QUEUED): a free slot if any, else the
 * slot of the unreferenced READY unit whose next use is farthest away,
 * provided that next use is >= @p min_victim_use (so nothing needed sooner
 * than that is thrown out).
 * @return 0, or -EBUSY when no slot can be had now.
 */
int ps_cache_acquire(struct ps_cache *c, uint64_t unit, ps_next_use_fn next_use, void *ctx,
                     uint64_t min_victim_use);

/** Forget a unit (after a failed read): its slot becomes free. */
void ps_cache_drop(struct ps_cache *c, uint64_t unit);

/** Count a use found resident (hit) or not (miss). */
void ps_cache_count(struct ps_cache *c, int hit);
void ps_cache_stats(const struct ps_cache *c, struct ps_cache_stats *s);
/** Units currently holding slots. */
uint32_t ps_cache_resident(const struct ps_cache *c);

#endif
