/*
 * cmd_convert.c - `pagestream convert IN OUT.pgs`: copy a .beton (or .pgs) into a .pgs without
 * re-encoding, streaming IN's pages through ps_io (several reads in flight) and OUT through ps_out.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#define DEFAULT_PAGE_SIZE (4u << 20)    /* as pack: see FORMAT.md "Choosing the page size" */
#define DEFAULT_READ_BUFFER (512ull << 20)
#define MAX_DEPTH 64
#define POOL_MAX 16                     /* freed read buffers kept for reuse */
#define ALIGN 4096u                     /* O_DIRECT: offsets, lengths and buffers */

static const char usage_text[] =
    "usage: pagestream convert IN OUT [options]\n\n"
    "Copies a dataset into a .pgs file, every sample and field as stored: images are\n"
    "not re-encoded. IN is a .beton (FFCV) or .pgs file: a path, file://, http(s)://,\n"
    "s3:// or nfs:// URL, read page by page with several reads in flight (never whole).\n"
    "OUT is a path (written under a temporary name, renamed when complete), - for\n"
    "stdout, or s3://bucket/key. Samples keep IN's order (and so their indices) unless\n"
    "--shuffle is given. The output gains a CRC32C per page and per sample.\n\n"
    "Fields (names kept):\n"
    "  .beton RGBImage  -> jpeg when every sample is JPEG, raw when every sample is raw;\n"
    "                      a field mixing both is refused (the sample of the rarer kind is\n"
    "                      named) unless --mixed-images bytes\n"
    "  Int / Float      -> int / float (the label field stays the label)\n"
    "  Bytes / JSON / NDArray -> bytes (JSON keeps FFCV's trailing NUL; NDArray shape and\n"
    "                      dtype are not kept: .pgs has no array type)\n"
    "  .pgs fields      -> the same types\n"
    "The image field is kept as the first variable field, so the loader decodes it.\n\n"
    "  --page-size SIZE      page size of OUT, 64K..64M, a multiple of 4K (default 4M)\n"
    "  --shuffle             write the samples in a random order (sample i of OUT is then\n"
    "                        not sample i of IN)\n"
    "  --seed N              seed of --shuffle (default 0)\n"
    "  --mixed-images MODE   fail (default) | bytes: store an image field that mixes JPEG\n"
    "                        and raw samples as opaque bytes (the loader will not decode it)\n"
    "  --read-buffer SIZE    memory for pages read ahead (default 512M). When IN's layout\n"
    "                        (or --shuffle) would need more pages held at once, samples are\n"
    "                        read one by one instead of whole pages\n"
    "  --threads N           1: read and write on one thread; 2 (default): a reader thread\n"
    "                        keeps storage busy while the main thread writes. Nothing is\n"
    "                        decoded, so more than 2 gains nothing (treated as 2)\n"
    "  -q, --quiet           no summary\n"
    "  -h, --help            this text\n\n" CLI_READ_HELP
    "  (--endpoint, --region and --insecure apply to IN and OUT)\n";

enum { U_IDLE = 0, U_INFLIGHT, U_READY, U_ERROR, U_FREED };

/* A read unit: a page, or one sample (sample-by-sample reads, or a .pgs sample spanning pages). */
struct unit {
    uint64_t off;        /* file offset read (aligned down to 4 KiB) */
    uint32_t len;        /* bytes read */
    uint32_t left;       /* samples still to write from it */
    int64_t page;        /* page number, or -1 for a sample unit */
    uint8_t *buf;
    uint32_t cap;        /* size of buf */
    int state;
    int res;             /* U_ERROR: the error */
};

struct conv {
    const struct ps_dataset *ds;
    struct ps_io *io;
    struct unit *units;
    uint64_t nunits;
    int depth;
    uint64_t budget;     /* soft limit on bytes of buffers held */

    pthread_mutex_t lock;
    pthread_cond_t ready_cv;  /* a unit became ready or failed */
    pthread_cond_t reader_cv; /* budget freed, the writer waits, or stop */
    /* under lock */
    uint64_t next_issue;      /* units [0, next_issue) were submitted */
    uint64_t need;            /* the unit the writer waits for (or will need next) */
    uint64_t held;            /* bytes of buffers of issued, not freed units */
    int stop;
    int fatal;                /* reap failed as a whole */
    char errmsg[PS_ERRLEN];
    uint64_t bytes_read, page_reads, sample_reads; /* ours (ps_io_stats also counts the metadata reads and belongs to the reader) */
    struct { uint8_t *p; uint32_t cap; } pool[POOL_MAX];
    int npool;
    /* reader only */
    int inflight;
};


static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void shuffle_ids(uint64_t *v, uint64_t n, uint64_t seed)
{
    uint64_t st = seed;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t lim = UINT64_MAX - UINT64_MAX % i, x, j, t;
        do
            x = splitmix(&st);
        while (x >= lim);
        j = x % i;
        t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* ---- the output schema ---- */

struct schema {
    uint32_t nfields;
    uint32_t src[PS_MAX_FIELDS];   /* output field k comes from input field src[k] */
    struct ps_field f[PS_MAX_FIELDS];
};

static int out_is_var(uint8_t t) { return t == PS_F_JPEG || t == PS_F_RAW || t == PS_F_BYTES; }

/* Output type of input field f; CLI_FAIL (message printed) for a mixed image field in fail mode. */
static int map_type(const struct ps_dataset *ds, uint32_t f, int mixed_bytes, uint8_t *type, int quiet)
{
    const char *name = ds->fields[f].name;
    switch (ds->fields[f].type) {
    case PS_F_JPEG:
    case PS_F_RAW:
    case PS_F_INT:
    case PS_F_FLOAT:
    case PS_F_BYTES:
        *type = ds->fields[f].type;
        return 0;
    case PS_F_JSON:
        *type = PS_F_BYTES;
        return 0;
    case PS_F_NDARRAY:
        if (!quiet)
            cli_warn("%s: field '%s' (ndarray) is stored as bytes: .pgs keeps no shape or dtype", ds->name, name);
        *type = PS_F_BYTES;
        return 0;
    case PS_F_IMAGE: {
        uint64_t nj = 0, nr = 0, first_j = UINT64_MAX, first_r = UINT64_MAX;
        for (uint64_t i = 0; i < ds->nsamples; i++) {
            uint8_t k = ds->values[i * ds->nfields + f].kind;
            if (k == PS_F_JPEG) {
                if (!nj++)
                    first_j = i;
            } else {
                if (!nr++)
                    first_r = i;
            }
        }
        if (!nr) {
            *type = PS_F_JPEG;
            return 0;
        }
        if (!nj) {
            *type = PS_F_RAW;
            return 0;
        }
        if (mixed_bytes) {
            if (!quiet)
                cli_warn("%s: field '%s' mixes JPEG and raw images (%" PRIu64 " JPEG, %" PRIu64
                         " raw): stored as bytes (--mixed-images bytes)",
                         ds->name, name, nj, nr);
            *type = PS_F_BYTES;
            return 0;
        }
        {
            /* name the first sample of the rarer kind (on a tie, the kind sample 0 is not) */
            int raw_rare = nr < nj || (nr == nj && first_j == 0);
            cli_error("%s: field '%s' mixes JPEG and raw images (%" PRIu64 " JPEG, %" PRIu64
                      " raw), the first %s one at sample %" PRIu64
                      "; a .pgs image field holds one kind. Use --mixed-images bytes to keep them as "
                      "opaque bytes (not decoded by the loader)",
                      ds->name, name, nj, nr, raw_rare ? "raw" : "JPEG", raw_rare ? first_r : first_j);
            return CLI_FAIL;
        }
    }
    default:
        cli_error("%s: field '%s': type %s cannot be stored in a .pgs", ds->name, name,
                  ps_ftype_name(ds->fields[f].type));
        return CLI_FAIL;
    }
}

static int build_schema(const struct ps_dataset *ds, int mixed_bytes, int quiet, struct schema *s)
{
    uint8_t type[PS_MAX_FIELDS];
    uint32_t k = 0;
    int prim = ds->image_field, placed = 0;

    memset(s, 0, sizeof *s);
    if (ds->nfields > PS_MAX_FIELDS) {
        cli_error("%s: %u fields: a .pgs holds at most %d", ds->name, ds->nfields, PS_MAX_FIELDS);
        return CLI_FAIL;
    }
    for (uint32_t f = 0; f < ds->nfields; f++)
        if (map_type(ds, f, mixed_bytes, &type[f], quiet))
            return CLI_FAIL;
    /* The loader decodes the first variable field of a .pgs; .beton's primary field is its first RGBImage,
     * wherever it is. Put that one first among the variable fields so both load the same. */
    if (prim >= 0 && !out_is_var(type[prim]))
        prim = -1;
    for (uint32_t f = 0; f < ds->nfields; f++) {
        if ((int)f == prim) {
            if (!placed)
                s->src[k++] = f;
            placed = 1;
            continue;
        }
        if (prim >= 0 && !placed && out_is_var(type[f])) {
            s->src[k++] = (uint32_t)prim;
            placed = 1;
            if (!quiet)
                cli_warn("%s: field '%s' is written before field '%s', so it stays the image field", ds->name,
                         ds->fields[prim].name, ds->fields[f].name);
        }
        s->src[k++] = f;
    }
    s->nfields = k;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t f = s->src[j];
        s->f[j].type = type[f];
        if (ds->fields[f].name[0])
            snprintf(s->f[j].name, PS_FIELD_NAME, "%s", ds->fields[f].name);
        else
            snprintf(s->f[j].name, PS_FIELD_NAME, "field%u", f);
        /* FFCV does not forbid two fields of one name; .pgs does: the later one gets its index appended */
        for (uint32_t g = 0; g < j; g++)
            if (strcmp(s->f[g].name, s->f[j].name) == 0) {
                char nm[PS_FIELD_NAME];
                snprintf(nm, sizeof nm, "%.20s_%u", s->f[j].name, f);
                for (uint32_t h = 0; h < j; h++)
                    if (strcmp(s->f[h].name, nm) == 0) {
                        cli_error("%s: field name '%s' used twice, and '%s' is taken too", ds->name, s->f[j].name,
                                  nm);
                        return CLI_FAIL;
                    }
                if (!quiet)
                    cli_warn("%s: field name '%s' used twice: field %u is named '%s'", ds->name, s->f[j].name, f,
                             nm);
                memcpy(s->f[j].name, nm, sizeof nm);
                break;
            }
    }
    return 0;
}

/* ---- the read plan ---- */

static uint64_t align_down(uint64_t v) { return v & ~(uint64_t)(ALIGN - 1); }
static uint64_t align_up(uint64_t v) { return (v + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

static void sample_unit(const struct ps_dataset *ds, const struct ps_ds_sample *s, struct unit *u)
{
    uint64_t a = align_down(s->off), b = align_up(s->off + s->len);
    if (b > ds->file_size)
        b = ds->file_size;
    memset(u, 0, sizeof *u);
    u->off = a;
    u->len = (uint32_t)(b - a);
    u->page = -1;
}

static void page_unit(const struct ps_dataset *ds, uint64_t p, struct unit *u)
{
    uint64_t len = ds->page_size;
    /* a page without checksum need only be read up to its last payload */
    if (!ds->has_page_crc && ds->pages[p].used < ds->page_size)
        len = align_up(ds->pages[p].used);
    if (len > ds->page_size)
        len = ds->page_size;
    if (ps_ds_page_offset(ds, p) + len > ds->file_size)
        len = ds->file_size - ps_ds_page_offset(ds, p);
    memset(u, 0, sizeof *u);
    u->off = ps_ds_page_offset(ds, p);
    u->len = (uint32_t)len;
    u->page = (int64_t)p;
}

/*
 * Units in the order the samples first need them, and su[i] = the unit of
 * the i-th sample written (-1: nothing to read). by_page: whole pages, a page
 * held until its last sample is written; else one read per sample. Returns
 * the most bytes held at once by this plan (without read-ahead), or 0 on ENOMEM.
 */
static uint64_t plan(const struct ps_dataset *ds, const uint64_t *order, int by_page, struct unit **units_out,
                     uint64_t *nunits_out, int64_t *su)
{
    struct unit *units = malloc((ds->nsamples + 1) * sizeof *units);
    int64_t *of_page = by_page ? malloc((ds->npages + 1) * sizeof *of_page) : NULL;
    uint64_t *last = malloc((ds->nsamples + 1) * sizeof *last);
    int64_t *delta = calloc(ds->nsamples + 2, sizeof *delta);
    uint64_t n = 0, peak = 0;
    int64_t cur = 0;

    if (!units || (by_page && !of_page) || !last || !delta) {
        free(units);
        free(of_page);
        free(last);
        free(delta);
        return 0;
    }
    for (uint64_t p = 0; by_page && p < ds->npages; p++)
        of_page[p] = -1;
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        const struct ps_ds_sample *s = &ds->samples[order[i]];
        int64_t u;
        if (s->len == 0) {
            su[i] = -1;
            continue;
        }
        if (!by_page || s->span > 1) {
            u = (int64_t)n;
            sample_unit(ds, s, &units[n++]);
        } else if ((u = of_page[s->page]) < 0) {
            u = of_page[s->page] = (int64_t)n;
            page_unit(ds, s->page, &units[n++]);
        }
        if (units[u].left++ == 0)
            delta[i] += units[u].len;
        last[u] = i;
        su[i] = u;
    }
    for (uint64_t u = 0; u < n; u++)
        delta[last[u] + 1] -= units[u].len;
    for (uint64_t i = 0; i <= ds->nsamples; i++) {
        cur += delta[i];
        if ((uint64_t)cur > peak)
            peak = (uint64_t)cur;
    }
    free(of_page);
    free(last);
    free(delta);
    *units_out = units;
    *nunits_out = n;
    return peak ? peak : 1;
}

/* ---- reading ---- */

/* The units to submit now (lock held): up to the depth, within the budget unless the writer needs it. */
static int pick(struct conv *c, struct ps_io_req *reqs, int max)
{
    int n = 0;
    while (n < max && c->inflight + n < c->depth && c->next_issue < c->nunits && !c->stop) {
        struct unit *u = &c->units[c->next_issue];
        if (c->held + u->len > c->budget && c->next_issue != c->need)
            break;
        u->state = U_INFLIGHT;
        c->held += u->len;
        reqs[n].offset = u->off;
        reqs[n].length = u->len;
        reqs[n].cookie = c->next_issue;
        reqs[n].buf = NULL; /* set outside the lock */
        c->next_issue++;
        n++;
    }
    return n;
}

static uint8_t *get_buf(struct conv *c, struct unit *u)
{
    uint8_t *p = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->npool; i++)
        if (c->pool[i].cap >= u->len) {
            p = c->pool[i].p;
            u->cap = c->pool[i].cap;
            c->pool[i] = c->pool[--c->npool];
            break;
        }
    pthread_mutex_unlock(&c->lock);
    if (p)
        return p;
    if (posix_memalign((void **)&p, ALIGN, u->len ? u->len : ALIGN))
        return NULL;
    u->cap = u->len;
    return p;
}

/* Lock held: give a unit's buffer back (to the pool, or free it). */
static void release_unit(struct conv *c, struct unit *u)
{
    if (u->buf) {
        if (c->npool < POOL_MAX) {
            c->pool[c->npool].p = u->buf;
            c->pool[c->npool++].cap = u->cap;
        } else {
            free(u->buf);
        }
    }
    u->buf = NULL;
    c->held -= u->len;
    u->state = U_FREED;
}

/* Submit what may go now; 0, or -1 after a fatal error (recorded). Reader thread only. */
static int submit_more(struct conv *c)
{
    struct ps_io_req reqs[MAX_DEPTH];
    int n, done = 0;

    pthread_mutex_lock(&c->lock);
    n = pick(c, reqs, MAX_DEPTH);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < n; i++) {
        struct unit *u = &c->units[reqs[i].cookie];
        u->buf = get_buf(c, u);
        reqs[i].buf = u->buf;
        if (!u->buf) {
            pthread_mutex_lock(&c->lock);
            snprintf(c->errmsg, sizeof c->errmsg, "out of memory for a read buffer of %u bytes", u->len);
            c->fatal = c->stop = 1;
            /* units not submitted stay unread; the writer sees stop */
            for (int k = i; k < n; k++)
                c->units[reqs[k].cookie].state = U_ERROR, c->units[reqs[k].cookie].res = -ENOMEM;
            pthread_cond_broadcast(&c->ready_cv);
            pthread_mutex_unlock(&c->lock);
            n = i;
            break;
        }
    }
    while (done < n) {
        int k = ps_io_submit(c->io, reqs + done, n - done);
        if (k < 0) {
            pthread_mutex_lock(&c->lock);
            snprintf(c->errmsg, sizeof c->errmsg, "%s: submitting reads: %s", c->ds->name,
                     *ps_io_errmsg(c->io) ? ps_io_errmsg(c->io) : ps_strerror(k));
            c->fatal = c->stop = 1;
            for (int j = done; j < n; j++)
                c->units[reqs[j].cookie].state = U_ERROR, c->units[reqs[j].cookie].res = k;
            pthread_cond_broadcast(&c->ready_cv);
            pthread_mutex_unlock(&c->lock);
            return -1;
        }
        c->inflight += k;
        done += k;
        if (k == 0 && done < n) {
            /* the backend is full (our depth is within its limits, so rare): give the rest back */
            pthread_mutex_lock(&c->lock);
            for (int j = n - 1; j >= done; j--) {
                struct unit *u = &c->units[reqs[j].cookie];
                release_unit(c, u);
                u->state = U_IDLE;
            }
            c->next_issue = reqs[done].cookie;
            pthread_mutex_unlock(&c->lock);
            break;
        }
    }
    return 0;
}

/* Check a read page or sample against the .pgs checksums (a .beton has none). */
static int check_unit(const struct ps_dataset *ds, const struct unit *u)
{
    if (u->page >= 0 && ds->has_page_crc && u->len == ds->page_size)
        return ps_ds_check_page(ds, (uint64_t)u->page, u->buf);
    return 0;
}

/* Reap completions (reader thread): min and timeout as ps_io_reap. */
static int reap_some(struct conv *c, int min, int timeout_ms)
{
    struct ps_io_cqe cq[MAX_DEPTH];
    int n = ps_io_reap(c->io, cq, MAX_DEPTH, min, timeout_ms);

    if (n < 0) {
        pthread_mutex_lock(&c->lock);
        snprintf(c->errmsg, sizeof c->errmsg, "%s: %s", c->ds->name,
                 *ps_io_errmsg(c->io) ? ps_io_errmsg(c->io) : ps_strerror(n));
        c->fatal = c->stop = 1;
        pthread_cond_broadcast(&c->ready_cv);
        pthread_mutex_unlock(&c->lock);
        return n;
    }
    for (int i = 0; i < n; i++) {
        struct unit *u = &c->units[cq[i].cookie];
        int res = cq[i].res < 0 ? (int)cq[i].res : cq[i].res != (int64_t)u->len ? -EIO : 0;
        char msg[PS_ERRLEN] = "";
        if (res < 0 && *ps_io_errmsg(c->io)) {
            /* the handle keeps only its last message: use it when it is about this read. It starts with
             * the URL, which ours names already. */
            const char *m = ps_io_errmsg(c->io);
            char at[40];
            size_t nl = strlen(c->ds->name);
            snprintf(at, sizeof at, " at %" PRIu64 " ", u->off);
            if (strncmp(m, c->ds->name, nl) == 0 && m[nl] == ':' && m[nl + 1] == ' ')
                m += nl + 2;
            if (strstr(m, at))
                snprintf(msg, sizeof msg, "%s", m);
        }
        if (!res)
            res = check_unit(c->ds, u);
        c->inflight--;
        pthread_mutex_lock(&c->lock);
        if (cq[i].res > 0)
            c->bytes_read += (uint64_t)cq[i].res;
        if (u->page >= 0)
            c->page_reads++;
        else
            c->sample_reads++;
        u->res = res;
        u->state = res ? U_ERROR : U_READY;
        if (res && !c->errmsg[0]) {
            if (u->page >= 0)
                snprintf(c->errmsg, sizeof c->errmsg, "%.200s: page %" PRId64 " (%u bytes at %" PRIu64 "): %.250s",
                         c->ds->name, u->page, u->len, u->off, *msg ? msg : ps_strerror(res));
            else
                snprintf(c->errmsg, sizeof c->errmsg, "%.200s: %u bytes at %" PRIu64 ": %.250s", c->ds->name, u->len,
                         u->off, *msg ? msg : ps_strerror(res));
        }
        pthread_cond_broadcast(&c->ready_cv);
        pthread_mutex_unlock(&c->lock);
    }
    return n;
}

static void *reader_main(void *arg)
{
    struct conv *c = arg;
    for (;;) {
        int more;
        if (submit_more(c) < 0)
            break;
        pthread_mutex_lock(&c->lock);
        /* nothing in flight and the budget is full: wait for the writer to free a unit or to need one */
        while (!c->stop && c->inflight == 0 && c->next_issue < c->nunits &&
               c->held + c->units[c->next_issue].len > c->budget && c->next_issue != c->need)
            pthread_cond_wait(&c->reader_cv, &c->lock);
        more = !c->stop && c->next_issue < c->nunits;
        pthread_mutex_unlock(&c->lock);
        if (c->inflight == 0) {
            if (!more)
                break;
            continue;
        }
        if (reap_some(c, 1, -1) < 0)
            break;
    }
    /* buffers of reads still in flight must not be freed under the backend */
    while (c->inflight > 0 && reap_some(c, 1, 1000) >= 0)
        ;
    return NULL;
}

/* Wait until unit u is read (threaded: the reader; inline: by reading here). 0 or an error. */
static int wait_unit(struct conv *c, uint64_t u, int threaded)
{
    int st;
    if (!threaded) {
        /* keep reads flowing while this thread writes */
        pthread_mutex_lock(&c->lock);
        c->need = u;
        pthread_mutex_unlock(&c->lock);
        if (submit_more(c) == 0 && c->inflight)
            reap_some(c, 0, 0);
    }
    pthread_mutex_lock(&c->lock);
    c->need = u;
    if (threaded)
        pthread_cond_signal(&c->reader_cv);
    for (;;) {
        st = c->units[u].state;
        if (st == U_READY || st == U_ERROR || c->fatal)
            break;
        if (threaded) {
            pthread_cond_wait(&c->ready_cv, &c->lock);
            continue;
        }
        pthread_mutex_unlock(&c->lock);
        if (submit_more(c) < 0 || (c->inflight && reap_some(c, 1, -1) < 0)) {
            pthread_mutex_lock(&c->lock);
            break;
        }
        pthread_mutex_lock(&c->lock);
        if (!c->inflight && c->units[u].state == U_IDLE) {
            /* pick() always issues the unit the writer needs; if it did not, do not spin */
            snprintf(c->errmsg, sizeof c->errmsg, "%s: internal error: read of %u bytes at %" PRIu64 " not issued",
                     c->ds->name, c->units[u].len, c->units[u].off);
            break;
        }
    }
    st = c->units[u].state;
    pthread_mutex_unlock(&c->lock);
    if (st == U_READY)
        return 0;
    return st == U_ERROR && c->units[u].res ? c->units[u].res : -EIO;
}

/* ---- writing ---- */

struct totals {
    uint64_t samples, payload;
};

static int convert_all(struct conv *c, const struct schema *sc, const uint64_t *order, const int64_t *su,
                       struct ps_writer *w, int threaded, const char *out_name, struct cli_progress *pr,
                       struct totals *t)
{
    const struct ps_dataset *ds = c->ds;
    char err[PS_ERRLEN];
    struct ps_wsample s;
    int rc;

    for (uint64_t i = 0; i < ds->nsamples; i++) {
        uint64_t id = order[i];
        const struct ps_ds_sample *sm = &ds->samples[id];
        const struct ps_ds_value *vals = &ds->values[id * ds->nfields];
        struct unit *u = su[i] >= 0 ? &c->units[su[i]] : NULL;
        const uint8_t *base = NULL;

        if (u) {
            if ((rc = wait_unit(c, (uint64_t)su[i], threaded)) < 0) {
                cli_progress_end(pr);
                if (c->errmsg[0])
                    cli_error("%s", c->errmsg);
                else
                    cli_error("%s: sample %" PRIu64 ": %s", ds->name, id, ps_strerror(rc));
                return CLI_FAIL;
            }
            if (sm->off < u->off || sm->off + sm->len > u->off + u->len) {
                cli_progress_end(pr);
                cli_error("%s: sample %" PRIu64 " (%u bytes at %" PRIu64 ") lies outside its page's %u bytes",
                          ds->name, id, sm->len, sm->off, u->len);
                return CLI_FAIL;
            }
            base = u->buf + (sm->off - u->off);
            if (ds->has_sample_crc && ps_ds_check_sample(ds, id, base) < 0) {
                cli_progress_end(pr);
                cli_error("%s: sample %" PRIu64 " (page %u, offset %" PRIu64 ", %u bytes): checksum mismatch",
                          ds->name, id, sm->page, sm->off, sm->len);
                return CLI_FAIL;
            }
        }
        memset(&s, 0, sizeof s);
        for (uint32_t k = 0; k < sc->nfields; k++) {
            uint32_t f = sc->src[k];
            const struct ps_ds_value *v = &vals[f];
            switch (sc->f[k].type) {
            case PS_F_INT:
                s.ival[k] = v->v.i;
                break;
            case PS_F_FLOAT:
                s.fval[k] = v->v.f;
                break;
            default:
                if ((uint64_t)v->off + v->len > sm->len) {
                    cli_progress_end(pr);
                    cli_error("%s: sample %" PRIu64 " field '%s': %u bytes at %u past the sample's %u bytes",
                              ds->name, id, ds->fields[f].name, v->len, v->off, sm->len);
                    return CLI_FAIL;
                }
                s.data[k] = v->len ? base + v->off : NULL;
                s.len[k] = v->len;
                s.h[k] = v->h;
                s.w[k] = v->w;
                if (v->kind == PS_F_JSON && (!v->len || base[v->off + v->len - 1] != 0)) {
                    /* FFCV writes JSON with a trailing NUL; without it the value was cut or overwritten */
                    cli_progress_end(pr);
                    cli_error("%s: sample %" PRIu64 " field '%s': JSON value without its trailing NUL (corrupt)",
                              ds->name, id, ds->fields[f].name);
                    return CLI_FAIL;
                }
            }
        }
        if ((rc = ps_writer_add(w, &s, err)) < 0) {
            cli_progress_end(pr);
            cli_error("%s: sample %" PRIu64 ": %s", out_name, id, err);
            return CLI_FAIL;
        }
        t->samples++;
        t->payload += sm->len;
        if (u) {
            pthread_mutex_lock(&c->lock);
            if (--u->left == 0) {
                release_unit(c, u);
                if (threaded)
                    pthread_cond_signal(&c->reader_cv);
            }
            pthread_mutex_unlock(&c->lock);
        }
        if (pr->on) {
            uint64_t b;
            pthread_mutex_lock(&c->lock);
            b = c->bytes_read;
            pthread_mutex_unlock(&c->lock);
            cli_progress(pr, i + 1, b);
        }
    }
    return 0;
}

/* Stop the reader thread (or, inline, finish the reads in flight): buffers are freed after. */
static void stop_reader(struct conv *c, pthread_t *th, int *started)
{
    if (*started) {
        pthread_mutex_lock(&c->lock);
        c->stop = 1;
        pthread_cond_broadcast(&c->reader_cv);
        pthread_mutex_unlock(&c->lock);
        ps_io_wakeup(c->io);
        pthread_join(*th, NULL);
        *started = 0;
    } else if (c->units) {
        while (c->inflight > 0 && reap_some(c, 1, 1000) >= 0)
            ;
    }
}

int cmd_convert(int argc, char **argv)
{
    enum { OPT_PAGE = CLI_OPT_FIRST_FREE, OPT_SHUFFLE, OPT_SEED, OPT_MIXED, OPT_RBUF, OPT_THREADS };
    static const struct option lo[] = { { "page-size", required_argument, NULL, OPT_PAGE },
                                         { "shuffle", no_argument, NULL, OPT_SHUFFLE },
                                         { "seed", required_argument, NULL, OPT_SEED },
                                         { "mixed-images", required_argument, NULL, OPT_MIXED },
                                         { "read-buffer", required_argument, NULL, OPT_RBUF },
                                         { "threads", required_argument, NULL, OPT_THREADS },
                                         { "quiet", no_argument, NULL, 'q' },
                                         { "help", no_argument, NULL, 'h' },
                                         CLI_READ_LONGOPTS,
                                         { NULL, 0, NULL, 0 } };
    struct ps_io_opts io_opts;
    struct ps_dataset *ds = NULL;
    struct ps_io *io = NULL;
    struct ps_out *out = NULL;
    struct ps_writer *w = NULL;
    struct ps_writer_opts wo;
    struct schema sc;
    struct conv cv;
    struct cli_progress pr;
    struct totals tot = { 0, 0 };
    uint64_t page_size = DEFAULT_PAGE_SIZE, seed = 0, rbuf = DEFAULT_READ_BUFFER, v, t0, peak;
    uint64_t *order = NULL;
    int64_t *su = NULL;
    int c, rc, shuffle = 0, mixed_bytes = 0, quiet = 0, threads = 2, started = 0;
    const char *in_url, *out_url;
    char err[PS_ERRLEN] = "", b1[32], b2[32], b3[32];
    pthread_t th;

    ps_io_opts_init(&io_opts);
    memset(&cv, 0, sizeof cv);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", lo, NULL)) != -1) {
        switch (c) {
        case OPT_PAGE:
            if (cli_size("--page-size", optarg, &page_size))
                return CLI_USAGE;
            if (page_size % 4096 || page_size < (64u << 10) || page_size > (64u << 20))
                return cli_usage_error("--page-size: from 64K to 64M, a multiple of 4K");
            break;
        case OPT_SHUFFLE: shuffle = 1; break;
        case OPT_SEED:
            if (cli_uint("--seed", optarg, UINT64_MAX, &seed))
                return CLI_USAGE;
            break;
        case OPT_MIXED:
            if (strcmp(optarg, "fail") == 0)
                mixed_bytes = 0;
            else if (strcmp(optarg, "bytes") == 0)
                mixed_bytes = 1;
            else
                return cli_usage_error("--mixed-images: '%s': fail or bytes", optarg);
            break;
        case OPT_RBUF:
            if (cli_size("--read-buffer", optarg, &rbuf))
                return CLI_USAGE;
            if (rbuf < (1u << 20))
                return cli_usage_error("--read-buffer: at least 1M");
            break;
        case OPT_THREADS:
            if (cli_uint("--threads", optarg, 1024, &v))
                return CLI_USAGE;
            if (v < 1)
                return cli_usage_error("--threads: at least 1");
            threads = v > 1 ? 2 : 1;
            break;
        case 'q': quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        default:
            rc = cli_read_opt(c, optarg, &io_opts);
            if (rc == 1)
                break;
            return rc == CLI_USAGE ? rc : cli_bad_option(argv);
        }
    }
    if (argc - optind < 2)
        return cli_usage_error("convert IN OUT: %s missing", argc - optind == 0 ? "IN and OUT" : "OUT");
    if (argc - optind > 2)
        return cli_usage_error("convert IN OUT: too many arguments");
    in_url = argv[optind];
    out_url = argv[optind + 1];
    if (strcmp(out_url, "-") == 0 && isatty(STDOUT_FILENO))
        return cli_usage_error("refusing to write a dataset to a terminal (redirect stdout, or give a file)");

    t0 = ps_now_ns();
    if ((rc = cli_open_dataset(in_url, &io_opts, &io, &ds)))
        return rc;
    rc = CLI_FAIL;
    if (build_schema(ds, mixed_bytes, quiet, &sc))
        goto out;

    order = malloc((ds->nsamples + 1) * sizeof *order);
    su = malloc((ds->nsamples + 1) * sizeof *su);
    if (!order || !su) {
        cli_error("out of memory for %" PRIu64 " samples", ds->nsamples);
        goto out;
    }
    for (uint64_t i = 0; i < ds->nsamples; i++)
        order[i] = i;
    if (shuffle)
        shuffle_ids(order, ds->nsamples, seed);

    /* whole pages when the order lets us hold few at once (IN's own order nearly always); else sample reads */
    peak = plan(ds, order, 1, &cv.units, &cv.nunits, su);
    if (peak && peak > rbuf) {
        if (!quiet)
            cli_warn("%s: in this order whole pages would need %s held at once (--read-buffer %s): reading "
                     "sample by sample instead",
                     ds->name, cli_bytes(peak, b1), cli_bytes(rbuf, b2));
        free(cv.units);
        cv.units = NULL;
        peak = plan(ds, order, 0, &cv.units, &cv.nunits, su);
    }
    if (!peak) {
        cli_error("out of memory for the read plan");
        goto out;
    }
    cv.ds = ds;
    cv.io = io;
    cv.budget = rbuf;
    cv.depth = io_opts.queue_depth > 0 ? io_opts.queue_depth : ps_io_depth(io);
    if (cv.depth > MAX_DEPTH)
        cv.depth = MAX_DEPTH;
    /* as verify: a few whole-page reads in flight saturate a local disk; more only hold memory */
    if (io_opts.queue_depth <= 0 && cv.depth > 8 && ds->page_size >= (1u << 20) &&
        (strcmp(ps_io_backend(io), "io_uring") == 0 || strcmp(ps_io_backend(io), "pread") == 0))
        cv.depth = 8;
    if (cv.depth < 1)
        cv.depth = 1;
    pthread_mutex_init(&cv.lock, NULL);
    pthread_cond_init(&cv.ready_cv, NULL);
    pthread_cond_init(&cv.reader_cv, NULL);

    memset(&wo, 0, sizeof wo);
    wo.page_size = (uint32_t)page_size;
    wo.nfields = sc.nfields;
    memcpy(wo.fields, sc.f, sizeof sc.f);
    wo.nclasses = ds->nclasses;
    wo.classes = (const char *const *)ds->classes;
    /* IN's order kept: a shuffled .pgs stays shuffled (with its seed); JPEG bytes keep their restart markers */
    wo.flags = ds->format == PS_DS_PGS ? ds->flags & (PS_PGS_FLAG_SHUFFLED | PS_PGS_FLAG_RESTART) : 0;
    wo.seed = ds->format == PS_DS_PGS ? ds->pack_seed : 0;
    if (shuffle) {
        wo.flags |= PS_PGS_FLAG_SHUFFLED;
        wo.seed = seed;
    }

    cli_outputs_abort_on_signal();
    if ((rc = ps_out_open(out_url, &io_opts, &out, err)) < 0) {
        cli_error("%s", *err ? err : ps_strerror(rc));
        rc = CLI_FAIL;
        goto out;
    }
    if ((rc = ps_writer_open(out, &wo, &w, err)) < 0) {
        cli_error("%s: %s", out_url, err);
        rc = CLI_FAIL;
        goto out;
    }
    rc = CLI_FAIL;
    if (threads > 1) {
        if (pthread_create(&th, NULL, reader_main, &cv) == 0)
            started = 1;
        else
            threads = 1; /* reads then overlap only while this thread waits */
    }
    cli_progress_start(&pr, "convert", ds->nsamples);
    if (convert_all(&cv, &sc, order, su, w, started, out_url, &pr, &tot))
        goto out;
    cli_progress_end(&pr);
    stop_reader(&cv, &th, &started);
    if ((rc = cli_finish_output(w, out, out_url)) != CLI_OK)
        goto out;
    if (!quiet) {
        FILE *f = strcmp(out_url, "-") == 0 ? stderr : stdout;
        double secs = cli_seconds(t0);
        uint64_t ob = ps_out_tell(out);
        fprintf(f, "converted %s (%s, %" PRIu64 " samples, %" PRIu64 " page%s of %s) to %s: %" PRIu64
                   " samples in %" PRIu64 " page%s of %s, %s (%" PRIu64 " bytes)\n",
                ds->name, ds->format == PS_DS_BETON ? "beton" : "pgs", ds->nsamples, ds->npages,
                ds->npages == 1 ? "" : "s", cli_bytes(ds->page_size, b1),
                strcmp(out_url, "-") == 0 ? "stdout" : out_url, tot.samples,
                ps_writer_pages(w), ps_writer_pages(w) == 1 ? "" : "s", cli_bytes(page_size, b2), cli_bytes(ob, b3), ob);
        fprintf(f, "fields:");
        for (uint32_t k = 0; k < sc.nfields; k++) {
            uint32_t src = sc.src[k];
            fprintf(f, "%s %s (%s", k ? "," : "", sc.f[k].name, ps_ftype_name(sc.f[k].type));
            if (ds->fields[src].type != sc.f[k].type)
                fprintf(f, ", was %s", ps_ftype_name(ds->fields[src].type));
            fputc(')', f);
        }
        fputc('\n', f);
        fprintf(f, "%s payload copied in %.2f s: %s read (%" PRIu64 " whole pages, %" PRIu64
                   " single samples) at %.1f MB/s, %.1f MB/s written%s\n",
                cli_bytes(tot.payload, b1), secs, cli_bytes(cv.bytes_read, b2), cv.page_reads, cv.sample_reads,
                secs > 0 ? (double)cv.bytes_read / 1e6 / secs : 0, secs > 0 ? (double)ob / 1e6 / secs : 0,
                shuffle ? ", shuffled" : "");
    }
out:
    stop_reader(&cv, &th, &started);
    if (cv.units) {
        for (uint64_t u = 0; u < cv.nunits; u++)
            free(cv.units[u].buf);
        for (int i = 0; i < cv.npool; i++)
            free(cv.pool[i].p);
        pthread_mutex_destroy(&cv.lock);
        pthread_cond_destroy(&cv.ready_cv);
        pthread_cond_destroy(&cv.reader_cv);
    }
    free(cv.units);
    free(order);
    free(su);
    ps_writer_free(w);
    ps_out_close(out); /* aborts (nothing left under OUT's name) unless committed */
    ps_ds_close(ds);
    ps_io_close(io);
    return rc;
}
