/*
 * dataset.c - the format-neutral side of struct ps_dataset: opening a file
 * of either format (told by its first bytes), the page index, checksums of
 * pages and samples, labels and field type names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/format_int.h"

struct ps_dataset *ps_ds_alloc(const char *name)
{
    struct ps_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    snprintf(ds->name, sizeof ds->name, "%s", name ? name : "");
    ds->label_field = -1;
    ds->image_field = -1;
    return ds;
}

void ps_ds_close(struct ps_dataset *ds)
{
    if (!ds)
        return;
    if (ds->classes) {
        for (uint32_t i = 0; i < ds->nclasses; i++)
            free(ds->classes[i]);
        free(ds->classes);
    }
    free(ds->samples);
    free(ds->values);
    free(ds->pages);
    free(ds->page_first);
    free(ds->page_samples);
    free(ds);
}

int ps_ds_index_pages(struct ps_dataset *ds, char *err)
{
    uint64_t *first;
    uint32_t *list;

    free(ds->page_first);
    free(ds->page_samples);
    ds->page_first = NULL;
    ds->page_samples = NULL;
    if (ds->nsamples > UINT32_MAX)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu samples: more than this version handles", ds->name,
                         (unsigned long long)ds->nsamples);
    first = calloc(ds->npages + 1, sizeof *first);
    list = malloc((ds->nsamples ? ds->nsamples : 1) * sizeof *list);
    if (!first || !list) {
        free(first);
        free(list);
        return ps_seterr(err, -ENOMEM, "%s: out of memory for the page index", ds->name);
    }
    ds->payload_bytes = 0;
    ds->max_sample_len = 0;
    ds->max_span = 0;
    /* counting sort by page, stable, so samples keep table order within a page */
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        const struct ps_ds_sample *s = &ds->samples[i];
        if (s->page >= ds->npages || s->span == 0 || s->span > ds->npages - s->page) {
            free(first);
            free(list);
            return ps_seterr(err, PS_EFORMAT, "%s: sample %llu: pages %u+%u outside the %llu pages", ds->name,
                             (unsigned long long)i, s->page, s->span, (unsigned long long)ds->npages);
        }
        first[s->page + 1]++;
        ds->payload_bytes += s->len;
        if (s->len > ds->max_sample_len)
            ds->max_sample_len = s->len;
        if (s->span > ds->max_span)
            ds->max_span = s->span;
    }
    for (uint64_t p = 0; p < ds->npages; p++)
        first[p + 1] += first[p];
    {
        uint64_t *fill = malloc((ds->npages ? ds->npages : 1) * sizeof *fill);
        if (!fill) {
            free(first);
            free(list);
            return ps_seterr(err, -ENOMEM, "%s: out of memory for the page index", ds->name);
        }
        memcpy(fill, first, ds->npages * sizeof *fill);
        for (uint64_t i = 0; i < ds->nsamples; i++)
            list[fill[ds->samples[i].page]++] = (uint32_t)i;
        free(fill);
    }
    ds->page_first = first;
    ds->page_samples = list;
    return 0;
}

int ps_ds_check_page(const struct ps_dataset *ds, uint64_t page, const void *buf)
{
    if (!ds->has_page_crc)
        return 0;
    if (page >= ds->npages)
        return PS_EFORMAT;
    return ps_crc32c(0, buf, ds->page_size) == ds->pages[page].crc ? 0 : PS_ECHECKSUM;
}

int ps_ds_check_sample(const struct ps_dataset *ds, uint64_t sample, const void *buf)
{
    if (!ds->has_sample_crc)
        return 0;
    if (sample >= ds->nsamples)
        return PS_EFORMAT;
    const struct ps_ds_sample *s = &ds->samples[sample];
    return ps_crc32c(0, buf, s->len) == s->crc ? 0 : PS_ECHECKSUM;
}

int64_t ps_ds_label(const struct ps_dataset *ds, uint64_t sample)
{
    if (ds->label_field < 0 || sample >= ds->nsamples)
        return -1;
    return ds->values[sample * ds->nfields + (uint32_t)ds->label_field].v.i;
}

static const char *const type_names[] = {
    [PS_F_JPEG] = "jpeg", [PS_F_RAW] = "raw",   [PS_F_INT] = "int",     [PS_F_FLOAT] = "float",
    [PS_F_BYTES] = "bytes", [PS_F_IMAGE] = "image", [PS_F_JSON] = "json", [PS_F_NDARRAY] = "ndarray",
};

const char *ps_ftype_name(int type)
{
    if (type > 0 && type < (int)(sizeof type_names / sizeof type_names[0]) && type_names[type])
        return type_names[type];
    return "unknown";
}

int ps_ftype_parse(const char *s)
{
    for (int t = 1; t < (int)(sizeof type_names / sizeof type_names[0]); t++)
        if (type_names[t] && s && strcasecmp(s, type_names[t]) == 0)
            return t;
    return -1;
}

static int is_pgs(const uint8_t *head, size_t len)
{
    return len >= 8 && memcmp(head, PS_PGS_MAGIC, 8) == 0;
}

static int ds_open_once(struct ps_io *io, const char *name, struct ps_dataset **out, char *err);

/* A checksum failure in the metadata may be corruption in transit (a
 * flaky network, a bad NIC): read it again, a bounded number of times,
 * before calling the file bad. */
int ps_ds_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err)
{
    int rc = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        rc = ds_open_once(io, name, out, err);
        if (rc != PS_ECHECKSUM)
            break;
        if (attempt < 2)
            ps_log(PS_LOG_WARN, "%s, reading the metadata again", err);
    }
    return rc;
}

static int ds_open_once(struct ps_io *io, const char *name, struct ps_dataset **out, char *err)
{
    uint64_t size = ps_io_size(io);
    size_t headlen = size >= 4096 ? 4096 : (size_t)size;
    uint8_t *head = NULL;
    int64_t n;
    int rc;

    *out = NULL;
    if (size < 24)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu bytes: too small to be a dataset file", name,
                         (unsigned long long)size);
    /* aligned, so that the same read works with O_DIRECT */
    if (posix_memalign((void **)&head, 4096, 4096))
        return ps_seterr(err, -ENOMEM, "%s: out of memory", name);
    n = ps_io_pread(io, head, headlen, 0);
    if (n < 0) {
        const char *m = ps_io_msg_tail(ps_io_errmsg(io), name);
        rc = ps_seterr(err, (int)n, "%s: reading the header: %s", name, *m ? m : ps_strerror((int)n));
        goto out;
    }
    if (is_pgs(head, headlen))
        rc = ps_pgs_open_head(io, name, head, headlen, out, err);
    else if (ps_beton_is(head, headlen, size))
        rc = ps_beton_open(io, name, out, err);
    else
        rc = ps_seterr(err, PS_EFORMAT, "%s: not a pagestream (.pgs) or FFCV (.beton) dataset (unknown magic)",
                       name);
out:
    free(head);
    return rc;
}

int ps_ds_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err)
{
    *out = NULL;
    if (!buf || size < 24)
        return ps_seterr(err, PS_EFORMAT, "%s: %zu bytes: too small to be a dataset file", name, size);
    if (is_pgs(buf, size))
        return ps_pgs_parse(buf, size, name, out, err);
    if (ps_beton_is(buf, size < 4096 ? size : 4096, size))
        return ps_beton_parse(buf, size, name, out, err);
    return ps_seterr(err, PS_EFORMAT, "%s: not a pagestream (.pgs) or FFCV (.beton) dataset (unknown magic)",
                     name);
}
