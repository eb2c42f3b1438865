/*
 * cmd_verify.c - `pagestream verify FILE|URL`: the structure (validated on
 * open) and then every page and sample checksum, reading pages through
 * ps_io with several reads in flight; names every bad page and its samples.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char usage_text[] =
    "usage: pagestream verify FILE|URL [--json] [storage options]\n\n"
    "Checks a dataset: its structure (every offset, length and count), then reads every\n"
    "page and checks its CRC32C and those of the samples in it. Every bad page is named\n"
    "with the samples it holds; the exit status is 1 when anything is bad.\n\n"
    "  --json              machine-readable report on stdout\n"
    "  -q, --quiet         no report when the file is good\n"
    "  -h, --help          this text\n\n" CLI_READ_HELP;

#define MAX_LISTED 100   /* problems printed one per line; the rest are counted */
#define BUF_BUDGET (256ull << 20)

/* A read unit: a page, or the run of pages of a sample bigger than a page. */
struct unit {
    uint64_t page;
    uint32_t npages;
};

struct bad {
    uint64_t page;       /* or sample, for bad samples */
    int64_t first, last; /* samples starting in the page (-1 none) */
    int64_t part_of;     /* continuation page of this sample (-1 none) */
    int read_error;
};

struct report {
    struct bad *pages, *samples;
    size_t npages, nsamples, cap_p, cap_s;
    uint64_t bad_pages, bad_samples, read_errors;
};

static void add_bad(struct bad **v, size_t *n, size_t *cap, const struct bad *b)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct bad *p = realloc(*v, c * sizeof *p);
        if (!p)
            return; /* still counted, just not listed */
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = *b;
}

static void describe_page(const struct ps_dataset *ds, const struct unit *u, uint64_t q, struct bad *b)
{
    memset(b, 0, sizeof *b);
    b->page = q;
    b->first = b->last = b->part_of = -1;
    if (ds->page_first[q] < ds->page_first[q + 1]) {
        b->first = ds->page_samples[ds->page_first[q]];
        b->last = ds->page_samples[ds->page_first[q + 1] - 1];
    } else {
        for (uint64_t k = ds->page_first[u->page]; k < ds->page_first[u->page + 1]; k++) {
            const struct ps_ds_sample *s = &ds->samples[ds->page_samples[k]];
            if (s->page + s->span > q)
                b->part_of = ds->page_samples[k];
        }
    }
}

static const char *page_what(const struct bad *b, char *buf, size_t n)
{
    if (b->first >= 0 && b->first == b->last)
        snprintf(buf, n, " (sample %" PRId64 ")", b->first);
    else if (b->first >= 0)
        snprintf(buf, n, " (samples %" PRId64 "-%" PRId64 ")", b->first, b->last);
    else if (b->part_of >= 0)
        snprintf(buf, n, " (part of sample %" PRId64 ")", b->part_of);
    else
        buf[0] = 0;
    return buf;
}

/* 1 when every page and sample checksum of the unit matches. */
static int unit_clean(const struct ps_dataset *ds, const struct unit *u, const uint8_t *buf)
{
    for (uint64_t q = u->page; q < u->page + u->npages; q++)
        if (ps_ds_check_page(ds, q, buf + (q - u->page) * ds->page_size))
            return 0;
    for (uint64_t k = ds->page_first[u->page]; k < ds->page_first[u->page + 1]; k++) {
        uint64_t id = ds->page_samples[k];
        const struct ps_ds_sample *s = &ds->samples[id];
        if (ps_ds_check_sample(ds, id, buf + (s->off - ps_ds_page_offset(ds, u->page))))
            return 0;
    }
    return 1;
}

static void check_unit(const struct ps_dataset *ds, const struct unit *u, uint8_t *buf, int read_rc,
                       struct report *r, int json)
{
    char what[96];
    for (uint64_t q = u->page; q < u->page + u->npages; q++) {
        struct bad b;
        int rc = read_rc < 0 ? read_rc : ps_ds_check_page(ds, q, buf + (q - u->page) * ds->page_size);
        if (!rc)
            continue;
        describe_page(ds, u, q, &b);
        b.read_error = read_rc < 0;
        if (b.read_error)
            r->read_errors++;
        else
            r->bad_pages++;
        if (r->npages < MAX_LISTED * 10)
            add_bad(&r->pages, &r->npages, &r->cap_p, &b);
        if (!json && r->bad_pages + r->read_errors <= MAX_LISTED)
            cli_error("%s: page %" PRIu64 "%s: %s", ds->name, q, page_what(&b, what, sizeof what),
                      b.read_error ? ps_strerror(read_rc) : "checksum mismatch");
    }
    if (read_rc < 0)
        return;
    for (uint64_t k = ds->page_first[u->page]; k < ds->page_first[u->page + 1]; k++) {
        uint64_t id = ds->page_samples[k];
        const struct ps_ds_sample *s = &ds->samples[id];
        const uint8_t *sb = buf + (s->off - ps_ds_page_offset(ds, u->page));
        /* .beton JSON values end in a NUL (FFCV writes one); opening a file
         * reads no payloads, so this is where a missing one is caught */
        for (uint32_t f = 0; f < ds->nfields; f++) {
            const struct ps_ds_value *v = &ds->values[id * ds->nfields + f];
            if (v->kind != PS_F_JSON || (v->len && sb[v->off + v->len - 1] == 0))
                continue;
            r->bad_samples++;
            if (!json && r->bad_samples <= MAX_LISTED)
                cli_error("%s: sample %" PRIu64 " field '%s': JSON value without its trailing NUL", ds->name, id,
                          ds->fields[f].name);
        }
        if (ps_ds_check_sample(ds, id, sb) == 0)
            continue;
        struct bad b = { .page = id, .first = id, .last = id, .part_of = s->page };
        r->bad_samples++;
        if (r->nsamples < MAX_LISTED * 10)
            add_bad(&r->samples, &r->nsamples, &r->cap_s, &b);
        if (!json && r->bad_samples <= MAX_LISTED)
            cli_error("%s: sample %" PRIu64 " (page %u, offset %" PRIu64 ", %u bytes): checksum mismatch", ds->name,
                      id, s->page, s->off, s->len);
    }
}

int cmd_verify(int argc, char **argv)
{
    static const struct option lo[] = { { "json", no_argument, NULL, 'j' }, { "quiet", no_argument, NULL, 'q' },
                                         { "help", no_argument, NULL, 'h' }, CLI_READ_LONGOPTS,
                                         { NULL, 0, NULL, 0 } };
    struct ps_io_opts io_opts;
    struct ps_io *io = NULL;
    struct ps_dataset *ds = NULL;
    struct unit *units = NULL;
    uint8_t **bufs = NULL;
    int64_t *slot_unit = NULL;
    struct report r;
    int json = 0, quiet = 0, c, rc, nbuf = 0;
    uint64_t nunits = 0, bytes = 0, t0, rereads = 0, transient = 0;
    int *attempts = NULL;
    uint32_t maxrun = 1;

    memset(&r, 0, sizeof r);
    ps_io_opts_init(&io_opts);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", lo, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'q': quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        default:
            rc = cli_read_opt(c, optarg, &io_opts);
            if (rc == 1)
                break;
            return rc == CLI_USAGE ? rc : cli_bad_option(argv);
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(argc - optind < 1 ? "which dataset? (FILE or URL)" : "one dataset at a time");
    t0 = ps_now_ns();
    if ((rc = cli_open_dataset(argv[optind], &io_opts, &io, &ds)))
        return rc;
    rc = CLI_FAIL;

    units = malloc((ds->npages ? ds->npages : 1) * sizeof *units);
    if (!units) {
        cli_error("out of memory");
        goto out;
    }
    for (uint64_t p = 0; p < ds->npages;) {
        uint32_t run = 1;
        for (uint64_t k = ds->page_first[p]; k < ds->page_first[p + 1]; k++) {
            uint32_t span = ds->samples[ds->page_samples[k]].span;
            if (span > run)
                run = span;
        }
        if (run > ds->npages - p)
            run = (uint32_t)(ds->npages - p);
        units[nunits++] = (struct unit){ p, run };
        if (run > maxrun)
            maxrun = run;
        p += run;
    }

    /* a few reads in flight saturate a local disk; remote backends get their own depth. Buffers are
     * reused, so their page faults are paid once, not per page. */
    nbuf = io_opts.queue_depth > 0 ? io_opts.queue_depth : ps_io_depth(io);
    if (nbuf < 1)
        nbuf = 1;
    if (nbuf > 64)
        nbuf = 64;
    if (io_opts.queue_depth <= 0 && nbuf > 8 && ds->page_size >= (1u << 20))
        nbuf = 8;
    if ((uint64_t)nbuf * maxrun * ds->page_size > BUF_BUDGET)
        nbuf = (int)(BUF_BUDGET / ((uint64_t)maxrun * ds->page_size));
    if (nbuf < 1)
        nbuf = 1;
    if ((uint64_t)nbuf > nunits)
        nbuf = nunits ? (int)nunits : 1;
    bufs = calloc((size_t)nbuf, sizeof *bufs);
    slot_unit = malloc((size_t)nbuf * sizeof *slot_unit);
    attempts = calloc((size_t)nbuf, sizeof *attempts);
    if (!bufs || !slot_unit || !attempts) {
        cli_error("out of memory");
        goto out;
    }
    for (int i = 0; i < nbuf; i++) {
        if (posix_memalign((void **)&bufs[i], 4096, (size_t)maxrun * ds->page_size)) {
            bufs[i] = NULL;
            cli_error("out of memory for %d read buffers of %u pages", nbuf, maxrun);
            goto out;
        }
        slot_unit[i] = -1;
    }

    struct cli_progress prog;
    uint64_t next = 0, done = 0;
    int inflight = 0;
    struct ps_io_cqe cqes[64];
    cli_progress_start(&prog, "verify", ds->npages);
    while (done < nunits) {
        for (int s = 0; s < nbuf && next < nunits; s++) {
            if (slot_unit[s] >= 0)
                continue;
            const struct unit *u = &units[next];
            uint64_t off = ps_ds_page_offset(ds, u->page), len = (uint64_t)u->npages * ds->page_size;
            if (off + len > ds->file_size) /* only formats without whole last pages */
                len = ds->file_size > off ? ds->file_size - off : 0;
            memset(bufs[s] + len, 0, (size_t)u->npages * ds->page_size - len);
            struct ps_io_req req = { .offset = off, .length = len, .buf = bufs[s], .cookie = (uint64_t)s };
            int n = len ? ps_io_submit(io, &req, 1) : 0;
            if (n < 0) {
                cli_error("%s: %s", ds->name, *ps_io_errmsg(io) ? ps_io_errmsg(io) : ps_strerror(n));
                goto out;
            }
            if (len && n == 0)
                break; /* the backend is full: reap first */
            slot_unit[s] = (int64_t)next++;
            if (!len) {
                check_unit(ds, u, bufs[s], 0, &r, json);
                slot_unit[s] = -1;
                done++;
                continue;
            }
            inflight++;
        }
        if (!inflight) {
            if (done < nunits && next < nunits) {
                cli_error("%s: the storage backend accepts no read", ds->name);
                goto out;
            }
            continue;
        }
        int n = ps_io_reap(io, cqes, 64, 1, -1);
        if (n < 0) {
            cli_error("%s: %s", ds->name, *ps_io_errmsg(io) ? ps_io_errmsg(io) : ps_strerror(n));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            int s = (int)cqes[i].cookie;
            if (s < 0 || s >= nbuf || slot_unit[s] < 0)
                continue;
            const struct unit *u = &units[slot_unit[s]];
            int res = cqes[i].res < 0 ? (int)cqes[i].res : 0;
            if (res >= 0)
                bytes += (uint64_t)cqes[i].res;
            if (res >= 0 && attempts[s] < 2 && !unit_clean(ds, u, bufs[s])) {
                /* maybe corrupted in transit: read it again before calling it bad */
                uint64_t off = ps_ds_page_offset(ds, u->page), len = (uint64_t)u->npages * ds->page_size;
                if (off + len > ds->file_size)
                    len = ds->file_size > off ? ds->file_size - off : 0;
                struct ps_io_req req = { .offset = off, .length = len, .buf = bufs[s], .cookie = (uint64_t)s };
                if (ps_io_submit(io, &req, 1) == 1) {
                    attempts[s]++;
                    rereads++;
                    continue;
                }
            }
            if (res >= 0 && attempts[s] && unit_clean(ds, u, bufs[s]))
                transient++;
            attempts[s] = 0;
            check_unit(ds, u, bufs[s], res, &r, json);
            slot_unit[s] = -1;
            inflight--;
            done++;
            cli_progress(&prog, u->page + u->npages, bytes);
        }
    }
    cli_progress_end(&prog);

    double secs = cli_seconds(t0);
    double mbs = secs > 0 ? (double)bytes / 1e6 / secs : 0;
    int bad = r.bad_pages || r.bad_samples || r.read_errors;
    if (json) {
        struct cli_json j;
        json_begin(&j, stdout);
        json_str(&j, "file", ds->name);
        json_bool(&j, "ok", !bad);
        json_uint(&j, "samples", ds->nsamples);
        json_uint(&j, "pages", ds->npages);
        json_bool(&j, "checksums", ds->has_page_crc || ds->has_sample_crc);
        json_uint(&j, "bytes_read", bytes);
        json_num(&j, "seconds", secs);
        json_num(&j, "mb_per_s", mbs);
        json_uint(&j, "bad_pages", r.bad_pages);
        json_uint(&j, "bad_samples", r.bad_samples);
        json_uint(&j, "read_errors", r.read_errors);
        json_uint(&j, "rereads", rereads);
        json_uint(&j, "transient_mismatches", transient);
        json_arr(&j, "pages_failed");
        for (size_t k = 0; k < r.npages; k++) {
            json_obj(&j, NULL);
            json_uint(&j, "page", r.pages[k].page);
            json_str(&j, "error", r.pages[k].read_error ? "read error" : "checksum mismatch");
            if (r.pages[k].first >= 0) {
                json_int(&j, "first_sample", r.pages[k].first);
                json_int(&j, "last_sample", r.pages[k].last);
            }
            if (r.pages[k].part_of >= 0)
                json_int(&j, "part_of_sample", r.pages[k].part_of);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_arr(&j, "samples_failed");
        for (size_t k = 0; k < r.nsamples; k++)
            json_uint(&j, NULL, r.samples[k].page);
        json_arr_end(&j);
        json_end(&j);
    } else if (bad) {
        if (r.bad_pages + r.read_errors > MAX_LISTED || r.bad_samples > MAX_LISTED)
            cli_error("%s: (only the first %d problems of each kind are listed)", ds->name, MAX_LISTED);
        printf("%s: FAILED: %" PRIu64 " of %" PRIu64 " pages bad, %" PRIu64 " of %" PRIu64 " samples bad",
               ds->name, r.bad_pages, ds->npages, r.bad_samples, ds->nsamples);
        if (r.read_errors)
            printf(", %" PRIu64 " pages unreadable", r.read_errors);
        printf("\n");
    } else if (!quiet) {
        char b[32];
        if (transient)
            printf("%s: %" PRIu64 " page runs failed a checksum once and read back intact (corrupted in transit, not "
                   "on storage)\n", ds->name, transient);
        if (ds->has_page_crc || ds->has_sample_crc)
            printf("%s: OK: %" PRIu64 " samples in %" PRIu64 " pages, every checksum matches (%s read in %.2f s, "
                   "%.0f MB/s)\n",
                   ds->name, ds->nsamples, ds->npages, cli_bytes(bytes, b), secs, mbs);
        else
            printf("%s: structure OK, every page readable: %" PRIu64 " samples in %" PRIu64
                   " pages (this format has no checksums; %s read in %.2f s, %.0f MB/s)\n",
                   ds->name, ds->nsamples, ds->npages, cli_bytes(bytes, b), secs, mbs);
    }
    rc = bad ? CLI_FAIL : CLI_OK;
out:
    if (bufs)
        for (int i = 0; i < nbuf; i++)
            free(bufs[i]);
    free(bufs);
    free(slot_unit);
    free(attempts);
    free(units);
    free(r.pages);
    free(r.samples);
    ps_ds_close(ds);
    ps_io_close(io);
    return rc;
}
