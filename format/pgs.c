/*
 * pgs.c - the .pgs reader: header, footer and tables are read (three reads
 * at most, usually two) and every offset, length, count and checksum is
 * validated before anything is used. Layout: FORMAT.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

#define TAIL_READ (1u << 20) /* footer read: usually brings the tables too */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int is_var(uint8_t t) { return t == PS_F_JPEG || t == PS_F_RAW || t == PS_F_BYTES; }

/* What the footer says, once checked against the header and the file size. */
struct footer {
    uint64_t nsamples, npages;
    uint64_t off_samples, off_pages, off_classes;
    uint32_t table_crc;
};

static int parse_header(const uint8_t *h, uint64_t file_size, struct ps_dataset *ds, char *err)
{
    const char *nm = ds->name;
    uint32_t version = rd32(h + 8);

    if (memcmp(h, PS_PGS_MAGIC, 8) != 0)
        return ps_seterr(err, PS_EFORMAT, "%s: not a .pgs file (bad magic)", nm);
    if (version != PS_PGS_VERSION)
        return ps_seterr(err, PS_EVERSION, "%s: format version %u (this build reads version %u)", nm, version,
                         PS_PGS_VERSION);
    if (ps_crc32c(0, h, PS_PGS_HDR_CRC) != rd32(h + PS_PGS_HDR_CRC))
        return ps_seterr(err, PS_ECHECKSUM, "%s: header checksum mismatch", nm);
    ds->version = version;
    ds->page_size = rd32(h + 12);
    ds->nfields = rd32(h + 16);
    ds->flags = rd32(h + 20);
    ds->data_off = rd64(h + 24);
    ds->pack_seed = rd64(h + 32);
    ds->file_size = file_size;
    if (ds->page_size % PS_PGS_ALIGN || ds->page_size < PS_PGS_MIN_PAGE || ds->page_size > PS_PGS_MAX_PAGE)
        return ps_seterr(err, PS_EFORMAT, "%s: page size %u invalid (a multiple of 4096 from 64 KiB to 64 MiB)", nm,
                         ds->page_size);
    if (ds->data_off != PS_PGS_HEADER_SIZE)
        return ps_seterr(err, PS_EFORMAT, "%s: data offset %llu invalid (must be %u)", nm,
                         (unsigned long long)ds->data_off, PS_PGS_HEADER_SIZE);
    if (ds->nfields < 1 || ds->nfields > PS_MAX_FIELDS)
        return ps_seterr(err, PS_EFORMAT, "%s: %u fields (1 to %d allowed)", nm, ds->nfields, PS_MAX_FIELDS);
    for (uint32_t f = 0; f < PS_MAX_FIELDS; f++) {
        const uint8_t *e = h + PS_PGS_HDR_FIELDS + f * PS_FIELD_NAME;
        size_t n = strnlen((const char *)e + 1, PS_FIELD_NAME - 1);
        if (f >= ds->nfields) {
            for (uint32_t k = 0; k < PS_FIELD_NAME; k++)
                if (e[k])
                    return ps_seterr(err, PS_EFORMAT, "%s: unused field slot %u is not zero", nm, f);
            continue;
        }
        if (!is_var(e[0]) && e[0] != PS_F_INT && e[0] != PS_F_FLOAT)
            return ps_seterr(err, PS_EFORMAT, "%s: field %u: unknown type %u", nm, f, e[0]);
        if (n == 0)
            return ps_seterr(err, PS_EFORMAT, "%s: field %u: empty name", nm, f);
        for (size_t k = n + 1; k < PS_FIELD_NAME; k++)
            if (e[k])
                return ps_seterr(err, PS_EFORMAT, "%s: field %u: name not NUL-padded", nm, f);
        ds->fields[f].type = e[0];
        memcpy(ds->fields[f].name, e + 1, n);
        ds->fields[f].name[n] = 0;
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(ds->fields[g].name, ds->fields[f].name) == 0)
                return ps_seterr(err, PS_EFORMAT, "%s: field name \"%s\" used twice", nm, ds->fields[f].name);
    }
    for (uint32_t f = 0; f < ds->nfields; f++)
        if (ds->fields[f].type == PS_F_INT && strcmp(ds->fields[f].name, "label") == 0)
            ds->label_field = (int)f;
    for (uint32_t f = 0; f < ds->nfields && ds->label_field < 0; f++)
        if (ds->fields[f].type == PS_F_INT)
            ds->label_field = (int)f;
    for (uint32_t f = 0; f < ds->nfields && ds->image_field < 0; f++)
        if (is_var(ds->fields[f].type))
            ds->image_field = (int)f;
    return 0;
}

static int parse_footer(const uint8_t *ft, const uint8_t *h, const struct ps_dataset *ds, struct footer *fo,
                        char *err)
{
    const char *nm = ds->name;
    uint64_t fs = ds->file_size, end = fs - PS_PGS_FOOTER_SIZE;
    uint64_t row = PS_PGS_ROW_FIXED + PS_PGS_ROW_FIELD * (uint64_t)ds->nfields;
    uint32_t version;

    if (memcmp(ft, PS_PGS_FOOTER_MAGIC, 8) != 0)
        return ps_seterr(err, PS_EFORMAT, "%s: no footer at the end of the file (truncated or still being written?)",
                         nm);
    version = rd32(ft + 8);
    if (version != ds->version)
        return ps_seterr(err, PS_EVERSION, "%s: footer version %u, header version %u", nm, version, ds->version);
    if (ps_crc32c(0, ft, 60) != rd32(ft + 60))
        return ps_seterr(err, PS_ECHECKSUM, "%s: footer checksum mismatch", nm);
    if (rd32(ft + 56) != rd32(h + PS_PGS_HDR_CRC))
        return ps_seterr(err, PS_EFORMAT, "%s: footer and header do not belong together (header checksum differs)",
                         nm);
    fo->table_crc = rd32(ft + 12);
    fo->nsamples = rd64(ft + 16);
    fo->npages = rd64(ft + 24);
    fo->off_samples = rd64(ft + 32);
    fo->off_pages = rd64(ft + 40);
    fo->off_classes = rd64(ft + 48);
    /* everything below is checked against the file size first, so no product overflows */
    if (fo->npages > (fs - ds->data_off) / ds->page_size)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu pages of %u bytes do not fit in %llu bytes", nm,
                         (unsigned long long)fo->npages, ds->page_size, (unsigned long long)fs);
    if (fo->off_samples != ds->data_off + fo->npages * ds->page_size)
        return ps_seterr(err, PS_EFORMAT, "%s: sample table at %llu, expected right after the %llu pages (%llu)", nm,
                         (unsigned long long)fo->off_samples, (unsigned long long)fo->npages,
                         (unsigned long long)(ds->data_off + fo->npages * ds->page_size));
    if (fo->off_samples + 4 > end)
        return ps_seterr(err, PS_EFORMAT, "%s: no room for the tables after %llu pages", nm,
                         (unsigned long long)fo->npages);
    if (fo->nsamples > UINT32_MAX || fo->nsamples > (end - fo->off_samples) / row)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu samples: the sample table does not fit in the file", nm,
                         (unsigned long long)fo->nsamples);
    if (fo->off_pages != fo->off_samples + fo->nsamples * row)
        return ps_seterr(err, PS_EFORMAT, "%s: page index at %llu, expected %llu", nm,
                         (unsigned long long)fo->off_pages, (unsigned long long)(fo->off_samples + fo->nsamples * row));
    if (fo->npages > (end - fo->off_pages) / PS_PGS_PAGE_ROW)
        return ps_seterr(err, PS_EFORMAT, "%s: page index of %llu pages does not fit in the file", nm,
                         (unsigned long long)fo->npages);
    if (fo->off_classes != fo->off_pages + fo->npages * PS_PGS_PAGE_ROW)
        return ps_seterr(err, PS_EFORMAT, "%s: class table at %llu, expected %llu", nm,
                         (unsigned long long)fo->off_classes,
                         (unsigned long long)(fo->off_pages + fo->npages * PS_PGS_PAGE_ROW));
    if (fo->off_classes + 4 > end)
        return ps_seterr(err, PS_EFORMAT, "%s: class table at %llu outside the file", nm,
                         (unsigned long long)fo->off_classes);
    if (fo->nsamples && !fo->npages)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu samples but no pages", nm, (unsigned long long)fo->nsamples);
    return 0;
}

/* t: the bytes from off_samples up to the footer (tlen of them) */
static int parse_classes(const uint8_t *t, uint64_t tlen, const struct footer *fo, struct ps_dataset *ds, char *err)
{
    const char *nm = ds->name;
    uint64_t pos = fo->off_classes - fo->off_samples;
    uint32_t count = rd32(t + pos);

    pos += 4;
    if (count > PS_PGS_MAX_CLASSES || count > (tlen - pos) / 3)
        return ps_seterr(err, PS_EFORMAT, "%s: class table claims %u classes", nm, count);
    if (count) {
        ds->classes = calloc(count, sizeof *ds->classes);
        if (!ds->classes)
            return ps_seterr(err, -ENOMEM, "%s: out of memory", nm);
    }
    for (uint32_t c = 0; c < count; c++) {
        uint32_t n;
        if (tlen - pos < 2)
            return ps_seterr(err, PS_EFORMAT, "%s: class %u: name runs past the class table", nm, c);
        n = rd16(t + pos);
        pos += 2;
        if (n == 0 || n > PS_PGS_MAX_CLASS_NAME)
            return ps_seterr(err, PS_EFORMAT, "%s: class %u: name length %u invalid", nm, c, n);
        if (n > tlen - pos)
            return ps_seterr(err, PS_EFORMAT, "%s: class %u: name runs past the class table", nm, c);
        if (memchr(t + pos, 0, n))
            return ps_seterr(err, PS_EFORMAT, "%s: class %u: name holds a NUL byte", nm, c);
        ds->classes[c] = malloc(n + 1);
        if (!ds->classes[c])
            return ps_seterr(err, -ENOMEM, "%s: out of memory", nm);
        memcpy(ds->classes[c], t + pos, n);
        ds->classes[c][n] = 0;
        ds->nclasses = c + 1;
        pos += n;
    }
    /* zero padding brings the file to a multiple of 4096 */
    if (tlen - pos >= PS_PGS_ALIGN)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu unexplained bytes after the class table", nm,
                         (unsigned long long)(tlen - pos));
    for (uint64_t k = pos; k < tlen; k++)
        if (t[k])
            return ps_seterr(err, PS_EFORMAT, "%s: padding after the class table is not zero", nm);
    return 0;
}

static int parse_tables(const uint8_t *t, const struct footer *fo, struct ps_dataset *ds, char *err)
{
    const char *nm = ds->name;
    const uint64_t tlen = ds->file_size - PS_PGS_FOOTER_SIZE - fo->off_samples;
    const uint64_t row = PS_PGS_ROW_FIXED + PS_PGS_ROW_FIELD * (uint64_t)ds->nfields;
    const uint8_t *pt = t + (fo->off_pages - fo->off_samples);
    const uint64_t ps = ds->page_size, nf = ds->nfields;
    uint64_t running = 0, prev_end = ds->data_off, cover = 0;
    uint32_t *count = NULL;
    int rc;

    if (ps_crc32c(0, t, tlen) != fo->table_crc)
        return ps_seterr(err, PS_ECHECKSUM, "%s: table checksum mismatch (sample table, page index or classes)", nm);
    rc = parse_classes(t, tlen, fo, ds, err);
    if (rc)
        return rc;

    ds->nsamples = fo->nsamples;
    ds->npages = fo->npages;
    ds->pages = calloc(fo->npages ? fo->npages : 1, sizeof *ds->pages);
    ds->samples = calloc(fo->nsamples ? fo->nsamples : 1, sizeof *ds->samples);
    ds->values = calloc(fo->nsamples ? fo->nsamples * nf : 1, sizeof *ds->values);
    count = calloc(fo->npages ? fo->npages : 1, sizeof *count);
    if (!ds->pages || !ds->samples || !ds->values || !count) {
        free(count);
        return ps_seterr(err, -ENOMEM, "%s: out of memory for the tables of %llu samples", nm,
                         (unsigned long long)fo->nsamples);
    }
    for (uint64_t p = 0; p < fo->npages; p++) {
        const uint8_t *r = pt + p * PS_PGS_PAGE_ROW;
        uint32_t first = rd32(r), n = rd32(r + 4), used = rd32(r + 8);
        if (first != running) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: page %llu: first sample %u, expected %llu", nm,
                           (unsigned long long)p, first, (unsigned long long)running);
            goto out;
        }
        if (n > fo->nsamples - running) {
            rc = ps_seterr(err, PS_EFORMAT,
                           "%s: page %llu: %u samples from sample %llu on, but the table holds %llu samples", nm,
                           (unsigned long long)p, n, (unsigned long long)running,
                           (unsigned long long)fo->nsamples);
            goto out;
        }
        if (used > ps) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: page %llu: %u bytes used, more than the page size", nm,
                           (unsigned long long)p, used);
            goto out;
        }
        running += n;
        ds->pages[p].used = used;
        ds->pages[p].crc = rd32(r + 12);
    }
    if (running != fo->nsamples) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: the page index counts %llu samples, the footer %llu", nm,
                       (unsigned long long)running, (unsigned long long)fo->nsamples);
        goto out;
    }

    for (uint64_t i = 0; i < fo->nsamples; i++) {
        const uint8_t *r = t + i * row;
        struct ps_ds_sample *s = &ds->samples[i];
        struct ps_ds_value *v = &ds->values[i * nf];
        uint64_t off = rd64(r), rel, in_page, page, sum = 0;
        uint32_t len = rd32(r + 8);

        if (off < ds->data_off || off >= fo->off_samples) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: offset %llu outside the pages", nm,
                           (unsigned long long)i, (unsigned long long)off);
            goto out;
        }
        if (off < prev_end) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: offset %llu overlaps the sample before it", nm,
                           (unsigned long long)i, (unsigned long long)off);
            goto out;
        }
        rel = off - ds->data_off;
        page = rel / ps;
        in_page = rel % ps;
        if (page > cover) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: page %llu holds no sample", nm, (unsigned long long)cover);
            goto out;
        }
        s->off = off;
        s->len = len;
        s->crc = rd32(r + 12);
        s->page = (uint32_t)page;
        if (len <= ps - in_page) {
            s->span = 1;
            if (in_page + len > ds->pages[page].used) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: offset %llu length %u outside its page (page %llu uses %u bytes)",
                               nm, (unsigned long long)i, (unsigned long long)off, len, (unsigned long long)page,
                               ds->pages[page].used);
                goto out;
            }
            prev_end = off + len;
        } else {
            uint64_t span = (len + ps - 1) / ps, last;
            if (in_page != 0) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: %u bytes spanning pages must start a page (offset %llu)",
                               nm, (unsigned long long)i, len, (unsigned long long)off);
                goto out;
            }
            if (span > fo->npages - page) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: %u bytes run past the last page", nm,
                               (unsigned long long)i, len);
                goto out;
            }
            for (uint64_t q = page; q + 1 < page + span; q++)
                if (ds->pages[q].used != ps) {
                    rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: page %llu of its run is not full", nm,
                                   (unsigned long long)i, (unsigned long long)q);
                    goto out;
                }
            last = len - (span - 1) * ps;
            if (ds->pages[page + span - 1].used < last) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: offset %llu length %u outside its pages", nm,
                               (unsigned long long)i, (unsigned long long)off, len);
                goto out;
            }
            s->span = (uint32_t)span;
            /* the run belongs to this sample alone */
            prev_end = ds->data_off + (page + span) * ps;
        }
        if (page + s->span > cover)
            cover = page + s->span;
        count[page]++;

        for (uint64_t f = 0; f < nf; f++) {
            const uint8_t *e = r + PS_PGS_ROW_FIXED + f * PS_PGS_ROW_FIELD;
            uint8_t type = ds->fields[f].type;
            v[f].kind = type;
            if (type == PS_F_INT) {
                v[f].v.i = (int64_t)rd64(e);
                continue;
            }
            if (type == PS_F_FLOAT) {
                uint64_t bits = rd64(e);
                memcpy(&v[f].v.f, &bits, sizeof bits);
                continue;
            }
            v[f].off = (uint32_t)sum;
            v[f].len = rd32(e);
            v[f].h = rd16(e + 4);
            v[f].w = rd16(e + 6);
            sum += v[f].len;
            if (sum > len) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: field lengths exceed the sample's %u bytes", nm,
                               (unsigned long long)i, len);
                goto out;
            }
            if (type == PS_F_BYTES && (v[f].h || v[f].w)) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: field %s: bytes with image dimensions", nm,
                               (unsigned long long)i, ds->fields[f].name);
                goto out;
            }
            if (type != PS_F_BYTES && (!v[f].h || !v[f].w)) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: field %s: image of %ux%u pixels", nm,
                               (unsigned long long)i, ds->fields[f].name, v[f].w, v[f].h);
                goto out;
            }
            if (type == PS_F_RAW && (uint64_t)v[f].h * v[f].w * 3 != v[f].len) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: field %s: %u bytes for %ux%u RGB pixels", nm,
                               (unsigned long long)i, ds->fields[f].name, v[f].len, v[f].w, v[f].h);
                goto out;
            }
        }
        if (sum != len) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: field lengths sum to %llu, the sample holds %u", nm,
                           (unsigned long long)i, (unsigned long long)sum, len);
            goto out;
        }
        if (ds->nclasses && ds->label_field >= 0) {
            int64_t l = v[ds->label_field].v.i;
            if (l < 0 || (uint64_t)l >= ds->nclasses) {
                rc = ps_seterr(err, PS_EFORMAT, "%s: sample %llu: label %lld outside the %u classes", nm,
                               (unsigned long long)i, (long long)l, ds->nclasses);
                goto out;
            }
        }
    }
    if (cover != fo->npages) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: page %llu holds no sample", nm, (unsigned long long)cover);
        goto out;
    }
    for (uint64_t p = 0; p < fo->npages; p++) {
        uint32_t n = rd32(pt + p * PS_PGS_PAGE_ROW + 4);
        if (n != count[p]) {
            rc = ps_seterr(err, PS_EFORMAT, "%s: page %llu: the page index says %u samples start there, the sample table %u",
                           nm, (unsigned long long)p, n, count[p]);
            goto out;
        }
    }
    ds->has_page_crc = 1;
    ds->has_sample_crc = 1;
    rc = ps_ds_index_pages(ds, err);
out:
    free(count);
    return rc;
}

/* Size rules every reader applies before reading the footer. */
static int check_size(const char *name, uint64_t size, char *err)
{
    if (size < PS_PGS_HEADER_SIZE + PS_PGS_ALIGN || size % PS_PGS_ALIGN)
        return ps_seterr(err, PS_EFORMAT,
                         "%s: %llu bytes: truncated (a .pgs file is a whole number of 4096-byte blocks, at least 2)",
                         name, (unsigned long long)size);
    return 0;
}

int ps_pgs_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err)
{
    const uint8_t *b = buf;
    struct ps_dataset *ds;
    struct footer fo;
    int rc;

    *out = NULL;
    if (size < PS_PGS_HEADER_SIZE)
        return ps_seterr(err, PS_EFORMAT, "%s: %zu bytes: truncated header", name, size);
    ds = ps_ds_alloc(name);
    if (!ds)
        return ps_seterr(err, -ENOMEM, "%s: out of memory", name);
    ds->format = PS_DS_PGS;
    rc = parse_header(b, size, ds, err);
    if (!rc)
        rc = check_size(ds->name, size, err);
    if (!rc)
        rc = parse_footer(b + size - PS_PGS_FOOTER_SIZE, b, ds, &fo, err);
    if (!rc)
        rc = parse_tables(b + fo.off_samples, &fo, ds, err);
    if (rc) {
        ps_ds_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

static int io_read(struct ps_io *io, const char *name, void *buf, uint64_t len, uint64_t off, const char *what,
                   char *err)
{
    int64_t n = ps_io_pread(io, buf, len, off);
    if (n < 0) {
        const char *m = ps_io_msg_tail(ps_io_errmsg(io), name);
        return ps_seterr(err, (int)n, "%s: reading the %s: %s", name, what, *m ? m : ps_strerror((int)n));
    }
    if ((uint64_t)n != len)
        return ps_seterr(err, -EIO, "%s: reading the %s: short read", name, what);
    return 0;
}

int ps_pgs_open_head(struct ps_io *io, const char *name, const uint8_t *head, size_t headlen,
                     struct ps_dataset **out, char *err)
{
    uint64_t size = ps_io_size(io), tail_len, tail_off;
    uint8_t *tail = NULL, *tables = NULL;
    struct ps_dataset *ds;
    struct footer fo;
    int rc;

    *out = NULL;
    if (headlen < PS_PGS_HEADER_SIZE || size < PS_PGS_HEADER_SIZE)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu bytes: truncated header", name, (unsigned long long)size);
    ds = ps_ds_alloc(name);
    if (!ds)
        return ps_seterr(err, -ENOMEM, "%s: out of memory", name);
    ds->format = PS_DS_PGS;
    rc = parse_header(head, size, ds, err);
    if (!rc)
        rc = check_size(ds->name, size, err);
    if (rc)
        goto out;
    /* one aligned read of the end of the file: the footer, and the tables when they are small */
    tail_len = size - PS_PGS_HEADER_SIZE;
    if (tail_len > TAIL_READ)
        tail_len = TAIL_READ;
    tail_off = size - tail_len;
    if (posix_memalign((void **)&tail, PS_PGS_ALIGN, tail_len)) {
        rc = ps_seterr(err, -ENOMEM, "%s: out of memory", name);
        goto out;
    }
    rc = io_read(io, ds->name, tail, tail_len, tail_off, "footer", err);
    if (!rc)
        rc = parse_footer(tail + tail_len - PS_PGS_FOOTER_SIZE, head, ds, &fo, err);
    if (rc)
        goto out;
    if (fo.off_samples >= tail_off) {
        rc = parse_tables(tail + (fo.off_samples - tail_off), &fo, ds, err);
    } else {
        uint64_t len = size - fo.off_samples; /* aligned: tables start after whole pages */
        if (len > ((uint64_t)1 << 36) || posix_memalign((void **)&tables, PS_PGS_ALIGN, len)) {
            rc = ps_seterr(err, -ENOMEM, "%s: out of memory for %llu bytes of tables", name, (unsigned long long)len);
            goto out;
        }
        rc = io_read(io, ds->name, tables, len, fo.off_samples, "tables", err);
        if (!rc)
            rc = parse_tables(tables, &fo, ds, err);
    }
out:
    free(tail);
    free(tables);
    if (rc) {
        ps_ds_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

int ps_pgs_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err)
{
    uint8_t *head = NULL;
    uint64_t size = ps_io_size(io);
    int rc;

    *out = NULL;
    if (size < PS_PGS_HEADER_SIZE)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu bytes: truncated header", name, (unsigned long long)size);
    if (posix_memalign((void **)&head, PS_PGS_ALIGN, PS_PGS_HEADER_SIZE))
        return ps_seterr(err, -ENOMEM, "%s: out of memory", name);
    rc = io_read(io, name, head, PS_PGS_HEADER_SIZE, 0, "header", err);
    if (!rc)
        rc = ps_pgs_open_head(io, name, head, PS_PGS_HEADER_SIZE, out, err);
    free(head);
    return rc;
}
