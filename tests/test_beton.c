/*
 * test_beton.c - the FFCV .beton reader: the FFCV-written fixtures checked sample by sample against
 * their manifests (payload sha256, values, fully decoded JPEG pixels), truncated and corrupted copies,
 * and small hand-made files for the field types the fixtures lack.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "format/format_int.h"
#include "tests/test.h"
/* the fuzz target's input expansion and invariant checks, to replay its seeds here */
#include "tests/fuzz_beton.c"

#define MiB (1u << 20)

/* ---------------- SHA-256 (FIPS 180-4), for payload and pixel digests ---------------- */

struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t n;
};

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha_block(struct sha256 *s, const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++)
        w[i] = w[i - 16] + (ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3) + w[i - 7] +
               (ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10);
    a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3]; e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
    s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha_init(struct sha256 *s)
{
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, iv, sizeof iv);
    s->n = 0;
}

static void sha_update(struct sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        size_t have = s->n % 64, take = 64 - have < len ? 64 - have : len;
        memcpy(s->buf + have, p, take);
        s->n += take;
        p += take;
        len -= take;
        if (s->n % 64 == 0)
            sha_block(s, s->buf);
    }
}

/* hex: 65 bytes */
static void sha_final(struct sha256 *s, char *hex)
{
    uint64_t bits = s->n * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    sha_update(s, &pad, 1);
    while (s->n % 64 != 56)
        sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha_update(s, len, 8);
    for (int i = 0; i < 8; i++)
        snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

static void sha_hex(const void *data, size_t len, char *hex)
{
    struct sha256 s;
    sha_init(&s);
    sha_update(&s, data, len);
    sha_final(&s, hex);
}

static int test_sha256(void)
{
    char hex[65];
    sha_hex("", 0, hex);
    CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    sha_hex("abc", 3, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
    CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    return 0;
}

/* ---------------- fixtures ---------------- */

static char fix_dir[PATH_MAX];

/* ../shared/fixtures/ffcv beside the repository (CI clones ../shared next to it), found from the
 * working directory or from this program's path (BUILD/tests/test_beton); $PS_FFCV_FIXTURES wins. */
static const char *fixtures(void)
{
    char exe[PATH_MAX], cand[PATH_MAX + 64], probe[PATH_MAX + 96];
    const char *env = getenv("PS_FFCV_FIXTURES");
    ssize_t n;

    if (fix_dir[0])
        return fix_dir;
    if (env && *env) {
        snprintf(fix_dir, sizeof fix_dir, "%s", env);
        return fix_dir;
    }
    if (access("../shared/fixtures/ffcv/ffcv_jpg_int.beton", R_OK) == 0) {
        snprintf(fix_dir, sizeof fix_dir, "../shared/fixtures/ffcv");
        return fix_dir;
    }
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 3; up++) {
            char *sl = strrchr(exe, '/');
            if (sl)
                *sl = 0;
        }
        snprintf(cand, sizeof cand, "%s/../shared/fixtures/ffcv", exe);
        snprintf(probe, sizeof probe, "%s/ffcv_jpg_int.beton", cand);
        if (strlen(cand) < sizeof fix_dir && access(probe, R_OK) == 0) {
            memcpy(fix_dir, cand, strlen(cand) + 1);
            return fix_dir;
        }
    }
    return NULL;
}

#define NEED_FIXTURES() do { if (!fixtures()) \
    SKIP("../shared/fixtures/ffcv is absent (it lives beside the repository; set PS_FFCV_FIXTURES)"); } while (0)

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)n;
    }
    fclose(f);
    return buf;
}

static uint8_t *load_fixture(const char *file, size_t *size)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", fixtures(), file);
    return slurp(path, size);
}

/* ---------------- manifest CSV (header row, then one row per sample; quoted cells may hold commas) */

#define MAXCOL 16
struct csv {
    char *text;
    int ncol, nrow;
    char *head[MAXCOL];
    char **cell; /* nrow * ncol */
};

static int split_row(char **p, char **out, int max)
{
    int n = 0;
    char *s = *p;
    if (!*s)
        return 0;
    for (;;) {
        char *start, *w;
        if (*s == '"') {
            start = w = ++s;
            while (*s && *s != '"')
                *w++ = *s++;
            if (*s == '"')
                s++;
            *w = 0;
        } else {
            start = s;
            while (*s && *s != ',' && *s != '\n' && *s != '\r')
                s++;
        }
        if (n < max)
            out[n] = start;
        n++;
        if (*s == ',') {
            *s++ = 0;
            continue;
        }
        if (*s == '\r')
            *s++ = 0;
        if (*s == '\n')
            *s++ = 0;
        else if (*s)
            *s++ = 0;
        break;
    }
    *p = s;
    return n;
}

static void csv_free(struct csv *c)
{
    free(c->text);
    free(c->cell);
    memset(c, 0, sizeof *c);
}

static int csv_load(const char *file, struct csv *c)
{
    size_t size;
    char *p;
    memset(c, 0, sizeof *c);
    c->text = (char *)load_fixture(file, &size);
    if (!c->text)
        return -1;
    c->text[size] = 0;
    p = c->text;
    c->ncol = split_row(&p, c->head, MAXCOL);
    if (c->ncol <= 0 || c->ncol > MAXCOL)
        return -1;
    c->cell = calloc(1024 * (size_t)c->ncol, sizeof *c->cell);
    while (*p && c->nrow < 1024) {
        if (split_row(&p, c->cell + (size_t)c->nrow * c->ncol, c->ncol) != c->ncol)
            return -1;
        c->nrow++;
    }
    return 0;
}

static const char *csv_get(const struct csv *c, int row, const char *col)
{
    for (int j = 0; j < c->ncol; j++)
        if (strcmp(c->head[j], col) == 0)
            return c->cell[(size_t)row * c->ncol + j];
    return NULL;
}

static unsigned long long csv_u(const struct csv *c, int row, const char *col)
{
    const char *s = csv_get(c, row, col);
    return s ? strtoull(s, NULL, 10) : ~0ull;
}

static int field_index(const struct ps_dataset *ds, const char *name)
{
    for (uint32_t j = 0; j < ds->nfields; j++)
        if (strcmp(ds->fields[j].name, name) == 0)
            return (int)j;
    return -1;
}

/* Every sample of a fixture against its manifest. *digests counts payload sha256 matches. */
static int check_against_manifest(const struct ps_dataset *ds, const uint8_t *file, size_t size,
                                  const char *csvname, int *digests)
{
    struct csv c;
    int img, lab, score, blob;

    CHECKF(csv_load(csvname, &c) == 0, "cannot parse %s", csvname);
    CHECKF((uint64_t)c.nrow == ds->nsamples, "%d manifest rows, %llu samples", c.nrow,
           (unsigned long long)ds->nsamples);
    img = field_index(ds, "image");
    lab = field_index(ds, "label");
    score = field_index(ds, "score");
    blob = field_index(ds, "blob");
    CHECK(img >= 0 && lab >= 0);
    CHECK(ds->image_field == img && ds->label_field == lab);
    CHECK(ds->fields[img].type == PS_F_IMAGE && ds->fields[lab].type == PS_F_INT);
    for (int i = 0; i < c.nrow; i++) {
        const struct ps_ds_sample *s = &ds->samples[i];
        const struct ps_ds_value *v = &ds->values[(size_t)i * ds->nfields];
        char hex[65];
        uint64_t ptr;

        CHECKF(csv_u(&c, i, "index") == (unsigned long long)i, "row %d is not sample %d", i, i);
        /* sample extent: one page, holding every payload */
        CHECKF(s->span == 1 && s->page == s->off / PAGE && (s->off + s->len - 1) / PAGE == s->page,
               "sample %d: off %llu len %u page %u", i, (unsigned long long)s->off, s->len, s->page);
        CHECK(s->off + s->len <= size);
        /* image */
        CHECKF(v[img].kind == (csv_u(&c, i, "image.mode") == 0 ? PS_F_JPEG : PS_F_RAW), "sample %d kind", i);
        CHECKF(v[img].w == csv_u(&c, i, "image.width") && v[img].h == csv_u(&c, i, "image.height"),
               "sample %d: %ux%u", i, v[img].w, v[img].h);
        ptr = s->off + v[img].off;
        CHECKF(ptr == csv_u(&c, i, "image.ptr"), "sample %d image ptr %llu", i, (unsigned long long)ptr);
        CHECKF(v[img].len == csv_u(&c, i, "image.size"), "sample %d image size %u", i, v[img].len);
        sha_hex(file + ptr, v[img].len, hex);
        CHECKF(strcmp(hex, csv_get(&c, i, "image.sha256")) == 0, "sample %d image sha256 %s", i, hex);
        (*digests)++;
        /* label */
        CHECKF(v[lab].v.i == strtoll(csv_get(&c, i, "label"), NULL, 10), "sample %d label %lld", i,
               (long long)v[lab].v.i);
        CHECK(ps_ds_label(ds, (uint64_t)i) == v[lab].v.i);
        if (score >= 0) {
            double want = strtod(csv_get(&c, i, "score"), NULL);
            CHECK(ds->fields[score].type == PS_F_FLOAT);
            CHECKF(v[score].v.f == want, "sample %d score %.17g != %.17g", i, v[score].v.f, want);
        }
        if (blob >= 0) {
            CHECK(ds->fields[blob].type == PS_F_BYTES && v[blob].kind == PS_F_BYTES);
            ptr = s->off + v[blob].off;
            CHECKF(ptr == csv_u(&c, i, "blob.ptr") && v[blob].len == csv_u(&c, i, "blob.size"),
                   "sample %d blob at %llu, %u bytes", i, (unsigned long long)ptr, v[blob].len);
            sha_hex(file + ptr, v[blob].len, hex);
            CHECKF(strcmp(hex, csv_get(&c, i, "blob.sha256")) == 0, "sample %d blob sha256", i);
            (*digests)++;
        }
    }
    csv_free(&c);
    return 0;
}

/* The dataset-level model of a fixture. */
static int check_model(const struct ps_dataset *ds, size_t size, uint32_t nfields, uint64_t npages)
{
    uint64_t sum = 0, n = 0;
    CHECK(ds->format == PS_DS_BETON && ds->version == 2);
    CHECK(ds->file_size == size && ds->page_size == PAGE && ds->data_off == 0);
    CHECK(ds->nfields == nfields && ds->nsamples == 300);
    CHECKF(ds->npages == npages, "npages %llu", (unsigned long long)ds->npages);
    CHECK(!ds->has_page_crc && !ds->has_sample_crc);
    CHECK(ds->npages * ds->page_size <= size);
    for (uint64_t p = 0; p < ds->npages; p++) {
        CHECK(ds->pages[p].used <= ds->page_size);
        for (uint64_t k = ds->page_first[p]; k < ds->page_first[p + 1]; k++) {
            const struct ps_ds_sample *s = &ds->samples[ds->page_samples[k]];
            CHECK(s->page == p && s->off + s->len <= p * PAGE + ds->pages[p].used);
            n++;
        }
    }
    CHECK(n == ds->nsamples);
    for (uint64_t i = 0; i < ds->nsamples; i++)
        sum += ds->samples[i].len;
    CHECK(ds->payload_bytes == sum && ds->max_span == 1);
    return 0;
}

/* The same file through ps_io (pread/io_uring), optionally O_DIRECT, must give the same model. */
static int same_model(const struct ps_dataset *a, const struct ps_dataset *b)
{
    CHECK(a->nsamples == b->nsamples && a->nfields == b->nfields && a->npages == b->npages);
    CHECK(a->label_field == b->label_field && a->image_field == b->image_field);
    CHECK(memcmp(a->fields, b->fields, sizeof a->fields) == 0);
    CHECK(memcmp(a->samples, b->samples, a->nsamples * sizeof *a->samples) == 0);
    CHECK(memcmp(a->values, b->values, a->nsamples * a->nfields * sizeof *a->values) == 0);
    CHECK(memcmp(a->pages, b->pages, a->npages * sizeof *a->pages) == 0);
    return 0;
}

static int open_via_io(const char *file, int direct, struct ps_dataset **ds, char *err)
{
    char path[PATH_MAX + 128];
    struct ps_io_opts o;
    struct ps_io *io;
    int rc;
    snprintf(path, sizeof path, "%s/%s", fixtures(), file);
    ps_io_opts_init(&o);
    o.direct = direct;
    o.fault = "";
    rc = ps_io_open(path, &o, &io, err);
    if (rc)
        return rc;
    rc = ps_ds_open(io, ps_io_name(io), ds, err);
    ps_io_close(io);
    return rc;
}

static int fixture_test(const char *beton, const char *csvname, uint32_t nfields, uint64_t npages, int ndig)
{
    char err[PS_ERRLEN];
    struct ps_dataset *ds = NULL, *ds2 = NULL, *ds3 = NULL;
    size_t size;
    uint8_t *file;
    int digests = 0, rc;

    NEED_FIXTURES();
    file = load_fixture(beton, &size);
    CHECKF(file, "cannot read %s/%s", fixtures(), beton);
    CHECK(ps_beton_is(file, 4096, size));
    rc = ps_beton_parse(file, size, beton, &ds, err);
    CHECKF(rc == 0, "%s", err);
    if (check_model(ds, size, nfields, npages) || check_against_manifest(ds, file, size, csvname, &digests))
        return 1;
    CHECKF(digests == ndig, "%d payload digests matched, want %d", digests, ndig);
    printf("# %s: %llu samples, %d payload sha256 matched, pages %llu\n", beton, (unsigned long long)ds->nsamples,
           digests, (unsigned long long)ds->npages);

    /* format detection by ps_ds_parse, and reading through ps_io gives the same model */
    rc = ps_ds_parse(file, size, beton, &ds2, err);
    CHECKF(rc == 0 && ds2->format == PS_DS_BETON, "ps_ds_parse: %s", err);
    if (same_model(ds, ds2))
        return 1;
    rc = open_via_io(beton, 0, &ds3, err);
    CHECKF(rc == 0, "ps_ds_open: %s", err);
    if (same_model(ds, ds3))
        return 1;
    ps_ds_close(ds3);
    ds3 = NULL;
    rc = open_via_io(beton, 1, &ds3, err);
    if (rc == -EINVAL && strstr(err, "O_DIRECT"))
        printf("# O_DIRECT not supported here (%s): that part not run\n", err);
    else {
        CHECKF(rc == 0, "ps_ds_open O_DIRECT: %s", err);
        if (same_model(ds, ds3))
            return 1;
    }
    ps_ds_close(ds);
    ps_ds_close(ds2);
    ps_ds_close(ds3);
    free(file);
    return 0;
}

static int test_fixture_jpg(void)
{
    return fixture_test("ffcv_jpg_int.beton", "ffcv_jpg_int.manifest.csv", 2, 4, 300);
}

static int test_fixture_raw(void)
{
    return fixture_test("ffcv_raw_int_float_bytes.beton", "ffcv_raw_int_float_bytes.manifest.csv", 4, 3, 600);
}

/* ---------------- full JPEG decode against FFCV's own decode (tjDecompress2, TJFLAG_FASTDCT) ------ */

struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
};

static void jerr_exit(j_common_ptr c)
{
    longjmp(((struct jerr *)c->err)->jb, 1);
}

/* Decode to packed RGB like tjDecompress2(TJPF_RGB): full size, fancy upsampling left on; the
 * TJFLAG_FASTDCT flag is dct_method = JDCT_FASTEST (= JDCT_IFAST in libjpeg-turbo). */
static int decode_sha(const uint8_t *jpg, size_t len, J_DCT_METHOD dct, char *hex, unsigned *w, unsigned *h)
{
    struct jpeg_decompress_struct ci;
    struct jerr je;
    uint8_t *volatile pix = NULL;
    volatile int ok = 0;

    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jerr_exit;
    jpeg_create_decompress(&ci);
    if (setjmp(je.jb) == 0) {
        jpeg_mem_src(&ci, (unsigned char *)jpg, (unsigned long)len);
        jpeg_read_header(&ci, TRUE);
        ci.out_color_space = JCS_RGB;
        ci.dct_method = dct;
        jpeg_start_decompress(&ci);
        *w = ci.output_width;
        *h = ci.output_height;
        pix = malloc((size_t)ci.output_width * ci.output_height * 3);
        if (pix && ci.output_components == 3) {
            while (ci.output_scanline < ci.output_height) {
                JSAMPROW row = pix + (size_t)ci.output_scanline * ci.output_width * 3;
                jpeg_read_scanlines(&ci, &row, 1);
            }
            jpeg_finish_decompress(&ci);
            sha_hex(pix, (size_t)ci.output_width * ci.output_height * 3, hex);
            ok = 1;
        }
    }
    jpeg_destroy_decompress(&ci);
    free(pix);
    return ok;
}

/* the decoded-pixel digests are in the JSON manifest only: pick them out of each sample object */
static int json_digest(const char *json, int index, const char *key, char *hex)
{
    char pat[64];
    const char *p, *next, *k;
    snprintf(pat, sizeof pat, "\"index\": %d,", index);
    p = strstr(json, pat);
    if (!p)
        return -1;
    next = strstr(p + strlen(pat), "\"index\":");
    k = strstr(p, key);
    if (!k || (next && k > next))
        return -1;
    k = strchr(k + strlen(key), ':');
    if (!k || !(k = strchr(k, '"')) || strlen(k + 1) < 65 || k[65] != '"')
        return -1;
    memcpy(hex, k + 1, 64);
    hex[64] = 0;
    return 0;
}

static int test_jpeg_pixels(void)
{
    char err[PS_ERRLEN], want[65], hex[65];
    struct ps_dataset *ds = NULL;
    size_t size, jsize;
    uint8_t *file;
    char *json;
    int fast = 0, slow = 0, img;

    NEED_FIXTURES();
    file = load_fixture("ffcv_jpg_int.beton", &size);
    json = (char *)load_fixture("ffcv_jpg_int.manifest.json", &jsize);
    CHECK(file && json);
    json[jsize] = 0;
    CHECKF(ps_beton_parse(file, size, "ffcv_jpg_int.beton", &ds, err) == 0, "%s", err);
    img = ds->image_field;
    for (uint64_t i = 0; i < ds->nsamples; i++) {
        const struct ps_ds_value *v = &ds->values[i * ds->nfields + (uint32_t)img];
        const uint8_t *jpg = file + ds->samples[i].off + v->off;
        unsigned w = 0, h = 0;

        CHECK(v->kind == PS_F_JPEG);
        CHECKF(decode_sha(jpg, v->len, JDCT_IFAST, hex, &w, &h), "sample %llu does not decode",
               (unsigned long long)i);
        CHECKF(w == v->w && h == v->h, "sample %llu: decoded %ux%u, metadata %ux%u", (unsigned long long)i, w, h,
               v->w, v->h);
        CHECKF(json_digest(json, (int)i, "\"image.decoded_sha256_tj_fastdct\"", want) == 0,
               "no fastdct digest for sample %llu in the manifest", (unsigned long long)i);
        CHECKF(strcmp(hex, want) == 0, "sample %llu: fastdct pixels %s, FFCV decoded %s", (unsigned long long)i,
               hex, want);
        fast++;
        CHECK(decode_sha(jpg, v->len, JDCT_ISLOW, hex, &w, &h));
        CHECKF(json_digest(json, (int)i, "\"image.decoded_sha256_pil_islow\"", want) == 0,
               "no islow digest for sample %llu", (unsigned long long)i);
        CHECKF(strcmp(hex, want) == 0, "sample %llu: islow pixels %s, Pillow decoded %s", (unsigned long long)i,
               hex, want);
        slow++;
    }
    CHECK(fast == 300 && slow == 300);
    printf("# decoded pixels: %d/300 match FFCV's fastdct digest, %d/300 Pillow's islow digest\n", fast, slow);
    ps_ds_close(ds);
    free(file);
    free(json);
    return 0;
}

/* ---------------- truncated and corrupted copies ---------------- */

static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Parse an exact-size copy (so ASan sees any read past the end); expect rc and every pattern in
 * the message (patterns separated by '|'), and the file name at its start. */
static int expect_err(const uint8_t *buf, size_t len, int want_rc, const char *pats, const char *what)
{
    char err[PS_ERRLEN], pat[256];
    struct ps_dataset *ds = (struct ps_dataset *)1;
    uint8_t *copy = malloc(len ? len : 1);
    const char *p = pats;
    int rc;

    memcpy(copy, buf, len);
    err[0] = 0;
    rc = ps_beton_parse(copy, len, "bad.beton", &ds, err);
    free(copy);
    CHECKF(rc == want_rc, "%s: rc %d (%s), want %d; message: %s", what, rc, ps_strerror(rc), want_rc, err);
    CHECKF(ds == NULL, "%s: *out not cleared", what);
    CHECKF(strncmp(err, "bad.beton: ", 11) == 0, "%s: message does not name the file: %s", what, err);
    while (*p) {
        size_t n = strcspn(p, "|");
        snprintf(pat, sizeof pat, "%.*s", (int)n, p);
        CHECKF(strstr(err, pat), "%s: message lacks \"%s\": %s", what, pat, err);
        p += n + (p[n] == '|');
    }
    return 0;
}

#define EXPECT(buf, len, rc, pats, what) do { if (expect_err(buf, len, rc, pats, what)) return 1; } while (0)

static int test_truncated(void)
{
    size_t size;
    uint8_t *f;
    uint64_t table;
    NEED_FIXTURES();
    f = load_fixture("ffcv_jpg_int.beton", &size);
    CHECK(f);
    table = rd64(f + 16);
    EXPECT(f, 0, PS_EFORMAT, "too short|truncated", "empty file");
    EXPECT(f, 10, PS_EFORMAT, "too short for the 24-byte .beton header|truncated", "cut in the header");
    EXPECT(f, 24, PS_EFORMAT, "field descriptors|past the end|truncated", "cut after the header");
    EXPECT(f, 24 + 1041 + 500, PS_EFORMAT, "field descriptors|truncated", "cut in the field table");
    EXPECT(f, 2106 + 24 * 150 + 5, PS_EFORMAT, "metadata for 300 samples|truncated", "cut in the metadata");
    EXPECT(f, 3 * MiB, PS_EFORMAT, "allocation table pointer 8388608 is past the end|truncated", "cut in the data");
    EXPECT(f, table, PS_EFORMAT, "allocation table holds 0 records|need 300|truncated", "cut at the table");
    EXPECT(f, table + 100, PS_EFORMAT, "not a whole number of 24-byte records|truncated", "cut in the table");
    EXPECT(f, table + 24 * 7, PS_EFORMAT, "holds 7 records|truncated", "cut between records");
    EXPECT(f, size - 1, PS_EFORMAT, "24-byte records|truncated", "last byte cut");
    free(f);
    return 0;
}

/* The same cuts through ps_io (a file on disk) get the same messages; a whole file costs the
 * dataset opener's 4 KiB head, one 64 KiB prefix (header, fields, small metadata) and the table. */
static int test_open_via_io(void)
{
    static const struct { uint64_t cut; const char *pat; } cuts[] = {
        { 10, "too small" }, { 24 + 1041 + 500, "field descriptors" }, { 2106 + 24 * 150 + 5, "metadata for 300" },
        { 3 * MiB, "allocation table pointer 8388608 is past the end" }, { 8388608 + 100, "24-byte records" },
    };
    char tmpl[] = "/tmp/test_beton_XXXXXX", err[PS_ERRLEN];
    struct ps_io_stats st;
    struct ps_io *io;
    struct ps_dataset *ds = NULL;
    size_t size;
    uint8_t *f;
    int fd;

    NEED_FIXTURES();
    f = load_fixture("ffcv_jpg_int.beton", &size);
    CHECK(f);
    fd = mkstemp(tmpl);
    CHECK(fd >= 0);
    for (size_t c = 0; c <= sizeof cuts / sizeof cuts[0]; c++) {
        uint64_t n = c < sizeof cuts / sizeof cuts[0] ? cuts[c].cut : size;
        int rc;
        CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, f, n, 0) == (ssize_t)n);
        CHECKF(ps_io_open(tmpl, NULL, &io, err) == 0, "%s", err);
        rc = ps_ds_open(io, "cut.beton", &ds, err);
        ps_io_stats(io, &st);
        ps_io_close(io);
        if (n == size) {
            CHECKF(rc == 0, "%s", err);
            CHECK(ds->nsamples == 300 && ds->npages == 4);
            CHECKF(st.requests >= 2 && st.requests <= 3, "%llu requests to open",
                   (unsigned long long)st.requests);
            ps_ds_close(ds);
        } else {
            CHECKF(rc == PS_EFORMAT && !ds, "cut at %llu: rc %d: %s", (unsigned long long)n, rc, err);
            CHECKF(strstr(err, "cut.beton: ") == err && strstr(err, cuts[c].pat), "cut at %llu: %s",
                   (unsigned long long)n, err);
        }
    }
    close(fd);
    unlink(tmpl);
    free(f);
    return 0;
}

/* The raw fixture: [image RGB @0, label Int @16, score Float @24, blob Bytes @32], 48-byte rows,
 * metadata at 4188, table at 6291456 with records (sample, ptr, size) sorted by sample then ptr. */
#define RAW_META 4188u
#define RAW_ROW 48u

static int test_corrupted(void)
{
    size_t size;
    uint8_t *orig, *f;
    uint64_t table;

    NEED_FIXTURES();
    orig = load_fixture("ffcv_raw_int_float_bytes.beton", &size);
    CHECK(orig);
    f = malloc(size);
    table = rd64(orig + 16);
    CHECK(table == 6291456 && rd64(orig + table) == 0 && rd64(orig + table + 8) == 2097152);
#define FRESH() memcpy(f, orig, size)
#define REC(k) (f + table + 24 * (uint64_t)(k))
#define ROW(i) (f + RAW_META + RAW_ROW * (uint64_t)(i))

    FRESH(); wr64(f + 16, 0);
    EXPECT(f, size, PS_EFORMAT, "allocation table pointer is 0: the writer did not finish", "table ptr 0");
    FRESH(); wr16(f, 3);
    EXPECT(f, size, PS_EVERSION, "version 3|understands version 2", "version 3");
    FRESH(); wr16(f, 1);
    EXPECT(f, size, PS_EVERSION, "version 1", "version 1");
    FRESH(); wr16(f + 2, 0);
    EXPECT(f, size, PS_EFORMAT, "0 fields", "num_fields 0");
    FRESH(); wr16(f + 2, 17);
    EXPECT(f, size, PS_EUNSUP, "17 fields", "num_fields 17");
    FRESH(); wr16(f + 2, 255);
    EXPECT(f, size, PS_EUNSUP, "255 fields", "num_fields 255");
    FRESH(); wr32(f + 4, 3 * MiB);
    EXPECT(f, size, PS_EFORMAT, "page size 3145728 is not a power of two >= 2 MiB", "page size 3 MiB");
    FRESH(); wr32(f + 4, MiB);
    EXPECT(f, size, PS_EFORMAT, "page size 1048576", "page size 1 MiB");
    FRESH(); wr64(f + 8, 1ull << 40);
    EXPECT(f, size, PS_EFORMAT, "metadata for 1099511627776 samples|corrupt sample count", "num_samples 2^40");
    FRESH(); wr64(f + 8, UINT64_MAX);
    EXPECT(f, size, PS_EFORMAT, "corrupt sample count", "num_samples 2^64-1");
    FRESH(); wr64(f + 8, 299);
    EXPECT(f, size, PS_EFORMAT, "holds 600 records|299 samples x 2 variable-length fields need 598",
           "num_samples 299");
    FRESH(); wr64(f + 16, size + 24);
    EXPECT(f, size, PS_EFORMAT, "is past the end of the file", "table ptr past the end");
    FRESH(); wr64(f + 16, 1000);
    EXPECT(f, size, PS_EFORMAT, "inside the header/metadata", "table ptr in the metadata");
    FRESH(); wr64(f + 16, table - 24);
    EXPECT(f, size, PS_EFORMAT, "holds 601 records", "table ptr one record early");
    /* field descriptors */
    FRESH(); f[24 + 3 * 1041] = 6;
    EXPECT(f, size, PS_EUNSUP, "field 'blob'|TorchTensor", "TorchTensor field");
    FRESH(); f[24 + 3 * 1041] = 255;
    EXPECT(f, size, PS_EUNSUP, "field 'blob'|custom field (type id 255)", "custom field");
    FRESH(); f[24 + 3 * 1041] = 9;
    EXPECT(f, size, PS_EUNSUP, "field 'blob'|unknown type id 9", "unknown type id");
    /* metadata */
    FRESH(); wr64(ROW(5) + 5, size + 100);
    EXPECT(f, size, PS_EFORMAT, "sample 5 field 'image'|past the end of the file", "metadata ptr past the end");
    FRESH(); wr64(ROW(6) + 32, size - 10);
    EXPECT(f, size, PS_EFORMAT, "sample 6 field 'blob'|past the end of the file", "bytes ptr + size past the end");
    FRESH(); ROW(7)[0] = 2;
    EXPECT(f, size, PS_EFORMAT, "sample 7 field 'image'|image mode 2", "image mode 2");
    FRESH(); wr16(ROW(8) + 1, (uint16_t)(rd64(ROW(8) + 1) & 0xffff) + 1);
    EXPECT(f, size, PS_EFORMAT, "sample 8 field 'image'|raw image|needs", "raw size != h*w*3");
    FRESH(); wr16(ROW(9) + 3, 0);
    EXPECT(f, size, PS_EFORMAT, "sample 9 field 'image'|image of", "height 0");
    FRESH(); wr64(ROW(10) + 40, rd64(ROW(10) + 40) + 1);
    EXPECT(f, size, PS_EFORMAT, "sample 10 field 'blob'|in the metadata", "bytes size mismatch");
    FRESH(); wr64(ROW(11) + 5, rd64(ROW(11) + 5) + 1);
    EXPECT(f, size, PS_EFORMAT, "sample 11 field 'image'|missing allocation", "image ptr with no record");
    /* allocation table: records 2i (image) and 2i+1 (blob) of sample i */
    FRESH(); wr64(REC(20) + 8, size - 10);
    EXPECT(f, size, PS_EFORMAT, "allocation record 20|past the end of the file", "record ptr past the end");
    FRESH(); wr64(REC(21) + 16, 2 * PAGE - rd64(REC(21) + 8) + 100);
    EXPECT(f, size, PS_EFORMAT, "allocation record 21|cross the page boundary at 4194304", "size crossing a page");
    FRESH(); wr64(REC(22) + 16, PAGE + 1);
    EXPECT(f, size, PS_EFORMAT, "allocation record 22|larger than a page", "size beyond a page");
    FRESH(); wr64(REC(23) + 8, 4000);
    EXPECT(f, size, PS_EFORMAT, "allocation record 23|header/metadata", "record in the metadata");
    FRESH(); wr64(REC(24), 300);
    EXPECT(f, size, PS_EFORMAT, "allocation record 24|sample id 300 out of range", "sample id out of range");
    FRESH(); wr64(REC(2 * 4 + 1), 3); /* sample 4's blob record claims sample 3 */
    EXPECT(f, size, PS_EFORMAT, "sample 3 has 3 allocation records|duplicated allocation", "duplicated");
    FRESH(); wr64(REC(2 * 3 + 1), 4); /* sample 3's blob record claims sample 4 */
    EXPECT(f, size, PS_EFORMAT, "sample 3 field 'blob'|missing allocation", "missing");
    FRESH(); memcpy(REC(2 * 5 + 1), REC(2 * 5), 24); /* the same record twice, the blob's gone */
    EXPECT(f, size, PS_EFORMAT, "sample 5 field 'blob'|missing allocation", "record twice");
    /* a sample whose payloads lie in two pages (blob moved to page 2, metadata and record agree) */
    FRESH(); wr64(ROW(0) + 32, 2 * PAGE); wr64(REC(1) + 8, 2 * PAGE);
    EXPECT(f, size, PS_EFORMAT, "sample 0: its payloads lie in pages 1 and 2", "sample spanning pages");
    free(f);
    free(orig);
    return 0;
}

/* FFCV writes the table unsorted with several processes: any record order gives the same model. */
static int test_unsorted_table(void)
{
    char err[PS_ERRLEN];
    struct ps_dataset *a = NULL, *b = NULL;
    size_t size;
    uint8_t *f;
    uint64_t table, n;

    NEED_FIXTURES();
    f = load_fixture("ffcv_raw_int_float_bytes.beton", &size);
    CHECK(f);
    CHECKF(ps_beton_parse(f, size, "raw", &a, err) == 0, "%s", err);
    table = rd64(f + 16);
    n = (size - table) / 24;
    /* reverse, then a fixed pseudo-random shuffle */
    for (uint64_t i = 0; i < n / 2; i++) {
        uint8_t t[24];
        memcpy(t, f + table + 24 * i, 24);
        memcpy(f + table + 24 * i, f + table + 24 * (n - 1 - i), 24);
        memcpy(f + table + 24 * (n - 1 - i), t, 24);
    }
    CHECKF(ps_beton_parse(f, size, "raw", &b, err) == 0, "reversed: %s", err);
    if (same_model(a, b))
        return 1;
    ps_ds_close(b);
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint8_t t[24];
        uint64_t j;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        j = x % (i + 1);
        memcpy(t, f + table + 24 * i, 24);
        memcpy(f + table + 24 * i, f + table + 24 * j, 24);
        memcpy(f + table + 24 * j, t, 24);
    }
    CHECKF(ps_beton_parse(f, size, "raw", &b, err) == 0, "shuffled: %s", err);
    if (same_model(a, b))
        return 1;
    ps_ds_close(a);
    ps_ds_close(b);
    free(f);
    return 0;
}

/* ---------------- hand-made files, for the field types the fixtures lack ---------------- */

struct hm_field {
    uint8_t type;
    const char *name;  /* up to 16 characters */
    const char *dtype; /* NDArray: dtype.descr JSON */
    uint64_t shape[4];
};

/* One sample: for each field, an int/float value or a payload (mode/w/h for images). */
struct hm_value {
    int64_t i;
    double f;
    const void *data;
    uint64_t len;
    uint8_t mode;
    uint16_t w, h;
};

/* Lay out a .beton as FFCV would: header, descriptors, rows, data from page 1 (a sample's payloads
 * packed together, a new page when they do not fit), the table after the last page. */
static uint8_t *hm_build(const struct hm_field *fl, uint32_t nf, const struct hm_value *vals, uint32_t ns,
                         size_t *size, uint32_t *rowp, uint32_t *offs)
{
    uint32_t off = 0, maxal = 1, row;
    uint64_t meta, data, page, used = 0, nrec = 0, total;
    uint8_t *f;

    for (uint32_t j = 0; j < nf; j++) {
        uint32_t sz = 8, al = 8;
        if (fl[j].type == 2) { sz = 13; al = 1; }
        if (fl[j].type == 3 || fl[j].type == 5) { sz = 16; al = 1; }
        off = (off + al - 1) / al * al;
        offs[j] = off;
        off += sz;
        if (al > maxal)
            maxal = al;
    }
    row = (off + maxal - 1) / maxal * maxal;
    *rowp = row;
    meta = 24 + 1041ull * nf;
    data = (meta + (uint64_t)ns * row + PAGE - 1) / PAGE * PAGE;
    f = calloc(1, data + 4 * PAGE + 24ull * ns * nf);
    page = data;
    wr16(f, 2);
    wr16(f + 2, (uint16_t)nf);
    wr32(f + 4, PAGE);
    wr64(f + 8, ns);
    for (uint32_t j = 0; j < nf; j++) {
        uint8_t *d = f + 24 + 1041ull * j;
        d[0] = fl[j].type;
        memcpy(d + 1, fl[j].name, strlen(fl[j].name) < 16 ? strlen(fl[j].name) : 16);
        if (fl[j].type == 4) {
            for (int k = 0; k < 4; k++)
                wr64(d + 17 + 8 * k, fl[j].shape[k]);
            wr64(d + 17 + 256, strlen(fl[j].dtype));
            memcpy(d + 17 + 264, fl[j].dtype, strlen(fl[j].dtype));
        }
    }
    for (uint32_t i = 0; i < ns; i++) {
        uint64_t need = 0;
        uint8_t *r = f + meta + (uint64_t)i * row;
        for (uint32_t j = 0; j < nf; j++)
            need += fl[j].type >= 2 ? vals[i * nf + j].len : 0;
        if (used + need > PAGE) {
            page += PAGE;
            used = 0;
        }
        for (uint32_t j = 0; j < nf; j++) {
            const struct hm_value *v = &vals[i * nf + j];
            uint8_t *e = r + offs[j];
            uint64_t ptr = page + used;
            if (fl[j].type == 0) { memcpy(e, &v->f, 8); continue; }
            if (fl[j].type == 1) { wr64(e, (uint64_t)v->i); continue; }
            if (v->len)
                memcpy(f + ptr, v->data, v->len);
            used += v->len;
            if (fl[j].type == 2) {
                e[0] = v->mode;
                wr16(e + 1, v->w);
                wr16(e + 3, v->h);
                wr64(e + 5, ptr);
            } else if (fl[j].type == 4) {
                wr64(e, ptr);
            } else {
                wr64(e, ptr);
                wr64(e + 8, v->len);
            }
        }
    }
    total = page + PAGE;
    wr64(f + 16, total);
    for (uint32_t i = 0; i < ns; i++)
        for (uint32_t j = 0; j < nf; j++) {
            const uint8_t *e = f + meta + (uint64_t)i * row + offs[j];
            if (fl[j].type < 2)
                continue;
            wr64(f + total + 24 * nrec, i);
            wr64(f + total + 24 * nrec + 8, rd64(e + (fl[j].type == 2 ? 5 : 0)));
            wr64(f + total + 24 * nrec + 16, vals[i * nf + j].len);
            nrec++;
        }
    *size = total + 24 * nrec;
    return f;
}

static int test_handmade_layout(void)
{
    /* [Int, RGB, Bytes]: rows of 40 bytes, entries at 0/8/21 (21: unaligned, read with memcpy) */
    static const struct hm_field fl[3] = { { 1, "idx", 0, { 0 } }, { 2, "img", 0, { 0 } },
                                           { 3, "abcdefghijklmnop", 0, { 0 } } };
    uint8_t rawpix[2 * 3 * 3], bytes[5] = { 1, 2, 3, 4, 5 }, jpg[4] = { 0xff, 0xd8, 0xff, 0xd9 };
    struct hm_value v[3 * 3];
    char err[PS_ERRLEN];
    struct ps_dataset *ds = NULL;
    uint32_t row, offs[3];
    size_t size;
    uint8_t *f;

    for (size_t k = 0; k < sizeof rawpix; k++)
        rawpix[k] = (uint8_t)k;
    memset(v, 0, sizeof v);
    for (int i = 0; i < 3; i++) {
        v[i * 3].i = -7 + i;
        v[i * 3 + 1] = (struct hm_value){ .data = i == 1 ? (const void *)jpg : rawpix,
                                          .len = i == 1 ? sizeof jpg : sizeof rawpix,
                                          .mode = i == 1 ? 0 : 1, .w = 3, .h = 2 };
        v[i * 3 + 2] = (struct hm_value){ .data = bytes, .len = i == 2 ? 0 : sizeof bytes };
    }
    f = hm_build(fl, 3, v, 3, &size, &row, offs);
    CHECK(row == 40 && offs[0] == 0 && offs[1] == 8 && offs[2] == 21);
    CHECKF(ps_beton_parse(f, size, "hm", &ds, err) == 0, "%s", err);
    CHECK(ds->nfields == 3 && ds->nsamples == 3 && ds->npages == 2);
    CHECK(strcmp(ds->fields[2].name, "abcdefghijklmnop") == 0); /* 16 characters, no NUL in the file */
    CHECK(ds->label_field == 0 && ds->image_field == 1);         /* no "label": the first Int */
    CHECK(ds->fields[1].type == PS_F_IMAGE && ds->fields[2].type == PS_F_BYTES);
    for (uint64_t i = 0; i < 3; i++) {
        const struct ps_ds_value *x = &ds->values[i * 3];
        const struct ps_ds_sample *s = &ds->samples[i];
        CHECK(x[0].v.i == -7 + (int64_t)i && x[0].kind == PS_F_INT);
        CHECK(x[1].kind == (i == 1 ? PS_F_JPEG : PS_F_RAW) && x[1].w == 3 && x[1].h == 2);
        CHECK(memcmp(f + s->off + x[1].off, i == 1 ? jpg : rawpix, x[1].len) == 0);
        CHECK(x[2].len == (i == 2 ? 0 : 5));
        if (x[2].len)
            CHECK(memcmp(f + s->off + x[2].off, bytes, 5) == 0);
        CHECK(s->page == 1 && s->span == 1);
    }
    CHECK(ds->samples[0].len == 18 + 5 && ds->samples[2].len == 18);
    CHECK(ds->pages[1].used == 18 + 5 + 4 + 5 + 18 && ds->pages[0].used == 0);
    ps_ds_close(ds);
    /* the table right after the payloads, inside the last data page: not how FFCV writes, and the
     * loader reads whole pages, so refused */
    {
        uint64_t table = rd64(f + 16), nrec = (size - table) / 24;
        uint8_t *g = malloc(PAGE + 50 + 24 * nrec);
        memcpy(g, f, PAGE + 50);
        memcpy(g + PAGE + 50, f + table, 24 * nrec);
        wr64(g + 16, PAGE + 50);
        EXPECT(g, PAGE + 50 + 24 * nrec, PS_EFORMAT, "data page 1 ends at 4194304, past the end of the file",
               "table inside the last data page");
        free(g);
    }
    free(f);
    return 0;
}

static int test_handmade_json_ndarray(void)
{
    static const struct hm_field fl[5] = {
        { 5, "meta", 0, { 0 } },
        { 4, "arr", "[[\"\", \"<f4\"]]", { 2, 3 } },
        { 0, "x", 0, { 0 } },
        { 1, "count", 0, { 0 } },
        { 1, "label", 0, { 0 } },
    };
    static const char js[] = "{\"a\": 1}";  /* sizeof includes the NUL FFCV appends */
    float arr[6] = { 1, 2, 3, 4, 5, 6 };
    struct hm_value v[4 * 5];
    char err[PS_ERRLEN];
    struct ps_dataset *ds = NULL;
    uint32_t row, offs[5];
    size_t size;
    uint8_t *f;

    memset(v, 0, sizeof v);
    for (int i = 0; i < 4; i++) {
        v[i * 5] = (struct hm_value){ .data = js, .len = sizeof js };
        v[i * 5 + 1] = (struct hm_value){ .data = arr, .len = sizeof arr };
        v[i * 5 + 2].f = 0.25 * i;
        v[i * 5 + 3].i = -1;
        v[i * 5 + 4].i = 100 + i;
    }
    f = hm_build(fl, 5, v, 4, &size, &row, offs);
    CHECK(row == 48 && offs[0] == 0 && offs[1] == 16 && offs[2] == 24 && offs[3] == 32 && offs[4] == 40);
    CHECKF(ps_beton_parse(f, size, "hm", &ds, err) == 0, "%s", err);
    CHECK(ds->fields[0].type == PS_F_JSON && ds->fields[1].type == PS_F_NDARRAY);
    CHECK(ds->image_field == 0 && ds->label_field == 4); /* the Int named "label", not the first Int */
    for (uint64_t i = 0; i < 4; i++) {
        const struct ps_ds_value *x = &ds->values[i * 5];
        CHECK(x[0].len == sizeof js && x[1].len == 24 && x[1].kind == PS_F_NDARRAY);
        CHECK(memcmp(f + ds->samples[i].off + x[1].off, arr, 24) == 0);
        CHECK(x[2].v.f == 0.25 * (double)i && x[3].v.i == -1 && x[4].v.i == 100 + (int64_t)i);
        CHECK(ps_ds_label(ds, i) == 100 + (int64_t)i);
    }
    ps_ds_close(ds);
    free(f);

    /* JSON without its NUL */
    v[2 * 5].len = sizeof js - 1;
    f = hm_build(fl, 5, v, 4, &size, &row, offs);
    EXPECT(f, size, PS_EFORMAT, "sample 2 field 'meta'|JSON value without its trailing NUL", "JSON without NUL");
    free(f);
    v[2 * 5].len = sizeof js;
    /* an array of the wrong size */
    v[3 * 5 + 1].len = 20;
    f = hm_build(fl, 5, v, 4, &size, &row, offs);
    EXPECT(f, size, PS_EFORMAT, "sample 3 field 'arr'|array of 20 bytes|make 24", "NDArray size");
    free(f);
    v[3 * 5 + 1].len = 24;
    /* a dtype that is not one plain numpy type */
    {
        struct hm_field fl2[5];
        memcpy(fl2, fl, sizeof fl2);
        fl2[1].dtype = "[[\"a\", \"<f4\"], [\"b\", \"<i4\"]]";
        f = hm_build(fl2, 5, v, 4, &size, &row, offs);
        EXPECT(f, size, PS_EUNSUP, "NDArray field 'arr'|not understood", "structured dtype");
        free(f);
        fl2[1].dtype = "[[\"\", \"<f8\"]]";
        f = hm_build(fl2, 5, v, 4, &size, &row, offs);
        EXPECT(f, size, PS_EFORMAT, "field 'arr'|make 48", "dtype f8 vs 24-byte arrays");
        free(f);
    }
    return 0;
}

static int test_handmade_unsupported(void)
{
    static const struct hm_field ints[2] = { { 1, "label", 0, { 0 } }, { 0, "x", 0, { 0 } } };
    struct hm_value v[2 * 2];
    uint32_t row, offs[2];
    size_t size;
    uint8_t *f;

    memset(v, 0, sizeof v);
    f = hm_build(ints, 2, v, 2, &size, &row, offs);
    EXPECT(f, size, PS_EUNSUP, "no image, bytes, JSON or NDArray field", "numbers only");
    free(f);
    return 0;
}

static int test_is(void)
{
    uint8_t h[24] = { 2, 0, 2, 0, 0, 0, 0x20, 0 };
    CHECK(ps_beton_is(h, sizeof h, 1 << 30));
    CHECK(ps_beton_is(h, 4, 4));
    CHECK(!ps_beton_is(h, 3, 3));
    CHECK(!ps_beton_is((const uint8_t *)"PGSTREAM\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24, 1 << 20));
    CHECK(!ps_beton_is((const uint8_t *)"\xff\xd8\xff\xe0\0\0\0\0", 8, 8)); /* a JPEG */
    CHECK(!ps_beton_is((const uint8_t *)"hello, world", 12, 12));
    h[0] = 0;
    CHECK(!ps_beton_is(h, sizeof h, 1 << 30)); /* version 0: zeros */
    h[0] = 3;
    CHECK(ps_beton_is(h, sizeof h, 1 << 30));   /* another version still reaches the reader's message */
    CHECK(!ps_beton_is(NULL, 0, 0));
    return 0;
}

/* The fuzz seeds: valid-* expand to whole files the reader accepts (so fuzzing starts deep in
 * it), head-* are refused; every one replays through the fuzz target without a finding. */
static int test_fuzz_seeds(void)
{
    char dir[PATH_MAX], exe[PATH_MAX], path[2 * PATH_MAX], err[PS_ERRLEN];
    int nvalid = 0, nhead = 0;
    struct dirent *e;
    DIR *d;
    ssize_t n;

    snprintf(dir, sizeof dir, "tests/corpus/beton");
    if (access(dir, R_OK) != 0 && (n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
        exe[n] = 0;
        for (int up = 0; up < 3; up++)
            if (strrchr(exe, '/'))
                *strrchr(exe, '/') = 0;
        snprintf(dir, sizeof dir, "%.*s/tests/corpus/beton", (int)(sizeof dir - 32), exe);
    }
    d = opendir(dir);
    CHECKF(d, "cannot open %s", dir);
    while ((e = readdir(d))) {
        struct ps_dataset *ds = NULL;
        size_t size, len = 0;
        uint8_t *in, *big;
        int rc;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        in = slurp(path, &size);
        CHECKF(in, "cannot read %s", path);
        CHECKF(size < 64 * 1024, "%s: %zu bytes, seeds stay under 64 KiB", path, size);
        big = expand(in, size, &len);
        if (strncmp(e->d_name, "valid-", 6) == 0) {
            CHECKF(big, "%s: not in the PSBZ form", path);
            rc = ps_beton_parse(big, len, e->d_name, &ds, err);
            CHECKF(rc == 0, "%s", err);
            check(ds, big, len);
            ps_ds_close(ds);
            nvalid++;
        } else {
            rc = ps_beton_parse(big ? big : in, big ? len : size, e->d_name, &ds, err);
            CHECKF(rc < 0 && !ds, "%s: accepted", path);
            nhead++;
        }
        LLVMFuzzerTestOneInput(in, size);
        free(big);
        free(in);
    }
    closedir(d);
    CHECKF(nvalid >= 4 && nhead >= 1, "%d valid and %d other seeds", nvalid, nhead);
    return 0;
}

T_MAIN(T(test_sha256), T(test_is), T(test_fixture_jpg), T(test_fixture_raw), T(test_jpeg_pixels),
       T(test_truncated), T(test_open_via_io), T(test_corrupted), T(test_unsorted_table), T(test_handmade_layout),
       T(test_handmade_json_ndarray), T(test_handmade_unsupported),
       T(test_fuzz_seeds))
