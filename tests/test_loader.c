/*
 * test_loader.c - the loader end to end on real files: every sample exactly
 * once per epoch (every order, cache size, rank), intact bytes, no reads in
 * a second epoch when the cache holds the dataset, read amplification of
 * quasi-random with a quarter-size cache, resume, errors.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pagestream.h"
#include "format/format.h"
#include "io/io.h"
#include "test.h"

static char dir[256];

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Sample i's bytes: length and content follow from i alone. */
static uint32_t sample_len(uint64_t i, uint32_t maxlen)
{
    uint64_t s = i * 7919 + 1;
    return 1 + (uint32_t)(rng_next(&s) % maxlen);
}

static void sample_fill(uint64_t i, uint8_t *buf, uint32_t len)
{
    uint64_t s = i ^ 0xABCDEF;
    for (uint32_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(rng_next(&s) >> 56);
}

/* Write a bytes+label dataset of n samples; a few huge ones span pages when span_every > 0. */
static int make_ds(const char *path, uint64_t n, uint32_t page_size, uint32_t maxlen, uint32_t span_every,
                   int nclasses)
{
    struct ps_writer_opts wo;
    struct ps_writer *w;
    struct ps_out *out;
    char err[PS_ERRLEN];
    uint8_t *buf = malloc((size_t)page_size * 3 + maxlen);
    const char *classes[64];
    char names[64][16];
    int rc;

    memset(&wo, 0, sizeof wo);
    wo.page_size = page_size;
    wo.nfields = 2;
    wo.fields[0].type = PS_F_BYTES;
    snprintf(wo.fields[0].name, sizeof wo.fields[0].name, "data");
    wo.fields[1].type = PS_F_INT;
    snprintf(wo.fields[1].name, sizeof wo.fields[1].name, "label");
    for (int c = 0; c < nclasses && c < 64; c++) {
        snprintf(names[c], sizeof names[c], "class%02d", c);
        classes[c] = names[c];
    }
    wo.nclasses = (uint32_t)nclasses;
    wo.classes = classes;
    rc = ps_out_open(path, NULL, &out, err);
    if (rc < 0) {
        fprintf(stderr, "ps_out_open: %s\n", err);
        free(buf);
        return rc;
    }
    rc = ps_writer_open(out, &wo, &w, err);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        struct ps_wsample s;
        uint32_t len = span_every && i % span_every == span_every - 1 ? page_size * 2 + 100 : sample_len(i, maxlen);
        memset(&s, 0, sizeof s);
        sample_fill(i, buf, len);
        s.data[0] = buf;
        s.len[0] = len;
        /* classes in runs, as an ImageFolder listing would be */
        s.ival[1] = nclasses ? (int64_t)(i * (uint64_t)nclasses / n) : (int64_t)i;
        rc = ps_writer_add(w, &s, err);
    }
    if (rc == 0)
        rc = ps_writer_finish(w, err);
    if (rc == 0)
        rc = ps_out_commit(out);
    if (rc < 0)
        fprintf(stderr, "make_ds: %s\n", err);
    ps_writer_free(w);
    ps_out_close(out);
    free(buf);
    return rc;
}

struct run_result {
    uint64_t delivered, batches, bad_bytes, dup, epochs_done;
    struct ps_stats st;
};

/* Run `epochs` epochs; count[] gets deliveries per sample over all of them. */
static int run_epochs(const char *path, struct ps_options *o, int epochs, uint32_t *count, uint64_t n,
                      uint32_t maxlen, uint32_t page_size, uint32_t span_every, struct run_result *r, char *err)
{
    ps_loader *l;
    int rc = ps_loader_open(path, o, &l, err);
    uint8_t *expect = malloc((size_t)page_size * 3 + maxlen);

    memset(r, 0, sizeof *r);
    if (rc < 0) {
        free(expect);
        return rc;
    }
    for (int e = 0; e < epochs;) {
        struct ps_batch *b;
        rc = ps_loader_next(l, &b);
        if (rc == PS_EPOCH_END) {
            e++;
            r->epochs_done++;
            continue;
        }
        if (rc < 0) {
            snprintf(err, PS_ERRLEN, "%s", ps_loader_errmsg(l));
            break;
        }
        r->batches++;
        for (uint32_t i = 0; i < b->n; i++) {
            uint64_t id = b->ids[i];
            uint32_t len = span_every && id % span_every == span_every - 1 ? page_size * 2 + 100 : sample_len(id, maxlen);
            if (id >= n) {
                r->bad_bytes++;
                continue;
            }
            count[id]++;
            sample_fill(id, expect, len);
            if (b->sizes[i] != len || memcmp(b->data[i], expect, len) != 0)
                r->bad_bytes++;
        }
        r->delivered += b->n;
        ps_batch_release(b);
    }
    ps_loader_stats(l, &r->st);
    ps_loader_close(l);
    free(expect);
    return rc < 0 ? rc : 0;
}

static void raw_opts(struct ps_options *o)
{
    ps_options_init(o);
    o->transform = PS_TRANSFORM_NONE;
    o->threads = 2;
}

static int test_exactly_once_all_orders(void)
{
    static const uint64_t sizes[] = { 1, 7, 100, 1001 };
    static const uint32_t batches[] = { 1, 16, 64 };
    char path[300], err[PS_ERRLEN];

    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint64_t n = sizes[si];
        snprintf(path, sizeof path, "%s/eo%llu.pgs", dir, (unsigned long long)n);
        CHECK_RC(make_ds(path, n, 65536, 3000, 0, 10));
        for (int order = 0; order <= 2; order++)
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
                for (uint64_t cache_pages = 2; cache_pages <= 64; cache_pages *= 8) {
                    struct ps_options o;
                    struct run_result r;
                    uint32_t *count = calloc(n, sizeof *count);
                    raw_opts(&o);
                    o.order = order;
                    o.batch_size = batches[bi];
                    o.drop_last = 0;
                    o.seed = 42 + n;
                    o.cache_size = cache_pages * 65536;
                    int rc = run_epochs(path, &o, 2, count, n, 3000, 65536, 0, &r, err);
                    CHECKF(rc == 0, "n=%llu order=%d batch=%u cache=%llu pages: %s", (unsigned long long)n, order,
                           batches[bi], (unsigned long long)cache_pages, err);
                    CHECKF(r.bad_bytes == 0, "n=%llu order=%d: %llu samples with wrong bytes", (unsigned long long)n,
                           order, (unsigned long long)r.bad_bytes);
                    for (uint64_t i = 0; i < n; i++)
                        CHECKF(count[i] == 2, "n=%llu order=%d batch=%u cache=%llu: sample %llu delivered %u times in 2 epochs",
                               (unsigned long long)n, order, batches[bi], (unsigned long long)cache_pages,
                               (unsigned long long)i, count[i]);
                    free(count);
                }
    }
    return 0;
}

static int test_ranks_disjoint_union(void)
{
    const uint64_t n = 997;
    char path[300], err[PS_ERRLEN];

    snprintf(path, sizeof path, "%s/ranks.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 2000, 0, 10));
    for (int order = 0; order <= 2; order++)
        for (int world = 1; world <= 4; world++) {
            uint32_t *count = calloc(n, sizeof *count);
            uint64_t batches0 = 0, padded = 0;
            for (int rank = 0; rank < world; rank++) {
                struct ps_options o;
                struct run_result r;
                raw_opts(&o);
                o.order = order;
                o.batch_size = 32;
                o.drop_last = 0;
                o.rank = rank;
                o.world_size = world;
                o.cache_size = 8 * 65536;
                CHECKF(run_epochs(path, &o, 1, count, n, 2000, 65536, 0, &r, err) == 0, "%s", err);
                CHECK(r.bad_bytes == 0);
                if (rank == 0)
                    batches0 = r.batches;
                CHECKF(r.batches == batches0, "world %d order %d: rank %d has %llu batches, rank 0 has %llu", world,
                       order, rank, (unsigned long long)r.batches, (unsigned long long)batches0);
                padded += r.st.padded;
            }
            for (uint64_t i = 0; i < n; i++)
                CHECKF(count[i] >= 1 && count[i] <= 1 + (padded ? 1 : 0),
                       "world %d order %d: sample %llu delivered %u times", world, order, (unsigned long long)i,
                       count[i]);
            free(count);
        }
    return 0;
}

static int test_second_epoch_no_reads(void)
{
    const uint64_t n = 3000;
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;
    struct ps_batch *b;
    uint64_t read_after_first = 0;
    int rc, epochs = 0;

    snprintf(path, sizeof path, "%s/ep2.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 4000, 0, 10));
    raw_opts(&o);
    o.batch_size = 50;
    o.cache_size = 64ull << 20; /* far more than the dataset */
    CHECK_RC(ps_loader_open(path, &o, &l, err));
    while (epochs < 3) {
        rc = ps_loader_next(l, &b);
        CHECKF(rc >= 0, "%s", ps_loader_errmsg(l));
        if (rc == PS_EPOCH_END) {
            struct ps_stats st;
            ps_loader_stats(l, &st);
            if (++epochs == 1)
                read_after_first = st.bytes_read;
            else
                CHECKF(st.bytes_read == read_after_first, "epoch %d read %llu bytes more", epochs,
                       (unsigned long long)(st.bytes_read - read_after_first));
            continue;
        }
        ps_batch_release(b);
    }
    CHECK(read_after_first > 0);
    ps_loader_close(l);
    return 0;
}

static int test_quasi_quarter_cache_amplification(void)
{
    const uint64_t n = 6000;
    const uint32_t ps = 65536;
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    struct run_result r;
    uint32_t *count = calloc(n, sizeof *count);
    double amp;

    snprintf(path, sizeof path, "%s/quasi.pgs", dir);
    CHECK_RC(make_ds(path, n, ps, 1000, 0, 20));
    raw_opts(&o);
    o.order = PS_ORDER_QUASI_RANDOM;
    o.batch_size = 64;
    o.drop_last = 0;
    {
        /* a quarter of the data */
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        o.cache_size = (uint64_t)ftell(f) / 4;
        fclose(f);
    }
    CHECKF(run_epochs(path, &o, 3, count, n, 1000, ps, 0, &r, err) == 0, "%s", err);
    CHECK(r.bad_bytes == 0);
    amp = (double)r.st.bytes_read / (double)r.st.payload_bytes;
    printf("# quasi-random, cache = 1/4 of the data, %llu pages of 64 KiB, window %llu: read amplification %.4f "
           "over 3 epochs\n",
           (unsigned long long)r.st.npages, (unsigned long long)r.st.window_pages, amp);
    CHECKF(amp <= 1.05, "read amplification %.3f (bytes read / payload delivered)", amp);
    /* reading whole pages costs the unused tail of each page: compare with one read per page per epoch */
    {
        double per_epoch_pages = (double)r.st.reads / 3.0 / (double)r.st.npages;
        printf("# page reads per page per epoch: %.4f\n", per_epoch_pages);
        CHECKF(per_epoch_pages <= 1.05, "each page read %.3f times per epoch (want <= 1.05)", per_epoch_pages);
    }
    for (uint64_t i = 0; i < n; i++)
        CHECK(count[i] == 3);
    free(count);
    return 0;
}

static int test_random_small_cache_reads_samples(void)
{
    const uint64_t n = 2000;
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    struct run_result r;
    uint32_t *count = calloc(n, sizeof *count);

    snprintf(path, sizeof path, "%s/rand.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 5000, 0, 10));
    raw_opts(&o);
    o.order = PS_ORDER_RANDOM;
    o.batch_size = 32;
    o.drop_last = 0;
    o.cache_size = 1 << 20;
    CHECKF(run_epochs(path, &o, 2, count, n, 5000, 65536, 0, &r, err) == 0, "%s", err);
    CHECK(r.st.unit_mode == 1);
    CHECK(r.bad_bytes == 0);
    for (uint64_t i = 0; i < n; i++)
        CHECK(count[i] == 2);
    printf("# random order, 1 MiB cache: sample reads, amplification %.3f\n",
           (double)r.st.bytes_read / (double)r.st.payload_bytes);
    free(count);
    return 0;
}

static int test_spanning_samples(void)
{
    const uint64_t n = 300;
    char path[300], err[PS_ERRLEN];

    snprintf(path, sizeof path, "%s/span.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 3000, 37, 5));
    for (int order = 0; order <= 2; order++) {
        struct ps_options o;
        struct run_result r;
        uint32_t *count = calloc(n, sizeof *count);
        raw_opts(&o);
        o.order = order;
        o.batch_size = 8;
        o.drop_last = 0;
        o.cache_size = 8 * 65536;
        CHECKF(run_epochs(path, &o, 2, count, n, 3000, 65536, 37, &r, err) == 0, "order %d: %s", order, err);
        CHECKF(r.bad_bytes == 0, "order %d: %llu bad samples", order, (unsigned long long)r.bad_bytes);
        for (uint64_t i = 0; i < n; i++)
            CHECKF(count[i] == 2, "order %d: sample %llu x%u", order, (unsigned long long)i, count[i]);
        free(count);
    }
    return 0;
}

/* Stop after k batches, reopen at (epoch, k): the same batches follow. */
static int test_resume_identical(void)
{
    const uint64_t n = 1500;
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;
    struct ps_batch *b;
    uint64_t *ref = NULL, nref = 0, cap = 0;
    const uint64_t k = 7;

    snprintf(path, sizeof path, "%s/resume.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 3000, 0, 10));
    for (int order = 0; order <= 2; order++) {
        raw_opts(&o);
        o.order = order;
        o.batch_size = 40;
        o.seed = 9;
        o.cache_size = 6 * 65536;
        /* uninterrupted: epoch 0 and 1 */
        nref = 0;
        CHECK_RC(ps_loader_open(path, &o, &l, err));
        for (int e = 0; e < 2;) {
            int rc = ps_loader_next(l, &b);
            CHECKF(rc >= 0, "%s", ps_loader_errmsg(l));
            if (rc == PS_EPOCH_END) {
                e++;
                continue;
            }
            for (uint32_t i = 0; i < b->n; i++) {
                if (nref == cap) {
                    cap = cap ? cap * 2 : 1024;
                    ref = realloc(ref, cap * sizeof *ref);
                }
                ref[nref++] = b->ids[i];
            }
            ps_batch_release(b);
        }
        ps_loader_close(l);
        /* resumed at epoch 1, batch k */
        o.start_epoch = 1;
        o.start_batch = k;
        CHECK_RC(ps_loader_open(path, &o, &l, err));
        {
            uint64_t nb = ps_loader_epoch_batches(l), pos = nb * 40 + k * 40, e, bb;
            ps_loader_position(l, &e, &bb);
            CHECK(e == 1 && bb == k);
            for (;;) {
                int rc = ps_loader_next(l, &b);
                CHECKF(rc >= 0, "%s", ps_loader_errmsg(l));
                if (rc == PS_EPOCH_END)
                    break;
                for (uint32_t i = 0; i < b->n; i++, pos++)
                    CHECKF(pos < nref && ref[pos] == b->ids[i], "order %d: resumed sample at %llu differs", order,
                           (unsigned long long)pos);
                ps_batch_release(b);
            }
            CHECKF(pos == nref, "order %d: resumed run delivered %llu of %llu", order, (unsigned long long)pos,
                   (unsigned long long)nref);
        }
        /* seek back inside the same loader */
        CHECK_RC(ps_loader_seek(l, 0, 3));
        CHECK_RC(ps_loader_next(l, &b));
        for (uint32_t i = 0; i < b->n; i++)
            CHECK(ref[3 * 40 + i] == b->ids[i]);
        ps_batch_release(b);
        ps_loader_close(l);
    }
    free(ref);
    return 0;
}

/* Batches kept past the ring depth keep their contents. */
static int test_held_batches_not_overwritten(void)
{
    const uint64_t n = 800;
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;
    struct ps_batch *held[40];
    uint8_t *copy[40];
    int nh = 0;

    snprintf(path, sizeof path, "%s/held.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 1000, 0, 4));
    raw_opts(&o);
    o.batch_size = 16;
    o.ring_depth = 2;
    CHECK_RC(ps_loader_open(path, &o, &l, err));
    while (nh < 40) {
        int rc = ps_loader_next(l, &held[nh]);
        CHECKF(rc >= 0, "%s", ps_loader_errmsg(l));
        if (rc == PS_EPOCH_END)
            continue;
        copy[nh] = malloc(held[nh]->sizes[0]);
        memcpy(copy[nh], held[nh]->data[0], held[nh]->sizes[0]);
        nh++;
    }
    for (int i = 0; i < nh; i++) {
        CHECKF(memcmp(copy[i], held[i]->data[0], held[i]->sizes[0]) == 0, "held batch %d was overwritten", i);
        ps_batch_release(held[i]);
        free(copy[i]);
    }
    ps_loader_close(l);
    return 0;
}

static int test_errors(void)
{
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;

    raw_opts(&o);
    CHECK(ps_loader_open("/nonexistent/x.pgs", &o, &l, err) < 0);
    CHECKF(strstr(err, "/nonexistent/x.pgs") != NULL, "message does not name the file: %s", err);
    snprintf(path, sizeof path, "%s/err.pgs", dir);
    CHECK_RC(make_ds(path, 100, 65536, 3000, 0, 2));
    o.cache_size = 1000;
    CHECK(ps_loader_open(path, &o, &l, err) == PS_ECONFIG);
    CHECKF(strstr(err, "at least") != NULL, "no minimum stated: %s", err);
    raw_opts(&o);
    o.rank = 3;
    o.world_size = 2;
    CHECK(ps_loader_open(path, &o, &l, err) == PS_ECONFIG);
    raw_opts(&o);
    o.transform = PS_TRANSFORM_RANDOM_RESIZED_CROP;
    CHECK(ps_loader_open(path, &o, &l, err) == PS_ECONFIG); /* bytes field: nothing to crop */
    /* a corrupted page is re-read, then reported */
    {
        FILE *f = fopen(path, "r+b");
        uint8_t c;
        fseek(f, 4096 + 100, SEEK_SET);
        CHECK(fread(&c, 1, 1, f) == 1);
        c ^= 0x40;
        fseek(f, 4096 + 100, SEEK_SET);
        fwrite(&c, 1, 1, f);
        fclose(f);
    }
    raw_opts(&o);
    o.order = PS_ORDER_SEQUENTIAL;
    o.batch_size = 10;
    CHECK_RC(ps_loader_open(path, &o, &l, err));
    {
        struct ps_batch *b;
        int rc;
        while ((rc = ps_loader_next(l, &b)) == 0)
            ps_batch_release(b);
        CHECKF(rc == PS_ECHECKSUM, "got %d (%s)", rc, ps_loader_errmsg(l));
        CHECKF(strstr(ps_loader_errmsg(l), "page 0") != NULL, "message: %s", ps_loader_errmsg(l));
    }
    ps_loader_close(l);
    return 0;
}

static int test_empty_dataset(void)
{
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;
    struct ps_batch *b;

    snprintf(path, sizeof path, "%s/empty.pgs", dir);
    CHECK_RC(make_ds(path, 0, 65536, 10, 0, 0));
    raw_opts(&o);
    o.cache_size = 1 << 20;
    CHECK_RC(ps_loader_open(path, &o, &l, err));
    CHECK(ps_loader_epoch_batches(l) == 0);
    CHECK(ps_loader_next(l, &b) == PS_EPOCH_END);
    CHECK(ps_loader_next(l, &b) == PS_EPOCH_END);
    ps_loader_close(l);
    return 0;
}

static int test_close_mid_epoch(void)
{
    char path[300], err[PS_ERRLEN];
    struct ps_options o;
    ps_loader *l;
    struct ps_batch *b;

    snprintf(path, sizeof path, "%s/mid.pgs", dir);
    CHECK_RC(make_ds(path, 2000, 65536, 3000, 0, 3));
    raw_opts(&o);
    o.batch_size = 10;
    o.cache_size = 4 * 65536;
    for (int i = 0; i < 5; i++) {
        CHECK_RC(ps_loader_open(path, &o, &l, err));
        for (int k = 0; k < i * 3; k++) {
            CHECK(ps_loader_next(l, &b) == 0);
            if (k % 2)
                ps_batch_release(b);
        }
        ps_loader_close(l); /* with batches held, reads in flight */
    }
    return 0;
}

/* The fault matrix on a local file: errors, 429s, resets, short reads,
 * corrupted reads and stalls; every sample still arrives once and intact. */
static int test_fault_matrix_exactly_once(void)
{
    const uint64_t n = 4000;
    char path[300], err[PS_ERRLEN];

    snprintf(path, sizeof path, "%s/fault.pgs", dir);
    CHECK_RC(make_ds(path, n, 65536, 3000, 0, 10));
    for (int order = PS_ORDER_RANDOM; order <= PS_ORDER_QUASI_RANDOM; order++) {
        struct ps_options o;
        struct run_result r;
        uint32_t *count = calloc(n, sizeof *count);
        raw_opts(&o);
        o.order = order;
        o.batch_size = 32;
        o.drop_last = 0;
        o.cache_size = 16 * 65536;
        o.retries = 10;
        o.fault = "seed=7,error=0.05,http429=0.01,reset=0.01,short=0.01,corrupt=0.01,stall=0.001,stall_ms=300";
        CHECKF(run_epochs(path, &o, 2, count, n, 3000, 65536, 0, &r, err) == 0, "order %d: %s", order, err);
        CHECKF(r.bad_bytes == 0, "order %d: %llu corrupted samples delivered", order, (unsigned long long)r.bad_bytes);
        for (uint64_t i = 0; i < n; i++)
            CHECKF(count[i] == 2, "order %d: sample %llu delivered %u times in 2 epochs", order,
                   (unsigned long long)i, count[i]);
        printf("# fault matrix, %s: 2 epochs x %llu samples, %llu reads, %llu retries, %llu re-reads after "
               "checksum failures\n",
               order == PS_ORDER_RANDOM ? "random" : "quasi_random", (unsigned long long)n,
               (unsigned long long)r.st.reads, (unsigned long long)r.st.retries, (unsigned long long)r.st.refetches);
        CHECK(r.st.retries > 0);
        CHECK(r.st.refetches > 0);
        free(count);
    }
    return 0;
}

/* FFCV .beton fixtures through the loader: every sample once, bytes equal to
 * the file's bytes at the manifest's pointer, labels equal to the manifest. */
static int beton_fixture(const char *name, int transform)
{
    char path[512], csv[512], line[2048], err[PS_ERRLEN];
    uint64_t *ptr = NULL, *size = NULL, n = 0;
    int64_t *label = NULL;
    uint8_t *file = NULL;
    long fsize;
    FILE *f;

    snprintf(path, sizeof path, "../shared/fixtures/ffcv/%s.beton", name);
    snprintf(csv, sizeof csv, "../shared/fixtures/ffcv/%s.manifest.csv", name);
    f = fopen(csv, "r");
    if (!f)
        SKIP("%s not found (CI clones the repository with ../shared beside it)", csv);
    while (fgets(line, sizeof line, f)) {
        unsigned long long idx, p, sz;
        long long lab;
        char *q;
        if (line[0] < '0' || line[0] > '9')
            continue;
        /* index,mode,w,h,"[shape]",ptr,size,sha,label,... */
        q = strchr(line, ']');
        if (!q || sscanf(line, "%llu", &idx) != 1 || sscanf(q + 2, ",%llu,%llu,%*64[0-9a-f],%lld", &p, &sz, &lab) != 3)
            continue;
        ptr = realloc(ptr, (n + 1) * sizeof *ptr);
        size = realloc(size, (n + 1) * sizeof *size);
        label = realloc(label, (n + 1) * sizeof *label);
        CHECK(idx == n);
        ptr[n] = p;
        size[n] = sz;
        label[n] = lab;
        n++;
    }
    fclose(f);
    CHECKF(n == 300, "%s: %llu manifest rows", csv, (unsigned long long)n);
    f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    fsize = ftell(f);
    fseek(f, 0, SEEK_SET);
    file = malloc((size_t)fsize);
    CHECK(fread(file, 1, (size_t)fsize, f) == (size_t)fsize);
    fclose(f);
    for (int order = 0; order <= 2; order++) {
        struct ps_options o;
        ps_loader *l;
        uint32_t *count = calloc(n, sizeof *count);
        int rc;
        raw_opts(&o);
        o.transform = transform;
        o.crop = 64;
        o.order = order;
        o.batch_size = 16;
        o.drop_last = 0;
        o.cache_size = 2 * (2u << 20);
        CHECKF(ps_loader_open(path, &o, &l, err) == 0, "%s", err);
        for (;;) {
            struct ps_batch *b;
            rc = ps_loader_next(l, &b);
            if (rc == PS_EPOCH_END)
                break;
            CHECKF(rc == 0, "%s", ps_loader_errmsg(l));
            for (uint32_t i = 0; i < b->n; i++) {
                uint64_t id = b->ids[i];
                CHECK(id < n);
                count[id]++;
                CHECKF(b->labels[i] == label[id], "sample %llu: label %lld, manifest %lld", (unsigned long long)id,
                       (long long)b->labels[i], (long long)label[id]);
                if (transform == PS_TRANSFORM_NONE)
                    CHECKF(b->sizes[i] == size[id] && memcmp(b->data[i], file + ptr[id], size[id]) == 0,
                           "%s sample %llu: bytes differ from the file at the manifest's pointer", name,
                           (unsigned long long)id);
            }
            ps_batch_release(b);
        }
        for (uint64_t i = 0; i < n; i++)
            CHECKF(count[i] == 1, "%s order %d: sample %llu delivered %u times", name, order, (unsigned long long)i,
                   count[i]);
        ps_loader_close(l);
        free(count);
    }
    free(ptr);
    free(size);
    free(label);
    free(file);
    return 0;
}

static int test_beton_jpg_fixture(void)
{
    int rc = beton_fixture("ffcv_jpg_int", PS_TRANSFORM_NONE);
    return rc ? rc : beton_fixture("ffcv_jpg_int", PS_TRANSFORM_RANDOM_RESIZED_CROP);
}

static int test_beton_raw_fixture(void)
{
    int rc = beton_fixture("ffcv_raw_int_float_bytes", PS_TRANSFORM_NONE);
    return rc ? rc : beton_fixture("ffcv_raw_int_float_bytes", PS_TRANSFORM_CENTER_CROP);
}

static int setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/ps_test_loader.%d", (int)getpid());
    return mkdir(dir, 0700);
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup failed\n");
}

int main(int argc, char **argv)
{
    static const struct t_case cases[] = {
        T(test_exactly_once_all_orders), T(test_ranks_disjoint_union), T(test_second_epoch_no_reads),
        T(test_quasi_quarter_cache_amplification), T(test_random_small_cache_reads_samples),
        T(test_spanning_samples), T(test_resume_identical), T(test_held_batches_not_overwritten),
        T(test_errors), T(test_empty_dataset), T(test_close_mid_epoch), T(test_fault_matrix_exactly_once),
        T(test_beton_jpg_fixture), T(test_beton_raw_fixture),
    };
    int rc;
    if (setup() != 0) {
        perror("mkdir");
        return 1;
    }
    rc = t_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
    if (!getenv("KEEP")) cleanup();
    return rc;
}
