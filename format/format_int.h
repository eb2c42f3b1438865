/*
 * format_int.h - shared by the readers in format/; not seen outside.
 */
#ifndef PS_FORMAT_INT_H
#define PS_FORMAT_INT_H

#include <string.h>

#include "format/format.h"

/* .pgs magic at offset 0 */
#define PS_PGS_MAGIC "PGSTREAM"

/* The .pgs byte layout shared by reader and writer (FORMAT.md says why). */
#define PS_PGS_VERSION 1u
#define PS_PGS_HEADER_SIZE 4096u          /* = data_off in version 1 */
#define PS_PGS_HDR_FIELDS 40u             /* schema: 16 x (type u8, name 31 bytes) */
#define PS_PGS_HDR_CRC 4092u              /* CRC32C of header bytes [0, 4092) */
#define PS_PGS_FOOTER_SIZE 64u
#define PS_PGS_FOOTER_MAGIC "PGSFOOTR"
#define PS_PGS_ROW_FIXED 16u              /* sample row: off u64, len u32, crc u32 */
#define PS_PGS_ROW_FIELD 8u               /* + 8 bytes per field */
#define PS_PGS_PAGE_ROW 16u               /* first_sample, nsamples, used, crc: u32 each */
#define PS_PGS_ALIGN 4096u                /* pages, tables and the file size are multiples */
#define PS_PGS_MIN_PAGE (64u << 10)
#define PS_PGS_MAX_PAGE (64u << 20)
#define PS_PGS_MAX_CLASSES (1u << 20)
#define PS_PGS_MAX_CLASS_NAME 1024u

/* An io/ message without its leading "NAME: " (io/ names the URL itself),
 * so a wrapped message does not name it twice. */
static inline const char *ps_io_msg_tail(const char *m, const char *name)
{
    size_t n = strlen(name);
    return strncmp(m, name, n) == 0 && m[n] == ':' && m[n + 1] == ' ' ? m + n + 2 : m;
}

/* Allocate an empty dataset (name copied, redacted by the caller). */
struct ps_dataset *ps_ds_alloc(const char *name);

/* Fill page_first/page_samples, payload_bytes, max_sample_len, max_span
 * from samples[] (which must be set). 0 or -ENOMEM. */
int ps_ds_index_pages(struct ps_dataset *ds, char *err);

/* The FFCV .beton reader (beton.c). head holds the first headlen bytes of
 * the file (at least 24 when the file is that long). */
int ps_beton_is(const uint8_t *head, size_t headlen, uint64_t file_size);
int ps_beton_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err);
int ps_beton_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err);

/* The .pgs reader (pgs.c). */
int ps_pgs_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err);
int ps_pgs_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err);
/* ps_pgs_open when the caller already read the first headlen bytes of the
 * file into head (saves a request over HTTP/S3). */
int ps_pgs_open_head(struct ps_io *io, const char *name, const uint8_t *head, size_t headlen,
                     struct ps_dataset **out, char *err);

/* crc32c.c: both implementations, for tests (ps_crc32c picks one). */
uint32_t ps_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t ps_crc32c_hw(uint32_t crc, const void *buf, size_t len); /* = sw where unavailable */
int ps_crc32c_hw_available(void);

#endif
