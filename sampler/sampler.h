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
 *    in->window pages are "open" (some samples drawn, some not); each
 *    sample is drawn uniformly from the samples of the open pages.
 * Sharding: the shuffled page sequence (sequential: dataset order) is cut
 * into world_size contiguous runs of samples of near-equal size, so each
 * rank reads only its pages (plus at most two boundary pages); all ranks
 * get the same nbatches.
 * @return 0, or -EINVAL (bad input) / -ENOMEM. On success free with ps_plan_free.
 */
int ps_plan_make(const struct ps_sampler_input *in, uint64_t epoch, struct ps_plan *out);
void ps_plan_free(struct ps_plan *p);

/** Batches per epoch for these inputs, without building the plan. */
uint64_t ps_plan_nbatches(const struct ps_sampler_input *in);

/* Deterministic PRNG used by the sampler (and decode's per-sample seeds). */
uint64_t ps_mix64(uint64_t x);   /* splitmix64 finaliser */

/* ---- shuffle quality ---- */

/**
 * Mean number of distinct labels per batch of @p p (labels[sample]).
 * Compare with the same figure of a random plan to judge a quasi-random one.
 */
double ps_plan_class_diversity(const struct ps_plan *p, const int64_t *labels);

/**
 * Mean |position in p - position in the identity order| / ntasks: 0 for
 * sequential, ~1/3 for a full permutation.
 */
double ps_plan_displacement(const struct ps_plan *p);

#endif
