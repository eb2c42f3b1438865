/*
 * format.h - dataset files: the .pgs reader and writer, the FFCV .beton
 * reader, and CRC32C. Both readers produce the same in-memory model
 * (struct ps_dataset), so cache/, sampler/ and loader/ never care which
 * format a file is. The byte layout of .pgs is in FORMAT.md.
 */
#ifndef PS_FORMAT_H
#define PS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "io/io.h"

#define PS_MAX_FIELDS 16
#define PS_FIELD_NAME 32

enum ps_ftype {
    PS_F_JPEG = 1,   /* encoded image */
    PS_F_RAW = 2,    /* uint8 H x W x 3 RGB */
    PS_F_INT = 3,    /* int64, kept in the sample table */
    PS_F_FLOAT = 4,  /* float64, kept in the sample table */
    PS_F_BYTES = 5,  /* opaque bytes */
    PS_F_IMAGE = 6,  /* beton RGBImage: each sample is JPEG or RAW (see ps_ds_value.kind) */
    PS_F_JSON = 7,   /* beton JSON (bytes) */
    PS_F_NDARRAY = 8 /* beton NDArray (bytes of fixed size) */
};

enum ps_dsformat { PS_DS_PGS = 1, PS_DS_BETON = 2 };

struct ps_field {
    uint8_t type;                 /* enum ps_ftype */
    char name[PS_FIELD_NAME];     /* NUL-terminated */
};

/* Where a sample's bytes are. */
struct ps_ds_sample {
    uint64_t off;    /* absolute file offset of the sample's first stored byte */
    uint32_t len;    /* bytes from off holding all its variable fields */
    uint32_t page;   /* page holding off */
    uint32_t span;   /* pages touched by [off, off+len) (1 unless the sample spans pages) */
    uint32_t crc;    /* CRC32C of [off, off+len) (valid when ds->has_sample_crc) */
};

/* One field of one sample: values[sample * nfields + field]. */
struct ps_ds_value {
    union { int64_t i; double f; } v;  /* PS_F_INT / PS_F_FLOAT */
    uint32_t off;    /* variable fields: offset of the bytes from the sample's off */
    uint32_t len;    /* variable fields: byte count */
    uint16_t h, w;   /* images: height, width */
    uint8_t kind;    /* the actual type of this value: PS_F_JPEG or PS_F_RAW for images, else the field type */
};

struct ps_ds_page {
    uint32_t used;   /* bytes of the page holding data */
    uint32_t crc;    /* CRC32C of the whole page_size bytes (valid when ds->has_page_crc) */
};

struct ps_dataset {
    char name[256];               /* URL for messages, without credentials */
    int format;                   /* enum ps_dsformat */
    uint32_t version;
    uint64_t file_size;
    uint32_t page_size;
    uint64_t data_off;            /* page p lies at data_off + p * page_size */
    uint32_t nfields;
    struct ps_field fields[PS_MAX_FIELDS];
    int label_field;              /* index of the int field used as label, -1 none */
    int image_field;              /* index of the primary variable field (jpeg/raw/image/bytes), -1 none */
    uint64_t nsamples, npages;
    struct ps_ds_sample *samples; /* nsamples */
    struct ps_ds_value *values;   /* nsamples * nfields */
    struct ps_ds_page *pages;     /* npages */
    /* samples whose first byte is in page p: page_samples[page_first[p] .. page_first[p+1]) */
    uint64_t *page_first;         /* npages + 1 */
    uint32_t *page_samples;       /* nsamples */
    int has_page_crc, has_sample_crc;
    uint32_t nclasses;
    char **classes;               /* nclasses names (NULL when none) */
    uint64_t payload_bytes;       /* sum of samples' len */
    uint32_t max_sample_len;
    uint32_t max_span;
    uint64_t pack_seed;           /* pgs: seed of the shuffle at pack time */
    uint32_t flags;               /* pgs header flags (PS_PGS_FLAG_*) */
};

/**
 * Read and validate the metadata of a dataset (.pgs or .beton, told by its
 * first bytes) through @p io: header, footer and tables. Every offset,
 * length and count is checked before use.
 * @param name URL/path for messages (no credentials)
 * @return 0, or PS_EFORMAT / PS_EVERSION / PS_ECHECKSUM / -errno with err
 *         (PS_ERRLEN) naming the file and what is wrong.
 */
int ps_ds_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err);

/**
 * Parse a dataset's metadata from memory instead (fuzzing, tests):
 * @p buf holds the whole file (or a truncated copy) of @p size bytes.
 */
int ps_ds_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err);

void ps_ds_close(struct ps_dataset *ds);

static inline uint64_t ps_ds_page_offset(const struct ps_dataset *ds, uint64_t page)
{
    return ds->data_off + page * (uint64_t)ds->page_size;
}

/** Check a page's CRC (buf holds page_size bytes). 0, or PS_ECHECKSUM. 0 when the format has none. */
int ps_ds_check_page(const struct ps_dataset *ds, uint64_t page, const void *buf);

/** Check a sample's CRC (buf holds its len bytes). 0, or PS_ECHECKSUM. */
int ps_ds_check_sample(const struct ps_dataset *ds, uint64_t sample, const void *buf);

/** The label of a sample (-1 when none). */
int64_t ps_ds_label(const struct ps_dataset *ds, uint64_t sample);

/** "jpeg", "raw", ... */
const char *ps_ftype_name(int type);
int ps_ftype_parse(const char *s);

/* ---- CRC32C (Castagnoli), hardware-accelerated where the CPU has it ---- */
uint32_t ps_crc32c(uint32_t crc, const void *buf, size_t len);

/* ---- the .pgs writer ---- */

#define PS_PGS_FLAG_SHUFFLED 1u   /* samples were shuffled at pack time */
#define PS_PGS_FLAG_RESTART  2u   /* JPEGs carry a restart marker every MCU row */

struct ps_writer_opts {
    uint32_t page_size;                    /* multiple of 4096, 64 KiB .. 64 MiB */
    uint32_t nfields;
    struct ps_field fields[PS_MAX_FIELDS];
    uint32_t nclasses;
    const char *const *classes;            /* copied */
    uint32_t flags;                        /* PS_PGS_FLAG_* */
    uint64_t seed;
};

/* One sample to append: for field f, data[f]/len[f] for variable fields,
 * ival[f] / fval[f] for int / float fields, h[f]/w[f] for images. */
struct ps_wsample {
    const void *data[PS_MAX_FIELDS];
    uint32_t len[PS_MAX_FIELDS];
    int64_t ival[PS_MAX_FIELDS];
    double fval[PS_MAX_FIELDS];
    uint16_t h[PS_MAX_FIELDS], w[PS_MAX_FIELDS];
};

struct ps_writer;

/** Start a dataset on @p out (which the caller opened, and commits after ps_writer_finish). */
int ps_writer_open(struct ps_out *out, const struct ps_writer_opts *o, struct ps_writer **w, char *err);
/** Append one sample (streams full pages to out). */
int ps_writer_add(struct ps_writer *w, const struct ps_wsample *s, char *err);
/** Write the last page, the tables and the footer. */
int ps_writer_finish(struct ps_writer *w, char *err);
uint64_t ps_writer_samples(const struct ps_writer *w);
uint64_t ps_writer_pages(const struct ps_writer *w);
void ps_writer_free(struct ps_writer *w);

#endif
