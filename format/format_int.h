/*
 * format_int.h - shared by the readers in format/; not seen outside.
 */
#ifndef PS_FORMAT_INT_H
#define PS_FORMAT_INT_H

#include "format/format.h"

/* .pgs magic at offset 0 */
#define PS_PGS_MAGIC "PGSTREAM"

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

#endif
