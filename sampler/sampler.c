/* sampler.c - epoch plans: sequential, random and quasi-random orders, rank
 * sharding and batch balancing, as a pure function of (inputs, epoch). */
#include "sampler/sampler.h"
#include "pagestream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL

/* Random streams: a plan's draws never depend on another stream's, so e.g.
 * the page shuffle (shared by all ranks) is the same whatever the rank. */
enum { STREAM_PAGES = 1, STREAM_WINDOW = 2, STREAM_PERM = 3 };

uint64_t ps_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

struct rng { uint64_t s; };

/* The key is chained through the mixer rather than xor-ed together, so
 * (seed 1, epoch 0) and (seed 0, epoch 1) do not collide. */
static void rng_init(struct rng *r, uint64_t seed, uint64_t epoch, uint64_t stream, uint32_t rank)
{
    uint64_t k = ps_mix64(seed + GOLDEN);
    k = ps_mix64(k ^ (epoch + 0x632be59bd9b4e019ULL));
    k = ps_mix64(k ^ ((stream << 32) | rank));
    r->s = k;
}

static inline uint64_t rng_next(struct rng *r)
{
    r->s += GOLDEN;
    return ps_mix64(r->s);
}

/* Full 64x64 -> 128 product; exact, so every platform gets the same bits. */
static inline uint64_t mul128(uint64_t a, uint64_t b, uint64_t *lo)
{
#ifdef __SIZEOF_INT128__
    unsigned __int128 m = (unsigned __int128)a * b;
    *lo = (uint64_t)m;
    return (uint64_t)(m >> 64);
#else
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    *lo = (mid << 32) | (ll & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

/* Uniform in [0, n), n >= 1, without modulo bias (Lemire's method). */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    uint64_t lo, hi = mul128(rng_next(r), n, &lo);
    if (lo < n) {
        uint64_t t = (0 - n) % n;
        while (lo < t)
            hi = mul128(rng_next(r), n, &lo);
    }
    return hi;
}

/* Where rank r's share lies in the epoch's sample sequence, and how many
 * batches every rank yields. See sampler.h for the balancing rules. */
struct share {
    uint64_t start, count;   /* the run [start, start+count) of the sequence */
    uint64_t nbatches;
    uint64_t deliver;        /* samples of the share delivered */
    uint64_t padded;         /* 0 or 1 */
};

static void share_of(const struct ps_sampler_input *in, struct share *s)
{
    uint64_t n = in->nsamples, w = in->world_size, b = in->batch_size, r = in->rank;
    memset(s, 0, sizeof *s);
    if (n == 0)
        return;
    if (in->drop_last) {
        uint64_t base = n / w, rem = n % w;
        s->start = r * base + (r < rem ? r : rem);
        s->count = base + (r < rem);
        s->nbatches = base / b;
        s->deliver = s->nbatches * b;
    } else {
        uint64_t wb = w * b;   /* < 2^64: both factors are 32-bit */
        uint64_t nb = n / wb + (n % wb != 0);
        uint64_t full = (nb - 1) * b;
        uint64_t rest = n - w * full;  /* 1 .. w*b, spread as evenly as possible */
        uint64_t each = rest / w, extra = rest % w;
        s->start = r * (full + each) + (r < extra ? r : extra);
        s->count = full + each + (r < extra);
        s->nbatches = nb;
        s->deliver = s->count;
        s->padded = s->count == full;
    }
}

uint64_t ps_plan_nbatches(const struct ps_sampler_input *in)
{
    struct share s;
    if (!in || in->world_size == 0 || in->rank >= in->world_size || in->batch_size == 0)
        return 0;
    share_of(in, &s);
    return s.nbatches;
}

static int validate(const struct ps_sampler_input *in)
{
    uint64_t n = in->nsamples, np = in->npages;
    if (in->world_size == 0 || in->rank >= in->world_size || in->batch_size == 0)
        return -EINVAL;
    if (in->order != PS_ORDER_SEQUENTIAL && in->order != PS_ORDER_RANDOM &&
        in->order != PS_ORDER_QUASI_RANDOM)
        return -EINVAL;
    if (in->order == PS_ORDER_QUASI_RANDOM && in->window == 0)
        return -EINVAL;
    /* Sample ids are uint32; page indices are kept in uint32 too. */
    if (n > UINT32_MAX || np > UINT32_MAX)
        return -EINVAL;
    if (!in->page_first)
        return np == 0 && n == 0 ? 0 : -EINVAL;
    if (n > 0 && !in->page_samples)
        return -EINVAL;
    if (in->page_first[0] != 0 || in->page_first[np] != n)
        return -EINVAL;
    for (uint64_t p = 0; p < np; p++)
        if (in->page_first[p] > in->page_first[p + 1])
            return -EINVAL;
    if (n == 0)
        return 0;
    uint64_t *seen = calloc((n + 63) / 64, sizeof *seen);
    if (!seen)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t id = in->page_samples[i];
        uint64_t bit = 1ULL << (id & 63);
        if (id >= n || (seen[id >> 6] & bit)) {
            rc = -EINVAL;
            break;
        }
        seen[id >> 6] |= bit;
    }
    free(seen);
    return rc;
}

/* Pages in a shuffled order, identical on every rank for (seed, epoch). */
static uint32_t *page_perm(const struct ps_sampler_input *in, uint64_t epoch)
{
    uint64_t np = in->npages;
    uint32_t *perm = malloc((np ? np : 1) * sizeof *perm);
    if (!perm)
        return NULL;
    for (uint64_t i = 0; i < np; i++)
        perm[i] = (uint32_t)i;
    struct rng r;
    rng_init(&r, in->seed, epoch, STREAM_PAGES, 0);
    for (uint64_t i = np; i > 1; i--) {
        uint64_t j = rng_below(&r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    return perm;
}

struct pool_ent { uint32_t id, lp; };

/* The quasi-random window of one rank: its run of the shuffled page
 * sequence, the pool of samples left in open pages, and the next page. */
struct window {
    const struct ps_sampler_input *in;
    const uint32_t *perm;
    uint64_t start, end;      /* the rank's run of the sequence */
    uint64_t pa, nlp;         /* its pages: perm[pa .. pa+nlp) */
    uint64_t next, seqpos;    /* next page to admit, and where it starts */
    uint64_t open, npool;
    uint32_t *rem;            /* samples left per page (index - pa) */
    struct pool_ent *pool;
};

/* Admit pages until the window is full; boundary pages are clipped to the run. */
static void admit(struct window *w)
{
    const uint64_t *pf = w->in->page_first;
    while (w->open < w->in->window && w->next < w->nlp) {
        uint32_t p = w->perm[w->pa + w->next];
        uint64_t c = pf[p + 1] - pf[p], lo = 0, hi = c;
        if (w->seqpos < w->start)
            lo = w->start - w->seqpos;
        if (w->seqpos + c > w->end)
            hi = w->end - w->seqpos;
        w->seqpos += c;
        if (lo < hi) {
            const uint32_t *ids = w->in->page_samples + pf[p];
            for (uint64_t k = lo; k < hi; k++) {
                w->pool[w->npool].id = ids[k];
                w->pool[w->npool].lp = (uint32_t)w->next;
                w->npool++;
            }
            w->rem[w->next] = (uint32_t)(hi - lo);
            w->open++;
        }
        w->next++;
    }
}

/*
 * Quasi-random draws for the run [s->start, s->start+s->count) of the
 * shuffled page sequence: a window of at most in->window pages with samples
 * left; each draw is uniform over all samples left in the window; an
 * exhausted page makes room for the next one. Writes s->deliver ids.
 */
static int quasi(const struct ps_sampler_input *in, uint64_t epoch, const struct share *s,
                 uint32_t *out)
{
    uint64_t np = in->npages, start = s->start, end = s->start + s->count;
    const uint64_t *pf = in->page_first;
    if (s->deliver == 0)
        return 0;
    uint32_t *perm = page_perm(in, epoch);
    if (!perm)
        return -ENOMEM;

    /* Find the perm indices [pa, pb) of the pages overlapping the run, and
     * the sequence position where page perm[pa] starts. */
    uint64_t pos = 0, pa = np, pb = np, pa_pos = 0, maxcnt = 0;
    for (uint64_t i = 0; i < np; i++) {
        uint64_t c = pf[perm[i] + 1] - pf[perm[i]];
        if (c == 0)
            continue;
        if (pa == np && pos + c > start) {
            pa = i;
            pa_pos = pos;
        }
        if (pa != np && c > maxcnt)
            maxcnt = c;
        pos += c;
        if (pos >= end) {
            pb = i + 1;
            break;
        }
    }

    /* The pool never holds more than window full pages, nor more than the run. */
    uint64_t cap = maxcnt * in->window;
    if (cap / in->window != maxcnt || cap > s->count)
        cap = s->count;
    struct window w = {
        .in = in, .perm = perm, .start = start, .end = end, .pa = pa, .nlp = pb - pa,
        .seqpos = pa_pos,
    };
    w.rem = malloc((w.nlp ? w.nlp : 1) * sizeof *w.rem);
    w.pool = malloc(cap * sizeof *w.pool);
    if (!w.rem || !w.pool) {
        free(w.rem);
        free(w.pool);
        free(perm);
        return -ENOMEM;
    }

    struct rng r;
    rng_init(&r, in->seed, epoch, STREAM_WINDOW, in->rank);
    admit(&w);
    for (uint64_t t = 0; t < s->deliver; t++) {
        uint64_t j = rng_below(&r, w.npool);
        struct pool_ent e = w.pool[j];
        w.pool[j] = w.pool[--w.npool];
        out[t] = e.id;
        if (--w.rem[e.lp] == 0) {
            w.open--;
            admit(&w);
        }
    }
    free(w.rem);
    free(w.pool);
    free(perm);
    return 0;
}

/* The sample at position @p pos of the epoch's sequence (for padding a rank
 * whose share is empty). */
static int seq_sample(const struct ps_sampler_input *in, uint64_t epoch, uint64_t pos, uint32_t *id)
{
    if (in->order != PS_ORDER_QUASI_RANDOM) {
        *id = in->page_samples[pos];
        return 0;
    }
    uint32_t *perm = page_perm(in, epoch);
    if (!perm)
        return -ENOMEM;
    uint64_t at = 0;
    for (uint64_t i = 0; i < in->npages; i++) {
        uint32_t p = perm[i];
        uint64_t c = in->page_first[p + 1] - in->page_first[p];
        if (pos < at + c) {
            *id = in->page_samples[in->page_first[p] + (pos - at)];
            break;
        }
        at += c;
    }
    free(perm);
    return 0;
}

int ps_plan_make(const struct ps_sampler_input *in, uint64_t epoch, struct ps_plan *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!in)
        return -EINVAL;
    int rc = validate(in);
    if (rc < 0)
        return rc;

    struct share s;
    share_of(in, &s);
    uint64_t ntasks = s.deliver + s.padded;
    /* random shuffles the whole share in place before keeping s.deliver */
    uint64_t alloc = in->order == PS_ORDER_RANDOM && s.count > ntasks ? s.count : ntasks;
    uint32_t *v = NULL;
    if (alloc) {
        v = malloc(alloc * sizeof *v);
        if (!v)
            return -ENOMEM;
    }

    switch (in->order) {
    case PS_ORDER_SEQUENTIAL:
        if (s.deliver)
            memcpy(v, in->page_samples + s.start, s.deliver * sizeof *v);
        break;
    case PS_ORDER_RANDOM: {
        struct rng r;
        if (s.count)
            memcpy(v, in->page_samples + s.start, s.count * sizeof *v);
        rng_init(&r, in->seed, epoch, STREAM_PERM, in->rank);
        /* Forward Fisher-Yates: after k steps v[0..k) is a uniform k-sample
         * of the share in uniform order, so drop_last keeps a prefix. */
        uint64_t steps = s.deliver < s.count ? s.deliver : s.count - (s.count > 0);
        for (uint64_t i = 0; i < steps; i++) {
            uint64_t j = i + rng_below(&r, s.count - i);
            uint32_t t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
        break;
    }
    case PS_ORDER_QUASI_RANDOM:
        rc = quasi(in, epoch, &s, v);
        if (rc < 0) {
            free(v);
            return rc;
        }
        break;
    }

    if (s.padded) {
        /* Repeat the rank's last sample: its page is the last one open, so
         * the window bound still holds. An empty share borrows the sample
         * where it would have started (or the last one). */
        if (s.deliver) {
            v[s.deliver] = v[s.deliver - 1];
        } else {
            uint64_t pos = s.start < in->nsamples ? s.start : in->nsamples - 1;
            rc = seq_sample(in, epoch, pos, &v[0]);
            if (rc < 0) {
                free(v);
                return rc;
            }
        }
    }
    if (ntasks == 0) {
        free(v);
        v = NULL;
    } else if (alloc > ntasks) {
        uint32_t *sh = realloc(v, ntasks * sizeof *v);
        if (sh)
            v = sh;
    }

    out->epoch = epoch;
    out->ntasks = ntasks;
    out->nbatches = s.nbatches;
    out->batch_size = in->batch_size;
    out->samples = v;
    out->padded = s.padded;
    out->dropped = s.count - s.deliver;
    return 0;
}

void ps_plan_free(struct ps_plan *p)
{
    if (!p)
        return;
    free(p->samples);
    memset(p, 0, sizeof *p);
}

double ps_plan_class_diversity(const struct ps_plan *p, const int64_t *labels)
{
    if (!p || !labels || p->nbatches == 0 || p->ntasks == 0 || p->batch_size == 0)
        return 0.0;
    /* open-addressing set per batch, cleared by bumping a generation stamp */
    uint64_t cap = 16;
    while (cap < 2ULL * p->batch_size)
        cap <<= 1;
    int64_t *key = malloc(cap * sizeof *key);
    uint64_t *gen = calloc(cap, sizeof *gen);
    if (!key || !gen) {
        free(key);
        free(gen);
        return -1.0;
    }
    uint64_t total = 0, nb = 0;
    for (uint64_t b0 = 0; b0 < p->ntasks; b0 += p->batch_size) {
        uint64_t b1 = b0 + p->batch_size < p->ntasks ? b0 + p->batch_size : p->ntasks;
        uint64_t g = ++nb;
        for (uint64_t i = b0; i < b1; i++) {
            int64_t l = labels[p->samples[i]];
            uint64_t h = ps_mix64((uint64_t)l) & (cap - 1);
            while (gen[h] == g && key[h] != l)
                h = (h + 1) & (cap - 1);
            if (gen[h] != g) {
                gen[h] = g;
                key[h] = l;
                total++;
            }
        }
    }
    free(key);
    free(gen);
    return (double)total / (double)nb;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

double ps_plan_displacement(const struct ps_plan *p)
{
    if (!p || p->ntasks == 0)
        return 0.0;
    /* (id << 32 | position) sorts by id, ties by position; ntasks may exceed
     * 2^32 only for absurd plans, which we do not measure. */
    if (p->ntasks > UINT32_MAX)
        return -1.0;
    uint64_t *k = malloc(p->ntasks * sizeof *k);
    if (!k)
        return -1.0;
    for (uint64_t i = 0; i < p->ntasks; i++)
        k[i] = ((uint64_t)p->samples[i] << 32) | i;
    qsort(k, p->ntasks, sizeof *k, cmp_u64);
    double sum = 0;
    for (uint64_t r = 0; r < p->ntasks; r++) {
        uint64_t i = k[r] & 0xffffffffu;
        sum += (double)(i > r ? i - r : r - i);
    }
    free(k);
    return sum / (double)p->ntasks / (double)p->ntasks;
}
