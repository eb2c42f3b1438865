/*
 * cmd_inspect.c - `pagestream inspect FILE|URL [--json]`: what a dataset
 * holds, from its metadata alone (header, footer, tables; no page is read).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char usage_text[] =
    "usage: pagestream inspect FILE|URL [--json] [storage options]\n\n"
    "Shows a dataset's header, fields, counts, page fill, classes with their sample\n"
    "counts, and file size. Reads only the metadata (header, footer, tables).\n\n"
    "  --json              machine-readable output\n"
    "  -h, --help          this text\n\n" CLI_READ_HELP;

struct label_count {
    int64_t label;
    uint64_t n;
};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Samples per label: by class index when there is a class table, else per distinct value. */
static struct label_count *count_labels(const struct ps_dataset *ds, size_t *n)
{
    struct label_count *lc = NULL;
    *n = 0;
    if (ds->label_field < 0)
        return NULL;
    if (ds->nclasses) {
        lc = calloc(ds->nclasses, sizeof *lc);
        if (!lc)
            return NULL;
        for (uint32_t c = 0; c < ds->nclasses; c++)
            lc[c].label = c;
        for (uint64_t i = 0; i < ds->nsamples; i++) {
            int64_t l = ps_ds_label(ds, i);
            if (l >= 0 && (uint64_t)l < ds->nclasses)
                lc[l].n++;
        }
        *n = ds->nclasses;
        return lc;
    }
    int64_t *v = malloc((ds->nsamples ? ds->nsamples : 1) * sizeof *v);
    lc = malloc((ds->nsamples ? ds->nsamples : 1) * sizeof *lc);
    if (!v || !lc) {
        free(v);
        free(lc);
        return NULL;
    }
    for (uint64_t i = 0; i < ds->nsamples; i++)
        v[i] = ps_ds_label(ds, i);
    qsort(v, ds->nsamples, sizeof *v, cmp_i64);
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        if (*n && lc[*n - 1].label == v[i])
            lc[*n - 1].n++;
        else
            lc[(*n)++] = (struct label_count){ v[i], 1 };
    }
    free(v);
    return lc;
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option lo[] = { { "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
                                         CLI_READ_LONGOPTS, { NULL, 0, NULL, 0 } };
    struct ps_io_opts io_opts;
    struct ps_io *io = NULL;
    struct ps_dataset *ds = NULL;
    int json = 0, c, rc;
    const char *url;

    ps_io_opts_init(&io_opts);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
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
    url = argv[optind];
    if ((rc = cli_open_dataset(url, &io_opts, &io, &ds)))
        return rc;

    /* page fill */
    double fill_mean = 0, fill_min = 1;
    uint64_t min_page = 0;
    for (uint64_t p = 0; p < ds->npages; p++) {
        double f = (double)ds->pages[p].used / ds->page_size;
        fill_mean += f;
        if (f < fill_min) {
            fill_min = f;
            min_page = p;
        }
    }
    if (ds->npages)
        fill_mean /= (double)ds->npages;
    else
        fill_min = 0;
    /* image sizes of the primary field */
    double mh = 0, mw = 0;
    uint64_t nimg = 0;
    int imgf = ds->image_field;
    if (imgf >= 0)
        for (uint64_t i = 0; i < ds->nsamples; i++) {
            const struct ps_ds_value *v = &ds->values[i * ds->nfields + imgf];
            if (v->h && v->w) {
                mh += v->h;
                mw += v->w;
                nimg++;
            }
        }
    if (nimg) {
        mh /= (double)nimg;
        mw /= (double)nimg;
    }
    size_t nlabels = 0;
    struct label_count *lc = count_labels(ds, &nlabels);
    const char *fmt = ds->format == PS_DS_PGS ? "pgs" : ds->format == PS_DS_BETON ? "beton" : "unknown";
    double mean_len = ds->nsamples ? (double)ds->payload_bytes / (double)ds->nsamples : 0;

    if (json) {
        struct cli_json j;
        json_begin(&j, stdout);
        json_str(&j, "file", ds->name);
        json_str(&j, "format", fmt);
        json_uint(&j, "version", ds->version);
        json_uint(&j, "file_size", ds->file_size);
        json_uint(&j, "page_size", ds->page_size);
        json_uint(&j, "data_offset", ds->data_off);
        json_uint(&j, "samples", ds->nsamples);
        json_uint(&j, "pages", ds->npages);
        json_uint(&j, "payload_bytes", ds->payload_bytes);
        json_num(&j, "mean_sample_bytes", mean_len);
        json_uint(&j, "max_sample_bytes", ds->max_sample_len);
        json_uint(&j, "max_span_pages", ds->max_span);
        json_num(&j, "page_fill_mean", fill_mean);
        json_num(&j, "page_fill_min", fill_min);
        json_bool(&j, "shuffled", (ds->flags & PS_PGS_FLAG_SHUFFLED) != 0);
        json_bool(&j, "restart_markers", (ds->flags & PS_PGS_FLAG_RESTART) != 0);
        json_uint(&j, "seed", ds->pack_seed);
        json_uint(&j, "flags", ds->flags);
        json_bool(&j, "page_checksums", ds->has_page_crc);
        json_bool(&j, "sample_checksums", ds->has_sample_crc);
        json_arr(&j, "fields");
        for (uint32_t f = 0; f < ds->nfields; f++) {
            json_obj(&j, NULL);
            json_str(&j, "name", ds->fields[f].name);
            json_str(&j, "type", ps_ftype_name(ds->fields[f].type));
            json_obj_end(&j);
        }
        json_arr_end(&j);
        if (ds->label_field >= 0)
            json_str(&j, "label_field", ds->fields[ds->label_field].name);
        else
            json_str(&j, "label_field", NULL);
        if (imgf >= 0)
            json_str(&j, "image_field", ds->fields[imgf].name);
        else
            json_str(&j, "image_field", NULL);
        if (nimg) {
            json_num(&j, "mean_height", mh);
            json_num(&j, "mean_width", mw);
        }
        json_uint(&j, "nclasses", ds->nclasses);
        json_arr(&j, "classes");
        for (uint32_t k = 0; k < ds->nclasses; k++) {
            json_obj(&j, NULL);
            json_uint(&j, "label", k);
            json_str(&j, "name", ds->classes[k]);
            json_uint(&j, "samples", lc ? lc[k].n : 0);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        if (!ds->nclasses && lc) {
            json_arr(&j, "labels");
            for (size_t k = 0; k < nlabels; k++) {
                json_obj(&j, NULL);
                json_int(&j, "label", lc[k].label);
                json_uint(&j, "samples", lc[k].n);
                json_obj_end(&j);
            }
            json_arr_end(&j);
        }
        json_end(&j);
    } else {
        char b1[32], b2[32], b3[32];
        printf("file:         %s\n", ds->name);
        printf("size:         %s (%" PRIu64 " bytes)\n", cli_bytes(ds->file_size, b1), ds->file_size);
        printf("format:       %s version %u\n", fmt, ds->version);
        printf("page size:    %s\n", cli_bytes(ds->page_size, b1));
        if (ds->format == PS_DS_PGS)
            printf("packed:       %s%s (seed %" PRIu64 ")\n",
                   ds->flags & PS_PGS_FLAG_SHUFFLED ? "shuffled" : "in source order",
                   ds->flags & PS_PGS_FLAG_RESTART ? ", JPEGs with restart markers" : "", ds->pack_seed);
        printf("fields:      ");
        for (uint32_t f = 0; f < ds->nfields; f++)
            printf(" %s (%s)%s", ds->fields[f].name, ps_ftype_name(ds->fields[f].type),
                   f + 1 < ds->nfields ? "," : "");
        printf("\n");
        printf("samples:      %" PRIu64 "\n", ds->nsamples);
        printf("pages:        %" PRIu64 ", fill mean %.1f%%, min %.1f%% (page %" PRIu64 ")\n", ds->npages,
               100 * fill_mean, 100 * fill_min, min_page);
        printf("payload:      %s, mean sample %s, largest %s", cli_bytes(ds->payload_bytes, b1),
               cli_bytes((uint64_t)mean_len, b2), cli_bytes(ds->max_sample_len, b3));
        if (ds->max_span > 1)
            printf(" (spans %u pages)", ds->max_span);
        printf("\n");
        if (nimg)
            printf("images:       mean %.0f x %.0f (width x height) in field %s\n", mw, mh, ds->fields[imgf].name);
        printf("checksums:    %s\n", ds->has_page_crc ? "CRC32C per page and per sample" : "none in this format");
        if (ds->nclasses) {
            printf("classes:      %u\n", ds->nclasses);
            for (uint32_t k = 0; k < ds->nclasses; k++) {
                if (k == 50 && ds->nclasses > 60) {
                    printf("  ... %u more (--json lists all)\n", ds->nclasses - 50);
                    break;
                }
                printf("  %5u  %-30s %8" PRIu64 "\n", k, ds->classes[k], lc ? lc[k].n : 0);
            }
        } else if (lc) {
            printf("labels:       %zu distinct values (no class names)\n", nlabels);
            for (size_t k = 0; k < nlabels && k < 50; k++)
                printf("  %5" PRId64 "  %8" PRIu64 "\n", lc[k].label, lc[k].n);
            if (nlabels > 50)
                printf("  ... %zu more (--json lists all)\n", nlabels - 50);
        }
    }
    free(lc);
    ps_ds_close(ds);
    ps_io_close(io);
    return CLI_OK;
}
