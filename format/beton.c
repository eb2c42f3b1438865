/*
 * beton.c - reader for FFCV .beton files (file format version 2): header, field descriptors,
 * metadata rows and allocation table, validated and mapped onto struct ps_dataset. See BETON.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

#define BT_HEADER 24u
#define BT_DESC 1041u            /* type_id u8, name[16], arguments[1024] */
#define BT_NAME 16u
#define BT_ARGS 1024u
#define BT_REC 24u               /* allocation record: sample_id, ptr, size (u64 each) */
#define BT_VERSION 2u
#define BT_MIN_PAGE (1u << 21)   /* FFCV's writer refuses smaller pages */
#define BT_ALIGN 4096u           /* reads are aligned so that they also work with O_DIRECT */
#define BT_CHUNK (4u << 20)
#define BT_PREFIX (64u << 10)

enum { BT_FLOAT = 0, BT_INT = 1, BT_RGB = 2, BT_BYTES = 3, BT_NDARRAY = 4, BT_JSON = 5, BT_TORCH = 6,
       BT_CUSTOM = 255 };

typedef unsigned long long ull;

/* Where the file's bytes come from: an io handle, or memory (ps_beton_parse). */
struct bt_src {
    struct ps_io *io;
    const uint8_t *mem;
    uint64_t size;
    const char *name;
    uint8_t *pre;        /* io: the file's first prelen bytes, read at once (one request, not three) */
    uint64_t prelen;
};

struct bt_field {
    uint8_t type_id;
    uint32_t meta_off;   /* offset of this field's entry in a metadata row */
    uint64_t nd_size;    /* NDArray: bytes per sample = prod(shape) * itemsize */
};

struct bt_rec {
    uint64_t sid, ptr, size;
};

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static int is_var(uint8_t t) { return t == BT_RGB || t == BT_BYTES || t == BT_NDARRAY || t == BT_JSON; }

static const char *type_label(uint8_t t)
{
    switch (t) {
    case BT_FLOAT: return "Float";
    case BT_INT: return "Int";
    case BT_RGB: return "RGBImage";
    case BT_BYTES: return "Bytes";
    case BT_NDARRAY: return "NDArray";
    case BT_JSON: return "JSON";
    case BT_TORCH: return "TorchTensor";
    case BT_CUSTOM: return "custom";
    default: return "unknown";
    }
}

/* Read [off, off+len) of the file. Through io, every request is widened to 4096-byte
 * boundaries (or the end of the file) so that an O_DIRECT handle accepts it. */
static int bt_read(const struct bt_src *s, void *dst, uint64_t len, uint64_t off, const char *what, char *err)
{
    uint8_t *bounce = NULL;
    uint64_t done = 0;

    if (off > s->size || len > s->size - off)
        return ps_seterr(err, PS_EFORMAT, "%s: %s (%llu bytes at offset %llu) runs past the end of the file "
                         "(%llu bytes): truncated?", s->name, what, (ull)len, (ull)off, (ull)s->size);
    if (!s->io || (s->pre && off + len <= s->prelen)) {
        if (len)
            memcpy(dst, s->io ? s->pre + off : s->mem + off, len);
        return 0;
    }
    while (done < len) {
        uint64_t pos = off + done, lo = pos / BT_ALIGN * BT_ALIGN;
        uint64_t want = len - done < BT_CHUNK ? len - done : BT_CHUNK;
        uint64_t hi = (pos + want + BT_ALIGN - 1) / BT_ALIGN * BT_ALIGN;
        int64_t n;

        if (hi > s->size)
            hi = s->size;
        if (!bounce && posix_memalign((void **)&bounce, BT_ALIGN, BT_CHUNK + 2 * BT_ALIGN))
            return ps_seterr(err, -ENOMEM, "%s: out of memory reading %s", s->name, what);
        n = ps_io_pread(s->io, bounce, hi - lo, lo);
        if (n < 0) {
            const char *m = ps_io_msg_tail(ps_io_errmsg(s->io), s->name);
            free(bounce);
            return ps_seterr(err, (int)n, "%s: reading %s at offset %llu: %s", s->name, what, (ull)lo,
                             *m ? m : ps_strerror((int)n));
        }
        if ((uint64_t)n != hi - lo) {
            free(bounce);
            return ps_seterr(err, PS_EFORMAT, "%s: reading %s at offset %llu: %lld bytes instead of %llu",
                             s->name, what, (ull)lo, (long long)n, (ull)(hi - lo));
        }
        memcpy((uint8_t *)dst + done, bounce + (pos - lo), want);
        done += want;
    }
    free(bounce);
    return 0;
}

/* numpy's dtype.descr as FFCV stores it, e.g. [["", "<f4"]]: one unnamed entry with a
 * plain type string. Returns the item size, 0 when not understood. */
static uint64_t nd_itemsize(const char *json, size_t n)
{
    char str[2][64];
    int nstr = 0;
    size_t i = 0;
    uint64_t v = 0;
    const char *t;

    while (i < n && nstr < 3) {
        if (json[i] == '"') {
            size_t j = i + 1, k = 0;
            while (j < n && json[j] != '"') {
                if (json[j] == '\\' || k + 1 >= sizeof str[0])
                    return 0;
                if (nstr < 2)
                    str[nstr][k++] = json[j];
                j++;
            }
            if (j >= n)
                return 0;
            if (nstr < 2)
                str[nstr][k] = 0;
            nstr++;
            i = j + 1;
        } else {
            /* anything but the list punctuation (a subarray shape, a second entry) is refused */
            if (json[i] != '[' && json[i] != ']' && json[i] != ',' && json[i] != ' ')
                return 0;
            i++;
        }
    }
    if (nstr != 2)
        return 0;
    t = str[1];
    if (!t[0] || !t[1] || !strchr("<>|=", t[0]) || !strchr("biufcmMOSUV", t[1]) || t[1] == 0 || t[1] == 'O')
        return 0;
    for (i = 2; t[i] >= '0' && t[i] <= '9'; i++) {
        v = v * 10 + (uint64_t)(t[i] - '0');
        if (v > (1u << 30))
            return 0;
    }
    if (i == 2 || (t[i] && t[i] != '['))
        return 0;
    return t[1] == 'U' ? v * 4 : v; /* numpy's U<n> counts UCS-4 characters */
}

/* Check one allocation record in isolation (before matching it to a sample). */
static int check_rec(const struct bt_src *s, uint64_t k, const struct bt_rec *r, uint64_t nsamples,
                     uint32_t page_size, uint64_t data_start, uint64_t table, char *err)
{
    if (r->sid >= nsamples)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu: sample id %llu out of range (the file "
                         "has %llu samples)", s->name, (ull)k, (ull)r->sid, (ull)nsamples);
    if (r->size > page_size)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu (sample %llu): size %llu is larger than "
                         "a page (%u bytes)", s->name, (ull)k, (ull)r->sid, (ull)r->size, page_size);
    if (r->size == 0)
        return 0; /* FFCV's malloc(0) hands out any pointer; nothing is ever read there */
    if (r->ptr > s->size || r->size > s->size - r->ptr)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu (sample %llu): %llu bytes at %llu run "
                         "past the end of the file (%llu bytes)", s->name, (ull)k, (ull)r->sid, (ull)r->size,
                         (ull)r->ptr, (ull)s->size);
    if (r->ptr < data_start)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu (sample %llu): pointer %llu lies in the "
                         "header/metadata (data pages start at %llu)", s->name, (ull)k, (ull)r->sid, (ull)r->ptr,
                         (ull)data_start);
    if (r->ptr + r->size > table)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu (sample %llu): %llu bytes at %llu overlap "
                         "the allocation table at %llu", s->name, (ull)k, (ull)r->sid, (ull)r->size, (ull)r->ptr,
                         (ull)table);
    if (r->ptr / page_size != (r->ptr + r->size - 1) / page_size)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation record %llu (sample %llu): %llu bytes at %llu cross "
                         "the page boundary at %llu", s->name, (ull)k, (ull)r->sid, (ull)r->size, (ull)r->ptr,
                         (ull)((r->ptr / page_size + 1) * page_size));
    return 0;
}

static int cmp_rec(const void *a, const void *b)
{
    const struct bt_rec *x = a, *y = b;
    if (x->sid != y->sid)
        return x->sid < y->sid ? -1 : 1;
    if (x->ptr != y->ptr)
        return x->ptr < y->ptr ? -1 : 1;
    return x->size < y->size ? -1 : x->size > y->size;
}

/* Field descriptors -> ds->fields, f[] and the metadata row layout. */
static int parse_fields(const struct bt_src *s, const uint8_t *desc, uint32_t nf, uint32_t page_size,
                        struct ps_dataset *ds, struct bt_field *f, uint32_t *rowp, char *err)
{
    uint32_t off = 0, maxalign = 1;

    for (uint32_t i = 0; i < nf; i++) {
        const uint8_t *d = desc + (size_t)i * BT_DESC;
        char *name = ds->fields[i].name;
        uint32_t size, align;
        size_t k;

        /* the name is NUL-padded but 16 characters fill it with no NUL */
        for (k = 0; k < BT_NAME && d[1 + k]; k++)
            name[k] = d[1 + k] >= 0x20 && d[1 + k] < 0x7f ? (char)d[1 + k] : '?';
        name[k] = 0;
        f[i].type_id = d[0];
        switch (d[0]) {
        case BT_FLOAT: ds->fields[i].type = PS_F_FLOAT; size = 8; align = 8; break;
        case BT_INT: ds->fields[i].type = PS_F_INT; size = 8; align = 8; break;
        case BT_RGB: ds->fields[i].type = PS_F_IMAGE; size = 13; align = 1; break;
        case BT_BYTES: ds->fields[i].type = PS_F_BYTES; size = 16; align = 1; break;
        case BT_JSON: ds->fields[i].type = PS_F_JSON; size = 16; align = 1; break;
        case BT_NDARRAY: {
            const uint8_t *a = d + 1 + BT_NAME;
            uint64_t tlen = le64(a + 256), items = 1, isz;
            int zero = 0;

            ds->fields[i].type = PS_F_NDARRAY;
            size = 8;
            align = 8;
            if (tlen == 0 || tlen > BT_ARGS - 264)
                return ps_seterr(err, PS_EFORMAT, "%s: NDArray field '%s': dtype description length %llu "
                                 "(must be 1..%u)", s->name, name, (ull)tlen, BT_ARGS - 264);
            isz = nd_itemsize((const char *)a + 264, (size_t)tlen);
            if (!isz)
                return ps_seterr(err, PS_EUNSUP, "%s: NDArray field '%s': dtype %.*s not understood (a plain "
                                 "numpy type such as [[\"\", \"<f4\"]] is)", s->name, name, (int)tlen,
                                 (const char *)a + 264);
            /* FFCV drops trailing zero dimensions; an empty shape is a scalar */
            for (int j = 0; j < 32; j++) {
                uint64_t dim = le64(a + 8 * j), last = 0;
                for (int m = j; m < 32; m++)
                    last |= le64(a + 8 * m);
                if (!last)
                    break;
                if (!dim)
                    zero = 1;
                else if (items > page_size / dim)
                    items = (uint64_t)page_size + 1; /* saturate: too big whatever follows */
                else
                    items *= dim;
            }
            f[i].nd_size = zero ? 0 : items > page_size / isz + 1 ? (uint64_t)page_size + 1 : items * isz;
            if (f[i].nd_size > page_size)
                return ps_seterr(err, PS_EFORMAT, "%s: NDArray field '%s': one array is larger than a page "
                                 "(%u bytes)", s->name, name, page_size);
            break;
        }
        case BT_TORCH:
        case BT_CUSTOM:
            return ps_seterr(err, PS_EUNSUP, "%s: field '%s' is a %s field (type id %u), which pagestream does "
                             "not read", s->name, name, type_label(d[0]), d[0]);
        default:
            return ps_seterr(err, PS_EUNSUP, "%s: field '%s' has unknown type id %u", s->name, name, d[0]);
        }
        /* numpy's align=True struct layout */
        off = (off + align - 1) / align * align;
        f[i].meta_off = off;
        off += size;
        if (align > maxalign)
            maxalign = align;
    }
    *rowp = (off + maxalign - 1) / maxalign * maxalign;
    return 0;
}

/* Find, among a sample's records [a, b), an unused one at ptr. */
static int take_rec(const struct bt_rec *rec, uint64_t a, uint64_t b, uint64_t ptr, uint32_t *used)
{
    for (uint64_t k = a; k < b; k++)
        if (rec[k].ptr == ptr && !(*used & (1u << (k - a)))) {
            *used |= 1u << (k - a);
            return (int)(k - a);
        }
    return -1;
}

/* One sample: its metadata row and allocation records [a, b) -> samples[i], values. */
static int map_sample(const struct bt_src *s, struct ps_dataset *ds, const struct bt_field *f, uint32_t nvar,
                      uint64_t i, const uint8_t *row, const struct bt_rec *rec, uint64_t a, uint64_t b, char *err)
{
    struct ps_ds_value *val = &ds->values[i * ds->nfields];
    uint64_t lo = UINT64_MAX, hi = 0, ptrs[PS_MAX_FIELDS] = { 0 };
    uint32_t used = 0;

    if (b - a > nvar)
        return ps_seterr(err, PS_EFORMAT, "%s: sample %llu has %llu allocation records for %u variable-length "
                         "fields (duplicated allocation)", s->name, (ull)i, (ull)(b - a), nvar);
    for (uint32_t j = 0; j < ds->nfields; j++) {
        const uint8_t *e = row + f[j].meta_off;
        const char *fname = ds->fields[j].name;
        uint64_t ptr, msize = 0, size;
        int k;

        val[j].kind = ds->fields[j].type;
        switch (f[j].type_id) {
        case BT_FLOAT: {
            uint64_t bits = le64(e);
            memcpy(&val[j].v.f, &bits, sizeof bits);
            continue;
        }
        case BT_INT:
            val[j].v.i = (int64_t)le64(e);
            continue;
        case BT_RGB:
            if (e[0] > 1)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': image mode %u (0 = JPEG and "
                                 "1 = raw are the only modes)", s->name, (ull)i, fname, e[0]);
            val[j].kind = e[0] ? PS_F_RAW : PS_F_JPEG;
            val[j].w = le16(e + 1);
            val[j].h = le16(e + 3);
            if (!val[j].w || !val[j].h)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': image of %ux%u pixels", s->name,
                                 (ull)i, fname, val[j].w, val[j].h);
            ptr = le64(e + 5);
            break;
        case BT_NDARRAY:
            ptr = le64(e);
            break;
        default: /* Bytes, JSON */
            ptr = le64(e);
            msize = le64(e + 8);
            break;
        }
        if (ptr > s->size || msize > s->size - ptr)
            return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': pointer %llu (+%llu bytes) is past the "
                             "end of the file (%llu bytes)", s->name, (ull)i, fname, (ull)ptr, (ull)msize,
                             (ull)s->size);
        k = take_rec(rec, a, b, ptr, &used);
        if (k < 0)
            return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': no allocation record for pointer %llu "
                             "(missing allocation)", s->name, (ull)i, fname, (ull)ptr);
        size = rec[a + (uint64_t)k].size;
        switch (f[j].type_id) {
        case BT_RGB:
            if (val[j].kind == PS_F_RAW && size != (uint64_t)val[j].h * val[j].w * 3)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': raw image %ux%u needs %llu bytes, "
                                 "its allocation holds %llu", s->name, (ull)i, fname, val[j].w, val[j].h,
                                 (ull)val[j].h * val[j].w * 3, (ull)size);
            if (val[j].kind == PS_F_JPEG && size == 0)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': empty JPEG", s->name, (ull)i,
                                 fname);
            break;
        case BT_NDARRAY:
            if (size != f[j].nd_size)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': array of %llu bytes, the field's "
                                 "shape and dtype make %llu", s->name, (ull)i, fname, (ull)size,
                                 (ull)f[j].nd_size);
            break;
        default:
            if (size != msize)
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': size %llu in the metadata, %llu in "
                                 "the allocation table", s->name, (ull)i, fname, (ull)msize, (ull)size);
            if (f[j].type_id == BT_JSON && (size == 0 || (s->mem && s->mem[ptr + size - 1] != 0)))
                return ps_seterr(err, PS_EFORMAT, "%s: sample %llu field '%s': JSON value without its trailing "
                                 "NUL", s->name, (ull)i, fname);
            break;
        }
        val[j].len = (uint32_t)size;
        ptrs[j] = ptr;
        if (size) {
            if (ptr < lo)
                lo = ptr;
            if (ptr + size > hi)
                hi = ptr + size;
        }
    }
    if (used != (b - a >= 32 ? ~0u : (1u << (b - a)) - 1))
        return ps_seterr(err, PS_EFORMAT, "%s: sample %llu has an allocation record no field points to "
                         "(duplicated allocation)", s->name, (ull)i);
    if (hi == 0) {
        ds->samples[i].len = 0; /* placed by the caller */
        ds->samples[i].off = UINT64_MAX;
        return 0;
    }
    if (lo / ds->page_size != (hi - 1) / ds->page_size)
        return ps_seterr(err, PS_EFORMAT, "%s: sample %llu: its payloads lie in pages %llu and %llu (FFCV keeps a "
                         "sample in one page)", s->name, (ull)i, (ull)(lo / ds->page_size),
                         (ull)((hi - 1) / ds->page_size));
    if (lo / ds->page_size > UINT32_MAX)
        return ps_seterr(err, PS_EUNSUP, "%s: sample %llu lies in page %llu: too many pages", s->name, (ull)i,
                         (ull)(lo / ds->page_size));
    ds->samples[i].off = lo;
    ds->samples[i].len = (uint32_t)(hi - lo);
    ds->samples[i].page = (uint32_t)(lo / ds->page_size);
    ds->samples[i].span = 1;
    ds->samples[i].crc = 0;
    for (uint32_t j = 0; j < ds->nfields; j++)
        if (is_var(f[j].type_id))
            val[j].off = val[j].len ? (uint32_t)(ptrs[j] - lo) : 0;
    return 0;
}

static int bt_load(const struct bt_src *s, struct ps_dataset **out, char *err)
{
    uint8_t hdr[BT_HEADER], *desc = NULL, *meta = NULL, *raw = NULL;
    struct bt_field f[PS_MAX_FIELDS];
    struct bt_rec *rec = NULL;
    struct ps_dataset *ds = NULL;
    uint32_t nf, page_size, row = 0, nvar = 0, version;
    uint64_t ns, table, meta_start, meta_end, data_start, nrec, first_page = UINT64_MAX, npages = 0, k;
    int rc;

    *out = NULL;
    memset(f, 0, sizeof f);
    if (s->size < BT_HEADER)
        return ps_seterr(err, PS_EFORMAT, "%s: %llu bytes: too short for the 24-byte .beton header: truncated?",
                         s->name, (ull)s->size);
    if ((rc = bt_read(s, hdr, BT_HEADER, 0, "the header", err)))
        return rc;
    version = le16(hdr);
    nf = le16(hdr + 2);
    page_size = le32(hdr + 4);
    ns = le64(hdr + 8);
    table = le64(hdr + 16);
    if (version != BT_VERSION)
        return ps_seterr(err, PS_EVERSION, "%s: FFCV file format version %u; this reader understands version %u",
                         s->name, version, BT_VERSION);
    if (table == 0)
        return ps_seterr(err, PS_EFORMAT, "%s: allocation table pointer is 0: the writer did not finish", s->name);
    if (page_size < BT_MIN_PAGE || (page_size & (page_size - 1)))
        return ps_seterr(err, PS_EFORMAT, "%s: page size %u is not a power of two >= 2 MiB (FFCV's writer allows "
                         "no other)", s->name, page_size);
    if (nf == 0)
        return ps_seterr(err, PS_EFORMAT, "%s: the header declares 0 fields", s->name);
    if (nf > PS_MAX_FIELDS)
        return ps_seterr(err, PS_EUNSUP, "%s: %u fields; pagestream reads at most %d", s->name, nf,
                         PS_MAX_FIELDS);
    meta_start = BT_HEADER + (uint64_t)nf * BT_DESC;
    if (meta_start > s->size)
        return ps_seterr(err, PS_EFORMAT, "%s: the field descriptors (%u x %u bytes from offset %u) end at %llu, "
                         "past the end of the file (%llu bytes): truncated?", s->name, nf, BT_DESC, BT_HEADER,
                         (ull)meta_start, (ull)s->size);
    ds = ps_ds_alloc(s->name);
    desc = malloc((size_t)nf * BT_DESC);
    if (!ds || !desc) {
        rc = ps_seterr(err, -ENOMEM, "%s: out of memory", s->name);
        goto fail;
    }
    if ((rc = bt_read(s, desc, (uint64_t)nf * BT_DESC, BT_HEADER, "the field descriptors", err)))
        goto fail;
    ds->format = PS_DS_BETON;
    ds->version = version;
    ds->file_size = s->size;
    ds->page_size = page_size;
    ds->data_off = 0; /* .beton pointers are absolute: page p is at p * page_size */
    ds->nfields = nf;
    if ((rc = parse_fields(s, desc, nf, page_size, ds, f, &row, err)))
        goto fail;
    for (uint32_t j = 0; j < nf; j++)
        nvar += is_var(f[j].type_id);

    if (ns == 0) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: the header declares 0 samples", s->name);
        goto fail;
    }
    if (ns > (s->size - meta_start) / row) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: metadata for %llu samples (%u-byte rows from offset %llu) runs past "
                       "the end of the file (%llu bytes): truncated, or a corrupt sample count", s->name, (ull)ns,
                       row, (ull)meta_start, (ull)s->size);
        goto fail;
    }
    meta_end = meta_start + ns * row;
    if (table > s->size) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: allocation table pointer %llu is past the end of the file (%llu "
                       "bytes): truncated?", s->name, (ull)table, (ull)s->size);
        goto fail;
    }
    if (table < meta_end) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: allocation table pointer %llu lies inside the header/metadata "
                       "(which end at %llu)", s->name, (ull)table, (ull)meta_end);
        goto fail;
    }
    data_start = (meta_end + page_size - 1) / page_size * page_size; /* meta_end <= size < 2^64 - 2^31 */
    if ((s->size - table) % BT_REC) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: the allocation table (%llu bytes from offset %llu to the end of the "
                       "file) is not a whole number of 24-byte records: truncated?", s->name,
                       (ull)(s->size - table), (ull)table);
        goto fail;
    }
    nrec = (s->size - table) / BT_REC;
    if (nvar == 0) {
        rc = ps_seterr(err, PS_EUNSUP, "%s: no image, bytes, JSON or NDArray field: pagestream loads samples "
                       "from pages and this file stores none there", s->name);
        goto fail;
    }
    if (nrec != ns * nvar) { /* ns * nvar <= size/8 * 16: no overflow */
        rc = ps_seterr(err, PS_EFORMAT, "%s: the allocation table holds %llu records; %llu samples x %u "
                       "variable-length fields need %llu: truncated or corrupt", s->name, (ull)nrec, (ull)ns, nvar,
                       (ull)(ns * nvar));
        goto fail;
    }

    meta = malloc(ns * row);
    raw = malloc(nrec * BT_REC);
    rec = malloc(nrec * sizeof *rec);
    ds->samples = calloc(ns, sizeof *ds->samples);
    ds->values = calloc(ns * nf, sizeof *ds->values);
    if (!meta || !raw || !rec || !ds->samples || !ds->values) {
        rc = ps_seterr(err, -ENOMEM, "%s: out of memory for the tables of %llu samples", s->name, (ull)ns);
        goto fail;
    }
    if ((rc = bt_read(s, meta, ns * row, meta_start, "the metadata", err)) ||
        (rc = bt_read(s, raw, nrec * BT_REC, table, "the allocation table", err)))
        goto fail;
    for (k = 0; k < nrec; k++) {
        rec[k].sid = le64(raw + k * BT_REC);
        rec[k].ptr = le64(raw + k * BT_REC + 8);
        rec[k].size = le64(raw + k * BT_REC + 16);
        if ((rc = check_rec(s, k, &rec[k], ns, page_size, data_start, table, err)))
            goto fail;
    }
    free(raw);
    raw = NULL;
    /* several writer processes append their allocations one after another: sort a copy */
    qsort(rec, nrec, sizeof *rec, cmp_rec);

    ds->nsamples = ns;
    k = 0;
    for (uint64_t i = 0; i < ns; i++) {
        uint64_t a = k;
        while (k < nrec && rec[k].sid == i)
            k++;
        if ((rc = map_sample(s, ds, f, nvar, i, meta + i * row, rec, a, k, err)))
            goto fail;
        if (ds->samples[i].len && ds->samples[i].page < first_page)
            first_page = ds->samples[i].page;
        if (ds->samples[i].len && ds->samples[i].page + 1ull > npages)
            npages = ds->samples[i].page + 1ull;
    }
    if (first_page == UINT64_MAX) {
        rc = ps_seterr(err, PS_EUNSUP, "%s: no sample has any payload bytes", s->name);
        goto fail;
    }
    /* the loader reads whole pages: FFCV always writes them whole, before the table */
    if (npages > s->size / page_size) {
        rc = ps_seterr(err, PS_EFORMAT, "%s: data page %llu ends at %llu, past the end of the file (%llu bytes): "
                       "truncated?", s->name, (ull)(npages - 1), (ull)(npages * page_size), (ull)s->size);
        goto fail;
    }
    ds->npages = npages;
    ds->pages = calloc(npages, sizeof *ds->pages);
    if (!ds->pages) {
        rc = ps_seterr(err, -ENOMEM, "%s: out of memory", s->name);
        goto fail;
    }
    for (uint64_t i = 0; i < ns; i++) {
        struct ps_ds_sample *sm = &ds->samples[i];
        uint64_t end;
        if (!sm->len) { /* every payload empty: attach it to the first data page, reads nothing */
            sm->off = first_page * page_size;
            sm->page = (uint32_t)first_page;
            sm->span = 1;
        }
        end = sm->off + sm->len - (uint64_t)sm->page * page_size;
        if (end > ds->pages[sm->page].used)
            ds->pages[sm->page].used = (uint32_t)end;
    }

    ds->label_field = -1;
    ds->image_field = -1;
    for (uint32_t j = 0; j < nf; j++)
        if (f[j].type_id == BT_INT && strcmp(ds->fields[j].name, "label") == 0) {
            ds->label_field = (int)j;
            break;
        }
    for (uint32_t j = 0; j < nf && ds->label_field < 0; j++)
        if (f[j].type_id == BT_INT)
            ds->label_field = (int)j;
    for (uint32_t j = 0; j < nf; j++)
        if (f[j].type_id == BT_RGB) {
            ds->image_field = (int)j;
            break;
        }
    for (uint32_t j = 0; j < nf && ds->image_field < 0; j++)
        if (is_var(f[j].type_id))
            ds->image_field = (int)j;
    ds->has_page_crc = 0;
    ds->has_sample_crc = 0;
    if ((rc = ps_ds_index_pages(ds, err)))
        goto fail;
    free(desc);
    free(meta);
    free(rec);
    *out = ds;
    return 0;
fail:
    free(desc);
    free(meta);
    free(raw);
    free(rec);
    ps_ds_close(ds);
    return rc;
}

int ps_beton_is(const uint8_t *head, size_t headlen, uint64_t file_size)
{
    (void)file_size;
    /* no magic number: version 1..255 and fewer than 256 fields, i.e. bytes 1 and 3 zero.
     * Loose on purpose, so that a damaged .beton reaches ps_beton_open's precise errors. */
    if (!head || headlen < 4)
        return 0;
    if (headlen >= 8 && memcmp(head, PS_PGS_MAGIC, 8) == 0)
        return 0;
    return head[0] != 0 && head[1] == 0 && head[3] == 0;
}

int ps_beton_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err)
{
    struct bt_src s = { .io = io, .size = ps_io_size(io), .name = name ? name : ps_io_name(io) };
    uint64_t n = s.size < BT_PREFIX ? s.size : BT_PREFIX;
    uint8_t *pre = malloc(n ? n : 1);
    int rc;

    *out = NULL;
    /* header, field descriptors and (for small sets) the metadata all lie in the first bytes */
    if (!pre)
        return ps_seterr(err, -ENOMEM, "%s: out of memory", s.name);
    rc = bt_read(&s, pre, n, 0, "the header", err);
    if (rc == 0) {
        s.pre = pre;
        s.prelen = n;
        rc = bt_load(&s, out, err);
    }
    free(pre);
    return rc;
}

int ps_beton_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err)
{
    struct bt_src s = { .mem = buf, .size = buf ? size : 0, .name = name ? name : "(memory)" };
    return bt_load(&s, out, err);
}
