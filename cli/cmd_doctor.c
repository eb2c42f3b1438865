/*
 * cmd_doctor.c - `pagestream doctor URL`: time each stage of the pipeline
 * alone (storage reads, decode, the whole loader), name the one that bounds
 * throughput and suggest the flags that would move it.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "decode/decode.h"
#include "sampler/sampler.h"

static const char doctor_help[] =
    "usage: pagestream doctor URL [options]\n"
    "Measure each stage alone, then the whole pipeline, and say which one bounds throughput\n"
    "and which flags would help:\n"
    "  1. storage: reads of whole pages (and of single samples, and of 4 pages) through the\n"
    "     backend at a few queue depths, in MB/s and the images/s that would feed;\n"
    "  2. decode: crop-aware JPEG decode of a sample of the dataset's images in memory, on\n"
    "     --threads workers, in ms per image and images/s;\n"
    "  3. pipeline: the loader itself (cache, prefetch, workers) for --seconds.\n"
    "\n"
    "options:\n"
    "  --seconds N         time spent on each stage (default 5)\n"
    "  --cache-size SIZE   page cache of the pipeline stage (default: from the cgroup limit)\n"
    "  --order ORDER       sequential | random | quasi_random (default quasi_random)\n"
    "  --threads N         decode workers (default: all cores)\n"
    "  --batch-size N      samples per batch (default 256)\n"
    "  --transform T       rrc | center | none (default rrc)\n"
    "  --crop N            output side in pixels (default 224)\n"
    "  --images N          images sampled for the decode stage (default 200)\n"
    "  --json              machine-readable output\n"
    CLI_READ_HELP;

enum {
    OPT_SECONDS = CLI_OPT_FIRST_FREE, OPT_CACHE, OPT_ORDER, OPT_THREADS, OPT_BATCH, OPT_TRANSFORM, OPT_CROP,
    OPT_IMAGES, OPT_JSON, OPT_HELP
};

static const struct option doctor_opts[] = {
    { "seconds", required_argument, NULL, OPT_SECONDS },
    { "cache-size", required_argument, NULL, OPT_CACHE },
    { "order", required_argument, NULL, OPT_ORDER },
    { "threads", required_argument, NULL, OPT_THREADS },
    { "batch-size", required_argument, NULL, OPT_BATCH },
    { "transform", required_argument, NULL, OPT_TRANSFORM },
    { "crop", required_argument, NULL, OPT_CROP },
    { "images", required_argument, NULL, OPT_IMAGES },
    { "json", no_argument, NULL, OPT_JSON },
    { "help", no_argument, NULL, OPT_HELP },
    CLI_READ_LONGOPTS,
    { NULL, 0, NULL, 0 }
};

#define MAX_POINTS 8
#define MAX_ADVICE 12
/* the read buffers of one storage measurement stay below this */
#define READ_BUF_CAP (256ull << 20)

enum unit_kind { UNIT_SAMPLE = 0, UNIT_PAGE = 1, UNIT_PAGES4 = 4 };

struct st_point {
    int kind;          /* enum unit_kind */
    int qd;
    uint64_t req_bytes; /* mean request length */
    uint64_t reqs, bytes;
    double secs, mb_s, iops, lat_ms, images_s;
    int rc;            /* 0, or the error that ended it */
    char err[160];
};

struct dec_result {
    int ran;
    int threads;
    uint32_t images_sampled;
    uint64_t images;
    double secs, images_s, cpu_ms, mean_kb;
    int rc;
    char err[PS_ERRLEN];
};

struct pipe_result {
    int ran, rc;
    char err[PS_ERRLEN];
    uint64_t images, batches, epochs; /* epochs: epoch ends seen (read amplification needs one) */
    double secs, first_batch_s, images_s, mb_s, cpu_ms, amp, hit_rate, wait_io_s, wait_batch_s;
    struct ps_stats st;
    int threads;
};

struct doctor {
    const char *url;
    struct ps_io_opts io;
    struct ps_options o;
    struct ps_dataset *ds;
    double seconds;
    uint32_t nimages;
    int cores;
    int threads;        /* workers the pipeline and decode stages use */
    int def_qd;         /* the backend's depth the loader would use */
    const char *backend;
    uint64_t data_bytes; /* npages * page_size */
    double fill;        /* payload / data_bytes */
    struct st_point pts[MAX_POINTS];
    int npts;
    struct dec_result dec;
    struct pipe_result pipe;
    const char *bound;
    char advice[MAX_ADVICE][512];
    int nadvice;
};

static int cores_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *kind_name(int k)
{
    return k == UNIT_SAMPLE ? "sample" : k == UNIT_PAGE ? "page" : "4 pages";
}

static void advise(struct doctor *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void advise(struct doctor *d, const char *fmt, ...)
{
    va_list ap;
    if (d->nadvice >= MAX_ADVICE)
        return;
    va_start(ap, fmt);
    vsnprintf(d->advice[d->nadvice++], sizeof d->advice[0], fmt, ap);
    va_end(ap);
}

/* ---------------- stage 1: storage ---------------- */

/* Next read of a measurement: distinct pages (or samples) in a seeded order,
 * so no unit is read twice before all were. */
struct walker {
    uint64_t n, i, mult, add;
};

static void walker_init(struct walker *w, uint64_t n, uint64_t seed)
{
    w->n = n ? n : 1;
    w->i = 0;
    /* an affine permutation of [0, n): a multiplier coprime with n */
    w->mult = (ps_mix64(seed) % w->n) | 1;
    while (w->n > 1) {
        uint64_t a = w->mult, b = w->n;
        while (b) {
            uint64_t t = a % b;
            a = b;
            b = t;
        }
        if (a == 1)
            break;
        w->mult += 2;
    }
    w->add = ps_mix64(seed + 1) % w->n;
}

static uint64_t walker_next(struct walker *w)
{
    uint64_t v = (uint64_t)(((unsigned __int128)w->i * w->mult + w->add) % w->n);
    w->i++;
    return v;
}

/* The byte range of unit u of this kind; 0 when it cannot be read as one request. */
static int unit_range(const struct doctor *d, int kind, uint64_t u, uint64_t *off, uint64_t *len)
{
    const struct ps_dataset *ds = d->ds;
    if (kind == UNIT_SAMPLE) {
        const struct ps_ds_sample *s = &ds->samples[u];
        uint64_t a = s->off, e = s->off + s->len;
        if (d->io.direct) {
            a &= ~4095ull;
            e = (e + 4095) & ~4095ull;
            if (e > ds->file_size)
                return 0;
        }
        *off = a;
        *len = e - a;
    } else {
        uint64_t a = ps_ds_page_offset(ds, u * (uint64_t)kind), e = a + (uint64_t)kind * ds->page_size;
        if (e > ds->file_size)
            e = ds->file_size;
        if (d->io.direct)
            e &= ~4095ull;
        if (e <= a)
            return 0;
        *off = a;
        *len = e - a;
    }
    return 1;
}

static void measure_reads(struct doctor *d, int kind, int qd, double seconds, struct st_point *pt)
{
    const struct ps_dataset *ds = d->ds;
    struct ps_io_opts io = d->io;
    struct ps_io *h = NULL;
    struct walker w;
    uint64_t nunits, slot_len, t0, t_ramp, deadline, lat_sum = 0, *sent = NULL;
    /* all completions, and those inside the timed window (after the ramp, before the deadline) */
    uint64_t all_reqs = 0, all_bytes = 0, all_lat = 0;
    uint8_t *buf = NULL;
    int *free_slots = NULL, nfree, inflight = 0, rc;
    char err[PS_ERRLEN] = "";

    memset(pt, 0, sizeof *pt);
    pt->kind = kind;
    pt->qd = qd;
    if (kind == UNIT_SAMPLE) {
        nunits = ds->nsamples;
        slot_len = ((uint64_t)ds->max_sample_len + 2 * 4096 + 4095) & ~4095ull;
    } else {
        nunits = ds->npages / (uint64_t)kind;
        slot_len = (uint64_t)kind * ds->page_size;
    }
    if (!nunits) {
        pt->rc = PS_ECONFIG;
        snprintf(pt->err, sizeof pt->err, "the dataset has fewer than %d pages", kind);
        return;
    }
    /* keep the buffers bounded (and inside a small memory cgroup) */
    {
        uint64_t cap = READ_BUF_CAP, lim = ps_cgroup_memory_limit();
        if (lim && lim / 4 < cap)
            cap = lim / 4;
        while (qd > 1 && (uint64_t)qd * slot_len > cap)
            qd /= 2;
        pt->qd = qd;
    }
    io.queue_depth = qd;
    rc = ps_io_open(d->url, &io, &h, err);
    if (rc < 0) {
        pt->rc = rc;
        snprintf(pt->err, sizeof pt->err, "%s", err);
        return;
    }
    if (posix_memalign((void **)&buf, 4096, (size_t)qd * slot_len) != 0 ||
        !(free_slots = malloc((size_t)qd * sizeof *free_slots)) || !(sent = calloc((size_t)qd, sizeof *sent))) {
        pt->rc = -ENOMEM;
        snprintf(pt->err, sizeof pt->err, "out of memory for %d buffers of %llu bytes", qd,
                 (unsigned long long)slot_len);
        goto out;
    }
    ps_io_register_buffers(h, buf, (size_t)qd * slot_len);
    for (int i = 0; i < qd; i++)
        free_slots[i] = qd - 1 - i;
    nfree = qd;
    walker_init(&w, nunits, 0x5eed ^ (uint64_t)kind * 131 ^ (uint64_t)qd);
    t0 = ps_now_ns();
    deadline = t0 + (uint64_t)(seconds * 1e9);
    /* like fio's ramp_time: the first fifth fills the queue and is not counted, nor is the drain */
    t_ramp = t0 + (uint64_t)(seconds * 0.2e9);
    for (;;) {
        struct ps_io_cqe cq[64];
        uint64_t now = ps_now_ns();
        int n;
        /* keep qd reads in flight until the deadline */
        while (nfree > 0 && now < deadline) {
            struct ps_io_req r;
            uint64_t off, len;
            int tries = 0;
            while (!unit_range(d, kind, walker_next(&w), &off, &len))
                if (++tries > 8)
                    break;
            if (tries > 8)
                break;
            r.offset = off;
            r.length = len;
            r.buf = buf + (size_t)free_slots[nfree - 1] * slot_len;
            r.cookie = (uint64_t)free_slots[nfree - 1];
            n = ps_io_submit(h, &r, 1);
            if (n < 0) {
                pt->rc = n;
                snprintf(pt->err, sizeof pt->err, "%s", *ps_io_errmsg(h) ? ps_io_errmsg(h) : ps_strerror(n));
                goto drain;
            }
            if (n == 0)
                break;
            sent[free_slots[nfree - 1]] = now;
            nfree--;
            inflight++;
        }
        if (inflight == 0)
            break;
        n = ps_io_reap(h, cq, 64, 1, 1000);
        if (n < 0) {
            pt->rc = n;
            snprintf(pt->err, sizeof pt->err, "%s", *ps_io_errmsg(h) ? ps_io_errmsg(h) : ps_strerror(n));
            goto drain;
        }
        now = ps_now_ns();
        for (int i = 0; i < n; i++) {
            int s = (int)cq[i].cookie;
            inflight--;
            free_slots[nfree++] = s;
            if (cq[i].res < 0) {
                if (!pt->rc) {
                    pt->rc = (int)cq[i].res;
                    snprintf(pt->err, sizeof pt->err, "%s",
                             *ps_io_errmsg(h) ? ps_io_errmsg(h) : ps_strerror((int)cq[i].res));
                }
                continue;
            }
            all_reqs++;
            all_bytes += (uint64_t)cq[i].res;
            all_lat += now - sent[s];
            if (now > t_ramp && now <= deadline) {
                pt->reqs++;
                pt->bytes += (uint64_t)cq[i].res;
                lat_sum += now - sent[s];
            }
        }
        if (pt->rc)
            goto drain;
    }
    goto done;
drain:
    /* an error: collect what is in flight so the buffers can be freed */
    while (inflight > 0) {
        struct ps_io_cqe cq[64];
        int n = ps_io_reap(h, cq, 64, 1, 5000);
        if (n <= 0)
            break;
        inflight -= n;
    }
done:
    if (pt->reqs >= 4) {
        pt->secs = (double)(deadline - t_ramp) / 1e9;
    } else {
        /* reads slower than the window: the whole run, drain included, is the best figure there is */
        pt->secs = (double)(ps_now_ns() - t0) / 1e9;
        pt->reqs = all_reqs;
        pt->bytes = all_bytes;
        lat_sum = all_lat;
    }
    if (pt->secs > 0) {
        pt->mb_s = (double)pt->bytes / 1e6 / pt->secs;
        pt->iops = (double)pt->reqs / pt->secs;
    }
    pt->req_bytes = pt->reqs ? pt->bytes / pt->reqs : slot_len;
    pt->lat_ms = pt->reqs ? (double)lat_sum / (double)pt->reqs / 1e6 : 0;
    /* what these reads would feed: whole pages carry d->fill payload per byte */
    if (pt->secs > 0 && ds->payload_bytes && ds->nsamples) {
        double mean_sample = (double)ds->payload_bytes / (double)ds->nsamples;
        double payload_per_byte = kind == UNIT_SAMPLE ? (double)ds->payload_bytes / (double)ds->nsamples /
                                                            (pt->reqs ? (double)pt->bytes / (double)pt->reqs : 1)
                                                      : d->fill;
        pt->images_s = (double)pt->bytes * payload_per_byte / mean_sample / pt->secs;
    }
out:
    if (inflight > 0) {
        /* the backend still owns buffers: close it first */
        ps_io_close(h);
        h = NULL;
    }
    ps_io_close(h);
    free(buf);
    free(free_slots);
    free(sent);
}

static void stage_storage(struct doctor *d, int quiet)
{
    int qds[4], nq = 0, D = d->def_qd;
    double per;
    int cand[4] = { 1, 4, D, 2 * D };

    for (int i = 0; i < 4; i++) {
        int dup = 0;
        for (int k = 0; k < nq; k++)
            dup |= qds[k] == cand[i];
        if (!dup && cand[i] >= 1)
            qds[nq++] = cand[i];
    }
    /* sort */
    for (int i = 1; i < nq; i++)
        for (int k = i; k > 0 && qds[k] < qds[k - 1]; k--) {
            int t = qds[k];
            qds[k] = qds[k - 1];
            qds[k - 1] = t;
        }
    per = d->seconds / (double)(nq + 2);
    if (per < 0.2)
        per = 0.2;
    for (int i = 0; i < nq; i++) {
        if (!quiet)
            fprintf(stderr, "doctor: storage, whole pages at queue depth %d ...\n", qds[i]);
        measure_reads(d, UNIT_PAGE, qds[i], per, &d->pts[d->npts++]);
    }
    if (!quiet)
        fprintf(stderr, "doctor: storage, single samples and 4-page reads at queue depth %d ...\n", D);
    measure_reads(d, UNIT_SAMPLE, D, per, &d->pts[d->npts++]);
    if (d->ds->npages >= 8)
        measure_reads(d, UNIT_PAGES4, D, per, &d->pts[d->npts++]);
}

/* ---------------- stage 2: decode ---------------- */

struct dec_shared {
    const struct ps_decode_params *dp;
    uint8_t **img;
    uint32_t *len, *h, *w;
    uint8_t *kind;
    uint32_t n;
    uint64_t deadline;
    uint32_t out_bytes;
};

struct dec_thread {
    pthread_t t;
    struct dec_shared *sh;
    int idx, nthreads;
    uint64_t images;
    double cpu_s;
    int rc;
    char err[PS_ERRLEN];
};

static void *dec_main(void *arg)
{
    struct dec_thread *t = arg;
    struct dec_shared *sh = t->sh;
    struct ps_decoder *dec = NULL;
    uint8_t *out = malloc(sh->out_bytes);
    double c0 = thread_cpu_s();
    uint64_t round = 0;

    if (!out || ps_decoder_create(sh->dp, &dec) < 0) {
        t->rc = -ENOMEM;
        snprintf(t->err, sizeof t->err, "cannot create a decoder");
        free(out);
        return NULL;
    }
    /* each thread walks its own stride of the sample; a new round draws new crops */
    for (uint32_t i = (uint32_t)t->idx;; i += (uint32_t)t->nthreads) {
        int rc;
        if (i >= sh->n) {
            i = (uint32_t)t->idx % sh->n;
            round++;
        }
        if (ps_now_ns() >= sh->deadline && t->images > 0)
            break;
        if (sh->kind[i] == PS_F_JPEG)
            rc = ps_decode_jpeg(dec, sh->img[i], sh->len[i], ps_mix64(i * 7919ull + round), out, NULL, t->err);
        else
            rc = ps_decode_raw(dec, sh->img[i], sh->h[i], sh->w[i], ps_mix64(i * 7919ull + round), out, NULL,
                               t->err);
        if (rc < 0) {
            t->rc = rc;
            break;
        }
        t->images++;
    }
    t->cpu_s = thread_cpu_s() - c0;
    ps_decoder_destroy(dec);
    free(out);
    return NULL;
}

static void stage_decode(struct doctor *d, struct ps_io *mio)
{
    const struct ps_dataset *ds = d->ds;
    struct dec_result *r = &d->dec;
    struct ps_decode_params dp;
    struct dec_shared sh = { 0 };
    struct dec_thread *th = NULL;
    uint8_t *tmp = NULL;
    uint64_t bytes = 0, t0;
    uint32_t want = d->nimages;
    struct walker w;

    r->threads = d->threads;
    if (d->o.transform == PS_TRANSFORM_NONE) {
        snprintf(r->err, sizeof r->err, "transform none: samples are delivered as stored, nothing to decode");
        return;
    }
    if (ds->image_field < 0 || ds->nsamples == 0) {
        r->rc = PS_ECONFIG;
        snprintf(r->err, sizeof r->err, "%s: no image field to decode", ds->name);
        return;
    }
    if (want > ds->nsamples)
        want = (uint32_t)ds->nsamples;
    sh.img = calloc(want, sizeof *sh.img);
    sh.len = calloc(want, sizeof *sh.len);
    sh.h = calloc(want, sizeof *sh.h);
    sh.w = calloc(want, sizeof *sh.w);
    sh.kind = calloc(want, 1);
    if (posix_memalign((void **)&tmp, 4096, ((uint64_t)ds->max_sample_len + 2 * 4096 + 4095) & ~4095ull) != 0)
        tmp = NULL;
    if (!sh.img || !sh.len || !sh.h || !sh.w || !sh.kind || !tmp) {
        r->rc = -ENOMEM;
        snprintf(r->err, sizeof r->err, "out of memory");
        goto out;
    }
    /* a seeded spread of images over the whole file, read once into memory */
    walker_init(&w, ds->nsamples, 0xdec0de);
    for (uint32_t k = 0; k < want; k++) {
        uint64_t s = walker_next(&w), off = 0, len = 0;
        const struct ps_ds_value *v = &ds->values[s * ds->nfields + (uint32_t)ds->image_field];
        int64_t got;
        if (v->kind != PS_F_JPEG && v->kind != PS_F_RAW) {
            r->rc = PS_EUNSUP;
            snprintf(r->err, sizeof r->err, "%s: sample %llu is not a JPEG or raw image", ds->name,
                     (unsigned long long)s);
            goto out;
        }
        unit_range(d, UNIT_SAMPLE, s, &off, &len);
        got = ps_io_pread(mio, tmp, len, off);
        if (got < 0) {
            r->rc = (int)got;
            snprintf(r->err, sizeof r->err, "%s", *ps_io_errmsg(mio) ? ps_io_errmsg(mio) : ps_strerror((int)got));
            goto out;
        }
        sh.img[sh.n] = malloc(v->len ? v->len : 1);
        if (!sh.img[sh.n]) {
            r->rc = -ENOMEM;
            snprintf(r->err, sizeof r->err, "out of memory");
            goto out;
        }
        memcpy(sh.img[sh.n], tmp + (ds->samples[s].off - off) + v->off, v->len);
        sh.len[sh.n] = v->len;
        sh.h[sh.n] = v->h;
        sh.w[sh.n] = v->w;
        sh.kind[sh.n] = v->kind;
        bytes += v->len;
        sh.n++;
    }
    r->images_sampled = sh.n;
    r->mean_kb = sh.n ? (double)bytes / sh.n / 1000.0 : 0;

    ps_decode_params_init(&dp);
    dp.transform = d->o.transform;
    dp.out_h = dp.out_w = d->o.crop;
    dp.resize = (d->o.crop * 256u + 111u) / 224u;
    dp.flip = d->o.transform == PS_TRANSFORM_RANDOM_RESIZED_CROP;
    dp.layout = d->o.layout;
    dp.use_restart = 1;
    sh.dp = &dp;
    sh.out_bytes = d->o.crop * d->o.crop * 3;
    th = calloc((size_t)d->threads, sizeof *th);
    if (!th) {
        r->rc = -ENOMEM;
        snprintf(r->err, sizeof r->err, "out of memory");
        goto out;
    }
    t0 = ps_now_ns();
    sh.deadline = t0 + (uint64_t)(d->seconds * 1e9);
    for (int i = 0; i < d->threads; i++) {
        th[i].sh = &sh;
        th[i].idx = i;
        th[i].nthreads = d->threads;
        if (pthread_create(&th[i].t, NULL, dec_main, &th[i]) != 0) {
            r->rc = -EAGAIN;
            snprintf(r->err, sizeof r->err, "cannot start decode thread %d", i);
            for (int k = 0; k < i; k++)
                pthread_join(th[k].t, NULL);
            goto out;
        }
    }
    {
        double cpu = 0;
        for (int i = 0; i < d->threads; i++) {
            pthread_join(th[i].t, NULL);
            r->images += th[i].images;
            cpu += th[i].cpu_s;
            if (th[i].rc < 0 && !r->rc) {
                r->rc = th[i].rc;
                snprintf(r->err, sizeof r->err, "%s", th[i].err);
            }
        }
        r->secs = (double)(ps_now_ns() - t0) / 1e9;
        r->images_s = r->secs > 0 ? (double)r->images / r->secs : 0;
        r->cpu_ms = r->images ? cpu * 1000.0 / (double)r->images : 0;
    }
    r->ran = r->rc == 0;
out:
    if (sh.img)
        for (uint32_t k = 0; k < sh.n; k++)
            free(sh.img[k]);
    free(sh.img);
    free(sh.len);
    free(sh.h);
    free(sh.w);
    free(sh.kind);
    free(tmp);
    free(th);
}

/* ---------------- stage 3: the pipeline ---------------- */

static void stage_pipeline(struct doctor *d)
{
    struct pipe_result *r = &d->pipe;
    ps_loader *l = NULL;
    struct ps_stats s0, s1;
    uint64_t t_open, t0 = 0, deadline;
    int rc;

    t_open = ps_now_ns();
    rc = ps_loader_open(d->url, &d->o, &l, r->err);
    if (rc < 0) {
        r->rc = rc;
        return;
    }
    r->threads = d->threads;
    if (ps_loader_epoch_batches(l) == 0) {
        r->rc = PS_ECONFIG;
        snprintf(r->err, sizeof r->err, "%s: %llu samples make no full batch of %u: use a smaller --batch-size",
                 d->ds->name, (unsigned long long)d->ds->nsamples, d->o.batch_size);
        ps_loader_close(l);
        return;
    }
    deadline = t_open + (uint64_t)(d->seconds * 1e9);
    memset(&s0, 0, sizeof s0);
    for (;;) {
        struct ps_batch *b;
        rc = ps_loader_next(l, &b);
        if (rc == PS_EPOCH_END) {
            r->epochs++;
            if (ps_now_ns() >= deadline + (uint64_t)(60 * 1e9))
                break; /* no batch for a minute past the deadline: report what there is */
            continue;
        }
        if (rc < 0) {
            r->rc = rc;
            snprintf(r->err, sizeof r->err, "%s", ps_loader_errmsg(l));
            break;
        }
        if (!t0) {
            /* steady state is timed from the first batch on; the start-up is reported apart */
            t0 = ps_now_ns();
            r->first_batch_s = (double)(t0 - t_open) / 1e9;
            ps_loader_stats(l, &s0);
            deadline = t0 + (uint64_t)(d->seconds * 1e9);
            ps_batch_release(b);
            continue;
        }
        r->images += b->n;
        r->batches++;
        ps_batch_release(b);
        if (ps_now_ns() >= deadline)
            break;
    }
    ps_loader_stats(l, &s1);
    r->st = s1;
    if (t0 && r->batches) {
        uint64_t payload = s1.payload_bytes - s0.payload_bytes;
        /* amplification and hits over the whole run: pages read before the first batch count too */
        uint64_t rd = s1.bytes_read, h = s1.cache_hits, m = s1.cache_misses;
        r->secs = (double)(ps_now_ns() - t0) / 1e9;
        r->images_s = (double)r->images / r->secs;
        r->mb_s = (double)payload / 1e6 / r->secs;
        r->cpu_ms = (s1.decode_cpu_s - s0.decode_cpu_s) * 1000.0 / (double)r->images;
        r->amp = s1.payload_bytes ? (double)rd / (double)s1.payload_bytes : 0;
        r->hit_rate = h + m ? (double)h / (double)(h + m) : 0;
        r->wait_io_s = s1.wait_io_s - s0.wait_io_s;
        r->wait_batch_s = s1.wait_batch_s - s0.wait_batch_s;
        r->ran = r->rc == 0;
    }
    ps_loader_close(l);
}

/* ---------------- the verdict ---------------- */

static const struct st_point *point(const struct doctor *d, int kind, int qd)
{
    for (int i = 0; i < d->npts; i++)
        if (d->pts[i].kind == kind && d->pts[i].qd == qd && d->pts[i].rc == 0 && d->pts[i].reqs)
            return &d->pts[i];
    return NULL;
}

static const struct st_point *best_page_point(const struct doctor *d)
{
    const struct st_point *b = NULL;
    for (int i = 0; i < d->npts; i++)
        if (d->pts[i].kind == UNIT_PAGE && d->pts[i].rc == 0 && d->pts[i].reqs && (!b || d->pts[i].mb_s > b->mb_s))
            b = &d->pts[i];
    return b;
}

static void diagnose(struct doctor *d)
{
    const struct ps_dataset *ds = d->ds;
    const struct pipe_result *p = &d->pipe;
    const struct dec_result *dc = &d->dec;
    int sample_mode = p->ran ? p->st.unit_mode : 0;
    int unit = sample_mode ? UNIT_SAMPLE : UNIT_PAGE;
    const struct st_point *at = point(d, unit, d->def_qd), *best = best_page_point(d);
    const struct st_point *p4 = point(d, UNIT_PAGES4, d->def_qd), *smp = point(d, UNIT_SAMPLE, d->def_qd);
    double st_ips = at ? at->images_s : 0, dec_ips = dc->ran ? dc->images_s : 0;
    double slow = 0;
    char b1[32], b2[32], b3[32];
    uint64_t cache = p->ran ? p->st.mem_arena : d->o.cache_size;
    int cache_holds_all = cache >= d->data_bytes;

    /* with a cache that holds the dataset, storage only paces the first epoch */
    if (d->o.transform == PS_TRANSFORM_NONE || !dc->ran) {
        d->bound = "storage";
        slow = st_ips;
    } else if (cache_holds_all && p->ran) {
        d->bound = "decode";
        slow = dec_ips;
    } else if (st_ips > 0 && st_ips < dec_ips) {
        d->bound = "storage";
        slow = st_ips;
    } else {
        d->bound = "decode";
        slow = dec_ips;
    }
    if (p->ran && slow > 0 && p->images_s < 0.8 * slow)
        d->bound = "pipeline";

    if (!strcmp(d->bound, "storage")) {
        if (best && at && best->qd != at->qd && best->mb_s > 1.15 * at->mb_s)
            advise(d, "Raise --queue-depth to %d: whole-page reads ran at %.0f MB/s at depth %d against %.0f MB/s "
                      "at %d.", best->qd, best->mb_s, best->qd, at->mb_s, at->qd);
        else if (at && best && best != at)
            advise(d, "More reads in flight add little: depth %d got %.0f MB/s of whole pages against %.0f MB/s at "
                      "the loader's depth %d.", best->qd, best->mb_s, at->mb_s, at->qd);
        if (p4 && at && unit == UNIT_PAGE && p4->mb_s > 1.15 * at->mb_s)
            advise(d, "Larger pages would help: %s reads ran at %.0f MB/s against %.0f MB/s for %s pages; repack "
                      "with `pagestream pack --page-size %lluM`.", cli_bytes(p4->req_bytes, b1), p4->mb_s, at->mb_s,
                   cli_bytes(ds->page_size, b2), (unsigned long long)(4ull * ds->page_size >> 20));
        if (sample_mode && best && smp && best->mb_s > 1.3 * smp->mb_s)
            advise(d, "Random order with a cache smaller than the dataset reads single samples (%.0f MB/s here) "
                      "while whole pages read at %.0f MB/s: use --order quasi_random, or a --cache-size of at "
                      "least %s so whole pages are kept.", smp->mb_s, best->mb_s, cli_bytes(d->data_bytes + ds->page_size, b1));
        if (!cache_holds_all) {
            uint64_t lim = ps_cgroup_memory_limit();
            uint64_t need = d->data_bytes + ds->page_size;
            if (!lim || need + (need >> 3) < lim)
                advise(d, "A --cache-size of %s (the dataset plus one page) fits in memory here: epochs after the "
                          "first would read nothing from storage.", cli_bytes(need, b1));
            else
                advise(d, "The dataset (%s) does not fit in the memory limit (%s): every epoch reads it again, so "
                          "storage bandwidth is the ceiling; keep --order quasi_random so reads stay whole pages.",
                       cli_bytes(d->data_bytes, b1), cli_bytes(lim, b2));
        }
        if (d->io.direct == 0 && !strcmp(d->backend, "uring"))
            advise(d, "Buffered local reads may come from the OS page cache; run with --direct to measure the "
                      "device itself.");
    } else if (!strcmp(d->bound, "decode")) {
        if (d->threads < d->cores)
            advise(d, "Use --threads %d: decode ran on %d of %d cores (%.2f ms of CPU per image).", d->cores,
                   d->threads, d->cores, dc->cpu_ms);
        else
            advise(d, "Decode uses every core (%d threads, %.2f ms of CPU per image, %.0f images/s per thread): "
                      "more cores raise throughput in proportion; smaller stored images (pack --max-side) cut "
                      "the Huffman decoding that dominates.", d->threads, dc->cpu_ms,
                   dc->cpu_ms > 0 ? 1000.0 / dc->cpu_ms : 0);
        if (cache_holds_all && at && at->mb_s > 0)
            advise(d, "The cache holds the whole dataset: storage paces only the first epoch (about %.2f s at %.0f "
                      "MB/s); later epochs read nothing.", (double)d->data_bytes / (at->mb_s * 1e6), at->mb_s);
        else if (st_ips > 0 && dec_ips > 0)
            advise(d, "Storage has %.1fx headroom over decode (%.0f against %.0f images/s): a smaller --cache-size "
                      "or queue depth would not slow this job.", st_ips / dec_ips, st_ips, dec_ips);
    } else {
        if (p->wait_io_s > 0.2 * p->secs * (p->threads ? p->threads : 1))
            advise(d, "Workers waited %.1f s on pages in %.1f s: the prefetcher falls behind; raise --queue-depth "
                      "(now %d) or --cache-size so more pages are read ahead.", p->wait_io_s, p->secs, d->def_qd);
        if (p->epochs && p->amp > 1.05)
            advise(d, "Read amplification %.2f: pages are read more than once per epoch; a larger --cache-size "
                      "(now %s) keeps them until all their samples are used.", p->amp, cli_bytes(cache, b1));
        if (p->wait_batch_s > 0.5 * p->secs && d->threads < d->cores)
            advise(d, "Use --threads %d (now %d).", d->cores, d->threads);
        if (!d->nadvice)
            advise(d, "The loader reaches %.0f%% of its slowest stage with no single cause in its counters; try a "
                      "deeper --ring-depth or a larger --batch-size.", slow > 0 ? 100.0 * p->images_s / slow : 0);
    }
    if (p->ran && p->st.peak_rss > p->st.mem_arena + p->st.mem_fixed + (256ull << 20))
        advise(d, "Peak RSS %s is above cache %s + fixed %s by more than 256 MiB.", cli_bytes(p->st.peak_rss, b1),
               cli_bytes(p->st.mem_arena, b2), cli_bytes(p->st.mem_fixed, b3));
}

/* ---------------- output ---------------- */

static void print_text(const struct doctor *d)
{
    const struct ps_dataset *ds = d->ds;
    const struct dec_result *dc = &d->dec;
    const struct pipe_result *p = &d->pipe;
    char b1[32], b2[32], b3[32];

    printf("doctor %s (%s backend): %llu samples (mean %s), %llu pages of %s, payload fills %.0f%% of the pages\n",
           ds->name, d->backend, (unsigned long long)ds->nsamples,
           cli_bytes(ds->nsamples ? ds->payload_bytes / ds->nsamples : 0, b1), (unsigned long long)ds->npages,
           cli_bytes(ds->page_size, b2), d->fill * 100);
    printf("\n1. storage (%s reads, %.1f s each):\n", d->io.direct ? "O_DIRECT" : "plain",
           d->npts ? d->pts[0].secs : 0);
    printf("   %-8s %10s %6s %10s %9s %10s %12s\n", "reads", "size", "depth", "MB/s", "reads/s", "latency", "images/s");
    for (int i = 0; i < d->npts; i++) {
        const struct st_point *pt = &d->pts[i];
        if (pt->rc && !pt->reqs) {
            printf("   %-8s %10s %6d   failed: %s\n", kind_name(pt->kind), cli_bytes(pt->req_bytes, b1), pt->qd,
                   pt->err);
            continue;
        }
        printf("   %-8s %10s %6d %10.1f %9.0f %8.2f ms %12.0f%s\n", kind_name(pt->kind),
               cli_bytes(pt->req_bytes, b1), pt->qd, pt->mb_s, pt->iops, pt->lat_ms, pt->images_s,
               pt->qd == d->def_qd && pt->kind == UNIT_PAGE ? "   <- the loader's depth" : "");
    }
    printf("\n2. decode: ");
    if (dc->ran)
        printf("%u images of mean %.1f kB, %s %u px, %d threads: %.0f images/s, %.2f ms of CPU per image\n",
               dc->images_sampled, dc->mean_kb,
               d->o.transform == PS_TRANSFORM_CENTER_CROP ? "center crop" : "random resized crop", d->o.crop,
               dc->threads, dc->images_s, dc->cpu_ms);
    else
        printf("%s\n", dc->err);
    printf("\n3. pipeline (%s, batch %u, %d threads, cache %s): ", cli_order_name(d->o.order), d->o.batch_size,
           d->threads, cli_bytes(p->ran ? p->st.mem_arena : d->o.cache_size, b1));
    if (p->ran) {
        char amp[64];
        if (p->epochs)
            snprintf(amp, sizeof amp, "%.3f", p->amp);
        else
            snprintf(amp, sizeof amp, "n/a (less than an epoch)");
        printf("%.0f images/s, %.1f MB/s payload, %.2f CPU ms/image, read amplification %s, cache hits %.0f%%, "
               "workers waited %.2f s on storage, first batch after %.2f s, peak RSS %s (cache %s + fixed %s)\n",
               p->images_s, p->mb_s, p->cpu_ms, amp, p->hit_rate * 100, p->wait_io_s, p->first_batch_s,
               cli_bytes(p->st.peak_rss, b1), cli_bytes(p->st.mem_arena, b2), cli_bytes(p->st.mem_fixed, b3));
    }
    else
        printf("failed: %s\n", *p->err ? p->err : ps_strerror(p->rc));
    printf("\nverdict: %s", !strcmp(d->bound, "storage") ? "storage bounds throughput"
                              : !strcmp(d->bound, "decode") ? "decode bounds throughput"
                                                            : "the pipeline itself falls short of its slowest stage");
    {
        const struct st_point *at = point(d, p->ran && p->st.unit_mode ? UNIT_SAMPLE : UNIT_PAGE, d->def_qd);
        printf(": storage could feed %.0f images/s", at ? at->images_s : 0);
        if (dc->ran)
            printf(", decode %.0f images/s on %d threads", dc->images_s, dc->threads);
        if (p->ran)
            printf(", the whole pipeline ran at %.0f images/s", p->images_s);
        printf(".\n");
    }
    for (int i = 0; i < d->nadvice; i++)
        printf("  - %s\n", d->advice[i]);
}

static void print_json(const struct doctor *d)
{
    const struct ps_dataset *ds = d->ds;
    const struct dec_result *dc = &d->dec;
    const struct pipe_result *p = &d->pipe;
    struct cli_json j;

    json_begin(&j, stdout);
    json_str(&j, "url", ds->name);
    json_str(&j, "backend", d->backend);
    json_bool(&j, "direct", d->io.direct);
    json_num(&j, "seconds_per_stage", d->seconds);
    json_int(&j, "cores", d->cores);
    json_obj(&j, "dataset");
    json_uint(&j, "samples", ds->nsamples);
    json_uint(&j, "pages", ds->npages);
    json_uint(&j, "page_size", ds->page_size);
    json_uint(&j, "payload_bytes", ds->payload_bytes);
    json_num(&j, "page_fill", d->fill);
    json_obj_end(&j);
    json_int(&j, "loader_queue_depth", d->def_qd);
    json_arr(&j, "storage");
    for (int i = 0; i < d->npts; i++) {
        const struct st_point *pt = &d->pts[i];
        json_obj(&j, NULL);
        json_str(&j, "reads", pt->kind == UNIT_SAMPLE ? "sample" : pt->kind == UNIT_PAGE ? "page" : "pages4");
        json_int(&j, "queue_depth", pt->qd);
        json_uint(&j, "request_bytes", pt->req_bytes);
        json_uint(&j, "requests", pt->reqs);
        json_uint(&j, "bytes", pt->bytes);
        json_num(&j, "seconds", pt->secs);
        json_num(&j, "mb_per_s", pt->mb_s);
        json_num(&j, "reads_per_s", pt->iops);
        json_num(&j, "latency_ms", pt->lat_ms);
        json_num(&j, "images_per_s", pt->images_s);
        if (pt->rc)
            json_str(&j, "error", pt->err);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj(&j, "decode");
    json_bool(&j, "ran", dc->ran);
    json_int(&j, "threads", dc->threads);
    json_uint(&j, "images_sampled", dc->images_sampled);
    json_num(&j, "mean_kb", dc->mean_kb);
    json_uint(&j, "images", dc->images);
    json_num(&j, "seconds", dc->secs);
    json_num(&j, "images_per_s", dc->images_s);
    json_num(&j, "cpu_ms_per_image", dc->cpu_ms);
    if (!dc->ran)
        json_str(&j, "note", dc->err);
    json_obj_end(&j);
    json_obj(&j, "pipeline");
    json_bool(&j, "ran", p->ran);
    json_str(&j, "order", cli_order_name(d->o.order));
    json_int(&j, "threads", d->threads);
    json_uint(&j, "batch_size", d->o.batch_size);
    if (p->ran) {
        json_uint(&j, "cache_bytes", p->st.mem_arena);
        json_uint(&j, "fixed_bytes", p->st.mem_fixed);
        json_bool(&j, "sample_reads", p->st.unit_mode);
        json_uint(&j, "images", p->images);
        json_num(&j, "seconds", p->secs);
        json_num(&j, "first_batch_s", p->first_batch_s);
        json_num(&j, "images_per_s", p->images_s);
        json_num(&j, "payload_mb_per_s", p->mb_s);
        json_num(&j, "cpu_ms_per_image", p->cpu_ms);
        json_uint(&j, "epochs_completed", p->epochs);
        if (p->epochs)
            json_num(&j, "read_amplification", p->amp);
        json_num(&j, "cache_hit_rate", p->hit_rate);
        json_num(&j, "workers_wait_storage_s", p->wait_io_s);
        json_num(&j, "caller_wait_s", p->wait_batch_s);
        json_uint(&j, "peak_rss", p->st.peak_rss);
    } else
        json_str(&j, "error", *p->err ? p->err : ps_strerror(p->rc));
    json_obj_end(&j);
    json_str(&j, "bound", d->bound);
    json_arr(&j, "advice");
    for (int i = 0; i < d->nadvice; i++)
        json_str(&j, NULL, d->advice[i]);
    json_arr_end(&j);
    json_end(&j);
}

int cmd_doctor(int argc, char **argv)
{
    struct doctor *d;
    struct ps_io *mio = NULL;
    uint64_t v;
    int c, json = 0, rc = CLI_OK;

    d = calloc(1, sizeof *d);
    if (!d) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    ps_options_init(&d->o);
    ps_io_opts_init(&d->io);
    d->seconds = 5;
    d->nimages = 200;
    optind = 1;
    opterr = 0; /* cli_bad_option says it once, in our words */
    while ((c = getopt_long(argc, argv, "h", doctor_opts, NULL)) != -1) {
        switch (c) {
        case OPT_SECONDS:
            if (cli_uint("--seconds", optarg, 3600, &v)) {
                rc = CLI_USAGE;
                goto out;
            }
            if (!v) {
                rc = cli_usage_error("--seconds must be 1 .. 3600");
                goto out;
            }
            d->seconds = (double)v;
            break;
        case OPT_CACHE:
            if (cli_size("--cache-size", optarg, &d->o.cache_size)) {
                rc = CLI_USAGE;
                goto out;
            }
            break;
        case OPT_ORDER:
            if (cli_parse_order(optarg, &d->o.order) < 0) {
                rc = cli_usage_error("--order %s: use sequential, random or quasi_random", optarg);
                goto out;
            }
            break;
        case OPT_THREADS:
            if (cli_uint("--threads", optarg, 1024, &v)) {
                rc = CLI_USAGE;
                goto out;
            }
            d->o.threads = (int)v;
            break;
        case OPT_BATCH:
            if (cli_uint("--batch-size", optarg, 1 << 20, &v)) {
                rc = CLI_USAGE;
                goto out;
            }
            if (!v) {
                rc = cli_usage_error("--batch-size must be 1 .. 1048576");
                goto out;
            }
            d->o.batch_size = (uint32_t)v;
            break;
        case OPT_TRANSFORM:
            if (!strcmp(optarg, "rrc") || !strcmp(optarg, "random_resized_crop"))
                d->o.transform = PS_TRANSFORM_RANDOM_RESIZED_CROP;
            else if (!strcmp(optarg, "center") || !strcmp(optarg, "center_crop"))
                d->o.transform = PS_TRANSFORM_CENTER_CROP;
            else if (!strcmp(optarg, "none"))
                d->o.transform = PS_TRANSFORM_NONE;
            else {
                rc = cli_usage_error("--transform %s: use rrc, center or none", optarg);
                goto out;
            }
            break;
        case OPT_CROP:
            if (cli_uint("--crop", optarg, 4096, &v)) {
                rc = CLI_USAGE;
                goto out;
            }
            if (v < 8) {
                rc = cli_usage_error("--crop must be 8 .. 4096");
                goto out;
            }
            d->o.crop = (uint32_t)v;
            break;
        case OPT_IMAGES:
            if (cli_uint("--images", optarg, 100000, &v)) {
                rc = CLI_USAGE;
                goto out;
            }
            if (!v) {
                rc = cli_usage_error("--images must be 1 .. 100000");
                goto out;
            }
            d->nimages = (uint32_t)v;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
        case OPT_HELP:
            fputs(doctor_help, stdout);
            goto out;
        default: {
            int r = cli_read_opt(c, optarg, &d->io);
            if (r == 1)
                break;
            rc = r == CLI_USAGE ? CLI_USAGE : cli_bad_option(argv);
            goto out;
        }
        }
    }
    if (optind != argc - 1) {
        rc = cli_usage_error(optind >= argc ? "missing URL" : "one URL expected");
        goto out;
    }
    d->url = argv[optind];
    d->o.direct = d->io.direct;
    d->o.queue_depth = d->io.queue_depth;
    d->o.endpoint = d->io.endpoint;
    d->o.region = d->io.region;
    d->o.insecure = d->io.insecure;
    d->cores = cores_available();
    d->threads = d->o.threads ? d->o.threads : d->cores;

    if (cli_open_dataset(d->url, &d->io, &mio, &d->ds) != CLI_OK) {
        rc = CLI_FAIL;
        goto out;
    }
    d->backend = ps_io_backend(mio);
    d->def_qd = ps_io_depth(mio);
    if (d->def_qd < 1)
        d->def_qd = 1;
    d->data_bytes = d->ds->npages * (uint64_t)d->ds->page_size;
    d->fill = d->data_bytes ? (double)d->ds->payload_bytes / (double)d->data_bytes : 0;
    if (d->ds->nsamples == 0 || d->ds->npages == 0) {
        cli_error("%s: the dataset is empty", d->ds->name);
        rc = CLI_FAIL;
        goto out;
    }

    stage_storage(d, json);
    if (!json)
        fprintf(stderr, "doctor: decode on %d threads ...\n", d->threads);
    stage_decode(d, mio);
    if (!json)
        fprintf(stderr, "doctor: the whole pipeline for %.0f s ...\n", d->seconds);
    stage_pipeline(d);
    diagnose(d);
    if (json)
        print_json(d);
    else
        print_text(d);
    /* a stage that failed outright is a failure of the command */
    if (!d->pipe.ran || (d->dec.rc < 0) || !best_page_point(d)) {
        if (!d->pipe.ran)
            cli_error("pipeline: %s", *d->pipe.err ? d->pipe.err : ps_strerror(d->pipe.rc));
        if (d->dec.rc < 0)
            cli_error("decode: %s", d->dec.err);
        if (!best_page_point(d))
            cli_error("storage: no read succeeded%s%s", d->npts ? ": " : "", d->npts ? d->pts[0].err : "");
        rc = CLI_FAIL;
    }
out:
    ps_ds_close(d->ds);
    ps_io_close(mio);
    free(d);
    return rc;
}
