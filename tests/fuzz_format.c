/*
 * fuzz_format.c - libFuzzer target for the dataset reader (ps_ds_parse).
 * Each input is parsed as it is, and again with its header, table and
 * footer checksums recomputed, so that mutations reach the structural
 * checks behind the checksums instead of stopping at them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "format/format_int.h"

static volatile uint64_t sink;

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

static void use(const struct ps_dataset *ds, const uint8_t *buf, size_t size)
{
    uint64_t acc = ds->nsamples ^ ds->npages ^ ds->payload_bytes;
    /* touch everything the reader promises is valid */
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        const struct ps_ds_sample *s = &ds->samples[i];
        acc += s->off + s->len + s->page + s->span + (uint64_t)ps_ds_label(ds, i);
        for (uint32_t f = 0; f < ds->nfields; f++)
            acc += ds->values[i * ds->nfields + f].len;
        if (s->off + s->len <= size)
            acc += (uint64_t)ps_ds_check_sample(ds, i, buf + s->off);
    }
    for (uint64_t p = 0; p < ds->npages; p++) {
        acc += ds->pages[p].used + ds->page_first[p + 1];
        if (ps_ds_page_offset(ds, p) + ds->page_size <= size)
            acc += (uint64_t)ps_ds_check_page(ds, p, buf + ps_ds_page_offset(ds, p));
    }
    for (uint64_t k = 0; k < ds->nsamples; k++)
        acc += ds->page_samples[k];
    for (uint32_t c = 0; c < ds->nclasses; c++)
        acc += strlen(ds->classes[c]);
    sink += acc;
}

static void parse(const uint8_t *buf, size_t size)
{
    struct ps_dataset *ds = NULL;
    char err[PS_ERRLEN];
    if (ps_ds_parse(buf, size, "fuzz.pgs", &ds, err) == 0) {
        use(ds, buf, size);
        ps_ds_close(ds);
    } else {
        sink += strlen(err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size);
    if (size >= PS_PGS_HEADER_SIZE + PS_PGS_FOOTER_SIZE && memcmp(data, PS_PGS_MAGIC, 8) == 0) {
        uint8_t *c = malloc(size);
        if (!c)
            return 0;
        memcpy(c, data, size);
        uint8_t *ft = c + size - PS_PGS_FOOTER_SIZE;
        uint64_t off = rd64(ft + 32);
        wr32(c + PS_PGS_HDR_CRC, ps_crc32c(0, c, PS_PGS_HDR_CRC));
        if (off <= size - PS_PGS_FOOTER_SIZE)
            wr32(ft + 12, ps_crc32c(0, c + off, size - PS_PGS_FOOTER_SIZE - off));
        wr32(ft + 56, rd32(c + PS_PGS_HDR_CRC));
        wr32(ft + 60, ps_crc32c(0, ft, 60));
        parse(c, size);
        free(c);
    }
    return 0;
}
