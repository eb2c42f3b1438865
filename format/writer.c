/*
 * writer.c - the .pgs writer: streams the header and full pages to a
 * ps_out in order, keeps the sample table and page index in memory, and
 * writes them with the footer at the end, so it can write to a pipe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct ps_writer {
    struct ps_out *out;
    uint32_t page_size, nfields, flags, nclasses;
    struct ps_field fields[PS_MAX_FIELDS];
    char **classes;
    int label_field;
    uint64_t seed;
    uint32_t hdr_crc;
    uint8_t *page;          /* the page being filled */
    uint32_t used;          /* bytes of it holding data */
    int page_open;
    uint32_t page_n;        /* samples starting in it */
    uint64_t page_first;    /* samples starting in earlier pages */
    uint64_t npages;        /* pages written */
    uint64_t nsamples;
    struct buf rows, pidx;
    int failed;             /* a write failed: the output is unusable */
    char failmsg[PS_ERRLEN];
};

static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static int is_var(uint8_t t) { return t == PS_F_JPEG || t == PS_F_RAW || t == PS_F_BYTES; }

static uint8_t *buf_grow(struct buf *b, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    b->len += n;
    return b->p + b->len - n;
}

static int out_write(struct ps_writer *w, const void *p, size_t n, char *err)
{
    int rc;
    if (w->failed)
        return ps_seterr(err, -EIO, "%s", w->failmsg);
    rc = ps_out_write(w->out, p, n);
    if (rc < 0) {
        const char *m = ps_out_errmsg(w->out);
        w->failed = 1;
        snprintf(w->failmsg, sizeof w->failmsg, "writing the dataset: %s", *m ? m : ps_strerror(rc));
        return ps_seterr(err, rc, "%s", w->failmsg);
    }
    return 0;
}

static int flush_page(struct ps_writer *w, char *err)
{
    uint8_t *r;
    int rc;

    memset(w->page + w->used, 0, w->page_size - w->used);
    r = buf_grow(&w->pidx, PS_PGS_PAGE_ROW);
    if (!r)
        return ps_seterr(err, -ENOMEM, "out of memory for the page index");
    wr32(r, (uint32_t)w->page_first);
    wr32(r + 4, w->page_n);
    wr32(r + 8, w->used);
    wr32(r + 12, ps_crc32c(0, w->page, w->page_size));
    rc = out_write(w, w->page, w->page_size, err);
    if (rc)
        return rc;
    w->npages++;
    w->page_first += w->page_n;
    w->page_open = 0;
    w->page_n = 0;
    w->used = 0;
    return 0;
}

static void open_page(struct ps_writer *w)
{
    w->page_open = 1;
    w->used = 0;
    w->page_n = 0;
}

static int check_name(const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    return n > 0 && n <= max;
}

int ps_writer_open(struct ps_out *out, const struct ps_writer_opts *o, struct ps_writer **wp, char *err)
{
    struct ps_writer *w;
    uint8_t *h;
    int rc;

    *wp = NULL;
    if (o->page_size % PS_PGS_ALIGN || o->page_size < PS_PGS_MIN_PAGE || o->page_size > PS_PGS_MAX_PAGE)
        return ps_seterr(err, PS_ECONFIG, "page size %u invalid: a multiple of 4 KiB from 64 KiB to 64 MiB",
                         o->page_size);
    if (o->nfields < 1 || o->nfields > PS_MAX_FIELDS)
        return ps_seterr(err, PS_ECONFIG, "%u fields: 1 to %d allowed", o->nfields, PS_MAX_FIELDS);
    for (uint32_t f = 0; f < o->nfields; f++) {
        uint8_t t = o->fields[f].type;
        if (!is_var(t) && t != PS_F_INT && t != PS_F_FLOAT)
            return ps_seterr(err, PS_ECONFIG, "field %u: type %u cannot be written to .pgs", f, t);
        if (!check_name(o->fields[f].name, PS_FIELD_NAME - 1))
            return ps_seterr(err, PS_ECONFIG, "field %u: name empty or longer than %d bytes", f, PS_FIELD_NAME - 1);
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(o->fields[g].name, o->fields[f].name) == 0)
                return ps_seterr(err, PS_ECONFIG, "field name \"%s\" used twice", o->fields[f].name);
    }
    if (o->nclasses > PS_PGS_MAX_CLASSES)
        return ps_seterr(err, PS_ECONFIG, "%u classes: at most %u", o->nclasses, PS_PGS_MAX_CLASSES);
    for (uint32_t c = 0; c < o->nclasses; c++)
        if (!check_name(o->classes[c], PS_PGS_MAX_CLASS_NAME))
            return ps_seterr(err, PS_ECONFIG, "class %u: name empty or longer than %u bytes", c,
                             PS_PGS_MAX_CLASS_NAME);

    w = calloc(1, sizeof *w);
    if (!w)
        return ps_seterr(err, -ENOMEM, "out of memory");
    w->out = out;
    w->page_size = o->page_size;
    w->nfields = o->nfields;
    w->flags = o->flags;
    w->seed = o->seed;
    w->label_field = -1;
    for (uint32_t f = 0; f < o->nfields; f++) {
        w->fields[f].type = o->fields[f].type;
        snprintf(w->fields[f].name, PS_FIELD_NAME, "%s", o->fields[f].name);
        if (o->fields[f].type == PS_F_INT && strcmp(o->fields[f].name, "label") == 0)
            w->label_field = (int)f;
    }
    for (uint32_t f = 0; f < o->nfields && w->label_field < 0; f++)
        if (o->fields[f].type == PS_F_INT)
            w->label_field = (int)f;
    if (o->nclasses) {
        w->classes = calloc(o->nclasses, sizeof *w->classes);
        if (!w->classes) {
            rc = ps_seterr(err, -ENOMEM, "out of memory");
            goto fail;
        }
        for (uint32_t c = 0; c < o->nclasses; c++) {
            w->classes[c] = strdup(o->classes[c]);
            if (!w->classes[c]) {
                rc = ps_seterr(err, -ENOMEM, "out of memory");
                goto fail;
            }
            w->nclasses = c + 1;
        }
    }
    if (posix_memalign((void **)&w->page, PS_PGS_ALIGN, w->page_size)) {
        w->page = NULL;
        rc = ps_seterr(err, -ENOMEM, "out of memory for a page of %u bytes", w->page_size);
        goto fail;
    }

    /* the header goes out at once; it holds no counts, so it never needs rewriting */
    h = w->page;
    memset(h, 0, PS_PGS_HEADER_SIZE);
    memcpy(h, PS_PGS_MAGIC, 8);
    wr32(h + 8, PS_PGS_VERSION);
    wr32(h + 12, w->page_size);
    wr32(h + 16, w->nfields);
    wr32(h + 20, w->flags);
    wr64(h + 24, PS_PGS_HEADER_SIZE);
    wr64(h + 32, w->seed);
    for (uint32_t f = 0; f < w->nfields; f++) {
        uint8_t *e = h + PS_PGS_HDR_FIELDS + f * PS_FIELD_NAME;
        e[0] = w->fields[f].type;
        memcpy(e + 1, w->fields[f].name, strlen(w->fields[f].name));
    }
    w->hdr_crc = ps_crc32c(0, h, PS_PGS_HDR_CRC);
    wr32(h + PS_PGS_HDR_CRC, w->hdr_crc);
    rc = out_write(w, h, PS_PGS_HEADER_SIZE, err);
    if (rc)
        goto fail;
    *wp = w;
    return 0;
fail:
    ps_writer_free(w);
    return rc;
}

/* Append bytes of a sample that spans pages, flushing each page as it fills. */
static int put_spanning(struct ps_writer *w, const uint8_t *p, size_t n, char *err)
{
    while (n) {
        size_t k;
        if (w->used == w->page_size) {
            int rc = flush_page(w, err);
            if (rc)
                return rc;
            open_page(w); /* a continuation page: no sample starts there */
        }
        k = w->page_size - w->used;
        if (k > n)
            k = n;
        memcpy(w->page + w->used, p, k);
        w->used += (uint32_t)k;
        p += k;
        n -= k;
    }
    return 0;
}

int ps_writer_add(struct ps_writer *w, const struct ps_wsample *s, char *err)
{
    uint64_t len = 0, off;
    uint32_t crc = 0;
    uint8_t *r;
    size_t rowlen = PS_PGS_ROW_FIXED + PS_PGS_ROW_FIELD * (size_t)w->nfields;
    int rc;

    if (w->failed)
        return ps_seterr(err, -EIO, "%s", w->failmsg);
    if (w->nsamples >= UINT32_MAX)
        return ps_seterr(err, PS_ECONFIG, "more than %u samples in one file", UINT32_MAX - 1);
    for (uint32_t f = 0; f < w->nfields; f++) {
        uint8_t t = w->fields[f].type;
        if (!is_var(t))
            continue;
        if (s->len[f] && !s->data[f])
            return ps_seterr(err, -EINVAL, "sample %llu: field %s: no data", (unsigned long long)w->nsamples,
                             w->fields[f].name);
        if (t != PS_F_BYTES && (!s->h[f] || !s->w[f]))
            return ps_seterr(err, -EINVAL, "sample %llu: field %s: image of %ux%u pixels",
                             (unsigned long long)w->nsamples, w->fields[f].name, s->w[f], s->h[f]);
        if (t == PS_F_RAW && (uint64_t)s->h[f] * s->w[f] * 3 != s->len[f])
            return ps_seterr(err, -EINVAL, "sample %llu: field %s: %u bytes for %ux%u RGB pixels",
                             (unsigned long long)w->nsamples, w->fields[f].name, s->len[f], s->w[f], s->h[f]);
        len += s->len[f];
    }
    if (len > UINT32_MAX)
        return ps_seterr(err, -EFBIG, "sample %llu: %llu bytes: at most 4 GiB - 1 per sample",
                         (unsigned long long)w->nsamples, (unsigned long long)len);
    if (w->nclasses && w->label_field >= 0) {
        int64_t l = s->ival[w->label_field];
        if (l < 0 || (uint64_t)l >= w->nclasses)
            return ps_seterr(err, -EINVAL, "sample %llu: label %lld outside the %u classes",
                             (unsigned long long)w->nsamples, (long long)l, w->nclasses);
    }
    r = buf_grow(&w->rows, rowlen);
    if (!r)
        return ps_seterr(err, -ENOMEM, "out of memory for the sample table");

    if (len <= w->page_size) {
        /* a full page takes no more samples, not even empty ones: their offset would be the next page's */
        if (w->page_open && (len > w->page_size - w->used || w->used == w->page_size) &&
            (rc = flush_page(w, err)))
            goto undo;
        if (!w->page_open)
            open_page(w);
        off = PS_PGS_HEADER_SIZE + w->npages * w->page_size + w->used;
        for (uint32_t f = 0; f < w->nfields; f++)
            if (is_var(w->fields[f].type) && s->len[f]) {
                memcpy(w->page + w->used, s->data[f], s->len[f]);
                crc = ps_crc32c(crc, s->data[f], s->len[f]);
                w->used += s->len[f];
            }
        w->page_n++;
    } else {
        /* a sample bigger than a page owns a run of fresh pages */
        if (w->page_open && (rc = flush_page(w, err)))
            goto undo;
        open_page(w);
        w->page_n = 1;
        off = PS_PGS_HEADER_SIZE + w->npages * w->page_size;
        for (uint32_t f = 0; f < w->nfields; f++)
            if (is_var(w->fields[f].type) && s->len[f]) {
                crc = ps_crc32c(crc, s->data[f], s->len[f]);
                if ((rc = put_spanning(w, s->data[f], s->len[f], err)))
                    goto undo;
            }
        if ((rc = flush_page(w, err)))
            goto undo;
    }

    wr64(r, off);
    wr32(r + 8, (uint32_t)len);
    wr32(r + 12, crc);
    for (uint32_t f = 0; f < w->nfields; f++) {
        uint8_t *e = r + PS_PGS_ROW_FIXED + f * PS_PGS_ROW_FIELD;
        uint64_t bits;
        switch (w->fields[f].type) {
        case PS_F_INT:
            wr64(e, (uint64_t)s->ival[f]);
            break;
        case PS_F_FLOAT:
            memcpy(&bits, &s->fval[f], 8);
            wr64(e, bits);
            break;
        case PS_F_BYTES:
            wr32(e, s->len[f]);
            wr32(e + 4, 0);
            break;
        default:
            wr32(e, s->len[f]);
            wr16(e + 4, s->h[f]);
            wr16(e + 6, s->w[f]);
            break;
        }
    }
    w->nsamples++;
    return 0;
undo:
    w->rows.len -= rowlen;
    return rc;
}

int ps_writer_finish(struct ps_writer *w, char *err)
{
    uint64_t off_samples, off_pages, off_classes, end;
    uint8_t foot[PS_PGS_FOOTER_SIZE], *p;
    struct buf cls = { 0 };
    uint32_t crc;
    size_t pad;
    int rc;

    if (w->failed)
        return ps_seterr(err, -EIO, "%s", w->failmsg);
    if (w->page_open && (rc = flush_page(w, err)))
        return rc;
    off_samples = PS_PGS_HEADER_SIZE + w->npages * w->page_size;
    off_pages = off_samples + w->rows.len;
    off_classes = off_pages + w->pidx.len;

    if (!(p = buf_grow(&cls, 4)))
        goto nomem;
    wr32(p, w->nclasses);
    for (uint32_t c = 0; c < w->nclasses; c++) {
        size_t n = strlen(w->classes[c]);
        if (!(p = buf_grow(&cls, 2 + n)))
            goto nomem;
        wr16(p, (uint16_t)n);
        memcpy(p + 2, w->classes[c], n);
    }
    /* zero padding so the file is a whole number of 4 KiB blocks (O_DIRECT reads of the end) */
    end = off_classes + cls.len + PS_PGS_FOOTER_SIZE;
    pad = (size_t)((PS_PGS_ALIGN - end % PS_PGS_ALIGN) % PS_PGS_ALIGN);
    if (!(p = buf_grow(&cls, pad)))
        goto nomem;
    memset(p, 0, pad);

    crc = ps_crc32c(0, w->rows.p, w->rows.len);
    crc = ps_crc32c(crc, w->pidx.p, w->pidx.len);
    crc = ps_crc32c(crc, cls.p, cls.len);
    memset(foot, 0, sizeof foot);
    memcpy(foot, PS_PGS_FOOTER_MAGIC, 8);
    wr32(foot + 8, PS_PGS_VERSION);
    wr32(foot + 12, crc);
    wr64(foot + 16, w->nsamples);
    wr64(foot + 24, w->npages);
    wr64(foot + 32, off_samples);
    wr64(foot + 40, off_pages);
    wr64(foot + 48, off_classes);
    wr32(foot + 56, w->hdr_crc);
    wr32(foot + 60, ps_crc32c(0, foot, 60));

    if ((w->rows.len && (rc = out_write(w, w->rows.p, w->rows.len, err))) ||
        (w->pidx.len && (rc = out_write(w, w->pidx.p, w->pidx.len, err))) ||
        (rc = out_write(w, cls.p, cls.len, err)) || (rc = out_write(w, foot, sizeof foot, err))) {
        free(cls.p);
        return rc;
    }
    free(cls.p);
    return 0;
nomem:
    free(cls.p);
    return ps_seterr(err, -ENOMEM, "out of memory for the class table");
}

uint64_t ps_writer_samples(const struct ps_writer *w) { return w->nsamples; }
uint64_t ps_writer_pages(const struct ps_writer *w) { return w->npages; }

void ps_writer_free(struct ps_writer *w)
{
    if (!w)
        return;
    for (uint32_t c = 0; c < w->nclasses; c++)
        free(w->classes[c]);
    free(w->classes);
    free(w->page);
    free(w->rows.p);
    free(w->pidx.p);
    free(w);
}
