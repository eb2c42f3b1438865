/*
 * fuzz_beton.c - libFuzzer target for the .beton reader (ps_beton_parse), checking that whatever it
 * accepts keeps every sample and value inside the file and inside one page.
 *
 * A valid .beton is at least two 2 MiB pages, so besides plain files (the input is the file) the
 * target takes a compact form: "PSBZ" then the file's bytes, where each "<PAGE>" stands for zeros up
 * to the next 2 MiB boundary (a full page when already on one). The seeds in tests/corpus/beton use
 * it: valid-* are whole files (two fixture samples each, or hand-made JSON/NDArray/unaligned-row
 * ones), head-* are plain fixture prefixes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

#define PAGE (2u << 20)
#define MAX_PAGES 8

/* Expand the compact form; NULL when the input is a plain file (or expands too far). */
static uint8_t *expand(const uint8_t *in, size_t n, size_t *outlen)
{
    static const char mark[] = "<PAGE>";
    const size_t ml = sizeof mark - 1;
    size_t total = 0, i, pages = 0;
    uint8_t *out;

    if (n < 4 || memcmp(in, "PSBZ", 4) != 0)
        return NULL;
    /* first pass: the size */
    for (i = 4; i < n;) {
        if (n - i >= ml && memcmp(in + i, mark, ml) == 0) {
            total = (total / PAGE + 1) * PAGE;
            i += ml;
            if (++pages > MAX_PAGES)
                return NULL;
        } else {
            total++;
            i++;
        }
    }
    out = calloc(1, total ? total : 1);
    if (!out)
        return NULL;
    total = 0;
    for (i = 4; i < n;) {
        if (n - i >= ml && memcmp(in + i, mark, ml) == 0) {
            total = (total / PAGE + 1) * PAGE;
            i += ml;
        } else {
            out[total++] = in[i++];
        }
    }
    *outlen = total;
    return out;
}

/* What the reader promises of a dataset it returns; a broken promise is a finding. */
static void check(const struct ps_dataset *ds, const uint8_t *buf, size_t size)
{
    volatile uint8_t sink = 0;

    if (ds->format != PS_DS_BETON || ds->data_off != 0 || !ds->npages || ds->npages * ds->page_size > size ||
        ds->nfields == 0 || ds->nfields > PS_MAX_FIELDS)
        abort();
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        const struct ps_ds_sample *s = &ds->samples[i];
        if (s->page >= ds->npages || s->span != 1 || s->off < (uint64_t)s->page * ds->page_size ||
            s->off + s->len > ((uint64_t)s->page + 1) * ds->page_size || s->off + s->len > size)
            abort();
        for (uint32_t j = 0; j < ds->nfields; j++) {
            const struct ps_ds_value *v = &ds->values[i * ds->nfields + j];
            if ((uint64_t)v->off + v->len > s->len)
                abort();
            if (v->len) /* touch the first and last byte: ASan sees any escape */
                sink ^= buf[s->off + v->off] ^ buf[s->off + v->off + v->len - 1];
        }
    }
    if (ds->label_field >= (int)ds->nfields || ds->image_field >= (int)ds->nfields || ds->image_field < 0)
        abort();
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[PS_ERRLEN];
    struct ps_dataset *ds = NULL;
    size_t len = size;
    uint8_t *big = expand(data, size, &len);
    const uint8_t *buf = big ? big : data;

    err[0] = 0;
    (void)ps_beton_is(buf, len < 4096 ? len : 4096, len);
    if (ps_beton_parse(buf, big ? len : size, "fuzz.beton", &ds, err) == 0) {
        check(ds, buf, big ? len : size);
        ps_ds_close(ds);
    } else if (ds || !err[0]) {
        abort(); /* a failure must leave *out NULL and say why */
    }
    free(big);
    return 0;
}
