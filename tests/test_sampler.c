/* test_sampler.c - epoch plans: every sample exactly once (or as documented
 * for padding/dropping), equal batches on every rank, quasi-random window
 * bound, page locality of shares, determinism, shuffle quality, speed. */
#include "tests/test.h"
#include "sampler/sampler.h"
#include "pagestream.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

/* The tests' own generator (xorshift64*), independent of the library's. */
static uint64_t t_rng_s = 88172645463325252ULL;
static void t_srand(uint64_t s) { t_rng_s = s * 2654435761ULL + 88172645463325252ULL; }
static uint64_t t_rand(void)
{
    t_rng_s ^= t_rng_s >> 12;
    t_rng_s ^= t_rng_s << 25;
    t_rng_s ^= t_rng_s >> 27;
    return t_rng_s * 2685821657736338717ULL;
}
static uint64_t t_below(uint64_t n) { return n ? t_rand() % n : 0; }

enum fill { FILL_UNIFORM, FILL_VARIED, FILL_ONE, FILL_SINGLE_PAGE, FILL_N };
static const char *fill_name[] = { "uniform10", "varied", "one-per-page", "single-page" };

struct ds {
    uint64_t n, np;
    uint64_t *pf;
    uint32_t *ps;
    uint32_t *page_of;  /* sample id -> page */
    uint64_t *pos_of;   /* sample id -> position in dataset order */
};

static void ds_free(struct ds *d)
{
    free(d->pf);
    free(d->ps);
    free(d->page_of);
    free(d->pos_of);
    memset(d, 0, sizeof *d);
}

/* A dataset of n samples with pages filled per @p fill; beton: the ids of a
 * page are a random scatter (as in .beton files), not a contiguous run. */
static void ds_make(struct ds *d, uint64_t n, int fill, int beton, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    t_srand(seed);
    d->n = n;
    uint64_t cap = 2 * n + 16;
    d->pf = malloc((cap + 1) * sizeof *d->pf);
    uint64_t np = 0, at = 0;
    d->pf[0] = 0;
    if (fill == FILL_SINGLE_PAGE) {
        d->pf[++np] = n;
        at = n;
    }
    if (fill == FILL_VARIED)  /* begin with an empty page */
        d->pf[++np] = 0;
    while (at < n) {
        uint64_t c;
        switch (fill) {
        case FILL_UNIFORM: c = 10; break;
        case FILL_ONE: c = 1; break;
        default: {
            uint64_t k = t_below(10);
            c = k < 2 ? 0 : k < 4 ? 1 : 2 + t_below(40);
        }
        }
        if (c > n - at)
            c = n - at;
        at += c;
        d->pf[++np] = at;
    }
    if (fill == FILL_VARIED)  /* and end with one */
        d->pf[++np] = n;
    d->np = np;
    d->ps = malloc((n ? n : 1) * sizeof *d->ps);
    for (uint64_t i = 0; i < n; i++)
        d->ps[i] = (uint32_t)i;
    if (beton)
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = t_below(i);
            uint32_t t = d->ps[i - 1];
            d->ps[i - 1] = d->ps[j];
            d->ps[j] = t;
        }
    d->page_of = malloc((n ? n : 1) * sizeof *d->page_of);
    d->pos_of = malloc((n ? n : 1) * sizeof *d->pos_of);
    for (uint64_t p = 0; p < np; p++)
        for (uint64_t i = d->pf[p]; i < d->pf[p + 1]; i++)
            d->page_of[d->ps[i]] = (uint32_t)p;
    for (uint64_t i = 0; i < n; i++)
        d->pos_of[d->ps[i]] = i;
}

/* n samples (ids in order) in pages of @p per samples. */
static void ds_make_uniform(struct ds *d, uint64_t n, uint64_t per)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    d->np = (n + per - 1) / per;
    d->pf = malloc((d->np + 1) * sizeof *d->pf);
    d->ps = malloc((n ? n : 1) * sizeof *d->ps);
    d->page_of = malloc((n ? n : 1) * sizeof *d->page_of);
    d->pos_of = malloc((n ? n : 1) * sizeof *d->pos_of);
    for (uint64_t p = 0; p <= d->np; p++)
        d->pf[p] = p * per < n ? p * per : n;
    for (uint64_t i = 0; i < n; i++) {
        d->ps[i] = (uint32_t)i;
        d->page_of[i] = (uint32_t)(i / per);
        d->pos_of[i] = i;
    }
}

static void ds_input(const struct ds *d, struct ps_sampler_input *in, int order, uint64_t seed,
                     uint32_t world, uint32_t batch, int drop_last, uint32_t window)
{
    memset(in, 0, sizeof *in);
    in->nsamples = d->n;
    in->npages = d->np;
    in->page_first = d->pf;
    in->page_samples = d->ps;
    in->order = order;
    in->seed = seed;
    in->world_size = world;
    in->batch_size = batch;
    in->drop_last = drop_last;
    in->window = window;
}

static const char *order_name(int o)
{
    return o == PS_ORDER_SEQUENTIAL ? "sequential" : o == PS_ORDER_RANDOM ? "random" : "quasi";
}

/* Largest number of pages open (first use <= t < last use) at any t. */
static uint64_t max_open_pages(const struct ds *d, const uint32_t *v, uint64_t n)
{
    uint64_t *first = malloc((d->np + 1) * sizeof *first);
    uint64_t *last = malloc((d->np + 1) * sizeof *last);
    int64_t *delta = calloc(n + 1, sizeof *delta);
    for (uint64_t p = 0; p < d->np; p++)
        first[p] = UINT64_MAX;
    for (uint64_t t = 0; t < n; t++) {
        uint32_t p = d->page_of[v[t]];
        if (first[p] == UINT64_MAX)
            first[p] = t;
        last[p] = t;
    }
    for (uint64_t p = 0; p < d->np; p++)
        if (first[p] != UINT64_MAX) {
            delta[first[p]]++;
            delta[last[p]]--;
        }
    int64_t open = 0, mx = 0;
    for (uint64_t t = 0; t < n; t++) {
        open += delta[t];
        if (open > mx)
            mx = open;
    }
    free(first);
    free(last);
    free(delta);
    return (uint64_t)mx;
}

/*
 * Build the plan of every rank and check every promise of sampler.h.
 * @p ctx names the case in failure messages.
 */
static int check_all(const struct ds *d, int order, uint64_t seed, uint32_t world, uint32_t B,
                     int drop, uint32_t W, uint64_t epoch)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "%s n=%llu pages=%llu B=%u world=%u drop=%d W=%u seed=%llu epoch=%llu",
             order_name(order), (unsigned long long)d->n, (unsigned long long)d->np, B, world,
             drop, W, (unsigned long long)seed, (unsigned long long)epoch);
    uint64_t N = d->n;
    struct ps_sampler_input in;
    ds_input(d, &in, order, seed, world, B, drop, W);
    struct ps_plan *pl = calloc(world, sizeof *pl);
    int32_t *owner = malloc((N ? N : 1) * sizeof *owner);
    uint32_t *touch = calloc(d->np + 1, sizeof *touch);   /* ranks touching each page */
    uint32_t *stamp = calloc(d->np + 1, sizeof *stamp);
    for (uint64_t i = 0; i < N; i++)
        owner[i] = -1;
    int bad = 1;
#define C(cond, ...) do { if (!(cond)) { char m_[600]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        t_failf(__FILE__, __LINE__, "%s: %s", ctx, m_); goto out; } } while (0)

    uint64_t nb = 0;
    in.rank = 0;
    nb = ps_plan_nbatches(&in);
    if (drop)
        C(nb == (N / world) / B, "nbatches %llu", (unsigned long long)nb);
    else
        C(nb == (N + (uint64_t)world * B - 1) / ((uint64_t)world * B), "nbatches %llu",
          (unsigned long long)nb);
    uint64_t full = nb ? (nb - 1) * B : 0, R = N - world * full;
    uint64_t sum_share = 0, min_share = UINT64_MAX, max_share = 0, start = 0;

    for (uint32_t r = 0; r < world; r++) {
        in.rank = r;
        int rc = ps_plan_make(&in, epoch, &pl[r]);
        C(rc == 0, "rank %u: rc %d", r, rc);
        struct ps_plan *p = &pl[r];
        C(ps_plan_nbatches(&in) == nb, "rank %u: ps_plan_nbatches differs", r);
        C(p->nbatches == nb, "rank %u: nbatches %llu, want %llu", r,
          (unsigned long long)p->nbatches, (unsigned long long)nb);
        C(p->batch_size == B && p->epoch == epoch, "rank %u: batch_size/epoch", r);
        C((p->ntasks + B - 1) / B == nb, "rank %u: %llu tasks make a different number of batches",
          r, (unsigned long long)p->ntasks);
        C((p->ntasks == 0) == (p->samples == NULL), "rank %u: samples NULL iff empty", r);
        uint64_t want_pad = !drop && N > 0 && R / world == 0 && r >= R % world;
        C(p->padded == want_pad, "rank %u: padded %llu, want %llu", r,
          (unsigned long long)p->padded, (unsigned long long)want_pad);
        if (drop)
            C(p->ntasks == nb * B, "rank %u: ntasks %llu", r, (unsigned long long)p->ntasks);
        else
            C(p->dropped == 0, "rank %u: dropped with drop_last=0", r);
        uint64_t share = p->ntasks - p->padded + p->dropped;
        sum_share += share;
        if (share < min_share)
            min_share = share;
        if (share > max_share)
            max_share = share;

        uint64_t own = p->ntasks - p->padded;
        for (uint64_t i = 0; i < own; i++) {
            uint32_t id = p->samples[i];
            C(id < N, "rank %u: sample %u out of range", r, id);
            C(owner[id] == -1, "rank %u: sample %u at %llu already delivered by rank %d", r, id,
              (unsigned long long)i, owner[id]);
            owner[id] = (int32_t)r;
            /* the share is a run of dataset order (sequential, random) */
            if (order == PS_ORDER_SEQUENTIAL)
                C(d->pos_of[id] == start + i, "rank %u: sample %llu not in dataset order", r,
                  (unsigned long long)i);
            if (order == PS_ORDER_RANDOM)
                C(d->pos_of[id] >= start && d->pos_of[id] < start + share,
                  "rank %u: sample %u outside its run of dataset order", r, id);
        }
        start += share;
        for (uint64_t i = 0; i < p->ntasks; i++) {
            uint32_t pg = d->page_of[p->samples[i] < N ? p->samples[i] : 0];
            if (stamp[pg] != r + 1) {
                stamp[pg] = r + 1;
                touch[pg]++;
            }
        }
        if (order == PS_ORDER_QUASI_RANDOM) {
            uint64_t mo = max_open_pages(d, p->samples, p->ntasks);
            C(mo <= W, "rank %u: %llu pages open at once", r, (unsigned long long)mo);
        }

        /* same inputs, same plan */
        struct ps_plan q;
        C(ps_plan_make(&in, epoch, &q) == 0, "remake");
        int same = q.ntasks == p->ntasks && q.padded == p->padded && q.dropped == p->dropped &&
                   (p->ntasks == 0 || memcmp(q.samples, p->samples, p->ntasks * 4) == 0);
        ps_plan_free(&q);
        C(same, "rank %u: same inputs gave a different plan", r);
        /* another epoch, another order */
        if (order != PS_ORDER_SEQUENTIAL && own >= 16) {
            C(ps_plan_make(&in, epoch + 1, &q) == 0, "next epoch");
            int differ = q.ntasks != p->ntasks ||
                         memcmp(q.samples, p->samples, p->ntasks * 4) != 0;
            ps_plan_free(&q);
            C(differ, "rank %u: epochs %llu and %llu have the same order", r,
              (unsigned long long)epoch, (unsigned long long)epoch + 1);
        }
    }
    C(sum_share == N, "shares add up to %llu", (unsigned long long)sum_share);
    C(N == 0 || max_share - min_share <= 1, "shares %llu..%llu not near-equal",
      (unsigned long long)min_share, (unsigned long long)max_share);
    if (drop)
        C(nb == min_share / B, "nbatches %llu but smallest share %llu", (unsigned long long)nb,
          (unsigned long long)min_share);

    /* padding: the last sample repeats the rank's own, or (empty share)
     * another rank's */
    for (uint32_t r = 0; r < world; r++) {
        struct ps_plan *p = &pl[r];
        if (!p->padded)
            continue;
        uint32_t id = p->samples[p->ntasks - 1];
        C(id < N && owner[id] != -1, "rank %u: padded sample %u is not a dataset sample", r, id);
        if (p->ntasks > 1)
            C(owner[id] == (int32_t)r, "rank %u: padded sample %u belongs to rank %d", r, id,
              owner[id]);
    }
    if (!drop)
        for (uint64_t i = 0; i < N; i++)
            C(owner[i] != -1, "sample %llu delivered by no rank", (unsigned long long)i);

    /* each rank: its own pages plus at most two shared with other ranks */
    for (uint32_t r = 0; r < world; r++) {
        struct ps_plan *p = &pl[r];
        uint64_t shared = 0;
        for (uint64_t i = 0; i < p->ntasks; i++) {
            uint32_t pg = d->page_of[p->samples[i]];
            if (stamp[pg] != 0x80000000u + r) {
                stamp[pg] = 0x80000000u + r;
                shared += touch[pg] > 1;
            }
        }
        C(shared <= 2, "rank %u shares %llu pages with other ranks", r, (unsigned long long)shared);
    }
    bad = 0;
out:
#undef C
    for (uint32_t r = 0; r < world; r++)
        ps_plan_free(&pl[r]);
    free(pl);
    free(owner);
    free(touch);
    free(stamp);
    return bad;
}

static const uint64_t sizes[] = { 0, 1, 7, 100, 1000, 9973 };
static const uint32_t worlds[] = { 1, 2, 3, 4, 8 };

/* The grid: sizes x page fills x (pgs, beton) x batch sizes x worlds x
 * drop_last x seeds (x windows for quasi). Large sizes get fewer combinations
 * to keep the program fast under valgrind. */
static int grid(int order, uint64_t *ncases)
{
    static const uint32_t windows[] = { 1, 3, 64 };
    int nw = order == PS_ORDER_QUASI_RANDOM ? 3 : 1;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int fill = 0; fill < FILL_N; fill++)
            for (int beton = 0; beton < 2; beton++) {
                uint64_t n = sizes[si];
                struct ds d;
                ds_make(&d, n, fill, beton, 1000 + si * 10 + fill * 2 + beton);
                uint32_t batches[] = { 1, 3, 32, 256, (uint32_t)n + 5 };
                for (int bi = 0; bi < 5; bi++)
                    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
                        for (int drop = 0; drop < 2; drop++)
                            for (int w = 0; w < nw; w++)
                                for (uint64_t seed = 0; seed < 2; seed++) {
                                    if (n > 1000 && (bi + wi + drop + w + seed + fill) % 3)
                                        continue;
                                    ++*ncases;
                                    if (check_all(&d, order, seed * 0x12345 + 7, worlds[wi],
                                                  batches[bi], drop, windows[w], seed * 3)) {
                                        size_t l = strlen(t_why);
                                        snprintf(t_why + l, sizeof t_why - l, " [%s%s]",
                                                 fill_name[fill], beton ? ", beton" : "");
                                        ds_free(&d);
                                        return 1;
                                    }
                                }
                ds_free(&d);
            }
    return 0;
}

static int test_exactly_once_sequential(void)
{
    uint64_t n = 0;
    if (grid(PS_ORDER_SEQUENTIAL, &n))
        return 1;
    printf("  %llu sequential cases\n", (unsigned long long)n);
    return 0;
}

static int test_exactly_once_random(void)
{
    uint64_t n = 0;
    if (grid(PS_ORDER_RANDOM, &n))
        return 1;
    printf("  %llu random cases\n", (unsigned long long)n);
    return 0;
}

static int test_exactly_once_quasi(void)
{
    uint64_t n = 0;
    if (grid(PS_ORDER_QUASI_RANDOM, &n))
        return 1;
    printf("  %llu quasi-random cases\n", (unsigned long long)n);
    return 0;
}

/* Hand-computed cases of the balancing rules documented in sampler.h. */
static int test_balancing_examples(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    /* 9 samples, 4 ranks, batch 2: 2 batches; rank 0 gets 3, the others 2
     * plus one padded repeat */
    ds_make(&d, 9, FILL_UNIFORM, 0, 1);
    ds_input(&d, &in, PS_ORDER_SEQUENTIAL, 1, 4, 2, 0, 1);
    static const uint32_t want9[4][3] = { { 0, 1, 2 }, { 3, 4, 4 }, { 5, 6, 6 }, { 7, 8, 8 } };
    for (uint32_t r = 0; r < 4; r++) {
        in.rank = r;
        CHECK(ps_plan_make(&in, 0, &p) == 0);
        CHECKF(p.nbatches == 2 && p.ntasks == 3 && p.padded == (r > 0) && p.dropped == 0,
               "rank %u: %llu batches %llu tasks %llu padded", r, (unsigned long long)p.nbatches,
               (unsigned long long)p.ntasks, (unsigned long long)p.padded);
        CHECKF(memcmp(p.samples, want9[r], sizeof want9[r]) == 0, "rank %u samples", r);
        ps_plan_free(&p);
    }
    ds_free(&d);
    /* 1 sample, 4 ranks: everyone delivers one batch of that sample */
    ds_make(&d, 1, FILL_UNIFORM, 0, 1);
    for (int order = 0; order < 3; order++) {
        ds_input(&d, &in, order, 1, 4, 1, 0, 1);
        for (uint32_t r = 0; r < 4; r++) {
            in.rank = r;
            CHECK(ps_plan_make(&in, 3, &p) == 0);
            CHECK(p.nbatches == 1 && p.ntasks == 1 && p.samples[0] == 0 && p.padded == (r > 0));
            ps_plan_free(&p);
        }
        /* drop_last: nobody has a full batch */
        in.drop_last = 1;
        in.rank = 0;
        CHECK(ps_plan_make(&in, 3, &p) == 0);
        CHECK(p.nbatches == 0 && p.ntasks == 0 && p.samples == NULL && p.dropped == 1);
        ps_plan_free(&p);
    }
    ds_free(&d);
    /* world 1, no drop: 10 samples in batches of 4 = 4, 4, 2 */
    ds_make(&d, 10, FILL_VARIED, 1, 2);
    ds_input(&d, &in, PS_ORDER_RANDOM, 1, 1, 4, 0, 1);
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    CHECK(p.nbatches == 3 && p.ntasks == 10 && p.padded == 0 && p.dropped == 0);
    ps_plan_free(&p);
    ds_free(&d);
    /* drop_last: 10 samples over 3 ranks (shares 4, 3, 3), batch 2: one batch
     * each; 2, 1, 1 dropped */
    ds_make(&d, 10, FILL_UNIFORM, 0, 3);
    ds_input(&d, &in, PS_ORDER_QUASI_RANDOM, 1, 3, 2, 1, 2);
    for (uint32_t r = 0; r < 3; r++) {
        in.rank = r;
        CHECK(ps_plan_make(&in, 0, &p) == 0);
        CHECK(p.nbatches == 1 && p.ntasks == 2 && p.dropped == (r == 0 ? 2u : 1u));
        ps_plan_free(&p);
    }
    ds_free(&d);
    return 0;
}

static int test_validation(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    ds_make(&d, 50, FILL_UNIFORM, 1, 4);
    ds_input(&d, &in, PS_ORDER_QUASI_RANDOM, 1, 2, 8, 0, 4);
#define BAD(stmt) do { struct ps_sampler_input save_ = in; stmt; \
        memset(&p, 0x5a, sizeof p); \
        CHECKF(ps_plan_make(&in, 0, &p) == -EINVAL, "%s accepted", #stmt); \
        CHECKF(p.samples == NULL && p.ntasks == 0, "%s: plan not zeroed", #stmt); \
        in = save_; } while (0)
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    ps_plan_free(&p);
    CHECK(p.samples == NULL);
    ps_plan_free(&p);        /* twice is harmless */
    ps_plan_free(NULL);
    BAD(in.world_size = 0);
    BAD(in.rank = 2);
    BAD(in.batch_size = 0);
    BAD(in.window = 0);
    BAD(in.order = 7);
    BAD(in.order = -1);
    BAD(in.nsamples = 49);
    BAD(in.nsamples = 51);
    BAD(in.npages = 4);
    BAD(in.page_first = NULL);
    BAD(in.page_samples = NULL);
    BAD(in.nsamples = 1ULL << 32);
    in.window = 0;       /* window only matters for quasi-random */
    in.order = PS_ORDER_RANDOM;
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    ps_plan_free(&p);
    in.order = PS_ORDER_QUASI_RANDOM;
    in.window = 4;
    CHECK(ps_plan_make(NULL, 0, &p) == -EINVAL);
    CHECK(ps_plan_make(&in, 0, NULL) == -EINVAL);

    uint64_t pf[6];
    uint32_t ps[50];
    memcpy(pf, d.pf, sizeof pf);
    memcpy(ps, d.ps, sizeof ps);
    in.page_first = pf;
    in.page_samples = ps;
    pf[2] = 5;               /* decreasing */
    BAD((void)0);
    pf[2] = 20;
    pf[0] = 1;               /* not starting at 0 */
    BAD((void)0);
    pf[0] = 0;
    ps[7] = 50;              /* out of range */
    BAD((void)0);
    ps[7] = ps[33];          /* listed twice */
    BAD((void)0);
    ps[7] = d.ps[7];
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    ps_plan_free(&p);
#undef BAD
    in.world_size = 0;
    CHECK(ps_plan_nbatches(&in) == 0);
    CHECK(ps_plan_nbatches(NULL) == 0);

    /* empty dataset, no pages, no arrays: valid, empty plan */
    memset(&in, 0, sizeof in);
    in.world_size = 3;
    in.rank = 2;
    in.batch_size = 4;
    in.order = PS_ORDER_QUASI_RANDOM;
    in.window = 1;
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    CHECK(p.ntasks == 0 && p.nbatches == 0 && p.samples == NULL && p.padded == 0);
    ds_free(&d);
    return 0;
}

/* With window 1 the rank reads page after page: each page's samples come
 * together, in an order that varies by epoch. */
static int test_quasi_window_one(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan a, b;
    ds_make(&d, 3000, FILL_VARIED, 1, 5);
    ds_input(&d, &in, PS_ORDER_QUASI_RANDOM, 9, 1, 32, 0, 1);
    CHECK(ps_plan_make(&in, 0, &a) == 0);
    CHECK(ps_plan_make(&in, 1, &b) == 0);
    uint64_t changes = 0, pages = 0;
    uint8_t *seen = calloc(d.np, 1);
    for (uint64_t t = 0; t < a.ntasks; t++) {
        uint32_t pg = d.page_of[a.samples[t]];
        if (t == 0 || pg != d.page_of[a.samples[t - 1]]) {
            changes++;
            CHECKF(!seen[pg], "page %u opened twice", pg);
            seen[pg] = 1;
        }
    }
    for (uint64_t p = 0; p < d.np; p++)
        pages += d.pf[p + 1] > d.pf[p];
    free(seen);
    CHECKF(changes == pages, "%llu page runs for %llu non-empty pages",
           (unsigned long long)changes, (unsigned long long)pages);
    CHECK(d.page_of[a.samples[0]] != d.page_of[b.samples[0]] ||
          d.page_of[a.samples[a.ntasks - 1]] != d.page_of[b.samples[b.ntasks - 1]]);
    ps_plan_free(&a);
    ps_plan_free(&b);
    ds_free(&d);
    return 0;
}

/* The window is used: W pages really are open at once (not just <= W). */
static int test_quasi_window_filled(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    ds_make(&d, 20000, FILL_UNIFORM, 0, 6);
    static const uint32_t ws[] = { 1, 2, 8, 64, 500, 3000 };
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        ds_input(&d, &in, PS_ORDER_QUASI_RANDOM, 2, 2, 64, 1, ws[i]);
        in.rank = 1;
        CHECK(ps_plan_make(&in, 4, &p) == 0);
        uint64_t mo = max_open_pages(&d, p.samples, p.ntasks);
        /* share = 10000 samples = 1000 pages (+1 boundary page at most) */
        uint64_t want = ws[i] < 1000 ? ws[i] : 1000;
        CHECKF(mo <= ws[i] && mo + 1 >= want, "window %u: at most %llu pages open", ws[i],
               (unsigned long long)mo);
        ps_plan_free(&p);
    }
    ds_free(&d);
    return 0;
}

/* Counts of the 24 orders of 4 samples over many epochs: each about 1/24. */
static int perm_uniform(int order, uint32_t window, int beton)
{
    struct ds d;
    struct ps_sampler_input in;
    ds_make(&d, 4, FILL_VARIED, beton, 7);
    ds_input(&d, &in, order, 42, 1, 4, 0, window);
    enum { E = 48000 };
    uint32_t cnt[256] = { 0 };
    for (uint64_t e = 0; e < E; e++) {
        struct ps_plan p;
        CHECK(ps_plan_make(&in, e, &p) == 0);
        CHECK(p.ntasks == 4);
        uint32_t k = 0;
        for (int i = 0; i < 4; i++)
            k = k * 4 + p.samples[i];
        cnt[k]++;
        ps_plan_free(&p);
    }
    int seen = 0;
    double sd = sqrt(E / 24.0 * (23.0 / 24.0));
    for (int k = 0; k < 256; k++) {
        if (!cnt[k])
            continue;
        seen++;
        CHECKF(fabs(cnt[k] - E / 24.0) < 5 * sd, "%s: order %d seen %u times of %d", order_name(order),
               k, cnt[k], E);
    }
    CHECKF(seen == 24, "%s: %d distinct orders", order_name(order), seen);
    ds_free(&d);
    return 0;
}

static int test_random_uniform(void)
{
    return perm_uniform(PS_ORDER_RANDOM, 1, 1);
}

/* A window as large as the share makes quasi-random a uniform permutation. */
static int test_quasi_full_window_uniform(void)
{
    return perm_uniform(PS_ORDER_QUASI_RANDOM, 1000, 0);
}

/* drop_last: which samples are left out changes with the epoch, and each
 * sample is kept about as often as the others. */
static int test_dropped_vary(void)
{
    struct ds d;
    struct ps_sampler_input in;
    ds_make(&d, 100, FILL_UNIFORM, 1, 8);
    for (int order = PS_ORDER_RANDOM; order <= PS_ORDER_QUASI_RANDOM; order++) {
        ds_input(&d, &in, order, 5, 1, 32, 1, 100);
        uint32_t kept[100] = { 0 };
        enum { E = 4000 };
        for (uint64_t e = 0; e < E; e++) {
            struct ps_plan p;
            CHECK(ps_plan_make(&in, e, &p) == 0);
            CHECK(p.ntasks == 96 && p.dropped == 4);
            for (uint64_t i = 0; i < p.ntasks; i++)
                kept[p.samples[i]]++;
            ps_plan_free(&p);
        }
        /* kept with probability 0.96: mean 3840, sd ~12.4 */
        for (int i = 0; i < 100; i++)
            CHECKF(abs((int)kept[i] - 3840) < 75, "%s: sample %d kept %u times of %d",
                   order_name(order), i, kept[i], E);
    }
    ds_free(&d);
    return 0;
}

/* A plan depends on (inputs, epoch) only: not on what was computed before,
 * nor on where the arrays live. So resuming at (epoch, batch) is making the
 * plan and starting at batch * batch_size. */
static int test_resume_pure(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan a, b;
    ds_make(&d, 5000, FILL_VARIED, 1, 9);
    for (int order = 0; order < 3; order++) {
        ds_input(&d, &in, order, 77, 4, 16, 0, 8);
        in.rank = 2;
        CHECK(ps_plan_make(&in, 5, &a) == 0);
        for (uint64_t e = 0; e < 5; e++)
            for (uint32_t r = 0; r < 4; r++) {
                struct ps_sampler_input o = in;
                o.rank = r;
                CHECK(ps_plan_make(&o, e, &b) == 0);
                ps_plan_free(&b);
            }
        uint64_t *pf = malloc((d.np + 1) * sizeof *pf);
        uint32_t *ps = malloc(d.n * sizeof *ps);
        memcpy(pf, d.pf, (d.np + 1) * sizeof *pf);
        memcpy(ps, d.ps, d.n * sizeof *ps);
        in.page_first = pf;
        in.page_samples = ps;
        CHECK(ps_plan_make(&in, 5, &b) == 0);
        CHECK(a.ntasks == b.ntasks && memcmp(a.samples, b.samples, a.ntasks * 4) == 0);
        free(pf);
        free(ps);
        /* another seed or world gives another plan */
        in.page_first = d.pf;
        in.page_samples = d.ps;
        if (order != PS_ORDER_SEQUENTIAL) {
            ps_plan_free(&b);
            in.seed = 78;
            CHECK(ps_plan_make(&in, 5, &b) == 0);
            CHECK(a.ntasks == b.ntasks && memcmp(a.samples, b.samples, a.ntasks * 4) != 0);
        }
        ps_plan_free(&a);
        ps_plan_free(&b);
    }
    ds_free(&d);
    return 0;
}

/* Pins the generator and one small plan, so that a change of the bits (which
 * would break resuming a job across versions or machines) is noticed. The
 * splitmix64 values are the published reference outputs for seed 1234567. */
static int test_golden(void)
{
    static const uint64_t ref[5] = { 6457827717110365317ULL, 3203168211198807973ULL,
                                     9817491932198370423ULL, 4593380528125082431ULL,
                                     16408922859458223821ULL };
    uint64_t s = 1234567;
    for (int i = 0; i < 5; i++) {
        s += 0x9e3779b97f4a7c15ULL;
        CHECKF(ps_mix64(s) == ref[i], "splitmix64 output %d: %llu", i,
               (unsigned long long)ps_mix64(s));
    }
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    ds_make(&d, 1000, FILL_VARIED, 1, 10);
    /* FNV-1a of the plans of every order, rank 1 of 3, epoch 2 */
    static const uint64_t want[3] = { 0x15b84b6d8b718b92ULL, 0x04517b7490ec6d40ULL,
                                      0x96622ed4cb2d0756ULL };
    uint64_t got[3];
    for (int order = 0; order < 3; order++) {
        ds_input(&d, &in, order, 2024, 3, 32, 0, 4);
        in.rank = 1;
        CHECK(ps_plan_make(&in, 2, &p) == 0);
        uint64_t h = 1469598103934665603ULL;
        for (uint64_t i = 0; i < p.ntasks; i++) {
            h ^= p.samples[i];
            h *= 1099511628211ULL;
        }
        got[order] = h;
        ps_plan_free(&p);
    }
    ds_free(&d);
    for (int order = 0; order < 3; order++)
        if (got[order] != want[order])
            printf("  %s plan hash 0x%016llx\n", order_name(order), (unsigned long long)got[order]);
    for (int order = 0; order < 3; order++)
        CHECKF(got[order] == want[order], "%s plan hash 0x%016llxULL", order_name(order),
               (unsigned long long)got[order]);
    return 0;
}

static int test_displacement(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    ds_make(&d, 30000, FILL_UNIFORM, 0, 11);
    ds_input(&d, &in, PS_ORDER_SEQUENTIAL, 1, 1, 64, 0, 8);
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    CHECK(ps_plan_displacement(&p) == 0.0);
    ps_plan_free(&p);
    in.order = PS_ORDER_RANDOM;
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    double dr = ps_plan_displacement(&p);
    ps_plan_free(&p);
    CHECKF(fabs(dr - 1.0 / 3) < 0.01, "random displacement %.4f", dr);
    in.order = PS_ORDER_QUASI_RANDOM;
    CHECK(ps_plan_make(&in, 0, &p) == 0);
    double dq = ps_plan_displacement(&p);
    ps_plan_free(&p);
    /* shuffled pages: far from the identity too */
    CHECKF(fabs(dq - 1.0 / 3) < 0.03, "quasi displacement %.4f", dq);
    /* a reversed plan: mean |i - (n-1-i)| / n = 1/2 */
    uint32_t v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = 999 - i;
    struct ps_plan rev = { .ntasks = 1000, .nbatches = 1, .batch_size = 1000, .samples = v };
    CHECKF(fabs(ps_plan_displacement(&rev) - 0.5) < 1e-9, "reversed %.6f",
           ps_plan_displacement(&rev));
    struct ps_plan empty = { 0 };
    CHECK(ps_plan_displacement(&empty) == 0.0);
    printf("  displacement: random %.4f, quasi(W=8) %.4f\n", dr, dq);
    ds_free(&d);
    return 0;
}

/* Class-sorted dataset (100 classes, each 10 pages of 100 samples):
 * distinct classes per batch of 256 for each order. */
static int test_shuffle_quality(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    ds_make_uniform(&d, 100000, 100);
    CHECK(d.np == 1000);
    int64_t *labels = malloc(d.n * sizeof *labels);
    for (uint64_t i = 0; i < d.n; i++)
        labels[i] = d.page_of[i] / 10;
    /* the helper itself, on a plan made by hand */
    uint32_t ids[6] = { 0, 1, 1000, 99999, 5, 1001 };   /* classes 0 0 1 | 99 0 1 */
    struct ps_plan hand = { .ntasks = 6, .nbatches = 2, .batch_size = 3, .samples = ids };
    CHECKF(fabs(ps_plan_class_diversity(&hand, labels) - 2.5) < 1e-12, "hand-made plan: %.3f",
           ps_plan_class_diversity(&hand, labels));

    struct { const char *name; int order; uint32_t w; double div, disp; } row[] = {
        { "sequential", PS_ORDER_SEQUENTIAL, 0, 0, 0 },
        { "quasi W=8", PS_ORDER_QUASI_RANDOM, 8, 0, 0 },
        { "quasi W=64", PS_ORDER_QUASI_RANDOM, 64, 0, 0 },
        { "quasi W=256", PS_ORDER_QUASI_RANDOM, 256, 0, 0 },
        { "quasi W=all", PS_ORDER_QUASI_RANDOM, 1000, 0, 0 },
        { "random", PS_ORDER_RANDOM, 0, 0, 0 },
    };
    enum { NR = sizeof row / sizeof *row };
    printf("  class diversity, 100 classes, batch 256, 1000 pages of 100 samples:\n");
    for (int i = 0; i < NR; i++) {
        ds_input(&d, &in, row[i].order, 3, 1, 256, 1, row[i].w ? row[i].w : 1);
        CHECK(ps_plan_make(&in, 0, &p) == 0);
        row[i].div = ps_plan_class_diversity(&p, labels);
        row[i].disp = ps_plan_displacement(&p);
        ps_plan_free(&p);
        printf("  %-14s %6.2f classes/batch  displacement %.3f\n", row[i].name, row[i].div,
               row[i].disp);
    }
    double rnd = row[NR - 1].div;
    /* drawing 256 of 100 equal classes: 100 * (1 - 0.99^256) = 92.4 */
    CHECKF(fabs(rnd - 92.4) < 1.0, "random %.2f", rnd);
    CHECKF(row[0].div <= 2.0, "sequential %.2f", row[0].div);
    for (int i = 1; i < NR - 1; i++)
        CHECKF(row[i].div > row[i - 1].div, "%s not better than %s", row[i].name, row[i - 1].name);
    CHECKF(row[1].div <= 8 + 4, "W=8 gives %.2f classes, more than its pages allow", row[1].div);
    /* Draws are uniform over the window's samples, so a page's remaining
     * samples decay exponentially and the window acts like ~0.45 W equally
     * weighted pages: W=256 pages of a 1000-page file reaches ~79% of random. */
    CHECKF(row[3].div > 0.7 * rnd, "W=256 only %.2f of random's %.2f", row[3].div, rnd);
    CHECKF(fabs(row[NR - 2].div - rnd) < 0.01 * rnd, "W=all %.2f vs random %.2f", row[NR - 2].div,
           rnd);
    free(labels);
    ds_free(&d);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ImageNet scale: 1.28M samples in 12,500 pages. */
static int test_performance(void)
{
    struct ds d;
    struct ps_sampler_input in;
    struct ps_plan p;
    uint64_t n = 1281167;
    memset(&d, 0, sizeof d);
    d.n = n;
    d.np = 12500;
    d.pf = malloc((d.np + 1) * sizeof *d.pf);
    d.ps = malloc(n * sizeof *d.ps);
    for (uint64_t i = 0; i <= d.np; i++)
        d.pf[i] = n * i / d.np;
    for (uint64_t i = 0; i < n; i++)
        d.ps[i] = (uint32_t)i;
    struct { const char *name; int order; uint32_t world, w; } cs[] = {
        { "sequential", PS_ORDER_SEQUENTIAL, 1, 1 },
        { "random", PS_ORDER_RANDOM, 1, 1 },
        { "quasi W=64", PS_ORDER_QUASI_RANDOM, 1, 64 },
        { "quasi W=1024", PS_ORDER_QUASI_RANDOM, 1, 1024 },
        { "quasi W=all", PS_ORDER_QUASI_RANDOM, 1, 12500 },
        { "quasi W=64, rank 3 of 8", PS_ORDER_QUASI_RANDOM, 8, 64 },
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        ds_input(&d, &in, cs[i].order, 1, cs[i].world, 256, 1, cs[i].w);
        in.rank = cs[i].world > 1 ? 3 : 0;
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            CHECK(ps_plan_make(&in, (uint64_t)rep, &p) == 0);
            double t = now_s() - t0;
            ps_plan_free(&p);
            if (t < best)
                best = t;
        }
        printf("  plan %-24s %7.1f ms\n", cs[i].name, best * 1e3);
        if (best > worst)
            worst = best;
    }
    ds_free(&d);
    CHECKF(worst < 2.0, "a plan took %.0f ms", worst * 1e3);
    return 0;
}

T_MAIN(T(test_exactly_once_sequential), T(test_exactly_once_random), T(test_exactly_once_quasi),
       T(test_balancing_examples), T(test_validation), T(test_quasi_window_one),
       T(test_quasi_window_filled), T(test_random_uniform), T(test_quasi_full_window_uniform),
       T(test_dropped_vary), T(test_resume_pure), T(test_golden), T(test_displacement),
       T(test_shuffle_quality), T(test_performance))
