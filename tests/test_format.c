/*
 * test_format.c - the .pgs writer and reader: round trips of every field
 * type, spanning samples, edge sizes, and a bad file of every kind
 * (truncated, wrong magic/version, offsets and counts that lie, flipped
 * bytes); CRC32C against known vectors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format.h"
#include "format/format_int.h"
#include "io/io.h"
#include "test.h"

#define PAGE (64u << 10)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static void fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

/* Recompute header, table and footer checksums after a deliberate edit, so
 * that the structural checks behind them are what a test exercises. */
static void fix_crcs(uint8_t *b, size_t size)
{
    uint8_t *ft = b + size - PS_PGS_FOOTER_SIZE;
    uint64_t off = rd64(ft + 32);
    wr32(b + PS_PGS_HDR_CRC, ps_crc32c(0, b, PS_PGS_HDR_CRC));
    if (off <= size - PS_PGS_FOOTER_SIZE)
        wr32(ft + 12, ps_crc32c(0, b + off, size - PS_PGS_FOOTER_SIZE - off));
    wr32(ft + 56, rd32(b + PS_PGS_HDR_CRC));
    wr32(ft + 60, ps_crc32c(0, ft, 60));
}

/* ---- building datasets: through a real ps_out on a temp file ---- */

static char tmpdir[] = "/tmp/test_format.XXXXXX";
static int tmp_ready;

static const char *tmp_path(const char *leaf)
{
    static char p[256];
    if (!tmp_ready) {
        if (!mkdtemp(tmpdir))
            return NULL;
        tmp_ready = 1;
    }
    snprintf(p, sizeof p, "%s/%s", tmpdir, leaf);
    return p;
}

static int slurp(const char *path, uint8_t **buf, size_t *size)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    *size = (size_t)st.st_size;
    if (!*buf || read(fd, *buf, *size) != (ssize_t)*size) {
        close(fd);
        return -EIO;
    }
    close(fd);
    return 0;
}

struct built {
    uint8_t *buf;
    size_t size;
    char path[256];
};

/* Writes n samples with ps_writer into a file, returns its bytes. */
static int build(const struct ps_writer_opts *o, const struct ps_wsample *s, size_t n, struct built *b, char *err)
{
    struct ps_out *out = NULL;
    struct ps_writer *w = NULL;
    const char *path = tmp_path("ds.pgs");
    int rc;

    memset(b, 0, sizeof *b);
    if (!path)
        return ps_seterr(err, -errno, "mkdtemp failed");
    snprintf(b->path, sizeof b->path, "%s", path);
    rc = ps_out_open(path, NULL, &out, err);
    if (rc)
        return rc;
    rc = ps_writer_open(out, o, &w, err);
    for (size_t i = 0; !rc && i < n; i++)
        rc = ps_writer_add(w, &s[i], err);
    if (!rc)
        rc = ps_writer_finish(w, err);
    if (!rc && (rc = ps_out_commit(out)) < 0)
        snprintf(err, PS_ERRLEN, "commit: %s", ps_out_errmsg(out));
    ps_writer_free(w);
    ps_out_close(out);
    if (!rc)
        rc = slurp(path, &b->buf, &b->size);
    return rc;
}

static void opts_fields(struct ps_writer_opts *o, const char *spec)
{
    /* spec: "jpeg:image,int:label" */
    char tmp[256], *save = NULL;
    memset(o, 0, sizeof *o);
    o->page_size = PAGE;
    snprintf(tmp, sizeof tmp, "%s", spec);
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *c = strchr(t, ':');
        *c = 0;
        o->fields[o->nfields].type = (uint8_t)ps_ftype_parse(t);
        snprintf(o->fields[o->nfields].name, PS_FIELD_NAME, "%s", c + 1);
        o->nfields++;
    }
}

/* ---- CRC32C ---- */

static int check_vectors(uint32_t (*fn)(uint32_t, const void *, size_t))
{
    uint8_t b[32];
    CHECK(fn(0, "123456789", 9) == 0xe3069283u);
    memset(b, 0, 32);
    CHECK(fn(0, b, 32) == 0x8a9136aau); /* RFC 3720 B.4 */
    memset(b, 0xff, 32);
    CHECK(fn(0, b, 32) == 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    CHECK(fn(0, b, 32) == 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    CHECK(fn(0, b, 32) == 0x113fdb5cu);
    CHECK(fn(0, "", 0) == 0);
    CHECK(fn(fn(0, "1234", 4), "56789", 5) == 0xe3069283u);
    return 0;
}

static int test_crc32c_vectors(void)
{
    int rc = check_vectors(ps_crc32c_sw);
    if (rc)
        return rc;
    rc = check_vectors(ps_crc32c_hw);
    if (rc)
        return rc;
    return check_vectors(ps_crc32c);
}

static int test_crc32c_hw_matches_sw(void)
{
    size_t n = 3 * 4096 * 5 + 123;
    uint8_t *b = malloc(n + 16);
    CHECK(b);
    fill(b, n + 16);
    if (!ps_crc32c_hw_available())
        printf("# no SSE4.2: hw falls back to sw\n");
    /* every alignment and many lengths, across the 3-stream block boundary */
    for (size_t a = 0; a < 8; a++)
        for (size_t len = 0; len <= n; len += (len < 300 ? 1 : 997)) {
            uint32_t s = ps_crc32c_sw(0x12345678u, b + a, len), h = ps_crc32c_hw(0x12345678u, b + a, len);
            if (s != h) {
                free(b);
                return t_failf(__FILE__, __LINE__, "align %zu len %zu: sw %08x hw %08x", a, len, s, h);
            }
        }
    /* chaining a big buffer in pieces equals one call */
    uint32_t whole = ps_crc32c(0, b, n), part = ps_crc32c(ps_crc32c(0, b, 12289), b + 12289, n - 12289);
    free(b);
    CHECK(whole == part);
    return 0;
}

/* ---- round trips ---- */

struct sample_data {
    uint8_t *jpeg, *raw, *bytes;
    uint32_t jlen, rlen, blen;
    uint16_t h, w;
    int64_t label;
    double f;
};

static void make_sample(struct sample_data *d, struct ps_wsample *s, size_t maxlen, uint32_t nclasses)
{
    memset(s, 0, sizeof *s);
    d->jlen = (uint32_t)(rnd() % maxlen);
    d->h = (uint16_t)(1 + rnd() % 40);
    d->w = (uint16_t)(1 + rnd() % 40);
    d->rlen = (uint32_t)d->h * d->w * 3;
    d->blen = (uint32_t)(rnd() % 100);
    d->jpeg = malloc(d->jlen + 1);
    d->raw = malloc(d->rlen);
    d->bytes = malloc(d->blen + 1);
    fill(d->jpeg, d->jlen);
    fill(d->raw, d->rlen);
    fill(d->bytes, d->blen);
    d->label = nclasses ? (int64_t)(rnd() % nclasses) : (int64_t)rnd();
    d->f = (double)(int64_t)rnd() / 1e9;
    s->data[0] = d->jpeg; s->len[0] = d->jlen; s->h[0] = d->h; s->w[0] = d->w;
    s->data[1] = d->raw; s->len[1] = d->rlen; s->h[1] = d->h; s->w[1] = d->w;
    s->ival[2] = d->label;
    s->fval[3] = d->f;
    s->data[4] = d->bytes; s->len[4] = d->blen;
}

static void free_samples(struct sample_data *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(d[i].jpeg);
        free(d[i].raw);
        free(d[i].bytes);
    }
    free(d);
}

/* Every sample's bytes, read back through the tables, equal what was written. */
static int compare(const struct ps_dataset *ds, const struct built *b, const struct sample_data *d, size_t n)
{
    CHECKF(ds->nsamples == n, "nsamples %llu, wrote %zu", (unsigned long long)ds->nsamples, n);
    for (size_t i = 0; i < n; i++) {
        const struct ps_ds_sample *s = &ds->samples[i];
        const struct ps_ds_value *v = &ds->values[i * ds->nfields];
        const uint8_t *base = b->buf + s->off;
        CHECKF(s->len == d[i].jlen + d[i].rlen + d[i].blen, "sample %zu len %u", i, s->len);
        CHECK(v[0].len == d[i].jlen && v[0].h == d[i].h && v[0].w == d[i].w && v[0].kind == PS_F_JPEG);
        CHECK(memcmp(base + v[0].off, d[i].jpeg, d[i].jlen) == 0);
        CHECK(v[1].len == d[i].rlen && v[1].kind == PS_F_RAW);
        CHECK(memcmp(base + v[1].off, d[i].raw, d[i].rlen) == 0);
        CHECK(v[2].v.i == d[i].label && ps_ds_label(ds, i) == d[i].label);
        CHECK(v[3].v.f == d[i].f);
        CHECK(v[4].len == d[i].blen && memcmp(base + v[4].off, d[i].bytes, d[i].blen) == 0);
        CHECK(ps_ds_check_sample(ds, i, base) == 0);
        CHECK(s->page == (s->off - ds->data_off) / ds->page_size);
        if (s->span > 1)
            CHECK((s->off - ds->data_off) % ds->page_size == 0);
    }
    for (uint64_t p = 0; p < ds->npages; p++)
        CHECKF(ps_ds_check_page(ds, p, b->buf + ps_ds_page_offset(ds, p)) == 0, "page %llu", (unsigned long long)p);
    /* the page index lists each sample exactly once, in the page holding its first byte */
    CHECK(ds->page_first[ds->npages] == ds->nsamples);
    for (uint64_t p = 0; p < ds->npages; p++)
        for (uint64_t k = ds->page_first[p]; k < ds->page_first[p + 1]; k++)
            CHECK(ds->samples[ds->page_samples[k]].page == p);
    return 0;
}

static const char *ALL = "jpeg:image,raw:pixels,int:label,float:weight,bytes:meta";

static int roundtrip(size_t n, size_t maxlen, uint32_t nclasses, int *spanned)
{
    struct ps_writer_opts o;
    struct sample_data *d = calloc(n ? n : 1, sizeof *d);
    struct ps_wsample *s = calloc(n ? n : 1, sizeof *s);
    struct ps_dataset *ds = NULL;
    struct built b;
    char err[PS_ERRLEN] = "";
    const char *names[] = { "cat", "dog", "emu", "fox", "gnu" };
    int rc;

    opts_fields(&o, ALL);
    o.nclasses = nclasses;
    o.classes = names;
    o.seed = 42;
    o.flags = PS_PGS_FLAG_SHUFFLED;
    for (size_t i = 0; i < n; i++)
        make_sample(&d[i], &s[i], maxlen, nclasses);
    rc = build(&o, s, n, &b, err);
    if (rc) {
        free_samples(d, n);
        free(s);
        return t_failf(__FILE__, __LINE__, "build: %s", err);
    }
    rc = ps_ds_parse(b.buf, b.size, "t.pgs", &ds, err);
    if (rc) {
        free_samples(d, n);
        free(s);
        free(b.buf);
        return t_failf(__FILE__, __LINE__, "parse: %s", err);
    }
    rc = compare(ds, &b, d, n);
    if (!rc && (ds->nclasses != nclasses || ds->label_field != 2 || ds->image_field != 0 || ds->pack_seed != 42 ||
                ds->flags != PS_PGS_FLAG_SHUFFLED || ds->page_size != PAGE || ds->nfields != 5 ||
                strcmp(ds->fields[3].name, "weight") || ds->fields[3].type != PS_F_FLOAT || b.size % 4096))
        rc = t_failf(__FILE__, __LINE__, "header/footer values differ");
    for (uint32_t c = 0; !rc && c < nclasses; c++)
        if (strcmp(ds->classes[c], names[c]))
            rc = t_failf(__FILE__, __LINE__, "class %u: %s", c, ds->classes[c]);
    if (spanned)
        *spanned = (int)ds->max_span;
    ps_ds_close(ds);
    free(b.buf);
    free_samples(d, n);
    free(s);
    return rc;
}

static int test_roundtrip_all_types(void)
{
    return roundtrip(300, 5000, 0, NULL);
}

static int test_roundtrip_classes(void)
{
    return roundtrip(50, 3000, 5, NULL);
}

static int test_roundtrip_spanning(void)
{
    int span = 0, rc = roundtrip(40, 3 * PAGE, 3, &span);
    if (rc)
        return rc;
    CHECKF(span >= 3, "max span %d", span);
    return 0;
}

static int test_empty_dataset(void)
{
    struct ps_writer_opts o;
    struct ps_dataset *ds = NULL;
    struct built b;
    char err[PS_ERRLEN];

    opts_fields(&o, "jpeg:image,int:label");
    CHECKF(build(&o, NULL, 0, &b, err) == 0, "%s", err);
    CHECK(b.size == 8192);
    CHECKF(ps_ds_parse(b.buf, b.size, "e.pgs", &ds, err) == 0, "%s", err);
    CHECK(ds->nsamples == 0 && ds->npages == 0 && ds->page_first[0] == 0);
    ps_ds_close(ds);
    free(b.buf);
    return 0;
}

static int test_one_sample(void)
{
    return roundtrip(1, 1000, 0, NULL);
}

static int test_exact_page_sizes(void)
{
    /* samples of exactly one page, and exactly two pages: boundaries of the placement rules */
    struct ps_writer_opts o;
    struct ps_wsample s[5];
    struct ps_dataset *ds = NULL;
    struct built b;
    char err[PS_ERRLEN];
    uint8_t *big = malloc(2 * PAGE);
    uint32_t lens[5] = { PAGE, 2 * PAGE, 1, PAGE - 1, 0 };

    CHECK(big);
    fill(big, 2 * PAGE);
    opts_fields(&o, "bytes:data");
    memset(s, 0, sizeof s);
    for (int i = 0; i < 5; i++) {
        s[i].data[0] = big;
        s[i].len[0] = lens[i];
    }
    if (build(&o, s, 5, &b, err)) {
        free(big);
        return t_failf(__FILE__, __LINE__, "%s", err);
    }
    free(big);
    CHECKF(ps_ds_parse(b.buf, b.size, "x.pgs", &ds, err) == 0, "%s", err);
    /* page 0: sample 0 (full); pages 1-2: sample 1; page 3: samples 2 and 3 (full);
     * page 4: the empty sample 4 (a full page takes none) */
    CHECKF(ds->npages == 5, "%llu pages", (unsigned long long)ds->npages);
    CHECK(ds->samples[0].page == 0 && ds->samples[0].span == 1);
    CHECK(ds->samples[1].page == 1 && ds->samples[1].span == 2);
    CHECK(ds->samples[2].page == 3 && ds->samples[3].page == 3);
    CHECK(ds->pages[3].used == PAGE);
    CHECK(ds->samples[4].page == 4 && ds->samples[4].len == 0 && ds->pages[4].used == 0);
    for (int i = 0; i < 5; i++)
        CHECK(ps_ds_check_sample(ds, i, b.buf + ds->samples[i].off) == 0);
    ps_ds_close(ds);
    free(b.buf);
    return 0;
}

static int test_int_only(void)
{
    /* zero-length samples (no variable field) still belong to a page */
    struct ps_writer_opts o;
    struct ps_wsample s[3];
    struct ps_dataset *ds = NULL;
    struct built b;
    char err[PS_ERRLEN];

    opts_fields(&o, "int:label,float:x");
    memset(s, 0, sizeof s);
    for (int i = 0; i < 3; i++) {
        s[i].ival[0] = i * 7;
        s[i].fval[1] = i / 3.0;
    }
    CHECKF(build(&o, s, 3, &b, err) == 0, "%s", err);
    CHECKF(ps_ds_parse(b.buf, b.size, "i.pgs", &ds, err) == 0, "%s", err);
    CHECK(ds->npages == 1 && ds->nsamples == 3 && ds->image_field == -1 && ds->label_field == 0);
    CHECK(ps_ds_label(ds, 2) == 14 && ds->values[2 * 2 + 1].v.f == 2 / 3.0);
    ps_ds_close(ds);
    free(b.buf);
    return 0;
}

static int test_writer_rejects(void)
{
    struct ps_writer_opts o;
    struct ps_out *out = NULL;
    struct ps_writer *w = NULL;
    struct ps_wsample s;
    char err[PS_ERRLEN];
    uint8_t px[12] = { 0 };
    const char *names[] = { "a", "b" };

    opts_fields(&o, "raw:img,int:label");
    o.page_size = 4096 * 3; /* too small */
    CHECK(ps_out_open(tmp_path("rej.pgs"), NULL, &out, err) == 0);
    CHECK(ps_writer_open(out, &o, &w, err) == PS_ECONFIG);
    o.page_size = PAGE;
    o.nclasses = 2;
    o.classes = names;
    CHECK(ps_writer_open(out, &o, &w, err) == 0);
    memset(&s, 0, sizeof s);
    s.data[0] = px;
    s.len[0] = 12;
    s.h[0] = 2;
    s.w[0] = 3; /* 2x3x3 = 18 != 12 */
    CHECK(ps_writer_add(w, &s, err) < 0 && strstr(err, "RGB"));
    s.w[0] = 2;
    s.ival[1] = 2; /* outside 2 classes */
    CHECK(ps_writer_add(w, &s, err) < 0 && strstr(err, "label"));
    s.ival[1] = 1;
    CHECK(ps_writer_add(w, &s, err) == 0);
    CHECK(ps_writer_samples(w) == 1);
    ps_writer_free(w);
    ps_out_close(out); /* aborted: nothing left */
    CHECK(access(tmp_path("rej.pgs"), F_OK) != 0);
    return 0;
}

/* ---- corruption ---- */

/* A small dataset with several pages and a spanning sample, for mutation. */
static int base_file(struct built *b)
{
    struct ps_writer_opts o;
    struct sample_data *d = calloc(30, sizeof *d);
    struct ps_wsample *s = calloc(30, sizeof *s);
    const char *names[] = { "a", "b", "c" };
    char err[PS_ERRLEN];
    int rc;

    opts_fields(&o, ALL);
    o.nclasses = 3;
    o.classes = names;
    for (int i = 0; i < 30; i++)
        make_sample(&d[i], &s[i], i == 7 ? 2 * PAGE : 20000, 3);
    rc = build(&o, s, 30, b, err);
    free_samples(d, 30);
    free(s);
    if (rc)
        return t_failf(__FILE__, __LINE__, "build: %s", err);
    return 0;
}

static int expect(const uint8_t *buf, size_t size, int code, const char *needle)
{
    struct ps_dataset *ds = NULL;
    char err[PS_ERRLEN] = "";
    int rc = ps_ds_parse(buf, size, "bad.pgs", &ds, err);
    ps_ds_close(ds);
    if (rc != code)
        return t_failf(__FILE__, __LINE__, "code %d (%s), expected %d", rc, err, code);
    if (rc && (strncmp(err, "bad.pgs: ", 9) != 0 || (needle && !strstr(err, needle))))
        return t_failf(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", err, needle ? needle : "bad.pgs: ");
    return 0;
}

static int test_truncated(void)
{
    struct built b;
    int rc = base_file(&b);
    if (rc)
        return rc;
    /* every 4 KiB boundary, and odd cut points near the end */
    for (size_t cut = 0; cut < b.size && !rc; cut += (cut + 4096 < b.size ? 4096 : 1)) {
        struct ps_dataset *ds = NULL;
        char err[PS_ERRLEN];
        int r = ps_ds_parse(b.buf, cut, "bad.pgs", &ds, err);
        ps_ds_close(ds);
        if (r != PS_EFORMAT)
            rc = t_failf(__FILE__, __LINE__, "cut at %zu of %zu: %d (%s)", cut, b.size, r, r ? err : "accepted");
    }
    for (size_t cut = 1; cut < 300 && !rc; cut++) {
        struct ps_dataset *ds = NULL;
        char err[PS_ERRLEN];
        int r = ps_ds_parse(b.buf, b.size - cut, "bad.pgs", &ds, err);
        ps_ds_close(ds);
        if (r >= 0)
            rc = t_failf(__FILE__, __LINE__, "cut %zu bytes from the end: accepted", cut);
    }
    free(b.buf);
    return rc;
}

static int test_bad_magic_and_version(void)
{
    struct built b;
    int rc = base_file(&b);
    if (rc)
        return rc;
    b.buf[0] = 'X';
    rc = expect(b.buf, b.size, PS_EFORMAT, "magic");
    b.buf[0] = 'P';
    if (!rc) {
        wr32(b.buf + 8, 2);
        rc = expect(b.buf, b.size, PS_EVERSION, "version 2");
        wr32(b.buf + 8, 1);
    }
    if (!rc) {
        b.buf[100] ^= 1; /* header checksum */
        rc = expect(b.buf, b.size, PS_ECHECKSUM, "header checksum");
        b.buf[100] ^= 1;
    }
    if (!rc) {
        uint8_t *ft = b.buf + b.size - 64;
        ft[0] = 'X';
        rc = expect(b.buf, b.size, PS_EFORMAT, "footer");
        ft[0] = 'P';
    }
    if (!rc)
        rc = expect(b.buf, b.size, 0, NULL);
    free(b.buf);
    return rc;
}

/* Edit the footer or a table, fix the checksums, expect a structural error. */
static int mutate(const struct built *b, size_t at, int width, uint64_t value, int code, const char *needle)
{
    uint8_t *c = malloc(b->size);
    int rc;
    memcpy(c, b->buf, b->size);
    if (width == 8)
        wr64(c + at, value);
    else if (width == 4)
        wr32(c + at, (uint32_t)value);
    else
        c[at] = (uint8_t)value;
    fix_crcs(c, b->size);
    rc = expect(c, b->size, code, needle);
    free(c);
    if (rc)
        printf("# mutation at %zu (width %d, value %llu)\n", at, width, (unsigned long long)value);
    return rc;
}

static int test_lying_offsets_and_counts(void)
{
    struct built b;
    int rc = base_file(&b);
    if (rc)
        return rc;
    const uint8_t *ft = b.buf + b.size - 64;
    const size_t F = b.size - 64;
    uint64_t nsamples = rd64(ft + 16), npages = rd64(ft + 24), off_s = rd64(ft + 32), off_p = rd64(ft + 40);
    const size_t row = 16 + 8 * 5;
    const size_t s3 = off_s + 3 * row, p2 = off_p + 2 * 16;
    uint64_t s3_off = rd64(b.buf + s3);
    uint32_t s3_len = rd32(b.buf + s3 + 8);

    /* the untouched checksum fix-up must not change anything */
    rc = mutate(&b, F + 16, 8, nsamples, 0, NULL);
    /* footer counts and offsets */
    if (!rc) rc = mutate(&b, F + 16, 8, nsamples + 1, PS_EFORMAT, "page index at");
    if (!rc) rc = mutate(&b, F + 16, 8, (uint64_t)1 << 40, PS_EFORMAT, "samples");
    if (!rc) rc = mutate(&b, F + 24, 8, npages + 1, PS_EFORMAT, NULL);
    if (!rc) rc = mutate(&b, F + 24, 8, (uint64_t)-1, PS_EFORMAT, "pages");
    if (!rc) rc = mutate(&b, F + 32, 8, off_s + 4096, PS_EFORMAT, "sample table at");
    if (!rc) rc = mutate(&b, F + 40, 8, (uint64_t)1 << 50, PS_EFORMAT, "page index at");
    if (!rc) rc = mutate(&b, F + 48, 8, b.size + 100, PS_EFORMAT, "class table at");
    /* a sample's offset outside the file, outside its page, overlapping the one before */
    if (!rc) rc = mutate(&b, s3, 8, b.size + 4096, PS_EFORMAT, "sample 3: offset");
    if (!rc) rc = mutate(&b, s3, 8, 17, PS_EFORMAT, "sample 3: offset 17 outside the pages");
    if (!rc) rc = mutate(&b, s3, 8, s3_off - 1, PS_EFORMAT, "sample 3");
    if (!rc) rc = mutate(&b, s3 + 8, 4, s3_len + 1, PS_EFORMAT, "sample 3");
    if (!rc) rc = mutate(&b, s3 + 8, 4, 0xffffffffu, PS_EFORMAT, "sample 3");
    /* field lengths that do not add up; an image without size; a raw size that lies */
    if (!rc) rc = mutate(&b, s3 + 16, 4, 0, PS_EFORMAT, "sample 3: field lengths sum");
    if (!rc) rc = mutate(&b, s3 + 16 + 4, 4, 0, PS_EFORMAT, "image of");
    if (!rc) rc = mutate(&b, s3 + 16 + 8 + 4, 1, 1, PS_EFORMAT, "sample 3");
    /* a label outside the class table */
    if (!rc) rc = mutate(&b, s3 + 16 + 16, 8, 3, PS_EFORMAT, "label 3 outside the 3 classes");
    /* page index: first_sample, nsamples, used */
    if (!rc) rc = mutate(&b, p2, 4, rd32(b.buf + p2) + 1, PS_EFORMAT, "page 2: first sample");
    if (!rc) rc = mutate(&b, p2 + 4, 4, rd32(b.buf + p2 + 4) + 1, PS_EFORMAT, "page");
    if (!rc) rc = mutate(&b, p2 + 4, 4, 0xffffffffu, PS_EFORMAT, "page 2");
    if (!rc) rc = mutate(&b, p2 + 8, 4, 10, PS_EFORMAT, NULL);
    if (!rc) rc = mutate(&b, p2 + 8, 4, PAGE + 1, PS_EFORMAT, "more than the page size");
    /* class table: count and a name length that run past it */
    if (!rc) rc = mutate(&b, off_p + npages * 16, 4, 1000000, PS_EFORMAT, "class");
    if (!rc) rc = mutate(&b, off_p + npages * 16 + 4, 1, 200, PS_EFORMAT, "class 0");
    if (!rc) rc = mutate(&b, off_p + npages * 16 + 4, 1, 0, PS_EFORMAT, "class 0");
    /* header: page size, field count, field type */
    if (!rc) rc = mutate(&b, 12, 4, 4096, PS_EFORMAT, "page size");
    if (!rc) rc = mutate(&b, 12, 4, PAGE * 2, PS_EFORMAT, NULL);
    if (!rc) rc = mutate(&b, 16, 4, 17, PS_EFORMAT, "fields");
    if (!rc) rc = mutate(&b, 16, 4, 0, PS_EFORMAT, "fields");
    if (!rc) rc = mutate(&b, 40, 1, 9, PS_EFORMAT, "unknown type");
    if (!rc) rc = mutate(&b, 24, 8, 8192, PS_EFORMAT, "data offset");
    free(b.buf);
    return rc;
}

static int test_flipped_byte_in_page(void)
{
    struct built b;
    struct ps_dataset *ds = NULL;
    char err[PS_ERRLEN];
    int rc = base_file(&b);
    if (rc)
        return rc;
    CHECKF(ps_ds_parse(b.buf, b.size, "f.pgs", &ds, err) == 0, "%s", err);
    for (uint64_t p = 0; p < ds->npages; p++) {
        size_t at = ps_ds_page_offset(ds, p) + (rnd() % ds->page_size);
        b.buf[at] ^= 0x20;
        for (uint64_t q = 0; q < ds->npages; q++) {
            int r = ps_ds_check_page(ds, q, b.buf + ps_ds_page_offset(ds, q));
            if (r != (q == p ? PS_ECHECKSUM : 0)) {
                rc = t_failf(__FILE__, __LINE__, "flip in page %llu: page %llu says %d", (unsigned long long)p,
                             (unsigned long long)q, r);
                break;
            }
        }
        /* the sample holding the byte (if any) fails its own checksum too */
        for (uint64_t i = 0; i < ds->nsamples && !rc; i++) {
            const struct ps_ds_sample *s = &ds->samples[i];
            int inside = at >= s->off && at < s->off + s->len;
            if ((ps_ds_check_sample(ds, i, b.buf + s->off) == PS_ECHECKSUM) != inside)
                rc = t_failf(__FILE__, __LINE__, "flip at %zu: sample %llu check wrong", at, (unsigned long long)i);
        }
        b.buf[at] ^= 0x20;
        if (rc)
            break;
    }
    /* page data is not read by the metadata parse: a flip there still parses */
    ps_ds_close(ds);
    free(b.buf);
    return rc;
}

static int test_flipped_byte_in_tables(void)
{
    struct built b;
    int rc = base_file(&b);
    if (rc)
        return rc;
    const uint8_t *ft = b.buf + b.size - 64;
    uint64_t off_s = rd64(ft + 32);
    for (size_t at = off_s; at < b.size - 64 && !rc; at += 1 + rnd() % 61) {
        b.buf[at] ^= 0x01;
        rc = expect(b.buf, b.size, PS_ECHECKSUM, "table checksum");
        b.buf[at] ^= 0x01;
    }
    for (size_t at = b.size - 64; at < b.size && !rc; at++) {
        b.buf[at] ^= 0x80;
        struct ps_dataset *ds = NULL;
        char err[PS_ERRLEN];
        int r = ps_ds_parse(b.buf, b.size, "bad.pgs", &ds, err);
        ps_ds_close(ds);
        if (r >= 0)
            rc = t_failf(__FILE__, __LINE__, "flip in footer byte %zu accepted", at - (b.size - 64));
        b.buf[at] ^= 0x80;
    }
    free(b.buf);
    return rc;
}

static int test_random_mutations_never_crash(void)
{
    /* random edits with checksums fixed: either a clean error or a dataset whose every sample lies
     * inside its pages (ASan builds catch any read out of bounds) */
    struct built b;
    int rc = base_file(&b);
    if (rc)
        return rc;
    uint8_t *c = malloc(b.size);
    const uint8_t *ft = b.buf + b.size - 64;
    uint64_t off_s = rd64(ft + 32);
    for (int iter = 0; iter < 3000 && !rc; iter++) {
        struct ps_dataset *ds = NULL;
        char err[PS_ERRLEN];
        memcpy(c, b.buf, b.size);
        for (int k = 0; k < 1 + iter % 4; k++) {
            size_t region = rnd() % 3, at;
            if (region == 0)
                at = rnd() % 600;
            else if (region == 1)
                at = off_s + rnd() % (b.size - off_s);
            else
                at = b.size - 64 + rnd() % 64;
            c[at] = (uint8_t)(rnd() % 3 ? c[at] ^ (1u << (rnd() % 8)) : rnd());
        }
        fix_crcs(c, b.size);
        if (ps_ds_parse(c, b.size, "m.pgs", &ds, err) == 0) {
            for (uint64_t i = 0; i < ds->nsamples; i++) {
                const struct ps_ds_sample *s = &ds->samples[i];
                if (s->off + s->len > ps_ds_page_offset(ds, s->page + s->span) || s->page + s->span > ds->npages) {
                    rc = t_failf(__FILE__, __LINE__, "iteration %d: sample %llu outside its pages", iter,
                                 (unsigned long long)i);
                    break;
                }
            }
        }
        ps_ds_close(ds);
    }
    free(c);
    free(b.buf);
    return rc;
}

static int test_open_through_io(void)
{
    /* the same file through ps_io (local backend): ps_ds_open reads header, footer, tables */
    struct built b;
    struct ps_io *io = NULL;
    struct ps_dataset *ds = NULL, *ref = NULL;
    char err[PS_ERRLEN];
    int rc = base_file(&b);
    if (rc)
        return rc;
    rc = ps_io_open(b.path, NULL, &io, err);
    if (rc == -ENOSYS) {
        free(b.buf);
        SKIP("local io backend not built yet: %s", err);
    }
    CHECKF(rc == 0, "%s", err);
    rc = ps_ds_open(io, b.path, &ds, err);
    ps_io_close(io);
    CHECKF(rc == 0, "%s", err);
    CHECK(ps_ds_parse(b.buf, b.size, "r", &ref, err) == 0);
    CHECK(ds->nsamples == ref->nsamples && ds->npages == ref->npages && ds->nclasses == 3);
    CHECK(memcmp(ds->samples, ref->samples, ds->nsamples * sizeof *ds->samples) == 0);
    CHECK(memcmp(ds->values, ref->values, ds->nsamples * ds->nfields * sizeof *ds->values) == 0);
    ps_ds_close(ds);
    ps_ds_close(ref);
    free(b.buf);
    return 0;
}

static int test_ftype_names(void)
{
    for (int t = PS_F_JPEG; t <= PS_F_NDARRAY; t++)
        CHECK(ps_ftype_parse(ps_ftype_name(t)) == t);
    CHECK(ps_ftype_parse("JPEG") == PS_F_JPEG);
    CHECK(ps_ftype_parse("nope") < 0);
    CHECK(strcmp(ps_ftype_name(99), "unknown") == 0);
    return 0;
}

static int test_cleanup(void)
{
    /* not a behaviour: removes the temp folder of the tests above */
    if (tmp_ready) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        CHECK(system(cmd) == 0);
    }
    return 0;
}

T_MAIN(T(test_crc32c_vectors), T(test_crc32c_hw_matches_sw), T(test_roundtrip_all_types), T(test_roundtrip_classes),
       T(test_roundtrip_spanning), T(test_empty_dataset), T(test_one_sample), T(test_exact_page_sizes),
       T(test_int_only), T(test_writer_rejects), T(test_truncated), T(test_bad_magic_and_version),
       T(test_lying_offsets_and_counts), T(test_flipped_byte_in_page), T(test_flipped_byte_in_tables),
       T(test_random_mutations_never_crash), T(test_open_through_io), T(test_ftype_names), T(test_cleanup))
