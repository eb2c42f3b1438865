/*
 * sampler.h - epoch schedules: which samples, in which order, in which
 * batch, for one rank. A pure function of its inputs: no I/O, no threads,
 * no global state. Every sample of the rank's share appears exactly once
 * per epoch (except the documented padding, see ps_plan.padded).
 */
#ifndef PS_SAMPLER_H
#define PS_SAMPLER_H

#include <stdint.h>

struct ps_sampler_input {
    uint64_t nsamples;
    uint64_t npages;
    /* samples whose first byte lies in page p: page_samples[page_first[p] .. page_first[p+1]) */
    const uint64_t *page_first;   /* npages + 1 */
    const uint32_t *page_samples; /* nsamples */
    int order;                    /* enum ps_order (pagestream.h) */
    uint64_t seed;
    uint32_t rank, world_size;    /* world_size >= 1, rank < world_size */
    uint32_t batch_size;          /* >= 1 */
    int drop_last;
    uint32_t window;              /* quasi-random: pages in the window (>= 1) */
};

struct ps_plan {
    uint64_t epoch;
    uint64_t ntasks;              /* samples this rank delivers this epoch */
    uint64_t nbatches;            /* identical on every rank */
    uint32_t batch_size;
    uint32_t *samples;            /* ntasks sample ids; batch b = samples[b*batch_size ..
                                     min((b+1)*batch_size, ntasks)) */
    uint64_t padded;              /* samples repeated so every rank has nbatches batches */
    uint64_t dropped;             /* samples of the share left out by drop_last */
};

/**
 * Compute the plan of @p epoch for in->rank.
 * Orders:
 *  - sequential: the share in dataset order.
 *  - random: a full permutation of the share (seeded by seed, epoch).
 *  - quasi_random: pages shuffled (seed, epoch); at any point at most
 *    in->window pages are "open" (some samples drawn, some not: first use
 *    <= position < last use); each sample is drawn uniformly from the
 *    samples left in the window; an exhausted page admits the next one.
 *    Pages are those of page_first (where a sample's first byte lies): the
 *    further pages of a sample spanning several are not counted.
 * "Dataset order" is page_samples[] as stored (the sample ids in page
 * order; 0..n-1 for .pgs).
 * Sharding: the shuffled page sequence (sequential and random: dataset
 * order) is cut into world_size contiguous runs of samples of near-equal
 * size (sizes differ by at most 1), so each rank reads only its pages (plus
 * at most two boundary pages); random then permutes its run. All ranks get
 * the same nbatches (a DDP job hangs otherwise):
 *  - drop_last=1: nbatches = floor(floor(n / world) / batch) on every rank;
 *    each rank delivers nbatches*batch samples, the rest of its share is
 *    counted in `dropped` (for random and quasi they change with the epoch).
 *  - drop_last=0: nbatches = ceil(n / (world*batch)); every rank gets
 *    (nbatches-1)*batch samples plus an even part of the remainder. A rank
 *    whose part is empty (remainder < world) delivers ONE padded sample, a
 *    repeat of its own last sample (or, when its share is empty because
 *    n < world, of the last sample of the epoch's sequence), counted in
 *    `padded` and placed last in samples[]. So the union of all ranks is
 *    exactly the dataset, plus at most one repeat per rank. With world 1
 *    there is never padding.
 * Resume: the plan depends on (in, epoch) only, so resuming at (epoch,
 * batch) is ps_plan_make() and starting at samples[batch*batch_size].
 * Linear time and memory (the window pool holds at most window pages).
 * @return 0, or -EINVAL (world_size 0, rank >= world_size, batch_size 0,
 *         unknown order, window 0 for quasi-random, nsamples or npages
 *         >= 2^32, NULL arrays, page_first not starting at 0, decreasing or
 *         not ending at nsamples, a sample id >= nsamples or listed twice)
 *         or -ENOMEM. On failure *out is zeroed. On success free with
 *         ps_plan_free; samples is NULL when ntasks is 0.
 */
int ps_plan_make(const struct ps_sampler_input *in, uint64_t epoch, struct ps_plan *out);
void ps_plan_free(struct ps_plan *p);

/** Batches per epoch for these inputs, without building the plan (equal to
 *  ps_plan_make()'s nbatches; 0 for world_size/rank/batch_size errors). */
uint64_t ps_plan_nbatches(const struct ps_sampler_input *in);

/* Deterministic PRNG used by the sampler (and decode's per-sample seeds). */
uint64_t ps_mix64(uint64_t x);   /* splitmix64 finaliser */

/* ---- shuffle quality ---- */

/**
 * Mean number of distinct labels per batch of @p p (labels[sample]).
 * Compare with the same figure of a random plan to judge a quasi-random one.
 * @return 0 for an empty plan, -1 when out of memory.
 */
double ps_plan_class_diversity(const struct ps_plan *p, const int64_t *labels);

/**
 * Mean |position in p - position in the identity order| / ntasks, where the
 * identity order is the plan's sample ids sorted ascending: 0 for
 * sequential over ids in order (.pgs), ~1/3 for a full permutation.
 * @return 0 for an empty plan, -1 when out of memory.
 */
double ps_plan_displacement(const struct ps_plan *p);

#endif
